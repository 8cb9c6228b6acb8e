//! Without a GPU or driver the demo says so in one line and exits non-zero, without panicking.

#[test]
fn exits_non_zero_with_one_line_without_a_gpu() {
    if fatkit_runtime::cuda::driver_present() {
        eprintln!("skipped: this machine has an NVIDIA driver; the GPU tests cover it");
        return;
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fatkit-demo"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("fatkit-demo: no NVIDIA driver: libcuda.so could not be loaded"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"));
}

/// The embedded modules hold every kernel of cuda-src for every target of the profile.
#[test]
fn embedded_modules_cover_the_profile() {
    let modules = fatkit_demo::Modules::embedded().unwrap();
    let h100 = fatkit_runtime::Device::new("9.0".parse().unwrap(), None).named("H100");
    let rtx5090 =
        fatkit_runtime::Device::new("12.0".parse().unwrap(), Some("595.45.04".parse().unwrap()))
            .named("RTX 5090");
    for m in modules.all() {
        assert!(m.kernel_names().count() >= 1, "{}", m.name());
        for d in [&h100, &rtx5090] {
            let plan = m.check(d).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                plan.kernels
                    .iter()
                    .all(|(_, r)| r.as_ref().is_ok_and(|s| !s.jit)),
                "{} on {}: {plan:?}",
                m.name(),
                d.name
            );
        }
    }
    assert_eq!(
        modules.softmax.kernel_names().collect::<Vec<_>>(),
        ["softmax_bf16", "softmax_f16", "softmax_f32"]
    );
}

/// Every launch the demo makes, checked without a GPU against the parameters the build read
/// from the kernels' images; and a wrong declaration refused, naming kernel, parameter and
/// both sizes.
#[test]
fn every_launch_signature_fits_its_kernel() {
    use fatkit_demo::signatures::*;
    let m = fatkit_demo::Modules::embedded().unwrap();
    let checks = [
        m.saxpy.check_args::<Saxpy<'_>>("saxpy"),
        m.saxpy.check_args::<SaxpyParams<'_>>("saxpy_params"),
        m.reduce.check_args::<Sum<'_>>("reduce_sum_f32"),
        m.cluster_sum.check_args::<Sum<'_>>("cluster_sum_f32"),
        m.matmul.check_args::<Matmul<'_>>("matmul_f32"),
        m.softmax.check_args::<Softmax<'_, f32>>("softmax_f32"),
        m.softmax.check_args::<Softmax<'_, u16>>("softmax_f16"),
        m.softmax.check_args::<Softmax<'_, u16>>("softmax_bf16"),
        m.rmsnorm.check_args::<Rmsnorm<'_, f32>>("rmsnorm_f32"),
        m.rmsnorm.check_args::<Rmsnorm<'_, u16>>("rmsnorm_f16"),
        m.rmsnorm.check_args::<Rmsnorm<'_, u16>>("rmsnorm_bf16"),
    ];
    for c in &checks {
        assert!(c.is_ok(), "{}", c.as_ref().unwrap_err());
    }
    // Every kernel of every module is launched by the demo.
    let launched: usize = m.all().iter().map(|m| m.kernel_names().count()).sum();
    assert_eq!(launched, checks.len());
    // n as usize: 8 bytes where saxpy takes a 4-byte int.
    type Wrong<'a> = (
        usize,
        f32,
        &'a cudarc::driver::CudaSlice<f32>,
        &'a mut cudarc::driver::CudaSlice<f32>,
    );
    let err = m.saxpy.check_args::<Wrong<'_>>("saxpy").unwrap_err();
    assert_eq!(
        err.to_string(),
        "kernel 'saxpy' of module 'saxpy': parameter 0 (at byte 0) is 4 bytes, the launch gives 8 (usize); expected sizes 4, 4, 8, 8; given 8, 4, 8, 8"
    );
    let err = m.matmul.check_args::<Sum<'_>>("matmul_f32").unwrap_err();
    assert!(
        err.to_string().starts_with(
            "kernel 'matmul_f32' of module 'matmul' takes 6 parameter(s), the launch gives 3"
        ),
        "{err}"
    );
}
