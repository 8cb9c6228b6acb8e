//! `audit FILE...`: which SMs does each kernel of a binary cover, and will it run on a GPU?

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use fatkit_arch::driver::DriverVersion;
use fatkit_arch::notation::{self, Context};
use fatkit_arch::products::{self, Gpu};
use fatkit_arch::rules::{Device, Policy, Status};
use fatkit_arch::{Cc, TargetSet};
use fatkit_fatbin::coverage::{
    self, Cell, Declarations, FileStatus, Gap, KernelImages, KernelVerdict,
};
use fatkit_fatbin::inspect::{self, Depth, FileReport};
use fatkit_fatbin::{Limits, Origin};
use serde::Serialize;

use crate::{table, Error, Outcome, Result};

#[derive(Debug, Args)]
pub struct Audit {
    /// Files to read: fatbins, cubins, PTX, executables, shared libraries, objects, .a archives, wheels
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Require every kernel to run on these targets: a profile name or .toml, or a target list
    /// in any notation ("sm_80 sm_90 compute_90", "8.0;9.0+PTX")
    #[arg(long, value_name = "PROFILE|LIST")]
    require: Option<String>,
    /// Check every kernel against one GPU: a product name ("RTX 5090") or a compute capability ("12.0")
    #[arg(long, value_name = "NAME|X.Y")]
    gpu: Option<String>,
    /// The driver for --gpu: as nvidia-smi prints it (570.86.10) or cuDriverGetVersion's integer (12080)
    #[arg(long, value_name = "VER", requires = "gpu")]
    driver: Option<String>,
    /// Count Jetson minors (7.2, 8.7, 11.0) as covered only by their own cubin
    #[arg(long)]
    strict_igpu: bool,
    /// List every kernel in the text matrix (default: the first 40)
    #[arg(long)]
    all_kernels: bool,
    /// Local profiles that add to or override the built-ins, for --require [default: arch-profiles/ here or in a parent]
    #[arg(long, env = "FATKIT_PROFILES_DIR", value_name = "DIR")]
    profiles_dir: Option<PathBuf>,
    /// Print JSON for machines instead of text (schema: crates/fatkit-cli/docs/audit-json.md)
    #[arg(long)]
    json: bool,
}

/// The bytes of a file: memory-mapped when possible.
enum Bytes {
    Mapped(memmap2::Mmap),
    Read(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Read(v) => v,
        }
    }
}

/// Maps `path` read-only. Falls back to reading it for what cannot be mapped (empty files,
/// pipes).
pub fn read_file(path: &Path) -> std::io::Result<impl std::ops::Deref<Target = [u8]>> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    if len > 0 && file.metadata()?.is_file() {
        // SAFETY: the map is read-only and lives only while this file is inspected. A file
        // truncated by another process meanwhile would fault; audit targets are build
        // outputs and installed libraries, not files being written.
        #[allow(unsafe_code)]
        let map = unsafe { memmap2::Mmap::map(&file) };
        if let Ok(map) = map {
            return Ok(Bytes::Mapped(map));
        }
    }
    std::fs::read(path).map(Bytes::Read)
}

#[derive(Serialize)]
struct KernelJson {
    name: String,
    targets: TargetSet,
    /// By compute capability ("8.0"): how a GPU of that CC runs the kernel.
    cells: std::collections::BTreeMap<String, Cell>,
}

#[derive(Serialize)]
struct RequireJson {
    targets: TargetSet,
    gaps: Vec<Gap>,
    /// Pairs missing by the crate's declaration: not gaps.
    declared: Vec<Gap>,
}

#[derive(Serialize)]
struct GpuJson {
    gpu: Gpu,
    driver: Option<DriverVersion>,
    kernels: Vec<KernelVerdict>,
}

#[derive(Serialize)]
struct FileJson<'a> {
    path: String,
    status: FileStatus,
    report: &'a FileReport,
    columns: Vec<Cc>,
    kernels: Vec<KernelJson>,
    require: Option<RequireJson>,
    gpu: Option<GpuJson>,
    /// Kernels built for fewer targets by their crate's declaration, from the records fatkit
    /// embeds in binaries (or a `.fatbin`'s generated module beside it).
    declared: &'a Declarations,
}

impl Audit {
    pub fn run(self, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        let policy = Policy {
            strict_igpu: self.strict_igpu,
        };
        let required = self.required_targets()?;
        let gpu = self.gpu.as_deref().map(products::lookup).transpose()?;
        let driver: Option<DriverVersion> =
            crate::parse_option("--driver", self.driver.as_deref())?;
        let limits = Limits::default();
        let mut worst = FileStatus::Ok;
        let mut json_files = Vec::new();
        let mut reports = Vec::new();
        for path in &self.files {
            let bytes = read_file(path)
                .map_err(|e| Error::Input(format!("{}: cannot read: {e}", path.display())))?;
            reports.push((
                path.clone(),
                inspect::inspect(&path.display().to_string(), &bytes, Depth::Kernels, &limits),
                declarations(path, &bytes)?,
            ));
        }
        let device = gpu
            .as_ref()
            .map(|g| Device::new(g.cc, driver).named(g.name.clone()));
        for (path, report, declarations) in &reports {
            let audit = coverage::audit(
                report,
                declarations,
                required.as_ref(),
                device.as_ref(),
                policy,
            );
            worst = worst.max(audit.status);
            if self.json {
                json_files.push(FileJson {
                    path: path.display().to_string(),
                    status: audit.status,
                    report,
                    kernels: audit
                        .kernels
                        .iter()
                        .map(|k| KernelJson {
                            name: k.name.clone(),
                            targets: k.targets(),
                            cells: audit
                                .columns
                                .iter()
                                .map(|&cc| (cc.to_string(), k.cell(cc, policy)))
                                .collect(),
                        })
                        .collect(),
                    columns: audit.columns.clone(),
                    require: required
                        .clone()
                        .zip(audit.gaps.clone())
                        .map(|(targets, gaps)| RequireJson {
                            targets,
                            gaps,
                            declared: audit.declared.clone(),
                        }),
                    declared: declarations,
                    gpu: gpu
                        .clone()
                        .zip(audit.verdicts.clone())
                        .map(|(gpu, kernels)| GpuJson {
                            gpu,
                            driver,
                            kernels,
                        }),
                });
            } else {
                write_text(
                    out,
                    report,
                    &audit.kernels,
                    &audit.columns,
                    policy,
                    self.all_kernels,
                )?;
                if let (Some(required), Some(gaps)) = (&required, &audit.gaps) {
                    write_gaps(
                        out,
                        required,
                        gaps,
                        &audit.declared,
                        audit.kernels.is_empty(),
                    )?;
                }
                if let (Some(gpu), Some(verdicts)) = (&gpu, &audit.verdicts) {
                    write_gpu(out, gpu, driver, verdicts)?;
                }
                for e in &audit.errors {
                    writeln!(out, "error: {e}")?;
                }
                writeln!(out)?;
            }
        }
        if self.json {
            #[derive(Serialize)]
            struct Output<'a> {
                schema: u32,
                exit_code: u8,
                files: Vec<FileJson<'a>>,
            }
            let exit_code = match worst {
                FileStatus::Ok => 0,
                FileStatus::Gaps => 1,
                FileStatus::Invalid => 2,
            };
            serde_json::to_writer_pretty(
                &mut *out,
                &Output {
                    schema: 1,
                    exit_code,
                    files: json_files,
                },
            )
            .map_err(std::io::Error::from)?;
            writeln!(out)?;
        }
        match worst {
            FileStatus::Ok => Ok(Outcome::Ok),
            FileStatus::Gaps => Ok(Outcome::Finding),
            FileStatus::Invalid => Err(Error::Input(
                "some input is invalid; see the errors above".to_owned(),
            )),
        }
    }

    /// `--require`: a profile (by name or path) or a target list.
    fn required_targets(&self) -> Result<Option<TargetSet>> {
        let Some(spec) = self.require.as_deref() else {
            return Ok(None);
        };
        let is_profile_name = !spec.is_empty()
            && spec
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && !spec.starts_with(|c: char| c.is_ascii_digit())
            && !spec.starts_with("sm_")
            && !spec.starts_with("compute_")
            && spec != "all"
            && spec != "all-major"
            && spec != "native";
        if spec.ends_with(".toml") || is_profile_name {
            let cwd = std::env::current_dir()?;
            let profile =
                fatkit_build::profile::load_spec(spec, &cwd, self.profiles_dir.as_deref())?;
            return Ok(Some(profile.targets));
        }
        notation::parse_any(spec, &Context::default())
            .map(Some)
            .map_err(|e| Error::Input(format!("--require: {e}")))
    }
}

/// The declaration records of a file: embedded in a binary, or for a `.fatbin` or `.cubin`
/// fatkit wrote, in the generated module beside it (`<stem>.rs`).
fn declarations(path: &Path, bytes: &[u8]) -> Result<Declarations> {
    let found = Declarations::scan(bytes);
    let beside = path.with_extension("rs");
    let is_image = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("fatbin" | "cubin")
    );
    if !found.is_empty() || !is_image || !beside.is_file() {
        return Ok(found);
    }
    let text = std::fs::read(&beside)
        .map_err(|e| Error::Input(format!("{}: cannot read: {e}", beside.display())))?;
    Ok(Declarations::scan(&text))
}

fn origin_name(origin: &Origin) -> String {
    match origin {
        Origin::File => "file".to_owned(),
        Origin::Section(name) => name.clone(),
        Origin::Scan => "embedded (scan)".to_owned(),
    }
}

fn write_text(
    out: &mut (dyn Write + Send),
    report: &FileReport,
    kernels: &[KernelImages],
    columns: &[Cc],
    policy: Policy,
    all_kernels: bool,
) -> std::io::Result<()> {
    let images = report.all_images();
    let n_containers = count_containers(report);
    writeln!(
        out,
        "{}: {:?}, {} container(s), {} image(s), {} kernel(s)",
        report.name,
        report.format,
        n_containers,
        images.len(),
        kernels.len()
    )
    .map(|_| ())?;
    if images.is_empty() {
        writeln!(out, "  no device code found")?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = images
        .iter()
        .map(|(member, origin, e)| {
            let target = e
                .target
                .map_or_else(|| format!("arch {}", e.arch), |t| t.to_string());
            let isa = e.ptx_isa.map_or_else(|| "-".to_owned(), |i| i.to_string());
            let toolkit = e.toolkit.clone().unwrap_or_else(|| "-".to_owned());
            let compression = format!("{:?}", e.compression).to_lowercase();
            let kernels = match &e.error {
                Some(err) => format!("unreadable: {err}"),
                None => e.kernels.len().to_string(),
            };
            let place = if *member == report.name {
                origin_name(origin)
            } else {
                format!(
                    "{} {}",
                    member.strip_prefix(report.name.as_str()).unwrap_or(member),
                    origin_name(origin)
                )
            };
            vec![
                place,
                format!("{:#x}", e.offset),
                e.kind.name(),
                target,
                isa,
                toolkit,
                compression,
                e.stored_size.to_string(),
                kernels,
            ]
        })
        .collect();
    for line in table::render(
        &[
            "WHERE",
            "OFFSET",
            "KIND",
            "TARGET",
            "PTX ISA",
            "TOOLKIT",
            "COMPRESSION",
            "BYTES",
            "KERNELS",
        ],
        &rows,
    )
    .lines()
    {
        writeln!(out, "  {line}")?;
    }
    if kernels.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "  coverage by compute capability (cubin / ptx = JIT only / - = missing):"
    )?;
    let mut headers: Vec<String> = vec!["KERNEL".to_owned()];
    headers.extend(columns.iter().map(|cc| cc.to_string()));
    let header_refs: Vec<&str> = headers.iter().map(String::as_str).collect();
    let limit = if all_kernels { usize::MAX } else { 40 };
    let rows: Vec<Vec<String>> = kernels
        .iter()
        .take(limit)
        .map(|k| {
            let mut row = vec![k.name.clone()];
            row.extend(columns.iter().map(|&cc| match k.cell(cc, policy) {
                Cell::Cubin(_) => "cubin".to_owned(),
                Cell::Ptx(_) => "ptx".to_owned(),
                Cell::Missing => "-".to_owned(),
            }));
            row
        })
        .collect();
    for line in table::render(&header_refs, &rows).lines() {
        writeln!(out, "  {line}")?;
    }
    if kernels.len() > limit {
        writeln!(
            out,
            "  ... and {} more kernels (--all-kernels lists them, --json has them all)",
            kernels.len() - limit
        )?;
    }
    Ok(())
}

fn count_containers(report: &FileReport) -> usize {
    report.containers.len() + report.members.iter().map(count_containers).sum::<usize>()
}

fn write_gaps(
    out: &mut (dyn Write + Send),
    required: &TargetSet,
    gaps: &[Gap],
    declared: &[Gap],
    no_kernels: bool,
) -> std::io::Result<()> {
    if no_kernels {
        return writeln!(
            out,
            "  require {required}: FAILS: no kernels found to check"
        );
    }
    if gaps.is_empty() {
        writeln!(out, "  require {required}: every kernel covered")?;
    } else {
        writeln!(out, "  require {required}: {} gap(s):", gaps.len())?;
        for g in gaps {
            writeln!(out, "    {} {}: {}", g.kernel, g.target, g.reason)?;
        }
    }
    let mut by_kernel: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for g in declared {
        by_kernel
            .entry(&g.kernel)
            .or_default()
            .push(g.target.to_string());
    }
    if !by_kernel.is_empty() {
        writeln!(
            out,
            "  declared by the crate, not gaps ({} kernel(s) built for fewer targets by design):",
            by_kernel.len()
        )?;
        for (kernel, targets) in by_kernel {
            writeln!(out, "    {kernel}: not built for {}", targets.join(" "))?;
        }
    }
    Ok(())
}

fn write_gpu(
    out: &mut (dyn Write + Send),
    gpu: &Gpu,
    driver: Option<DriverVersion>,
    verdicts: &[KernelVerdict],
) -> std::io::Result<()> {
    let driver = driver.map_or_else(
        || "driver not given".to_owned(),
        |d| format!("driver {}", d.describe()),
    );
    let n_run = verdicts.iter().filter(|v| v.status == Status::Runs).count();
    let n_declared = verdicts.iter().filter(|v| v.declared.is_some()).count();
    let declared = if n_declared > 0 {
        format!(" ({n_declared} not, by their crate's declaration)")
    } else {
        String::new()
    };
    writeln!(
        out,
        "  on {} (CC {}), {driver}: {n_run} of {} kernel(s) run{declared}",
        gpu.name,
        gpu.cc,
        verdicts.len()
    )?;
    if verdicts.is_empty() {
        writeln!(out, "    FAILS: no kernels found to check")?;
    }
    for v in verdicts.iter().filter(|v| v.status != Status::Runs) {
        if let Some(targets) = &v.declared {
            // The crate's declaration says why; the images' story would repeat it.
            writeln!(
                out,
                "    {}: does not run (declared for {targets} only)",
                v.kernel
            )?;
            continue;
        }
        let what = if v.status == Status::Unknown {
            "unknown"
        } else {
            "does not run"
        };
        writeln!(
            out,
            "    {}: {what}: {}",
            v.kernel,
            v.reason.as_deref().unwrap_or("")
        )?;
    }
    Ok(())
}
