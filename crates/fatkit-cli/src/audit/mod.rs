//! `audit PATH...`: which GPUs each kernel of a binary, wheel, directory or Python environment
//! runs on, answered first per library, with the detail behind `--verbose`.
//!
//! Parse the arguments and resolve them once ([`Options`]), read the inputs
//! ([`inputs`]), analyse them into one [`Audited`], render it as text ([`text`]) or JSON.

mod inputs;
mod text;

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use fatkit_arch::driver::DriverVersion;
use fatkit_arch::notation::{self, Context};
use fatkit_arch::products::{self, Gpu};
use fatkit_arch::rules::{Device, Policy};
use fatkit_arch::{Cc, TargetSet};
use fatkit_fatbin::coverage::{
    self, Cell, Declarations, FileAudit, FileStatus, Gap, KernelVerdict,
};
use fatkit_fatbin::inspect::FileReport;
use fatkit_fatbin::summary::{self, Answer, Library};
use fatkit_fatbin::Limits;
use serde::Serialize;

pub use inputs::read_file;

use crate::{Error, Outcome, Result};

#[derive(Debug, Args)]
pub struct Audit {
    /// What to read: fatbins, cubins, PTX, executables, shared libraries, objects, .a archives,
    /// wheels, and directories (every file under them that holds device code)
    #[arg(value_name = "PATH", required_unless_present = "python")]
    files: Vec<PathBuf>,
    /// Audit an installed Python environment: its site-packages, NVIDIA's nvidia-* wheels
    /// included. PYTHON is an interpreter or a virtual environment's directory [default: python3]
    #[arg(long, value_name = "PYTHON", num_args = 0..=1, default_missing_value = "python3")]
    python: Option<PathBuf>,
    /// Require every kernel to run on these targets: a profile name or .toml, or a target list
    /// in any notation ("sm_80 sm_90 compute_90", "8.0;9.0+PTX")
    #[arg(long, value_name = "PROFILE|LIST")]
    require: Option<String>,
    /// Check against a GPU: a product name ("RTX 5090") or a compute capability ("12.0");
    /// given several times, a GPU x library matrix
    #[arg(long, value_name = "NAME|X.Y")]
    gpu: Vec<String>,
    /// A GPU x library matrix over a named set of GPUs (--matrix=SET): generations (Volta to
    /// Blackwell), datacenter, consumer [default: generations]
    #[arg(
        long,
        value_name = "SET",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "generations"
    )]
    matrix: Option<String>,
    /// The driver of the GPUs: as nvidia-smi prints it (570.86.10) or cuDriverGetVersion's integer (12080)
    #[arg(long, value_name = "VER")]
    driver: Option<String>,
    /// Count Jetson minors (7.2, 8.7, 11.0) as covered only by their own cubin
    #[arg(long)]
    strict_igpu: bool,
    /// Also list every image and the kernel x compute capability table of each file
    #[arg(long, short)]
    verbose: bool,
    /// Name every kernel that does not run, and every row of the kernel table
    #[arg(long)]
    all_kernels: bool,
    /// Local profiles that add to or override the built-ins, for --require [default: arch-profiles/ here or in a parent]
    #[arg(long, env = "FATKIT_PROFILES_DIR", value_name = "DIR")]
    profiles_dir: Option<PathBuf>,
    /// Print JSON for machines instead of text (schema: crates/fatkit-cli/docs/audit-json.md)
    #[arg(long)]
    json: bool,
}

/// The arguments, resolved once: every default applied, every name looked up.
#[derive(Debug)]
pub struct Options {
    pub policy: Policy,
    pub required: Option<TargetSet>,
    pub gpus: Vec<Gpu>,
    pub driver: Option<DriverVersion>,
    /// A GPU x library matrix rather than one GPU's verdicts.
    pub matrix: bool,
    pub verbose: bool,
    pub all_kernels: bool,
}

impl Options {
    pub fn devices(&self) -> Vec<Device> {
        self.gpus
            .iter()
            .map(|g| Device::new(g.cc, self.driver).named(g.name.clone()))
            .collect()
    }
}

/// One input, analysed.
#[derive(Debug)]
pub struct AuditedInput {
    pub label: String,
    pub package: Option<String>,
    pub status: FileStatus,
    pub report: FileReport,
    pub declarations: Declarations,
    /// `--require` and (with one GPU) per-kernel verdicts, as before libraries.
    pub audit: FileAudit,
    pub libraries: Vec<Library>,
}

/// Everything `audit` found, before rendering.
#[derive(Debug)]
pub struct Audited {
    pub inputs: Vec<AuditedInput>,
    pub status: FileStatus,
}

impl Audit {
    pub fn run(self, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        let options = self.options()?;
        let mut paths = self.files.clone();
        if let Some(python) = &self.python {
            paths.extend(inputs::site_packages(python)?);
        }
        let audited = analyse(&paths, &options)?;
        let mut buffered = std::io::BufWriter::new(&mut *out);
        if self.json {
            write_json(&mut buffered, &audited, &options)?;
        } else {
            text::write(&mut buffered, &audited, &options)?;
        }
        buffered.flush()?;
        match audited.status {
            FileStatus::Ok => Ok(Outcome::Ok),
            FileStatus::Gaps => Ok(Outcome::Finding),
            FileStatus::Unknown => Err(Error::Input(
                "whether some kernel runs is unknown: the rules cannot say (see the reasons above)"
                    .to_owned(),
            )),
            FileStatus::Invalid => Err(Error::Input(
                "some input is unknown or corrupt; see the errors above".to_owned(),
            )),
        }
    }

    fn options(&self) -> Result<Options> {
        let mut gpus = self
            .gpu
            .iter()
            .map(|g| products::lookup(g))
            .collect::<Result<Vec<Gpu>, _>>()?;
        if let Some(set) = &self.matrix {
            let names: Vec<&str> = products::SETS.iter().map(|(n, _, _)| *n).collect();
            gpus.extend(products::set(set).ok_or_else(|| {
                Error::Input(format!(
                    "--matrix: no GPU set named '{set}'; use one of {}, or give --gpu several times",
                    names.join(", ")
                ))
            })?);
        }
        let driver: Option<DriverVersion> =
            crate::parse_option("--driver", self.driver.as_deref())?;
        if driver.is_some() && gpus.is_empty() {
            return Err(Error::Input(
                "--driver: needs a GPU to check; add --gpu NAME or --matrix".to_owned(),
            ));
        }
        Ok(Options {
            policy: Policy {
                strict_igpu: self.strict_igpu,
            },
            required: self.required_targets()?,
            matrix: self.matrix.is_some() || gpus.len() > 1,
            gpus,
            driver,
            verbose: self.verbose,
            all_kernels: self.all_kernels,
        })
    }

    /// `--require`: a profile (by name or path) or a target list.
    fn required_targets(&self) -> Result<Option<TargetSet>> {
        let Some(spec) = self.require.as_deref() else {
            return Ok(None);
        };
        if spec.trim().is_empty() {
            // `--require "$TARGETS"` with the variable unset must not pass everything.
            return Err(Error::Input(
                "--require: empty; give a profile name (full) or a target list (\"sm_80 sm_90\"), or leave --require out"
                    .to_owned(),
            ));
        }
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

/// Reads every path and analyses it against the options.
pub fn analyse(paths: &[PathBuf], options: &Options) -> Result<Audited> {
    let limits = Limits::default();
    let devices = options.devices();
    let one_device = match devices.as_slice() {
        [d] => Some(d),
        _ => None,
    };
    let mut audited = Audited {
        inputs: Vec::new(),
        status: FileStatus::Ok,
    };
    for path in paths {
        let input = inputs::read(path, &limits)?;
        let audit = coverage::audit(
            &input.report,
            &input.declarations,
            options.required.as_ref(),
            one_device,
            options.policy,
        );
        let libraries: Vec<Library> = input
            .libraries()
            .into_iter()
            .map(|l| {
                summary::library(
                    l.name,
                    l.package,
                    l.report,
                    &input.declarations,
                    &devices,
                    options.policy,
                )
            })
            .collect();
        let mut status = audit.status;
        let fails_a_gpu = libraries
            .iter()
            .flat_map(|l| &l.on)
            .any(|on| matches!(on.answer, Answer::Partly | Answer::No));
        let unknown_on_a_gpu = libraries
            .iter()
            .flat_map(|l| &l.on)
            .any(|on| on.answer == Answer::Unknown);
        let nothing_to_check = !devices.is_empty() && audit.kernels.is_empty();
        if fails_a_gpu || nothing_to_check {
            status = status.max(FileStatus::Gaps);
        }
        if unknown_on_a_gpu {
            status = status.max(FileStatus::Unknown);
        }
        if libraries.iter().any(|l| !l.corrupt.is_empty()) {
            status = FileStatus::Invalid;
        }
        audited.status = audited.status.max(status);
        audited.inputs.push(AuditedInput {
            label: input.label,
            package: input.package,
            status,
            report: input.report,
            declarations: input.declarations,
            audit,
            libraries,
        });
    }
    Ok(audited)
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
    path: &'a str,
    status: FileStatus,
    report: &'a FileReport,
    columns: &'a [Cc],
    kernels: Vec<KernelJson>,
    require: Option<RequireJson>,
    gpu: Option<GpuJson>,
    declared: &'a Declarations,
    libraries: &'a [Library],
}

#[derive(Serialize)]
struct MatrixJson<'a> {
    gpus: &'a [Gpu],
    driver: Option<DriverVersion>,
    /// One per library: the input it is in and its name.
    columns: Vec<[&'a str; 2]>,
    /// `cells[g][l]`: library `l` on GPU `g`.
    cells: Vec<Vec<summary::Cell>>,
}

/// The GPU x library matrix: every library of every input, on every GPU asked about.
pub fn matrix_cells(audited: &Audited) -> Vec<Vec<summary::Cell>> {
    let libraries: Vec<&Library> = audited.inputs.iter().flat_map(|i| &i.libraries).collect();
    let n_gpus = libraries.first().map_or(0, |l| l.on.len());
    (0..n_gpus)
        .map(|g| {
            libraries
                .iter()
                .map(|l| {
                    l.on.get(g)
                        .map_or(summary::Cell::Corrupt, summary::Cell::of)
                })
                .collect()
        })
        .collect()
}

fn write_json(out: &mut dyn Write, audited: &Audited, options: &Options) -> Result<()> {
    #[derive(Serialize)]
    struct Output<'a> {
        schema: u32,
        exit_code: u8,
        files: Vec<FileJson<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        matrix: Option<MatrixJson<'a>>,
    }
    let files =
        audited
            .inputs
            .iter()
            .map(|input| {
                let audit = &input.audit;
                FileJson {
                    path: &input.label,
                    status: input.status,
                    report: &input.report,
                    kernels: audit
                        .kernels
                        .iter()
                        .map(|k| KernelJson {
                            name: k.name.clone(),
                            targets: k.targets(),
                            cells: audit
                                .columns
                                .iter()
                                .map(|&cc| (cc.to_string(), k.cell(cc, options.policy)))
                                .collect(),
                        })
                        .collect(),
                    columns: &audit.columns,
                    require: options.required.clone().zip(audit.gaps.clone()).map(
                        |(targets, gaps)| RequireJson {
                            targets,
                            gaps,
                            declared: audit.declared.clone(),
                        },
                    ),
                    declared: &input.declarations,
                    gpu: match (options.gpus.as_slice(), &audit.verdicts) {
                        ([gpu], Some(kernels)) => Some(GpuJson {
                            gpu: gpu.clone(),
                            driver: options.driver,
                            kernels: kernels.clone(),
                        }),
                        _ => None,
                    },
                    libraries: &input.libraries,
                }
            })
            .collect();
    let matrix = options.matrix.then(|| MatrixJson {
        gpus: &options.gpus,
        driver: options.driver,
        columns: audited
            .inputs
            .iter()
            .flat_map(|i| {
                i.libraries
                    .iter()
                    .map(|l| [i.label.as_str(), l.name.as_str()])
            })
            .collect(),
        cells: matrix_cells(audited),
    });
    let exit_code = match audited.status {
        FileStatus::Ok => 0,
        FileStatus::Gaps => 1,
        FileStatus::Unknown | FileStatus::Invalid => 2,
    };
    serde_json::to_writer_pretty(
        &mut *out,
        &Output {
            schema: 1,
            exit_code,
            files,
            matrix,
        },
    )
    .map_err(std::io::Error::from)?;
    writeln!(out)?;
    Ok(())
}
