//! Planning a build: which toolchain builds each target ([`route`], or a [`PlanError`] before
//! anything compiles), the modules and their jobs (one per source and target), and the
//! arguments of each job, which are part of its cache key.

use std::fmt;
use std::path::{Path, PathBuf};

use fatkit_arch::profile::Profile;
use fatkit_arch::toolkit;
use fatkit_arch::{Compiler, ImageKind, Target, TargetSet};

use super::{BuildError, Request};
use crate::cache::{self, Cache};
use crate::toolchain::{Probe, Toolchain};

/// The targets no toolchain can build, found before anything compiles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanError {
    pub profile: String,
    pub unbuildable: Vec<Target>,
    /// The unbuildable targets the profile pins, with their pins.
    pub pins: Vec<(Target, fatkit_arch::Pin)>,
    /// `(toolchain, what it builds)`.
    pub toolchains: Vec<(String, TargetSet)>,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.unbuildable.iter().map(|t| t.to_string()).collect();
        if self.toolchains.is_empty() {
            return write!(
                f,
                "no CUDA toolchain found to build profile {}; run `cargo xtask toolchain install` (or build without --offline), set CUDA_HOME, or pass --nvcc",
                self.profile
            );
        }
        writeln!(
            f,
            "no toolchain found can build {} (profile {})",
            names.join(", "),
            self.profile
        )?;
        for (name, targets) in &self.toolchains {
            let cubins: Vec<String> = targets
                .cubins()
                .filter(|t| t.suffix == fatkit_arch::Suffix::None)
                .map(|t| t.to_string())
                .collect();
            writeln!(f, "  {name} builds {}", cubins.join(" "))?;
        }
        for (t, pin) in &self.pins {
            writeln!(
                f,
                "  {t} is pinned to {pin} by the profile's [toolchain] table, and no such toolchain was found"
            )?;
        }
        let mut fixes = Vec::new();
        for t in &self.unbuildable {
            let versions = toolkit::toolkits_for(*t);
            let range = match (versions.first(), versions.last()) {
                (Some(a), Some(b)) if a == b => format!("CUDA {a}"),
                (Some(a), Some(b)) => format!("CUDA {a} to {b}"),
                _ => "no known CUDA".to_owned(),
            };
            fixes.push(format!("{t} needs {range}"));
        }
        write!(
            f,
            "fix: {}; install such a toolkit and set CUDA_HOME (or pass --nvcc), or drop {} from the profile",
            fixes.join(", "),
            names.join(", ")
        )
    }
}

impl std::error::Error for PlanError {}

/// A source and its module name.
#[derive(Debug)]
pub(crate) struct Module {
    pub path: PathBuf,
    pub name: String,
    pub hash: blake3::Hash,
}

/// One compile: a module's source for one target, by one toolchain.
#[derive(Debug)]
pub(crate) struct Job {
    pub module: usize,
    pub target: Target,
    pub toolchain: usize,
    pub source_key: String,
    pub object_key: Option<String>,
    /// Seconds the last compile of this job took, if known.
    pub last_seconds: Option<f64>,
}

/// A Rust identifier from any text: non-alphanumerics become `_`, a leading digit gets `_`.
pub(crate) fn rust_identifier(text: &str, upper: bool) -> String {
    let mut name: String = text
        .chars()
        .map(|c| match (c.is_ascii_alphanumeric(), upper) {
            (true, true) => c.to_ascii_uppercase(),
            (true, false) => c.to_ascii_lowercase(),
            (false, _) => '_',
        })
        .collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) || name.is_empty() {
        name.insert(0, '_');
    }
    name
}

/// Module names are Rust identifiers: `softmax-v2.cu` -> `softmax_v2`.
pub fn module_name(source: &Path) -> String {
    let stem = source
        .file_stem()
        .map_or_else(|| "kernels".into(), |s| s.to_string_lossy().into_owned());
    rust_identifier(&stem, false)
}

/// The `.cu` files of a directory (not its subdirectories), sorted: one module each.
pub fn sources_in(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut sources: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "cu"))
        .collect();
    sources.sort();
    Ok(sources)
}

/// Routes every target of the profile to the newest toolchain that builds it (nvcc before
/// NVRTC of the same version), or to the newest one matching the profile's pin for it.
pub fn route(
    profile: &Profile,
    toolchains: &[(Toolchain, Probe)],
) -> Result<Vec<(Target, usize)>, PlanError> {
    let mut order: Vec<usize> = (0..toolchains.len()).collect();
    order.sort_by_key(|&i| toolchains.get(i).map(|(_, p)| p.preference()));
    let mut routes = Vec::new();
    let mut unbuildable = Vec::new();
    for target in profile.all_targets().iter() {
        let pin = profile.pins.get(&target);
        let chosen = order.iter().copied().find(|&i| {
            toolchains.get(i).is_some_and(|(_, p)| {
                p.targets.contains(target)
                    && profile.min_cuda.is_none_or(|min| p.version >= min)
                    && pin.is_none_or(|pin| pin.matches(p.compiler, p.version))
            })
        });
        match chosen {
            Some(i) => routes.push((target, i)),
            None => unbuildable.push(target),
        }
    }
    if unbuildable.is_empty() && !toolchains.is_empty() {
        return Ok(routes);
    }
    Err(PlanError {
        profile: profile.name.clone(),
        pins: unbuildable
            .iter()
            .filter_map(|t| Some((*t, *profile.pins.get(t)?)))
            .collect(),
        unbuildable,
        toolchains: toolchains
            .iter()
            .map(|(t, p)| (t.describe(Some(p)), p.targets.clone()))
            .collect(),
    })
}

/// `-gencode arch=compute_XY,code=<target>`: the one place nvcc's per-target flag is written
/// (the pipeline, the `cc` helper and the layout check all use it).
pub fn gencode(target: Target) -> [String; 2] {
    let virt = target.with_kind(ImageKind::Ptx);
    ["-gencode".to_owned(), format!("arch={virt},code={target}")]
}

/// The modules of a request: each source canonicalised, hashed and named; two sources making
/// one module name are refused.
pub(crate) fn modules(req: &Request) -> Result<Vec<Module>, BuildError> {
    let mut modules = Vec::new();
    for path_given in &req.sources {
        let path = std::fs::canonicalize(path_given).map_err(super::io_err(path_given))?;
        let hash = cache::hash_file(&path).ok_or_else(|| BuildError::Io {
            path: path.clone(),
            source: std::io::Error::other("cannot read the source"),
        })?;
        let name = req
            .module_names
            .get(path_given)
            .cloned()
            .unwrap_or_else(|| module_name(&path));
        if modules.iter().any(|m: &Module| m.name == name) {
            return Err(BuildError::Input(format!(
                "two sources make module '{name}': rename one of them ({})",
                path.display()
            )));
        }
        modules.push(Module { path, name, hash });
    }
    Ok(modules)
}

/// One job per (module, routed target), each looked up in the cache.
pub(crate) fn jobs(req: &Request, modules: &[Module], routes: &[(Target, usize)]) -> Vec<Job> {
    let mut jobs = Vec::new();
    for (module_idx, m) in modules.iter().enumerate() {
        for &(target, tc) in routes {
            let Some((toolchain, probe)) = req.toolchains.get(tc) else {
                continue;
            };
            let args = job_args(target, req, toolchain, probe, &m.path);
            let source_key = Cache::source_key(
                &probe.identity,
                &target.to_string(),
                &args,
                &m.path,
                &m.hash,
            );
            let entry = req.cache.source_entry(&source_key);
            let object_key = entry
                .as_ref()
                .and_then(|e| Cache::object_key(&source_key, &e.deps));
            jobs.push(Job {
                module: module_idx,
                target,
                toolchain: tc,
                source_key,
                object_key,
                last_seconds: entry.map(|e| e.seconds),
            });
        }
    }
    jobs
}

/// The arguments that decide a job's output besides the source: part of its cache key.
fn job_args(
    target: Target,
    req: &Request,
    toolchain: &Toolchain,
    probe: &Probe,
    source: &Path,
) -> Vec<String> {
    match probe.compiler {
        Compiler::Nvcc => {
            let mut args = gencode(target).to_vec();
            args.extend(common_args(req));
            args.extend(skip_defines(req, target));
            args
        }
        Compiler::Nvrtc => nvrtc_args(target, req, source, toolchain.include_dirs()),
    }
}

/// NVRTC's options: the architecture, the source's own directory (nvcc searches it for quoted
/// includes; NVRTC does not), the request's include directories, defines and extras, then the
/// toolchain's own headers.
pub(crate) fn nvrtc_args(
    target: Target,
    req: &Request,
    source: &Path,
    toolkit: &[PathBuf],
) -> Vec<String> {
    let mut args = vec![format!("--gpu-architecture={target}")];
    if let Some(dir) = source.parent() {
        args.push(format!("-I{}", dir.display()));
    }
    args.extend(common_args(req));
    args.extend(skip_defines(req, target));
    args.extend(toolkit.iter().map(|d| format!("-I{}", d.display())));
    args
}

/// `-DFATKIT_SKIP_<kernel>` for every kernel the overrides exclude from `target`.
pub(crate) fn skip_defines(req: &Request, target: Target) -> Vec<String> {
    req.kernel_excludes
        .iter()
        .filter(|(_, targets)| targets.contains(target))
        .map(|(kernel, _)| format!("-DFATKIT_SKIP_{kernel}"))
        .collect()
}

/// The arguments every compile of the request shares: include directories, defines, extras.
pub(crate) fn common_args(req: &Request) -> Vec<String> {
    let mut args: Vec<String> = req
        .include_dirs
        .iter()
        .map(|d| format!("-I{}", d.display()))
        .collect();
    args.extend(req.defines.iter().map(|d| format!("-D{d}")));
    args.extend(req.extra_args.iter().cloned());
    args
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::toolchain::Nvcc;
    use fatkit_arch::toolkit::CudaVersion;

    #[test]
    fn names() {
        assert_eq!(
            module_name(Path::new("cuda-src/softmax-v2.cu")),
            "softmax_v2"
        );
        assert_eq!(module_name(Path::new("3d.cu")), "_3d");
    }

    fn toolchain(compiler: Compiler, version: &str, targets: &str) -> (Toolchain, Probe) {
        let version: CudaVersion = version.parse().unwrap();
        let targets =
            fatkit_arch::notation::parse_any(targets, &fatkit_arch::notation::Context::default())
                .unwrap();
        let tc = match compiler {
            Compiler::Nvcc => Toolchain::Nvcc(Nvcc::at(PathBuf::from("/x"), Some(version), "test")),
            Compiler::Nvrtc => Toolchain::Nvrtc(crate::toolchain::Nvrtc {
                library: PathBuf::from("/x/libnvrtc.so"),
                root: PathBuf::from("/x"),
                include_dirs: Vec::new(),
                version: Some(version),
                source: "test".into(),
            }),
        };
        let probe = Probe {
            compiler,
            version,
            build: String::new(),
            targets,
            host: None,
            identity: format!("{compiler}{version}"),
        };
        (tc, probe)
    }

    fn routed(profile: &Profile, toolchains: &[(Toolchain, Probe)]) -> String {
        match route(profile, toolchains) {
            Ok(routes) => routes
                .iter()
                .map(|(t, i)| format!("{t}={}", toolchains[*i].0.short(&toolchains[*i].1)))
                .collect::<Vec<_>>()
                .join(" "),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn routes_newest_then_pins() {
        let found = [
            toolchain(Compiler::Nvcc, "11.8", "sm_70 sm_80 compute_80"),
            toolchain(Compiler::Nvcc, "13.2", "sm_80 sm_120 compute_120"),
            toolchain(Compiler::Nvrtc, "12.9", "sm_70 sm_80 sm_120 compute_120"),
            toolchain(Compiler::Nvrtc, "13.2", "sm_80 sm_120"),
        ];
        let ctx = fatkit_arch::notation::Context::default();
        let mut profile = Profile {
            name: "p".into(),
            description: String::new(),
            targets: fatkit_arch::notation::parse_any("sm_70 sm_80 sm_120 compute_120", &ctx)
                .unwrap(),
            extra: TargetSet::new(),
            compress: fatkit_arch::profile::Compression::None,
            min_cuda: None,
            pins: BTreeMap::new(),
        };
        // Newest per target; nvcc before NVRTC of the same release.
        assert_eq!(
            routed(&profile, &found),
            "sm_70=nvrtc 12.9 sm_80=nvcc 13.2 sm_120=nvcc 13.2 compute_120=nvcc 13.2"
        );
        profile
            .pins
            .insert("sm_70".parse().unwrap(), "nvcc 11.8".parse().unwrap());
        profile
            .pins
            .insert("sm_120".parse().unwrap(), "nvrtc".parse().unwrap());
        assert_eq!(
            routed(&profile, &found),
            "sm_70=nvcc 11.8 sm_80=nvcc 13.2 sm_120=nvrtc 13.2 compute_120=nvcc 13.2"
        );
        profile
            .pins
            .insert("sm_80".parse().unwrap(), "nvcc 12".parse().unwrap());
        let err = routed(&profile, &found);
        assert!(
            err.starts_with("no toolchain found can build sm_80 (profile p)"),
            "{err}"
        );
        assert!(
            err.contains("sm_80 is pinned to nvcc 12 by the profile's [toolchain] table"),
            "{err}"
        );
        profile.pins.clear();
        profile.min_cuda = Some(CudaVersion::new(13, 0));
        assert!(routed(&profile, &found).contains("sm_70 needs CUDA"));
    }
}
