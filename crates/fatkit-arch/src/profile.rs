//! An arch profile, resolved: what to build, and what that covers. Loading one from TOML (with
//! file positions in errors) lives in `fatkit-build`; this is the pure model.

use serde::{Deserialize, Serialize};

use crate::products::{self, Product};
use crate::rules::{self, Device, Image, Policy, Verdict};
use crate::toolkit::{self, CudaVersion, PtxIsa};
use crate::{Cc, Target, TargetSet};

/// How fatbin entries are compressed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    #[default]
    None,
    Lz4,
    /// Needs a driver at the CUDA 12.4 level or newer (docs/ARCH_RULES.md, Medium confidence).
    Zstd,
}

impl Compression {
    pub const NAMES: [&'static str; 3] = ["none", "lz4", "zstd"];

    pub fn parse(s: &str) -> Option<Compression> {
        match s {
            "none" => Some(Compression::None),
            "lz4" => Some(Compression::Lz4),
            "zstd" => Some(Compression::Zstd),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    /// The oldest CUDA level a driver needs to load entries compressed this way.
    pub fn min_driver_cuda(self) -> Option<CudaVersion> {
        match self {
            Compression::Zstd => Some(CudaVersion::new(12, 4)),
            Compression::None | Compression::Lz4 => None,
        }
    }
}

/// A resolved arch profile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Profile {
    pub name: String,
    pub description: String,
    /// What every kernel is built for: cubins and PTX.
    pub targets: TargetSet,
    /// Arch-specific cubins built only for the kernels that need them.
    pub extra: TargetSet,
    pub compress: Compression,
    pub min_cuda: Option<CudaVersion>,
    /// The most its build may ship (`budget`, `for`): checked after every build.
    pub budget: Option<crate::size_budget::Budget>,
    /// Targets pinned to a toolchain (`[toolchain]` in the TOML); the others go to the newest
    /// toolchain that builds them.
    pub pins: std::collections::BTreeMap<Target, crate::Pin>,
}

/// The toolkits able to build one target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Route {
    pub target: Target,
    pub toolkits: Vec<CudaVersion>,
}

impl Profile {
    /// Every target the profile builds, `extra` included.
    pub fn all_targets(&self) -> TargetSet {
        self.targets.iter().chain(self.extra.iter()).collect()
    }

    fn candidate_toolkits(&self) -> impl Iterator<Item = CudaVersion> + '_ {
        toolkit::TOOLKITS
            .iter()
            .map(|t| t.version)
            .filter(|v| self.min_cuda.is_none_or(|min| *v >= min))
    }

    /// The known toolkit versions that build every target by themselves, oldest first.
    pub fn single_toolkits(&self) -> Vec<CudaVersion> {
        let all = self.all_targets();
        self.candidate_toolkits()
            .filter(|&v| all.iter().all(|t| toolkit::can_build(v, t)))
            .collect()
    }

    /// For each target, the toolkit versions able to build it (respecting `min_cuda`).
    pub fn routes(&self) -> Vec<Route> {
        self.all_targets()
            .iter()
            .map(|target| Route {
                target,
                toolkits: self
                    .candidate_toolkits()
                    .filter(|&v| toolkit::can_build(v, target))
                    .collect(),
            })
            .collect()
    }

    /// The toolkit assumed to write the PTX when none is named: the oldest that builds the
    /// whole profile (the friendliest to old drivers), else the oldest that builds its PTX.
    pub fn assumed_toolkit(&self) -> Option<CudaVersion> {
        self.single_toolkits().first().copied().or_else(|| {
            self.candidate_toolkits()
                .find(|&v| self.targets.ptx().all(|t| toolkit::can_build(v, t)))
        })
    }

    /// The images every kernel gets, PTX tagged with `ptx_isa`.
    pub fn images(&self, ptx_isa: Option<PtxIsa>) -> Vec<Image> {
        self.targets.iter().map(|t| Image::of(t, ptx_isa)).collect()
    }

    /// What the driver would do with this profile's images on `device`.
    pub fn check(&self, device: &Device, ptx_isa: Option<PtxIsa>, policy: Policy) -> Verdict {
        rules::select(&self.images(ptx_isa), device, policy)
    }

    /// The verdict for every compute capability in the product table, newest first.
    pub fn coverage(
        &self,
        device_driver: Option<crate::DriverVersion>,
        ptx_isa: Option<PtxIsa>,
        policy: Policy,
    ) -> Vec<CcCoverage> {
        let images = self.images(ptx_isa);
        products::product_ccs()
            .into_iter()
            .map(|cc| CcCoverage {
                cc,
                products: products::products_of(cc).collect(),
                verdict: rules::select(&images, &Device::new(cc, device_driver), policy),
            })
            .collect()
    }
}

/// How one compute capability fares.
#[derive(Clone, Debug)]
pub struct CcCoverage {
    pub cc: Cc,
    pub products: Vec<&'static Product>,
    pub verdict: Verdict,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notation::{parse_any, Context};
    use crate::rules::{Selection, Status};

    fn profile(targets: &str) -> Profile {
        Profile {
            name: "t".into(),
            description: String::new(),
            targets: parse_any(targets, &Context::default()).unwrap(),
            extra: TargetSet::new(),
            compress: Compression::None,
            budget: None,
            min_cuda: None,
            pins: Default::default(),
        }
    }

    #[test]
    fn full_profile_needs_cuda_12_8_or_12_9() {
        let p = profile("sm_70 sm_75 sm_80 sm_86 sm_89 sm_90 sm_100 sm_120 compute_120");
        let names: Vec<String> = p.single_toolkits().iter().map(|v| v.to_string()).collect();
        assert_eq!(names, ["12.8", "12.9"]);
        assert_eq!(p.assumed_toolkit(), Some(CudaVersion::new(12, 8)));
    }

    #[test]
    fn split_profile_has_routes_but_no_single_toolkit() {
        let p = profile("sm_72 sm_110");
        assert!(p.single_toolkits().is_empty());
        let routes = p.routes();
        assert_eq!(routes[0].toolkits.last(), Some(&CudaVersion::new(12, 9)));
        assert_eq!(routes[1].toolkits.first(), Some(&CudaVersion::new(13, 0)));
    }

    #[test]
    fn turing_to_hopper_cubins_on_an_rtx_5090_give_error_209() {
        let p = profile("sm_75 sm_80 sm_86 sm_89 sm_90");
        let gpu = products::lookup("RTX 5090").unwrap();
        let verdict = p.check(&Device::new(gpu.cc, None), None, Policy::default());
        assert_eq!(verdict.selection, Err(rules::LoadError::NoBinaryForGpu));
        assert_eq!(verdict.rejected.len(), 5);
        // compute_90a PTX never runs on another GPU, however new.
        let p = profile("compute_90a");
        for cc in [Cc::new(10, 0), Cc::new(12, 0)] {
            assert_eq!(
                p.check(&Device::new(cc, None), None, Policy::default())
                    .status(),
                Status::Fails
            );
        }
    }

    #[test]
    fn coverage_of_every_product_cc() {
        let p = profile("sm_75 sm_86 sm_89 sm_120 compute_120");
        let cov = p.coverage(None, None, Policy::default());
        let h100 = cov.iter().find(|c| c.cc == Cc::new(9, 0)).unwrap();
        assert_eq!(h100.verdict.status(), Status::Fails);
        let orin = cov.iter().find(|c| c.cc == Cc::new(8, 7)).unwrap();
        assert!(matches!(
            orin.verdict.selection,
            Ok(Selection::Cubin { exact: false, .. })
        ));
        let strict = p.coverage(None, None, Policy { strict_igpu: true });
        let orin = strict.iter().find(|c| c.cc == Cc::new(8, 7)).unwrap();
        assert_eq!(orin.verdict.status(), Status::Fails);
    }
}
