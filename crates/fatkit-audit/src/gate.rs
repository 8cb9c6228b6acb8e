//! A release's gate, `package`'s analysis: every kernel of a shipped binary held to a
//! profile's targets exactly (each target its own image, the one the driver loads there), and
//! what the binaries together cover. fatkit-build's `package` builds, calls this and writes.

use std::collections::BTreeMap;

use fatkit_arch::floor::{self, Floors};
use fatkit_arch::rules::Policy;
use fatkit_arch::TargetSet;
use fatkit_fatbin::inspect::{self, Depth, FileReport};
use fatkit_fatbin::Limits;
use serde::Serialize;

use crate::coverage::{self, Cell, Declarations, Excuses, Gap, GpuRow, KernelImages};

/// One binary held to the targets.
#[derive(Debug)]
pub struct Exact {
    pub report: FileReport,
    pub kernels: Vec<KernelImages>,
    /// The kernel declarations the binary carries, bound to their containers.
    pub declarations: Declarations,
    /// (kernel, target) pairs with no image of their own that the driver loads: the gate fails.
    pub gaps: Vec<Gap>,
    /// Pairs a kernel lacks by its crate's declaration: not gaps.
    pub declared: Vec<Gap>,
    /// Per kernel, its images and how each target is served.
    pub rows: Vec<KernelRow>,
}

/// A kernel of a shipped binary, as `COVERAGE.json` lists it.
#[derive(Debug, Serialize)]
pub struct KernelRow {
    pub name: String,
    pub images: TargetSet,
    /// Per profile target: how it is served.
    pub cells: BTreeMap<String, Cell>,
    /// The targets the kernel is declared for, when its crate built it for fewer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub declared: Option<TargetSet>,
}

impl Exact {
    /// Whether the binary passes: every image readable and no gap.
    pub fn passes(&self) -> bool {
        self.gaps.is_empty() && self.report.all_errors().is_empty()
    }

    /// The module of `gap` as its crate names it, when a declaration record names it.
    pub fn module_of(&self, gap: &Gap) -> Option<&str> {
        self.declarations.module_name(gap.fatbin)
    }
}

/// Holds every kernel of binary `name` (its `bytes`) to `targets` exactly.
pub fn exact(name: &str, bytes: &[u8], targets: &TargetSet, policy: Policy) -> Exact {
    let report = inspect::inspect(name, bytes, Depth::Kernels, &Limits::default());
    let declarations = Declarations::scan(bytes);
    let kernels = coverage::kernels_declared(&report, &declarations);
    let (gaps, declared) =
        declarations.split_exact(coverage::exact_gaps(&kernels, targets, policy));
    let rows = kernels
        .iter()
        .map(|k| KernelRow {
            name: k.name.clone(),
            images: k.targets(),
            cells: targets
                .iter()
                .map(|t| (t.to_string(), k.target_cell(t, policy)))
                .collect(),
            declared: declarations.get(k.fatbin, &k.name).cloned(),
        })
        .collect();
    Exact {
        report,
        kernels,
        declarations,
        gaps,
        declared,
        rows,
    }
}

/// What a release of `binaries` covers: the compute capabilities (with their products) every
/// kernel runs on (a kernel declared for other GPUs excused, and named; a GPU that lives only
/// in aarch64 machines left out where no binary is built for one), and the driver each of them needs (`fatkit_arch::floor`: the image each
/// module loads there and the CUDA runtimes the binaries link), with the release's floor.
pub fn covered(binaries: &[Exact], policy: Policy) -> (Floors, Vec<GpuRow>) {
    let kernels: Vec<KernelImages> = binaries
        .iter()
        .flat_map(|b| b.kernels.iter().cloned())
        .collect();
    let mut declarations = Declarations::default();
    for b in binaries {
        declarations.extend(b.declarations.clone());
    }
    let machines: Vec<fatkit_fatbin::host::Machine> =
        binaries.iter().filter_map(|b| b.report.machine).collect();
    let arm64 = (!machines.is_empty()).then(|| machines.iter().any(|m| m.is_arm64()));
    let gpus = coverage::gpus_covered(&kernels, &declarations, arm64, policy);
    let modules: Vec<Vec<fatkit_arch::Image>> = binaries
        .iter()
        .flat_map(|b| coverage::modules(&b.report))
        .map(|m| m.images)
        .collect();
    let runtimes: Vec<fatkit_arch::CudaVersion> = binaries
        .iter()
        .flat_map(|b| b.report.runtimes.iter().map(|r| r.cuda))
        .collect();
    let ccs: Vec<fatkit_arch::Cc> = gpus.iter().map(|g| g.cc).collect();
    (floor::floors(&modules, &runtimes, &ccs), gpus)
}
