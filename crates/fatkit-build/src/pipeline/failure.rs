//! What a failed compile, or a module fatkit refused to write, is: a record every step of the
//! pipeline makes (a compiler call, the bundle step's checks) and the report carries.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fatkit_arch::Target;
use serde::Serialize;

/// What failed: a compiler, or one of fatkit's checks of what the compilers produced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The compiler exited non-zero, could not start, or wrote nothing fatkit can read.
    Compile,
    /// Some images of the module lack a kernel others have.
    KernelListsDisagree,
    /// A per-kernel override excludes a kernel the image still holds.
    OverrideIgnored,
    /// Images of a kernel disagree on its parameters (count, offset or size), or one cannot
    /// be read.
    ParamsDisagree,
    /// A kernel the image the driver loads lacks on GPUs its declaration says it runs on, or
    /// an image without kernels.
    DriverWouldNotFind,
    /// The host compile of a library's source (`nvcc -c`) failed, its device code compiling.
    HostCompile,
    /// A source or header changed while the build read it, or is not a regular file: what
    /// was compiled would not be what was hashed, so nothing was kept (`pipeline::snapshot`).
    InputChanged,
}

/// A compile that failed, or a module fatkit refused to write.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    pub source: PathBuf,
    pub target: Target,
    pub kind: FailureKind,
    /// The toolchain that failed (`nvcc 13.2`, `nvrtc 12.9`); `None` for fatkit's own checks.
    pub toolchain: Option<String>,
    /// `file:line` of the compiler's first error, when it gives one.
    pub location: Option<String>,
    /// The compiler's output, or what fatkit found.
    pub message: String,
    /// The command line; empty for fatkit's own checks.
    pub command: String,
    /// The exit status, or what went wrong.
    pub status: Status,
    /// The way out, where fatkit's own check knows one (also the message's last line): what a
    /// summary of several failures says of this one.
    #[serde(skip)]
    pub fix: Option<String>,
}

/// What went wrong, as data: a compiler's exit, or which check refused. Its words (the
/// `Display`, also what the report's JSON holds) are made once, here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// The compiler, or the directory it runs in, could not be started or made.
    CouldNotStart,
    /// An argument the compiler's shell would read: fatkit did not run it.
    Refused,
    /// Killed at the time limit of one compile.
    TimedOut,
    /// The compiler exited with this status.
    Exited(std::process::ExitStatus),
    /// The compiler exited 0 without the output fatkit asked for.
    NoOutput,
    /// The NVRTC library could not be opened.
    NvrtcNotLoaded,
    /// An NVRTC call other than the compile failed.
    NvrtcCallFailed,
    /// NVRTC's compile failed with this status, in the library's own words
    /// (`NVRTC_ERROR_COMPILATION`).
    Nvrtc(String),
    /// NVRTC asked for more headers than the include scan found.
    TooManyHeaders,
    /// A source or header changed while it was compiled.
    InputChanged,
    /// A state the build should never be in.
    Internal,
    /// Images of a kernel disagree on its parameters.
    ParamsDisagree,
    /// The image the driver loads lacks a kernel, or holds none.
    DriverWouldNotFind,
    /// A kernel's body is compiled out in an image.
    BodyCompiledOut,
    /// A kernel's images disagree with its declaration.
    DisagreesWithDeclaration,
    /// Some images lack a kernel others hold.
    KernelListsDisagree,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Status::CouldNotStart => "could not start",
            Status::Refused => "refused",
            Status::TimedOut => "timed out",
            Status::Exited(status) => return write!(f, "{status}"),
            Status::NoOutput => "exited 0 without its output",
            Status::NvrtcNotLoaded => "could not load NVRTC",
            Status::NvrtcCallFailed => "NVRTC call failed",
            Status::Nvrtc(status) => status,
            Status::TooManyHeaders => "too many headers",
            Status::InputChanged => "input changed",
            Status::Internal => "internal error",
            Status::ParamsDisagree => "kernel parameters disagree",
            Status::DriverWouldNotFind => "the driver would not find a kernel",
            Status::BodyCompiledOut => "a kernel's body is compiled out",
            Status::DisagreesWithDeclaration => "a kernel's images disagree with its declaration",
            Status::KernelListsDisagree => "kernel lists disagree",
        })
    }
}

impl Serialize for Status {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl Failure {
    /// The failures of one compiler call: the source, target, kind, toolchain and command line
    /// are the call's; each way it fails gives where the first error is (if the compiler says),
    /// its output or what went wrong, and the status.
    pub(crate) fn of_call(
        source: &Path,
        target: Target,
        kind: FailureKind,
        toolchain: &str,
        command: String,
    ) -> impl Fn(Option<String>, String, Status) -> Box<Failure> {
        let (source, toolchain) = (source.to_owned(), toolchain.to_owned());
        move |location, message, status| {
            Box::new(Failure {
                source: source.clone(),
                target,
                kind: kind.clone(),
                toolchain: Some(toolchain.clone()),
                location,
                message,
                command: command.clone(),
                status,
                fix: None,
            })
        }
    }
}

impl Failure {
    /// The one line that says what failed: a compiler's first error in its own words (never an
    /// echoed command line or a note: `pipeline::diagnostic`), or the first line of
    /// what fatkit's check found.
    pub fn headline(&self) -> String {
        match &self.toolchain {
            Some(_) => super::diagnostic::first(&self.message).to_string(),
            None => self
                .message
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned(),
        }
    }
}

/// A failure in words: the compiler's output (which quotes the crate's sources) and the
/// location are escaped (`fatkit_fatbin::printable`) and each line of output is marked `  | `,
/// so no source line can write a line of fatkit's or move the cursor.
impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = self
            .location
            .clone()
            .unwrap_or_else(|| self.source.display().to_string());
        let at = fatkit_fatbin::printable(&at);
        let headline = self.headline();
        let headline = fatkit_fatbin::printable(&headline);
        match &self.toolchain {
            Some(tc) => writeln!(
                f,
                "{at}: {}: {tc} failed ({}): {headline}",
                self.target, self.status
            )?,
            None => writeln!(f, "{at}: {}: {}", self.target, self.status)?,
        }
        for line in self.message.lines() {
            writeln!(f, "  | {}", fatkit_fatbin::printable(line))?;
        }
        if self.command.is_empty() {
            Ok(())
        } else {
            write!(f, "  command: {}", self.command)
        }
    }
}

/// A job's image and the headers it was built from (outside the toolchain's): those its
/// compile read, or, from the cache, those its last compile read.
#[derive(Clone, Debug)]
pub(crate) struct Output {
    pub image: Vec<u8>,
    pub deps: Vec<PathBuf>,
}

/// A compile's outcome: the output and how long it took, or why it failed.
pub(crate) type CompileResult = Result<(Output, Duration), Box<Failure>>;

/// A compiler call's outcome: the images of its jobs, in order, the headers it read, and how
/// long it took; or why it failed.
pub(crate) type CallResult = Result<(Vec<Vec<u8>>, Vec<PathBuf>, Duration), Box<Failure>>;

/// A source that compiled for some of its targets and failed for the others: the sign of
/// code that needs a newer architecture throughout, which a declaration of the source's
/// targets ([`fatkit_package::kernel_sets::FileRule`]) builds for those alone.
#[derive(Clone, Debug, Serialize)]
pub struct SomeTargets {
    pub source: PathBuf,
    /// The source as a declaration would name it: its file name.
    pub name: String,
    pub compiled: fatkit_arch::TargetSet,
    pub failed: fatkit_arch::TargetSet,
    /// The declaration to offer: `sm_80+`, or the list compiled.
    pub suggestion: String,
}

impl SomeTargets {
    /// Each source of `outcomes` (a job's source, target and whether its compile failed)
    /// that compiled for some targets and failed for others; `all`: the profile's targets.
    pub(crate) fn of<'a>(
        outcomes: impl IntoIterator<Item = (&'a Path, Target, bool)>,
        all: &fatkit_arch::TargetSet,
    ) -> Vec<SomeTargets> {
        type Sets = (fatkit_arch::TargetSet, fatkit_arch::TargetSet);
        let mut by_source: std::collections::BTreeMap<&Path, Sets> = Default::default();
        for (source, target, failed) in outcomes {
            let (compiled, failures) = by_source.entry(source).or_default();
            match failed {
                true => failures.insert(target),
                false => compiled.insert(target),
            };
        }
        by_source
            .into_iter()
            .filter(|(_, (compiled, failed))| !compiled.is_empty() && !failed.is_empty())
            .map(|(source, (compiled, failed))| SomeTargets {
                source: source.to_owned(),
                name: source
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                suggestion: fatkit_package::kernel_sets::suggest(&compiled, all),
                compiled,
                failed,
            })
            .collect()
    }
}

/// The two ways to declare source `name` built for `spec` (`sm_80+`) alone, as every finding
/// offers them: the package's metadata and the build script's.
pub(crate) fn declare_source(name: &str, spec: &str) -> String {
    let name = fatkit_fatbin::printable(name);
    format!(
        "in Cargo.toml `[package.metadata.fatkit.files] \"{name}\" = {{ targets = \"{spec}\" }}`, in build.rs `.file_targets(\"{name}\", \"{spec}\")`"
    )
}

impl std::fmt::Display for SomeTargets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} compiled for {} and failed for {}; if it is made for those targets only (code that needs a newer architecture throughout, such as mma.sync on bf16, cp.async or ldmatrix), declare it: {}; its kernels are then declared for those targets, and GPUs below them are not gaps",
            fatkit_fatbin::printable(&self.source.display().to_string()),
            self.compiled,
            self.failed,
            declare_source(&self.name, &self.suggestion),
        )
    }
}
