//! What `fatkit audit` answers, as data, and the reading `package` shares with it.
//!
//! [`inputs`] turns paths (files, wheels, directories, Python environments) into reports with
//! bounded memory ([`read`]); [`analyse`] judges every kernel as the driver loads its module
//! (`fatkit_arch::load`, through `crate::coverage` and `summary`) against the
//! [`Options`] resolved once, and combines the answers into one [`Audited`] with one status
//! policy; [`Audited::json`] is that data as `audit --json` prints it. Rendering as text is
//! the command line's.

pub mod answer;
pub mod bom;
pub(crate) mod collection;
pub mod coverage;
pub mod diff;
pub mod environment;
pub mod fix;
pub mod gate;
pub(crate) mod general;
pub mod image;
mod input;
pub mod inputs;
pub(crate) mod kernel;
pub mod local;
pub mod profiles;
pub(crate) mod readings;
pub mod record;
pub mod sarif;
pub use fatkit_read as read;
pub mod summary;
pub mod text;
pub(crate) mod variants;
pub(crate) mod words;

use std::path::PathBuf;

use crate::coverage::{Cell, Declarations, FileAudit, FileStatus, Gap, KernelVerdict};
use crate::general::Roles;
use crate::record::LibraryRef;
use crate::summary::Library;
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
    #[error("--python {}: not a Python environment (no bin/python3, pyvenv.cfg or lib/); give a virtual environment's directory or its interpreter, or audit a site-packages directory as a path: fatkit audit {}", .0.display(), .0.display())]
    NotAnEnvironment(std::path::PathBuf),
    /// A tar compressed as a whole: its members cannot be reached without inflating it all.
    #[error("{shown}: a tar compressed with {how}; decompress it first ({}) and audit the .tar", how.undo())]
    CompressedTar {
        shown: String,
        how: image::Compression,
    },
    /// The interpreter named is a script (a version manager's shim) in a directory with no
    /// environment's layout: which Python it starts is known only by running it.
    #[error("--python: {} is a script (a shim such as pyenv's), not an interpreter, and fatkit runs nothing it audits; give the environment's directory or its interpreter: --python \"$(python3 -c 'import sys; print(sys.prefix)')\"", .0.display())]
    ScriptInterpreter(std::path::PathBuf),
    /// The environment has no site-packages directory.
    /// A lock or requirements file that cannot be resolved or whose wheels cannot be had.
    #[error(transparent)]
    Lock(Box<fatkit_lock::LockError>),
    /// `FATKIT_READINGS_DIR` names a directory readings cannot be kept in.
    #[error("FATKIT_READINGS_DIR={}: readings cannot be kept there: {source}; set it to a directory fatkit can create and write (a CI cache's), or unset it to keep them in fatkit's cache", .dir.display())]
    Readings {
        dir: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("--python: {} has no site-packages directory (looked for lib/python3.N/site-packages, lib/python3/dist-packages and Lib/site-packages); give the environment's directory", .0.display())]
    NoSitePackages(std::path::PathBuf),
}

pub type Result<T> = std::result::Result<T, Error>;

impl From<fatkit_lock::LockError> for Error {
    fn from(e: fatkit_lock::LockError) -> Error {
        Error::Lock(Box::new(e))
    }
}

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
    /// How a lock or requirements file named is judged: for which machine, from which store.
    pub lock: fatkit_lock::Settings,
    /// Every kernel's row is asked for (the JSON, `-v`, `--all-kernels`): the input's kernel
    /// table is made. Otherwise it is made only where the answer needs it (`--require`, one
    /// GPU's per-kernel verdicts).
    pub kernel_table: bool,
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
    /// The package's answer: per distribution and as a whole, per GPU ([`answer`]).
    pub answer: answer::InputAnswer,
    /// Of a lock: how it pins each distribution ([`record::Input::pinned`]).
    pub pinned: std::collections::BTreeMap<String, record::Pinned>,
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
        .map(|path| inputs::read_named(path, &limits, &options.lock))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .flatten()
    {
        let refs = input.libraries();
        let per_gpu = collection::per_gpu(&refs);
        let pairs: Vec<(LibraryRef<'_>, bool)> = refs.into_iter().zip(per_gpu).collect();
        // Each library judged on its own, on every core; in the input's order.
        let mut libraries: Vec<Library> = fatkit_fatbin::par::map(
            &pairs,
            || (),
            |_, (l, per_gpu)| Library {
                layer: l.layer.clone(),
                ..summary::library(
                    l.name.clone(),
                    l.package.clone(),
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
            },
        );
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
            (options.policy, options.kernel_table),
            &roles,
        );
        let variants = variants::find(&libraries);
        let answer = answer::of(
            &mut libraries,
            &variants,
            (&input.sources(), options.strict),
            (&input.run_time(), &devices, !input.report.errors.is_empty()),
            &input.unbuilt,
        );
        let status = status_of(
            &input,
            (&audit, &libraries, &answer),
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
            answer,
            pinned: input.pinned,
        });
    }
    Ok(audited)
}

/// One input's status by the one policy, from its answer: invalid input, then a finding (a
/// `--require` gap, a verdict of PARTLY or NO, nothing to check), then an unknown. A kernel
/// that certainly fails is a finding even beside an unknown.
fn status_of(
    input: &inputs::Input,
    (audit, libraries, answer): (&FileAudit, &[Library], &answer::InputAnswer),
    gpus: usize,
    options: &Options,
) -> FileStatus {
    let mut status = if !audit.errors.is_empty() {
        FileStatus::Invalid
    } else if audit.gaps.as_ref().is_some_and(|g| !g.is_empty()) {
        FileStatus::Gaps
    } else {
        FileStatus::Ok
    };
    for (g, whole) in answer.on.iter().enumerate() {
        let certain = whole.blocker.is_some()
            || whole
                .failing_libraries
                .iter()
                .filter_map(|&i| libraries.get(i)?.on.get(g))
                .flat_map(|on| &on.failing)
                .any(|f| f.why.is_some_and(|w| w != coverage::Why::Unknown));
        let found = match whole.verdict {
            _ if certain => FileStatus::Gaps,
            answer::Verdict::Partly | answer::Verdict::No => FileStatus::Gaps,
            answer::Verdict::Unknown => FileStatus::Unknown,
            _ => FileStatus::Ok,
        };
        status = status.max(found);
    }
    // `--require` over no kernels is `FAILS: no kernels found to check`: a finding, as every
    // FAILS is.
    let nothing_to_check = (gpus > 0 || options.required.is_some())
        && !input.report.has_device_code()
        && answer.distributions.is_empty()
        || options.required.is_some() && audit.kernels.is_empty();
    if nothing_to_check {
        status = status.max(FileStatus::Gaps);
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
    /// The package's answer: per distribution and as a whole, per GPU ([`answer`]).
    answer: &'a answer::InputAnswer,
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

/// The GPU x library matrix: every library of every input, on every GPU asked about. A
/// library its package's answer sets aside whole on a GPU (built for other or newer GPUs,
/// beside a core that runs) is "other GPUs" there, as that answer says.
pub fn matrix_cells(audited: &Audited) -> Vec<Vec<summary::Cell>> {
    let libraries: Vec<(&AuditedInput, usize, &Library)> = audited
        .inputs
        .iter()
        .flat_map(|input| {
            input
                .libraries
                .iter()
                .enumerate()
                .map(move |(i, l)| (input, i, l))
        })
        .collect();
    let n_gpus = libraries.first().map_or(0, |(_, _, l)| l.on.len());
    (0..n_gpus)
        .map(|g| {
            libraries
                .iter()
                .map(|(input, i, l)| {
                    let aside = input
                        .answer
                        .on
                        .get(g)
                        .is_some_and(|w| w.aside.libraries.iter().any(|(a, _)| a == i));
                    match (aside, l.on.get(g)) {
                        (true, Some(_)) => summary::Cell::OtherGpus,
                        (_, on) => on.map_or(summary::Cell::Corrupt, summary::Cell::of),
                    }
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

/// How an audit ends: the one mapping of its status to what the command line reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Every check passes: exit 0.
    Pass,
    /// A finding: exit 1.
    Finding,
    /// An unknown verdict and no finding: exit 2.
    Unknown,
    /// Input that could not be read: exit 2.
    Invalid,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Pass => 0,
            Exit::Finding => 1,
            Exit::Unknown | Exit::Invalid => 2,
        }
    }
}

impl Audited {
    /// How the whole audit ends, from its status (decided from the answers, `status_of`).
    pub fn exit(&self) -> Exit {
        match self.status {
            FileStatus::Ok => Exit::Pass,
            FileStatus::Gaps => Exit::Finding,
            FileStatus::Unknown => Exit::Unknown,
            FileStatus::Invalid => Exit::Invalid,
        }
    }

    /// The exit code of the whole audit: 0 every check passes, 1 a finding, 2 an unknown
    /// verdict (and no finding) or input that could not be read.
    pub fn exit_code(&self) -> u8 {
        self.exit().code()
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
                    answer: &input.answer,
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
