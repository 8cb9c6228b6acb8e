//! Planning a build: which toolchain builds each target ([`route`], or a [`PlanError`] before
//! anything compiles), the modules and their jobs (one per source and target), each job's
//! complete arguments and cache key, and the compiler calls that run them (`calls`): a
//! `Schedule`, which the compile phase runs without planning anything more.

use std::fmt;
use std::path::{Path, PathBuf};

use fatkit_arch::profile::Profile;
use fatkit_arch::toolkit;
use fatkit_arch::{Compiler, Target, TargetSet};

use super::failure::Output;
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
    /// The compiler calls that run the jobs the cache does not hold, in the order they start.
    pub calls: Vec<Call>,
}

/// The schedule of a request, and each job's output where the cache holds it: its modules
/// (a file in a module's place that fatkit could not have written refused now, not after the
/// compiles; the same check runs again, with the new bytes, when writing), NVRTC's refusals
/// where it builds a target, every job with its arguments and cache key, what the cache holds
/// of them, the headers of the modules to compile read into the build's snapshot (a FIFO or
/// a device among them refused before any compile starts), and the calls of the rest.
pub(crate) fn plan(
    req: &Request,
    snapshot: &Snapshot,
    (routes, base): (&[(Target, usize)], PathBuf),
) -> Result<(Schedule, Vec<Option<Output>>), BuildError> {
    let modules = modules(req, snapshot, &base)?;
    for m in &modules {
        let files = crate::owned::ModuleFiles::new(&req.ask.out_dir, &m.name);
        crate::owned::may_write(&files, &m.name).map_err(BuildError::of)?;
    }
    let std_headers = match nvrtc_route(req, routes) {
        Some(nvrtc) => {
            nvrtc_refusals(req, &modules, &nvrtc)?;
            Some(
                fatkit_toolchain::std_headers::dir(req.with.cache.root())
                    .map_err(super::io_err(req.with.cache.root()))?,
            )
        }
        None => None,
    };
    let jobs = jobs(
        req,
        snapshot,
        &modules,
        routes,
        (std_headers.as_deref(), &base),
    );
    let cached = cached(req, &jobs);
    let to_compile: Vec<&Module> = modules
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            jobs.iter()
                .zip(&cached)
                .any(|(j, o)| j.module == *i && o.is_none())
        })
        .map(|(_, m)| m)
        .collect();
    read_headers(req, snapshot, &to_compile)?;
    let mut schedule = Schedule {
        base,
        modules,
        jobs,
        calls: Vec::new(),
    };
    schedule.calls = calls_to_run(req, &schedule, &cached);
    Ok((schedule, cached))
}

/// Each job's output from the cache, where it is there: the object its key names, and the
/// headers its last compile read.
fn cached(req: &Request, jobs: &[Job]) -> Vec<Option<Output>> {
    jobs.iter()
        .map(|j| {
            let image = req.with.cache.object(j.object_key.as_ref()?)?;
            Some(Output {
                image,
                deps: j.deps.clone(),
            })
        })
        .collect()
}

/// The base of a request's schedule ([`Schedule::base`]).
pub(crate) fn base(req: &Request) -> PathBuf {
    std::fs::canonicalize(&req.ask.root).unwrap_or_else(|_| req.ask.root.clone())
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

/// The modules of a request: each source canonicalised, read into the build's snapshot
/// (hashed) and named; two sources making one module name are refused.
fn modules(req: &Request, snapshot: &Snapshot, base: &Path) -> Result<Vec<Module>, BuildError> {
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
fn jobs(
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
fn read_headers(req: &Request, snapshot: &Snapshot, modules: &[&Module]) -> Result<(), BuildError> {
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

mod args;
pub use args::gencode;
use args::{arch_list, job_args};
pub(crate) use args::{
    arch_list_args, ccbin_args, include_and_defines, nvcc_args, nvcc_path, relative,
};

mod calls;
use calls::calls_to_run;
pub(crate) use calls::Call;

mod preflight;
pub(crate) use preflight::preflight;

mod nvrtc;
pub(crate) use nvrtc::{host_code, nvrtc_refusals, nvrtc_route, HOST_CODE_SCAN_LIMIT};

#[cfg(test)]
mod tests;
