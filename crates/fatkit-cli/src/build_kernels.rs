//! `build-kernels`: every `.cu` of the workspace's `cuda-src/` and of every package declaring
//! `[package.metadata.fatkit]`, for every target of a profile.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use clap::{Args, ValueEnum};
use fatkit_build::cache::Cache;
use fatkit_build::pipeline::{self, BuildError, Event, Request};
use fatkit_build::ProfileSet;
use fatkit_build::{toolchain, workspace};

use crate::{Error, Outcome, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MessageFormat {
    Human,
    /// One JSON object per line: events, then the report (`"event": "build_finished"`)
    Json,
}

#[derive(Debug, Args)]
pub struct BuildKernels {
    /// Arch profile: a name from arch-profiles/ or a .toml path [default: full for cuda-src/,
    /// each package's own for [package.metadata.fatkit]]
    #[arg(long)]
    profile: Option<String>,
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
    /// Build the workspace of this Cargo.toml instead of the current directory's
    #[arg(long, value_name = "PATH")]
    manifest_path: Option<PathBuf>,
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

/// One build: a directory of sources or a package's `[package.metadata.fatkit]`.
struct Unit {
    /// `cuda-src` or `package NAME`, for the report.
    label: String,
    profile: fatkit_arch::profile::Profile,
    sources: Vec<PathBuf>,
    module_names: std::collections::BTreeMap<PathBuf, String>,
    include_dirs: Vec<PathBuf>,
    defines: Vec<String>,
    kernel_excludes: std::collections::BTreeMap<String, fatkit_arch::TargetSet>,
    out_dir: PathBuf,
    root: PathBuf,
}

impl BuildKernels {
    /// A profile by name or path: from `set` when there is one, else a `.toml` path.
    fn load_profile(
        set: Option<&ProfileSet>,
        spec: &str,
        base: &Path,
    ) -> Result<fatkit_arch::profile::Profile> {
        if spec.ends_with(".toml") {
            let path = if Path::new(spec).is_absolute() {
                PathBuf::from(spec)
            } else {
                base.join(spec)
            };
            if path.is_file() {
                return Ok(fatkit_build::profile::load(&path)?);
            }
        }
        match set {
            Some(set) => Ok(set.load(spec)?),
            None => Ok(fatkit_build::profile::load(Path::new(spec))?),
        }
    }

    /// What to build: `--src DIR`, or the workspace's `cuda-src/` and every package with
    /// `[package.metadata.fatkit]`.
    /// `known`: the workspace, when the caller has read it already.
    fn units(&self, cwd: &Path, known: Option<&workspace::Workspace>) -> Result<Vec<Unit>> {
        let cwd = cwd.to_path_buf();
        let set = match &self.profiles_dir {
            Some(dir) => Some(ProfileSet::open(dir)?),
            None => ProfileSet::discover(&cwd).ok(),
        };
        let root = set
            .as_ref()
            .and_then(|s| s.dir.parent())
            .map_or_else(|| cwd.clone(), Path::to_path_buf);
        let profile_spec = self.profile.as_deref().unwrap_or("full");
        let mut units = Vec::new();
        let src = self.src.clone().unwrap_or_else(|| root.join("cuda-src"));
        if self.src.is_some() || src.is_dir() {
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
            units.push(Unit {
                label: "cuda-src".to_owned(),
                profile: Self::load_profile(set.as_ref(), profile_spec, &cwd)?,
                sources,
                module_names: Default::default(),
                include_dirs: vec![src.clone()],
                defines: Vec::new(),
                kernel_excludes: Default::default(),
                out_dir: self
                    .out
                    .clone()
                    .unwrap_or_else(|| root.join("target/fatkit/kernels")),
                root: root.clone(),
            });
        }
        if self.src.is_some() {
            return Ok(units);
        }
        // Every package declaring kernels; not a cargo workspace is fine when cuda-src/ is.
        let discovered;
        let ws = match known {
            Some(ws) => ws,
            None => match workspace::discover(&cwd) {
                Ok(ws) => {
                    discovered = ws;
                    &discovered
                }
                Err(e @ workspace::WorkspaceError::Invalid { .. }) => {
                    return Err(Error::Input(e.to_string()))
                }
                Err(e) if units.is_empty() => {
                    return Err(Error::Input(format!("{e}; or pass --src DIR")))
                }
                Err(_) => return Ok(units),
            },
        };
        for pkg in &ws.kernel_packages {
            let pkg_set = ProfileSet::discover(&pkg.dir).ok();
            let spec = self.profile.as_deref().unwrap_or(&pkg.profile);
            let profile = Self::load_profile(pkg_set.as_ref().or(set.as_ref()), spec, &pkg.dir)?;
            let mut kernel_excludes = std::collections::BTreeMap::new();
            for (kernel, targets) in &pkg.kernel_excludes {
                let mut parsed = fatkit_arch::TargetSet::new();
                for t in targets {
                    let target: fatkit_arch::Target = t.parse().map_err(|e| {
                        Error::Input(format!(
                            "{}: [package.metadata.fatkit.kernels] {kernel}: '{t}': {e}",
                            pkg.manifest_path.display()
                        ))
                    })?;
                    if !profile.all_targets().contains(target) {
                        return Err(Error::Input(format!(
                            "{}: [package.metadata.fatkit.kernels] {kernel} excludes {target}, which profile {} does not build; name one of {}",
                            pkg.manifest_path.display(),
                            profile.name,
                            profile.all_targets()
                        )));
                    }
                    parsed.insert(target);
                }
                kernel_excludes.insert(kernel.clone(), parsed);
            }
            units.push(Unit {
                label: format!("package {}", pkg.name),
                profile,
                sources: pkg.sources.iter().map(|(p, _)| p.clone()).collect(),
                module_names: pkg.sources.iter().cloned().collect(),
                include_dirs: pkg.include_dirs.clone(),
                defines: pkg.defines.clone(),
                kernel_excludes,
                out_dir: match &self.out {
                    Some(out) => out.join(&pkg.name),
                    None => ws.out_dir(pkg),
                },
                root: ws.root.clone(),
            });
        }
        if units.is_empty() {
            return Err(Error::Input(format!(
                "nothing to build in {}: no cuda-src/ and no package with [package.metadata.fatkit]; pass --src DIR",
                ws.root.display()
            )));
        }
        Ok(units)
    }

    pub fn run(self, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        let cwd = match &self.manifest_path {
            Some(p) => p
                .parent()
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
            None => std::env::current_dir()?,
        };
        self.run_in(&cwd, out)
    }

    /// A build of a whole workspace (what `package` and `cargo xtask test` run first): for
    /// `profile`, or each unit's own.
    pub fn for_workspace(profile: Option<&str>) -> BuildKernels {
        BuildKernels {
            profile: profile.map(str::to_owned),
            jobs: None,
            out: None,
            src: None,
            nvcc: None,
            offline: false,
            cache_dir: None,
            manifest_path: None,
            profiles_dir: None,
            message_format: MessageFormat::Human,
        }
    }

    /// Runs as if started in `dir`.
    pub fn run_in(self, dir: &Path, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        let units = self.units(dir, None)?;
        self.run_units(units, out)
    }

    /// Runs for a workspace the caller has read already (`package`).
    pub fn run_for(
        self,
        ws: &workspace::Workspace,
        out: &mut (dyn Write + Send),
    ) -> Result<Outcome> {
        let units = self.units(&ws.root, Some(ws))?;
        self.run_units(units, out)
    }

    fn run_units(self, units: Vec<Unit>, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        let json = self.message_format == MessageFormat::Json;
        let mut outcome = Outcome::Ok;
        for unit in units {
            if !json {
                writeln!(out, "== {} (profile {})", unit.label, unit.profile.name)?;
            }
            let toolchains = toolchain::for_profile(
                &unit.profile,
                self.nvcc.as_deref(),
                self.offline,
                &mut |line| eprintln!("build-kernels: {line}"),
            )?;
            let cache_root = match &self.cache_dir {
                Some(dir) => dir.clone(),
                None => toolchain::cache_dir()?.join("build"),
            };
            let req = Request {
                profile: unit.profile,
                sources: unit.sources,
                include_dirs: unit.include_dirs,
                defines: unit.defines,
                extra_args: Vec::new(),
                out_dir: unit.out_dir,
                root: unit.root,
                jobs: self
                    .jobs
                    .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
                cache: Cache::new(cache_root),
                toolchains,
                module_names: unit.module_names,
                kernel_excludes: unit.kernel_excludes,
            };
            let progress = Progress::new(json, out);
            let res = pipeline::build(&req, &|e| progress.event(e));
            let back = progress.finish();
            let report = res?;
            print_report(back, json, &unit.label, &report)?;
            if !report.failures.is_empty() {
                outcome = Outcome::Finding;
            }
            // An override naming a kernel no module has is a typo, not a no-op.
            if report.failures.is_empty() && !req.kernel_excludes.is_empty() {
                let known: std::collections::BTreeSet<&String> =
                    report.modules.iter().flat_map(|m| &m.kernels).collect();
                for kernel in req.kernel_excludes.keys() {
                    if !known.contains(kernel) {
                        writeln!(
                            back,
                            "error: {}: the per-kernel override names {kernel}, which no module holds; the kernels are {}",
                            unit.label,
                            known
                                .iter()
                                .map(|k| k.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )?;
                        outcome = Outcome::Finding;
                    }
                }
            }
        }
        Ok(outcome)
    }
}

fn print_report(
    out: &mut (dyn Write + Send),
    json: bool,
    label: &str,
    report: &pipeline::Report,
) -> Result<()> {
    if json {
        #[derive(serde::Serialize)]
        struct Finished<'a> {
            event: &'static str,
            unit: &'a str,
            #[serde(flatten)]
            report: &'a pipeline::Report,
        }
        serde_json::to_writer(
            &mut *out,
            &Finished {
                event: "build_finished",
                unit: label,
                report,
            },
        )
        .map_err(std::io::Error::from)?;
        writeln!(out)?;
        return Ok(());
    }
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
    Ok(())
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
