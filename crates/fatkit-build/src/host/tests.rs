use super::*;
use fatkit_arch::notation::{parse_any, Context};

fn profile(name: &str, targets: &str) -> fatkit_arch::profile::Profile {
    fatkit_arch::profile::Profile {
        name: name.into(),
        description: String::new(),
        targets: parse_any(targets, &Context::default()).unwrap(),
        extra: TargetSet::new(),
        compress: fatkit_arch::profile::Compression::None,
        budget: None,
        min_cuda: None,
        pins: Default::default(),
    }
}

fn targets(s: &str) -> TargetSet {
    parse_any(s, &Context::default()).unwrap()
}

#[test]
fn a_cross_build_is_refused_naming_both_targets() {
    assert_eq!(
        cross_refusal("rotary", "aarch64-unknown-linux-gnu", "x86_64-unknown-linux-gnu").unwrap(),
        "compile_library(\"rotary\"): building for aarch64-unknown-linux-gnu on x86_64-unknown-linux-gnu: nvcc compiles host code for the machine it runs on, so the library would not link; build on the aarch64-unknown-linux-gnu machine itself (with its nvcc), or use Build::compile, whose modules load on any host"
    );
    assert_eq!(
        cross_refusal(
            "rotary",
            "x86_64-unknown-linux-gnu",
            "x86_64-unknown-linux-gnu"
        ),
        None
    );
}

#[test]
fn host_code_for_a_target_only_nvrtc_builds_is_refused_naming_file_line_and_fixes() {
    let full = profile("full", "sm_70 sm_75 sm_80 sm_90 sm_120 compute_120");
    let at = (
        PathBuf::from("src/rotary.cu"),
        42,
        "a kernel launch (<<<...>>>) is host code".to_owned(),
    );
    let nvcc13 = (
        "nvcc 13.2 (provisioned)".to_owned(),
        targets("sm_75 sm_80 sm_90 sm_120 compute_120"),
    );
    let nvccs = std::slice::from_ref(&nvcc13);
    let missing = without_nvcc(&full, nvccs);
    assert_eq!(missing, targets("sm_70"));
    let message = host_code_refusal(&full, &at, &missing, nvccs, true);
    assert_eq!(
        message,
        "src/rotary.cu:42: a kernel launch (<<<...>>>) is host code, and no nvcc found builds sm_70 of profile full (nvcc 13.2 does not; found: nvcc 13.2 (provisioned)); NVRTC, the only other compiler for sm_70, compiles device code only; fix: let fatkit provision Debian's nvcc 12.4 (`fatkit toolchain install --cuda 12.4`, or a build that is not offline; this one is), install a CUDA toolkit whose nvcc builds sm_70 (CUDA 12.x for sm_70; fatkit finds it through FATKIT_NVCC, CUDA_HOME, PATH or /usr/local/cuda-*), or put the host code under `#ifndef __CUDACC_RTC__` ... `#endif` so that NVRTC builds sm_70 from the device code, or use a profile without sm_70 (such as `modern`)"
    );
    // Nothing found at all: the provisioned nvcc would still build all but sm_70.
    assert_eq!(without_nvcc(&full, &[]), targets("sm_70"));
    assert!(host_code_refusal(&full, &at, &missing, &[], false).contains("found: none"));
    // A target CUDA 12.4 does not build either (sm_35): no provisioning is offered.
    let old = profile("old", "sm_35 sm_80");
    let missing = without_nvcc(&old, &[]);
    assert_eq!(missing, targets("sm_35"));
    assert!(!host_code_refusal(&old, &at, &missing, &[], false).contains("provision"));
    // An nvcc of CUDA 11.8 builds sm_70: nothing is refused.
    let nvcc118 = (
        "nvcc 11.8 (Debian)".to_owned(),
        targets("sm_70 sm_75 sm_80 sm_90"),
    );
    assert!(without_nvcc(&full, &[nvcc13, nvcc118]).is_empty());
    // A profile the provisioned nvcc builds whole.
    assert!(without_nvcc(&profile("modern", "sm_80 sm_90 sm_120"), &[]).is_empty());
}

/// A source with host code never has NVRTC provisioned for it (NVRTC compiles no host
/// code; a new user's first build downloaded it for nothing); one without host code
/// (guarded, or none) keeps the module route's provisioning. With a profile every found
/// or default nvcc builds, nothing is provisioned either way.
#[test]
fn host_code_provisions_no_nvrtc() {
    let dir = std::env::temp_dir().join(format!("fatkit-host-nvrtc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let host = dir.join("host.cu");
    std::fs::write(
        &host,
        "__global__ void k(float* x) { x[0] = 1.0f; }\nvoid run(float* x) { k<<<1, 1>>>(x); }\n",
    )
    .unwrap();
    let device = dir.join("device.cu");
    std::fs::write(
        &device,
        "__global__ void k(float* x) { x[0] = 1.0f; }\n#ifndef __CUDACC_RTC__\nvoid run(float* x) { k<<<1, 1>>>(x); }\n#endif\n",
    )
    .unwrap();
    let modern = profile("modern", "sm_80 sm_90 sm_120");
    let mut log = |line: String| panic!("nothing is provisioned here: {line}");
    assert_eq!(
        nvcc_for_host_code(&modern, std::slice::from_ref(&host), false, &mut log).unwrap(),
        NvrtcUse::FoundOnly
    );
    assert_eq!(
        nvcc_for_host_code(&modern, std::slice::from_ref(&device), false, &mut log).unwrap(),
        NvrtcUse::Provision
    );
    // One source with host code among others decides for the library.
    assert_eq!(
        nvcc_for_host_code(&modern, &[device, host], true, &mut log).unwrap(),
        NvrtcUse::FoundOnly
    );
    let _ = std::fs::remove_dir_all(&dir);
}
