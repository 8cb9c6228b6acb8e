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
