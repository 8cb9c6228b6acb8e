//! `build-kernels`: profile x sources -> [`schedule`] (routes and jobs) -> [`compile`] (nvcc and
//! NVRTC in parallel, through the cache) -> [`bundle`] (one fatbin, manifest and Rust module
//! per source, written atomically).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use fatkit_arch::profile::Profile;
use fatkit_arch::toolkit::CudaVersion;
use fatkit_arch::{Compiler, Target, TargetSet};
use serde::Serialize;

use crate::cache::{self, Cache};
use fatkit_toolchain::{Probe, Toolchain};

pub mod bundle;
pub mod compile;
mod diagnostic;
mod failure;
mod host_call;
mod nvcc_call;
mod nvrtc_call;
mod probes;
mod resolution;
pub mod schedule;
mod snapshot;

pub use bundle::{ModuleReport, ModuleStatus};
pub use compile::{Failure, FailureKind};
pub use failure::{SomeTargets, Status};
pub use schedule::{gencode, module_name, route, sources_in, PlanError};

/// Everything a build needs.
#[derive(Clone, Debug)]
pub struct Request {
    pub profile: Profile,
    /// The `.cu` files; each is one module, named after its stem.
    pub sources: Vec<PathBuf>,
    pub include_dirs: Vec<PathBuf>,
    /// `NAME` or `NAME=VALUE`.
    pub defines: Vec<String>,
    /// Compile options in nvcc's spelling, translated for each compiler; part of every cache
    /// key.
    pub flags: fatkit_package::flags::Flags,
    pub out_dir: PathBuf,
    /// Sources are named relative to this in manifests (the workspace root).
    pub root: PathBuf,
    /// Parallel compiles.
    pub jobs: usize,
    /// The longest one nvcc job may run before it is killed ([`job_timeout`]).
    pub job_timeout: std::time::Duration,
    pub cache: Cache,
    /// The toolchains to route targets to, probed.
    pub toolchains: Vec<(Toolchain, Probe)>,
    /// Module names other than the source's stem, by source path as given in `sources`.
    pub module_names: BTreeMap<PathBuf, String>,
    /// Kernels built for some targets only, as declared; the kernel-list check holds every
    /// image to them.
    pub kernel_sets: fatkit_package::kernel_sets::KernelSets,
    /// Sources built for some targets of the profile only, by source path as given in
    /// `sources` (their declarations in `kernel_sets.files`, resolved by
    /// [`fatkit_package::kernel_sets::KernelSets::files_of`]).
    pub source_targets: BTreeMap<PathBuf, fatkit_package::kernel_sets::FileRule>,
    /// For a `[package.metadata.fatkit]` package: record each module's inputs in its
    /// manifest, for the package's build-script check.
    pub stamp: Option<fatkit_package::prebuilt::Stamp>,
    /// The program nvcc's cubin jobs run under (sccache), found and checked.
    pub launcher: Option<fatkit_toolchain::launcher::Launcher>,
    /// For a host-code library (`Build::compile_library`): its name. Each generated module's
    /// `FATBIN` is then the library's copy (`linked_symbol`), not an `include_bytes!`.
    pub library: Option<String>,
    /// Cargo's jobserver, in a build script: every parallel job beyond the first holds one
    /// of its tokens while it runs.
    pub tokens: Option<std::sync::Arc<jobserver::Client>>,
    /// For a host-code library: the host object of each source, compiled among the jobs
    /// (`compile::host_calls`); empty otherwise.
    pub host_objects: Vec<HostObject>,
}

/// A host object of a library ([`Request::host_objects`]): `nvcc -c` of a module's source,
/// whose stub registers the module's kernels; its device code is replaced by the module's
/// fatbin afterwards (docs/BUILDS.md, "Host-code libraries").
#[derive(Clone, Debug)]
pub struct HostObject {
    /// The module, by name.
    pub module: String,
    /// Where nvcc writes it.
    pub object: PathBuf,
    /// The nvcc that compiles it (an index into [`Request::toolchains`]) and the PTX target it
    /// is compiled for when it builds none of the module's images.
    pub toolchain: usize,
    pub target: Target,
}

/// The symbol a host-code library `library` defines at the start of module `module`'s fatbin.
pub(crate) fn linked_symbol(library: &str, module: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect()
    };
    format!("fatkit_fatbin_{}_{}", clean(library), clean(module))
}

impl Request {
    /// The module a source makes (`given` as it is in `sources`, `canonical` the file it
    /// resolves to): its name in `module_names`, else the resolved file's stem. The one rule,
    /// for the build's modules and for a host-code library's objects.
    pub(crate) fn module_name_of(
        &self,
        given: &std::path::Path,
        canonical: &std::path::Path,
    ) -> String {
        self.module_names
            .get(given)
            .cloned()
            .unwrap_or_else(|| schedule::module_name(canonical))
    }

    /// Where `source`'s local headers are looked for, in order: its own directory, the
    /// include directories, then the flags' `-I` directories. The one search: the NVRTC
    /// compile's `-I` list starts with it (`schedule::nvrtc_args`), and the include scans for
    /// the cache key and the recorded inputs use it, so no header the compile reads is
    /// missing from either.
    pub fn header_search(&self, source: &std::path::Path) -> Vec<PathBuf> {
        let mut search: Vec<PathBuf> = source.parent().map(PathBuf::from).into_iter().collect();
        search.extend(self.include_dirs.iter().cloned());
        search.extend(self.flags.include_dirs());
        search
    }
}

pub(crate) use fatkit_package::error::io_err;
pub use fatkit_package::error::BuildError;

/// Progress, as it happens.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    Planned {
        jobs: usize,
        cached: usize,
        to_run: usize,
    },
    JobFinished {
        source: String,
        target: Target,
        ok: bool,
        seconds: f64,
        done: usize,
        to_run: usize,
    },
    ModuleWritten {
        module: String,
        fatbin: PathBuf,
        changed: bool,
    },
}

/// Which toolchain built which targets.
#[derive(Clone, Debug, Serialize)]
pub struct RouteReport {
    pub toolchain: String,
    pub compiler: Compiler,
    pub version: CudaVersion,
    /// `pinned` when the profile named it for every one of these targets, else `newest`.
    pub why: &'static str,
    /// nvcc's host compiler and why it was chosen.
    pub host: Option<String>,
    pub targets: TargetSet,
}

/// What a build did.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub profile: String,
    pub out_dir: PathBuf,
    pub routes: Vec<RouteReport>,
    /// The launcher cubin jobs ran under: `sccache 0.19.0 (FATKIT_LAUNCHER: /path)`.
    pub launcher: Option<String>,
    pub jobs_total: usize,
    pub jobs_cached: usize,
    pub jobs_run: usize,
    pub jobs_failed: usize,
    /// The compiler calls that ran `jobs_run` and a library's host objects: fewer where a PTX
    /// target shared the nvcc call of its cubin or a host object built a module's images on
    /// the way (docs/BUILDS.md), more where a shared call failed and ran again per target.
    pub compiler_calls: usize,
    pub wall_seconds: f64,
    /// The sum of the compile times of the jobs that ran.
    pub job_seconds: f64,
    pub modules: Vec<ModuleReport>,
    pub failures: Vec<Failure>,
    /// Sources that compiled for some of their targets and failed for the others, with the
    /// declaration that would build them for those alone.
    pub some_targets: Vec<failure::SomeTargets>,
}

/// How long one nvcc job may run: `FATKIT_JOB_TIMEOUT` (seconds, or `90s`, `30m`, `2h`), else
/// an hour (the slowest real compiles, CUTLASS kernels for one target, take minutes). A job
/// past it is killed with its compiler's children and fails, naming the variable.
pub fn job_timeout() -> Result<std::time::Duration, BuildError> {
    match std::env::var("FATKIT_JOB_TIMEOUT") {
        Err(_) => Ok(std::time::Duration::from_secs(3600)),
        Ok(v) => parse_timeout(&v)
            .ok_or_else(|| BuildError::from(crate::refused::Refused::JobTimeout(v.clone()))),
    }
}

/// `3600`, `90s`, `30m`, `2h`; never zero.
fn parse_timeout(text: &str) -> Option<std::time::Duration> {
    let t = text.trim();
    let (number, unit) = match t.char_indices().last() {
        Some((at, 's')) => (t.get(..at)?, 1),
        Some((at, 'm')) => (t.get(..at)?, 60),
        Some((at, 'h')) => (t.get(..at)?, 3600),
        _ => (t, 1),
    };
    number
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .filter(|&s| s > 0)
        .map(std::time::Duration::from_secs)
}

/// What would make the whole build fail after compiling, checked before: a path nvcc would
/// read changed (not UTF-8), an unwritable cache or output directory. One error (exit 2)
/// instead of one failure per job. Returns the output directory's lock.
fn preflight(req: &Request) -> Result<fatkit_package::out::DirLock, BuildError> {
    // Paths reach nvcc as text: one that is not UTF-8 would reach it changed.
    let base = req.launcher.is_some().then_some(&req.root);
    let search: Vec<PathBuf> = req
        .sources
        .iter()
        .flat_map(|s| req.header_search(s))
        .collect();
    for path in req
        .sources
        .iter()
        .chain(&search)
        .chain(std::iter::once(&req.cache.root().to_path_buf()))
        .chain(base)
    {
        if path.to_str().is_none() {
            return Err(crate::refused::Refused::NotUtf8Path(path.clone()).into());
        }
    }
    shell_refusals(req)?;
    // What the build writes is checked before anything compiles: an unwritable cache or
    // output directory is one error (exit 2), not one failure per job after the compiles.
    let scratch = req.cache.root().join("tmp");
    fatkit_package::out::check_writable(&scratch).map_err(|e| {
        BuildError::from(crate::refused::Refused::CacheUnwritable {
            cache: req.cache.root().to_owned(),
            source: e,
        })
    })?;
    fatkit_package::out::no_file_in_the_way(&req.out_dir).map_err(|e| {
        BuildError::from(crate::refused::Refused::NotAnOutDir {
            dir: req.out_dir.clone(),
            source: e,
        })
    })?;
    fatkit_package::out::DirLock::open(&req.out_dir)
        .and_then(|lock| fatkit_package::out::check_writable(&req.out_dir).map(|()| lock))
        .map_err(|e| {
            BuildError::from(crate::refused::Refused::OutDirUnwritable {
                dir: req.out_dir.clone(),
                source: e,
            })
        })
}

/// What nvcc would hand its shell unquoted (it quotes nothing), refused before anything
/// compiles: every source and include directory as nvcc is given it ([`schedule::nvcc_path`]),
/// every define, the cache (its scratch directories hold nvcc's outputs) and a library's host
/// objects must be [`fatkit_package::flags::path_safe`]. Flags were checked when parsed
/// ([`fatkit_package::flags::Flags::parse`]); `run_nvcc` checks every argument once more.
fn shell_refusals(req: &Request) -> Result<(), BuildError> {
    use fatkit_package::flags::{define_refusal, path_safe};
    let root = std::fs::canonicalize(&req.root).unwrap_or_else(|_| req.root.clone());
    let refuse = |path: &std::path::Path, given: &str, what: &'static str| {
        BuildError::from(crate::refused::Refused::ShellPath {
            shown: fatkit_fatbin::printable(&path.display().to_string()).into_owned(),
            what,
            given: given.to_owned(),
        })
    };
    for source in &req.sources {
        let canonical = std::fs::canonicalize(source).unwrap_or_else(|_| source.clone());
        let given = schedule::nvcc_path(&canonical, Some(&root));
        if !path_safe(&given) {
            return Err(refuse(source, &given, "source"));
        }
    }
    for dir in &req.include_dirs {
        let given = schedule::nvcc_path(dir, Some(&root));
        if !path_safe(&given) {
            return Err(refuse(dir, &given, "include directory"));
        }
    }
    for define in &req.defines {
        if let Some(why) = define_refusal(define) {
            return Err(crate::refused::Refused::ShellDefine {
                shown: fatkit_fatbin::printable(define).into_owned(),
                why,
            }
            .into());
        }
    }
    let cache = req.cache.root();
    if !path_safe(&cache.display().to_string()) {
        return Err(crate::refused::Refused::ShellCache {
            shown: fatkit_fatbin::printable(&cache.display().to_string()).into_owned(),
        }
        .into());
    }
    for host in &req.host_objects {
        if !path_safe(&host.object.display().to_string()) {
            return Err(refuse(
                &host.object,
                &host.object.display().to_string(),
                "host object",
            ));
        }
    }
    Ok(())
}

/// Runs the build. Compile errors land in the report; only problems that stop the whole build
/// (nothing can build a target, unreadable sources, unwritable outputs) are errors.
pub fn build(req: &Request, on_event: &(dyn Fn(&Event) + Sync)) -> Result<Report, BuildError> {
    let start = Instant::now();
    let routes = route(&req.profile, &req.toolchains)?;
    let out_lock = preflight(req)?;
    cache::remove_stale_scratch(req.cache.root());
    // The build's one reading of every source and header (snapshot.rs).
    let snapshot = snapshot::Snapshot::default();
    let modules = schedule::modules(req, &snapshot)?;
    // A file in a module's place that fatkit could not have written is refused now, not
    // after the compiles (the same check runs again, with the new bytes, when writing).
    for m in &modules {
        let files = crate::owned::ModuleFiles::new(&req.out_dir, &m.name);
        crate::owned::may_write(&files, &m.name).map_err(BuildError::of)?;
    }
    let std_headers = match schedule::nvrtc_route(req, &routes) {
        Some(nvrtc) => {
            schedule::nvrtc_refusals(req, &modules, &nvrtc)?;
            Some(
                fatkit_toolchain::std_headers::dir(req.cache.root())
                    .map_err(io_err(req.cache.root()))?,
            )
        }
        None => None,
    };
    let jobs = schedule::jobs(req, &snapshot, &modules, &routes, std_headers.as_deref());
    let outputs = compile::cached(req, &jobs);
    // The headers of the modules to compile, read before any compile starts; a FIFO or a
    // device among them is refused now.
    let to_compile: Vec<&schedule::Module> = modules
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            jobs.iter()
                .zip(&outputs)
                .any(|(j, o)| j.module == *i && o.is_none())
        })
        .map(|(_, m)| m)
        .collect();
    schedule::read_headers(req, &snapshot, &to_compile)?;
    let compiled = compile::run(req, &snapshot, (&modules, &jobs), outputs, on_event);
    let mut failures = compiled.failures;
    let jobs_failed = failures.len();
    let some_targets = failure::SomeTargets::of(
        jobs.iter().zip(&compiled.outputs).filter_map(|(j, o)| {
            let m = modules.get(j.module)?;
            Some((m.path.as_path(), j.target, o.is_none()))
        }),
        &req.profile.all_targets(),
    );

    // From here until it returns, this build alone writes modules into the directory.
    out_lock.hold().map_err(io_err(&req.out_dir))?;
    fatkit_package::out::remove_stale_temporaries(&req.out_dir);
    let mut module_reports = Vec::new();
    for (module_idx, m) in modules.iter().enumerate() {
        let mine: Vec<(&schedule::Job, Option<&compile::Output>)> = jobs
            .iter()
            .zip(&compiled.outputs)
            .filter(|(j, _)| j.module == module_idx)
            .map(|(j, o)| (j, o.as_ref()))
            .collect();
        let report = finish_module(req, &snapshot, m, &mine, on_event, &mut failures)?;
        module_reports.push(report);
    }
    failures.sort_by(|a, b| (&a.source, a.target).cmp(&(&b.source, b.target)));
    Ok(Report {
        profile: req.profile.name.clone(),
        out_dir: req.out_dir.clone(),
        routes: route_reports(req, &routes),
        launcher: req
            .launcher
            .as_ref()
            .map(fatkit_toolchain::launcher::Launcher::describe),
        jobs_total: jobs.len(),
        jobs_cached: compiled.cached,
        jobs_run: compiled.run,
        jobs_failed,
        compiler_calls: compiled.calls,
        wall_seconds: start.elapsed().as_secs_f64(),
        job_seconds: compiled.job_seconds,
        modules: module_reports,
        failures,
        some_targets,
    })
}

/// Module `m` from its jobs' images (`mine`; any missing, it failed): held to its declared
/// kernel sets, to what the driver would find, and to one parameter layout per kernel (each
/// disagreement a failure), then bundled and written.
fn finish_module(
    req: &Request,
    snapshot: &snapshot::Snapshot,
    m: &schedule::Module,
    mine: &[(&schedule::Job, Option<&compile::Output>)],
    on_event: &(dyn Fn(&Event) + Sync),
    failures: &mut Vec<Failure>,
) -> Result<ModuleReport, BuildError> {
    // The headers every image was built from, as each compile read them.
    let mut headers: Vec<PathBuf> = mine
        .iter()
        .filter_map(|(_, o)| o.map(|o| o.deps.clone()))
        .flatten()
        .collect();
    headers.sort();
    headers.dedup();
    if mine.iter().any(|(_, o)| o.is_none()) {
        return Ok(ModuleReport::failed(m, headers));
    }
    let mut empty = Vec::new();
    let images: Vec<bundle::Image<'_>> = mine
        .iter()
        .filter_map(|(j, o)| {
            let data = o.map(|o| o.image.as_slice())?;
            let read = bundle::image_kernels(j.target, data);
            let toolchain = req.toolchains.get(j.toolchain)?;
            empty.push(read.empty);
            Some(bundle::Image {
                target: j.target,
                data,
                toolchain,
                params: bundle::image_params(j.target, data),
                kernels: read.kernels,
                stubs: Vec::new(),
                ptx_isa: read.ptx_isa,
            })
        })
        .collect();
    // A kernel whose body is compiled out of an image is not in it for the checks below: it
    // must be declared away from that target like a kernel absent there.
    let images = bundle::with_stubs(images, &empty);
    let checked = bundle::check_kernel_sets(req, m, &images)
        .and_then(|declared| {
            bundle::check_driver_view(req, m, &images, &declared).map(|()| declared)
        })
        .and_then(|declared| bundle::check_params(m, &images).map(|params| (declared, params)));
    let (declared, params) = match checked {
        Ok(checked) => checked,
        Err(disagreements) => {
            failures.extend(disagreements);
            return Ok(ModuleReport::failed(m, headers));
        }
    };
    // What the manifest records of the module's inputs: the bytes this build read.
    let inputs: Vec<(PathBuf, String)> = std::iter::once(&m.path)
        .chain(&headers)
        .map(|p| {
            let sha256 = match snapshot.sha256_of(p) {
                Some(s) => s,
                None => {
                    snapshot
                        .hash(p)
                        .map_err(|c| crate::refused::Refused::Changed(c.message()))?
                        .sha256
                }
            };
            Ok((p.clone(), sha256))
        })
        .collect::<Result<_, BuildError>>()?;
    // The project's files its compiles looked for and did not find, for the build-script
    // check of a vendored package (the toolchain's own misses are the cache's business).
    let absent: Vec<PathBuf> = match &req.stamp {
        Some(_) => {
            let search: Vec<PathBuf> = req
                .header_search(&m.path)
                .into_iter()
                .map(|d| std::fs::canonicalize(&d).unwrap_or(d))
                .collect();
            let mut read = vec![m.path.clone()];
            read.extend(headers.iter().cloned());
            probes::absent(&read, &headers, &search)
                .map_err(|c| crate::refused::Refused::Changed(c.message()))?
        }
        None => Vec::new(),
    };
    let mut report = bundle::bundle(req, m, &images, (&declared, &params), (&inputs, &absent))?;
    report.headers = headers;
    if let Some(fatbin) = &report.fatbin {
        on_event(&Event::ModuleWritten {
            module: m.name.clone(),
            fatbin: fatbin.clone(),
            changed: report.status == ModuleStatus::Built,
        });
    }
    Ok(report)
}

/// Which toolchain built which targets, and why.
fn route_reports(req: &Request, routes: &[(Target, usize)]) -> Vec<RouteReport> {
    let mut by_toolchain: BTreeMap<usize, TargetSet> = BTreeMap::new();
    for (target, tc) in routes {
        by_toolchain.entry(*tc).or_default().insert(*target);
    }
    by_toolchain
        .into_iter()
        .filter_map(|(tc, targets)| {
            let (t, p) = req.toolchains.get(tc)?;
            Some(RouteReport {
                toolchain: t.describe(Some(p)),
                compiler: p.compiler,
                version: p.version,
                why: if targets.iter().all(|t| req.profile.pins.contains_key(&t)) {
                    "pinned"
                } else {
                    "newest"
                },
                host: p
                    .host
                    .as_ref()
                    .map(|h| format!("{} ({})", h.version, h.why)),
                targets,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn timeouts_in_seconds_or_with_a_unit() {
        let secs = |t: &str| super::parse_timeout(t).map(|d| d.as_secs());
        assert_eq!(secs("3600"), Some(3600));
        assert_eq!(secs(" 90s "), Some(90));
        assert_eq!(secs("30m"), Some(1800));
        assert_eq!(secs("2h"), Some(7200));
        for bad in ["", "0", "10x", "m", "-5", "1.5h", "99999999999999999999h"] {
            assert_eq!(secs(bad), None, "{bad:?}");
        }
    }
}
