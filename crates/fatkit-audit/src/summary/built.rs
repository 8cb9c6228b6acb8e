//! What a library's files say of its build and its host, read once: its images' targets and
//! toolkits ([`Built`]), how widely its targets reach, the machine and PyTorch it links, and the
//! kernels its host code never names.

use std::collections::{BTreeMap, BTreeSet};

use fatkit_arch::products;
use fatkit_arch::toolkit::CudaVersion;
use fatkit_arch::{ImageKind, Target, TargetSet};
use fatkit_fatbin::inspect::FileReport;

/// What a library's loaded images say of its build: the cubin and PTX targets, the toolkits,
/// the images that could not be read, and the newest toolkit that built each target (what its
/// cubins need of the driver).
pub(super) struct Built {
    pub(super) cubins: TargetSet,
    pub(super) ptx: TargetSet,
    pub(super) toolkits: BTreeSet<String>,
    pub(super) corrupt: Vec<String>,
    pub(super) built_by: BTreeMap<Target, CudaVersion>,
}

impl Built {
    pub(super) fn of(report: &FileReport) -> Built {
        let images = report.loaded_images();
        let mut cubins = TargetSet::new();
        let mut ptx = TargetSet::new();
        let mut toolkits = BTreeSet::new();
        let mut corrupt: Vec<String> = Vec::new();
        // The newest toolkit that built each target: what its cubins need of the driver.
        let mut built_by: BTreeMap<Target, CudaVersion> = BTreeMap::new();
        for (member, _, image) in &images {
            if let Some(e) = &image.error {
                corrupt.push(format!("{member}: image at {:#x}: {e}", image.offset));
            }
            // What the image is, over what its entry header says (docs/ARCH_RULES.md section 2).
            let Some(t) = image.image_target.or(image.target) else {
                continue;
            };
            if let Some(v) = image.toolkit.as_deref().and_then(|t| t.parse().ok()) {
                let slot = built_by.entry(t).or_insert(v);
                *slot = (*slot).max(v);
            }
            if image.error.is_some() {
                continue;
            }
            match t.kind {
                ImageKind::Cubin => cubins.insert(t),
                ImageKind::Ptx => ptx.insert(t),
            };
            if let Some(tk) = &image.toolkit {
                toolkits.insert(tk.clone());
            }
        }
        Built {
            cubins,
            ptx,
            toolkits,
            corrupt,
            built_by,
        }
    }
}

/// Whether the plain targets of `set` span two or more GPU generations.
pub(super) fn wide(set: &TargetSet) -> bool {
    let generations: BTreeSet<&str> = set
        .iter()
        .filter(|t| t.suffix == fatkit_arch::Suffix::None)
        .filter_map(|t| products::generation(t.cc))
        .collect();
    generations.len() >= 2
}

/// The machine of the first host file among `report` and its members.
pub(super) fn machine_of(report: &FileReport) -> Option<fatkit_fatbin::host::Machine> {
    report
        .machine
        .or_else(|| report.members.iter().find_map(machine_of))
}

/// Whether `report` (or a member) links PyTorch.
pub(super) fn links_torch(report: &FileReport) -> bool {
    report.torch || report.members.iter().any(links_torch)
}

/// The kernels no host string of `report` (or of a member) names, where the file names its
/// kernels.
pub(super) fn unnamed_of(report: &FileReport) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = report.unnamed.iter().flatten().cloned().collect();
    for m in &report.members {
        out.extend(unnamed_of(m));
    }
    out
}

/// Whether a library named `name` (its path in its distribution) of distribution `package`
/// (`torch 2.7.0`) is PyTorch's own.
pub(super) fn of_torch(name: &str, package: Option<&str>) -> bool {
    let top = name.split('/').next();
    let dist = package.map(|p| crate::record::name_and_version(p).0);
    top == Some("torch") || dist == Some("torch")
}
