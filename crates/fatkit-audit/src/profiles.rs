//! `profiles show`'s answers: a profile's images as one module, judged on every product GPU
//! (`shown`) or on one GPU with every image the driver passes over (`GpuReport`). The command
//! line renders them; serialised, they are its `--json`.

use std::path::Path;

use fatkit_arch::driver::{DriverVersion, PtxRequirement};
use fatkit_arch::explain;
use fatkit_arch::products::Gpu;
use fatkit_arch::profile::{Profile, Route};
use fatkit_arch::rules::{Device, DriverCheck, Policy, Selection, Status, Verdict};
use fatkit_arch::toolkit::{self, CudaVersion, PtxIsa};
use fatkit_arch::{Cc, DriverRelease, ImageKind, Target};
use serde::Serialize;

/// The PTX assumption a report rests on: the toolkit taken to write the profile's PTX, its
/// ISA and that ISA's minimum driver.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct PtxAssumption {
    pub toolkit: Option<CudaVersion>,
    pub isa: Option<PtxIsa>,
    /// The minimum driver for that ISA, where known.
    pub min_driver: Option<DriverRelease>,
}

impl PtxAssumption {
    /// `cuda`, else the oldest toolkit that builds `profile`.
    pub fn new(profile: &Profile, cuda: Option<CudaVersion>) -> PtxAssumption {
        let toolkit = cuda.or_else(|| profile.assumed_toolkit());
        let isa = toolkit.and_then(toolkit::toolkit).and_then(|t| t.ptx_isa);
        let min_driver = isa.map(PtxRequirement::of).and_then(|r| r.min_driver);
        PtxAssumption {
            toolkit,
            isa,
            min_driver,
        }
    }
}

/// How the driver fares with a verdict on a profile's images, in a few words (the coverage
/// table's IMAGE column, and its JSON's `how`).
pub fn how(verdict: &Verdict, profile: &Profile) -> String {
    let targets: Vec<Target> = profile.targets.iter().collect();
    let name = |idx: usize| {
        targets
            .get(idx)
            .map_or_else(|| "?".to_owned(), |t| t.to_string())
    };
    match verdict.selection {
        Ok(Selection::Cubin { image, .. }) => format!("{} cubin", name(image)),
        Ok(Selection::Ptx { image, driver }) => match driver {
            DriverCheck::Supported | DriverCheck::NotGiven => format!("{} PTX, JIT", name(image)),
            DriverCheck::IsaUnknown | DriverCheck::Unknown(_) => {
                format!(
                    "{} PTX, JIT if the driver takes its ISA (unknown)",
                    name(image)
                )
            }
        },
        Err(e) => format!("none: error {}", e.code()),
    }
}

/// One compute capability of a profile's coverage.
#[derive(Debug, Serialize)]
pub struct CoverageRow {
    pub cc: Cc,
    pub products: Vec<&'static str>,
    pub status: Status,
    pub image: Option<Target>,
    pub how: String,
}

/// A profile as `profiles show` reports it: what it builds, with what, and the GPUs it covers.
#[derive(Debug, Serialize)]
pub struct Shown<'a> {
    pub profile: &'a Profile,
    pub path: &'a Path,
    pub single_toolkits: Vec<CudaVersion>,
    pub routes: Vec<Route>,
    pub ptx: PtxAssumption,
    pub driver: Option<DriverVersion>,
    pub policy: Policy,
    pub coverage: Vec<CoverageRow>,
}

/// `profile` (found at `path`) judged on every product GPU with `driver` and `ptx`.
pub fn shown<'a>(
    profile: &'a Profile,
    path: &'a Path,
    driver: Option<DriverVersion>,
    ptx: PtxAssumption,
    policy: Policy,
) -> Shown<'a> {
    let targets: Vec<Target> = profile.targets.iter().collect();
    let coverage: Vec<CoverageRow> = profile
        .coverage(driver, ptx.isa, policy)
        .into_iter()
        .map(|c| CoverageRow {
            cc: c.cc,
            products: c.products.iter().map(|p| p.name).collect(),
            status: c.verdict.status(),
            image: c
                .verdict
                .selection
                .ok()
                .and_then(|s| targets.get(s.image()).copied()),
            how: how(&c.verdict, profile),
        })
        .collect();
    Shown {
        profile,
        path,
        single_toolkits: profile.single_toolkits(),
        routes: profile.routes(),
        ptx,
        driver,
        policy,
        coverage,
    }
}

/// The image the driver loads.
#[derive(Debug, Serialize)]
pub struct Selected {
    pub target: Target,
    pub kind: ImageKind,
    /// For a cubin: built for exactly this compute capability.
    pub exact: bool,
}

/// The error a load fails with.
#[derive(Debug, Serialize)]
pub struct LoadErrorJson {
    pub code: u32,
    pub name: &'static str,
    pub message: &'static str,
}

/// An image passed over, and why.
#[derive(Debug, Serialize)]
pub struct RejectedJson {
    pub target: Target,
    pub reason: String,
}

/// `profiles show PROFILE --gpu G`: which image of the profile the driver loads on one GPU,
/// and why every other is passed over.
#[derive(Debug, Serialize)]
pub struct GpuReport {
    pub profile: String,
    pub gpu: Gpu,
    pub driver: Option<DriverVersion>,
    pub ptx: PtxAssumption,
    pub policy: Policy,
    pub status: Status,
    pub selected: Option<Selected>,
    /// Why the verdict is not certain, when it is `unknown`.
    pub uncertain: Option<String>,
    pub error: Option<LoadErrorJson>,
    pub rejected: Vec<RejectedJson>,
    pub fix: Option<String>,
    /// Other profiles of the directory that cover this GPU.
    pub covering_profiles: Vec<String>,
    #[serde(skip)]
    pub images: String,
}

impl GpuReport {
    /// `profile` on `gpu`; where it does not run, which of `others` (each read only then)
    /// does.
    pub fn new(
        profile: &Profile,
        others: impl IntoIterator<Item = (String, Profile)>,
        gpu: &Gpu,
        (driver, ptx): (Option<DriverVersion>, PtxAssumption),
        policy: Policy,
    ) -> GpuReport {
        let device = Device::new(gpu.cc, driver);
        let why = explain::explain(&profile.images(ptx.isa), &device, policy);
        let selected = why.chosen.map(|c| Selected {
            target: c.target,
            kind: c.target.kind,
            exact: c.exact,
        });
        let rejected = why
            .rejected
            .iter()
            .map(|r| RejectedJson {
                target: r.target,
                reason: r.reason.clone(),
            })
            .collect();
        let covering_profiles = match why.status {
            Status::Runs => Vec::new(),
            _ => others
                .into_iter()
                .filter(|(name, _)| *name != profile.name)
                .filter_map(|(name, other)| {
                    let isa = PtxAssumption::new(&other, None).isa;
                    (other.check(&device, isa, policy).status() == Status::Runs).then_some(name)
                })
                .collect(),
        };
        GpuReport {
            profile: profile.name.clone(),
            gpu: gpu.clone(),
            driver,
            ptx,
            policy,
            status: why.status,
            selected,
            uncertain: why.uncertain.clone(),
            error: why.error.map(|e| LoadErrorJson {
                code: e.code(),
                name: e.name(),
                message: e.message(),
            }),
            rejected,
            fix: why.fix.clone(),
            covering_profiles,
            images: profile.targets.to_string(),
        }
    }
}
