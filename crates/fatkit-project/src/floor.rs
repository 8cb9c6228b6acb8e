//! The driver a profile's build needs, as fatkit would build it today: each target routed to
//! the toolchain it goes to (`pipeline::route` over the toolchains installed, probed without
//! provisioning; where they cannot build the profile, the ones fatkit provisions:
//! [`toolchain::DEFAULT_CUDA`]'s nvcc and [`toolchain::DEFAULT_NVRTC`]'s NVRTC), each image as
//! that release writes it, and `fatkit_arch::floor::floors` over them. `profiles`, `plan` and
//! `doctor` say this; `package` says the same computation over the images it ships.

use fatkit_arch::floor::{self, Floors};
use fatkit_arch::profile::Profile;
use fatkit_arch::{Compiler, CudaVersion, Target};
use serde::Serialize;

use fatkit_build::pipeline;
use fatkit_toolchain::{self as toolchain, Probe, Toolchain, DEFAULT_CUDA, DEFAULT_NVRTC};

/// Where the toolchains a build is judged with come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Toolchains {
    /// Found on this machine and probed.
    Installed,
    /// Those fatkit provisions (the ones installed cannot build the profile).
    Provisioned,
}

/// One target and the toolchain that builds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BuiltBy {
    pub target: Target,
    pub compiler: Compiler,
    pub cuda: CudaVersion,
}

/// What a profile's build needs of the driver, and which toolkit builds each target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Today {
    pub toolchains: Toolchains,
    pub built: Vec<BuiltBy>,
    pub floors: Floors,
}

impl Today {
    /// The releases that build the profile, each once, newest first, with its compiler.
    pub fn toolkits(&self) -> Vec<(Compiler, CudaVersion)> {
        let mut out: Vec<(Compiler, CudaVersion)> =
            self.built.iter().map(|b| (b.compiler, b.cuda)).collect();
        out.sort_by_key(|(c, v)| std::cmp::Reverse((*v, std::cmp::Reverse(*c))));
        out.dedup();
        out
    }

    /// The release that writes the profile's PTX (the newest, where several do).
    pub fn ptx_toolkit(&self) -> Option<CudaVersion> {
        self.built
            .iter()
            .filter(|b| b.target.is_ptx())
            .map(|b| b.cuda)
            .max()
    }

    /// The floors of the same images in a binary that links the CUDA `runtime` (host code).
    pub fn linking(&self, runtime: CudaVersion) -> Floors {
        judged(self.toolchains, self.built.clone(), &[runtime]).floors
    }
}

/// [`Today`] of `built`: one module of those images, linking `runtimes`, on every product GPU.
fn judged(toolchains: Toolchains, built: Vec<BuiltBy>, runtimes: &[CudaVersion]) -> Today {
    let module: Vec<fatkit_arch::Image> = built
        .iter()
        .map(|b| floor::built(b.target, b.cuda))
        .collect();
    let floors = floor::floors(&[module], runtimes, &fatkit_arch::products::product_ccs());
    Today {
        toolchains,
        built,
        floors,
    }
}

/// [`Today`] of `profile` routed as `routes` to the toolchains `found` (the build's own
/// routing), with host code linking `runtimes`.
pub(crate) fn of_routes(
    found: &[(Toolchain, Probe)],
    routes: &[(Target, usize)],
    runtimes: &[CudaVersion],
) -> Today {
    let built = routes
        .iter()
        .filter_map(|(target, i)| {
            let (_, probe) = found.get(*i)?;
            Some(BuiltBy {
                target: *target,
                compiler: probe.compiler,
                cuda: probe.version,
            })
        })
        .collect();
    judged(Toolchains::Installed, built, runtimes)
}

/// [`Today`] of `profile`: routed to the toolchains installed (probed, nothing provisioned),
/// else to those fatkit provisions; `None` when neither builds every target.
pub fn today(profile: &Profile) -> Option<Today> {
    today_with(profile, &installed())
}

/// The toolchains installed here, probed; nothing is provisioned (none when discovery fails).
pub fn installed() -> Vec<(Toolchain, Probe)> {
    toolchain::for_targets(&fatkit_arch::TargetSet::new(), None, true, &mut |_| {})
        .unwrap_or_default()
}

/// [`today`] with the toolchains `found`.
pub(crate) fn today_with(profile: &Profile, found: &[(Toolchain, Probe)]) -> Option<Today> {
    match pipeline::route(profile, found) {
        Ok(routes) => Some(of_routes(found, &routes, &[])),
        Err(_) => provisioned(profile),
    }
}

/// `profiles show`: what the profile is, and how fatkit would build it today.
#[derive(Debug, Serialize)]
pub struct WithToday<T: Serialize> {
    #[serde(flatten)]
    pub shown: T,
    pub today: Option<Today>,
}

/// `profiles`' list: every profile of the set, with how fatkit would build each today.
#[derive(Debug, Serialize)]
pub struct Listed<'a> {
    #[serde(flatten)]
    pub listing: fatkit_package::profile::Listing<'a>,
    /// Per profile name: its build today; `None` where nothing fatkit has or provisions builds it.
    pub builds: std::collections::BTreeMap<String, Option<Today>>,
}

/// [`Listed`] of `set`: the toolchains installed found once.
pub fn listed(set: &fatkit_package::profile::ProfileSet) -> Listed<'_> {
    let found = installed();
    let builds = set
        .entries
        .iter()
        .filter_map(|(name, origin)| {
            let profile = origin.load().ok()?;
            Some((name.clone(), today_with(&profile, &found)))
        })
        .collect();
    Listed {
        listing: fatkit_package::profile::listing(set),
        builds,
    }
}

/// [`Today`] of `profile` with the toolchains fatkit provisions, from the tables: each target
/// to the newest of them that builds it, as the profile's pins and `min_cuda` allow.
pub fn provisioned(profile: &Profile) -> Option<Today> {
    let defaults = [
        (Compiler::Nvcc, DEFAULT_CUDA),
        (Compiler::Nvrtc, DEFAULT_NVRTC),
    ];
    let built = profile
        .all_targets()
        .iter()
        .map(|target| {
            let pin = profile.pins.get(&target);
            let (compiler, cuda) = defaults.iter().copied().find(|(c, v)| {
                fatkit_arch::toolkit::can_build(*v, target)
                    && profile.min_cuda.is_none_or(|min| *v >= min)
                    && pin.is_none_or(|p| p.matches(*c, *v))
            })?;
            Some(BuiltBy {
                target,
                compiler,
                cuda,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(judged(Toolchains::Provisioned, built, &[]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(targets: &str, min_cuda: Option<&str>) -> Profile {
        let ctx = fatkit_arch::notation::Context::default();
        Profile {
            name: "t".into(),
            description: String::new(),
            targets: fatkit_arch::notation::parse_any(targets, &ctx).unwrap(),
            extra: fatkit_arch::TargetSet::new(),
            compress: fatkit_arch::Compression::None,
            min_cuda: min_cuda.map(|v| v.parse().unwrap()),
            budget: None,
            pins: Default::default(),
        }
    }

    /// What fatkit provisions, from the tables: each target to the newest default that builds
    /// it, and the floors of what they write.
    #[test]
    fn the_provisioned_toolchains_build_full_for_r580_but_the_v100() {
        let full = profile(
            "sm_70 sm_75 sm_80 sm_86 sm_89 sm_90 sm_100 sm_120 compute_120",
            None,
        );
        let today = provisioned(&full).unwrap();
        assert_eq!(today.toolchains, Toolchains::Provisioned);
        assert_eq!(
            today.toolkits(),
            [
                (Compiler::Nvcc, DEFAULT_CUDA),
                (Compiler::Nvrtc, DEFAULT_NVRTC)
            ]
        );
        let by = |t: &str| {
            let b = today
                .built
                .iter()
                .find(|b| b.target.to_string() == t)
                .unwrap();
            (b.compiler, b.cuda)
        };
        assert_eq!(by("sm_70"), (Compiler::Nvrtc, DEFAULT_NVRTC));
        assert_eq!(by("compute_120"), (Compiler::Nvcc, DEFAULT_CUDA));
        assert_eq!(today.ptx_toolkit(), Some(DEFAULT_CUDA));
        let release = today.floors.release.as_ref().unwrap();
        assert_eq!(release.floor.release.unwrap().to_string(), "580.65.06");
        assert!(!release.set_by.contains(&fatkit_arch::Cc::new(7, 0)));
        // Linking the CUDA 13.2 runtime, the V100 needs R580 too.
        let linked = today.linking(DEFAULT_CUDA);
        let linked = linked.release.unwrap();
        assert!(linked.set_by.contains(&fatkit_arch::Cc::new(7, 0)));
        // A floor of CUDA 13.0 leaves nothing to build sm_70.
        assert_eq!(provisioned(&profile("sm_70 sm_90", Some("13.0"))), None);
    }
}
