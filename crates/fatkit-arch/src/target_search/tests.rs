use super::*;
use crate::notation::{parse_any, Context};

fn target(s: &str) -> Target {
    parse_any(s, &Context::default())
        .unwrap()
        .iter()
        .next()
        .unwrap()
}

/// `full`'s targets, each cubin 1 MB (zstd 0.4 MB, lz4 0.6 MB), its PTX 2 MB.
fn full() -> Vec<Candidate> {
    let mut out: Vec<Candidate> = [
        "sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120",
    ]
    .iter()
    .map(|t| Candidate {
        target: target(t),
        ptx_isa: None,
        toolkit: None,
        bytes: [Some(1_000_000), Some(600_000), Some(400_000)],
    })
    .collect();
    out.push(Candidate {
        target: target("compute_120"),
        ptx_isa: "8.7".parse().ok(),
        toolkit: None,
        bytes: [Some(2_000_000), Some(1_000_000), Some(700_000)],
    });
    out
}

fn goal(budget: u64) -> Goal {
    Goal {
        budget,
        base: [100_000; 3],
        native: Vec::new(),
        driver: None,
    }
}

fn names(plan: &Plan) -> String {
    format!("{} {}", plan.targets, plan.compress.name())
}

#[test]
fn a_budget_everything_fits_is_the_full_profile_unchanged() {
    let p = plan(&full(), &goal(100_000_000), Policy::default()).unwrap();
    assert_eq!(
        names(&p.best),
        "sm_70 sm_75 sm_80 sm_86 sm_89 sm_90 sm_100 sm_120 compute_120 none"
    );
    assert_eq!(p.best.bytes, 100_000 + 8 * 1_000_000 + 2_000_000);
    assert!(p.dearer.is_none());
    // The next cheaper: the same GPUs, compressed.
    let cheaper = p.cheaper.unwrap();
    assert!(cheaper.bytes < p.best.bytes, "{cheaper:?}");
}

#[test]
fn a_small_budget_compresses_then_drops_the_least_covering() {
    // 8 cubins zstd = 3.2 MB + base: fits 4 MB with zstd, not uncompressed.
    let p = plan(&full(), &goal(4_000_000), Policy::default()).unwrap();
    assert_eq!(p.best.compress, Compression::Zstd);
    assert!(p.best.bytes <= 4_000_000);
    // Every GPU of full's generations runs natively, from a cubin built for it.
    for cc in ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"] {
        assert!(p.best.native.contains(&cc.parse().unwrap()), "{cc}: {p:?}");
    }
    let cheaper = p.cheaper.unwrap();
    assert!(cheaper.bytes < p.best.bytes);
}

#[test]
fn a_budget_no_set_fits_names_the_smallest() {
    let mut g = goal(50_000);
    g.native = vec!["9.0".parse().unwrap()];
    let e = plan(&full(), &g, Policy::default()).unwrap_err();
    // The base and one sm_90 cubin, zstd.
    assert_eq!(
        e,
        PlanError::NothingFits {
            smallest: 500_000,
            budget: 50_000
        }
    );
    assert!(e
        .to_string()
        .contains("the smallest that meets the goal is 500000 bytes"));
}

#[test]
fn a_required_gpu_forces_its_target() {
    // 1.5 MB uncompressed buys one cubin; with zstd three. Require the RTX 5090's.
    let mut g = goal(1_300_000);
    g.native = vec!["12.0".parse().unwrap()];
    let p = plan(&full(), &g, Policy::default()).unwrap();
    assert!(p.best.targets.contains(target("sm_120")), "{p:?}");
    assert!(p.best.native.contains(&"12.0".parse().unwrap()));
    // A GPU no candidate builds for is refused.
    g.native = vec!["5.0".parse().unwrap()];
    let e = plan(&full(), &g, Policy::default()).unwrap_err();
    assert_eq!(e, PlanError::NoCubinFor("5.0".parse().unwrap()));
}

#[test]
fn a_driver_floor_forbids_zstd_and_ptx_it_cannot_jit() {
    let mut g = goal(4_000_000);
    // A CUDA 12.2 driver: no ZSTD (12.4), and PTX ISA 8.7 (CUDA 12.8) does not JIT.
    g.driver = "535.104.05".parse().ok();
    let p = plan(&full(), &g, Policy::default()).unwrap();
    assert_ne!(p.best.compress, Compression::Zstd, "{p:?}");
    assert!(p.best.jit.is_empty(), "{p:?}");
    for plan in [&p.cheaper, &p.dearer].into_iter().flatten() {
        assert_ne!(plan.compress, Compression::Zstd);
    }
}

#[test]
fn sizes_read_as_people_write_them() {
    assert_eq!(parse_size("10 MiB"), Ok(10 << 20));
    assert_eq!(parse_size("10485760"), Ok(10_485_760));
    assert_eq!(parse_size("1.5GB"), Ok(1_500_000_000));
    assert_eq!(parse_size("250mb"), Ok(250_000_000));
    for bad in ["", "ten", "10 parsecs", "0", "-1 MiB", "1e400"] {
        assert!(parse_size(bad).is_err(), "{bad}");
    }
}

/// A family cubin (`sm_100f`) is one candidate among the others. For kernels that need
/// Blackwell's architecture-specific features (built `a` or `f`, no plain cubin), where the
/// budget holds one Blackwell cubin it is the family cubin, which runs on CC 10.0 and 10.3
/// (section 2), not `sm_100a`, which runs on 10.0 alone.
#[test]
fn a_family_cubin_is_chosen_where_it_covers_more_for_its_bytes() {
    let cubin = |t: &str| Candidate {
        target: target(t),
        ptx_isa: None,
        toolkit: None,
        bytes: [Some(1_000_000), None, None],
    };
    let candidates = vec![
        cubin("sm_90"),
        cubin("sm_100a"),
        cubin("sm_103a"),
        cubin("sm_100f"),
    ];
    let cc = |s: &str| s.parse::<Cc>().unwrap();
    let two = plan(&candidates, &goal(2_100_000), Policy::default()).unwrap();
    assert_eq!(names(&two.best), "sm_90 sm_100f none", "{two:?}");
    for blackwell in ["10.0", "10.3"] {
        assert!(two.best.native.contains(&cc(blackwell)), "{two:?}");
    }
    // The cheaper choice loses Blackwell; with sm_100a alone, CC 10.3 runs nothing.
    let one = plan(&candidates, &goal(1_100_000), Policy::default()).unwrap();
    assert_eq!(names(&one.best), "sm_100f none", "{one:?}");
    // Where three fit, each Blackwell GPU gets a cubin built for exactly it.
    let three = plan(&candidates, &goal(3_100_000), Policy::default()).unwrap();
    for blackwell in ["10.0", "10.3"] {
        assert!(three.best.exact.contains(&cc(blackwell)), "{three:?}");
    }
    assert!(three.best.targets.contains(target("sm_103a")), "{three:?}");
}

/// A cubin's toolkit sets a driver floor of its own: under a CUDA 12.2 driver a cubin from
/// CUDA 13.2 runs on none of the GPUs that driver knows (minor version compatibility holds
/// within a CUDA major only), where one from CUDA 12.9 runs; a GPU newer than the driver is
/// judged by architecture (its users have a newer driver).
#[test]
fn a_cubin_from_a_newer_cuda_than_the_driver_does_not_count() {
    let cubin = |t: &str, cuda: &str| Candidate {
        target: target(t),
        ptx_isa: None,
        toolkit: cuda.parse().ok(),
        bytes: [Some(1_000_000), None, None],
    };
    let candidates = vec![
        cubin("sm_80", "13.2"),
        cubin("sm_70", "12.9"),
        cubin("sm_120", "13.2"),
    ];
    let goal = Goal {
        driver: "535.104.05".parse().ok(),
        ..goal(100_000_000)
    };
    let p = plan(&candidates, &goal, Policy::default()).unwrap();
    let cc = |s: &str| s.parse::<Cc>().unwrap();
    assert!(p.best.none.contains(&cc("8.0")), "{p:?}");
    assert!(p.best.native.contains(&cc("7.0")), "{p:?}");
    assert!(p.best.native.contains(&cc("12.0")), "{p:?}");
    assert!(!p.best.targets.contains(target("sm_80")), "{p:?}");
    // Required on such a driver: no cubin can serve it.
    let required = Goal {
        native: vec![cc("8.0")],
        ..goal.clone()
    };
    assert!(plan(&candidates, &required, Policy::default()).is_err());
    // Without a driver floor, the sm_80 cubin counts.
    let p = plan(&candidates, &goal_without_driver(), Policy::default()).unwrap();
    assert!(p.best.native.contains(&cc("8.0")), "{p:?}");
}

fn goal_without_driver() -> Goal {
    goal(100_000_000)
}
