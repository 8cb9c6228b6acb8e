//! Why a set of images does or does not run on a device, in words, and what to do about it:
//! the one explanation of a [`Verdict`] that `audit`, `profiles show`, `package` and the
//! runtime all print (docs/ARCH_RULES.md gives the rules behind each sentence).

use serde::Serialize;

use crate::driver::PtxRequirement;
use crate::rules::{
    self, Device, DriverCheck, Image, LoadError, Mismatch, Policy, Reason, Selection, Status,
    Verdict,
};
use crate::toolkit::{self, PtxIsa};
use crate::{Cc, ImageKind, Suffix, Target};

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
    let chosen = verdict.selection.ok().and_then(|s| {
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
    });
    let uncertain = match verdict.selection {
        Ok(Selection::Ptx {
            driver: DriverCheck::Unknown(need),
            ..
        }) => Some(need.to_string()),
        Ok(Selection::Ptx {
            driver: DriverCheck::IsaUnknown,
            ..
        }) => Some("the PTX ISA is not known for the assumed toolkit; pass --cuda".to_owned()),
        _ => None,
    };
    let rejected = verdict
        .rejected
        .iter()
        .filter_map(|r| {
            let t = target(r.image)?;
            Some(Rejected {
                target: t,
                reason: rejection(t, device, r.reason),
                notable: !matches!(
                    r.reason,
                    Reason::Arch(Mismatch::OtherMajor | Mismatch::NewerMinor)
                ),
            })
        })
        .collect();
    let driver_needed = verdict.rejected.iter().find_map(|r| match r.reason {
        Reason::DriverTooOld(need) => Some(need),
        Reason::Arch(_) => None,
    });
    let cc = device.cc;
    let fix = match verdict.selection {
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

impl Explanation {
    /// One line for a kernel that does not run: `no kernel image is available for execution on
    /// the device (209): has sm_80 sm_90, none runs on CC 7.0; <notable reasons>`.
    pub fn summary(&self, images: &[Image], cc: Cc) -> Option<String> {
        let e = self.error?;
        if images.is_empty() {
            return Some(format!(
                "{} ({}): the kernel has no readable image",
                e.name(),
                e.code()
            ));
        }
        let targets: Vec<String> = images.iter().map(|i| i.target.to_string()).collect();
        let notes: Vec<&str> = self
            .rejected
            .iter()
            .filter(|r| r.notable)
            .map(|r| r.reason.as_str())
            .collect();
        let notes = if notes.is_empty() {
            String::new()
        } else {
            format!("; {}", notes.join("; "))
        };
        Some(format!(
            "{} ({}): has {}, none runs on CC {cc}{notes}",
            e.name(),
            e.code(),
            targets.join(" ")
        ))
    }
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
pub fn rejection(target: Target, device: &Device, reason: Reason) -> String {
    match reason {
        Reason::Arch(m) => mismatch(target, device.cc, m),
        Reason::DriverTooOld(need) => match device.driver {
            Some(driver) => format!("{target} PTX: {need}; driver is {}", driver.describe()),
            None => format!("{target} PTX: {need}"),
        },
    }
}

/// What to add so that a GPU of `cc` gets an image.
pub fn fix_for_arch(cc: Cc) -> String {
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
