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
    /// The exit status, or what went wrong in a few words.
    pub status: String,
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
    ) -> impl Fn(Option<String>, String, String) -> Box<Failure> {
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
            })
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = self
            .location
            .clone()
            .unwrap_or_else(|| self.source.display().to_string());
        match &self.toolchain {
            Some(tc) => writeln!(f, "{at}: {}: {tc} failed ({})", self.target, self.status)?,
            None => writeln!(f, "{at}: {}: {}", self.target, self.status)?,
        }
        for line in self.message.lines() {
            writeln!(f, "  | {line}")?;
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
