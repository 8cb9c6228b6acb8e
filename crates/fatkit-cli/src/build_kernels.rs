//! `build-kernels`: every `.cu` of the workspace's `cuda-src/`, for every target of a profile.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use clap::{Args, ValueEnum};
use fatkit_build::cache::Cache;
use fatkit_build::pipeline::{self, BuildError, Event, Request};
use fatkit_build::toolchain;
use fatkit_build::ProfileSet;

use crate::{Error, Outcome, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MessageFormat {
    Human,
    /// One JSON object per line: events, then the report (`"event": "build_finished"`)
    Json,
}

#[derive(Debug, Args)]
pub struct BuildKernels {
    /// Arch profile: a name from arch-profiles/ or a .toml path
    #[arg(long, default_value = "full")]
    profile: String,
    /// Parallel compiles [default: the number of cores]
    #[arg(long, short)]
    jobs: Option<usize>,
    /// Where the fatbins, manifests and Rust modules go [default: target/fatkit/kernels]
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Directory of .cu sources [default: cuda-src/ of the workspace]
    #[arg(long, value_name = "DIR")]
    src: Option<PathBuf>,
    /// Use this nvcc first
    #[arg(long, value_name = "PATH")]
    nvcc: Option<PathBuf>,
    /// Never provision a toolchain; fail if none found can build the profile
    #[arg(long)]
    offline: bool,
    /// Compile cache [default: ~/.cache/fatkit/build, or $FATKIT_CACHE_DIR/build]
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Directory of profiles [default: arch-profiles/ here or in a parent directory]
    #[arg(long, env = "FATKIT_PROFILES_DIR", value_name = "DIR")]
    profiles_dir: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = MessageFormat::Human)]
    message_format: MessageFormat,
}

impl From<BuildError> for Error {
    fn from(e: BuildError) -> Error {
        Error::Input(e.to_string())
    }
}

impl BuildKernels {
    pub fn run(self, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        let json = self.message_format == MessageFormat::Json;
        let cwd = std::env::current_dir()?;
        let set = match &self.profiles_dir {
            Some(dir) => ProfileSet::open(dir),
            None => ProfileSet::discover(&cwd),
        };
        let (profile, root) = match set {
            Ok(set) => {
                let root = set
                    .dir
                    .parent()
                    .map_or_else(|| cwd.clone(), Path::to_path_buf);
                (set.load(&self.profile)?, root)
            }
            Err(_) if self.profile.ends_with(".toml") => (
                fatkit_build::profile::load(Path::new(&self.profile))?,
                cwd.clone(),
            ),
            Err(e) => return Err(e.into()),
        };
        let src = self.src.clone().unwrap_or_else(|| root.join("cuda-src"));
        let sources = pipeline::sources_in(&src).map_err(|e| {
            Error::Input(format!(
                "{}: cannot read the sources: {e}; pass --src DIR",
                src.display()
            ))
        })?;
        if sources.is_empty() {
            return Err(Error::Input(format!(
                "{}: no .cu files to build; pass --src DIR",
                src.display()
            )));
        }
        let toolchains =
            toolchain::for_profile(&profile, self.nvcc.as_deref(), self.offline, &mut |line| {
                eprintln!("build-kernels: {line}")
            })?;
        let cache_root = match &self.cache_dir {
            Some(dir) => dir.clone(),
            None => toolchain::cache_dir()?.join("build"),
        };
        let req = Request {
            profile,
            sources,
            include_dirs: vec![src.clone()],
            defines: Vec::new(),
            extra_args: Vec::new(),
            out_dir: self
                .out
                .clone()
                .unwrap_or_else(|| root.join("target/fatkit/kernels")),
            root: root.clone(),
            jobs: self
                .jobs
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
            cache: Cache::new(cache_root),
            toolchains,
        };

        let progress = Progress::new(json, out);
        let res = pipeline::build(&req, &|e| progress.event(e));
        let out = progress.finish();
        let report = res?;
        if json {
            #[derive(serde::Serialize)]
            struct Finished<'a> {
                event: &'static str,
                #[serde(flatten)]
                report: &'a pipeline::Report,
            }
            serde_json::to_writer(
                &mut *out,
                &Finished {
                    event: "build_finished",
                    report: &report,
                },
            )
            .map_err(std::io::Error::from)?;
            writeln!(out)?;
        } else {
            for f in &report.failures {
                writeln!(out, "error: {f}")?;
            }
            for r in &report.routes {
                writeln!(out, "{} -> {} [{}]", r.targets, r.toolchain, r.why)?;
                if let Some(host) = &r.host {
                    writeln!(out, "    host compiler: {host}")?;
                }
            }
            let built = report
                .modules
                .iter()
                .filter(|m| m.status == "built")
                .count();
            let failed = report
                .modules
                .iter()
                .filter(|m| m.status == "failed")
                .count();
            writeln!(
                out,
                "profile {}: {} modules ({built} written, {failed} failed) in {}; {} jobs: {} compiled, {} cached, {} failed; {:.1}s",
                report.profile,
                report.modules.len(),
                report.out_dir.display(),
                report.jobs_total,
                report.jobs_run,
                report.jobs_cached,
                report.jobs_failed,
                report.wall_seconds
            )?;
        }
        Ok(if report.failures.is_empty() {
            Outcome::Ok
        } else {
            Outcome::Finding
        })
    }
}

/// Jobs done / total on a terminal; a plain line per job in CI and pipes; JSON lines to the
/// command's output for `--message-format json`.
struct Progress<'a> {
    out: Mutex<&'a mut (dyn Write + Send)>,
    json: bool,
    live: bool,
    last_len: Mutex<usize>,
}

impl<'a> Progress<'a> {
    fn new(json: bool, out: &'a mut (dyn Write + Send)) -> Progress<'a> {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
        Progress {
            out: Mutex::new(out),
            json,
            live: !json && !ci && std::io::stderr().is_terminal(),
            last_len: Mutex::new(0),
        }
    }

    fn event(&self, e: &Event) {
        if self.json {
            if let (Ok(line), Ok(mut out)) = (serde_json::to_string(e), self.out.lock()) {
                // A closed pipe shows up again when the report is written.
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
            return;
        }
        match e {
            Event::Planned {
                jobs,
                cached,
                to_run,
            } => {
                eprintln!("build-kernels: {jobs} jobs, {cached} cached, {to_run} to compile")
            }
            Event::JobFinished {
                source,
                target,
                ok,
                seconds,
                done,
                to_run,
            } => {
                let status = if *ok {
                    format!("{seconds:.1}s")
                } else {
                    "FAILED".to_owned()
                };
                let line = format!("[{done:>3}/{to_run}] {source} {target} {status}");
                if self.live {
                    let mut last = self.last_len.lock().unwrap_or_else(|p| p.into_inner());
                    eprint!("\r{line:<width$}", width = *last);
                    *last = line.len();
                } else {
                    eprintln!("{line}");
                }
            }
            Event::ModuleWritten { .. } => {}
        }
    }

    /// Ends the live line and gives the output back for the report.
    fn finish(self) -> &'a mut (dyn Write + Send) {
        if self.live {
            eprintln!();
        }
        self.out.into_inner().unwrap_or_else(|p| p.into_inner())
    }
}
