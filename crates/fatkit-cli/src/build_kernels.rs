//! `build-kernels`: every `.cu` of the workspace's `cuda-src/` and of every package declaring
//! `[package.metadata.fatkit]`, for every target of a profile (`fatkit_project::units`).

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Mutex;

use clap::{Args, ValueEnum};
use fatkit_build::pipeline::{Event, ModuleStatus, Report};
use fatkit_package::workspace;
use fatkit_project::units::{self, Observer, Options, Unit, UnitReport};

use crate::{Outcome, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum MessageFormat {
    Human,
    /// One JSON object per line: events, then the report (`"event": "build_finished"`)
    Json,
}

#[derive(Debug, Args)]
pub struct BuildKernels {
    /// The library's options, as the arguments they are (`fatkit_project::units::Options`).
    #[command(flatten)]
    options: Options,
    #[arg(long, value_enum, default_value_t = MessageFormat::Human)]
    message_format: MessageFormat,
}

impl BuildKernels {
    /// A build of a whole workspace (what `package` and `cargo xtask test` run first): for
    /// `profile`, or each unit's own.
    pub fn for_workspace(profile: Option<&str>) -> BuildKernels {
        BuildKernels {
            options: Options::for_profile(profile),
            message_format: MessageFormat::Human,
        }
    }

    /// A build with these options (`plan` builds its candidates so), its progress as text.
    pub fn with(options: Options) -> BuildKernels {
        BuildKernels {
            options,
            message_format: MessageFormat::Human,
        }
    }

    pub fn run(self, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        let cwd = self.options.start_dir()?;
        self.run_in(&cwd, out)
    }

    /// Runs as if started in `dir`.
    pub fn run_in(mut self, dir: &Path, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        self.options = self.options.absolute()?;
        let units = units::units(&self.options, dir, None)?;
        self.run_units(units, out)
    }

    /// Runs for a workspace the caller has read already (`package`).
    pub fn run_for(
        mut self,
        ws: &workspace::Workspace,
        out: &mut (dyn Write + Send),
    ) -> Result<Outcome> {
        self.options = self.options.absolute()?;
        let units = units::units(&self.options, &ws.root, Some(ws))?;
        self.run_units(units, out)
    }

    fn run_units(self, units: Vec<Unit>, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        let progress = Progress::new(self.message_format == MessageFormat::Json, out);
        // The environment, read once as the command starts.
        let env = fatkit_build::pipeline::BuildEnv::of_process();
        let res = units::build(&self.options, &env, units, &progress);
        let failed = progress.failed();
        let reports = res?;
        Ok(if failed || !reports.iter().all(UnitReport::ok) {
            Outcome::Finding
        } else {
            Outcome::Ok
        })
    }
}

fn write_report(out: &mut dyn Write, json: bool, unit: &UnitReport) -> std::io::Result<()> {
    if json {
        #[derive(serde::Serialize)]
        struct Finished<'a> {
            event: &'static str,
            unit: &'a str,
            #[serde(flatten)]
            report: &'a Report,
        }
        serde_json::to_writer(
            &mut *out,
            &Finished {
                event: "build_finished",
                unit: &unit.label,
                report: &unit.report,
            },
        )?;
        writeln!(out)?;
    } else {
        let report = &unit.report;
        for f in &report.failures {
            writeln!(out, "error: {f}")?;
        }
        for some in &report.some_targets {
            writeln!(out, "help: {some}")?;
        }
        for r in &report.routes {
            writeln!(out, "{} -> {} [{}]", r.targets, r.toolchain, r.why)?;
            if let Some(host) = &r.host {
                writeln!(out, "    host compiler: {host}")?;
            }
        }
        if let Some(l) = &report.launcher {
            writeln!(
                out,
                "cubin jobs ran under the launcher {l}; PTX jobs ran nvcc directly"
            )?;
        }
        let count = |s: ModuleStatus| report.modules.iter().filter(|m| m.status == s).count();
        writeln!(
            out,
            "profile {}: {} modules ({} written, {} failed) in {}; {} jobs: {} compiled, {} cached, {} failed; {:.1}s",
            report.profile,
            report.modules.len(),
            count(ModuleStatus::Built),
            count(ModuleStatus::Failed),
            report.out_dir.display(),
            report.jobs_total,
            report.jobs_run,
            report.jobs_cached,
            report.jobs_failed,
            report.wall_seconds
        )?;
    }
    for line in &unit.unknown_overrides {
        writeln!(out, "error: {line}")?;
    }
    Ok(())
}

/// Where a build's progress goes: the report and JSON events to the command's output; job
/// lines to stderr (a live line on a terminal, a plain line per job in CI and pipes).
pub(crate) struct Progress<'a> {
    out: Mutex<&'a mut (dyn Write + Send)>,
    err: Mutex<std::io::Stderr>,
    json: bool,
    live: bool,
    last_len: Mutex<usize>,
    /// An output that could not be written.
    write_failed: Mutex<bool>,
}

impl<'a> Progress<'a> {
    pub(crate) fn new(json: bool, out: &'a mut (dyn Write + Send)) -> Progress<'a> {
        Progress {
            out: Mutex::new(out),
            err: Mutex::new(std::io::stderr()),
            json,
            live: !json && !fatkit_toolchain::command::is_ci() && std::io::stderr().is_terminal(),
            last_len: Mutex::new(0),
            write_failed: Mutex::new(false),
        }
    }

    pub(crate) fn failed(&self) -> bool {
        self.write_failed.lock().map_or(true, |f| *f)
    }

    fn to_out(&self, f: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) {
        let ok = self
            .out
            .lock()
            .map(|mut out| f(&mut **out).is_ok())
            .unwrap_or(false);
        if !ok {
            if let Ok(mut failed) = self.write_failed.lock() {
                *failed = true;
            }
        }
    }

    fn to_err(&self, line: &str, newline: bool) {
        if let Ok(mut err) = self.err.lock() {
            // Progress is best effort: a closed stderr loses lines, not the build.
            let _ = if newline {
                writeln!(err, "{line}")
            } else {
                write!(err, "{line}")
            };
        }
    }

    fn end_live_line(&self) {
        if self.live {
            if let Ok(mut last) = self.last_len.lock() {
                if *last > 0 {
                    self.to_err("", true);
                    *last = 0;
                }
            }
        }
    }
}

impl Observer for Progress<'_> {
    fn unit_started(&self, unit: &Unit) {
        if !self.json {
            let line = format!("== {} (profile {})", unit.label, unit.ask.profile.name);
            self.to_out(|out| writeln!(out, "{line}"));
        }
    }

    fn log(&self, line: &str) {
        self.to_err(&format!("build-kernels: {line}"), true);
    }

    fn event(&self, e: &Event) {
        if self.json {
            if let Ok(line) = serde_json::to_string(e) {
                self.to_out(|out| {
                    writeln!(out, "{line}")?;
                    out.flush()
                });
            }
            return;
        }
        match e {
            Event::Planned {
                jobs,
                cached,
                to_run,
            } => self.to_err(
                &format!("build-kernels: {jobs} jobs, {cached} cached, {to_run} to compile"),
                true,
            ),
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
                    self.to_err(&format!("\r{line:<width$}", width = *last), false);
                    *last = line.len();
                } else {
                    self.to_err(&line, true);
                }
            }
            Event::ModuleWritten { .. } => {}
        }
    }

    fn unit_finished(&self, report: &UnitReport) {
        self.end_live_line();
        self.to_out(|out| write_report(out, self.json, report));
    }

    fn message(&self, line: &str) {
        self.to_out(|out| writeln!(out, "{line}"));
    }
}
