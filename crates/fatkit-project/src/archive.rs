//! `package`: build a workspace's kernels and release binaries for a profile, audit every
//! kernel of every binary against it, and only then write
//! `dist/<name>-<version>-<host>.tar.gz` with the binaries, `COVERAGE.json`, `COVERAGE.md` and
//! `SHA256SUMS`, through a temporary file renamed into place.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use fatkit_arch::profile::Profile;
use fatkit_arch::rules::Policy;
use fatkit_arch::TargetSet;
use fatkit_audit::coverage::{Cell, Gap, GpuRow};
use fatkit_audit::gate::{self as gate, Exact};
use fatkit_audit::text::floors;
use serde::Serialize;

use crate::units::{self, Observer};
use fatkit_build::pipeline::BuildError;
use fatkit_package::out::{self, sha256_hex, AtomicFile};
use fatkit_package::profile;
use fatkit_package::workspace::{self, Workspace};

/// What `package` takes: parsed once by the command line (feature `cli`: these are its
/// arguments, and their docs its help).
#[derive(Clone, Debug)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct Options {
    /// The arch profile every kernel of every binary must cover [default: the profile its
    /// [package.metadata.fatkit] packages name, as build-kernels builds them; else full]
    #[cfg_attr(feature = "cli", arg(long))]
    pub profile: Option<String>,
    /// The workspace's Cargo.toml [default: the workspace of the current directory]
    #[cfg_attr(feature = "cli", arg(long, value_name = "PATH"))]
    pub manifest_path: Option<PathBuf>,
    /// The cargo profile the binaries are built with
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value = "release", value_name = "NAME")
    )]
    pub cargo_profile: String,
    /// Cargo's target directory [default: the workspace's]
    #[cfg_attr(feature = "cli", arg(long, value_name = "DIR"))]
    pub target_dir: Option<PathBuf>,
    /// Where the archive goes [default: dist/ in the workspace root]
    #[cfg_attr(feature = "cli", arg(long, value_name = "DIR"))]
    pub dist: Option<PathBuf>,
}

/// How a package run ended.
#[derive(Debug)]
pub enum Outcome {
    /// The archive, written.
    Packaged {
        archive: PathBuf,
        coverage: Box<CoverageJson>,
    },
    /// A kernel build failed; nothing written.
    KernelsFailed,
    /// Some kernel of some binary does not cover the profile, or a binary could not be read:
    /// nothing written.
    Refused { profile: String },
}

/// `COVERAGE.json`.
#[derive(Debug, Serialize)]
pub struct CoverageJson {
    pub schema: u32,
    pub name: String,
    pub version: String,
    pub host: String,
    pub profile: String,
    pub targets: TargetSet,
    /// The driver each covered GPU needs (the image it loads, the runtime a binary links),
    /// the release's floor with the GPUs that set it, and what GPUs newer than the tables need.
    pub driver: fatkit_arch::floor::Floors,
    pub binaries: Vec<BinaryJson>,
    /// Compute capabilities every kernel of every binary runs on, with their products.
    pub gpus: Vec<GpuRow>,
}

#[derive(Debug, Serialize)]
pub struct BinaryJson {
    pub name: String,
    pub package: String,
    pub size: u64,
    pub sha256: String,
    pub kernels: Vec<KernelJson>,
    pub gaps: Vec<Gap>,
    /// Profile targets a kernel lacks by its crate's declaration: not gaps.
    pub declared: Vec<Gap>,
}

/// A kernel of a binary: fatkit-audit's row.
pub type KernelJson = gate::KernelRow;

/// The host target triple, from `rustc -vV`.
fn host_triple() -> Result<String, BuildError> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = fatkit_toolchain::command::run_with(
        Command::new(&rustc).arg("-vV"),
        fatkit_toolchain::command::How::QUERY,
        "rustc must be on PATH (or set RUSTC)",
    )?;
    fatkit_toolchain::command::text_of(&out)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .ok_or_else(|| fatkit_build::refused::Refused::NoHostLine.into())
}

/// `COVERAGE.md`: per binary a kernel x target table, then the GPUs covered and the driver.
fn coverage_md(c: &CoverageJson) -> String {
    let mut md = format!(
        "# {} {} ({}): kernel coverage\n\nEvery kernel of every binary below was checked against profile `{}`: {}.\n\n",
        c.name, c.version, c.host, c.profile, c.targets
    );
    match &c.driver.release {
        Some(_) => md.push_str(&format!(
            "Minimum NVIDIA driver: {} (the image the driver loads on each GPU below, and the CUDA runtime a binary links).\n\nGPUs newer than the tables: {}.\n\n",
            floors::release(&c.driver),
            floors::newer(&c.driver),
        )),
        None => md.push_str("Minimum NVIDIA driver: no device code.\n\n"),
    }
    let targets: Vec<String> = c.targets.iter().map(|t| t.to_string()).collect();
    for b in &c.binaries {
        md.push_str(&format!("## `{}` (package {})\n\n", b.name, b.package));
        if b.kernels.is_empty() {
            md.push_str("No device code.\n\n");
            continue;
        }
        md.push_str(&format!("| kernel | {} |\n", targets.join(" | ")));
        md.push_str(&format!("|---|{}\n", "---|".repeat(targets.len())));
        for k in &b.kernels {
            let excused = |t: &str| {
                b.declared
                    .iter()
                    .any(|g| g.kernel == k.name && g.target.to_string() == t)
            };
            let cells: Vec<String> = targets
                .iter()
                .map(|t| match k.cells.get(t) {
                    _ if excused(t) => "not built (declared)".to_owned(),
                    Some(Cell::Cubin(img)) => format!("cubin {img}"),
                    Some(Cell::Ptx(img)) => format!("PTX {img}"),
                    _ => "**missing**".to_owned(),
                })
                .collect();
            md.push_str(&format!("| `{}` | {} |\n", k.name, cells.join(" | ")));
        }
        md.push('\n');
        let declared: Vec<&KernelJson> =
            b.kernels.iter().filter(|k| k.declared.is_some()).collect();
        if !declared.is_empty() {
            md.push_str("Declared exceptions: these kernels are built for fewer targets by their source's design (an architecture guard), as their crate declares; on other GPUs the runtime check refuses only them.\n\n| kernel | built for |\n|---|---|\n");
            for k in declared {
                if let Some(set) = &k.declared {
                    md.push_str(&format!("| `{}` | {set} |\n", k.name));
                }
            }
            md.push('\n');
        }
    }
    md.push_str("## GPUs covered\n\nEvery kernel runs on these compute capabilities (a cubin, or PTX the driver compiles), each from the driver given, but the kernels their crate declares for other GPUs (named; not failures):\n\n| CC | GPUs | minimum driver | loads | declared for other GPUs |\n|---|---|---|---|---|\n");
    let rows = floors::gpu_rows(&c.driver);
    for g in &c.gpus {
        let (driver, loads) = rows
            .iter()
            .find(|(cc, ..)| *cc == g.cc)
            .map_or(("-", "-"), |(_, d, l)| (d.as_str(), l.as_str()));
        let declared: Vec<String> = g.declared.iter().map(|k| format!("`{k}`")).collect();
        md.push_str(&format!(
            "| {} | {} | {driver} | {loads} | {} |\n",
            g.cc,
            g.products.join(", "),
            match declared.is_empty() {
                true => "-".to_owned(),
                false => declared.join(", "),
            }
        ));
    }
    md
}

/// `--dist` where a file is in the way.
fn dist_in_the_way(dist: &Path, source: std::io::Error) -> BuildError {
    fatkit_build::refused::Refused::Dist {
        dist: dist.to_owned(),
        source,
    }
    .into()
}

/// Builds, audits and packages the workspace of `opts.manifest_path` (else the current
/// directory's). Lines for the person go to `observer.message`; the kernel build reports
/// through `observer` as `build-kernels` does.
pub fn package(opts: &Options, observer: &dyn Observer) -> Result<Outcome, BuildError> {
    // The environment, read once as the command starts.
    let env = fatkit_build::pipeline::BuildEnv::of_process();
    let dir = units::start_dir(opts.manifest_path.as_deref())
        .map_err(fatkit_build::refused::Refused::CurrentDir)?;
    let mut ws = crate::workspace::discover(&dir)?;
    // The kernels go where the binaries' build scripts look: `<target dir>/fatkit/<package>`.
    if let Some(dir) = &opts.target_dir {
        ws.target_dir = std::path::absolute(dir).map_err(fatkit_package::error::io_err(dir))?;
    }
    let (spec, base) = units::profile_of::of_release(opts.profile.as_deref(), &ws)?;
    let profile = profile::load_spec(&spec, &base, None)?;
    if ws.binaries.is_empty() {
        return Err(fatkit_build::refused::Refused::NoBinaries(ws.root.join("Cargo.toml")).into());
    }

    // Where the archive goes is checked before anything is built.
    let dist = opts.dist.clone().unwrap_or_else(|| ws.root.join("dist"));
    out::no_file_in_the_way(&dist).map_err(|e| dist_in_the_way(&dist, e))?;

    // 1. Kernels of [package.metadata.fatkit] packages (and cuda-src/), for this profile.
    if !build_kernels(&ws, (&spec, &env), &profile.name, observer)? {
        return Ok(Outcome::KernelsFailed);
    }

    // 2. The binaries, with build scripts told the profile.
    // Build scripts run elsewhere: a profile file is named by its absolute path.
    let for_scripts = match fatkit_package::profile::is_path(&spec) {
        true => base.join(&spec).display().to_string(),
        false => spec.clone(),
    };
    let executables = cargo_build(opts, &ws, &for_scripts, observer)?;

    // 3. Every kernel of every binary against the profile.
    let policy = Policy::default();
    let mut binaries = Vec::new();
    let mut gates = Vec::new();
    let mut audited: Vec<(String, Vec<u8>)> = Vec::new();
    let mut failed = false;
    for bin in &ws.binaries {
        let Some(path) = executables.get(&bin.name) else {
            return Err(fatkit_build::refused::Refused::NoExecutable {
                name: bin.name.clone(),
                package: bin.package.clone(),
            }
            .into());
        };
        let (json, gate, bytes) = audit_binary(bin, path, &profile, policy, observer)?;
        failed |= !gate.passes();
        binaries.push(json);
        gates.push(gate);
        audited.push((bin.name.clone(), bytes));
    }
    if failed {
        observer.message(&format!(
            "==> refused: some kernel of some binary does not cover profile {}; no archive written",
            profile.name
        ));
        return Ok(Outcome::Refused {
            profile: profile.name,
        });
    }

    // 4. The archive.
    let version = ws
        .binaries
        .first()
        .map_or_else(|| "0.0.0".to_owned(), |b| b.version.clone());
    let (driver, gpus) = gate::covered(&gates, policy);
    let coverage = CoverageJson {
        schema: 2,
        name: ws.name.clone(),
        version,
        host: host_triple()?,
        profile: profile.name.clone(),
        targets: profile.targets.clone(),
        driver,
        gpus,
        binaries,
    };
    let archive = write_archive(opts, &ws, &coverage, audited)?;
    observer.message(&format!(
        "==> {}: {} binaries, every kernel covers {} ({})",
        archive.display(),
        coverage.binaries.len(),
        profile.name,
        profile.targets
    ));
    Ok(Outcome::Packaged {
        archive,
        coverage: Box::new(coverage),
    })
}

/// Reads binary `bin` at `path` (through the bounded reader: a regular file, read once, whole
/// or refused) and holds every kernel to `profile`'s targets exactly (fatkit-audit's gate),
/// each unreadable image and each gap said to `observer` with the module as its author knows
/// it and the GPUs the target stands for. Its JSON, the gate's answer and the bytes read.
fn audit_binary(
    bin: &workspace::Binary,
    path: &Path,
    profile: &Profile,
    policy: Policy,
    observer: &dyn Observer,
) -> Result<(BinaryJson, Exact, Vec<u8>), BuildError> {
    let bytes = fatkit_read::read_file(path).map_err(fatkit_package::error::io_err(path))?;
    let mut gate = gate::exact(&bin.name, &bytes, &profile.targets, policy);
    for e in gate.report.all_errors() {
        observer.message(&format!("invalid: {}: {e}", bin.name));
    }
    for g in &gate.gaps {
        let module = gate.module_of(g).map_or_else(
            || format!("the container at {}", g.module),
            |m| format!("module '{m}'"),
        );
        let gpus: Vec<&str> = fatkit_arch::products::PRODUCTS
            .iter()
            .filter(|p| p.cc == g.target.cc)
            .map(|p| p.name)
            .take(3)
            .collect();
        let gpus = match gpus.is_empty() {
            true => String::new(),
            false => format!(" ({}, ...)", gpus.join(", ")),
        };
        observer.message(&format!(
            "gap: binary {}: {module}: kernel {}: {}{gpus}: {}",
            bin.name, g.kernel, g.target, g.cause
        ));
    }
    let json = BinaryJson {
        name: bin.name.clone(),
        package: bin.package.clone(),
        size: bytes.len() as u64,
        sha256: sha256_hex(&bytes),
        kernels: std::mem::take(&mut gate.rows),
        gaps: gate.gaps.clone(),
        declared: gate.declared.clone(),
    };
    Ok((json, gate, bytes))
}

/// Step 1 of `package`: the kernels of `[package.metadata.fatkit]` packages and `cuda-src/`,
/// for profile `spec`. A workspace with neither builds its kernels in its build scripts
/// (`Build::compile`, `compile_library`), which the binaries' build runs for the profile.
/// Whether every unit built.
fn build_kernels(
    ws: &Workspace,
    (spec, env): (&str, &fatkit_build::pipeline::BuildEnv),
    name: &str,
    observer: &dyn Observer,
) -> Result<bool, BuildError> {
    if ws.kernel_packages.is_empty() && !ws.root.join("cuda-src").is_dir() {
        observer.message(&format!(
            "==> no [package.metadata.fatkit] package and no cuda-src/: the binaries' build scripts build their kernels, for profile {name}"
        ));
        return Ok(true);
    }
    observer.message(&format!("==> kernels for profile {name}"));
    let build_opts = units::Options::for_profile(Some(spec));
    let units = units::units(&build_opts, &ws.root, Some(ws))?;
    let built = units::build(&build_opts, env, units, observer)?;
    if !built.iter().all(units::UnitReport::ok) {
        observer.message("==> a kernel build failed (see above); no archive written");
        return Ok(false);
    }
    Ok(true)
}

/// `cargo build` of every shipped binary; their paths by name.
fn cargo_build(
    opts: &Options,
    ws: &Workspace,
    profile: &str,
    observer: &dyn Observer,
) -> Result<BTreeMap<String, PathBuf>, BuildError> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--profile", &opts.cargo_profile, "--manifest-path"])
        .arg(ws.root.join("Cargo.toml"))
        .args(["--message-format", "json-render-diagnostics"]);
    let mut packages: Vec<&str> = ws.binaries.iter().map(|b| b.package.as_str()).collect();
    packages.dedup();
    for p in packages {
        cmd.args(["--package", p]);
    }
    for b in &ws.binaries {
        cmd.args(["--bin", &b.name]);
    }
    if let Some(dir) = &opts.target_dir {
        cmd.arg("--target-dir").arg(dir);
    }
    cmd.env("FATKIT_PROFILE", profile);
    observer.message(&format!(
        "==> cargo build --profile {} (FATKIT_PROFILE={}) for {}",
        opts.cargo_profile,
        profile,
        ws.binaries
            .iter()
            .map(|b| b.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    // Its errors are shown as they come (stderr); its messages (stdout, JSON) are kept.
    let how = fatkit_toolchain::command::How {
        show_stderr: true,
        ..fatkit_toolchain::command::How::INSTALL
    };
    let out = fatkit_toolchain::command::output_of(
        &mut cmd,
        how,
        "cargo must be on PATH (or set CARGO)",
    )?;
    let mut executables = BTreeMap::new();
    for message in cargo_metadata::Message::parse_stream(&out.stdout[..]).flatten() {
        if let cargo_metadata::Message::CompilerArtifact(a) = message {
            if let Some(exe) = a.executable {
                executables.insert(a.target.name.clone(), exe.into_std_path_buf());
            }
        }
    }
    let status = out.status;
    if !status.success() {
        return Err(fatkit_build::refused::Refused::CargoBuildFailed {
            profile: opts.cargo_profile.clone(),
            status,
        }
        .into());
    }
    Ok(executables)
}

/// Writes the archive atomically. `audited`: each binary's bytes as the audit read them, so
/// the archive holds exactly what was checked.
fn write_archive(
    opts: &Options,
    ws: &Workspace,
    coverage: &CoverageJson,
    audited: Vec<(String, Vec<u8>)>,
) -> Result<PathBuf, BuildError> {
    let stem = format!("{}-{}-{}", coverage.name, coverage.version, coverage.host);
    let dist = opts.dist.clone().unwrap_or_else(|| ws.root.join("dist"));
    let mut files: Vec<(String, Vec<u8>, u32)> = audited
        .into_iter()
        .map(|(name, bytes)| (format!("bin/{name}"), bytes, 0o755))
        .collect();
    let json = serde_json::to_vec_pretty(coverage).unwrap_or_default();
    files.push(("COVERAGE.json".to_owned(), json, 0o644));
    files.push((
        "COVERAGE.md".to_owned(),
        coverage_md(coverage).into_bytes(),
        0o644,
    ));
    let sums: String = files
        .iter()
        .map(|(name, bytes, _)| format!("{}  {name}\n", sha256_hex(bytes)))
        .collect();
    files.push(("SHA256SUMS".to_owned(), sums.into_bytes(), 0o644));

    let final_path = dist.join(format!("{stem}.tar.gz"));
    out::no_file_in_the_way(&dist).map_err(|e| dist_in_the_way(&dist, e))?;
    // What an interrupted package left behind.
    out::remove_stale_temporaries(&dist);
    let result = (|| -> std::io::Result<()> {
        let mut file = AtomicFile::create(&final_path)?;
        {
            let gz = flate2::write::GzEncoder::new(&mut file, flate2::Compression::default());
            let mut tar = tar::Builder::new(gz);
            for (name, bytes, mode) in &files {
                let mut header = tar::Header::new_gnu();
                header.set_size(bytes.len() as u64);
                header.set_mode(*mode);
                header.set_mtime(0);
                header.set_cksum();
                tar.append_data(&mut header, format!("{stem}/{name}"), bytes.as_slice())?;
            }
            tar.into_inner()?.finish()?.flush()?;
        }
        file.commit()
    })();
    result.map_err(fatkit_package::error::io_err(&final_path))?;
    Ok(final_path)
}
