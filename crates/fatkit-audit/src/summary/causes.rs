//! Why a library's kernels do not run on a GPU, and what needs which driver, as data: the
//! keys `audit` groups by; their words are their `Display`, and what the JSON holds.

use fatkit_arch::driver::DriverVersion;
use fatkit_arch::explain::Cause;
use fatkit_arch::toolkit::{CudaVersion, PtxIsa};
use serde::Serialize;

use super::DriverNeed;
use fatkit_fatbin::runtime::LinkedRuntime;

/// What needs a driver, as data; its words (`PTX ISA 8.5`, `cubins from CUDA 12.6`, `the
/// CUDA 13.2 runtime, linked statically (fatkit's record)`) are the `Display`, and what the
/// JSON holds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Needs {
    /// PTX of this ISA (JIT-compiled by the driver).
    Ptx(PtxIsa),
    /// Cubins built by this CUDA release.
    Cubins(CudaVersion),
    /// A CUDA runtime the file links.
    Runtime(LinkedRuntime),
    /// Entries compressed so (ZSTD: a CUDA 12.4-level driver, docs/ARCH_RULES.md section 3,
    /// Medium).
    Compressed(fatkit_arch::Compression),
    /// A distribution named for a CUDA major (`nvidia-cudnn-cu13`): built against that
    /// major's runtime (docs/ARCH_RULES.md section 11).
    Named(String),
    /// The GPU itself: drivers of CUDA releases before the first that knows its compute
    /// capability see no device (`fatkit_arch::toolkit::first_cuda`, docs/ARCH_RULES.md
    /// section 3).
    Gpu(fatkit_arch::Cc),
}

impl std::fmt::Display for Needs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Needs::Ptx(isa) => write!(f, "PTX ISA {isa}"),
            Needs::Cubins(cuda) => write!(f, "cubins from CUDA {cuda}"),
            Needs::Runtime(r) => write!(f, "{} ({})", r.describe(), r.from),
            Needs::Compressed(c) => write!(f, "{}-compressed entries", c.name().to_uppercase()),
            Needs::Named(p) => write!(f, "{p}, named for its CUDA major"),
            Needs::Gpu(cc) => write!(f, "a GPU of CC {cc}, which older drivers do not know"),
        }
    }
}

impl Serialize for Needs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A driver older than what a library needs, as data; its words are the `Display`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DriverProblem {
    /// A CUDA runtime the library links refuses the driver before any kernel loads
    /// (`cudaErrorInsufficientDriver`, 35).
    Runtime {
        driver: DriverVersion,
        need: DriverNeed,
    },
    /// The cubins the driver would load come from a newer CUDA major than the driver's.
    Cubins {
        driver: DriverVersion,
        need: DriverNeed,
    },
    /// The images the driver would load are compressed in a way the driver may not read.
    Compressed {
        driver: DriverVersion,
        need: DriverNeed,
    },
}

impl DriverProblem {
    /// What the driver is older than.
    pub fn need(&self) -> &DriverNeed {
        match self {
            DriverProblem::Runtime { need, .. }
            | DriverProblem::Cubins { need, .. }
            | DriverProblem::Compressed { need, .. } => need,
        }
    }
}

impl std::fmt::Display for DriverProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DriverProblem::Runtime { driver, need } => write!(
                f,
                "driver {} is older than {} needs ({}): its first runtime call fails with cudaErrorInsufficientDriver (35), before any kernel loads",
                driver.describe(),
                need.what,
                need.release_or_cuda()
            ),
            DriverProblem::Cubins { driver, need } => write!(
                f,
                "driver {} is older than the {} need ({}): the driver may refuse them; update the driver",
                driver.describe(),
                need.what,
                need.release_or_cuda()
            ),
            DriverProblem::Compressed { driver, need } => write!(
                f,
                "driver {} is older than {} need ({}, docs/ARCH_RULES.md section 3, Medium): it may not load them; update the driver, or build without compression",
                driver.describe(),
                need.what,
                need.release_or_cuda()
            ),
        }
    }
}

/// Why kernels do not run on a GPU, as data: the kernel's cause (none: the rules gave no
/// words, `unknown`), or the driver refused by a runtime the library links.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Failing {
    Kernel(Option<Cause>),
    Driver(DriverProblem),
}

impl std::fmt::Display for Failing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failing::Kernel(Some(cause)) => write!(f, "{cause}"),
            Failing::Kernel(None) => f.write_str("unknown"),
            Failing::Driver(problem) => write!(f, "{problem}"),
        }
    }
}

impl Serialize for Failing {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
