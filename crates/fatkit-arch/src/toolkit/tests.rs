use super::*;

fn v(s: &str) -> CudaVersion {
    s.parse().unwrap()
}

fn names(set: &TargetSet) -> String {
    set.to_string()
}

#[test]
fn host_compiler_limits() {
    assert_eq!(max_gcc(v("10.2")), 8);
    assert_eq!(max_gcc(v("11.0")), 9);
    assert_eq!(max_gcc(v("11.3")), 10);
    assert_eq!(max_gcc(v("11.8")), 11);
    assert_eq!(max_gcc(v("12.3")), 12);
    assert_eq!(max_gcc(v("12.7")), 13);
    assert_eq!(max_gcc(v("12.9")), 14);
    assert_eq!(max_gcc(v("13.2")), 15);
    assert!(HOST_COMPILER_LIMITS
        .windows(2)
        .all(|w| w[0].from < w[1].from));
}

#[test]
fn parses_versions() {
    assert_eq!(v("12.8"), CudaVersion::new(12, 8));
    assert_eq!(v("V13.0.88"), CudaVersion::new(13, 0));
    assert_eq!(CudaVersion::from_api(12080), Some(v("12.8")));
    assert_eq!(v("12.9").to_api(), 12090);
    for bad in ["12", "12.", "12.x", "0.1", "12.10", "1.2.3.4", "12.8.x"] {
        assert!(bad.parse::<CudaVersion>().is_err(), "{bad}");
    }
}

#[test]
fn cuda_13_drops_volta_and_adds_thor() {
    let t13 = targets_of(v("13.0"));
    let t129 = targets_of(v("12.9"));
    let sm = |s: &str| s.parse::<Target>().unwrap();
    assert!(!t13.contains(sm("sm_70")) && t129.contains(sm("sm_70")));
    assert!(t13.contains(sm("sm_110")) && !t129.contains(sm("sm_110")));
    assert!(!t13.contains(sm("sm_101")) && t129.contains(sm("sm_101f")));
    assert!(t13.contains(sm("compute_88")));
    assert!(!targets_of(v("12.8")).contains(sm("sm_100f")));
    assert!(!targets_of(v("11.8")).contains(sm("sm_90a")));
    assert!(targets_of(v("13.4")).contains(sm("sm_107f")));
}

#[test]
fn cmake_all_lists_match_arch_rules() {
    let all = all_targets(v("13.0"));
    assert_eq!(
        names(&all),
        "sm_75 sm_80 sm_86 sm_87 sm_88 sm_89 sm_90 sm_100 sm_103 sm_110 sm_120 sm_121 compute_121"
    );
    assert_eq!(
        names(&all_major_targets(v("13.0"))),
        "sm_75 sm_80 sm_90 sm_100 sm_110 sm_120 compute_120"
    );
}

#[test]
fn isa_to_toolkit() {
    assert_eq!(
        toolkit_for_isa(PtxIsa::new(9, 0)).unwrap().version,
        v("13.0")
    );
    // 8.6 was never shipped in a GA toolkit: the next one is the minimum.
    assert_eq!(
        toolkit_for_isa(PtxIsa::new(8, 6)).unwrap().version,
        v("12.8")
    );
    assert_eq!(
        toolkit_for_isa(PtxIsa::new(8, 5)).unwrap().version,
        v("12.5")
    );
    assert!(toolkit_for_isa(PtxIsa::new(9, 9)).is_none());
    assert!(toolkit_for_isa(PtxIsa::new(9, 4))
        .unwrap()
        .min_driver
        .is_none());
    assert_eq!(
        toolkit_for_isa(PtxIsa::new(9, 3))
            .unwrap()
            .min_driver
            .map(|d| d.to_string()),
        Some("610.43.02".to_owned())
    );
}

#[test]
fn suggestions_stay_close() {
    let sm = |s: &str| s.parse::<Target>().unwrap();
    let got: Vec<String> = suggest(sm("sm_91")).iter().map(|t| t.to_string()).collect();
    assert_eq!(got, ["sm_90", "sm_90a"]);
    let got: Vec<String> = suggest(sm("sm_122"))
        .iter()
        .map(|t| t.to_string())
        .collect();
    assert_eq!(got, ["sm_121", "sm_120", "sm_121f"]);
}

#[test]
fn every_known_target_has_a_toolkit() {
    for t in known_targets().iter() {
        assert!(!toolkits_for(t).is_empty(), "{t}");
    }
}
