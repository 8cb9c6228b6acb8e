//! The cc-built binary's `.nv_fatbin` section covers every target of its profile, read by
//! fatkit's audit; and without a GPU the binary fails in one line.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use fatkit_fatbin::coverage;
use fatkit_fatbin::inspect::{inspect, Depth};
use fatkit_fatbin::{Limits, Origin};

#[test]
fn final_binary_covers_the_profile_through_nv_fatbin() {
    let exe = env!("CARGO_BIN_EXE_fatkit-cc-demo");
    let data = std::fs::read(exe).unwrap();
    let report = inspect("fatkit-cc-demo", &data, Depth::Kernels, &Limits::default());
    assert!(report.all_errors().is_empty(), "{:?}", report.all_errors());
    assert!(report
        .containers
        .iter()
        .any(|c| c.origin == Origin::Section(".nv_fatbin".into())));
    let profile = fatkit_build::ProfileSet::built_in()
        .load("consumer")
        .unwrap();
    let kernels = coverage::kernels(&report);
    assert!(
        kernels.iter().any(|k| k.name.contains("scale_kernel")),
        "{:?}",
        kernels.iter().map(|k| &k.name).collect::<Vec<_>>()
    );
    let gaps = coverage::require(&kernels, &profile.targets, fatkit_arch::Policy::default());
    assert!(gaps.is_empty(), "{gaps:?}");
}

#[test]
fn without_a_gpu_it_fails_in_one_line() {
    if Path::new("/dev/nvidiactl").exists() {
        return; // a GPU machine
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fatkit-cc-demo"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("fatkit-cc-demo: CUDA error"), "{stderr}");
}
