//! What `fatkit audit` answers, as data, and the reading `package` shares with it.
//!
//! [`inputs`] turns paths (files, wheels, directories, Python environments) into reports with
//! bounded memory ([`read`]); [`analyse`] judges every kernel as the driver loads its module
//! (`fatkit_arch::load`, through `crate::coverage` and `summary`) against the
//! [`Options`] resolved once, and combines the answers into one [`Audited`] with one status
//! policy; [`Audited::json`] is that data as `audit --json` prints it. Rendering as text is
//! the command line's.

pub mod collection;
pub mod coverage;
pub mod general;
pub mod image;
mod input;
pub mod inputs;
pub mod kernel;
pub mod local;
pub mod profiles;
pub mod release;
pub use fatkit_read as read;
pub mod summary;
pub mod text;
pub mod variants;
pub mod words;

use std::path::PathBuf;

use crate::coverage::{Cell, Declarations, FileAudit, FileStatus, Gap, KernelVerdict};
use crate::general::Roles;
use crate::summary::{Answer, Library};
use fatkit_arch::driver::DriverVersion;
use fatkit_arch::products::Gpu;
use fatkit_arch::rules::{Device, Policy};
use fatkit_arch::{Cc, TargetSet};
use fatkit_fatbin::inspect::FileReport;
use fatkit_fatbin::Limits;
use serde::Serialize;

/// Why an audit could not be made: input that cannot be read, or a Python environment that
/// cannot be asked for its packages; worded for the person who named it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A path given (or a file under a directory given) cannot be read; `shown`: the path as
    /// reports show it.
    #[error("{shown}: cannot read: {source}")]
    Read {
        shown: String,
        source: std::io::Error,
    },
    /// `--python DIR` names a directory without `bin/python3`.
    #[error("--python {}: a directory without bin/python3; give a virtual environment's directory or an interpreter", .0.display())]
    NotAnEnvironment(std::path::PathBuf),
    /// The interpreter could not be run, or ran past its time.
    #[error("--python: cannot run {}: {}; {}", interpreter.display(), match tool.status {
        fatkit_run::ToolStatus::TimedOut(_) => tool.status.to_string(),
        _ => tool.output.clone(),
    }, tool.hint)]
    PythonCannotRun {
        interpreter: std::path::PathBuf,
        tool: fatkit_run::ToolError,
    },
    /// The interpreter ran and failed.
    #[error("--python: {} failed ({status}): {stderr}", interpreter.display())]
    PythonFailed {
        interpreter: std::path::PathBuf,
        status: std::process::ExitStatus,
        stderr: String,
    },
    /// A tar compressed as a whole: its members cannot be reached without inflating it all.
    #[error("{shown}: a tar compressed with {how}; decompress it first ({}) and audit the .tar", how.undo())]
    CompressedTar {
        shown: String,
        how: image::Compression,
    },
    /// The environment has no site-packages directory.
    #[error("--python: {} has no site-packages directory", .0.display())]
    NoSitePackages(std::path::PathBuf),
}

pub type Result<T> = std::result::Result<T, Error>;

/// The arguments, resolved once: every default applied, every name looked up.
#[derive(Debug)]
pub struct Options {
    pub policy: Policy,
    pub required: Option<TargetSet>,
    pub gpus: Vec<Gpu>,
    pub driver: Option<DriverVersion>,
    /// The GPUs and driver are this machine's, as its driver lists them (no `--gpu` was given;
    /// [`local::visible`]).
    pub here: bool,
    /// A GPU x library matrix rather than one GPU's verdicts.
    pub matrix: bool,
    pub verbose: bool,
    pub all_kernels: bool,
    /// Hold a library to every kernel: architecture-specific parts built for other GPUs fail
    /// it too (`--strict`).
    pub strict: bool,
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
    /// Libraries of which one is loaded (one file per CUDA release).
    pub variants: Vec<variants::Variants>,
}

impl AuditedInput {
    /// The answers that decide this input on GPU `g` (see [`variants::deciding`]).
    pub(crate) fn deciding(&self, g: usize) -> Vec<Answer> {
        variants::deciding(&self.libraries, &self.variants, g)
    }
}

/// Everything `audit` found, before rendering.
#[derive(Debug)]
pub struct Audited {
    pub inputs: Vec<AuditedInput>,
    pub status: FileStatus,
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
    for input in paths
        .iter()
        .map(|path| inputs::read(path, &limits))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .flatten()
    {
        let refs = input.libraries();
        let per_gpu = collection::per_gpu(&refs);
        let libraries: Vec<Library> = refs
            .into_iter()
            .zip(per_gpu)
            .map(|(l, per_gpu)| Library {
                layer: l.layer,
                ..summary::library(
                    l.name,
                    l.package,
                    l.report,
                    &input.declarations,
                    &devices,
                    options.policy,
                    match (options.strict, per_gpu) {
                        (true, _) => summary::Held::Strict,
                        (false, true) => summary::Held::PerGpu,
                        (false, false) => summary::Held::General,
                    },
                )
            })
            .collect();
        // The per-kernel detail judges each module as its library does.
        let roles = match options.strict {
            true => Roles::strict(),
            false => Roles::merge(libraries.iter().map(|l| &l.roles)),
        };
        let audit = coverage::audit(
            &input.report,
            &input.declarations,
            options.required.as_ref(),
            one_device,
            options.policy,
            &roles,
        );
        let variants = variants::find(&libraries);
        let status = status_of(
            &input,
            (&audit, &libraries, &variants),
            devices.len(),
            options,
        );
        audited.status = audited.status.max(status);
        audited.inputs.push(AuditedInput {
            label: input.label,
            package: input.package,
            status,
            report: input.report,
            declarations: input.declarations,
            audit,
            libraries,
            variants,
        });
    }
    Ok(audited)
}

/// One input's status by the one policy: invalid input, then a finding (a gap, a kernel that
/// fails, a distribution holding nothing for a GPU, nothing to check), then an unknown.
fn status_of(
    input: &inputs::Input,
    (audit, libraries, variants): (&FileAudit, &[Library], &[variants::Variants]),
    gpus: usize,
    options: &Options,
) -> FileStatus {
    // On a GPU the libraries' answers decide, one per set of variants; the per-kernel
    // verdicts of the whole input are its detail.
    let answers: Vec<Answer> = (0..gpus)
        .flat_map(|g| variants::deciding(libraries, variants, g))
        .collect();
    let mut status = if !audit.errors.is_empty() {
        FileStatus::Invalid
    } else if audit.gaps.as_ref().is_some_and(|g| !g.is_empty()) {
        FileStatus::Gaps
    } else {
        FileStatus::Ok
    };
    // A kernel that certainly fails is a finding even beside an unknown.
    let certain_failure = variants::speaking(libraries, variants)
        .into_iter()
        .filter_map(|i| libraries.get(i))
        .flat_map(|l| &l.on)
        .flat_map(|on| &on.failing)
        .any(|f| f.why.is_some_and(|w| w != coverage::Why::Unknown));
    // A distribution whose every library is for other GPUs holds nothing for this one.
    let holds_none = (0..gpus).any(|g| !collection::none_for(libraries, g).is_empty());
    let fails_a_gpu = certain_failure
        || holds_none
        || answers
            .iter()
            .any(|a| matches!(a, Answer::Partly | Answer::No));
    let unknown_on_a_gpu = answers.contains(&Answer::Unknown);
    let nothing_to_check =
        (gpus > 0 || options.required.is_some()) && !input.report.has_device_code();
    if fails_a_gpu || nothing_to_check {
        status = status.max(FileStatus::Gaps);
    }
    if unknown_on_a_gpu {
        status = status.max(FileStatus::Unknown);
    }
    if libraries.iter().any(|l| !l.corrupt.is_empty()) {
        status = FileStatus::Invalid;
    }
    status
}

#[derive(Debug, Serialize)]
struct KernelJson {
    name: String,
    targets: TargetSet,
    /// By compute capability ("8.0"): how a GPU of that CC runs the kernel.
    cells: std::collections::BTreeMap<String, Cell>,
}

#[derive(Debug, Serialize)]
struct RequireJson {
    targets: TargetSet,
    gaps: Vec<Gap>,
    /// Pairs missing by the crate's declaration: not gaps.
    declared: Vec<Gap>,
}

#[derive(Debug, Serialize)]
struct GpuJson {
    gpu: Gpu,
    driver: Option<DriverVersion>,
    kernels: Vec<KernelVerdict>,
}

#[derive(Debug, Serialize)]
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
    /// Libraries of which one is loaded, with which where that is known.
    variants: Vec<VariantsJson<'a>>,
}

#[derive(Debug, Serialize)]
struct VariantsJson<'a> {
    pattern: &'a str,
    /// The libraries by name, and the CUDA release each is for.
    libraries: Vec<[&'a str; 2]>,
    loaded: Option<&'a str>,
    because: &'a str,
}

#[derive(Debug, Serialize)]
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

/// What `audit --json` prints: the analysis as data (crates/fatkit-cli/docs/audit-json.md).
#[derive(Debug, Serialize)]
pub struct Json<'a> {
    schema: u32,
    exit_code: u8,
    files: Vec<FileJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    matrix: Option<MatrixJson<'a>>,
}

impl Audited {
    /// The exit code of the whole audit: 0 every check passes, 1 a finding, 2 an unknown
    /// verdict (and no finding) or input that could not be read.
    pub fn exit_code(&self) -> u8 {
        match self.status {
            FileStatus::Ok => 0,
            FileStatus::Gaps => 1,
            FileStatus::Unknown | FileStatus::Invalid => 2,
        }
    }

    /// The analysis as `audit --json` writes it.
    pub fn json<'a>(&'a self, options: &'a Options) -> Json<'a> {
        let audited = self;
        let files = audited
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
                    variants: input
                        .variants
                        .iter()
                        .map(|v| VariantsJson {
                            pattern: &v.pattern,
                            libraries: v
                                .members
                                .iter()
                                .zip(&v.cuda)
                                .filter_map(|(&i, cuda)| {
                                    Some([input.libraries.get(i)?.name.as_str(), cuda.as_str()])
                                })
                                .collect(),
                            loaded: v
                                .loaded
                                .and_then(|i| input.libraries.get(i))
                                .map(|l| l.name.as_str()),
                            because: &v.because,
                        })
                        .collect(),
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
        Json {
            schema: 1,
            exit_code: audited.exit_code(),
            files,
            matrix,
        }
    }
}
