use fatkit_arch::products::PRODUCTS;
use fatkit_arch::rules::{self, Status};

use super::*;

/// An owned `ImageRow`, before it is leaked.
type OwnedRow = (String, Option<(u8, u8)>, Vec<&'static str>);

/// A module image list, leaked to 'static as generated code has it.
fn leak(images: Vec<OwnedRow>) -> &'static [ImageRow] {
    let v: Vec<ImageRow> = images
        .into_iter()
        .map(|(t, isa, k)| {
            (
                &*Box::leak(t.into_boxed_str()),
                isa,
                &*Box::leak(k.into_boxed_slice()),
            )
        })
        .collect();
    Box::leak(v.into_boxed_slice())
}

fn module(images: &[ImageRow]) -> Module {
    let images = leak(
        images
            .iter()
            .map(|(t, i, k)| (t.to_string(), *i, k.to_vec()))
            .collect(),
    );
    Module::new("test", &[], images).unwrap()
}

fn device(cc: &str, driver: Option<&str>, name: &str) -> Device {
    Device::new(cc.parse().unwrap(), driver.map(|d| d.parse().unwrap())).named(name)
}

/// For every GPU in the product table, every shipped profile and a few drivers, the plan
/// agrees with fatkit-arch's rules kernel by kernel, including a kernel only some images hold.
#[test]
fn check_agrees_with_the_rules_for_every_product_and_profile() {
    let set = fatkit_build::ProfileSet::built_in();
    assert!(set.entries.len() >= 6);
    let mut n_checked = 0;
    for (name, origin) in &set.entries {
        let profile = origin.load().unwrap();
        let isa = profile
            .assumed_toolkit()
            .and_then(fatkit_arch::toolkit::toolkit)
            .and_then(|t| t.ptx_isa)
            .map(|i| (i.major, i.minor));
        // Kernel `all` is in every image; kernel `old` only in the cubins below sm_90.
        let images: Vec<OwnedRow> = profile
            .targets
            .iter()
            .map(|t| {
                let kernels = if t.is_cubin() && t.cc < Cc::new(9, 0) {
                    vec!["all", "old"]
                } else {
                    vec!["all"]
                };
                (t.to_string(), if t.is_ptx() { isa } else { None }, kernels)
            })
            .collect();
        let m = Module::new("profile", &[], leak(images.clone())).unwrap();
        for product in PRODUCTS {
            for driver in [None, Some("575.51"), Some("600")] {
                let dev = device(&product.cc.to_string(), driver, product.name);
                let plan = m.plan(&dev);
                for kernel in ["all", "old"] {
                    let rule_images: Vec<rules::Image> = images
                        .iter()
                        .filter(|(_, _, k)| k.contains(&kernel))
                        .map(|(t, i, _)| {
                            let t: Target = t.parse().unwrap();
                            if t.is_ptx() {
                                rules::Image::ptx(t, i.map(|(a, b)| PtxIsa::new(a, b)))
                            } else {
                                rules::Image::cubin(t)
                            }
                        })
                        .collect();
                    if rule_images.is_empty() {
                        assert_eq!(plan.kernel(kernel), None, "{name}: {kernel} is in no image");
                        continue;
                    }
                    let verdict = rules::select(
                        &rule_images,
                        &Device::new(dev.cc, dev.driver),
                        Policy::default(),
                    );
                    let ours = plan.kernel(kernel).unwrap();
                    match (&verdict.selection, ours) {
                        (Ok(sel), Ok(s)) => assert_eq!(rule_images[sel.image()].target, s.target, "{name} {} {kernel}", product.name),
                        (Err(e), Err(f)) => assert_eq!(e.code(), f.code, "{name} {} {kernel}", product.name),
                        _ => panic!("{name} on {} ({driver:?}), kernel {kernel}: rules {:?}, check {ours:?}", product.name, verdict.selection),
                    }
                    assert_eq!(verdict.status() == Status::Fails, ours.is_err());
                    n_checked += 1;
                }
            }
        }
    }
    assert!(n_checked > 2500, "{n_checked}");
}

#[test]
fn error_for_an_rtx_5090_without_an_image() {
    let m = module(&[
        ("sm_75", None, &["saxpy", "softmax_f32"]),
        ("sm_80", None, &["saxpy", "softmax_f32"]),
        ("sm_90a", None, &["saxpy"]),
        ("sm_90", None, &["saxpy", "softmax_f32"]),
    ]);
    let err = m
        .check(&device(
            "12.0",
            Some("570.86.10"),
            "NVIDIA GeForce RTX 5090",
        ))
        .unwrap_err();
    expect_test::expect![[r#"
        module 'test' cannot run 2 of its 2 kernel(s) on NVIDIA GeForce RTX 5090 (compute capability 12.0, driver 570.86.10)
          the module has: sm_75, sm_80, sm_90a, sm_90
          saxpy: CUDA_ERROR_NO_BINARY_FOR_GPU (209)
            - sm_75 cubin runs only on CC 7.x at or above 7.5; a cubin never runs on another major
            - sm_80 cubin runs only on CC 8.x at or above 8.0; a cubin never runs on another major
            - sm_90a is arch-specific: it runs only on CC 9.0
            - sm_90 cubin runs only on CC 9.x at or above 9.0; a cubin never runs on another major
          softmax_f32: CUDA_ERROR_NO_BINARY_FOR_GPU (209)
            - sm_75 cubin runs only on CC 7.x at or above 7.5; a cubin never runs on another major
            - sm_80 cubin runs only on CC 8.x at or above 8.0; a cubin never runs on another major
            - sm_90 cubin runs only on CC 9.x at or above 9.0; a cubin never runs on another major
          fix: rebuild with sm_120 in the arch profile (`cargo xtask build-kernels --profile P`; `cargo xtask profiles show P --gpu 12.0` says which profiles cover it)"#]]
    .assert_eq(&err.to_string());
}

#[test]
fn error_for_ptx_too_new_for_the_driver() {
    let m = module(&[
        ("sm_90", None, &["rmsnorm_f16"]),
        ("compute_90", Some((9, 2)), &["rmsnorm_f16"]),
    ]);
    let err = m
        .check(&device("12.0", Some("575.51"), "NVIDIA GeForce RTX 5080"))
        .unwrap_err();
    expect_test::expect![[r#"
        module 'test' cannot run 1 of its 1 kernel(s) on NVIDIA GeForce RTX 5080 (compute capability 12.0, driver 575.51)
          the module has: sm_90, compute_90 (PTX ISA 9.2)
          rmsnorm_f16: CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222)
            - sm_90 cubin runs only on CC 9.x at or above 9.0; a cubin never runs on another major
            - compute_90 PTX: PTX ISA 9.2 needs driver >= 595.45.04 (CUDA 13.2); driver is 575.51
          fix: update the driver (PTX ISA 9.2 needs driver >= 595.45.04 (CUDA 13.2)), or rebuild with sm_120 in the arch profile (`cargo xtask build-kernels --profile P`; `cargo xtask profiles show P --gpu 12.0` says which profiles cover it)"#]]
    .assert_eq(&err.to_string());
    // With a new enough driver the PTX is JIT-compiled.
    let plan = m
        .check(&device("12.0", Some("595.45.04"), "RTX 5080"))
        .unwrap();
    assert_eq!(
        plan.kernel("rmsnorm_f16"),
        Some(&Ok(Selected {
            target: "compute_90".parse().unwrap(),
            jit: true,
            unverified_ptx: None
        }))
    );
}

#[test]
fn one_uncovered_kernel_does_not_hide_the_others() {
    let m = module(&[("sm_80", None, &["a", "b"]), ("sm_120", None, &["a"])]);
    let plan = m.plan(&device("12.0", None, "RTX 5090"));
    assert!(plan.kernel("a").unwrap().is_ok());
    assert_eq!(plan.kernel("b").unwrap().as_ref().unwrap_err().code, 209);
    assert_eq!(plan.kernel("c"), None);
    let b = m.kernel_index("b").unwrap();
    assert_eq!(plan.kernel_at(b), plan.kernel("b"));
    assert_eq!(m.kernel_index("c"), None);
    assert!(m.with_plan(&device("12.0", None, "RTX 5090"), |p| p
        .kernel_at(b)
        .unwrap()
        .is_err()));
    assert!(m.check(&device("8.6", None, "A10")).is_ok());
}

#[test]
fn plans_are_made_once_per_device() {
    let m = module(&[("sm_80", None, &["a"])]);
    let dev = device("8.0", None, "A100");
    let first = m.plan(&dev);
    assert!(Arc::ptr_eq(&first, &m.plan(&dev)));
    let other = m.plan(&device("8.6", None, "A10"));
    assert!(!Arc::ptr_eq(&first, &other));
    assert!(Arc::ptr_eq(&other, &m.plan(&device("8.6", None, "A10"))));
}

#[test]
fn a_manifest_from_another_version_is_an_error() {
    let images = leak(vec![("sm_9000".to_owned(), None, vec!["a"])]);
    let err = Module::new("m", &[], images).unwrap_err();
    assert!(
        err.to_string().contains("'sm_9000' is not a target"),
        "{err}"
    );
}

#[test]
fn no_driver_is_an_error_not_a_panic() {
    if crate::cuda::driver_present() {
        return; // a machine with a GPU: the GPU tests cover it
    }
    let err = crate::cuda::devices().unwrap_err();
    assert!(
        err.to_string()
            .starts_with("no NVIDIA driver: libcuda.so could not be loaded"),
        "{err}"
    );
}

/// A bf16 kernel declared for sm_80 and up: a V100 runs the rest of the module, and only that
/// kernel is refused, saying it was declared; undeclared, the same images fail the check.
#[test]
fn a_declared_kernel_is_refused_alone() {
    let images: &[ImageRow] = &[
        ("sm_70", None, &["add", "scale"]),
        ("sm_80", None, &["add", "rmsnorm_bf16", "scale"]),
        ("sm_90", None, &["add", "rmsnorm_bf16", "scale"]),
        (
            "compute_90",
            Some((8, 8)),
            &["add", "rmsnorm_bf16", "scale"],
        ),
    ];
    let v100 = device("7.0", Some("580.65"), "simulated V100");
    let declared = module(images)
        .with_declared("fatkit:declared:v1;module=test;rmsnorm_bf16=sm_80,sm_90,compute_90;end;");
    assert_eq!(
        declared.declared("rmsnorm_bf16"),
        Some("sm_80,sm_90,compute_90")
    );
    let plan = declared.check(&v100).unwrap();
    assert!(matches!(plan.kernel("add"), Some(Ok(s)) if s.target.to_string() == "sm_70"));
    assert!(matches!(plan.kernel("scale"), Some(Ok(_))));
    let failure = plan.kernel("rmsnorm_bf16").unwrap().clone().unwrap_err();
    assert_eq!(failure.declared, Some("sm_80,sm_90,compute_90"));
    assert_eq!(failure.code, 209);
    assert_eq!(plan.failures().count(), 1);
    // An H100 runs all three.
    assert!(declared
        .check(&device("9.0", Some("580.65"), "H100"))
        .unwrap()
        .failures()
        .next()
        .is_none());
    // A Pascal GPU runs nothing: the check fails, naming every kernel.
    let err = declared
        .check(&device("6.1", Some("580.65"), "GTX 1080"))
        .unwrap_err();
    assert_eq!(err.plan.failures().count(), 3);
    assert!(
        err.to_string()
            .contains("declared for sm_80,sm_90,compute_90 only by the kernel's source"),
        "{err}"
    );
    // Without the declaration, the V100 check fails for the module.
    let err = module(images).check(&v100).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("module 'test' cannot run 1 of its 3 kernel(s) on simulated V100"),
        "{err}"
    );
}
