//! Kernel-level coverage: which images each kernel has, and what runs where.

use std::collections::BTreeMap;

use fatkit_arch::rules::{self, Device, DriverCheck, Image, Policy, Selection, Status, Verdict};
use fatkit_arch::{Cc, ImageKind, Target, TargetSet};
use serde::Serialize;

use crate::inspect::FileReport;

/// The images of one kernel across a whole file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KernelImages {
    pub name: String,
    pub images: Vec<Image>,
}

impl KernelImages {
    pub fn targets(&self) -> TargetSet {
        self.images.iter().map(|i| i.target).collect()
    }

    /// What the driver does with this kernel's images on `device`.
    pub fn select(&self, device: &Device, policy: Policy) -> Verdict {
        rules::select(&self.images, device, policy)
    }

    /// How a GPU of compute capability `cc` is served, judged by architecture alone.
    pub fn cell(&self, cc: Cc, policy: Policy) -> Cell {
        let verdict = self.select(&Device::new(cc, None), policy);
        match verdict.selection {
            Ok(Selection::Cubin { image, .. }) => self
                .images
                .get(image)
                .map_or(Cell::Missing, |i| Cell::Cubin(i.target)),
            Ok(Selection::Ptx { image, .. }) => self
                .images
                .get(image)
                .map_or(Cell::Missing, |i| Cell::Ptx(i.target)),
            Err(_) => Cell::Missing,
        }
    }
}

impl KernelImages {
    /// How a profile target is served: a cubin target `sm_XY` as a GPU of CC X.Y is (a cubin,
    /// or PTX the driver JIT-compiles); a PTX target `compute_XY` by PTX that JIT-compiles for
    /// X.Y, or not at all.
    pub fn target_cell(&self, target: Target, policy: Policy) -> Cell {
        match target.kind {
            ImageKind::Cubin => self.cell(target.cc, policy),
            ImageKind::Ptx => self
                .images
                .iter()
                .find(|i| i.target.is_ptx() && rules::ptx_arch_fit(i.target, target.cc).is_ok())
                .map_or(Cell::Missing, |i| Cell::Ptx(i.target)),
        }
    }
}

/// One cell of the coverage matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "by", content = "image")]
pub enum Cell {
    Cubin(Target),
    /// Only PTX serves it (JIT at load time).
    Ptx(Target),
    Missing,
}

/// Every kernel of a report with its images, sorted by name. Images of unreadable entries and
/// entries without a target are left out.
pub fn kernels(report: &FileReport) -> Vec<KernelImages> {
    let mut by_name: BTreeMap<&str, Vec<Image>> = BTreeMap::new();
    for (_, _, entry) in report.all_images() {
        let Some(target) = entry.target else { continue };
        let image = match target.kind {
            ImageKind::Cubin => Image::cubin(target),
            ImageKind::Ptx => Image::ptx(target, entry.ptx_isa),
        };
        for kernel in &entry.kernels {
            let images = by_name.entry(kernel.as_str()).or_default();
            if !images.contains(&image) {
                images.push(image);
            }
        }
    }
    by_name
        .into_iter()
        .map(|(name, mut images)| {
            images.sort_by_key(|i| (i.target, i.ptx_isa));
            KernelImages {
                name: name.to_owned(),
                images,
            }
        })
        .collect()
}

/// A (kernel, target) pair with no runnable image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Gap {
    pub kernel: String,
    pub target: Target,
    pub reason: String,
}

/// Checks every kernel against every required target: a cubin target `sm_XY` needs an image
/// that runs on CC X.Y (a cubin, or PTX the driver can JIT); a PTX target `compute_XY` needs
/// PTX that JIT-compiles for X.Y.
pub fn require(kernels: &[KernelImages], required: &TargetSet, policy: Policy) -> Vec<Gap> {
    let mut gaps = Vec::new();
    for k in kernels {
        for target in required.iter() {
            let reason = match (target.kind, k.target_cell(target, policy)) {
                (_, Cell::Cubin(_) | Cell::Ptx(_)) => None,
                (ImageKind::Cubin, Cell::Missing) => {
                    Some(format!("no cubin or PTX that runs on CC {}", target.cc))
                }
                (ImageKind::Ptx, Cell::Missing) => {
                    Some(format!("no PTX that JIT-compiles for CC {}", target.cc))
                }
            };
            if let Some(reason) = reason {
                gaps.push(Gap {
                    kernel: k.name.clone(),
                    target,
                    reason,
                });
            }
        }
    }
    gaps
}

/// One kernel's fate on one GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KernelVerdict {
    pub kernel: String,
    pub status: Status,
    pub image: Option<Target>,
    /// For a failure or an unknown: why, naming the images.
    pub reason: Option<String>,
}

/// What every kernel does on `device`.
pub fn on_device(kernels: &[KernelImages], device: &Device, policy: Policy) -> Vec<KernelVerdict> {
    kernels
        .iter()
        .map(|k| {
            let verdict = k.select(device, policy);
            let image = verdict
                .selection
                .ok()
                .and_then(|s| k.images.get(s.image()))
                .map(|i| i.target);
            let reason = match verdict.selection {
                Ok(Selection::Ptx {
                    driver: DriverCheck::Unknown(need),
                    ..
                }) => Some(format!(
                    "only PTX runs ({}), and {need}",
                    image.map_or_else(String::new, |t| t.to_string())
                )),
                Ok(Selection::Ptx {
                    driver: DriverCheck::IsaUnknown,
                    ..
                }) => Some("only PTX runs, and its ISA is unknown".to_owned()),
                Ok(_) => None,
                Err(e) => Some(explain_failure(k, &verdict, device, e)),
            };
            KernelVerdict {
                kernel: k.name.clone(),
                status: verdict.status(),
                image,
                reason,
            }
        })
        .collect()
}

fn explain_failure(
    k: &KernelImages,
    verdict: &Verdict,
    device: &Device,
    e: rules::LoadError,
) -> String {
    if k.images.is_empty() {
        return format!(
            "{} ({}): the kernel has no readable image",
            e.name(),
            e.code()
        );
    }
    let targets: Vec<String> = k.images.iter().map(|i| i.target.to_string()).collect();
    let mut notes = Vec::new();
    for r in &verdict.rejected {
        let Some(target) = k.images.get(r.image).map(|i| i.target) else {
            continue;
        };
        match r.reason {
            rules::Reason::Arch(
                m @ (rules::Mismatch::ArchSpecific
                | rules::Mismatch::PtxNewer
                | rules::Mismatch::PtxFamily
                | rules::Mismatch::StrictIgpu),
            ) => {
                notes.push(rules::explain_mismatch(target, device.cc, m));
            }
            rules::Reason::DriverTooOld(_) => {
                notes.push(rules::explain_rejection(target, device, r.reason));
            }
            rules::Reason::Arch(_) => {}
        }
    }
    let notes = if notes.is_empty() {
        String::new()
    } else {
        format!("; {}", notes.join("; "))
    };
    format!(
        "{} ({}): has {}, none runs on CC {}{notes}",
        e.name(),
        e.code(),
        targets.join(" "),
        device.cc
    )
}
