//! The binary linking the host-code library (`Build::compile_library`) registers one fatbin
//! that covers every target of `full`, sm_70 (which CUDA 13's nvcc no longer builds) to
//! sm_120, read by fatkit's audit; and without a GPU the binary fails in one line.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use fatkit_audit::coverage;
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
    let profile = fatkit_package::profile::ProfileSet::built_in()
        .load("full")
        .unwrap();
    let kernels = coverage::kernels(&report);
    assert!(
        kernels.iter().any(|k| k.name.contains("scale_kernel")),
        "{:?}",
        kernels.iter().map(|k| &k.name).collect::<Vec<_>>()
    );
    let gaps = coverage::require(
        &kernels,
        &profile.all_targets(),
        fatkit_arch::Policy::default(),
    );
    assert!(gaps.is_empty(), "{gaps:?}");
    // One container: the one the host stub registers.
    let sections: Vec<_> = report
        .containers
        .iter()
        .filter(|c| c.origin == Origin::Section(".nv_fatbin".into()))
        .collect();
    assert_eq!(sections.len(), 1);
    let mut images: Vec<String> = sections[0]
        .entries
        .iter()
        .filter_map(|e| e.target.map(|t| t.to_string()))
        .collect();
    images.sort();
    let mut want: Vec<String> = profile
        .all_targets()
        .iter()
        .map(|t| t.to_string())
        .collect();
    want.sort();
    assert_eq!(images, want);
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

/// The check before the first launch answers from the library's own fatbin (the generated
/// module's `FATBIN` is the symbol the library defines at its `.nv_fatbin`, not a copy): a V100
/// and an RTX 5090 run every kernel; a Jetson Thor (CC 11.0, not in `full`) runs none, and the
/// answer names the kernel and the driver's error.
#[test]
fn the_check_before_launch_answers_for_simulated_gpus() {
    let run = |gpus: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_fatkit-cc-demo"))
            .arg("--check")
            .args(gpus)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, text) = run(&["V100", "RTX 5090"]);
    assert_eq!(
        (code, text.as_str()),
        (
            Some(0),
            "V100 (CC 7.0): every kernel of scale runs\nGeForce RTX 5090 (CC 12.0): every kernel of scale runs\n"
        )
    );
    let (code, text) = run(&["Jetson Thor"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.starts_with(
            "Jetson T5000 (CC 11.0): module 'scale' cannot run any of its 1 kernel(s)"
        ),
        "{text}"
    );
    assert!(
        text.contains("scale_kernel: CUDA_ERROR_NO_BINARY_FOR_GPU (209)"),
        "{text}"
    );
}

/// No copy of the fatbin in the binary: the one `.nv_fatbin` container is all there is.
#[test]
fn the_binary_holds_the_fatbin_once() {
    let data = std::fs::read(env!("CARGO_BIN_EXE_fatkit-cc-demo")).unwrap();
    let report = inspect("fatkit-cc-demo", &data, Depth::Kernels, &Limits::default());
    assert_eq!(report.containers.len(), 1, "{:?}", report.containers);
}

/// The library records the runtime it links (CUDA 13.2's, static, unless FATKIT_NVCC names
/// another nvcc) in a section linking keeps; audit reads it from the binary and says what it
/// needs of the driver: on a driver older than that runtime's major nothing runs, whatever the
/// images (docs/ARCH_RULES.md section 3), and a new enough driver changes nothing.
#[test]
fn the_binary_says_which_runtime_it_links_and_an_older_driver_runs_nothing() {
    use fatkit_arch::driver::DriverVersion;
    use fatkit_arch::rules::Device;
    use fatkit_audit::summary::{self, Answer};
    use fatkit_fatbin::runtime::Linking;

    let data = std::fs::read(env!("CARGO_BIN_EXE_fatkit-cc-demo")).unwrap();
    let report = inspect("fatkit-cc-demo", &data, Depth::Kernels, &Limits::default());
    let runtimes = report.all_runtimes();
    assert_eq!(runtimes.len(), 1, "{runtimes:?}");
    let rt = &runtimes[0];
    assert_eq!(
        (rt.linking, rt.from.as_str()),
        (Linking::Static, "fatkit's record")
    );
    let major = rt.cuda.major;
    let v100 = |driver: &str| {
        Device::new(
            "7.0".parse().unwrap(),
            Some(driver.parse::<DriverVersion>().unwrap()),
        )
        .named("V100")
    };
    // As `cuDriverGetVersion` gives them: the newest CUDA the driver supports.
    let devices = [
        v100(&format!("{}.8", major - 1)),
        v100(&format!("{major}.0")),
    ];
    let lib = summary::library(
        "fatkit-cc-demo".to_owned(),
        None,
        &report,
        &Default::default(),
        &devices,
        fatkit_arch::Policy::default(),
        summary::Held::General,
    );
    assert_eq!(lib.runtimes.len(), 1);
    assert!(
        lib.runtimes[0]
            .what
            .to_string()
            .starts_with(&format!("the CUDA {} runtime, linked statically", rt.cuda)),
        "{:?}",
        lib.runtimes
    );
    let (old, new) = (&lib.on[0], &lib.on[1]);
    assert_eq!(old.answer, Answer::No, "{old:?}");
    assert_eq!(old.run, 0);
    let problem = old.runtime_problem.as_ref().unwrap().to_string();
    assert!(
        problem.contains("cudaErrorInsufficientDriver (35)"),
        "{problem}"
    );
    assert_eq!(new.answer, Answer::Runs, "{new:?}");
    assert_eq!(new.runtime_problem, None);
}
