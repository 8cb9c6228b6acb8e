//! Why a (kernel, target) pair is a gap, as data ([`GapCause`]): `--require` and `package`'s
//! exact gate group and report by it; its words are its `Display`, and what the JSON holds.

use fatkit_arch::{Cc, ImageKind, Target};
use serde::Serialize;

use super::Cell;

/// Why a (kernel, target) pair is a gap, as data: what its words say; the words are the
/// `Display`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum GapCause {
    /// The rules cannot say what the driver loads on the target's CC.
    Unknown { cc: Cc },
    /// The image the target's CC loads (`loaded`) holds only a stub of the kernel.
    CompiledOut { loaded: Target, cc: Cc },
    /// `--require`: nothing that runs there (a cubin target), or no PTX that JIT-compiles
    /// for it (a PTX target).
    NothingRuns { target: Target },
    /// Exact: the kernel has its own image of `target`, but the driver loads another there
    /// (`cell`).
    NotTheOneLoaded { target: Target, cell: Cell },
    /// Exact: no `target` cubin; its CC would run the `other` cubin.
    OtherCubin { target: Target, other: Target },
    /// Exact: no `target` cubin; its CC would JIT-compile the `ptx` PTX at load.
    PtxJit { target: Target, ptx: Target },
    /// Exact: no `target` PTX, only the `other` PTX.
    OtherPtx { target: Target, other: Target },
    /// Exact: no image of the kernel's module that holds it runs on `cc`.
    NoneHolds { cc: Cc },
}

impl std::fmt::Display for GapCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            GapCause::Unknown { cc } => write!(
                f,
                "unknown on CC {cc}: the rules cannot say what the driver loads"
            ),
            GapCause::CompiledOut { loaded, cc } => write!(
                f,
                "compiled out for {loaded}: the image CC {cc} loads holds only a stub of it"
            ),
            GapCause::NothingRuns { target } => match target.kind {
                ImageKind::Cubin => write!(f, "no cubin or PTX that runs on CC {}", target.cc),
                ImageKind::Ptx => write!(f, "no PTX that JIT-compiles for CC {}", target.cc),
            },
            GapCause::NotTheOneLoaded { target, cell } => write!(
                f,
                "its {target} image is not the one the driver loads on CC {} ({})",
                target.cc,
                match cell {
                    Cell::Cubin(t) | Cell::Ptx(t) => t.to_string(),
                    Cell::Unknown => "unknown".to_owned(),
                    Cell::CompiledOut(t) => format!("{t}, compiled out"),
                    Cell::Missing => "none runs".to_owned(),
                }
            ),
            GapCause::OtherCubin { target, other } => write!(
                f,
                "no {target} cubin (CC {} would run the {other} cubin)",
                target.cc
            ),
            GapCause::PtxJit { target, ptx } => write!(
                f,
                "no {target} cubin (CC {} would JIT-compile {ptx} PTX at load)",
                target.cc
            ),
            GapCause::OtherPtx { target, other } => {
                write!(f, "no {target} PTX (only {other} PTX)")
            }
            GapCause::NoneHolds { cc } => {
                write!(f, "no image of its module that holds it runs on CC {cc}")
            }
        }
    }
}

impl Serialize for GapCause {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
