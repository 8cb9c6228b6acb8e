use super::*;
use crate::notation::{parse_any, Context};
use crate::products::product_ccs;
use crate::toolkit::TOOLKITS;
use crate::TargetSet;

fn v(s: &str) -> CudaVersion {
    s.parse().unwrap()
}

fn set(s: &str) -> TargetSet {
    parse_any(s, &Context::default()).unwrap()
}

fn release(s: &str) -> DriverRelease {
    match s.parse::<crate::DriverVersion>().unwrap() {
        crate::DriverVersion::Release(r) => r,
        crate::DriverVersion::Cuda(_) => unreachable!(),
    }
}

/// A profile's targets, each routed to the newest of `releases` that builds it (as fatkit
/// routes a target to the newest toolchain that builds it): one module.
fn routed(targets: &TargetSet, releases: &[CudaVersion]) -> Option<Vec<Image>> {
    targets
        .iter()
        .map(|t| {
            let by = releases
                .iter()
                .filter(|r| toolkit::can_build(**r, t))
                .max()?;
            Some(built(t, *by))
        })
        .collect()
}

/// The simulated profiles: the built-in ones' targets, and a PTX-only and a cubin-only one.
const PROFILES: &[&str] = &[
    "sm_75 sm_86 sm_89 sm_120 compute_120",
    "sm_70 sm_75 sm_80 sm_86 sm_89 sm_90 sm_100 sm_103 compute_100",
    "sm_90",
    "sm_70 sm_75 sm_80 sm_86 sm_89 sm_90 sm_100 sm_120 compute_120",
    "sm_87 sm_110 compute_87",
    "sm_75 sm_80 sm_86 sm_87 sm_89 sm_90 sm_100 sm_103 sm_110 sm_120 sm_121 compute_120",
    "compute_75",
    "sm_80 sm_90",
];

/// Every release of the tables with a published driver, alone and beside 12.4 (fatkit's
/// CUDA 12 for targets 13.x lacks).
fn toolchain_sets() -> Vec<Vec<CudaVersion>> {
    let published: Vec<CudaVersion> = TOOLKITS
        .iter()
        .filter(|t| t.min_driver.is_some() && t.version >= v("12.0"))
        .map(|t| t.version)
        .collect();
    published
        .iter()
        .flat_map(|&r| [vec![r], vec![v("12.4"), r]])
        .collect()
}

/// Every CC of every profile on every set of toolchains: each GPU's floor is what the image it
/// loads needs (a cubin: its major's first release; PTX: the oldest release of its ISA), and
/// the release's floor the highest of them, set by the GPUs that reach it.
#[test]
fn every_gpu_of_every_profile_on_every_toolchain_set() {
    let mut cases = 0;
    for profile in PROFILES {
        let targets = set(profile);
        for releases in toolchain_sets() {
            let Some(module) = routed(&targets, &releases) else {
                continue;
            };
            let floors = floors(std::slice::from_ref(&module), &[], &product_ccs());
            for g in &floors.gpus {
                cases += 1;
                let [basis] = g.loads.as_slice() else {
                    panic!("one module loads one image: {g:?}");
                };
                let want = match *basis {
                    Basis::Cubin { cuda, target } => {
                        assert_eq!(target.cc.major, g.cc.major, "{profile} on {}", g.cc);
                        let major = cuda.unwrap().major;
                        TOOLKITS
                            .iter()
                            .find(|t| t.version.major == major)
                            .unwrap()
                            .min_driver
                    }
                    Basis::Ptx { isa, .. } => TOOLKITS
                        .iter()
                        .find(|t| t.ptx_isa >= isa)
                        .and_then(|t| t.min_driver),
                    Basis::Runtime { .. } => unreachable!(),
                };
                assert_eq!(
                    g.floor.release, want,
                    "{profile} by {releases:?} on {}",
                    g.cc
                );
            }
            let top = floors.release.unwrap();
            assert!(floors.gpus.iter().all(|g| g.floor.cuda <= top.floor.cuda));
            assert!(!top.set_by.is_empty());
            let set_by: Vec<Cc> = floors
                .gpus
                .iter()
                .filter(|g| g.floor.cuda == top.floor.cuda)
                .map(|g| g.cc)
                .collect();
            assert_eq!(top.set_by, set_by, "{profile} by {releases:?}");
        }
    }
    assert!(cases > 500, "{cases} cases");
}

/// A CUDA 13.x cubin needs R580 and a 12.x one R525, whatever the minor: the PTX's newer
/// driver is never the floor of a GPU that loads a cubin.
#[test]
fn cubins_need_their_majors_first_driver_not_the_ptxs() {
    for t in TOOLKITS.iter().filter(|t| t.version >= v("12.0")) {
        let Some(module) = routed(&set("sm_90 compute_90"), &[t.version]) else {
            continue;
        };
        let f = floors(&[module], &[], &[Cc::new(9, 0)]);
        let want = match t.version.major {
            12 => "525.60.13",
            _ => "580.65.06",
        };
        assert_eq!(
            f.gpus[0].floor.release,
            Some(release(want)),
            "{}",
            t.version
        );
    }
}

/// The release engineer's case: `full` as fatkit builds it (NVRTC 12.9 for sm_70, nvcc 13.2
/// for the rest) needs R580 on every GPU but the V100, R525 there, and the compute_120 PTX's
/// 595 only on GPUs newer than the tables.
#[test]
fn full_as_fatkit_builds_it() {
    let module = routed(&set(PROFILES[3]), &[v("12.9"), v("13.2")]).unwrap();
    let f = floors(std::slice::from_ref(&module), &[], &product_ccs());
    let v100 = f.gpus.iter().find(|g| g.cc == Cc::new(7, 0)).unwrap();
    assert_eq!(v100.floor.release, Some(release("525.60.13")));
    let top = f.release.unwrap();
    assert_eq!(top.floor.release, Some(release("580.65.06")));
    assert!(!top.set_by.contains(&Cc::new(7, 0)));
    assert!(top.set_by.contains(&Cc::new(12, 0)));
    let newer = f.newer_gpus.unwrap();
    assert_eq!(newer.release, Some(release("595.45.04")));
    assert_eq!(newer.to_string(), "595.45.04 (CUDA 13.2)");
    assert!(matches!(newer.basis, Basis::Ptx { .. }));

    // A binary linking the CUDA 13.2 runtime needs R580 on the V100 too.
    let f = floors(&[module], &[v("13.2")], &product_ccs());
    let v100 = f.gpus.iter().find(|g| g.cc == Cc::new(7, 0)).unwrap();
    assert_eq!(v100.floor.release, Some(release("580.65.06")));
    assert_eq!(v100.floor.basis, Basis::Runtime { cuda: v("13.2") });
    assert!(f.release.unwrap().set_by.contains(&Cc::new(7, 0)));
}

/// PTX counts on a known GPU only where it is what loads: a GPU with no cubin of its own.
#[test]
fn ptx_sets_the_floor_only_where_it_loads() {
    let module = routed(&set("sm_90 compute_80"), &[v("13.2")]).unwrap();
    let f = floors(
        &[module],
        &[],
        &[Cc::new(8, 6), Cc::new(9, 0), Cc::new(7, 5)],
    );
    let ccs: Vec<Cc> = f.gpus.iter().map(|g| g.cc).collect();
    assert_eq!(ccs, [Cc::new(8, 6), Cc::new(9, 0)], "nothing loads on 7.5");
    assert!(matches!(f.gpus[0].floor.basis, Basis::Ptx { .. }));
    assert_eq!(f.gpus[0].floor.release, Some(release("595.45.04")));
    assert_eq!(f.gpus[1].floor.release, Some(release("580.65.06")));
    assert_eq!(f.release.unwrap().set_by, [Cc::new(8, 6)]);
}

#[test]
fn no_ptx_no_newer_gpus_and_no_image_no_floor() {
    let module = routed(&set("sm_80 sm_90"), &[v("13.2")]).unwrap();
    let f = floors(&[module], &[], &product_ccs());
    assert_eq!(f.newer_gpus, None);
    assert_eq!(floors(&[], &[v("13.2")], &product_ccs()), Floors::default());
    // A cubin whose toolkit is not recorded: its floor is unknown, and ranks highest.
    let f = floors(
        &[vec![Image::cubin(Target::cubin(9, 0))]],
        &[v("12.4")],
        &[Cc::new(9, 0)],
    );
    assert_eq!(f.gpus[0].floor.cuda, None);
    assert_eq!(f.gpus[0].floor.to_string(), "unknown");
}
