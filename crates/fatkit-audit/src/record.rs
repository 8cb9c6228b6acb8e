//! One input as its reader made it, the data the readers hand the verdict: an [`Input`] (its
//! report, declaration records, distributions and layers), its libraries ([`LibraryRef`]) and
//! what it compiles at run time ([`RunTime`]). The readers (`inputs`, `image`, `environment`,
//! `local`) make it and the verdict (`coverage`, `summary`, `answer`, ...) reads it; this module
//! imports neither (the tidy test `readers_and_the_verdict_meet_only_in_the_record` holds it).

use std::collections::BTreeMap;
use std::path::Path;

use fatkit_fatbin::declarations::Declarations;
use fatkit_fatbin::inspect::FileReport;
use fatkit_fatbin::Format;

/// One thing named on the command line (or one site-packages of `--python`), read.
#[derive(Debug)]
pub struct Input {
    /// As shown: the path given.
    pub label: String,
    pub report: FileReport,
    pub declarations: Declarations,
    /// The distribution of a wheel, from its file name.
    pub package: Option<String>,
    /// For a directory: the distribution of each file (relative path), from the
    /// `*.dist-info/RECORD` files in it; for a container image (path in it), also the
    /// Debian package.
    pub owners: BTreeMap<String, String>,
    /// For a container image: the layer each library came from, as shown
    /// (`layer 2 of 3 (sha256:0123456789ab)`).
    pub layers: BTreeMap<String, String>,
    /// For a lock: the distributions it would install with no wheel to read.
    pub unbuilt: Vec<Unbuilt>,
    /// For a lock: how it pins each distribution (`torch 2.13.0`).
    pub pinned: BTreeMap<String, Pinned>,
}

/// How a lock pins a distribution: the line (1-based) that does, where an annotation points,
/// and the SHA-256 of the wheel it names, what a bill of materials identifies it by.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pinned {
    pub line: Option<usize>,
    pub sha256: Option<String>,
}

/// A distribution a lock would install with no wheel for the target (built from source at
/// install, or none at all): what it will launch is not in the lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unbuilt {
    /// `flash-attn 2.8.3`.
    pub package: String,
    pub why: String,
    /// Built from source at install; else it cannot be installed on the target at all.
    pub built: bool,
}

/// A library of an input: its name as shown, its distribution, its report.
#[derive(Debug)]
pub struct LibraryRef<'a> {
    pub name: String,
    pub package: Option<String>,
    /// The layer of a container image it came from.
    pub layer: Option<String>,
    pub report: &'a FileReport,
}

impl Input {
    /// This input with every name it holds made printable (`fatkit_fatbin::printable`): the
    /// one escaper every input crosses on its way out of the readers (`crate::inputs::read`).
    pub(crate) fn escaped(mut self) -> Input {
        use fatkit_fatbin::inspect::escape_report;
        use fatkit_fatbin::printable::escape;
        escape(&mut self.label);
        self.package.iter_mut().for_each(escape);
        escape_report(&mut self.report);
        let escape_map = |map: BTreeMap<String, String>| -> BTreeMap<String, String> {
            map.into_iter()
                .map(|(mut k, mut v)| {
                    escape(&mut k);
                    escape(&mut v);
                    (k, v)
                })
                .collect()
        };
        self.owners = escape_map(std::mem::take(&mut self.owners));
        self.layers = escape_map(std::mem::take(&mut self.layers));
        self.pinned = std::mem::take(&mut self.pinned)
            .into_iter()
            .map(|(mut k, v)| {
                escape(&mut k);
                (k, v)
            })
            .collect();
        for u in &mut self.unbuilt {
            escape(&mut u.package);
            escape(&mut u.why);
        }
        self
    }

    /// The libraries: the members of a wheel or directory that hold device code, else the
    /// file itself.
    pub fn libraries(&self) -> Vec<LibraryRef<'_>> {
        // Refused (its budget spent), a wheel or a directory is one library: unknown.
        let whole = self.report.refused.is_some()
            || !matches!(
                self.report.format,
                Format::Zip | Format::Directory | Format::Image
            );
        if whole {
            if !self.report.has_device_code() && self.report.errors.is_empty() {
                return Vec::new();
            }
            return vec![LibraryRef {
                name: self.label.clone(),
                package: self.package.clone(),
                layer: None,
                report: &self.report,
            }];
        }
        let mut out = Vec::new();
        for m in &self.report.members {
            let name = member_name(&self.report.name, &m.name);
            let layer = self.layers.get(&name).cloned();
            // A wheel in a directory is its own distribution: its libraries, not the wheel.
            let holds_files = matches!(self.report.format, Format::Directory | Format::Image);
            if holds_files && m.format == Format::Zip {
                let package = wheel_package(Path::new(&name));
                out.extend(m.members.iter().map(|lib| LibraryRef {
                    name: member_name(&m.name, &lib.name),
                    package: package.clone(),
                    layer: layer.clone(),
                    report: lib,
                }));
                continue;
            }
            let package = self
                .owners
                .get(&name)
                .cloned()
                .or_else(|| self.package.clone());
            out.push(LibraryRef {
                name,
                package,
                layer,
                report: m,
            });
        }
        out
    }
}

impl Input {
    /// The compilers and NVRTC programs the input holds, each with the distribution owning it:
    /// of a wheel, its own; of a directory, by the RECORD owning each, and each wheel's in it.
    pub(crate) fn run_time(&self) -> RunTime<'_> {
        let owner = |name: &str| {
            self.owners
                .get(name)
                .cloned()
                .or_else(|| self.package.clone())
        };
        let mut out = RunTime {
            compilers: self
                .report
                .compilers
                .iter()
                .map(|c| (owner(&c.name), c))
                .collect(),
            sources: self
                .report
                .nvrtc_sources
                .iter()
                .map(|s| (owner(&s.name), s))
                .collect(),
        };
        for m in self
            .report
            .members
            .iter()
            .filter(|m| m.format == Format::Zip)
        {
            let name = member_name(&self.report.name, &m.name);
            let package = wheel_package(Path::new(&name)).or_else(|| self.package.clone());
            out.compilers
                .extend(m.compilers.iter().map(|c| (package.clone(), c)));
            out.sources
                .extend(m.nvrtc_sources.iter().map(|s| (package.clone(), s)));
        }
        out
    }

    /// The CUDA sources each distribution ships (`None`: files of no distribution): of a
    /// wheel, its own; of a directory, by the RECORD owning each, and each wheel's in it.
    pub fn sources(&self) -> BTreeMap<Option<String>, usize> {
        let mut out: BTreeMap<Option<String>, usize> = BTreeMap::new();
        for s in &self.report.sources {
            let owner = self.owners.get(s).cloned().or_else(|| self.package.clone());
            *out.entry(owner).or_default() += 1;
        }
        for m in self
            .report
            .members
            .iter()
            .filter(|m| m.format == Format::Zip)
        {
            if m.sources.is_empty() {
                continue;
            }
            let name = member_name(&self.report.name, &m.name);
            let package = wheel_package(Path::new(&name)).or_else(|| self.package.clone());
            *out.entry(package).or_default() += m.sources.len();
        }
        out
    }
}

/// What an input makes device code with at run time, each with the distribution owning it:
/// the compilers it carries, and its programs that compile CUDA C++ with NVRTC.
#[derive(Debug, Default)]
pub struct RunTime<'a> {
    pub compilers: Vec<(Option<String>, &'a fatkit_fatbin::compiler::Compiler)>,
    pub sources: Vec<(Option<String>, &'a fatkit_fatbin::nvrtc_source::NvrtcSource)>,
}

/// `x.whl(torch/lib/a.so)` -> `torch/lib/a.so`; `dir/nvidia/lib/b.so` -> `nvidia/lib/b.so`;
/// `image.tar (x:1):/usr/lib/c.so` -> `/usr/lib/c.so` (a path in a container).
pub(crate) fn member_name(parent: &str, member: &str) -> String {
    let rest = member.strip_prefix(parent).unwrap_or(member);
    if let Some(inner) = rest.strip_prefix('(').and_then(|r| r.strip_suffix(')')) {
        return inner.to_owned();
    }
    if let Some(in_container) = rest.strip_prefix(':') {
        return in_container.to_owned();
    }
    rest.trim_start_matches('/').to_owned()
}

/// `torch-2.7.0-cp312-...whl` -> `torch 2.7.0`.
pub(crate) fn wheel_package(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(".whl")?;
    let mut parts = stem.split('-');
    Some(format!("{} {}", parts.next()?, parts.next()?))
}

/// A distribution as the readers name it (`torch 2.7.0`, `nvidia_cudnn_cu13 9.28.1.4`): its
/// name, and its version (empty when none is known).
pub(crate) fn name_and_version(package: &str) -> (&str, &str) {
    package.split_once(' ').unwrap_or((package, ""))
}

/// The CUDA major a tag names: `cu12` -> 12, `cu130` -> 13 (two or three digits).
pub(crate) fn cuda_tag(tag: &str) -> Option<u8> {
    let digits = tag.strip_prefix("cu")?;
    if !(2..=3).contains(&digits.len()) || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.get(..2)?.parse::<u8>().ok()
}

/// A distribution name that ends in a CUDA major (`nvidia_cublas_cu12`, `nvidia-cudnn-cu13`):
/// the name without it, and the major.
pub(crate) fn cuda_suffix(name: &str) -> Option<(&str, u8)> {
    let at = name.rfind(['-', '_'])?;
    let major = cuda_tag(name.get(at + 1..)?)?;
    Some((name.get(..at)?, major))
}
