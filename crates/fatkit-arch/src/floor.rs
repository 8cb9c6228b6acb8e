//! The oldest driver each GPU needs to run a release (docs/ARCH_RULES.md section 3): the one
//! computation `package`, `plan`, `profiles` and `doctor` all state.
//!
//! On each GPU the driver loads one image per module (`rules::select`): a cubin needs a driver
//! of its toolkit's major (minor version compatibility: CUDA 13.x cubins run on R580, 12.x on
//! R525), PTX a driver whose JIT knows its ISA. A CUDA runtime the binary links needs its
//! major's driver on every GPU. The GPU's floor is the most demanding of these; the release's
//! the highest over the GPUs, with the GPUs that set it. PTX a GPU newer than the tables would
//! JIT is stated apart: on the GPUs the tables know, it counts only where it is what loads.

use std::fmt;

use serde::Serialize;

use crate::driver::PtxRequirement;
use crate::driver_release::DriverRelease;
use crate::rules::{self, Device, Image, Policy, Selection};
use crate::toolkit::{self, CudaVersion, PtxIsa};
use crate::{Cc, ImageKind, Target};

/// What sets a driver floor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case", tag = "by")]
pub enum Basis {
    /// A cubin the driver loads, built by CUDA `cuda` (`None`: the toolkit is not recorded).
    Cubin {
        target: Target,
        cuda: Option<CudaVersion>,
    },
    /// PTX the driver JIT-compiles, of ISA `isa` (`None`: not known).
    Ptx { target: Target, isa: Option<PtxIsa> },
    /// A CUDA runtime the binary links.
    Runtime { cuda: CudaVersion },
}

impl fmt::Display for Basis {
    /// `sm_90 cubin from CUDA 13.2`, `compute_120 PTX (ISA 9.2)`, `the CUDA 13.2 runtime`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Basis::Cubin {
                target,
                cuda: Some(v),
            } => write!(f, "{target} cubin from CUDA {v}"),
            Basis::Cubin { target, cuda: None } => {
                write!(f, "{target} cubin from an unrecorded CUDA")
            }
            Basis::Ptx {
                target,
                isa: Some(isa),
            } => write!(f, "{target} PTX (ISA {isa})"),
            Basis::Ptx { target, isa: None } => write!(f, "{target} PTX of an unknown ISA"),
            Basis::Runtime { cuda } => write!(f, "the CUDA {cuda} runtime it links"),
        }
    }
}

/// One driver floor: the CUDA level a driver must reach, its Linux release, and what sets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Floor {
    /// As nvidia-smi prints it; `None` where the tables have no number.
    pub release: Option<DriverRelease>,
    /// The CUDA level (`cuDriverGetVersion`); `None` where the rules cannot place it.
    pub cuda: Option<CudaVersion>,
    pub basis: Basis,
}

impl Floor {
    /// What `basis` asks of the driver.
    pub fn of(basis: Basis) -> Floor {
        let cuda = match basis {
            // Minor version compatibility, from CUDA 11 on: the major's first release.
            Basis::Cubin { cuda, .. } => cuda.map(major_floor),
            Basis::Runtime { cuda } => Some(major_floor(cuda)),
            Basis::Ptx { isa, .. } => isa.and_then(|isa| PtxRequirement::of(isa).toolkit),
        };
        Floor {
            release: cuda.and_then(toolkit::toolkit).and_then(|t| t.min_driver),
            cuda,
            basis,
        }
    }

    /// How demanding it is: an unplaced floor ranks above every placed one (it may be anything).
    fn rank(&self) -> (bool, Option<CudaVersion>) {
        (self.cuda.is_none(), self.cuda)
    }
}

impl fmt::Display for Floor {
    /// `580.65.06 (CUDA 13.0)`, `a CUDA 13.4 driver (no published minimum)`, `unknown`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.release, self.cuda) {
            (Some(r), Some(v)) => write!(f, "{r} (CUDA {v})"),
            (None, Some(v)) => write!(f, "a CUDA {v} driver (no published minimum)"),
            (_, None) => write!(f, "unknown"),
        }
    }
}

/// The CUDA level a driver needs for what CUDA `cuda` built or links: its major's first
/// release from CUDA 11 on, its own before (minor version compatibility starts with 11).
pub(crate) fn major_floor(cuda: CudaVersion) -> CudaVersion {
    match cuda.major {
        ..=10 => cuda,
        major => CudaVersion::new(major, 0),
    }
}

/// One GPU's floor: the image each module loads there, and the most demanding need.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GpuFloor {
    pub cc: Cc,
    /// The images the driver loads there, one per module that loads, each once.
    pub loads: Vec<Basis>,
    pub floor: Floor,
}

/// The release's floor: the highest of the GPUs', and the GPUs that set it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReleaseFloor {
    pub floor: Floor,
    pub set_by: Vec<Cc>,
}

/// The drivers a release needs, per GPU and as a whole.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Floors {
    /// Every GPU asked about where some module loads, oldest first.
    pub gpus: Vec<GpuFloor>,
    /// `None` when no GPU loads anything.
    pub release: Option<ReleaseFloor>,
    /// What a GPU newer than the tables (a later major) would need: the PTX it JIT-compiles
    /// (with the runtime's floor where higher); `None` when no PTX would load there.
    pub newer_gpus: Option<Floor>,
}

/// The floors of a release made of `modules` (each the images of one fatbin) and linking
/// `runtimes` (CUDA releases), on the GPUs `ccs`.
pub fn floors(modules: &[Vec<Image>], runtimes: &[CudaVersion], ccs: &[Cc]) -> Floors {
    let runtime = runtimes
        .iter()
        .map(|&cuda| Floor::of(Basis::Runtime { cuda }))
        .max_by_key(Floor::rank);
    let mut ccs = ccs.to_vec();
    ccs.sort();
    ccs.dedup();
    let gpus: Vec<GpuFloor> = ccs
        .iter()
        .filter_map(|&cc| gpu_floor(modules, runtime, cc))
        .collect();
    let release = gpus
        .iter()
        .map(|g| g.floor)
        .max_by_key(Floor::rank)
        .map(|floor| ReleaseFloor {
            floor,
            set_by: gpus
                .iter()
                .filter(|g| g.floor.rank() == floor.rank())
                .map(|g| g.cc)
                .collect(),
        });
    let newer = Cc::new(
        ccs.iter()
            .chain(crate::products::product_ccs().iter())
            .map(|cc| cc.major)
            .max()
            .unwrap_or(0)
            .saturating_add(1),
        0,
    );
    let newer_gpus = gpu_floor(modules, runtime, newer)
        .filter(|g| g.loads.iter().all(|b| matches!(b, Basis::Ptx { .. })))
        .map(|g| g.floor);
    Floors {
        gpus,
        release,
        newer_gpus,
    }
}

/// The floor of GPU `cc`: the image each module loads there; `None` when none loads.
fn gpu_floor(modules: &[Vec<Image>], runtime: Option<Floor>, cc: Cc) -> Option<GpuFloor> {
    let device = Device::new(cc, None);
    let mut loads: Vec<Basis> = modules
        .iter()
        .filter_map(|images| {
            let chosen = rules::select(images, &device, Policy::default()).selection;
            let image = images.get(chosen.ok()?.image())?;
            Some(loaded(image, chosen.ok()?))
        })
        .collect();
    loads.sort();
    loads.dedup();
    let floor = loads
        .iter()
        .map(|&b| Floor::of(b))
        .chain(runtime.filter(|_| !loads.is_empty()))
        .max_by_key(Floor::rank)?;
    Some(GpuFloor { cc, loads, floor })
}

/// What the image chosen asks of the driver.
fn loaded(image: &Image, selection: Selection) -> Basis {
    match (selection, image.target.kind) {
        (Selection::Cubin { .. }, _) | (_, ImageKind::Cubin) => Basis::Cubin {
            target: image.target,
            cuda: image.toolkit,
        },
        (Selection::Ptx { .. }, ImageKind::Ptx) => Basis::Ptx {
            target: image.target,
            isa: image.ptx_isa,
        },
    }
}

/// The image a target built by CUDA `cuda` is: PTX of the ISA that release writes.
pub fn built(target: Target, cuda: CudaVersion) -> Image {
    let isa = toolkit::toolkit(cuda).and_then(|t| t.ptx_isa);
    Image::of(target, isa).built_by(Some(cuda))
}

#[cfg(test)]
mod tests;
