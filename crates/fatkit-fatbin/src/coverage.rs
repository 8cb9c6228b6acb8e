//! Kernel-level coverage: which images each kernel has, and what runs where.

use std::collections::BTreeMap;

use fatkit_arch::driver::MinDriver;
use fatkit_arch::explain;
use fatkit_arch::rules::{self, Device, DriverCheck, Image, Policy, Selection, Status, Verdict};
use fatkit_arch::{declared, products, Cc, ImageKind, Target, TargetSet};
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

/// Kernels built for fewer targets than the rest by their source's design, as their crate
/// declared them ([`fatkit_arch::declared`]): by kernel, the targets it is built for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Declarations(pub BTreeMap<String, TargetSet>);

impl Declarations {
    /// Every declaration record in `bytes`: a binary linking fatkit-generated modules, or a
    /// generated module's source.
    pub fn scan(bytes: &[u8]) -> Declarations {
        let records: Vec<declared::Record> =
            crate::par::find_all(bytes, declared::MAGIC.as_bytes())
                .into_iter()
                .filter_map(|at| declared::at(bytes.get(at..)?))
                .collect();
        Declarations(declared::merge(&records))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The targets `kernel` is declared for, if it is declared.
    pub fn get(&self, kernel: &str) -> Option<&TargetSet> {
        self.0.get(kernel)
    }

    /// Whether `kernel` lacks `target` by declaration: it is declared, and none of its declared
    /// targets serves `target` (judged as [`KernelImages::target_cell`] judges images).
    pub fn excuses(&self, kernel: &str, target: Target, policy: Policy) -> bool {
        self.get(kernel)
            .is_some_and(|set| as_images(kernel, set).target_cell(target, policy) == Cell::Missing)
    }

    /// Whether `kernel` not running on `device` is by declaration: none of its declared
    /// targets would run there.
    pub fn excuses_device(&self, kernel: &str, device: &Device, policy: Policy) -> bool {
        self.get(kernel).is_some_and(|set| {
            as_images(kernel, set)
                .select(&Device::new(device.cc, None), policy)
                .selection
                .is_err()
        })
    }

    /// Splits [`require`] gaps into the rest and those the declarations excuse: `(gaps,
    /// declared)`.
    pub fn split_require(&self, gaps: Vec<Gap>, policy: Policy) -> (Vec<Gap>, Vec<Gap>) {
        gaps.into_iter()
            .partition(|g| !self.excuses(&g.kernel, g.target, policy))
    }

    /// Splits [`exact_gaps`] into the rest and those the declarations excuse (the kernel is
    /// declared without that very target): `(gaps, declared)`.
    pub fn split_exact(&self, gaps: Vec<Gap>) -> (Vec<Gap>, Vec<Gap>) {
        gaps.into_iter()
            .partition(|g| self.get(&g.kernel).is_none_or(|set| set.contains(g.target)))
    }
}

/// The images a kernel's declared targets would be.
fn as_images(kernel: &str, set: &TargetSet) -> KernelImages {
    KernelImages {
        name: kernel.to_owned(),
        images: set
            .iter()
            .map(|t| match t.kind {
                ImageKind::Cubin => Image::cubin(t),
                ImageKind::Ptx => Image::ptx(t, None),
            })
            .collect(),
    }
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
    /// For a failure its crate declared (the kernel is built for fewer targets, none of which
    /// runs here): the declared targets. Such a failure does not fail the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub declared: Option<TargetSet>,
}

/// What every kernel does on `device`; a failure `declarations` excuse carries its declared
/// targets.
pub fn on_device(
    kernels: &[KernelImages],
    declarations: &Declarations,
    device: &Device,
    policy: Policy,
) -> Vec<KernelVerdict> {
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
            let declared = (why.status == Status::Fails
                && declarations.excuses_device(&k.name, device, policy))
            .then(|| declarations.get(&k.name).cloned())
            .flatten();
            KernelVerdict {
                kernel: k.name.clone(),
                status: why.status,
                image,
                reason,
                declared,
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
    /// `None` unless targets were required. Gaps the file's declarations excuse are in
    /// `declared`, not here.
    pub gaps: Option<Vec<Gap>>,
    /// Required (kernel, target) pairs missing by the crate's declaration.
    pub declared: Vec<Gap>,
    /// `None` unless a device was given.
    pub verdicts: Option<Vec<KernelVerdict>>,
    /// What could not be read.
    pub errors: Vec<String>,
}

/// Checks a report against `required` targets and a `device`; what `declarations` excuse is
/// reported apart and does not fail the file.
pub fn audit(
    report: &FileReport,
    declarations: &Declarations,
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
    let (gaps, declared) = match required {
        Some(r) => {
            let (gaps, declared) = declarations.split_require(require(&kernels, r, policy), policy);
            (Some(gaps), declared)
        }
        None => (None, Vec::new()),
    };
    let verdicts = device.map(|d| on_device(&kernels, declarations, d, policy));
    let errors = report.all_errors();
    let failed = gaps.as_ref().is_some_and(|g| !g.is_empty())
        || verdicts.as_ref().is_some_and(|v| {
            v.iter()
                .any(|k| k.status != Status::Runs && k.declared.is_none())
        })
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
        declared,
        verdicts,
        errors,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn set(names: &str) -> TargetSet {
        names
            .split(' ')
            .map(|n| Target::parse_name(n).unwrap())
            .collect()
    }

    fn kernel(name: &str, targets: &str) -> KernelImages {
        as_images(name, &set(targets))
    }

    #[test]
    fn declarations_excuse_only_what_they_leave_out() {
        let full = set("sm_70 sm_75 sm_80 sm_86 sm_90 sm_120 compute_120");
        let mut bytes = b"\x7fELF..".to_vec();
        bytes.extend_from_slice(
            b"fatkit:declared:v1;module=norm;rmsnorm_bf16=sm_80,sm_86,sm_90,sm_120,compute_120;end;",
        );
        let declarations = Declarations::scan(&bytes);
        assert_eq!(declarations.0.len(), 1);
        let kernels = vec![
            kernel(
                "rmsnorm",
                "sm_70 sm_75 sm_80 sm_86 sm_90 sm_120 compute_120",
            ),
            // Declared for sm_80+, and lacking sm_90 too: that one stays a gap.
            kernel("rmsnorm_bf16", "sm_80 sm_86 sm_120 compute_120"),
            // Not declared at all.
            kernel("softmax", "sm_75 sm_80 sm_86 sm_90 sm_120 compute_120"),
        ];
        let policy = Policy::default();
        let (gaps, declared) = declarations.split_exact(exact_gaps(&kernels, &full, policy));
        let pairs = |g: &[Gap]| -> Vec<String> {
            g.iter()
                .map(|g| format!("{} {}", g.kernel, g.target))
                .collect()
        };
        assert_eq!(pairs(&gaps), ["rmsnorm_bf16 sm_90", "softmax sm_70"]);
        assert_eq!(
            pairs(&declared),
            ["rmsnorm_bf16 sm_70", "rmsnorm_bf16 sm_75"]
        );

        let v100 = Device::new("7.0".parse().unwrap(), None);
        let verdicts = on_device(&kernels, &declarations, &v100, policy);
        let failing: Vec<(&str, bool)> = verdicts
            .iter()
            .filter(|v| v.status != Status::Runs)
            .map(|v| (v.kernel.as_str(), v.declared.is_some()))
            .collect();
        assert_eq!(failing, [("rmsnorm_bf16", true), ("softmax", false)]);
    }
}
