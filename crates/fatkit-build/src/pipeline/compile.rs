//! Running the jobs: a pool of as many workers as compiles may run at once, taking the compiler
//! calls longest first. A call is one job, one (source, target): an nvcc `-cubin` (under the
//! launcher, if one is set), an nvcc `--fatbin` for PTX, or an in-process NVRTC compile; except
//! that without a launcher a PTX target and the cubin of its virtual architecture (compute_120
//! and sm_120) share one `nvcc --fatbin`, which runs that architecture's front end once, as nvcc
//! does for its own `-gencode` list ([`calls`]). A library's host objects are calls too, each
//! building its module's images of one architecture on the way ([`host_calls`]). So every job
//! reports its own time, a failure names its own target, and the cores stay busy to the end.
//! Every image is stored in the cache with the headers it read.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fatkit_arch::toolkit::CudaVersion;
use fatkit_arch::{ImageKind, Target};
use serde::Serialize;

use super::plan::{nvcc_args, relative, Job, Module};
use super::{Event, Request};
use crate::cache::{Cache, SourceEntry};
use crate::command;
use crate::launcher;
use crate::toolchain::{Nvcc, Nvrtc, Probe, Toolchain};

/// What failed: a compiler, or one of fatkit's checks of what the compilers produced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The compiler exited non-zero, could not start, or wrote nothing fatkit can read.
    Compile,
    /// Some images of the module lack a kernel others have.
    KernelListsDisagree,
    /// A per-kernel override excludes a kernel the image still holds.
    OverrideIgnored,
    /// Images of a kernel disagree on its parameters (count, offset or size), or one cannot
    /// be read.
    ParamsDisagree,
    /// A kernel the image the driver loads lacks on GPUs its declaration says it runs on, or
    /// an image without kernels.
    DriverWouldNotFind,
    /// The host compile of a library's source (`nvcc -c`) failed, its device code compiling.
    HostCompile,
}

/// A compile that failed, or a module fatkit refused to write.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    pub source: PathBuf,
    pub target: Target,
    pub kind: FailureKind,
    /// The toolchain that failed (`nvcc 13.2`, `nvrtc 12.9`); `None` for fatkit's own checks.
    pub toolchain: Option<String>,
    /// `file:line` of the compiler's first error, when it gives one.
    pub location: Option<String>,
    /// The compiler's output, or what fatkit found.
    pub message: String,
    /// The command line; empty for fatkit's own checks.
    pub command: String,
    /// The exit status, or what went wrong in a few words.
    pub status: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = self
            .location
            .clone()
            .unwrap_or_else(|| self.source.display().to_string());
        match &self.toolchain {
            Some(tc) => writeln!(f, "{at}: {}: {tc} failed ({})", self.target, self.status)?,
            None => writeln!(f, "{at}: {}: {}", self.target, self.status)?,
        }
        for line in self.message.lines() {
            writeln!(f, "  | {line}")?;
        }
        if self.command.is_empty() {
            Ok(())
        } else {
            write!(f, "  command: {}", self.command)
        }
    }
}

/// A compile's outcome: the output and how long it took, or why it failed.
pub(crate) type CompileResult = Result<(Vec<u8>, Duration), Box<Failure>>;

/// What running the jobs gave: per job its image (cached or compiled), the failures, and
/// the compile time spent.
pub(crate) struct Compiled {
    pub outputs: Vec<Option<Vec<u8>>>,
    pub failures: Vec<Failure>,
    pub job_seconds: f64,
    pub cached: usize,
    pub run: usize,
    /// The compiler calls that ran them ([`calls`]), a failed shared call and its reruns
    /// included.
    pub calls: usize,
}

/// Looks every job up in the cache and compiles the rest in parallel, longest first, in the
/// compiler calls [`calls`] makes of them.
pub(crate) fn run(
    req: &Request,
    modules: &[Module],
    jobs: &[Job],
    on_event: &(dyn Fn(&Event) + Sync),
) -> Compiled {
    let mut outputs: Vec<Option<Vec<u8>>> = jobs
        .iter()
        .map(|j| j.object_key.as_ref().and_then(|k| req.cache.object(k)))
        .collect();
    let to_run: Vec<usize> = (0..jobs.len())
        .filter(|&i| outputs.get(i).is_some_and(Option::is_none))
        .collect();
    // Longest first, when timings are known; unknown ones first of all.
    let estimate = |call: &Vec<usize>| -> f64 {
        call.iter()
            .map(|&i| {
                jobs.get(i)
                    .and_then(|j| j.last_seconds)
                    .unwrap_or(f64::INFINITY)
            })
            .sum()
    };
    let mut calls = calls(req, jobs, &to_run);
    let hosts = host_calls(req, modules, jobs, &mut calls);
    let mut calls: Vec<Call> = hosts
        .into_iter()
        .map(|(h, jobs)| Call::Host(h, jobs))
        .chain(calls.into_iter().map(Call::Jobs))
        .collect();
    // A host object's own time is not recorded: it goes first. Among calls of unknown time
    // (a cold build), those of more jobs first: a PTX target's call with its cubin's takes
    // longer than one cubin's, and the last call to start sets how long one core idles.
    let estimate = |call: &Call| match call {
        Call::Host(_, jobs) => (f64::INFINITY, jobs.len() + 1),
        Call::Jobs(jobs) => (estimate(jobs), jobs.len()),
    };
    calls.sort_by(|a, b| {
        let ((ta, na), (tb, nb)) = (estimate(a), estimate(b));
        tb.total_cmp(&ta).then(nb.cmp(&na))
    });
    let cached = jobs.len() - to_run.len();
    on_event(&Event::Planned {
        jobs: jobs.len(),
        cached,
        to_run: to_run.len(),
    });
    // Every job runs in the project root, naming files relative to it: what a compiler puts
    // of a source's path into the code (nvcc names internal-linkage symbols after a hash of
    // it) is then the same in every checkout, and a launcher's cache keys match across them.
    let base = Some(std::fs::canonicalize(&req.root).unwrap_or_else(|_| req.root.clone()));
    let n_workers = req.jobs.max(1).min(calls.len());
    let queue = Mutex::new(std::collections::VecDeque::from(calls));
    let results: Mutex<Vec<(usize, CompileResult)>> = Mutex::new(Vec::new());
    let host_failures: Mutex<Vec<Failure>> = Mutex::new(Vec::new());
    let done = Mutex::new(0usize);
    let n_calls = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for worker in 0..n_workers {
            let (queue, results, done, base, to_run, n_calls, host_failures) = (
                &queue,
                &results,
                &done,
                &base,
                &to_run,
                &n_calls,
                &host_failures,
            );
            scope.spawn(move || loop {
                // In a build script, every worker but the first runs a call only while it holds
                // one of cargo's jobserver tokens (the first has the build script's own). It
                // waits without blocking, so that it stops once the queue is empty even when
                // no token comes (`cargo build -j1`).
                let token = match (&req.tokens, worker) {
                    (Some(client), 1..) => match wait_for_token(client, queue) {
                        Some(token) => token,
                        None => break,
                    },
                    _ => None,
                };
                let next = queue.lock().ok().and_then(|mut q| q.pop_front());
                let Some(call) = next else { break };
                let outcomes = match call {
                    Call::Jobs(call) => {
                        compile_call(req, modules, jobs, &call, base.as_deref(), n_calls)
                    }
                    Call::Host(h, call) => {
                        let (outcomes, failed) = super::host_call::run(
                            req,
                            modules,
                            jobs,
                            (h, &call),
                            base.as_deref(),
                            n_calls,
                        );
                        if let (Some(f), Ok(mut all)) = (failed, host_failures.lock()) {
                            all.push(*f);
                        }
                        outcomes
                    }
                };
                drop(token);
                for (idx, res) in outcomes {
                    let Some(job) = jobs.get(idx) else { continue };
                    let n_done = done.lock().map(|mut d| {
                        *d += 1;
                        *d
                    });
                    if let (Some(m), Ok(n_done)) = (modules.get(job.module), n_done) {
                        on_event(&Event::JobFinished {
                            source: m
                                .path
                                .file_name()
                                .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                            target: job.target,
                            ok: res.is_ok(),
                            seconds: res.as_ref().map_or(0.0, |(_, d)| d.as_secs_f64()),
                            done: n_done,
                            to_run: to_run.len(),
                        });
                    }
                    if let Ok(mut r) = results.lock() {
                        r.push((idx, res));
                    }
                }
            });
        }
    });
    let mut failures = Vec::new();
    let mut job_seconds = 0.0;
    for (idx, res) in results.into_inner().unwrap_or_default() {
        match res {
            Ok((bytes, took)) => {
                job_seconds += took.as_secs_f64();
                if let Some(slot) = outputs.get_mut(idx) {
                    *slot = Some(bytes);
                }
            }
            Err(f) => failures.push(*f),
        }
    }
    // After the device failures: where both failed, the device's is the one that says why.
    failures.extend(host_failures.into_inner().unwrap_or_default());
    Compiled {
        outputs,
        failures,
        job_seconds,
        cached,
        run: to_run.len(),
        calls: n_calls.into_inner(),
    }
}

/// `file(line): error: ...` -> `file:line`.
fn first_error_location(output: &str) -> Option<String> {
    output.lines().find_map(|line| {
        let (head, _) = line.split_once("): ")?;
        let (file, line_no) = head.rsplit_once('(')?;
        line_no.parse::<u32>().ok()?;
        line.contains("error").then(|| format!("{file}:{line_no}"))
    })
}

/// The compiler calls that run `to_run` (indices into `jobs`): one per job, except that a PTX
/// job and the cubin job of its virtual architecture (compute_120 and sm_120 of one source, on
/// one nvcc, with the same kernels skipped) are one `nvcc --fatbin` for both. Run apart, each
/// would run that architecture's preprocessing and cicc: the PTX job is nothing else, so a
/// source's PTX target cost as much as a cubin, where nvcc's own `-gencode` list shares it
/// (docs/BUILDS.md). With a launcher every job stays one call: the cubin goes through it, the
/// PTX cannot.
pub(crate) fn calls(req: &Request, jobs: &[Job], to_run: &[usize]) -> Vec<Vec<usize>> {
    let may_pair = |j: &Job| {
        req.launcher.is_none()
            && matches!(
                req.toolchains.get(j.toolchain),
                Some((Toolchain::Nvcc(_), _))
            )
    };
    pair_calls(jobs, to_run, may_pair, |t| {
        super::plan::skip_defines(req, t)
    })
}

/// [`calls`], given which jobs may share a call (nvcc's, without a launcher) and the kernels
/// each target skips.
fn pair_calls(
    jobs: &[Job],
    to_run: &[usize],
    may_pair: impl Fn(&Job) -> bool,
    skips: impl Fn(Target) -> Vec<String>,
) -> Vec<Vec<usize>> {
    let mut paired = std::collections::BTreeSet::new();
    let mut calls = Vec::new();
    for &i in to_run {
        if paired.contains(&i) {
            continue;
        }
        let Some(job) = jobs.get(i) else { continue };
        let partner = (job.target.kind == ImageKind::Cubin && may_pair(job))
            .then(|| {
                to_run.iter().copied().find(|&p| {
                    jobs.get(p).is_some_and(|ptx| {
                        ptx.target.kind == ImageKind::Ptx
                            && ptx.target == job.target.with_kind(ImageKind::Ptx)
                            && ptx.module == job.module
                            && ptx.toolchain == job.toolchain
                            && !paired.contains(&p)
                            && skips(ptx.target) == skips(job.target)
                    })
                })
            })
            .flatten();
        match partner {
            Some(p) => {
                paired.insert(p);
                calls.push(vec![i, p]);
            }
            None => calls.push(vec![i]),
        }
    }
    // A PTX job met before its cubin was pushed alone; drop it where it was paired since.
    calls.retain(|c| !(c.len() == 1 && c.first().is_some_and(|i| paired.contains(i))));
    calls
}

/// One compiler call: jobs ([`calls`]), or a library's host object (an index into
/// [`Request::host_objects`]) and the jobs it builds on the way ([`host_calls`]).
enum Call {
    Jobs(Vec<usize>),
    Host(usize, Vec<usize>),
}

/// One call per host object of `req`, each taking over from `calls` the call of its module's
/// images of the host object's architecture, where there is one to take: `nvcc -c` with that
/// `-gencode` builds the same images (the host compile passes the host compiler `-fPIC` and
/// nothing more to the device side) as well as the object, where otherwise the object's own
/// device pass would be thrown away. Not with a launcher (its cubin jobs run through it) nor
/// where the target skips kernels (the host code would not see them).
fn host_calls(
    req: &Request,
    modules: &[Module],
    jobs: &[Job],
    calls: &mut Vec<Vec<usize>>,
) -> Vec<(usize, Vec<usize>)> {
    let mut out = Vec::new();
    for (h, host) in req.host_objects.iter().enumerate() {
        let module = modules.iter().position(|m| m.name == host.module);
        let fits = |i: &usize| {
            jobs.get(*i).is_some_and(|j| {
                Some(j.module) == module
                    && j.toolchain == host.toolchain
                    && j.target.cc == host.target.cc
                    && j.target.suffix == host.target.suffix
                    && super::plan::skip_defines(req, j.target).is_empty()
            })
        };
        let taken = match req.launcher {
            Some(_) => None,
            None => calls
                .iter()
                .position(|c| !c.is_empty() && c.iter().all(fits)),
        };
        out.push((h, taken.map(|c| calls.remove(c)).unwrap_or_default()));
    }
    out
}

/// Runs one call: its jobs' images, or their failures. A call of two jobs that fails is run
/// again as two, so that each failure names its own target and compiler output; one stopped
/// at the time limit is not (it would only wait twice as long).
fn compile_call(
    req: &Request,
    modules: &[Module],
    jobs: &[Job],
    call: &[usize],
    base: Option<&Path>,
    n_calls: &std::sync::atomic::AtomicUsize,
) -> Vec<(usize, CompileResult)> {
    use std::sync::atomic::Ordering::Relaxed;
    let picked: Vec<&Job> = call.iter().filter_map(|&i| jobs.get(i)).collect();
    let singly = || -> Vec<(usize, CompileResult)> {
        call.iter()
            .filter_map(|&i| {
                n_calls.fetch_add(1, Relaxed);
                Some((i, compile(req, modules, jobs.get(i)?, base)))
            })
            .collect()
    };
    if picked.len() < 2 || picked.len() != call.len() {
        return singly();
    }
    let nvcc = picked
        .first()
        .and_then(|j| Some((modules.get(j.module)?, req.toolchains.get(j.toolchain)?)));
    let Some((m, (Toolchain::Nvcc(nvcc), probe))) = nvcc else {
        return singly();
    };
    n_calls.fetch_add(1, Relaxed);
    match compile_nvcc(req, m, &picked, (nvcc, probe), base) {
        Ok((images, took)) => {
            // The call's time, shared among its jobs (each job's estimate for the next build).
            let each = took / u32::try_from(images.len()).unwrap_or(1).max(1);
            call.iter()
                .zip(images)
                .map(|(&i, image)| (i, Ok((image, each))))
                .collect()
        }
        Err(f) if f.status == "timed out" => call
            .iter()
            .zip(&picked)
            .map(|(&i, job)| {
                let mut f = f.clone();
                f.target = job.target;
                (i, Err(f))
            })
            .collect(),
        Err(_) => singly(),
    }
}

/// Compiles one job with its toolchain.
pub(super) fn compile(
    req: &Request,
    modules: &[Module],
    job: &Job,
    base: Option<&Path>,
) -> CompileResult {
    let (Some(m), Some((tc, probe))) = (modules.get(job.module), req.toolchains.get(job.toolchain))
    else {
        return Err(Box::new(Failure {
            source: PathBuf::new(),
            target: job.target,
            kind: FailureKind::Compile,
            toolchain: None,
            location: None,
            message: "a job without its module or toolchain; report it".to_owned(),
            command: String::new(),
            status: "internal error".to_owned(),
        }));
    };
    match tc {
        Toolchain::Nvrtc(nvrtc) => compile_nvrtc(req, m, job, nvrtc, &tc.short(probe)),
        Toolchain::Nvcc(nvcc) => compile_nvcc(req, m, &[job], (nvcc, probe), base)
            .map(|(images, took)| (images.into_iter().next().unwrap_or_default(), took)),
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

/// Runs one nvcc for one job, or for a cubin job and the PTX job of its virtual architecture
/// ([`calls`]), and stores each image in the cache: `-cubin` for one cubin target (under the
/// launcher, if one is set), else `--fatbin` (always local: docs/BUILDS.md says why), whose
/// entries are the images. With a launcher, the job runs in `base` and names the source and
/// include directories relative to it. A failure names the first job's target.
fn compile_nvcc(
    req: &Request,
    m: &Module,
    jobs: &[&Job],
    (nvcc, probe): (&Nvcc, &Probe),
    base: Option<&Path>,
) -> Result<(Vec<Vec<u8>>, Duration), Box<Failure>> {
    let Some(job) = jobs.first() else {
        return Ok((Vec::new(), Duration::ZERO));
    };
    let cubin = jobs.len() == 1 && job.target.kind == ImageKind::Cubin;
    let launcher = req.launcher.as_ref().filter(|_| cubin);
    let toolchain = match launcher {
        Some(l) => format!("{} + nvcc {}", l.spec, probe.version),
        None => format!("nvcc {}", probe.version),
    };
    let tmp = req.cache.root().join("tmp").join(format!(
        "{}-{}",
        std::process::id(),
        job.source_key.get(..16).unwrap_or(&job.source_key)
    ));
    let out = tmp.join(if cubin { "out.cubin" } else { "out.fatbin" });
    let mut args = Vec::new();
    if cubin {
        args.push("-cubin".to_owned());
    } else {
        args.push("--fatbin".to_owned());
        // The images are split out of nvcc's fatbin: uncompressed saves the round trip
        // (--compress-mode is CUDA 12.8's; older releases compress only when asked).
        if probe.version >= CudaVersion::new(12, 8) {
            args.push("--compress-mode=none".to_owned());
        }
    }
    if let Some(ccbin) = probe.host.as_ref().and_then(|h| h.ccbin.as_ref()) {
        args.extend(["-ccbin".to_owned(), ccbin.display().to_string()]);
    }
    args.extend(nvcc_args(req, job.target, base));
    // The other targets of the call: nvcc runs the front end once per virtual architecture.
    for other in jobs.iter().skip(1) {
        args.extend(super::plan::gencode(other.target));
    }
    args.extend(source_name_args(&relative(&m.path, base)));
    // --keep leaves the device-side preprocessed source (*.cpp1.ii) in `tmp`: its line markers
    // name every header the compile read, at no cost (nvcc's -MMD would preprocess again, on
    // the host side, which also misses headers included under __CUDA_ARCH__).
    args.extend([
        "--keep".to_owned(),
        "--keep-dir".to_owned(),
        tmp.display().to_string(),
        "-o".to_owned(),
        out.display().to_string(),
        relative(&m.path, base).display().to_string(),
    ]);
    let mut cmd = launcher::command(launcher, &nvcc.nvcc(), base);
    cmd.args(&args);
    let command = command::line_of(&cmd);
    let fail = |location: Option<String>, message: String, status: String| {
        Box::new(Failure {
            source: m.path.clone(),
            target: job.target,
            kind: FailureKind::Compile,
            toolchain: Some(toolchain.clone()),
            location,
            message,
            command: command.clone(),
            status,
        })
    };
    let (text, took) = run_nvcc(req, &mut cmd, &tmp, base, &fail)?;
    let finish = |res: Result<(Vec<Vec<u8>>, Duration), Box<Failure>>| {
        let _ = std::fs::remove_dir_all(&tmp);
        res
    };
    let mut images = Vec::new();
    for j in jobs {
        match read_image(&out, j.target, !cubin) {
            Ok(image) => images.push(image),
            Err(what) => {
                let mut message = launcher::no_output(launcher, &what);
                if !text.trim().is_empty() {
                    message.push('\n');
                    message.push_str(text.trim_end());
                }
                return finish(Err(fail(
                    None,
                    message,
                    "exited 0 without its output".to_owned(),
                )));
            }
        }
    }
    store(req, m, (jobs, &images), (&tmp, &nvcc.root), base, took);
    finish(Ok((images, took)))
}

/// What makes a [`Failure`] of a call: where the compiler's first error is (if it says), its
/// output or what went wrong, and the status.
pub(super) type MakeFailure<'a> = dyn Fn(Option<String>, String, String) -> Box<Failure> + 'a;

/// Runs the nvcc call `cmd`, which keeps its files in `tmp` (made here), within the time limit
/// of one compile: its output and how long it took; or, with `tmp` removed, the failure `fail`
/// makes of a call that could not start, timed out or failed (where its first error is, files
/// named relative to `base`, where the call ran, made whole).
pub(super) fn run_nvcc(
    req: &Request,
    cmd: &mut std::process::Command,
    tmp: &Path,
    base: Option<&Path>,
    fail: &MakeFailure<'_>,
) -> Result<(String, Duration), Box<Failure>> {
    if let Err(e) = std::fs::create_dir_all(tmp) {
        return Err(fail(
            None,
            format!("{}: {e}", tmp.display()),
            "could not start".to_owned(),
        ));
    }
    let failed = |f: Box<Failure>| {
        let _ = std::fs::remove_dir_all(tmp);
        Err(f)
    };
    let start = Instant::now();
    let res = command::output_within(cmd, req.job_timeout);
    let took = start.elapsed();
    let output = match res {
        Ok((_, true)) => {
            return failed(fail(
                None,
                format!(
                    "stopped after {} s, the limit of one compile; raise it with FATKIT_JOB_TIMEOUT=<seconds> if the compile is genuinely that slow, or look for an include of a pipe or device",
                    req.job_timeout.as_secs()
                ),
                "timed out".to_owned(),
            ))
        }
        Ok((o, false)) => o,
        Err(e) => return failed(fail(None, e.to_string(), "could not start".to_owned())),
    };
    let text = command::text_of(&output);
    if !output.status.success() {
        // A launcher's messages name files relative to where the job ran.
        let location = first_error_location(&text).map(|l| match base {
            Some(b) if !Path::new(&l).is_absolute() => b.join(l).display().to_string(),
            _ => l,
        });
        return failed(fail(
            location,
            text.trim_end().to_owned(),
            output.status.to_string(),
        ));
    }
    Ok((text, took))
}

/// Stores the `images` of `jobs` in the cache, with the headers the call read: those named
/// by the device-side preprocessed sources nvcc kept in `tmp` (under `toolkit_root`, the
/// toolkit's own). A cache that cannot be written only costs a recompile next time.
pub(super) fn store(
    req: &Request,
    m: &Module,
    (jobs, images): (&[&Job], &[Vec<u8>]),
    (tmp, toolkit_root): (&Path, &Path),
    base: Option<&Path>,
    took: Duration,
) {
    let (deps, headers) = preprocessed_deps(tmp, &m.path, toolkit_root, base);
    // The same for every job of the call: they read the same headers.
    let absent = crate::cache::shadowing(&headers, &search_dirs(req, &m.path));
    for (j, image) in jobs.iter().zip(images) {
        if let Some(key) = Cache::object_key(&j.source_key, &deps) {
            let _ = req.cache.put_object(&key, image);
            let entry = SourceEntry {
                deps: deps.clone(),
                seconds: took.as_secs_f64() / jobs.len() as f64,
                absent: absent.clone(),
            };
            let _ = req.cache.put_source_entry(&j.source_key, &entry);
        }
    }
}

/// The image an nvcc call wrote to `out`: a cubin (checked to be an ELF file), or the entry for
/// `target` of a fatbin. The error says what was wrong, to follow "exited 0 but".
fn read_image(out: &Path, target: Target, fatbin: bool) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(out).map_err(|e| format!("wrote no {}: {e}", out.display()))?;
    if !fatbin {
        return if bytes.starts_with(b"\x7fELF") {
            Ok(bytes)
        } else {
            Err(format!(
                "wrote {} ({} bytes), which is not a cubin (no ELF header)",
                out.display(),
                bytes.len()
            ))
        };
    }
    let container = fatkit_fatbin::Container::parse(&bytes, fatkit_fatbin::Strictness::AnyKind)
        .map_err(|e| format!("wrote a fatbin fatkit cannot read ({}): {e}", out.display()))?;
    let limits = fatkit_fatbin::Limits::default();
    container
        .entries()
        .find(|e| e.target() == Some(target))
        .and_then(|e| e.image(&limits).ok())
        .map(|b| b.into_owned())
        .ok_or_else(|| format!("wrote a fatbin with no {target} entry ({})", out.display()))
}

/// nvcc names internal-linkage symbols (`_INTERNAL_5615eb9e_...`, anything using libcu++)
/// after a hash of the source's absolute path, which cicc gets as `--orig_src_path_name`: given
/// the path relative to the project root instead, the same sources make the same bytes in
/// every checkout (docs/BUILDS.md). A name a `-Xcicc` list cannot carry (a comma) is left.
pub(crate) fn source_name_args(source: &Path) -> Vec<String> {
    let name = source.display().to_string();
    if source.is_absolute() || name.contains([',', ' ', '"', '\'']) {
        return Vec::new();
    }
    vec!["-Xcicc".to_owned(), format!("--orig_src_path_name={name}")]
}

/// Compiles one job with NVRTC, in this process, and stores the image in the cache.
fn compile_nvrtc(
    req: &Request,
    m: &Module,
    job: &Job,
    tc: &Nvrtc,
    toolchain: &str,
) -> CompileResult {
    let args = &job.args;
    let library = tc.library.clone();
    let command = format!(
        "nvrtcCompileProgram({}) [{}] {}",
        library.display(),
        args.join(" "),
        m.path.display()
    );
    let fail = |location: Option<String>, message: String, status: String| {
        Box::new(Failure {
            source: m.path.clone(),
            target: job.target,
            kind: FailureKind::Compile,
            toolchain: Some(toolchain.to_owned()),
            location,
            message,
            command: command.clone(),
            status,
        })
    };
    let source = std::fs::read(&m.path)
        .map_err(|e| fail(None, e.to_string(), "could not read the source".to_owned()))?;
    let nvrtc = crate::nvrtc::Nvrtc::open(&library)
        .map_err(|e| fail(None, e.to_string(), "could not load NVRTC".to_owned()))?;
    let start = Instant::now();
    // Named relative to the project root, as nvcc's jobs name their sources: NVRTC, too,
    // names internal-linkage symbols after the program's name. (Its includes are found through
    // the -I list, which starts with the source's own directory.)
    let root = std::fs::canonicalize(&req.root).unwrap_or_else(|_| req.root.clone());
    let name = relative(&m.path, Some(&root)).display().to_string();
    let compiled = nvrtc
        .compile(&name, &source, args, job.target.kind)
        .map_err(|e| fail(None, e.to_string(), "NVRTC call failed".to_owned()))?
        .map_err(|f| fail(first_error_location(&f.log), f.log, f.status))?;
    let took = start.elapsed();
    let search = req.header_search(&m.path);
    let deps: Vec<PathBuf> = crate::nvrtc::scan_includes(&m.path, &search)
        .into_iter()
        .filter(|p| {
            !tc.include_dirs.iter().any(|d| p.starts_with(d)) && !is_toolchain_header(p, &tc.root)
        })
        .collect();
    if let Some(key) = Cache::object_key(&job.source_key, &deps) {
        let _ = req.cache.put_object(&key, &compiled.image);
        let entry = SourceEntry {
            // The directories the scan searched, in its order.
            absent: crate::cache::shadowing(&deps, &search),
            deps,
            seconds: took.as_secs_f64(),
        };
        let _ = req.cache.put_source_entry(&job.source_key, &entry);
    }
    Ok((compiled.image, took))
}

/// Whether a header belongs to the toolchain or the system (covered by the toolchain's
/// identity and the host compiler's version in every key) rather than to the project.
fn is_toolchain_header(path: &Path, toolkit_root: &Path) -> bool {
    path.starts_with(toolkit_root)
        || path.starts_with("/usr/include")
        || path.starts_with("/usr/lib")
}

/// Where a new header could appear and shadow one a compile read: the source's directory,
/// then the include directories, in the order the compiler searches them (canonical, as the
/// headers are).
fn search_dirs(req: &Request, source: &Path) -> Vec<PathBuf> {
    req.header_search(source)
        .into_iter()
        .map(|d| std::fs::canonicalize(&d).unwrap_or(d))
        .collect()
}

/// The headers a compile read: the files named by the line markers (`# 12 "/path/h.cuh" 1`)
/// of the preprocessed sources nvcc kept in `dir`, less the source itself and anything not a
/// regular file; relative names are taken relative to `base`. Returned twice: without the
/// toolchain's and system's headers (the cache's dependencies), and all of them (for the
/// include-path misses).
fn preprocessed_deps(
    dir: &Path,
    source: &Path,
    toolkit_root: &Path,
    base: Option<&Path>,
) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut names = std::collections::BTreeSet::new();
    let Ok(read) = std::fs::read_dir(dir) else {
        return (Vec::new(), Vec::new());
    };
    for entry in read.flatten() {
        let path = entry.path();
        if !path.to_string_lossy().ends_with(".cpp1.ii") {
            continue;
        }
        let Ok(text) = std::fs::read(&path) else {
            continue;
        };
        names.extend(line_marker_files(&text));
    }
    // Each header canonical, and whether it is the toolkit's (as named, or once resolved).
    let headers: std::collections::BTreeMap<PathBuf, bool> = names
        .into_iter()
        // Names relative to where the job ran (a launcher's jobs run in the project root).
        .filter_map(|p| match base {
            Some(b) if p.is_relative() => Some(b.join(p)),
            _ => Some(p).filter(|p| p.is_absolute()),
        })
        .map(|p| {
            let named_in_toolkit = is_toolchain_header(&p, toolkit_root);
            let p = std::fs::canonicalize(&p).unwrap_or(p);
            let in_toolkit = named_in_toolkit || is_toolchain_header(&p, toolkit_root);
            (p, in_toolkit)
        })
        // Files only: a source may include `/dev/stdin` or a FIFO, never to be hashed.
        .filter(|(p, _)| p != source && p.is_file())
        .collect();
    let deps = headers
        .iter()
        .filter(|(_, &in_toolkit)| !in_toolkit)
        .map(|(p, _)| p.clone())
        .collect();
    (deps, headers.into_keys().collect())
}

/// The file names of a preprocessed source's line markers.
fn line_marker_files(text: &[u8]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let Some(rest) = line.strip_prefix(b"# ") else {
            continue;
        };
        let Some(open) = rest.iter().position(|&b| b == b'"') else {
            continue;
        };
        let name = rest.get(open + 1..).unwrap_or_default();
        let Some(close) = name.iter().position(|&b| b == b'"') else {
            continue;
        };
        let name = String::from_utf8_lossy(name.get(..close).unwrap_or_default()).into_owned();
        if !name.starts_with('<') && out.last().is_none_or(|l: &PathBuf| *l != Path::new(&name)) {
            out.push(PathBuf::from(name));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_locations() {
        let out = "/src/bad.cu(12): error: expected an expression\n  int x = ;\n";
        assert_eq!(first_error_location(out).as_deref(), Some("/src/bad.cu:12"));
        assert_eq!(
            first_error_location("/src/ok.cu(3): warning: unused\n"),
            None
        );
        assert_eq!(
            first_error_location("nvcc fatal   : Unknown option '-x'"),
            None
        );
    }

    #[test]
    fn line_markers() {
        let ii = b"# 1 \"/s/a.cu\"\n# 1 \"<built-in>\" 1\nint x;\n# 1 \"/cuda/include/cuda_runtime.h\" 1 3\n# 7 \"/s/include/r.cuh\" 1\n#pragma once\n";
        let files: Vec<String> = line_marker_files(ii)
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            files,
            [
                "/s/a.cu",
                "/cuda/include/cuda_runtime.h",
                "/s/include/r.cuh"
            ]
        );
        assert!(is_toolchain_header(
            Path::new("/cuda/bin/../include/x.h"),
            Path::new("/cuda")
        ));
        assert!(is_toolchain_header(
            Path::new("/usr/include/c++/12/cmath"),
            Path::new("/cuda")
        ));
        assert!(!is_toolchain_header(
            Path::new("/s/include/r.cuh"),
            Path::new("/cuda")
        ));
    }
}

#[cfg(test)]
mod call_tests {
    use super::*;

    fn job(module: usize, target: &str, toolchain: usize) -> Job {
        Job {
            module,
            target: target.parse().unwrap(),
            toolchain,
            args: Vec::new(),
            source_key: String::new(),
            object_key: None,
            last_seconds: None,
        }
    }

    #[test]
    fn a_ptx_target_shares_the_call_of_its_cubin_and_nothing_else_is_paired() {
        let jobs = [
            // Module 0: the PTX after its cubin.
            job(0, "sm_80", 0),
            job(0, "sm_120", 0),
            job(0, "compute_120", 0),
            // Module 1: the PTX first, and sm_121 of another virtual architecture.
            job(1, "compute_120", 0),
            job(1, "sm_121", 0),
            job(1, "sm_120", 0),
            // Module 2: the cubin on another toolchain (NVRTC, say), which runs in process.
            job(2, "sm_120", 1),
            job(2, "compute_120", 0),
            // Module 3: the PTX target skips a kernel the cubin builds.
            job(3, "sm_90", 0),
            job(3, "compute_90", 0),
        ];
        let all: Vec<usize> = (0..jobs.len()).collect();
        let nvcc = |j: &Job| j.toolchain == 0;
        let skips = |t: Target| {
            if t.to_string() == "compute_90" {
                vec!["-DFATKIT_SKIP_k".to_owned()]
            } else {
                Vec::new()
            }
        };
        assert_eq!(
            pair_calls(&jobs, &all, nvcc, skips),
            [
                vec![0],
                vec![1, 2],
                vec![4],
                vec![5, 3],
                vec![6],
                vec![7],
                vec![8],
                vec![9]
            ]
        );
        // Only the jobs to run: a cached cubin leaves its PTX alone.
        assert_eq!(pair_calls(&jobs, &[0, 2], nvcc, skips), [vec![0], vec![2]]);
        // With a launcher (no job may share a call), every job is its own call.
        let none = pair_calls(&jobs, &all, |_| false, skips);
        assert_eq!(none, all.iter().map(|&i| vec![i]).collect::<Vec<_>>());
    }
}

#[cfg(test)]
mod jobserver_tests {
    use super::*;

    #[test]
    fn a_worker_stops_once_the_queue_is_empty_and_runs_untokened_where_polling_is_unsupported() {
        // A pipe this process made cannot be polled (cargo's, reopened through /dev/fd, can).
        let client = jobserver::Client::new(0).unwrap();
        let queue = Mutex::new(std::collections::VecDeque::from(vec![0usize, 1]));
        assert!(matches!(wait_for_token(&client, &queue), Some(None)));
        // No token will ever come (cargo build -j1 gives a build script none): with the queue
        // empty the worker stops instead of waiting.
        queue.lock().unwrap().clear();
        assert!(wait_for_token(&client, &queue).is_none());
    }
}
