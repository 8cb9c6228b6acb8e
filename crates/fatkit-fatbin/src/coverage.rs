//! Kernel-level coverage: which images each kernel has, and what runs where.

use std::collections::BTreeMap;

use fatkit_arch::driver::MinDriver;
use fatkit_arch::explain;
use fatkit_arch::rules::{self, Device, DriverCheck, Image, Policy, Selection, Status, Verdict};
use fatkit_arch::{products, Cc, ImageKind, Target, TargetSet};
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
    gaps(kernels, required, |k, target| {
        match (target.kind, k.target_cell(target, policy)) {
            (_, Cell::Cubin(_) | Cell::Ptx(_)) => None,
            (ImageKind::Cubin, Cell::Missing) => {
                Some(format!("no cubin or PTX that runs on CC {}", target.cc))
            }
            (ImageKind::Ptx, Cell::Missing) => {
                Some(format!("no PTX that JIT-compiles for CC {}", target.cc))
            }
        }
    })
}

/// Every (kernel, target) pair for which `reason` gives a reason, as a gap.
fn gaps(
    kernels: &[KernelImages],
    targets: &TargetSet,
    reason: impl Fn(&KernelImages, Target) -> Option<String>,
) -> Vec<Gap> {
    kernels
        .iter()
        .flat_map(|k| targets.iter().map(move |target| (k, target)))
        .filter_map(|(k, target)| {
            Some(Gap {
                kernel: k.name.clone(),
                target,
                reason: reason(k, target)?,
            })
        })
        .collect()
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
            let why = explain::explain(&k.images, device, policy);
            let image = why.chosen.map(|c| c.target);
            let reason = match why.chosen.map(|c| (c.target, c.ptx_driver)) {
                Some((target, Some(DriverCheck::Unknown(need)))) => {
                    Some(format!("only PTX runs ({target}), and {need}"))
                }
                Some((_, Some(DriverCheck::IsaUnknown))) => {
                    Some("only PTX runs, and its ISA is unknown".to_owned())
                }
                Some(_) => None,
                None => why.summary(&k.images, device.cc),
            };
            KernelVerdict {
                kernel: k.name.clone(),
                status: why.status,
                image,
                reason,
            }
        })
        .collect()
}

/// A release promises what its profile lists: every kernel has an image of every target of
/// the profile, so that a GPU is never served by JIT or an older cubin where the profile says
/// it gets its own (`require` is the looser check: something runs). What `package` gates on.
pub fn exact_gaps(kernels: &[KernelImages], targets: &TargetSet, policy: Policy) -> Vec<Gap> {
    gaps(kernels, targets, |k, target| {
        if k.images.iter().any(|i| i.target == target) {
            return None;
        }
        Some(match (target.kind, k.target_cell(target, policy)) {
            (ImageKind::Cubin, Cell::Cubin(other)) => format!(
                "no {target} cubin (CC {} would run the {other} cubin)",
                target.cc
            ),
            (ImageKind::Cubin, Cell::Ptx(ptx)) => format!(
                "no {target} cubin (CC {} would JIT-compile {ptx} PTX at load)",
                target.cc
            ),
            (ImageKind::Ptx, Cell::Ptx(other)) => format!("no {target} PTX (only {other} PTX)"),
            (_, _) => format!("no image runs on CC {}", target.cc),
        })
    })
}

/// A compute capability every kernel runs on, with the products that have it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GpuRow {
    pub cc: Cc,
    pub products: Vec<&'static str>,
}

/// The compute capabilities (with their products) on which every kernel runs, judged by
/// architecture.
pub fn gpus_covered(kernels: &[KernelImages], policy: Policy) -> Vec<GpuRow> {
    let mut by_cc: BTreeMap<Cc, Vec<&'static str>> = BTreeMap::new();
    for p in products::PRODUCTS {
        by_cc.entry(p.cc).or_default().push(p.name);
    }
    by_cc
        .into_iter()
        .filter(|(cc, _)| {
            !kernels.is_empty() && kernels.iter().all(|k| k.cell(*cc, policy) != Cell::Missing)
        })
        .map(|(cc, products)| GpuRow { cc, products })
        .collect()
}

/// The oldest driver that loads every image of every report: each image's need (its PTX ISA,
/// or the release of the toolkit that built a cubin).
pub fn min_driver(reports: &[FileReport]) -> Option<MinDriver> {
    MinDriver::of(
        reports
            .iter()
            .flat_map(|r| r.all_images())
            .filter_map(|(_, _, image)| {
                let toolkit = image.toolkit.as_deref().and_then(|t| t.parse().ok());
                MinDriver::need(image.target?, image.ptx_isa, toolkit)
            }),
    )
}

/// A file's verdict, all told; files combine to the worst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileStatus {
    /// Every check asked for passes.
    Ok,
    /// A requirement gap, a kernel that does not run on the GPU, or no kernel to check.
    Gaps,
    /// Part of the file could not be read.
    Invalid,
}

/// One file checked against what was asked: `--require` targets and a device.
#[derive(Clone, Debug, Serialize)]
pub struct FileAudit {
    pub status: FileStatus,
    pub kernels: Vec<KernelImages>,
    /// The compute capabilities shown as matrix columns: every one the file has an image
    /// for, plus the required ones and the device's.
    pub columns: Vec<Cc>,
    /// `None` unless targets were required.
    pub gaps: Option<Vec<Gap>>,
    /// `None` unless a device was given.
    pub verdicts: Option<Vec<KernelVerdict>>,
    /// What could not be read.
    pub errors: Vec<String>,
}

/// Checks a report against `required` targets and a `device`.
pub fn audit(
    report: &FileReport,
    required: Option<&TargetSet>,
    device: Option<&Device>,
    policy: Policy,
) -> FileAudit {
    let kernels = kernels(report);
    let mut ccs: std::collections::BTreeSet<Cc> = kernels
        .iter()
        .flat_map(|k| k.images.iter().map(|i| i.target.cc))
        .collect();
    ccs.extend(required.into_iter().flat_map(|r| r.iter().map(|t| t.cc)));
    ccs.extend(device.map(|d| d.cc));
    let gaps = required.map(|r| require(&kernels, r, policy));
    let verdicts = device.map(|d| on_device(&kernels, d, policy));
    let errors = report.all_errors();
    let failed = gaps.as_ref().is_some_and(|g| !g.is_empty())
        || verdicts
            .as_ref()
            .is_some_and(|v| v.iter().any(|k| k.status != Status::Runs))
        || ((required.is_some() || device.is_some()) && kernels.is_empty());
    let status = if !errors.is_empty() {
        FileStatus::Invalid
    } else if failed {
        FileStatus::Gaps
    } else {
        FileStatus::Ok
    };
    FileAudit {
        status,
        kernels,
        columns: ccs.into_iter().collect(),
        gaps,
        verdicts,
        errors,
    }
}
