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

/// Runs the build, one phase after the other, each handing the next a value: the schedule
/// (every module, every job with its arguments and cache key), what the cache holds of it,
/// the compiler calls of the rest and what they gave, then each module checked, bundled and
/// written. Compile errors land in the report; only problems that stop the whole build
/// (nothing can build a target, unreadable sources, unwritable outputs) are errors.
pub fn build(req: &Request, on_event: &(dyn Fn(&Event) + Sync)) -> Result<Report, BuildError> {
    let start = Instant::now();
    let routes = route(&req.ask.profile, &req.with.toolchains)?;
    // Where every compiler runs and what paths are named relative to, found once.
    let base = schedule::base(req);
    let out_lock = schedule::preflight(req, &base)?;
    cache::remove_stale_scratch(req.with.cache.root());
    // The build's one reading of every source and header (snapshot.rs).
    let snapshot = snapshot::Snapshot::default();
    let (schedule, cached) = schedule::plan(req, &snapshot, (&routes, base))?;
    let compiled = compile::run(req, &snapshot, &schedule, cached, on_event);
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
        let report = bundle::finish(req, &snapshot, m, &mine, on_event, &mut failures)?;
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
