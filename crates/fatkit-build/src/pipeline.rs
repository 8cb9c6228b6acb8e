//! `build-kernels`: profile x sources -> jobs -> nvcc in parallel (through the cache) ->
//! one fatbin, manifest and Rust module per source, written atomically.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fatkit_arch::driver::MinDriver;
use fatkit_arch::profile::{Compression, Profile};
use fatkit_arch::toolkit::{self, CudaVersion, PtxIsa};
use fatkit_arch::{Compiler, ImageKind, Target, TargetSet};
use fatkit_fatbin::write::{self, Input};
use serde::Serialize;

use crate::cache::{self, Cache, SourceEntry};
use crate::toolchain::{Probe, Toolchain};

/// Everything a build needs.
#[derive(Clone, Debug)]
pub struct Request {
    pub profile: Profile,
    /// The `.cu` files; each is one module, named after its stem.
    pub sources: Vec<PathBuf>,
    pub include_dirs: Vec<PathBuf>,
    /// `NAME` or `NAME=VALUE`.
    pub defines: Vec<String>,
    /// More nvcc arguments, part of every cache key.
    pub extra_args: Vec<String>,
    pub out_dir: PathBuf,
    /// Sources are named relative to this in manifests (the workspace root).
    pub root: PathBuf,
    /// Parallel compiles.
    pub jobs: usize,
    pub cache: Cache,
    /// The toolchains to route targets to, probed.
    pub toolchains: Vec<(Toolchain, Probe)>,
    /// Module names other than the source's stem, by source path as given in `sources`.
    pub module_names: BTreeMap<PathBuf, String>,
    /// Per-kernel overrides: the targets a kernel is not built for. Those compiles get
    /// `-DFATKIT_SKIP_<kernel>` (for the source's `#ifndef`), and the kernel-list check expects
    /// the kernel to be absent from exactly those images.
    pub kernel_excludes: BTreeMap<String, TargetSet>,
}

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

/// Why a build could not run at all (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Input(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |source| BuildError::Io {
        path: path.to_owned(),
        source,
    }
}

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

/// A compile that failed.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    pub source: PathBuf,
    pub target: Target,
    /// The toolchain that failed (`nvcc 13.2`, `nvrtc 12.9`), or `fatkit` for a check of
    /// fatkit's own.
    pub toolchain: String,
    /// `file:line` of nvcc's first error, when it gives one.
    pub location: Option<String>,
    /// nvcc's output.
    pub message: String,
    pub command: String,
    pub status: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self
            .location
            .clone()
            .unwrap_or_else(|| self.source.display().to_string());
        if self.toolchain == "fatkit" {
            writeln!(f, "{at}: {}: {}", self.target, self.status)?;
        } else {
            writeln!(
                f,
                "{at}: {}: {} failed ({})",
                self.target, self.toolchain, self.status
            )?;
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

/// One module's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct ModuleReport {
    pub module: String,
    pub source: PathBuf,
    /// `built`, `unchanged` (outputs already up to date) or `failed`.
    pub status: &'static str,
    pub fatbin: Option<PathBuf>,
    pub manifest: Option<PathBuf>,
    pub rust: Option<PathBuf>,
    /// The headers the source includes (outside the toolkit), as the last compiles saw them.
    pub headers: Vec<PathBuf>,
    /// The kernels of a written module; empty for a failed one.
    pub kernels: Vec<String>,
}

impl ModuleReport {
    /// A module left unwritten: a compile failed, or its images disagree.
    fn failed(m: &Module, headers: Vec<PathBuf>) -> ModuleReport {
        ModuleReport {
            module: m.name.clone(),
            source: m.path.clone(),
            status: "failed",
            fatbin: None,
            manifest: None,
            rust: None,
            headers,
            kernels: Vec::new(),
        }
    }
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
    pub jobs_total: usize,
    pub jobs_cached: usize,
    pub jobs_run: usize,
    pub jobs_failed: usize,
    pub wall_seconds: f64,
    /// The sum of the compile times of the jobs that ran.
    pub job_seconds: f64,
    pub modules: Vec<ModuleReport>,
    pub failures: Vec<Failure>,
}

/// A source and its module name.
struct Module {
    path: PathBuf,
    name: String,
    hash: blake3::Hash,
}

/// A compile's outcome: the output and how long it took, or why it failed.
type CompileResult = Result<(Vec<u8>, Duration), Box<Failure>>;

struct Job {
    module: usize,
    target: Target,
    toolchain: usize,
    source_key: String,
    object_key: Option<String>,
    /// Seconds the last compile of this job took, if known.
    last_seconds: Option<f64>,
}

/// A Rust identifier from any text: non-alphanumerics become `_`, a leading digit gets `_`.
fn rust_identifier(text: &str, upper: bool) -> String {
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

/// The arguments that decide a job's output besides the source: part of its cache key.
fn job_args(target: Target, req: &Request, probe: &Probe, source: &Path) -> Vec<String> {
    match probe.compiler {
        Compiler::Nvcc => {
            let virt = target.with_kind(ImageKind::Ptx);
            let mut args = vec!["-gencode".to_owned(), format!("arch={virt},code={target}")];
            args.extend(common_args(req));
            args.extend(skip_defines(req, target));
            args
        }
        Compiler::Nvrtc => nvrtc_args(target, req, source, &[]),
    }
}

/// NVRTC's options: the architecture, the source's own directory (nvcc searches it for quoted
/// includes; NVRTC does not), the request's include directories, defines and extras, then the
/// toolchain's own headers.
fn nvrtc_args(target: Target, req: &Request, source: &Path, toolkit: &[PathBuf]) -> Vec<String> {
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
fn skip_defines(req: &Request, target: Target) -> Vec<String> {
    req.kernel_excludes
        .iter()
        .filter(|(_, targets)| targets.contains(target))
        .map(|(kernel, _)| format!("-DFATKIT_SKIP_{kernel}"))
        .collect()
}

/// The arguments every compile of the request shares: include directories, defines, extras.
fn common_args(req: &Request) -> Vec<String> {
    let mut args: Vec<String> = req
        .include_dirs
        .iter()
        .map(|d| format!("-I{}", d.display()))
        .collect();
    args.extend(req.defines.iter().map(|d| format!("-D{d}")));
    args.extend(req.extra_args.iter().cloned());
    args
}

/// Runs the build. Compile errors land in the report; only problems that stop the whole build
/// (nothing can build a target, unreadable sources, unwritable outputs) are errors.
pub fn build(req: &Request, on_event: &(dyn Fn(&Event) + Sync)) -> Result<Report, BuildError> {
    let start = Instant::now();
    let routes = route(&req.profile, &req.toolchains)?;
    cache::remove_stale_scratch(req.cache.root());
    let mut modules = Vec::new();
    for path_given in &req.sources {
        let path = std::fs::canonicalize(path_given).map_err(io_err(path_given))?;
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

    // Plan, and look every job up in the cache.
    let mut jobs = Vec::new();
    for (module_idx, m) in modules.iter().enumerate() {
        for &(target, tc) in &routes {
            let Some((_, probe)) = req.toolchains.get(tc) else {
                continue;
            };
            let args = job_args(target, req, probe, &m.path);
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
    let mut outputs: Vec<Option<Vec<u8>>> = jobs
        .iter()
        .map(|j| j.object_key.as_ref().and_then(|k| req.cache.object(k)))
        .collect();
    let mut to_run: Vec<usize> = (0..jobs.len())
        .filter(|&i| outputs.get(i).is_some_and(Option::is_none))
        .collect();
    // Longest first, when timings are known; unknown ones first of all.
    to_run.sort_by(|&a, &b| {
        let key = |i: usize| {
            jobs.get(i)
                .and_then(|j| j.last_seconds)
                .unwrap_or(f64::INFINITY)
        };
        key(b).total_cmp(&key(a))
    });
    let cached = jobs.len() - to_run.len();
    on_event(&Event::Planned {
        jobs: jobs.len(),
        cached,
        to_run: to_run.len(),
    });

    // Compile in parallel: one nvcc per source and toolchain for all its missing targets
    // (nvcc's own --threads spreads the targets over the cores), longest batch first.
    let mut batches: Vec<Vec<usize>> = Vec::new();
    for &idx in &to_run {
        let Some(job) = jobs.get(idx) else { continue };
        let nvcc = req
            .toolchains
            .get(job.toolchain)
            .is_some_and(|(_, p)| p.compiler == Compiler::Nvcc);
        let skips = skip_defines(req, job.target);
        let same = |b: &Vec<usize>| {
            nvcc && b.first().and_then(|&f| jobs.get(f)).is_some_and(|f| {
                f.module == job.module
                    && f.toolchain == job.toolchain
                    && skip_defines(req, f.target) == skips
            })
        };
        match batches.iter_mut().find(|b| same(b)) {
            Some(b) => b.push(idx),
            None => batches.push(vec![idx]),
        }
    }
    let estimate = |b: &Vec<usize>| -> f64 {
        b.iter()
            .map(|&i| {
                jobs.get(i)
                    .and_then(|j| j.last_seconds)
                    .unwrap_or(f64::INFINITY)
            })
            .sum()
    };
    batches.sort_by(|a, b| estimate(b).total_cmp(&estimate(a)));
    let queue = Mutex::new(std::collections::VecDeque::from(batches));
    let results: Mutex<Vec<(usize, CompileResult)>> = Mutex::new(Vec::new());
    let done = Mutex::new(0usize);
    let n_workers = req.jobs.max(1).min(to_run.len());
    std::thread::scope(|scope| {
        for _ in 0..n_workers {
            scope.spawn(|| loop {
                let next = queue.lock().ok().and_then(|mut q| q.pop_front());
                let Some(batch) = next else { break };
                let outcome = compile(req, &modules, &jobs, &batch);
                // A failed batch of several targets is retried one target at a time, so that
                // each failure names its target and the targets that compile still do.
                if batch.len() > 1 && outcome.iter().any(|(_, r)| r.is_err()) {
                    if let Ok(mut q) = queue.lock() {
                        q.extend(batch.iter().map(|&i| vec![i]));
                    }
                    continue;
                }
                for (idx, res) in outcome {
                    let (ok, seconds) = match &res {
                        Ok((_, d)) => (true, d.as_secs_f64()),
                        Err(_) => (false, 0.0),
                    };
                    let n_done = done.lock().map(|mut d| {
                        *d += 1;
                        *d
                    });
                    if let (Some(job), Ok(n_done)) = (jobs.get(idx), n_done) {
                        if let Some(m) = modules.get(job.module) {
                            on_event(&Event::JobFinished {
                                source: m
                                    .path
                                    .file_name()
                                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                                target: job.target,
                                ok,
                                seconds,
                                done: n_done,
                                to_run: to_run.len(),
                            });
                        }
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
    let jobs_failed = failures.len();

    // Bundle every module whose jobs all succeeded.
    std::fs::create_dir_all(&req.out_dir).map_err(io_err(&req.out_dir))?;
    cache::remove_stale_temporaries(&req.out_dir);
    let mut module_reports = Vec::new();
    for (module_idx, m) in modules.iter().enumerate() {
        let mine: Vec<(&Job, Option<&Vec<u8>>)> = jobs
            .iter()
            .zip(&outputs)
            .filter(|(j, _)| j.module == module_idx)
            .map(|(j, o)| (j, o.as_ref()))
            .collect();
        let mut headers: Vec<PathBuf> = mine
            .iter()
            .filter_map(|(j, _)| req.cache.source_entry(&j.source_key))
            .flat_map(|e| e.deps)
            .collect();
        headers.sort();
        headers.dedup();
        if mine.iter().any(|(_, o)| o.is_none()) {
            module_reports.push(ModuleReport::failed(m, headers));
            continue;
        }
        let images: Vec<Image<'_>> = mine
            .iter()
            .filter_map(|(j, o)| {
                let data = o.map(Vec::as_slice)?;
                let (kernels, ptx_isa) = image_kernels(j.target, data);
                Some(Image {
                    target: j.target,
                    data,
                    toolchain: req.toolchains.get(j.toolchain)?,
                    kernels,
                    ptx_isa,
                })
            })
            .collect();
        let disagreements = kernel_disagreements(m, &images, &req.kernel_excludes);
        if !disagreements.is_empty() {
            failures.extend(disagreements);
            module_reports.push(ModuleReport::failed(m, headers));
            continue;
        }
        let mut report = bundle(req, m, &images)?;
        report.headers = headers;
        if let Some(fatbin) = &report.fatbin {
            on_event(&Event::ModuleWritten {
                module: m.name.clone(),
                fatbin: fatbin.clone(),
                changed: report.status == "built",
            });
        }
        module_reports.push(report);
    }
    failures.sort_by(|a, b| (&a.source, a.target).cmp(&(&b.source, b.target)));
    let mut route_reports: BTreeMap<usize, TargetSet> = BTreeMap::new();
    for (target, tc) in &routes {
        route_reports.entry(*tc).or_default().insert(*target);
    }
    Ok(Report {
        profile: req.profile.name.clone(),
        out_dir: req.out_dir.clone(),
        routes: route_reports
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
            .collect(),
        jobs_total: jobs.len(),
        jobs_cached: cached,
        jobs_run: to_run.len(),
        jobs_failed,
        wall_seconds: start.elapsed().as_secs_f64(),
        job_seconds,
        modules: module_reports,
        failures,
    })
}

/// The shell-quoted command line, for error messages.
fn command_line(program: &Path, args: &[String]) -> String {
    let quote = |s: &str| {
        if s.contains([' ', '"', '\'', '[', ']']) {
            format!("'{s}'")
        } else {
            s.to_owned()
        }
    };
    std::iter::once(program.display().to_string())
        .chain(args.iter().map(|a| quote(a)))
        .collect::<Vec<_>>()
        .join(" ")
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

/// Runs one nvcc for a batch of jobs (one source, one toolchain, several targets) and stores
/// each target's image in the cache. Every job of the batch gets the outcome.
fn compile(
    req: &Request,
    modules: &[Module],
    jobs: &[Job],
    batch: &[usize],
) -> Vec<(usize, CompileResult)> {
    let first = batch.first().and_then(|&i| jobs.get(i));
    let (Some(first), Some(m), Some((tc, probe))) = (
        first,
        first.and_then(|j| modules.get(j.module)),
        first.and_then(|j| req.toolchains.get(j.toolchain)),
    ) else {
        return Vec::new();
    };
    if probe.compiler == Compiler::Nvrtc {
        return batch
            .iter()
            .filter_map(|&i| Some((i, compile_nvrtc(req, m, jobs.get(i)?, tc, probe))))
            .collect();
    }
    let toolchain = tc.short(probe);
    let fail_all = |location: Option<String>,
                    message: String,
                    command: String,
                    status: String|
     -> Vec<(usize, CompileResult)> {
        batch
            .iter()
            .filter_map(|&i| {
                let job = jobs.get(i)?;
                Some((
                    i,
                    Err(Box::new(Failure {
                        source: m.path.clone(),
                        target: job.target,
                        toolchain: toolchain.clone(),
                        location: location.clone(),
                        message: message.clone(),
                        command: command.clone(),
                        status: status.clone(),
                    })),
                ))
            })
            .collect()
    };
    let tmp = req.cache.root().join("tmp").join(format!(
        "{}-{}",
        std::process::id(),
        first.source_key.get(..16).unwrap_or(&first.source_key)
    ));
    if let Err(e) = std::fs::create_dir_all(&tmp) {
        return fail_all(
            None,
            format!("{}: {e}", tmp.display()),
            String::new(),
            "could not start".to_owned(),
        );
    }
    let out = tmp.join("out.fatbin");
    let mut args = vec!["--fatbin".to_owned()];
    // The images are split out of nvcc's fatbin: uncompressed saves the round trip
    // (--compress-mode is CUDA 12.8's; older releases compress only when asked).
    if probe.version >= CudaVersion::new(12, 8) {
        args.push("--compress-mode=none".to_owned());
    }
    if let Some(ccbin) = probe.host.as_ref().and_then(|h| h.ccbin.as_ref()) {
        args.extend(["-ccbin".to_owned(), ccbin.display().to_string()]);
    }
    for &i in batch {
        let Some(job) = jobs.get(i) else { continue };
        let virt = job.target.with_kind(ImageKind::Ptx);
        args.push("-gencode".to_owned());
        args.push(format!("arch={virt},code={}", job.target));
    }
    if batch.len() > 1 {
        args.extend(["--threads".to_owned(), req.jobs.max(1).to_string()]);
    }
    args.extend(common_args(req));
    args.extend(skip_defines(req, first.target));
    // --keep leaves the device-side preprocessed sources (*.cpp1.ii) in `tmp`: their line
    // markers name every header the compile read, at no cost (nvcc's -MMD would preprocess
    // again, on the host side, which also misses headers included under __CUDA_ARCH__).
    args.extend([
        "--keep".to_owned(),
        "--keep-dir".to_owned(),
        tmp.display().to_string(),
        "-o".to_owned(),
        out.display().to_string(),
        m.path.display().to_string(),
    ]);
    let command = command_line(&tc.nvcc(), &args);
    let start = Instant::now();
    let res = Command::new(tc.nvcc()).args(&args).output();
    let took = start.elapsed();
    let output = match res {
        Ok(o) => o,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return fail_all(None, e.to_string(), command, "could not start".to_owned());
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() {
        let _ = std::fs::remove_dir_all(&tmp);
        return fail_all(
            first_error_location(&text),
            text.trim_end().to_owned(),
            command,
            output.status.to_string(),
        );
    }
    let fatbin = std::fs::read(&out);
    let deps = preprocessed_deps(&tmp, &m.path, &tc.root);
    let _ = std::fs::remove_dir_all(&tmp);
    let fatbin = match fatbin {
        Ok(f) => f,
        Err(e) => {
            return fail_all(
                None,
                format!("nvcc succeeded but {}: {e}", out.display()),
                command,
                output.status.to_string(),
            )
        }
    };
    let container =
        match fatkit_fatbin::Container::parse(&fatbin, fatkit_fatbin::Strictness::AnyKind) {
            Ok(c) => c,
            Err(e) => {
                return fail_all(
                    None,
                    format!("nvcc wrote a fatbin fatkit cannot read: {e}"),
                    command,
                    output.status.to_string(),
                )
            }
        };
    let limits = fatkit_fatbin::Limits::default();
    let share = took / u32::try_from(batch.len()).unwrap_or(1).max(1);
    batch
        .iter()
        .filter_map(|&i| {
            let job = jobs.get(i)?;
            let image = container
                .entries()
                .find(|e| e.target() == Some(job.target))
                .and_then(|e| e.image(&limits).ok())
                .map(|b| b.into_owned());
            let res = match image {
                Some(bytes) => {
                    // A cache that cannot be written only costs a recompile next time.
                    if let Some(key) = Cache::object_key(&job.source_key, &deps) {
                        let _ = req.cache.put_object(&key, &bytes);
                        let entry = SourceEntry {
                            deps: deps.clone(),
                            seconds: share.as_secs_f64(),
                        };
                        let _ = req.cache.put_source_entry(&job.source_key, &entry);
                    }
                    Ok((bytes, share))
                }
                None => Err(Box::new(Failure {
                    source: m.path.clone(),
                    target: job.target,
                    toolchain: toolchain.clone(),
                    location: None,
                    message: format!("nvcc's fatbin has no {} entry", job.target),
                    command: command.clone(),
                    status: output.status.to_string(),
                })),
            };
            Some((i, res))
        })
        .collect()
}

/// Compiles one job with NVRTC, in this process, and stores the image in the cache.
fn compile_nvrtc(
    req: &Request,
    m: &Module,
    job: &Job,
    tc: &Toolchain,
    probe: &Probe,
) -> CompileResult {
    let args = nvrtc_args(job.target, req, &m.path, &tc.include_dirs);
    let library = tc.program();
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
            toolchain: tc.short(probe),
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
    let name = m.path.display().to_string();
    let compiled = nvrtc
        .compile(&name, &source, &args, job.target.kind)
        .map_err(|e| fail(None, e.to_string(), "NVRTC call failed".to_owned()))?
        .map_err(|f| fail(first_error_location(&f.log), f.log, f.status))?;
    let took = start.elapsed();
    let mut search: Vec<PathBuf> = m.path.parent().map(Path::to_path_buf).into_iter().collect();
    search.extend(req.include_dirs.iter().cloned());
    let deps: Vec<PathBuf> = crate::nvrtc::scan_includes(&m.path, &search)
        .into_iter()
        .filter(|p| {
            !tc.include_dirs.iter().any(|d| p.starts_with(d)) && !is_toolchain_header(p, &tc.root)
        })
        .collect();
    if let Some(key) = Cache::object_key(&job.source_key, &deps) {
        let _ = req.cache.put_object(&key, &compiled.image);
        let entry = SourceEntry {
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

/// The files named by the line markers (`# 12 "/path/h.cuh" 1`) of the preprocessed sources
/// nvcc kept in `dir`, less the source itself and the toolchain's and system's headers.
fn preprocessed_deps(dir: &Path, source: &Path, toolkit_root: &Path) -> Vec<PathBuf> {
    let mut names = std::collections::BTreeSet::new();
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
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
    let mut out: Vec<PathBuf> = names
        .into_iter()
        .filter(|p| p.is_absolute() && !is_toolchain_header(p, toolkit_root))
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
        .filter(|p| p != source && !is_toolchain_header(p, toolkit_root))
        .collect();
    out.sort();
    out.dedup();
    out
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

/// One entry of a module manifest.
#[derive(Clone, Debug, Serialize)]
pub struct ManifestEntry {
    pub target: Target,
    pub kind: ImageKind,
    /// `nvcc` or `nvrtc`.
    pub compiler: Compiler,
    /// The compiler's CUDA release.
    pub toolkit: CudaVersion,
    pub ptx_isa: Option<PtxIsa>,
    pub size: usize,
    pub kernels: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct KernelTargets {
    pub name: String,
    pub targets: TargetSet,
}

/// `<module>.manifest.json`.
#[derive(Clone, Debug, Serialize)]
pub struct Manifest {
    pub schema: u32,
    pub module: String,
    pub source: String,
    pub profile: String,
    pub fatbin: String,
    pub fatbin_size: usize,
    pub fatbin_blake3: String,
    pub compression: Compression,
    pub min_driver: Option<MinDriver>,
    pub entries: Vec<ManifestEntry>,
    pub kernels: Vec<KernelTargets>,
}

/// The minimum driver of a module: every entry's need, and ZSTD entries a CUDA 12.4-level
/// driver.
fn min_driver(entries: &[ManifestEntry], compression: Compression) -> Option<MinDriver> {
    let mut needs: Vec<(CudaVersion, String)> = entries
        .iter()
        .filter_map(|e| MinDriver::need(e.target, e.ptx_isa, Some(e.toolkit)))
        .collect();
    if let Some(v) = compression.min_driver_cuda() {
        needs.push((v, format!("{} compression", compression.name())));
    }
    MinDriver::of(needs)
}

/// Writes `path` if its contents differ; returns whether it did.
pub(crate) fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<bool, BuildError> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(false);
    }
    cache::write_atomic(path, bytes).map_err(io_err(path))?;
    Ok(true)
}

fn bundle(req: &Request, m: &Module, images: &[Image<'_>]) -> Result<ModuleReport, BuildError> {
    let ident = m.path.file_name().map(|n| n.to_string_lossy().into_owned());
    let compression = req.profile.compress;
    let inputs: Vec<Input<'_>> = images
        .iter()
        .map(|i| Input {
            target: i.target,
            data: i.data,
            identifier: ident.as_deref(),
            compression,
        })
        .collect();
    let fatbin = write::write(&inputs)
        .map_err(|e| BuildError::Input(format!("{}: cannot bundle: {e}", m.path.display())))?;
    let mut entries = Vec::new();
    let mut kernels: BTreeMap<String, TargetSet> = BTreeMap::new();
    for i in images {
        let (_, probe) = i.toolchain;
        for k in &i.kernels {
            kernels.entry(k.clone()).or_default().insert(i.target);
        }
        entries.push(ManifestEntry {
            target: i.target,
            kind: i.target.kind,
            compiler: probe.compiler,
            toolkit: probe.version,
            ptx_isa: i.ptx_isa,
            size: i.data.len(),
            kernels: i.kernels.clone(),
        });
    }
    let manifest = Manifest {
        schema: 1,
        module: m.name.clone(),
        source: m
            .path
            .strip_prefix(&req.root)
            .unwrap_or(&m.path)
            .display()
            .to_string(),
        profile: req.profile.name.clone(),
        fatbin: format!("{}.fatbin", m.name),
        fatbin_size: fatbin.len(),
        fatbin_blake3: blake3::hash(&fatbin).to_hex().to_string(),
        compression: req.profile.compress,
        min_driver: min_driver(&entries, req.profile.compress),
        kernels: kernels
            .into_iter()
            .map(|(name, targets)| KernelTargets { name, targets })
            .collect(),
        entries,
    };
    let json =
        serde_json::to_vec_pretty(&manifest).map_err(|e| BuildError::Input(e.to_string()))?;
    let rust = generate_rust(&manifest);
    let fatbin_path = req.out_dir.join(format!("{}.fatbin", m.name));
    let manifest_path = req.out_dir.join(format!("{}.manifest.json", m.name));
    let rust_path = req.out_dir.join(format!("{}.rs", m.name));
    // The fatbin first: the manifest and the Rust module describe it.
    let mut changed = write_if_changed(&fatbin_path, &fatbin)?;
    changed |= write_if_changed(&manifest_path, &json)?;
    changed |= write_if_changed(&rust_path, rust.as_bytes())?;
    Ok(ModuleReport {
        module: m.name.clone(),
        source: m.path.clone(),
        status: if changed { "built" } else { "unchanged" },
        fatbin: Some(fatbin_path),
        manifest: Some(manifest_path),
        rust: Some(rust_path),
        headers: Vec::new(),
        kernels: manifest.kernels.iter().map(|k| k.name.clone()).collect(),
    })
}

/// One compiled image of a module, read once: its kernels and PTX ISA.
struct Image<'a> {
    target: Target,
    data: &'a [u8],
    toolchain: &'a (Toolchain, Probe),
    kernels: Vec<String>,
    ptx_isa: Option<PtxIsa>,
}

/// The kernels of one image: a cubin's symbol table, or the `.entry` lines of PTX.
fn image_kernels(target: Target, data: &[u8]) -> (Vec<String>, Option<PtxIsa>) {
    match target.kind {
        ImageKind::Cubin => (
            fatkit_fatbin::cubin::inspect(data)
                .map(|i| i.kernels)
                .unwrap_or_default(),
            None,
        ),
        ImageKind::Ptx => {
            let info = fatkit_fatbin::ptx::inspect(data);
            (info.kernels, info.version)
        }
    }
}

/// Every image of a module must hold every kernel: one that some entries lack is a launch
/// failing on exactly the GPUs those entries serve. Typically NVRTC, which sees no host code,
/// dropped a template kernel that only a host-side launch instantiated.
fn kernel_disagreements(
    m: &Module,
    images: &[Image<'_>],
    excludes: &BTreeMap<String, TargetSet>,
) -> Vec<Failure> {
    let excluded = |k: &str, t: Target| excludes.get(k).is_some_and(|ts| ts.contains(t));
    let listed: Vec<(Target, &Vec<String>, String, Compiler)> = images
        .iter()
        .map(|i| {
            let (tc, probe) = i.toolchain;
            (i.target, &i.kernels, tc.short(probe), probe.compiler)
        })
        .collect();
    let mut all: Vec<&String> = listed.iter().flat_map(|(_, k, _, _)| k.iter()).collect();
    all.sort();
    all.dedup();
    let mut out = Vec::new();
    for (target, kernels, toolchain, compiler) in &listed {
        let missing: Vec<&str> = all
            .iter()
            .filter(|k| !kernels.contains(k) && !excluded(k, *target))
            .map(|k| k.as_str())
            .collect();
        let unguarded: Vec<&String> = kernels.iter().filter(|k| excluded(k, *target)).collect();
        if !unguarded.is_empty() {
            let names: Vec<&str> = unguarded.iter().map(|k| k.as_str()).collect();
            out.push(Failure {
                source: m.path.clone(),
                target: *target,
                toolchain: "fatkit".to_owned(),
                location: None,
                message: format!(
                    "the per-kernel overrides exclude {} from {target}, but the {target} image built by {toolchain} holds it\nfix: guard the kernel with `#ifndef FATKIT_SKIP_<name>` ... `#endif` (fatkit defines FATKIT_SKIP_<name> in the compiles that exclude it), or drop the override",
                    names.join(", ")
                ),
                command: String::new(),
                status: "a kernel override has no effect".to_owned(),
            });
        }
        if missing.is_empty() {
            continue;
        }
        let mut lines = Vec::new();
        for k in &missing {
            let having: Vec<String> = listed
                .iter()
                .filter(|(_, ks, _, _)| ks.iter().any(|x| x == k))
                .map(|(t, _, tc, _)| format!("{t} ({tc})"))
                .collect();
            lines.push(format!(
                "kernel {k} is missing from the {target} image built by {toolchain}; it is in {}",
                having.join(", ")
            ));
        }
        let fix = match compiler {
            Compiler::Nvrtc => format!(
                "fix: NVRTC compiles no host code, so a template kernel instantiated only by a host-side launch (or a kernel under #ifndef __CUDACC_RTC__) is dropped: instantiate it explicitly (`template __global__ void k<float>(float*);`) or declare it extern \"C\" without templates, or pin {target} to nvcc in the profile's [toolchain] table"
            ),
            Compiler::Nvcc => format!(
                "fix: a kernel under an #if on __CUDA_ARCH__ is missing for some targets; define it (even as a stub that traps) for every target, or drop {target} from the profile"
            ),
        };
        lines.push(fix);
        out.push(Failure {
            source: m.path.clone(),
            target: *target,
            toolchain: "fatkit".to_owned(),
            location: None,
            message: lines.join("\n"),
            command: String::new(),
            status: "kernel lists disagree".to_owned(),
        });
    }
    out
}

/// `softmax_f32` -> `SOFTMAX_F32`.
fn const_name(kernel: &str) -> String {
    rust_identifier(kernel, true)
}

/// `<module>.rs`, for `include!`: the fatbin (8-byte aligned), the manifest, kernel names.
pub fn generate_rust(manifest: &Manifest) -> String {
    let m = &manifest.module;
    let mut out = format!(
        "// @generated by `fatkit build-kernels` from {} (profile {}). Do not edit.\n\n\
         /// The module's name.\npub const NAME: &str = \"{m}\";\n\n\
         /// The fatbin, 8-byte aligned for `cuModuleLoadData`.\n\
         pub static FATBIN: &[u8] = {{\n    #[repr(C, align(8))]\n    struct Aligned<T: ?Sized>(T);\n    \
         static ALIGNED: &Aligned<[u8]> = &Aligned(*include_bytes!(\"{m}.fatbin\"));\n    &ALIGNED.0\n}};\n\n\
         /// The manifest: kernels x targets, toolkit and PTX ISA per entry, minimum driver.\n\
         pub static MANIFEST_JSON: &str = include_str!(\"{m}.manifest.json\");\n\n\
         /// Every target in the fatbin.\npub const TARGETS: &[&str] = &[{}];\n\n\
         /// Every image: (target, PTX ISA as (major, minor) for PTX, kernels it holds), for\n\
         /// `fatkit_runtime::Module` to check a device against without parsing anything.\n\
         pub type ImageRow = (&'static str, Option<(u8, u8)>, &'static [&'static str]);\n\n\
         /// The rows, one per entry of the fatbin.\n\
         pub const IMAGES: &[ImageRow] = &[\n{}];\n\n\
         /// Kernel names, as `cuModuleGetFunction` wants them.\npub mod kernels {{\n",
        manifest.source.rsplit('/').next().unwrap_or(&manifest.source),
        manifest.profile,
        manifest.entries.iter().map(|e| format!("\"{}\"", e.target)).collect::<Vec<_>>().join(", "),
        manifest
            .entries
            .iter()
            .map(|e| {
                let isa = e.ptx_isa.map_or_else(|| "None".to_owned(), |i| format!("Some(({}, {}))", i.major, i.minor));
                let kernels: Vec<String> = e.kernels.iter().map(|k| format!("{k:?}")).collect();
                format!("    (\"{}\", {isa}, &[{}]),\n", e.target, kernels.join(", "))
            })
            .collect::<String>(),
    );
    let mut used: Vec<String> = Vec::new();
    for k in &manifest.kernels {
        let mut name = const_name(&k.name);
        while used.contains(&name) {
            name.push('_');
        }
        out.push_str(&format!("    pub const {name}: &str = {:?};\n", k.name));
        used.push(name);
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            module_name(Path::new("cuda-src/softmax-v2.cu")),
            "softmax_v2"
        );
        assert_eq!(module_name(Path::new("3d.cu")), "_3d");
        assert_eq!(const_name("softmax_f32"), "SOFTMAX_F32");
        assert_eq!(const_name("_Z3fooPf"), "_Z3FOOPF");
    }

    fn toolchain(compiler: Compiler, version: &str, targets: &str) -> (Toolchain, Probe) {
        let version: CudaVersion = version.parse().unwrap();
        let targets =
            fatkit_arch::notation::parse_any(targets, &fatkit_arch::notation::Context::default())
                .unwrap();
        let mut tc = Toolchain::nvcc_at(PathBuf::from("/x"), Some(version), "test");
        tc.compiler = compiler;
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
