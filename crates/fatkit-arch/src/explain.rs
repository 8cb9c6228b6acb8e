//! Why a set of images does or does not run on a device, in words, and what to do about it:
//! the one explanation of a [`Verdict`] that `audit`, `profiles show`, `package` and the
//! runtime all print (docs/ARCH_RULES.md gives the rules behind each sentence).

use serde::Serialize;

use crate::driver::PtxRequirement;
use crate::load::Fate;
use crate::rules::{
    self, Device, Doubt, DriverCheck, Image, LoadError, Mismatch, Policy, Reason, Selection,
    Status, Verdict,
};
use crate::toolkit::{self, PtxIsa};
use crate::{Cc, ImageKind, Suffix, Target};

mod cause;
pub use cause::{Cause, Doubted};

/// The image the driver runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Chosen {
    pub target: Target,
    /// A cubin built for exactly the device's compute capability.
    pub exact: bool,
    /// PTX whose acceptance by the driver could not be established from the tables: its ISA.
    pub unverified_ptx: Option<PtxIsa>,
    /// For PTX: what the tables say of the driver and its ISA.
    #[serde(skip)]
    pub ptx_driver: Option<DriverCheck>,
}

/// An image the driver passes over.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Rejected {
    pub target: Target,
    /// One line: why it does not run.
    pub reason: String,
    /// Whether the reason is worth printing where the images' list already implies it: not
    /// for a cubin of another major or a newer minor, which the list of images says itself.
    #[serde(skip)]
    pub notable: bool,
}

/// A verdict explained.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Explanation {
    pub status: Status,
    pub chosen: Option<Chosen>,
    #[serde(skip)]
    pub error: Option<LoadError>,
    /// Every image passed over, in the order given.
    pub rejected: Vec<Rejected>,
    /// Why an `unknown` status is not certain.
    pub uncertain: Option<String>,
    /// What the PTX that fits the architecture needs of the driver, when the driver refused it.
    #[serde(skip)]
    pub driver_needed: Option<PtxRequirement>,
    /// What to change so that the device runs something; `None` when it does.
    pub fix: Option<String>,
}

/// What the driver does with `images` on `device`, explained.
pub fn explain(images: &[Image], device: &Device, policy: Policy) -> Explanation {
    of_verdict(images, &rules::select(images, device, policy), device)
}

/// A verdict already made for `images` on `device`, explained.
pub fn of_verdict(images: &[Image], verdict: &Verdict, device: &Device) -> Explanation {
    let target = |idx: usize| images.get(idx).map(|i| i.target);
    let chosen = chosen(images, verdict);
    let uncertain = Cause::doubted(images, verdict, device).map(|c| c.to_string());
    let rejected = verdict
        .rejected
        .iter()
        .filter_map(|r| {
            let t = target(r.image)?;
            Some(Rejected {
                target: t,
                reason: rejection(t, device, r.reason),
                notable: cause::notable(r.reason),
            })
        })
        .collect();
    let driver_needed = verdict.rejected.iter().find_map(|r| match r.reason {
        Reason::DriverTooOld(need) => Some(need),
        Reason::Arch(_) => None,
    });
    let cc = device.cc;
    let fix = match verdict.selection {
        _ if !verdict.doubts.is_empty() => Some(doubt_fix(&verdict.doubts, cc)),
        Err(LoadError::NoDevice) => Some(match rules::driver_predates(device) {
            Some(first) => format!(
                "install a driver of CUDA {first} or later{}: older ones do not know compute capability {cc}",
                toolkit::toolkit(first)
                    .and_then(|t| t.min_driver)
                    .map_or_else(String::new, |d| format!(" (>= {d})"))
            ),
            None => "install a newer NVIDIA driver".to_owned(),
        }),
        Err(LoadError::NoBinaryForGpu) => Some(fix_for_arch(cc)),
        Err(LoadError::UnsupportedPtxVersion) => Some(
            match driver_needed.and_then(|n| n.min_driver.map(|d| (d, n.toolkit))) {
                Some((min, Some(v))) => format!(
                    "install driver {min} or newer (CUDA {v}), add a cubin for sm_{} to the profile, or build the PTX with an older toolkit",
                    cc.digits()
                ),
                _ => format!(
                    "add a cubin for sm_{} to the profile, or build the PTX with an older toolkit",
                    cc.digits()
                ),
            },
        ),
        Ok(_) if uncertain.is_some() => Some(format!(
            "add a cubin for sm_{} to the profile, or check the driver on the target machine",
            cc.digits()
        )),
        Ok(_) => None,
    };
    Explanation {
        status: verdict.status(),
        chosen,
        error: verdict.selection.err(),
        rejected,
        uncertain,
        driver_needed,
        fix,
    }
}

/// One line saying why a verdict is in doubt.
pub fn doubt(images: &[Image], d: Doubt, device: &Device) -> String {
    Doubted::of(images, d, device).to_string()
}

/// What to do about a verdict in doubt.
fn doubt_fix(doubts: &[Doubt], cc: Cc) -> String {
    match doubts.first() {
        Some(Doubt::HeaderDisagrees { .. } | Doubt::CubinHeaderDisagrees { .. }) => format!(
            "rebuild the fatbin with a tool that writes each entry's header from its image (nvcc, fatkit), or check on a CC {cc} GPU"
        ),
        Some(Doubt::CubinToolkitUnknown { .. }) => "pass the driver with --driver".to_owned(),
        _ => format!(
            "update the NVIDIA driver to the cubin's CUDA major, or use a build whose sm_{} cubin comes from an older CUDA",
            cc.digits()
        ),
    }
}

/// One line for a kernel the loaded image lacks: `the driver loads the sm_86 cubin on CC
/// 8.6, which does not hold it (sm_80 does): CUDA_ERROR_NOT_FOUND (500)`.
/// For a kernel compiled out of the loaded image: `compiled out for sm_75: returns at once
/// (the driver loads the sm_75 cubin on CC 7.5, whose code of it does no work before EXIT)`.
pub fn fate(images: &[Image], fate: &Fate, cc: Cc) -> Option<String> {
    Cause::of_fate(images, fate, cc).map(|c| c.to_string())
}

/// The fix for a kernel the loaded image lacks.
pub fn fate_fix(images: &[Image], fate: &Fate, kernel: &str) -> Option<String> {
    if let Fate::Stub { image, .. } = fate {
        let t = images.get(*image)?.target;
        return Some(format!(
            "use a build whose {t} image holds {kernel}'s body; if you build it, build the body for {t} (or guard the whole kernel so that it is absent there, and declare it)"
        ));
    }
    let Fate::Absent { loaded, .. } = fate else {
        return None;
    };
    let t = images.get(*loaded)?.target;
    Some(format!(
        "use a build whose {t} image holds {kernel}; if you build it, build {kernel} for {t} too, or move it to a module of its own"
    ))
}

/// The image the driver runs, of a verdict already made for `images`: the part of
/// [`of_verdict`] that words nothing (an audit asks it of every kernel on every GPU).
pub fn chosen(images: &[Image], verdict: &Verdict) -> Option<Chosen> {
    verdict.selection.ok().and_then(|s| {
        let image = images.get(s.image())?;
        Some(Chosen {
            target: image.target,
            exact: matches!(s, Selection::Cubin { exact: true, .. }),
            unverified_ptx: match s {
                Selection::Ptx {
                    driver: DriverCheck::Unknown(need),
                    ..
                } => Some(need.isa),
                Selection::Ptx {
                    driver: DriverCheck::IsaUnknown,
                    ..
                } => image.ptx_isa,
                _ => None,
            },
            ptx_driver: match s {
                Selection::Ptx { driver, .. } => Some(driver),
                Selection::Cubin { .. } => None,
            },
        })
    })
}

/// One line saying why `target` does not run on `cc`.
pub fn mismatch(target: Target, cc: Cc, mismatch: Mismatch) -> String {
    let t = target;
    match mismatch {
        Mismatch::OtherMajor => format!(
            "{t} cubin runs only on CC {}.x at or above {}; a cubin never runs on another major",
            t.cc.major, t.cc
        ),
        Mismatch::NewerMinor => format!("{t} cubin needs CC {} or a later {}.x; device is {cc}", t.cc, t.cc.major),
        Mismatch::ArchSpecific => format!("{t} is arch-specific: it runs only on CC {}", t.cc),
        Mismatch::StrictIgpu => format!(
            "{t} cubin does not cover the integrated GPU {cc} under the strict iGPU policy; it needs its own sm_{} cubin",
            cc.digits()
        ),
        Mismatch::PtxNewer => format!("{t} PTX is JIT-compiled only for CC {} and later", t.cc),
        Mismatch::PtxFamily => format!(
            "{t} PTX is family-specific: it runs only on CC {}.x at or above {}",
            t.cc.major, t.cc
        ),
    }
}

/// One line saying why an image was passed over: its architecture, or its PTX ISA against
/// the device's driver.
pub(crate) fn rejection(target: Target, device: &Device, reason: Reason) -> String {
    match reason {
        Reason::Arch(m) => mismatch(target, device.cc, m),
        Reason::DriverTooOld(need) => match device.driver {
            Some(driver) => format!("{target} PTX: {need}; driver is {}", driver.describe()),
            None => format!("{target} PTX: {need}"),
        },
    }
}

/// What to add so that a GPU of `cc` gets an image.
pub(crate) fn fix_for_arch(cc: Cc) -> String {
    let cubin = Target::cubin(cc.major, cc.minor);
    if toolkit::is_known(cubin) {
        format!(
            "add {cubin} to the profile's targets (or PTX for {} or lower)",
            cubin.with_kind(ImageKind::Ptx)
        )
    } else {
        let below = toolkit::known_targets()
            .ptx()
            .rfind(|t| t.suffix == Suffix::None && t.cc <= cc);
        match below {
            Some(p) => format!(
                "no toolkit builds a cubin for {cc}; add PTX for {p} so the driver can JIT it"
            ),
            None => format!("no toolkit in the tables builds code for {cc}"),
        }
    }
}
