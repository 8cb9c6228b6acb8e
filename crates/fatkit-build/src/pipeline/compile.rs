//! Running the jobs: a pool of as many workers as compiles may run at once, taking the compiler
//! calls longest first. A call is one job, one (source, target): an nvcc `-cubin` (under the
//! launcher, if one is set), an nvcc `--fatbin` for PTX, or an in-process NVRTC compile; except
//! that without a launcher a PTX target and the cubin of its virtual architecture (compute_120
//! and sm_120) share one `nvcc --fatbin`, which runs that architecture's front end once, as nvcc
//! does for its own `-gencode` list. A library's host objects are calls too, each building its
//! module's images of one architecture on the way. The calls, with their arguments, are the
//! schedule's (`schedule::calls`): run here as they are given. So every job
//! reports its own time, a failure names its own target, and the cores stay busy to the end.
//! Every image is stored in the cache with the headers it read.

use crate::pipeline::failure::Status;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

pub(crate) use super::failure::Output;
use super::failure::{CallResult, CompileResult};
pub use super::failure::{Failure, FailureKind};
use super::nvcc_call::compile_nvcc;
use super::schedule::{Call, Job, Module, Schedule};
use super::snapshot::Snapshot;
use super::{Event, Request};
use fatkit_toolchain::Toolchain;

/// What running the jobs gave: per job its image (cached or compiled), the failures, and
/// the compile time spent.
pub(crate) struct Compiled {
    pub outputs: Vec<Option<Output>>,
    pub failures: Vec<Failure>,
    pub job_seconds: f64,
    pub cached: usize,
    pub run: usize,
    /// The compiler calls that ran them ([`calls`]), a failed shared call and its reruns
    /// included.
    pub calls: usize,
}

/// Runs the schedule: the jobs not found in the cache (`outputs`) compiled in parallel, in
/// the schedule's calls (longest first), each checked against the build's `snapshot` of its
/// inputs.
pub(crate) fn run(
    req: &Request,
    snapshot: &Snapshot,
    schedule: &Schedule,
    mut outputs: Vec<Option<Output>>,
    on_event: &(dyn Fn(&Event) + Sync),
) -> Compiled {
    let (modules, jobs) = (schedule.modules.as_slice(), schedule.jobs.as_slice());
    let to_run: Vec<usize> = (0..jobs.len())
        .filter(|&i| outputs.get(i).is_some_and(Option::is_none))
        .collect();
    let cached = jobs.len() - to_run.len();
    on_event(&Event::Planned {
        jobs: jobs.len(),
        cached,
        to_run: to_run.len(),
    });
    let n_workers = req.with.jobs.max(1).min(schedule.calls.len());
    let pool = Pool {
        req,
        snapshot,
        modules,
        jobs,
        base: Some(schedule.base.clone()),
        on_event,
        queue: Mutex::new(schedule.calls.iter().cloned().collect()),
        results: Mutex::new(Vec::new()),
        host_failures: Mutex::new(Vec::new()),
        done: Mutex::new(0),
        to_run: to_run.len(),
        n_calls: AtomicUsize::new(0),
    };
    std::thread::scope(|scope| {
        for worker in 0..n_workers {
            let pool = &pool;
            scope.spawn(move || pool.work(worker));
        }
    });
    let mut failures = Vec::new();
    let mut job_seconds = 0.0;
    for (idx, res) in pool.results.into_inner().unwrap_or_default() {
        match res {
            Ok((output, took)) => {
                job_seconds += took.as_secs_f64();
                if let Some(slot) = outputs.get_mut(idx) {
                    *slot = Some(output);
                }
            }
            Err(f) => failures.push(*f),
        }
    }
    // After the device failures: where both failed, the device's is the one that says why.
    failures.extend(pool.host_failures.into_inner().unwrap_or_default());
    Compiled {
        outputs,
        failures,
        job_seconds,
        cached,
        run: to_run.len(),
        calls: pool.n_calls.into_inner(),
    }
}

/// What the workers share: the calls still to start, and what the finished ones gave.
struct Pool<'a> {
    req: &'a Request,
    snapshot: &'a Snapshot,
    modules: &'a [Module],
    jobs: &'a [Job],
    base: Option<PathBuf>,
    on_event: &'a (dyn Fn(&Event) + Sync),
    queue: Mutex<std::collections::VecDeque<Call>>,
    results: Mutex<Vec<(usize, CompileResult)>>,
    host_failures: Mutex<Vec<Failure>>,
    done: Mutex<usize>,
    to_run: usize,
    n_calls: AtomicUsize,
}

impl Pool<'_> {
    /// Worker `worker`: takes calls until none is left. In a build script, every worker but the
    /// first runs a call only while it holds one of cargo's jobserver tokens (the first has the
    /// build script's own). It waits without blocking, so that it stops once the queue is
    /// empty even when no token comes (`cargo build -j1`).
    fn work(&self, worker: usize) {
        let (req, modules, jobs, base) = (self.req, self.modules, self.jobs, self.base.as_deref());
        let snap = self.snapshot;
        loop {
            let token = match (&req.with.tokens, worker) {
                (Some(client), 1..) => match wait_for_token(client, &self.queue) {
                    Some(token) => token,
                    None => break,
                },
                _ => None,
            };
            let next = self.queue.lock().ok().and_then(|mut q| q.pop_front());
            let Some(call) = next else { break };
            let outcomes = match call {
                Call::Jobs { jobs: call, argv } => compile_call(
                    (req, snap),
                    modules,
                    jobs,
                    (&call, &argv),
                    base,
                    &self.n_calls,
                ),
                Call::Host {
                    host,
                    jobs: call,
                    argv,
                } => {
                    let (outcomes, failed) = host_call(
                        (req, snap),
                        modules,
                        jobs,
                        (host, &call, &argv),
                        base,
                        &self.n_calls,
                    );
                    if let (Some(f), Ok(mut all)) = (failed, self.host_failures.lock()) {
                        all.push(*f);
                    }
                    outcomes
                }
            };
            drop(token);
            self.record(outcomes);
        }
    }

    /// Each job's outcome kept, and told as an event.
    fn record(&self, outcomes: Vec<(usize, CompileResult)>) {
        for (idx, res) in outcomes {
            let Some(job) = self.jobs.get(idx) else {
                continue;
            };
            let n_done = self.done.lock().map(|mut d| {
                *d += 1;
                *d
            });
            if let (Some(m), Ok(n_done)) = (self.modules.get(job.module), n_done) {
                (self.on_event)(&Event::JobFinished {
                    source: m
                        .path
                        .file_name()
                        .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                    target: job.target,
                    ok: res.is_ok(),
                    seconds: res.as_ref().map_or(0.0, |(_, d)| d.as_secs_f64()),
                    done: n_done,
                    to_run: self.to_run,
                });
            }
            if let Ok(mut r) = self.results.lock() {
                r.push((idx, res));
            }
        }
    }
}

/// Runs host object `h` of `req` with the jobs `call` (indices into `jobs`). Returns each job's
/// outcome and the host compile's failure, if it failed for a reason of its own: a failed
/// call runs its jobs again one by one, and where one of them fails too, that failure says
/// why (the host failure is then not reported apart).
fn host_call(
    (req, snapshot): (&Request, &Snapshot),
    modules: &[Module],
    jobs: &[Job],
    (h, call, argv): (usize, &[usize], &[String]),
    base: Option<&Path>,
    n_calls: &AtomicUsize,
) -> (Vec<(usize, CompileResult)>, Option<Box<Failure>>) {
    let picked: Vec<&Job> = call.iter().filter_map(|&i| jobs.get(i)).collect();
    // `h` is an index of `req.ask.host_objects`, and `call` empty unless the module is found.
    let Some(host) = req.ask.host_objects.get(h) else {
        return (Vec::new(), None);
    };
    let module = modules.iter().find(|m| m.name == host.module);
    let nvcc = match req.with.toolchains.get(host.toolchain) {
        Some((Toolchain::Nvcc(nvcc), probe)) => Some((nvcc, probe)),
        _ => None,
    };
    let (Some(m), Some(nvcc)) = (module, nvcc) else {
        let failure = Box::new(Failure {
            source: module.map(|m| m.path.clone()).unwrap_or_default(),
            target: host.target,
            kind: FailureKind::HostCompile,
            toolchain: None,
            location: None,
            message: "a host object names no module or no nvcc of the build; report it".to_owned(),
            command: String::new(),
            status: Status::CouldNotStart,
            fix: None,
        });
        return (Vec::new(), Some(failure));
    };
    n_calls.fetch_add(1, Relaxed);
    let res = super::host_call::compile_host(req, snapshot, (m, &picked, argv), host, nvcc, base);
    let failed = res.as_ref().err().cloned();
    let outcomes = outcomes_of(
        (req, snapshot),
        modules,
        jobs,
        (call, &picked),
        res,
        base,
        n_calls,
    );
    // Its jobs' failures say why where they failed too (at the time limit, they all did).
    let failed = failed.filter(|_| outcomes.iter().all(|(_, r)| r.is_ok()));
    (outcomes, failed)
}

/// Each job's outcome of a call of `picked` (indices `call`) that gave `res`: its image, the
/// call's time shared among the jobs (each job's estimate for the next build); at the time
/// limit, the call's failure for each (run again, it would only wait as long again); any
/// other failure, each job run again alone, so that its failure names its own target and
/// compiler output.
fn outcomes_of(
    (req, snapshot): (&Request, &Snapshot),
    modules: &[Module],
    jobs: &[Job],
    (call, picked): (&[usize], &[&Job]),
    res: CallResult,
    base: Option<&Path>,
    n_calls: &AtomicUsize,
) -> Vec<(usize, CompileResult)> {
    match res {
        Ok((images, deps, took)) => {
            let each = took / u32::try_from(images.len()).unwrap_or(1).max(1);
            call.iter()
                .zip(images)
                .map(|(&i, image)| {
                    let deps = deps.clone();
                    (i, Ok((Output { image, deps }, each)))
                })
                .collect()
        }
        Err(f) if f.status == Status::TimedOut => call
            .iter()
            .zip(picked)
            .map(|(&i, job)| {
                let mut f = f.clone();
                f.target = job.target;
                f.kind = FailureKind::Compile;
                (i, Err(f))
            })
            .collect(),
        Err(_) => singly((req, snapshot), modules, jobs, call, base, n_calls),
    }
}

/// Each job of `call` compiled by a call of its own.
fn singly(
    (req, snapshot): (&Request, &Snapshot),
    modules: &[Module],
    jobs: &[Job],
    call: &[usize],
    base: Option<&Path>,
    n_calls: &AtomicUsize,
) -> Vec<(usize, CompileResult)> {
    call.iter()
        .filter_map(|&i| {
            n_calls.fetch_add(1, Relaxed);
            Some((i, compile((req, snapshot), modules, jobs.get(i)?, base)))
        })
        .collect()
}

/// Runs one call: its jobs' images, or their failures. A call of two jobs that fails is run
/// again as two, so that each failure names its own target and compiler output; one stopped
/// at the time limit is not (it would only wait twice as long).
fn compile_call(
    (req, snapshot): (&Request, &Snapshot),
    modules: &[Module],
    jobs: &[Job],
    (call, argv): (&[usize], &[String]),
    base: Option<&Path>,
    n_calls: &AtomicUsize,
) -> Vec<(usize, CompileResult)> {
    let picked: Vec<&Job> = call.iter().filter_map(|&i| jobs.get(i)).collect();
    let both = (req, snapshot);
    if picked.len() < 2 || picked.len() != call.len() {
        return singly(both, modules, jobs, call, base, n_calls);
    }
    let nvcc = picked.first().and_then(|j| {
        Some((
            modules.get(j.module)?,
            req.with.toolchains.get(j.toolchain)?,
        ))
    });
    let Some((m, (Toolchain::Nvcc(nvcc), probe))) = nvcc else {
        return singly(both, modules, jobs, call, base, n_calls);
    };
    n_calls.fetch_add(1, Relaxed);
    let res = compile_nvcc(req, snapshot, (m, &picked, argv), (nvcc, probe), base);
    outcomes_of(both, modules, jobs, (call, &picked), res, base, n_calls)
}

/// Compiles one job with its toolchain.
pub(super) fn compile(
    (req, snapshot): (&Request, &Snapshot),
    modules: &[Module],
    job: &Job,
    base: Option<&Path>,
) -> CompileResult {
    let (Some(m), Some((tc, probe))) = (
        modules.get(job.module),
        req.with.toolchains.get(job.toolchain),
    ) else {
        return Err(Box::new(Failure {
            source: PathBuf::new(),
            target: job.target,
            kind: FailureKind::Compile,
            toolchain: None,
            location: None,
            message: "a job without its module or toolchain; report it".to_owned(),
            command: String::new(),
            status: Status::Internal,
            fix: None,
        }));
    };
    match tc {
        Toolchain::Nvrtc(nvrtc) => {
            super::nvrtc_call::compile_nvrtc(req, snapshot, m, job, nvrtc, &tc.short(probe))
        }
        Toolchain::Nvcc(nvcc) => {
            compile_nvcc(req, snapshot, (m, &[job], &job.argv), (nvcc, probe), base).map(
                |(images, deps, took)| {
                    let image = images.into_iter().next().unwrap_or_default();
                    (Output { image, deps }, took)
                },
            )
        }
    }
}

/// A jobserver token for the next job: `Some(Some(token))`, or `Some(None)` where the
/// jobserver cannot be polled (the job runs without one); `None` once the queue is empty.
pub(crate) fn wait_for_token<T>(
    client: &jobserver::Client,
    queue: &Mutex<std::collections::VecDeque<T>>,
) -> Option<Option<jobserver::Acquired>> {
    loop {
        if queue.lock().map_or(true, |q| q.is_empty()) {
            return None;
        }
        match client.try_acquire() {
            Ok(Some(token)) => return Some(Some(token)),
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(50)),
            Err(_) => return Some(None),
        }
    }
}

#[cfg(test)]
mod jobserver_tests;
