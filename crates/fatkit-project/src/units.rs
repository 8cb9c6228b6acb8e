//! What `build-kernels` builds and how: the units of a project (a directory of sources, or the
//! workspace's `cuda-src/` and every package declaring `[package.metadata.fatkit]`), each with
//! its profile, toolchains and output directory, built one after the other. Options are
//! resolved here, once; progress goes to an [`Observer`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

mod pins;

use fatkit_build::cache::Cache;
use fatkit_build::pipeline::{self, Ask, BuildEnv, BuildError, Event, Report, Request, Resources};
use fatkit_package::flags::Flags;
use fatkit_package::kernel_sets::KernelSets;
use fatkit_package::profile::{self, ProfileSet};
use fatkit_toolchain as toolchain;
use fatkit_toolchain::launcher;

pub mod profile_of;
use fatkit_package::workspace::{self, Workspace};

/// The options of a kernel build, as `build-kernels` takes them: parsed once by the command
/// line (feature `cli`: these are its arguments, and their docs its help), resolved by
/// [`units`] and [`build`].
#[derive(Clone, Debug, Default)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
// The field docs are written as the help shows them (`[default: <target dir>/...]`), not as
// rustdoc's links and tags.
#[allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]
pub struct Options {
    /// Arch profile: a built-in name (full, modern, ...), one from arch-profiles/, or a .toml
    /// path [default: full for cuda-src/, each package's own for [package.metadata.fatkit]; a
    /// package with `vendor` is always built for its own profile, with its own flags]
    #[cfg_attr(feature = "cli", arg(long))]
    pub profile: Option<String>,
    /// Parallel compiles [default: the number of cores]
    #[cfg_attr(feature = "cli", arg(long, short))]
    pub jobs: Option<usize>,
    /// Where the fatbins, manifests and Rust modules go [default: <target dir>/fatkit/kernels
    /// for cuda-src/, <target dir>/fatkit/<package> per package; a package with `vendor`: that
    /// directory of the package]
    #[cfg_attr(feature = "cli", arg(long, value_name = "DIR"))]
    pub out: Option<PathBuf>,
    /// Directory of .cu sources [default: cuda-src/ of the workspace]
    #[cfg_attr(feature = "cli", arg(long, value_name = "DIR"))]
    pub src: Option<PathBuf>,
    /// Use this nvcc first
    #[cfg_attr(feature = "cli", arg(long, value_name = "PATH"))]
    pub nvcc: Option<PathBuf>,
    /// Never provision a toolchain; fail if none found can build the profile
    #[cfg_attr(feature = "cli", arg(long))]
    pub offline: bool,
    /// Compile cache [default: ~/.cache/fatkit/build, or $FATKIT_CACHE_DIR/build]
    #[cfg_attr(feature = "cli", arg(long, value_name = "DIR"))]
    pub cache_dir: Option<PathBuf>,
    /// Build the workspace of this Cargo.toml instead of the current directory's
    #[cfg_attr(feature = "cli", arg(long, value_name = "PATH"))]
    pub manifest_path: Option<PathBuf>,
    /// Local profiles that add to or override the built-ins [default: arch-profiles/ here or in a parent]
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "FATKIT_PROFILES_DIR", value_name = "DIR")
    )]
    pub profiles_dir: Option<PathBuf>,
    /// A compile option in nvcc's spelling, for every source (repeatable; after a package's own
    /// `flags`): `--flag=-std=c++17 --flag=--use_fast_math`. Translated for NVRTC; one it cannot
    /// honour is refused before compiling
    #[cfg_attr(
        feature = "cli",
        arg(long = "flag", value_name = "FLAG", allow_hyphen_values = true)
    )]
    pub flags: Vec<String>,
    /// Run nvcc's cubin jobs under this program, as CMake's CMAKE_CUDA_COMPILER_LAUNCHER:
    /// `--launcher sccache` shares them through sccache's cache or sccache-dist. Each cubin
    /// job is then one `nvcc -cubin` run in the workspace root with relative paths; PTX jobs
    /// stay local. Empty: none [default: FATKIT_LAUNCHER, else the `launcher` metadata key]
    #[cfg_attr(feature = "cli", arg(long, value_name = "PROG"))]
    pub launcher: Option<String>,
    /// Leave what was built unweighed against its budget (`fatkit plan` builds the candidates
    /// to weigh them itself). Not an argument.
    #[cfg_attr(feature = "cli", arg(skip))]
    pub unweighed: bool,
}

impl Options {
    /// The options of a whole workspace's build for `profile`, or each unit's own.
    pub fn for_profile(profile: Option<&str>) -> Options {
        Options {
            profile: profile.map(str::to_owned),
            ..Options::default()
        }
    }

    /// Where the build starts: the directory of `--manifest-path`, else the current one.
    pub fn start_dir(&self) -> std::io::Result<PathBuf> {
        start_dir(self.manifest_path.as_deref())
    }

    /// These options with every path made absolute against the current directory, once:
    /// compilers run in the project root, where a relative `--cache-dir` or `--out` would
    /// name another directory.
    pub fn absolute(&self) -> std::io::Result<Options> {
        let abs = |p: &Option<PathBuf>| p.as_deref().map(std::path::absolute).transpose();
        Ok(Options {
            out: abs(&self.out)?,
            src: abs(&self.src)?,
            nvcc: abs(&self.nvcc)?,
            cache_dir: abs(&self.cache_dir)?,
            manifest_path: abs(&self.manifest_path)?,
            profiles_dir: abs(&self.profiles_dir)?,
            ..self.clone()
        })
    }
}

/// The directory of a `--manifest-path` (`.` for a bare `Cargo.toml`, where `cargo metadata`
/// cannot start in ""), else the current one: where `build-kernels` and `package` start.
pub fn start_dir(manifest_path: Option<&Path>) -> std::io::Result<PathBuf> {
    match manifest_path {
        Some(p) => Ok(p
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)),
        None => std::env::current_dir(),
    }
}

/// One build: a directory of sources or a package's `[package.metadata.fatkit]`.
#[derive(Clone, Debug)]
pub struct Unit {
    /// `cuda-src` or `package NAME`, for the report.
    pub label: String,
    /// What its build is asked (a package's flags are its own, then `--flag`; its stamp
    /// records the modules' inputs for its build-script check).
    pub ask: Ask,
    /// The `launcher` metadata key that applies, and where it is written.
    pub launcher: Option<(String, String)>,
}

/// What became of one unit.
#[derive(Clone, Debug)]
pub struct UnitReport {
    pub label: String,
    pub report: Report,
    /// Per-kernel overrides naming a kernel no module holds (a typo, not a no-op).
    pub unknown_overrides: Vec<String>,
}

impl UnitReport {
    /// Whether every module was written and every override names a kernel.
    pub fn ok(&self) -> bool {
        self.report.failures.is_empty() && self.unknown_overrides.is_empty()
    }
}

/// Where a build's progress goes.
pub trait Observer: Sync {
    /// A unit starts building.
    fn unit_started(&self, unit: &Unit);
    /// A line about toolchains (discovery, provisioning).
    fn log(&self, line: &str);
    /// A job or module event.
    fn event(&self, event: &Event);
    /// A unit is done.
    fn unit_finished(&self, report: &UnitReport);
    /// A line for the person running the command (`package`'s steps and findings).
    fn message(&self, line: &str);
}

/// The units to build in `dir`: `--src DIR`, or the workspace's `cuda-src/` and every
/// package with `[package.metadata.fatkit]`. `known`: the workspace, when the caller has read
/// it already.
pub fn units(
    opts: &Options,
    dir: &Path,
    known: Option<&Workspace>,
) -> Result<Vec<Unit>, BuildError> {
    let cwd = dir.to_path_buf();
    let set = match &opts.profiles_dir {
        Some(dir) => ProfileSet::open(dir)?,
        None => ProfileSet::discover(&cwd)?,
    };
    // The cargo workspace (read once), unless --src names the sources alone.
    let found = match (known, &opts.src) {
        (Some(_), _) | (None, Some(_)) => None,
        (None, None) => Some(crate::workspace::discover(&cwd)),
    };
    let known_ws = known.or_else(|| found.as_ref().and_then(|f| f.as_ref().ok()));
    // The project root: the cargo workspace's, else where the local arch-profiles/ is, else
    // the current directory.
    let root = known_ws.map(|ws| ws.root.clone()).unwrap_or_else(|| {
        set.dir
            .as_deref()
            .and_then(Path::parent)
            .map_or_else(|| cwd.clone(), Path::to_path_buf)
    });
    let cli_flags =
        Flags::parse(&opts.flags).map_err(|source| fatkit_build::refused::Refused::Flag {
            origin: "--flag",
            source,
        })?;
    // `--flag=-I<dir>` is relative to where the command was typed.
    let here = std::env::current_dir().map_err(fatkit_build::refused::Refused::FlagCurrentDir)?;
    let cli_flags = cli_flags.split_includes(&here);
    let mut units = Vec::new();
    units.extend(source_dir_unit(
        opts, &cwd, &root, &set, known_ws, &cli_flags,
    )?);
    if opts.src.is_some() {
        return Ok(units);
    }
    // Every package declaring kernels; not a cargo workspace is fine when cuda-src/ is.
    let discovered;
    let ws = match (known, found) {
        (Some(ws), _) => ws,
        (None, None) => return Ok(units),
        (None, Some(found)) => match found {
            Ok(ws) => {
                discovered = ws;
                &discovered
            }
            Err(e @ workspace::WorkspaceError::Invalid { .. }) => {
                return Err(BuildError::Workspace(e))
            }
            Err(e) if units.is_empty() => {
                return Err(fatkit_build::refused::Refused::NoWorkspace(e).into())
            }
            Err(_) => return Ok(units),
        },
    };
    for pkg in &ws.kernel_packages {
        units.push(package_unit(opts, ws, pkg, set.dir.as_deref(), &cli_flags)?);
    }
    one_unit_per_source(&mut units);
    if units.is_empty() {
        return Err(fatkit_build::refused::Refused::NothingToBuild(ws.root.clone()).into());
    }
    Ok(units)
}

/// A source reached from two places (the workspace's `cuda-src/` and a package whose
/// `[package.metadata.fatkit]` names it) is built once, by the package: its metadata says how
/// (profile, flags, output). `cuda-src` keeps the sources no package names, and goes when none
/// is left. Only `units` calls it, never with `--src` (what was named is built as named).
fn one_unit_per_source(units: &mut Vec<Unit>) {
    let canonical = |p: &PathBuf| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
    let claimed: std::collections::BTreeSet<PathBuf> = units
        .iter()
        .filter(|u| u.ask.stamp.is_some())
        .flat_map(|u| u.ask.sources.iter().map(canonical))
        .collect();
    for unit in units.iter_mut().filter(|u| u.ask.stamp.is_none()) {
        unit.ask
            .sources
            .retain(|p| !claimed.contains(&canonical(p)));
    }
    units.retain(|u| u.ask.stamp.is_some() || !u.ask.sources.is_empty());
}

/// `--src DIR`, else the project's `cuda-src/` if there is one: built for `--profile` (else
/// the default profile) with `--flag`, into `--out` (else `<target dir>/fatkit/kernels`).
fn source_dir_unit(
    opts: &Options,
    cwd: &Path,
    root: &Path,
    set: &ProfileSet,
    ws: Option<&Workspace>,
    (cli_flags, cli_includes): &(Flags, Vec<PathBuf>),
) -> Result<Option<Unit>, BuildError> {
    let src = opts.src.clone().unwrap_or_else(|| root.join("cuda-src"));
    if opts.src.is_none() && !src.is_dir() {
        return Ok(None);
    }
    let sources = pipeline::sources_in(&src).map_err(|source| {
        fatkit_build::refused::Refused::UnreadableSources {
            src: src.clone(),
            source,
        }
    })?;
    if sources.is_empty() {
        return Err(fatkit_build::refused::Refused::NoCuFiles(src).into());
    }
    let profile_spec = opts
        .profile
        .as_deref()
        .unwrap_or(fatkit_package::profile::DEFAULT);
    // cargo's target directory (CARGO_TARGET_DIR, build.target-dir) where there is a workspace.
    let target_dir = ws.map_or_else(|| root.join("target"), |ws| ws.target_dir.clone());
    let profile = profile::load_spec(profile_spec, cwd, set.dir.as_deref())?;
    let out_dir = opts
        .out
        .clone()
        .unwrap_or_else(|| target_dir.join("fatkit/kernels"));
    Ok(Some(Unit {
        label: "cuda-src".to_owned(),
        ask: Ask {
            include_dirs: std::iter::once(src.clone())
                .chain(cli_includes.iter().cloned())
                .collect(),
            flags: cli_flags.clone(),
            ..Ask::new(profile, sources, root.to_path_buf(), out_dir)
        },
        launcher: ws.and_then(workspace_launcher),
    }))
}

/// A package's `[package.metadata.fatkit]` as a unit. A vendored package's modules are what
/// its crate ships: built from its metadata alone (`--profile`, `--flag` and `--out` apply to
/// the other units), into its directory, naming sources relative to the package so that the
/// bytes are the same wherever the workspace is. `profiles_dir`: the workspace's.
fn package_unit(
    opts: &Options,
    ws: &Workspace,
    pkg: &workspace::KernelPackage,
    profiles_dir: Option<&Path>,
    cli_flags: &(Flags, Vec<PathBuf>),
) -> Result<Unit, BuildError> {
    let no_flags = (Flags::default(), Vec::new());
    let (label, spec, extra_flags, root) = match &pkg.vendor {
        Some(dir) => (
            format!(
                "package {}, vendored in {}",
                pkg.name,
                dir.strip_prefix(&pkg.dir).unwrap_or(dir).display()
            ),
            profile_of::of_package(opts.profile.as_deref(), pkg),
            &no_flags,
            pkg.dir.clone(),
        ),
        None => (
            format!("package {}", pkg.name),
            profile_of::of_package(opts.profile.as_deref(), pkg),
            cli_flags,
            ws.root.clone(),
        ),
    };
    let out_dir = match (&opts.out, &pkg.vendor) {
        (Some(out), None) => out.join(&pkg.name),
        _ => ws.out_dir(pkg),
    };
    // A package's own arch-profiles/ first, then the workspace's.
    let pkg_dir = ProfileSet::discover(&pkg.dir).ok().and_then(|s| s.dir);
    let dir = pkg_dir.or_else(|| profiles_dir.map(Path::to_path_buf));
    let mut profile = profile::load_spec(spec, &pkg.dir, dir.as_deref())?;
    // The package's own budget holds over its profile's.
    if pkg.budget.is_some() {
        profile.budget = pkg.budget;
    }
    // The package's own pins hold over its profile's.
    pins::pin_package_toolchains(pkg, &mut profile)?;
    let rules = kernel_rules(pkg, &profile)?;
    let kernel_sets = KernelSets {
        as_built: pkg.kernel_sets_as_built,
        rules,
        files: file_rules(pkg, &profile)?,
    };
    let sources: Vec<PathBuf> = pkg.sources.iter().map(|(p, _)| p.clone()).collect();
    let source_targets =
        fatkit_build::resolve::source_targets(&kernel_sets, &sources, &pkg.dir, || {
            format!(
                "{}: [package.metadata.fatkit.files]",
                pkg.manifest_path.display()
            )
        })?;
    let flags = Flags::parse(&pkg.flags).map_err(|e| {
        BuildError::from(fatkit_build::refused::Refused::PackageFlag {
            manifest: pkg.manifest_path.clone(),
            source: e,
        })
    })?;
    // A package's `-I` flags are relative to it, as its `include` directories are.
    let (flags, flag_includes) = flags.split_includes(&pkg.dir);
    let (extra_flags, extra_includes) = extra_flags;
    let ask = Ask {
        module_names: pkg.sources.iter().cloned().collect(),
        include_dirs: pkg
            .include_dirs
            .iter()
            .chain(&flag_includes)
            .chain(extra_includes)
            .cloned()
            .collect(),
        defines: pkg.defines.clone(),
        flags: flags.with(extra_flags),
        kernel_sets,
        source_targets,
        stamp: Some(fatkit_package::prebuilt::Stamp {
            package_dir: pkg.dir.clone(),
            config: pkg.config.clone(),
            vendored: pkg.vendor.is_some(),
        }),
        ..Ask::new(profile, sources, root, out_dir)
    };
    Ok(Unit {
        label,
        ask,
        launcher: match &pkg.launcher {
            Some(l) => Some((
                l.clone(),
                format!(
                    "[package.metadata.fatkit] launcher of {}",
                    pkg.manifest_path.display()
                ),
            )),
            None => workspace_launcher(ws),
        },
    })
}

/// `[workspace.metadata.fatkit] launcher`, with where it is written.
fn workspace_launcher(ws: &Workspace) -> Option<(String, String)> {
    ws.launcher.clone().map(|l| {
        (
            l,
            format!(
                "[workspace.metadata.fatkit] launcher of {}",
                ws.root.join("Cargo.toml").display()
            ),
        )
    })
}

mod rules;
use rules::{file_rules, kernel_rules};

/// Builds every unit, one after the other, telling `observer` as it goes; `env` is the
/// environment as the command read it when it started.
pub fn build(
    opts: &Options,
    env: &BuildEnv,
    units: Vec<Unit>,
    observer: &dyn Observer,
) -> Result<Vec<UnitReport>, BuildError> {
    let mut reports = Vec::new();
    for unit in units {
        observer.unit_started(&unit);
        let toolchains = toolchain::for_profile(
            &unit.ask.profile,
            opts.nvcc.as_deref(),
            opts.offline,
            &mut |line| observer.log(&line),
        )?;
        let cache_root = match &opts.cache_dir {
            Some(dir) => dir.clone(),
            None => toolchain::cache_dir()?.join("build"),
        };
        let launcher = launcher::configured(
            opts.launcher.as_deref().map(|l| (l, "--launcher")),
            env.launcher.as_deref(),
            unit.launcher
                .as_ref()
                .map(|(l, o)| (l.as_str(), o.as_str())),
        )?;
        if let Some(l) = &launcher {
            observer.log(&format!("launcher for cubin jobs: {}", l.describe()));
        }
        let with = Resources {
            launcher,
            ..Resources::new(Cache::new(cache_root), toolchains, opts.jobs, env)?
        };
        let req = Request {
            ask: unit.ask,
            with,
        };
        let report = pipeline::build(&req, &|e| observer.event(e))?;
        if req.ask.stamp.as_ref().is_some_and(|s| s.vendored) && report.failures.is_empty() {
            remove_orphans(&req.ask.out_dir, &report, observer);
        }
        if report.failures.is_empty() && !opts.unweighed {
            let vendored_in = req
                .ask
                .stamp
                .as_ref()
                .filter(|s| s.vendored)
                .map(|s| s.package_dir.as_path());
            crate::weigh::check_budget(
                &unit.label,
                &req.ask.profile,
                &req.ask.out_dir,
                vendored_in,
            )?;
        }
        let mut unknown_overrides = Vec::new();
        if report.failures.is_empty() {
            let known: BTreeSet<&String> = report.modules.iter().flat_map(|m| &m.kernels).collect();
            for rule in &req.ask.kernel_sets.rules {
                let kernel = &rule.pattern;
                let matches = |k: &str| {
                    let mut names = fatkit_build::pipeline::bundle::forms(k);
                    names.push(k.to_owned());
                    names
                        .iter()
                        .any(|n| fatkit_package::kernel_sets::glob_match(kernel, n))
                };
                if !known.iter().any(|k| matches(k)) {
                    unknown_overrides.push(format!(
                        "{}: the kernel declaration \"{kernel}\" matches no kernel of any module; the kernels are {}",
                        unit.label,
                        known
                            .iter()
                            .map(|k| fatkit_fatbin::names::demangled(k))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            }
        }
        let done = UnitReport {
            label: unit.label,
            report,
            unknown_overrides,
        };
        observer.unit_finished(&done);
        reports.push(done);
    }
    Ok(reports)
}

/// A vendored directory ships whatever is in it: the modules of sources that are gone
/// (`<module>.manifest.json` a fatkit manifest, with its `.rs` and `.fatbin`) are removed, each
/// only if its manifest records it as it is (see [`fatkit_build::owned`]).
fn remove_orphans(dir: &Path, report: &Report, observer: &dyn Observer) {
    let built: BTreeSet<&str> = report.modules.iter().map(|m| m.module.as_str()).collect();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for path in entries.flatten().map(|e| e.path()) {
        let Some(module) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".manifest.json"))
        else {
            continue;
        };
        if built.contains(module) {
            continue;
        }
        let files = fatkit_build::owned::ModuleFiles::new(dir, module);
        match fatkit_build::owned::may_remove(&files, module) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                observer.message(&format!("kept module {module}, whose source is gone: {e}"));
                continue;
            }
        }
        // The manifest last, as it was written: an interrupted removal is finished next time.
        for file in [&files.fatbin, &files.rust, &files.manifest] {
            if std::fs::remove_file(file).is_ok() {
                observer.message(&format!("removed {}: its source is gone", file.display()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_path_starts_the_build_in_its_directory() {
        let start = |p: &str| {
            Options {
                manifest_path: Some(PathBuf::from(p)),
                ..Options::default()
            }
            .start_dir()
            .unwrap()
        };
        assert_eq!(start("ws/Cargo.toml"), PathBuf::from("ws"));
        // A bare `Cargo.toml` is the current directory, not an empty path (`cargo metadata`
        // cannot start in "").
        assert_eq!(start("Cargo.toml"), PathBuf::from("."));
        let none = Options::default().start_dir().unwrap();
        assert_eq!(none, std::env::current_dir().unwrap());
    }
}
