//! What each target adds to a package as it ships (issue 45), measured from modules already
//! built for the candidates (a `vendor` directory, or the output of `build-kernels`), for the
//! target planner (`fatkit_arch::plan`). Every image of every module is written again by
//! fatkit's own writer under each compression (what a build with that profile would write),
//! and the package is weighed as it ships, whole and without each target in turn: gzip at
//! cargo's level for a `.crate` (with the rest of the package), deflate at the wheel tools' for
//! a wheel, nothing for bare fatbins. What a target adds is the difference; images of one
//! kernel for several targets share bytes gzip finds, so a target weighed alone would be
//! overstated. The budget a build is held to after it builds (`check_budget`) is here too.

mod package;

use std::io::Write;
use std::path::{Path, PathBuf};

use fatkit_arch::plan::Candidate;
use fatkit_arch::profile::Compression;
use fatkit_arch::{ImageKind, Target};
use fatkit_fatbin::inspect::extract_all;
use fatkit_fatbin::write::{write, Input};
use fatkit_fatbin::{EntryKind, Limits};

use package::Listed;

pub use fatkit_arch::plan::{parse_size, Shipped};

/// Bytes as `shipped` of `data`.
pub fn shipped_size(shipped: Shipped, data: &[u8]) -> u64 {
    let level = match shipped {
        Shipped::Fatbin => return data.len() as u64,
        Shipped::Crate => flate2::Compression::best(),
        Shipped::Wheel => flate2::Compression::new(6),
    };
    let mut z = flate2::write::DeflateEncoder::new(Vec::new(), level);
    let _ = z.write_all(data);
    z.finish().map_or(data.len() as u64, |v| v.len() as u64)
}

/// What was measured: the candidates and the base (per compression: everything that ships
/// but what the targets add one by one).
#[derive(Clone, Debug)]
pub struct Measured {
    pub candidates: Vec<Candidate>,
    pub base: [u64; 3],
    /// The modules read.
    pub modules: usize,
}

/// Why a directory cannot be measured.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: no .fatbin in it; build the candidates first (cargo xtask build-kernels --profile full) and name their directory", .0.display())]
    NoModules(PathBuf),
    #[error("{}: {target}: cannot be written again: {reason}", path.display())]
    Rewrite {
        path: PathBuf,
        target: Target,
        reason: String,
    },
    #[error("{}: cannot write the profile: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

const ORDER: [Compression; 3] = [Compression::None, Compression::Lz4, Compression::Zstd];

/// Every module of a directory, its images rewritten once per compression.
struct Modules {
    /// Per module, per image in its order: the target and its entry under each compression
    /// (a one-image fatbin).
    modules: Vec<Vec<(Target, [Vec<u8>; 3])>>,
    isa: std::collections::BTreeMap<Target, fatkit_arch::toolkit::PtxIsa>,
    /// Per cubin target, the newest toolkit its notes name.
    toolkit: std::collections::BTreeMap<Target, fatkit_arch::toolkit::CudaVersion>,
    /// What ships beside the modules, as `shipped`.
    rest: u64,
}

impl Modules {
    fn read(dir: &Path, shipped: Shipped) -> Result<Modules, MeasureError> {
        let read_err = |path: &Path| {
            let path = path.to_owned();
            move |source| MeasureError::Read { path, source }
        };
        let files = files_of(dir).map_err(read_err(dir))?;
        let mut modules = Vec::new();
        let mut isa = std::collections::BTreeMap::new();
        let mut toolkit = std::collections::BTreeMap::new();
        let mut other = Vec::new();
        for path in &files {
            if !is_module(path) {
                other.push(path.clone());
                continue;
            }
            let data = fatkit_read::read_file(path).map_err(read_err(path))?;
            let mut images = Vec::new();
            for image in extract_all("plan", &data, &Limits::default()) {
                let (Some(target), Ok(bytes)) = (image.target, image.bytes) else {
                    continue;
                };
                if !matches!(image.kind, EntryKind::Cubin | EntryKind::Ptx) {
                    continue;
                }
                if target.kind == ImageKind::Ptx {
                    if let Some(v) = fatkit_fatbin::ptx::inspect(&bytes).version {
                        isa.insert(target, v);
                    }
                }
                let built_by = fatkit_fatbin::cubin::inspect(&bytes)
                    .ok()
                    .and_then(|c| c.toolkit?.parse::<fatkit_arch::toolkit::CudaVersion>().ok());
                if let (ImageKind::Cubin, Some(v)) = (target.kind, built_by) {
                    let newest = toolkit.entry(target).or_insert(v);
                    *newest = (*newest).max(v);
                }
                let mut written: [Vec<u8>; 3] = Default::default();
                for (slot, compression) in written.iter_mut().zip(ORDER) {
                    *slot = write(&[Input {
                        target,
                        data: &bytes,
                        identifier: None,
                        compression,
                    }])
                    .map_err(|e| MeasureError::Rewrite {
                        path: path.clone(),
                        target,
                        reason: e.reason,
                    })?;
                }
                images.push((target, written));
            }
            modules.push(images);
        }
        if modules.is_empty() {
            return Err(MeasureError::NoModules(dir.to_owned()));
        }
        let rest = rest_of(dir, shipped, &other)?;
        Ok(Modules {
            modules,
            isa,
            toolkit,
            rest,
        })
    }

    /// The package as shipped holding `keep`'s images compressed as `ORDER[c]`: each module
    /// one file of its kept entries, weighed as the package ships.
    fn weigh(&self, shipped: Shipped, c: usize, keep: &dyn Fn(Target) -> bool) -> u64 {
        let files: Vec<Vec<u8>> = self
            .modules
            .iter()
            .map(|m| {
                m.iter()
                    .filter(|(t, _)| keep(*t))
                    .filter_map(|(_, w)| w.get(c))
                    .flatten()
                    .copied()
                    .collect::<Vec<u8>>()
            })
            .filter(|f| !f.is_empty())
            .collect();
        let modules = weigh_modules(shipped, &files);
        modules + self.rest
    }
}

/// Measures the modules (`*.fatbin`) of `dir` as `shipped`: the whole under each compression,
/// and what each target adds to it (the whole less the whole without it: images of one kernel
/// for several targets share bytes a `.crate`'s gzip finds, so a target alone would be
/// overstated). What no target adds alone is the base. Weighing is `targets + 1` compressions
/// of the package per way of compressing its entries.
pub fn measure(dir: &Path, shipped: Shipped) -> Result<Measured, MeasureError> {
    let modules = Modules::read(dir, shipped)?;
    let targets: std::collections::BTreeSet<Target> = modules
        .modules
        .iter()
        .flat_map(|m| m.iter().map(|(t, _)| *t))
        .collect();
    let mut base = [0u64; 3];
    let mut adds: std::collections::BTreeMap<Target, [Option<u64>; 3]> = Default::default();
    for (c, slot) in base.iter_mut().enumerate() {
        let whole = modules.weigh(shipped, c, &|_| true);
        let mut added = 0u64;
        for &t in &targets {
            let without = modules.weigh(shipped, c, &|x| x != t);
            let add = whole.saturating_sub(without);
            added += add;
            if let Some(a) = adds.entry(t).or_default().get_mut(c) {
                *a = Some(add);
            }
        }
        *slot = whole.saturating_sub(added);
    }
    let candidates = adds
        .into_iter()
        .map(|(target, bytes)| Candidate {
            target,
            ptx_isa: modules.isa.get(&target).copied(),
            toolkit: modules.toolkit.get(&target).copied(),
            bytes,
        })
        .collect();
    Ok(Measured {
        candidates,
        base,
        modules: modules.modules.len(),
    })
}

/// What the modules of `dir` would weigh as `shipped` holding only `targets`' images,
/// compressed as `compress`: each module's fatbin written again by fatkit's writer with those
/// images, in their order, then weighed as the package ships it, with what ships beside it
/// (as [`measure`]'s base). The search's sizes are estimates; this is the plan's size.
pub fn weigh(
    dir: &Path,
    targets: &fatkit_arch::TargetSet,
    compress: Compression,
    shipped: Shipped,
) -> Result<u64, MeasureError> {
    let read_err = |path: &Path| {
        let path = path.to_owned();
        move |source| MeasureError::Read { path, source }
    };
    let (modules, other): (Vec<PathBuf>, Vec<PathBuf>) = files_of(dir)
        .map_err(read_err(dir))?
        .into_iter()
        .partition(|p| is_module(p));
    let mut written: Vec<Vec<u8>> = Vec::new();
    for path in &modules {
        let data = fatkit_read::read_file(path).map_err(read_err(path))?;
        let kept: Vec<(Target, Vec<u8>)> = extract_all("plan", &data, &Limits::default())
            .into_iter()
            .filter(|i| matches!(i.kind, EntryKind::Cubin | EntryKind::Ptx))
            .filter_map(|i| Some((i.target?, i.bytes.ok()?)))
            .filter(|(t, _)| targets.contains(*t))
            .collect();
        let inputs: Vec<Input<'_>> = kept
            .iter()
            .map(|(target, bytes)| Input {
                target: *target,
                data: bytes,
                identifier: None,
                compression: compress,
            })
            .collect();
        if inputs.is_empty() {
            continue;
        }
        let one = write(&inputs).map_err(|e| MeasureError::Rewrite {
            path: path.clone(),
            target: e.target,
            reason: e.reason,
        })?;
        written.push(one);
    }
    Ok(weigh_modules(shipped, &written) + rest_of(dir, shipped, &other)?)
}

/// The regular files directly in `dir`, sorted.
fn files_of(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    Ok(out)
}

/// Whether `path` is a module's fatbin.
fn is_module(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "fatbin")
}

/// Modules' files (each module's entries, as written) weighed as `shipped`.
fn weigh_modules(shipped: Shipped, files: &[Vec<u8>]) -> u64 {
    match shipped {
        Shipped::Fatbin => files.iter().map(|f| f.len() as u64).sum(),
        Shipped::Wheel => files.iter().map(|f| shipped_size(Shipped::Wheel, f)).sum(),
        Shipped::Crate => tar_gz(files.iter().map(Vec::as_slice)),
    }
}

/// What ships beside the modules of `dir` (its `other` files), as `shipped`: for a `.crate`,
/// the rest of the package the directory is in where cargo can list it, else those files; for
/// a wheel, each of them deflated; for bare fatbins, nothing.
fn rest_of(dir: &Path, shipped: Shipped, other: &[PathBuf]) -> Result<u64, MeasureError> {
    match shipped {
        Shipped::Crate => match package_base(dir) {
            Some(base) => Ok(base),
            None => crate_bytes(other, &[])
                .map_err(|(path, source)| MeasureError::Read { path, source }),
        },
        Shipped::Fatbin => Ok(0),
        Shipped::Wheel => {
            let mut sum = 0;
            for p in other {
                let data = fatkit_read::read_file(p).map_err(|source| MeasureError::Read {
                    path: p.clone(),
                    source,
                })?;
                sum += shipped_size(shipped, &data);
            }
            Ok(sum)
        }
    }
}

/// `blobs` as a `.crate` holds files: a tar (a 512-byte header per file, its data padded to
/// 512), gzipped at cargo's level.
fn tar_gz<'a>(blobs: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let mut tar = Vec::new();
    for b in blobs {
        tar.extend_from_slice(&[0u8; 512]);
        tar.extend_from_slice(b);
        tar.resize(tar.len().next_multiple_of(512), 0);
    }
    shipped_size(Shipped::Crate, &tar)
}

/// The chosen plan as a profile (`arch-profiles/NAME.toml`).
pub fn profile_toml(plan: &fatkit_arch::plan::Plan, budget: u64, shipped: Shipped) -> String {
    let list = |kind: ImageKind| -> String {
        plan.targets
            .iter()
            .filter(|t| t.kind == kind)
            .map(|t| format!("\"{t}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let what = match shipped {
        Shipped::Crate => "a .crate",
        Shipped::Wheel => "a wheel",
        Shipped::Fatbin => "the fatbins",
    };
    format!(
        "# Written by `fatkit plan`: the targets covering the most GPUs within {budget} bytes for {what}.\n\
         description = \"planned for {budget} bytes ({} bytes as measured)\"\n\
         targets = [{}]\n\
         ptx = [{}]\n\
         compress = \"{}\"\n\
         budget = \"{budget}\"\n\
         for = \"{}\"\n",
        plan.bytes,
        list(ImageKind::Cubin),
        list(ImageKind::Ptx),
        plan.compress.name(),
        shipped.name(),
    )
}

/// Writes the chosen profile to `path` whole or not at all (a temporary renamed into place).
pub fn write_profile(path: &Path, toml: &str) -> Result<(), MeasureError> {
    crate::out::write_atomic(path, toml.as_bytes()).map_err(|source| MeasureError::Write {
        path: path.to_owned(),
        source,
    })
}

/// What a unit's build ships, measured as its budget says (a vendored package's `.crate` also
/// against crates.io's limit), and the refusal when it is over: the size, the budget, and the
/// plan that fits (`fatkit_arch::plan` over the modules just built).
pub(crate) fn check_budget(
    label: &str,
    profile: &fatkit_arch::profile::Profile,
    out_dir: &Path,
    vendored_in: Option<&Path>,
) -> Result<(), crate::BuildError> {
    use fatkit_arch::plan::{Budget, CRATES_IO_LIMIT};
    let mut budgets: Vec<(Budget, &'static str)> = Vec::new();
    if let Some(b) = profile.budget {
        budgets.push((b, "its budget"));
    }
    if vendored_in.is_some() {
        let limit = Budget {
            bytes: CRATES_IO_LIMIT,
            shipped: Shipped::Crate,
        };
        budgets.push((limit, "crates.io's limit"));
    }
    for (budget, whose) in budgets {
        let Some(size) = shipped_bytes(budget.shipped, out_dir, vendored_in, budget.bytes)? else {
            continue;
        };
        if size <= budget.bytes {
            continue;
        }
        let fits = fitting_plan(out_dir, budget);
        return Err(crate::refused::Refused::OverBudget {
            unit: label.to_owned(),
            shipped: budget.shipped.name(),
            size,
            budget: budget.bytes,
            whose,
            fits,
            dir: out_dir.to_owned(),
        }
        .into());
    }
    Ok(())
}

/// The largest file of a package read to weigh its `.crate`.
const MAX_PACKAGE_FILE: u64 = 4 << 30;

/// What the unit's result weighs as `shipped`: its fatbins; each file of its directory
/// deflated (a wheel); or its package as `cargo package` lists it, tarred and gzipped at
/// cargo's level (a `.crate`; where cargo cannot list it, the output directory alone). `None`
/// where the files are so small that, compressed, they cannot pass `within` (deflate adds at
/// most 5 bytes per 16 KiB block, a tar at most 1 KiB per file): nothing is compressed then,
/// so that a build that is far from its budget pays for no weighing.
fn shipped_bytes(
    shipped: Shipped,
    out_dir: &Path,
    package: Option<&Path>,
    within: u64,
) -> Result<Option<u64>, crate::BuildError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |e: std::io::Error| {
            crate::BuildError::from(crate::refused::Refused::Unweighable { path, source: e })
        }
    };
    let files = || files_of(out_dir).map_err(io(out_dir));
    let at_most = |listed: &Listed| -> Result<u64, crate::BuildError> {
        let mut bound = 64u64;
        let made = listed
            .made
            .iter()
            .map(|m| Ok::<u64, crate::BuildError>(m.len() as u64));
        let files = listed
            .files
            .iter()
            .map(|p| Ok(std::fs::metadata(p).map_err(io(p))?.len()));
        for len in files.chain(made) {
            let len: u64 = len?;
            bound = bound.saturating_add(len + len / (16 << 10) * 5 + 1024);
        }
        Ok(bound)
    };
    if shipped == Shipped::Fatbin {
        let size: Result<u64, _> = files()?
            .iter()
            .filter(|p| is_module(p))
            .map(|p| std::fs::metadata(p).map(|m| m.len()).map_err(io(p)))
            .sum();
        return size.map(Some);
    }
    let listed = match (shipped, package.and_then(package::list)) {
        (Shipped::Crate, Some(listed)) => listed,
        _ => Listed {
            files: files()?,
            made: Vec::new(),
        },
    };
    if at_most(&listed)? <= within {
        return Ok(None);
    }
    let size = match shipped {
        Shipped::Wheel => listed
            .files
            .iter()
            .map(|p| {
                let data = fatkit_read::read_limited(p, MAX_PACKAGE_FILE).map_err(io(p))?;
                Ok(shipped_size(Shipped::Wheel, &data))
            })
            .sum(),
        _ => crate_bytes(&listed.files, &listed.made).map_err(|(p, e)| io(&p)(e)),
    };
    size.map(Some)
}

/// `files` and the bytes cargo `made` as a `.crate` holds them ([`tar_gz`]); or the file that
/// cannot be read.
fn crate_bytes(files: &[PathBuf], made: &[Vec<u8>]) -> Result<u64, (PathBuf, std::io::Error)> {
    let data = files
        .iter()
        .map(|p| fatkit_read::read_limited(p, MAX_PACKAGE_FILE).map_err(|e| (p.clone(), e)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(tar_gz(data.iter().chain(made).map(Vec::as_slice)))
}

/// For modules in `dir` that a package ships (a vendor directory): everything else its `.crate`
/// holds, as `cargo package --list` names it, weighed as a `.crate` holds it; `None` where
/// `dir` is in no package cargo can list.
fn package_base(dir: &Path) -> Option<u64> {
    let dir = dir.canonicalize().ok()?;
    let package = dir.ancestors().find(|d| {
        fatkit_read::read_limited(&d.join("Cargo.toml"), 1 << 20)
            .is_ok_and(|t| String::from_utf8_lossy(&t).contains("[package]"))
    })?;
    let listed = package::list(package)?;
    let files: Vec<PathBuf> = listed
        .files
        .into_iter()
        .filter(|p| {
            !(is_module(p)
                && p.parent().and_then(|d| d.canonicalize().ok()).as_deref() == Some(&dir))
        })
        .collect();
    crate_bytes(&files, &listed.made).ok()
}

/// The plan that fits `budget`, in words, over the modules in `out_dir` and what ships beside
/// them ([`measure`]), its size as written ([`weigh`]).
fn fitting_plan(out_dir: &Path, budget: fatkit_arch::plan::Budget) -> String {
    let measured = match measure(out_dir, budget.shipped) {
        Ok(m) => m,
        Err(e) => return format!("no plan: {e}"),
    };
    let goal = fatkit_arch::plan::Goal {
        budget: budget.bytes,
        base: measured.base,
        native: Vec::new(),
        driver: None,
    };
    match fatkit_arch::plan::plan(&measured.candidates, &goal, Default::default()) {
        Ok(p) => {
            let written = weigh(out_dir, &p.best.targets, p.best.compress, budget.shipped)
                .unwrap_or(p.best.bytes);
            format!(
                "targets {} with compress = \"{}\" fit ({written} bytes as written)",
                p.best.targets,
                p.best.compress.name(),
            )
        }
        Err(e) => e.to_string(),
    }
}
