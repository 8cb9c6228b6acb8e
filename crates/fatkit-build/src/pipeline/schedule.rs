//! Planning a build: which toolchain builds each target ([`route`], or a [`PlanError`] before
//! anything compiles), the modules and their jobs (one per source and target), each job's
//! complete arguments and cache key, and the compiler calls that run them ([`calls`]): a
//! [`Schedule`], which the compile phase runs without planning anything more.

use std::fmt;
use std::path::{Path, PathBuf};

use fatkit_arch::profile::Profile;
use fatkit_arch::toolkit;
use fatkit_arch::{Compiler, ImageKind, Target, TargetSet};

use super::snapshot::{Changed, Snapshot};
use super::{BuildError, Request};
use crate::cache::Cache;
pub use fatkit_package::sources::{module_name, sources_in};
use fatkit_toolchain::{Probe, Toolchain};

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

impl From<PlanError> for crate::BuildError {
    fn from(e: PlanError) -> crate::BuildError {
        crate::BuildError::Build(Box::new(e))
    }
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
    /// The source's declaration of the targets it is built for, when it is built for some
    /// of the profile's only ([`Request::source_targets`]).
    pub only: Option<fatkit_package::kernel_sets::FileRule>,
    /// For a host-code library's module: the virtual architectures of every target it is
    /// built for, as nvcc writes `__CUDA_ARCH_LIST__` for one call building them all
    /// (`750,800,1200`), which every compile of the module sees ([`arch_list_args`]); empty
    /// for a module without host code.
    pub arch_list: Vec<u32>,
    /// The source as nvcc is given it ([`nvcc_path`] in the schedule's base).
    pub given: String,
    /// The name compilers are given for the source, which internal symbols are named after
    /// (`source_name_args`, NVRTC's program name): relative to the base where it lies under it.
    pub relative: PathBuf,
}

impl Module {
    /// Whether the module is built for `target`.
    pub fn builds(&self, target: Target) -> bool {
        self.only
            .as_ref()
            .is_none_or(|r| r.targets.contains(target))
    }
}

/// One compile: a module's source for one target, by one toolchain.
#[derive(Debug)]
pub(crate) struct Job {
    pub module: usize,
    pub target: Target,
    pub toolchain: usize,
    /// The arguments that decide the output besides the source (part of the cache key); for
    /// NVRTC, its whole option list.
    pub args: Vec<String>,
    /// The arguments as the compiler is given them for this job alone: for nvcc, its host
    /// compiler and `args` with include directories relative to the schedule's base (the
    /// compile adds where the output goes); for NVRTC, `args`.
    pub argv: Vec<String>,
    pub source_key: String,
    pub object_key: Option<String>,
    /// The headers the last compile of this job read (its source entry's), with `object_key`.
    pub deps: Vec<PathBuf>,
    /// Seconds the last compile of this job took, if known.
    pub last_seconds: Option<f64>,
}

/// A build's plan of work, a value the compile phase runs and the bundle phase reads.
#[derive(Debug)]
pub(crate) struct Schedule {
    /// Where every compiler runs, naming files relative to it: the project root, canonical.
    /// What a compiler puts of a source's path into the code (nvcc names internal-linkage
    /// symbols after a hash of it) is then the same in every checkout, and a launcher's cache
    /// keys match across them.
    pub base: PathBuf,
    pub modules: Vec<Module>,
    pub jobs: Vec<Job>,
}

/// The base of a request's schedule ([`Schedule::base`]).
pub(crate) fn base(req: &Request) -> PathBuf {
    std::fs::canonicalize(&req.ask.root).unwrap_or_else(|_| req.ask.root.clone())
}

/// `-ccbin <host compiler>` where the probe chose one for nvcc.
pub(crate) fn ccbin_args(probe: &Probe) -> Vec<String> {
    match probe.host.as_ref().and_then(|h| h.ccbin.as_ref()) {
        Some(ccbin) => vec!["-ccbin".to_owned(), ccbin.display().to_string()],
        None => Vec::new(),
    }
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

/// `__CUDA_ARCH_LIST__` of a module built for the targets of `profile` (those of its source's
/// declaration `only`, if any): each target's virtual architecture, major*100 + minor*10,
/// ascending, once.
fn arch_list(
    profile: &fatkit_arch::TargetSet,
    only: Option<&fatkit_package::kernel_sets::FileRule>,
) -> Vec<u32> {
    let mut list: Vec<u32> = profile
        .iter()
        .filter(|t| only.is_none_or(|r| r.targets.contains(*t)))
        .map(|t| u32::from(t.cc.major) * 100 + u32::from(t.cc.minor) * 10)
        .collect();
    list.sort_unstable();
    list.dedup();
    list
}

/// `__CUDA_ARCH_LIST__` as one nvcc call building every target of the module defines it, in
/// place of the one target's list each of the module's compiles would get: CUDA's own headers
/// name things after it (CUB and Thrust put their kernels in a namespace named after it, and
/// CUB's dispatch picks its tuning by it at run time), so only then do the images of one
/// module name their kernels alike, as the host code registers them, and does that host code
/// dispatch for every target (docs/BUILDS.md, "One architecture list per module"). nvcc
/// splits a `-D` value at commas unless escaped; NVRTC takes each option whole.
pub(crate) fn arch_list_args(m: &Module, compiler: fatkit_arch::Compiler) -> Vec<String> {
    if m.arch_list.is_empty() {
        return Vec::new();
    }
    let sep = match compiler {
        fatkit_arch::Compiler::Nvcc => "\\,",
        fatkit_arch::Compiler::Nvrtc => ",",
    };
    let list: Vec<String> = m.arch_list.iter().map(u32::to_string).collect();
    vec![
        "-U__CUDA_ARCH_LIST__".to_owned(),
        format!("-D__CUDA_ARCH_LIST__={}", list.join(sep)),
    ]
}

/// The modules of a request: each source canonicalised, read into the build's snapshot
/// (hashed) and named; two sources making one module name are refused.
pub(crate) fn modules(
    req: &Request,
    snapshot: &Snapshot,
    base: &Path,
) -> Result<Vec<Module>, BuildError> {
    let mut modules = Vec::new();
    for path_given in &req.ask.sources {
        let path = std::fs::canonicalize(path_given).map_err(super::io_err(path_given))?;
        let hash = snapshot
            .hash(&path)
            .map_err(|c| crate::refused::Refused::Changed(c.message()))?
            .blake3;
        let name = req.ask.module_name_of(path_given, &path);
        if !fatkit_package::sources::is_module_name(&name) {
            return Err(crate::refused::Refused::ModuleName { file: path, name }.into());
        }
        if modules.iter().any(|m: &Module| m.name == name) {
            return Err(crate::refused::Refused::TwoSources { name, file: path }.into());
        }
        let only = req.ask.source_targets.get(path_given).cloned();
        // A library's host code registers its kernels by name and dispatches CUB by the
        // list; a module's kernels are found by name per image, and its jobs keep their
        // cache keys when a target is added.
        let arch_list = match req.ask.library {
            Some(_) => arch_list(&req.ask.profile.all_targets(), only.as_ref()),
            None => Vec::new(),
        };
        modules.push(Module {
            given: nvcc_path(&path, Some(base)),
            relative: relative(&path, Some(base)).into_owned(),
            path,
            name,
            hash,
            only,
            arch_list,
        });
    }
    Ok(modules)
}

/// One job per (module, routed target the module is built for), each looked up in the cache: its object key is made of
/// the headers its last compile read as the build's snapshot has them. `std_headers`: the
/// directory of the standard headers NVRTC jobs get.
pub(crate) fn jobs(
    req: &Request,
    snapshot: &Snapshot,
    modules: &[Module],
    routes: &[(Target, usize)],
    (std_headers, base): (Option<&Path>, &Path),
) -> Vec<Job> {
    let mut jobs = Vec::new();
    // Whether an include-path miss now exists, asked once per file per build.
    let mut seen: std::collections::HashMap<PathBuf, bool> = std::collections::HashMap::new();
    let mut exists = |p: &Path| *seen.entry(p.to_owned()).or_insert_with(|| p.exists());
    let nvcc_env = crate::cache::env_of(crate::cache::NVCC_ENV);
    for (module_idx, m) in modules.iter().enumerate() {
        for &(target, tc) in routes.iter().filter(|(t, _)| m.builds(*t)) {
            let Some((toolchain, probe)) = req.with.toolchains.get(tc) else {
                continue;
            };
            let args = job_args(target, req, toolchain, probe, m, std_headers);
            // What nvcc reads from the environment decides its output as its arguments do.
            let mut key_args = args.clone();
            if probe.compiler == Compiler::Nvcc {
                key_args.extend(nvcc_env.iter().cloned());
            }
            // The name the compiler is given for the source, which internal symbols are named
            // after (compile::source_name_args, and NVRTC's program name).
            key_args.push(format!("source-name={}", m.relative.display()));
            let source_key = Cache::source_key(
                &probe.identity,
                &target.to_string(),
                &key_args,
                &m.path,
                &m.hash,
            );
            let entry = req.with.cache.source_entry(&source_key);
            // A header gone or unreadable is a miss: the compile learns the new ones.
            let hashed = entry
                .as_ref()
                .filter(|e| !crate::cache::shadowed(e, &mut exists))
                .and_then(|e| {
                    e.deps
                        .iter()
                        .map(|d| Some((d.clone(), snapshot.hash(d).ok()?.blake3)))
                        .collect::<Option<Vec<_>>>()
                });
            let object_key = hashed.as_ref().map(|d| Cache::object_key(&source_key, d));
            let argv = match probe.compiler {
                Compiler::Nvcc => {
                    let mut argv = ccbin_args(probe);
                    argv.extend(nvcc_args(req, m, target, Some(base)));
                    argv
                }
                Compiler::Nvrtc => args.clone(),
            };
            jobs.push(Job {
                module: module_idx,
                target,
                toolchain: tc,
                args,
                argv,
                source_key,
                object_key,
                deps: hashed
                    .map(|d| d.into_iter().map(|(p, _)| p).collect())
                    .unwrap_or_default(),
                last_seconds: entry.map(|e| e.seconds),
            });
        }
    }
    jobs
}

/// Before anything compiles, every header the sources of `modules` may read (the include
/// scan: [`fatkit_toolchain::nvrtc::scan_includes`]) is read into the build's snapshot, so that a compile
/// is checked against bytes read before it started (`Snapshot::verify`); one that is not a
/// regular file (a FIFO, a device, a link to one) is refused here, naming the source.
pub(crate) fn read_headers(
    req: &Request,
    snapshot: &Snapshot,
    modules: &[&Module],
) -> Result<(), BuildError> {
    use crate::refused::Refused;
    for m in modules {
        let headers =
            fatkit_toolchain::nvrtc::scan_includes(&m.path, &req.ask.header_search(&m.path))
                .map_err(Refused::TooManyHeaders)?;
        for header in &headers {
            // One changing as it is read is left to the compile's own check.
            if let Err(e @ Changed::Unreadable(..)) = snapshot.hash(header) {
                return Err(Refused::Include {
                    file: m.path.clone(),
                    header: header.clone(),
                    why: e.message(),
                }
                .into());
            }
        }
        for file in std::iter::once(&m.path).chain(&headers) {
            if let Some(line) = fatkit_toolchain::scan::names_of(file)
                .ok()
                .and_then(|n| n.opaque_probe)
            {
                return Err(Refused::OpaqueProbe {
                    file: file.clone(),
                    line,
                }
                .into());
            }
        }
    }
    Ok(())
}

/// The arguments that decide a job's output besides the source: part of its cache key.
fn job_args(
    target: Target,
    req: &Request,
    toolchain: &Toolchain,
    probe: &Probe,
    m: &Module,
    std_headers: Option<&Path>,
) -> Vec<String> {
    match probe.compiler {
        Compiler::Nvcc => nvcc_args(req, m, target, None),
        Compiler::Nvrtc => nvrtc_args(target, req, m, std_headers, toolchain.include_dirs()),
    }
}

/// NVRTC's options: the architecture, the source's own directory (nvcc searches it for quoted
/// includes; NVRTC does not), the request's include directories, defines and flags (NVRTC's
/// spellings; [`nvrtc_refusals`] has refused those it lacks), `-default-device` (unannotated
/// functions are device functions: NVRTC compiles no host code, and nvcc's
/// `--expt-relaxed-constexpr` lets device code call constexpr ones), then fatkit's standard
/// headers (its `stdint.h` pre-included) and the toolchain's own.
pub(crate) fn nvrtc_args(
    target: Target,
    req: &Request,
    m: &Module,
    std_headers: Option<&Path>,
    toolkit: &[PathBuf],
) -> Vec<String> {
    let mut args = vec![format!("--gpu-architecture={target}")];
    args.extend(arch_list_args(m, Compiler::Nvrtc));
    if let Some(dir) = m.path.parent() {
        args.push(format!("-I{}", dir.display()));
    }
    args.extend(common_args(req));
    args.extend(req.ask.flags.nvrtc_args().unwrap_or_default());
    args.push("-default-device".to_owned());
    args.extend(skip_defines(req, target));
    if let Some(dir) = std_headers {
        args.push(format!("-I{}", dir.display()));
        // fatkit's integer types first, whatever the source includes first: libcu++ (behind
        // <math.h>, <type_traits>, <cuda/std/...>) would otherwise define its own.
        args.push(format!("--pre-include={}", dir.join("stdint.h").display()));
    }
    args.extend(toolkit.iter().map(|d| format!("-I{}", d.display())));
    args
}

/// `-DFATKIT_SKIP_<kernel>` for every kernel excluded by name from `target`.
pub(crate) fn skip_defines(req: &Request, target: Target) -> Vec<String> {
    req.ask.kernel_sets.skip_defines(target)
}

/// The arguments every compile of the request shares: include directories and defines.
pub(crate) fn common_args(req: &Request) -> Vec<String> {
    include_and_defines(req, None)
}

/// Include directories (relative to `base` where they lie under it) and defines.
pub(crate) fn include_and_defines(req: &Request, base: Option<&Path>) -> Vec<String> {
    let mut args: Vec<String> = req
        .ask
        .include_dirs
        .iter()
        .map(|d| format!("-I{}", nvcc_path(d, base)))
        .collect();
    args.extend(req.ask.defines.iter().map(|d| format!("-D{d}")));
    args
}

/// A file or directory as nvcc is given it: relative to `base` where it lies under it, and then
/// always `./name` (never `-name`, which nvcc would read as an option), else absolute. What it
/// holds is checked before anything compiles ([`super::preflight`]: [`fatkit_package::flags::path_safe`]).
pub(crate) fn nvcc_path(path: &Path, base: Option<&Path>) -> String {
    let rel = relative(path, base);
    let text = rel.display().to_string();
    if rel.is_absolute() || text.starts_with("./") || text == "." {
        text
    } else {
        format!("./{text}")
    }
}

/// `path` relative to `base` when it lies under it (`.` for `base` itself), else as it is.
pub(crate) fn relative<'a>(path: &'a Path, base: Option<&Path>) -> std::borrow::Cow<'a, Path> {
    match base.and_then(|b| path.strip_prefix(b).ok()) {
        Some(rel) if rel.as_os_str().is_empty() => Path::new(".").into(),
        Some(rel) => rel.into(),
        None => path.into(),
    }
}

/// What decides an nvcc job's output besides the source: `-gencode`, include directories,
/// defines, flags and the kernels skipped for the target. With `base`, include directories
/// under it are written relative to it (a launcher's jobs run there, so that two checkouts
/// make the same command).
pub(crate) fn nvcc_args(
    req: &Request,
    m: &Module,
    target: Target,
    base: Option<&Path>,
) -> Vec<String> {
    let mut args = gencode(target).to_vec();
    args.extend(arch_list_args(m, Compiler::Nvcc));
    args.extend(include_and_defines(req, base));
    args.extend(req.ask.flags.nvcc_args());
    args.extend(skip_defines(req, target));
    args
}

mod calls;
pub(crate) use calls::{calls_to_run, Call};

mod nvrtc;
pub(crate) use nvrtc::{host_code, nvrtc_refusals, nvrtc_route, HOST_CODE_SCAN_LIMIT};

#[cfg(test)]
mod tests;
