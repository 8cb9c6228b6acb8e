//! `package [--profile P]`: build the workspace's kernels and release binaries for a profile,
//! audit every kernel of every binary against it, and only then write
//! `dist/<name>-<version>-<host>.tar.gz` with the binaries, `COVERAGE.json`, `COVERAGE.md` and
//! `SHA256SUMS`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::Args;
use fatkit_arch::driver::MinDriver;
use fatkit_arch::profile::Profile;
use fatkit_arch::rules::Policy;
use fatkit_arch::{products, Cc, ImageKind, TargetSet};
use fatkit_build::{workspace, ProfileSet};
use fatkit_fatbin::coverage::{self, Cell, Gap, KernelImages};
use fatkit_fatbin::inspect::{self, Depth};
use fatkit_fatbin::Limits;
use serde::Serialize;
use sha2::Digest;

use crate::build_kernels::BuildKernels;
use crate::{Error, Outcome, Result};

#[derive(Debug, Args)]
pub struct Package {
    /// The arch profile every kernel of every binary must cover
    #[arg(long, default_value = "full")]
    profile: String,
    /// The workspace's Cargo.toml [default: the workspace of the current directory]
    #[arg(long, value_name = "PATH")]
    manifest_path: Option<PathBuf>,
    /// The cargo profile the binaries are built with
    #[arg(long, default_value = "release", value_name = "NAME")]
    cargo_profile: String,
    /// Cargo's target directory [default: the workspace's]
    #[arg(long, value_name = "DIR")]
    target_dir: Option<PathBuf>,
    /// Where the archive goes [default: dist/ in the workspace root]
    #[arg(long, value_name = "DIR")]
    dist: Option<PathBuf>,
}

/// `COVERAGE.json`.
#[derive(Debug, Serialize)]
struct CoverageJson {
    schema: u32,
    name: String,
    version: String,
    host: String,
    profile: String,
    targets: TargetSet,
    /// The oldest driver that loads every image of every binary.
    min_driver: Option<MinDriver>,
    binaries: Vec<BinaryJson>,
    /// Compute capabilities every kernel of every binary runs on, with their products.
    gpus: Vec<GpuRow>,
}

#[derive(Debug, Serialize)]
struct BinaryJson {
    name: String,
    package: String,
    size: u64,
    sha256: String,
    kernels: Vec<KernelJson>,
    gaps: Vec<Gap>,
}

#[derive(Debug, Serialize)]
struct KernelJson {
    name: String,
    images: TargetSet,
    /// Per profile target: how it is served.
    cells: BTreeMap<String, Cell>,
}

#[derive(Debug, Serialize)]
struct GpuRow {
    cc: Cc,
    products: Vec<&'static str>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    let digest = sha2::Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The host target triple, from `rustc -vV`.
fn host_triple() -> Result<String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(&rustc).arg("-vV").output()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .ok_or_else(|| Error::Input("`rustc -vV` printed no host line".to_owned()))
}

/// The oldest driver that loads every image of every binary.
fn min_driver(reports: &[inspect::FileReport]) -> Option<MinDriver> {
    MinDriver::of(
        reports
            .iter()
            .flat_map(|r| r.all_images())
            .filter_map(|(_, _, image)| {
                let toolkit = image.toolkit.as_deref().and_then(|t| t.parse().ok());
                MinDriver::need(image.target?, image.ptx_isa, toolkit)
            }),
    )
}

impl Package {
    pub fn run(self, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        let start_dir = match &self.manifest_path {
            Some(p) => p
                .parent()
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
            None => std::env::current_dir()?,
        };
        let ws = workspace::discover(&start_dir).map_err(|e| Error::Input(e.to_string()))?;
        let profile = ProfileSet::discover(&ws.root)?.load(&self.profile)?;
        if ws.binaries.is_empty() {
            return Err(Error::Input(format!(
                "{}: no binary to package; list them in [workspace.metadata.fatkit] package = [..]",
                ws.root.join("Cargo.toml").display()
            )));
        }

        // 1. Kernels of [package.metadata.fatkit] packages (and cuda-src/), for this profile.
        writeln!(out, "==> kernels for profile {}", profile.name)?;
        if BuildKernels::for_workspace(Some(&self.profile)).run_for(&ws, out)? != Outcome::Ok {
            writeln!(
                out,
                "==> a kernel build failed (see above); no archive written"
            )?;
            return Ok(Outcome::Finding);
        }

        // 2. The binaries, with build scripts told the profile.
        let executables = self.cargo_build(&ws, &profile, out)?;

        // 3. Every kernel of every binary against the profile.
        let policy = Policy::default();
        let limits = Limits::default();
        let mut reports = Vec::new();
        let mut binaries = Vec::new();
        let mut all_kernels: Vec<KernelImages> = Vec::new();
        let mut audited: Vec<(String, Vec<u8>)> = Vec::new();
        let mut failed = false;
        for bin in &ws.binaries {
            let Some(path) = executables.get(&bin.name) else {
                return Err(Error::Input(format!(
                    "cargo built no executable named {} (package {})",
                    bin.name, bin.package
                )));
            };
            let bytes = std::fs::read(path)
                .map_err(|e| Error::Input(format!("{}: {e}", path.display())))?;
            let report = inspect::inspect(&bin.name, &bytes, Depth::Kernels, &limits);
            for e in report.all_errors() {
                writeln!(out, "invalid: {}: {e}", bin.name)?;
                failed = true;
            }
            let kernels = coverage::kernels(&report);
            let gaps = exact_gaps(&kernels, &profile.targets, policy);
            for g in &gaps {
                writeln!(
                    out,
                    "gap: binary {}: kernel {}: {}: {}",
                    bin.name, g.kernel, g.target, g.reason
                )?;
            }
            failed |= !gaps.is_empty();
            binaries.push(BinaryJson {
                name: bin.name.clone(),
                package: bin.package.clone(),
                size: bytes.len() as u64,
                sha256: sha256_hex(&bytes),
                kernels: kernels
                    .iter()
                    .map(|k| KernelJson {
                        name: k.name.clone(),
                        images: k.targets(),
                        cells: profile
                            .targets
                            .iter()
                            .map(|t| (t.to_string(), k.target_cell(t, policy)))
                            .collect(),
                    })
                    .collect(),
                gaps,
            });
            all_kernels.extend(kernels);
            reports.push(report);
            audited.push((bin.name.clone(), bytes));
        }
        if failed {
            writeln!(
                out,
                "==> refused: some kernel of some binary does not cover profile {}; no archive written",
                profile.name
            )?;
            return Ok(Outcome::Finding);
        }

        // 4. The archive.
        let version = ws
            .binaries
            .first()
            .map_or_else(|| "0.0.0".to_owned(), |b| b.version.clone());
        let coverage = CoverageJson {
            schema: 1,
            name: ws.name.clone(),
            version,
            host: host_triple()?,
            profile: profile.name.clone(),
            targets: profile.targets.clone(),
            min_driver: min_driver(&reports),
            gpus: gpus_covered(&all_kernels, policy),
            binaries,
        };
        let archive = self.write_archive(&ws, &coverage, audited)?;
        writeln!(
            out,
            "==> {}: {} binaries, every kernel covers {} ({})",
            archive.display(),
            coverage.binaries.len(),
            profile.name,
            profile.targets
        )?;
        Ok(Outcome::Ok)
    }

    /// `cargo build` of every shipped binary; their paths by name.
    fn cargo_build(
        &self,
        ws: &workspace::Workspace,
        profile: &Profile,
        out: &mut (dyn Write + Send),
    ) -> Result<BTreeMap<String, PathBuf>> {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--profile", &self.cargo_profile, "--manifest-path"])
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
        if let Some(dir) = &self.target_dir {
            cmd.arg("--target-dir").arg(dir);
        }
        cmd.env("FATKIT_PROFILE", &profile.name)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        writeln!(
            out,
            "==> cargo build --profile {} (FATKIT_PROFILE={}) for {}",
            self.cargo_profile,
            profile.name,
            ws.binaries
                .iter()
                .map(|b| b.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )?;
        let mut child = cmd.spawn()?;
        let mut executables = BTreeMap::new();
        if let Some(stdout) = child.stdout.take() {
            let reader = std::io::BufReader::new(stdout);
            for message in cargo_metadata::Message::parse_stream(reader).flatten() {
                if let cargo_metadata::Message::CompilerArtifact(a) = message {
                    if let Some(exe) = a.executable {
                        executables.insert(a.target.name.clone(), exe.into_std_path_buf());
                    }
                }
            }
        }
        let status = child.wait()?;
        if !status.success() {
            return Err(Error::Input(format!(
                "cargo build --profile {} failed ({status}); see its errors above",
                self.cargo_profile
            )));
        }
        Ok(executables)
    }

    /// Writes the archive through a temporary file renamed into place.
    /// `audited`: each binary's bytes as the audit read them, so the archive holds exactly
    /// what was checked.
    fn write_archive(
        &self,
        ws: &workspace::Workspace,
        coverage: &CoverageJson,
        audited: Vec<(String, Vec<u8>)>,
    ) -> Result<PathBuf> {
        let stem = format!("{}-{}-{}", coverage.name, coverage.version, coverage.host);
        let dist = self.dist.clone().unwrap_or_else(|| ws.root.join("dist"));
        std::fs::create_dir_all(&dist)?;
        let mut files: Vec<(String, Vec<u8>, u32)> = audited
            .into_iter()
            .map(|(name, bytes)| (format!("bin/{name}"), bytes, 0o755))
            .collect();
        let json = serde_json::to_vec_pretty(coverage).map_err(std::io::Error::from)?;
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
        // What an interrupted package left behind.
        if let Ok(read) = std::fs::read_dir(&dist) {
            let prefix = format!(".{stem}.tar.gz.");
            for entry in read.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.starts_with(&prefix) && name.ends_with(".partial") {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        let tmp = dist.join(format!(".{stem}.tar.gz.{}.partial", std::process::id()));
        let result = (|| -> std::io::Result<()> {
            let file = std::fs::File::create(&tmp)?;
            let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
            let mut tar = tar::Builder::new(gz);
            for (name, bytes, mode) in &files {
                let mut header = tar::Header::new_gnu();
                header.set_size(bytes.len() as u64);
                header.set_mode(*mode);
                header.set_mtime(0);
                header.set_cksum();
                tar.append_data(&mut header, format!("{stem}/{name}"), bytes.as_slice())?;
            }
            let gz = tar.into_inner()?;
            let file = gz.finish()?;
            file.sync_all()?;
            Ok(())
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(Error::Input(format!("{}: {e}", tmp.display())));
        }
        std::fs::rename(&tmp, &final_path)?;
        Ok(final_path)
    }
}

/// A release promises what its profile lists: every kernel has an image of every target of
/// the profile, so a GPU is never served by JIT or an older cubin where the profile says it
/// gets its own (`audit --require` is the looser check: something runs).
fn exact_gaps(kernels: &[KernelImages], targets: &TargetSet, policy: Policy) -> Vec<Gap> {
    let mut gaps = Vec::new();
    for k in kernels {
        let have = k.targets();
        for target in targets.iter() {
            if have.contains(target) {
                continue;
            }
            let reason = match (target.kind, k.target_cell(target, policy)) {
                (ImageKind::Cubin, Cell::Cubin(other)) => format!(
                    "no {target} cubin (CC {} would run the {other} cubin)",
                    target.cc
                ),
                (ImageKind::Cubin, Cell::Ptx(ptx)) => format!(
                    "no {target} cubin (CC {} would JIT-compile {ptx} PTX at load)",
                    target.cc
                ),
                (ImageKind::Ptx, Cell::Ptx(other)) => {
                    format!("no {target} PTX (only {other} PTX)")
                }
                (_, _) => format!("no image runs on CC {}", target.cc),
            };
            gaps.push(Gap {
                kernel: k.name.clone(),
                target,
                reason,
            });
        }
    }
    gaps
}

/// The compute capabilities (with their products) on which every kernel runs.
fn gpus_covered(kernels: &[KernelImages], policy: Policy) -> Vec<GpuRow> {
    let mut by_cc: BTreeMap<Cc, Vec<&'static str>> = BTreeMap::new();
    for p in products::PRODUCTS {
        by_cc.entry(p.cc).or_default().push(p.name);
    }
    by_cc
        .into_iter()
        .filter(|(cc, _)| {
            !kernels.is_empty() && kernels.iter().all(|k| k.cell(*cc, policy) != Cell::Missing)
        })
        .map(|(cc, products)| GpuRow { cc, products })
        .collect()
}

/// `COVERAGE.md`: per binary a kernel x target table, then the GPUs covered and the driver.
fn coverage_md(c: &CoverageJson) -> String {
    let mut md = format!(
        "# {} {} ({}): kernel coverage\n\nEvery kernel of every binary below was checked against profile `{}`: {}.\n\n",
        c.name, c.version, c.host, c.profile, c.targets
    );
    match &c.min_driver {
        Some(d) => md.push_str(&format!(
            "Minimum NVIDIA driver: {} (CUDA {}), for {}.\n\n",
            d.release
                .map_or_else(|| "unknown".to_owned(), |r| r.to_string()),
            d.cuda,
            d.why
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
            let cells: Vec<String> = targets
                .iter()
                .map(|t| match k.cells.get(t) {
                    Some(Cell::Cubin(img)) => format!("cubin {img}"),
                    Some(Cell::Ptx(img)) => format!("PTX {img}"),
                    _ => "**missing**".to_owned(),
                })
                .collect();
            md.push_str(&format!("| `{}` | {} |\n", k.name, cells.join(" | ")));
        }
        md.push('\n');
    }
    md.push_str("## GPUs covered\n\nEvery kernel runs on these compute capabilities (a cubin, or PTX the driver compiles):\n\n| CC | GPUs |\n|---|---|\n");
    for g in &c.gpus {
        md.push_str(&format!("| {} | {} |\n", g.cc, g.products.join(", ")));
    }
    md
}
