//! The last release of a distribution built for GPUs its newer releases dropped, where that is
//! known (docs/ARCH_RULES.md section 11, each row with its source): what a fix names for a GPU
//! older than a release's build. Where no row knows, the fix says to look for an earlier
//! release, naming none.

use fatkit_arch::Cc;

use crate::fix::Who;

/// A distribution whose releases after `last` are built for CC `from` and later.
struct Dropped {
    /// The distribution's name as its wheels spell it (`nvidia_cudnn_cu12`), compared with
    /// `-` and `_` alike.
    name: &'static str,
    /// The oldest compute capability of the releases after `last`.
    from: Cc,
    /// What to install: a requirement pip takes.
    last: &'static str,
}

/// Measured with `fatkit audit` on the wheels from PyPI (`cargo xtask bench environments`):
/// nvidia-cudnn-cu12 9.10.2.21 holds sm_50 and sm_61 cubins in its core engine library,
/// 9.11.0.98 starts at sm_75.
const DROPPED: &[Dropped] = &[Dropped {
    name: "nvidia_cudnn_cu12",
    from: Cc::new(7, 5),
    last: "nvidia-cudnn-cu12<=9.10",
}];

/// The requirement naming the last release of `who` built for CC `cc`, where known.
pub(super) fn last_for(who: &Who, cc: Cc) -> Option<String> {
    let Who::Package(name) = who else { return None };
    let norm = |s: &str| s.replace('-', "_").to_ascii_lowercase();
    DROPPED
        .iter()
        .find(|d| norm(d.name) == norm(name) && cc < d.from)
        .map(|d| d.last.to_owned())
}
