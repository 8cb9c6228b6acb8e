//! `build-kernels`: profile x sources -> [`schedule`] (routes and jobs) -> [`compile`] (nvcc and
//! NVRTC in parallel, through the cache) -> [`bundle`] (one fatbin, manifest and Rust module
//! per source, written atomically).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use fatkit_arch::toolkit::CudaVersion;
use fatkit_arch::{Compiler, Target, TargetSet};
use serde::Serialize;

use crate::cache;

pub mod bundle;
pub mod compile;
mod diagnostic;
mod failure;
mod host_call;
mod nvcc_call;
mod nvrtc_call;
mod probes;
mod request;
mod resolution;
pub mod schedule;
mod snapshot;

pub use bundle::{ModuleReport, ModuleStatus};
pub use compile::{Failure, FailureKind};
pub use failure::{SomeTargets, Status};
pub use request::{Ask, BuildEnv, HostObject, Request, Resources};
pub use schedule::{gencode, module_name, route, sources_in, PlanError};

/// The symbol a host-code library `library` defines at the start of module `module`'s fatbin.
pub(crate) fn linked_symbol(library: &str, module: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect()
    };
    format!("fatkit_fatbin_{}_{}", clean(library), clean(module))
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

/// What would make the whole build fail after compiling, checked before: a path nvcc would
/// read changed (not UTF-8), an unwritable cache or output directory. One error (exit 2)
/// instead of one failure per job. Returns the output directory's lock.
fn preflight(req: &Request) -> Result<fatkit_package::out::DirLock, BuildError> {
    // Paths reach nvcc as text: one that is not UTF-8 would reach it changed.
    let base = req.with.launcher.is_some().then_some(&req.ask.root);
    let search: Vec<PathBuf> = req
        .ask
        .sources
        .iter()
        .flat_map(|s| req.ask.header_search(s))
        .collect();
    for path in req
        .ask
        .sources
        .iter()
        .chain(&search)
        .chain(std::iter::once(&req.with.cache.root().to_path_buf()))
        .chain(base)
    {
        if path.to_str().is_none() {
            return Err(crate::refused::Refused::NotUtf8Path(path.clone()).into());
        }
    }
    shell_refusals(req)?;
    // What the build writes is checked before anything compiles: an unwritable cache or
    // output directory is one error (exit 2), not one failure per job after the compiles.
    let scratch = req.with.cache.root().join("tmp");
    fatkit_package::out::check_writable(&scratch).map_err(|e| {
        BuildError::from(crate::refused::Refused::CacheUnwritable {
            cache: req.with.cache.root().to_owned(),
            source: e,
        })
    })?;
    fatkit_package::out::no_file_in_the_way(&req.ask.out_dir).map_err(|e| {
        BuildError::from(crate::refused::Refused::NotAnOutDir {
            dir: req.ask.out_dir.clone(),
            source: e,
        })
    })?;
    fatkit_package::out::DirLock::open(&req.ask.out_dir)
        .and_then(|lock| fatkit_package::out::check_writable(&req.ask.out_dir).map(|()| lock))
        .map_err(|e| {
            BuildError::from(crate::refused::Refused::OutDirUnwritable {
                dir: req.ask.out_dir.clone(),
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
    let root = std::fs::canonicalize(&req.ask.root).unwrap_or_else(|_| req.ask.root.clone());
    let refuse = |path: &std::path::Path, given: &str, what: &'static str| {
        BuildError::from(crate::refused::Refused::ShellPath {
            shown: fatkit_fatbin::printable(&path.display().to_string()).into_owned(),
            what,
            given: given.to_owned(),
        })
    };
    for source in &req.ask.sources {
        let canonical = std::fs::canonicalize(source).unwrap_or_else(|_| source.clone());
        let given = schedule::nvcc_path(&canonical, Some(&root));
        if !path_safe(&given) {
            return Err(refuse(source, &given, "source"));
        }
    }
    for dir in &req.ask.include_dirs {
        let given = schedule::nvcc_path(dir, Some(&root));
        if !path_safe(&given) {
            return Err(refuse(dir, &given, "include directory"));
        }
    }
    for define in &req.ask.defines {
        if let Some(why) = define_refusal(define) {
            return Err(crate::refused::Refused::ShellDefine {
                shown: fatkit_fatbin::printable(define).into_owned(),
                why,
            }
            .into());
        }
    }
    let cache = req.with.cache.root();
    if !path_safe(&cache.display().to_string()) {
        return Err(crate::refused::Refused::ShellCache {
            shown: fatkit_fatbin::printable(&cache.display().to_string()).into_owned(),
        }
        .into());
    }
    for host in &req.ask.host_objects {
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

/// The schedule of a request: its modules (a file in a module's place that fatkit could not
/// have written refused now, not after the compiles; the same check runs again, with the new
/// bytes, when writing), NVRTC's refusals where it builds a target, and every job.
fn plan(
    req: &Request,
    snapshot: &snapshot::Snapshot,
    routes: &[(Target, usize)],
) -> Result<schedule::Schedule, BuildError> {
    let base = schedule::base(req);
    let modules = schedule::modules(req, snapshot, &base)?;
    for m in &modules {
        let files = crate::owned::ModuleFiles::new(&req.ask.out_dir, &m.name);
        crate::owned::may_write(&files, &m.name).map_err(BuildError::of)?;
    }
    let std_headers = match schedule::nvrtc_route(req, routes) {
        Some(nvrtc) => {
            schedule::nvrtc_refusals(req, &modules, &nvrtc)?;
            Some(
                fatkit_toolchain::std_headers::dir(req.with.cache.root())
                    .map_err(io_err(req.with.cache.root()))?,
            )
        }
        None => None,
    };
    let jobs = schedule::jobs(
        req,
        snapshot,
        &modules,
        routes,
        (std_headers.as_deref(), &base),
    );
    Ok(schedule::Schedule {
        base,
        modules,
        jobs,
    })
}

/// Runs the build, one phase after the other, each handing the next a value: the schedule
/// (every module, every job with its arguments and cache key), what the cache holds of it,
/// the compiler calls of the rest and what they gave, then each module checked, bundled and
/// written. Compile errors land in the report; only problems that stop the whole build
/// (nothing can build a target, unreadable sources, unwritable outputs) are errors.
pub fn build(req: &Request, on_event: &(dyn Fn(&Event) + Sync)) -> Result<Report, BuildError> {
    let start = Instant::now();
    let routes = route(&req.ask.profile, &req.with.toolchains)?;
    let out_lock = preflight(req)?;
    cache::remove_stale_scratch(req.with.cache.root());
    // The build's one reading of every source and header (snapshot.rs).
    let snapshot = snapshot::Snapshot::default();
    let schedule = plan(req, &snapshot, &routes)?;
    let outputs = compile::cached(req, &schedule.jobs);
    // The headers of the modules to compile, read before any compile starts; a FIFO or a
    // device among them is refused now.
    let to_compile: Vec<&schedule::Module> = schedule
        .modules
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            schedule
                .jobs
                .iter()
                .zip(&outputs)
                .any(|(j, o)| j.module == *i && o.is_none())
        })
        .map(|(_, m)| m)
        .collect();
    schedule::read_headers(req, &snapshot, &to_compile)?;
    let calls = schedule::calls_to_run(req, &schedule, &outputs);
    let compiled = compile::run(req, &snapshot, (&schedule, calls), outputs, on_event);
    let (modules, jobs) = (&schedule.modules, &schedule.jobs);
    let mut failures = compiled.failures;
    let jobs_failed = failures.len();
    let some_targets = failure::SomeTargets::of(
        jobs.iter().zip(&compiled.outputs).filter_map(|(j, o)| {
            let m = modules.get(j.module)?;
            Some((m.path.as_path(), j.target, o.is_none()))
        }),
        &req.ask.profile.all_targets(),
    );

    // From here until it returns, this build alone writes modules into the directory.
    out_lock.hold().map_err(io_err(&req.ask.out_dir))?;
    fatkit_package::out::remove_stale_temporaries(&req.ask.out_dir);
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
        profile: req.ask.profile.name.clone(),
        out_dir: req.ask.out_dir.clone(),
        routes: route_reports(req, &routes),
        launcher: req
            .with
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
            let toolchain = req.with.toolchains.get(j.toolchain)?;
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
    let absent: Vec<PathBuf> = match &req.ask.stamp {
        Some(_) => {
            let search: Vec<PathBuf> = req
                .ask
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
            let (t, p) = req.with.toolchains.get(tc)?;
            Some(RouteReport {
                toolchain: t.describe(Some(p)),
                compiler: p.compiler,
                version: p.version,
                why: if targets
                    .iter()
                    .all(|t| req.ask.profile.pins.contains_key(&t))
                {
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
