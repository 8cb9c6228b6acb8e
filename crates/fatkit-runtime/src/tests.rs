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

pub(crate) fn fake_fatbin(targets: &[&str]) -> Vec<u8> {
    let targets: Vec<Target> = targets.iter().map(|t| t.parse().unwrap()).collect();
    crate::fatbin::placeholder(&targets)
}

fn fatbin_for(images: &[ImageRow]) -> &'static [u8] {
    let targets: Vec<&str> = images.iter().map(|(t, _, _)| *t).collect();
    Box::leak(fake_fatbin(&targets).into_boxed_slice())
}

fn module(images: &[ImageRow]) -> Module {
    let images = leak(
        images
            .iter()
            .map(|(t, i, k)| (t.to_string(), *i, k.to_vec()))
            .collect(),
    );
    Module::new("test", fatbin_for(images), images).unwrap()
}

fn device(cc: &str, driver: Option<&str>, name: &str) -> Device {
    Device::new(cc.parse().unwrap(), driver.map(|d| d.parse().unwrap())).named(name)
}

/// For every GPU in the product table, every shipped profile and a few drivers, the plan
/// agrees with fatkit-arch's rules kernel by kernel, including a kernel only some images hold.
#[test]
fn check_agrees_with_the_rules_for_every_product_and_profile() {
    let set = fatkit_package::profile::ProfileSet::built_in();
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
        let rows = leak(images.clone());
        let m = Module::new("profile", fatbin_for(rows), rows).unwrap();
        for product in PRODUCTS {
            for driver in [None, Some("575.51"), Some("600")] {
                let dev = device(&product.cc.to_string(), driver, product.name);
                let plan = m.plan(&dev);
                for kernel in ["all", "old"] {
                    // The driver's model: one image for the module, the kernel found in it
                    // or not.
                    let all: Vec<rules::Image> = images
                        .iter()
                        .map(|(t, i, _)| {
                            let t: Target = t.parse().unwrap();
                            if t.is_ptx() {
                                rules::Image::ptx(t, i.map(|(a, b)| PtxIsa::new(a, b)))
                            } else {
                                rules::Image::cubin(t)
                            }
                        })
                        .collect();
                    let holders: Vec<usize> = images
                        .iter()
                        .enumerate()
                        .filter(|(_, (_, _, k))| k.contains(&kernel))
                        .map(|(i, _)| i)
                        .collect();
                    if holders.is_empty() {
                        assert_eq!(plan.kernel(kernel), None, "{name}: {kernel} is in no image");
                        continue;
                    }
                    let verdict =
                        rules::select(&all, &Device::new(dev.cc, dev.driver), Policy::default());
                    let ours = plan.kernel(kernel).unwrap();
                    match (&verdict.selection, ours) {
                        (Ok(sel), Ok(s)) => {
                            assert!(holders.contains(&sel.image()), "{name} {} {kernel}", product.name);
                            assert_eq!(all[sel.image()].target, s.target, "{name} {} {kernel}", product.name)
                        }
                        (Ok(sel), Err(f)) => {
                            assert!(!holders.contains(&sel.image()), "{name} {} {kernel}", product.name);
                            assert_eq!(f.code, 500, "{name} {} {kernel}", product.name)
                        }
                        (Err(e), Err(f)) => assert_eq!(e.code(), f.code, "{name} {} {kernel}", product.name),
                        _ => panic!("{name} on {} ({driver:?}), kernel {kernel}: rules {:?}, check {ours:?}", product.name, verdict.selection),
                    }
                    let fails = load::status(&verdict, &load::fate(&verdict, &holders, &[]))
                        == Status::Fails;
                    assert_eq!(fails, ours.is_err());
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
        module 'test' cannot run any of its 2 kernel(s) on NVIDIA GeForce RTX 5090 (compute capability 12.0, driver 570.86.10): the module was built for sm_75, sm_80, sm_90a, sm_90, none of which runs on compute capability 12.0
          saxpy, softmax_f32: CUDA_ERROR_NO_BINARY_FOR_GPU (209)
            - sm_75 cubin runs only on CC 7.x at or above 7.5; a cubin never runs on another major
            - sm_80 cubin runs only on CC 8.x at or above 8.0; a cubin never runs on another major
            - sm_90a is arch-specific: it runs only on CC 9.0
            - sm_90 cubin runs only on CC 9.x at or above 9.0; a cubin never runs on another major
          fix: use a build of this program (or of the crate that ships module 'test') made for sm_120; if you build it, add sm_120 to the targets of the module's profile (or a compute_ PTX target at or below 12.0)"#]]
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
        module 'test' cannot run any of its 1 kernel(s) on NVIDIA GeForce RTX 5080 (compute capability 12.0, driver 575.51): its driver is too old for the module's PTX (PTX ISA 9.2 needs driver >= 595.45.04 (CUDA 13.2))
          rmsnorm_f16: CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222)
            - sm_90 cubin runs only on CC 9.x at or above 9.0; a cubin never runs on another major
            - compute_90 PTX: PTX ISA 9.2 needs driver >= 595.45.04 (CUDA 13.2); driver is 575.51
          fix: update the NVIDIA driver (PTX ISA 9.2 needs driver >= 595.45.04 (CUDA 13.2)), or use a build of this program (or of the crate that ships module 'test') made for sm_120; if you build it, add sm_120 to the targets of the module's profile (or a compute_ PTX target at or below 12.0)"#]]
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
    // The driver loads the sm_120 cubin, which lacks b: the sm_80 cubin's b is not found.
    assert_eq!(plan.kernel("b").unwrap().as_ref().unwrap_err().code, 500);
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

/// A kernel's failure says itself whole (kernel, CUDA's error, why, the fix after a
/// semicolon), as an `Error`, and a `NotCovered` puts the module and GPU first.
#[test]
fn a_kernel_failure_says_what_why_and_the_fix() {
    let m = module(&[("sm_80", None, &["a", "b"]), ("sm_120", None, &["a"])]);
    let dev = device("12.0", None, "RTX 5090");
    let plan = m.plan(&dev);
    let b = plan.kernel("b").unwrap().clone().unwrap_err();
    let words = b.to_string();
    assert!(
        words.starts_with("kernel 'b' cannot run on this GPU: CUDA_ERROR_NOT_FOUND (500): ")
            && words.contains("; use a build whose image for this GPU holds the kernel"),
        "{words}"
    );
    assert!(!b.reasons.is_empty());
    for reason in &b.reasons {
        assert!(words.contains(reason.as_str()), "{words}");
    }
    let boxed: Box<dyn std::error::Error> = Box::new(b.clone());
    assert_eq!(boxed.to_string(), words);
    let nc = crate::cuda::NotCovered {
        module: "test",
        device: dev.clone(),
        failure: b,
    };
    assert_eq!(
        nc.to_string(),
        format!("module 'test' on {}: {words}", dev.describe())
    );

    // A C++ kernel is named as the build's `NAMES` read it, in every message; its symbol
    // stays what the plan is keyed by.
    let cpp = module(&[("sm_80", None, &["_Z5scaleIfEvPT_S0_"])])
        .with_names(&[("_Z5scaleIfEvPT_S0_", "scale<float>")]);
    let v100 = device("7.0", None, "V100");
    let failure = cpp
        .plan(&v100)
        .kernel("_Z5scaleIfEvPT_S0_")
        .unwrap()
        .clone()
        .unwrap_err();
    assert_eq!(failure.kernel, "_Z5scaleIfEvPT_S0_");
    assert!(failure
        .to_string()
        .starts_with("kernel 'scale<float>' cannot run"));
    let check = cpp.check(&v100).unwrap_err().to_string();
    assert!(
        check.contains("\n  scale<float>: ") && !check.contains("_Z5"),
        "{check}"
    );

    // A module's problem is an error of its own, its words without the module.
    let problem: &dyn std::error::Error = &ModuleProblem::NoImages;
    assert!(problem.to_string().starts_with("it lists no images: "));

    // No image for the GPU at all: the fix is a build for it.
    let old = module(&[("sm_80", None, &["a"])]);
    let plan = old.plan(&device("7.0", None, "V100"));
    let a = plan.kernel("a").unwrap().clone().unwrap_err();
    let words = a.to_string();
    assert!(
        words.starts_with(&format!("kernel 'a' cannot run on this GPU: {} ({}): ", a.error, a.code))
            && words.ends_with("; use a build made for this GPU's architecture; if you build it, add its sm_ target (or a lower compute_ PTX target) to the module's profile"),
        "{words}"
    );
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
    let err = Module::new("m", fatbin_for(&[("sm_80", None, &["a"])]), images).unwrap_err();
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
    let declared = module(images).with_declared(
        "fatkit:declared:v2;module=test;fatbin=1:1;rmsnorm_bf16=sm_80,sm_90,compute_90;end;",
    );
    assert_eq!(
        declared.declared("rmsnorm_bf16"),
        Some("sm_80,sm_90,compute_90")
    );
    let plan = declared.check(&v100).unwrap();
    assert!(matches!(plan.kernel("add"), Some(Ok(s)) if s.target.to_string() == "sm_70"));
    assert!(matches!(plan.kernel("scale"), Some(Ok(_))));
    let failure = plan.kernel("rmsnorm_bf16").unwrap().clone().unwrap_err();
    assert_eq!(failure.declared, Some("sm_80,sm_90,compute_90"));
    // The V100 loads the sm_70 cubin, which does not hold it.
    assert_eq!(failure.code, 500);
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

/// A V100 and a module of 40 kernels built for Turing and newer: the first line says what
/// does not run where and why, the kernels that fail alike are one group, and the fix speaks
/// to the application's user and the developer without naming a command of fatkit's own
/// repository.
#[test]
fn a_v100_refusal_is_short_and_addressed_to_who_sees_it() {
    let names: Vec<&'static str> = (0..40)
        .map(|i| &*Box::leak(format!("kernel_{i:02}").into_boxed_str()))
        .collect();
    let names: &'static [&'static str] = Box::leak(names.into_boxed_slice());
    let rows: Vec<ImageRow> = [
        "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120",
    ]
    .iter()
    .map(|t| (*t, None, names))
    .chain([("compute_120", Some((9, 2)), names)])
    .collect();
    let m = module(&rows);
    let err = m
        .check(&device("7.0", Some("580.65.06"), "Tesla V100-SXM2-16GB"))
        .unwrap_err()
        .to_string();
    let lines: Vec<&str> = err.lines().collect();
    assert!(lines.len() <= 12, "{} lines:\n{err}", lines.len());
    assert!(
        lines[0].starts_with("module 'test' cannot run any of its 40 kernel(s) on Tesla V100-SXM2-16GB (compute capability 7.0, driver 580.65.06): the module was built for sm_75, "),
        "{err}"
    );
    assert!(
        lines[1].contains("kernel_05 and 34 more: CUDA_ERROR_NO_BINARY_FOR_GPU (209)"),
        "{err}"
    );
    assert!(
        err.contains("made for sm_70; if you build it, add sm_70"),
        "{err}"
    );
    assert!(!err.contains("xtask") && !err.contains("cargo "), "{err}");
}

/// Bytes that are not a whole, valid fatbin holding the listed images never make a Module:
/// every truncation, garbage, a header declaring more than the slice, entries from another
/// build, no images, an image with no kernels.
#[test]
fn a_module_from_bad_bytes_is_an_error() {
    let rows: &'static [ImageRow] = &[
        ("sm_80", None, &["a"]),
        ("compute_90", Some((8, 8)), &["a"]),
    ];
    let good = fake_fatbin(&["sm_80", "compute_90"]);
    assert!(Module::new("m", Box::leak(good.clone().into_boxed_slice()), rows).is_ok());
    for len in 0..good.len() {
        let cut: &'static [u8] = Box::leak(good[..len].to_vec().into_boxed_slice());
        let err = Module::new("m", cut, rows).unwrap_err();
        assert!(
            matches!(err.problem, ModuleProblem::BadFatbin(_)),
            "{len}: {err}"
        );
    }
    let problem = |bytes: Vec<u8>, rows: &'static [ImageRow]| {
        Module::new("m", Box::leak(bytes.into_boxed_slice()), rows)
            .unwrap_err()
            .to_string()
    };
    let mut garbage = good.clone();
    garbage[0] ^= 0xff;
    assert!(problem(garbage, rows).contains("no fatbin magic"));
    let mut long = good.clone();
    long[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(problem(long, rows).contains("declares 1099511627776 bytes of entries"));
    let mut entry = good.clone();
    entry[16 + 8..16 + 16].copy_from_slice(&4096u64.to_le_bytes());
    assert!(problem(entry, rows).contains("runs past the declared size"));
    let other_build = problem(fake_fatbin(&["sm_90", "compute_90"]), rows);
    assert_eq!(
        other_build,
        "module 'm': its fatbin and its image list are from different builds: the list has sm_80 compute_90, the fatbin sm_90 compute_90; rebuild the module's kernels with one fatkit and build again (a crate you depend on: report it to its authors)"
    );
    assert!(problem(good.clone(), &[]).contains("lists no images"));
    // An image without kernels (an older fatkit's build) is the driver's business: the
    // module is made, and on a GPU that loads that image its kernels are not found.
    let rows: &'static [ImageRow] = &[("sm_75", None, &[]), ("sm_80", None, &["a"])];
    let bytes: &'static [u8] = Box::leak(fake_fatbin(&["sm_75", "sm_80"]).into_boxed_slice());
    let m = Module::new("m", bytes, rows).unwrap();
    assert!(m.check(&Device::new(Cc::new(8, 0), None)).is_ok());
    let t4 = m.check(&Device::new(Cc::new(7, 5), None)).unwrap_err();
    assert_eq!(t4.plan.kernel("a").unwrap().as_ref().unwrap_err().code, 500);
    // A module is checked against a CC 0.0 device like any other: nothing runs there.
    let m = module(&[("sm_80", None, &["a"])]);
    assert!(m.check(&Device::new(Cc::new(0, 0), None)).is_err());
}

/// The argument check a launch makes: count and sizes against the kernel's recorded
/// parameters, with an error naming kernel, parameter and both sizes.
#[test]
fn launch_arguments_are_checked_against_the_parameters() {
    use crate::cuda::RuntimeError;
    use crate::launch::ByValue;
    use cudarc::driver::CudaSlice;
    type Saxpy<'a> = (i32, f32, &'a CudaSlice<f32>, &'a mut CudaSlice<f32>);
    // SAFETY: no launch is made (these are placeholder images); only the check is tested.
    #[allow(unsafe_code)]
    let m = unsafe {
        module(&[("sm_80", None, &["saxpy", "legacy"])])
            .with_params(&[("saxpy", &[(0, 4), (4, 4), (8, 8), (16, 8)])])
    };
    m.check_args::<Saxpy<'_>>("saxpy").unwrap();
    let err = |r: Result<(), RuntimeError>| r.unwrap_err().to_string();
    expect_test::expect![[r#"kernel 'saxpy' of module 'test': parameter 1 (at byte 4) is 4 bytes, the launch gives 8 (f64); expected sizes 4, 4, 8, 8; given 4, 8, 8, 8"#]]
        .assert_eq(&err(m.check_args::<(i32, f64, &CudaSlice<f32>, &mut CudaSlice<f32>)>("saxpy")));
    expect_test::expect![[r#"kernel 'saxpy' of module 'test' takes 4 parameter(s), the launch gives 3: expected sizes 4, 4, 8, 8; given 4 (i32), 4 (f32), 8 (&cudarc::driver::safe::core::CudaSlice<f32>)"#]]
        .assert_eq(&err(m.check_args::<(i32, f32, &CudaSlice<f32>)>("saxpy")));
    // A usize where the kernel takes an int: the classic mistake.
    assert!(
        err(m.check_args::<(usize, f32, &CudaSlice<f32>, &CudaSlice<f32>)>("saxpy"))
            .contains("parameter 0 (at byte 0) is 4 bytes, the launch gives 8 (usize)")
    );
    // A struct by value counts its own size.
    #[derive(Clone, Copy)]
    #[repr(C)]
    struct Params {
        alpha: f32,
        n: i32,
    }
    // SAFETY: two 4-byte fields, no padding, the layout a kernel's struct of float and int has.
    #[allow(unsafe_code)]
    unsafe impl cudarc::driver::DeviceRepr for Params {}
    // SAFETY: as above, no launch.
    #[allow(unsafe_code)]
    let p = unsafe { module(&[("sm_80", None, &["k"])]).with_params(&[("k", &[(0, 8), (8, 8)])]) };
    p.check_args::<(ByValue<Params>, &CudaSlice<f32>)>("k")
        .unwrap();
    assert!(err(p.check_args::<(ByValue<f32>, &CudaSlice<f32>)>("k"))
        .contains("the launch gives 4 (f32)"));
    // Parameters not recorded (a module from an older fatkit), or a kernel the module lacks.
    assert!(err(m.check_args::<()>("legacy")).contains("its parameters are not recorded"));
    assert!(matches!(
        m.check_args::<()>("nope"),
        Err(RuntimeError::UnknownKernel { .. })
    ));
}

/// The handles a program keeps in a device struct or a static cross threads.
#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<Module>();
    send_sync::<crate::cuda::LoadedModule>();
    send_sync::<crate::cuda::Kernel>();
    send_sync::<Arc<Plan>>();
    send_sync::<crate::cuda::RuntimeError>();
}

#[test]
fn a_fatbin_from_another_build_than_its_module_is_refused() {
    let rows: &'static [ImageRow] = &[("sm_80", None, &["a"])];
    let fatbin = fatbin_for(rows);
    let built = Some((fatbin.len(), fatkit_arch::fingerprint::fingerprint(fatbin)));
    let m = Module::new("m", fatbin, rows).unwrap();
    assert!(m.with_fingerprint(built).is_ok());
    // Same targets, other bytes: what a build stopped between the fatbin and the .rs leaves.
    let mut other = fatbin.to_vec();
    *other.last_mut().unwrap() ^= 1;
    let other: &'static [u8] = Box::leak(other.into_boxed_slice());
    let err = Module::new("m", other, rows)
        .unwrap()
        .with_fingerprint(built)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("is not the one its generated .rs was written for"),
        "{err}"
    );
    // A module older than the record: nothing to check against.
    assert!(Module::new("m", other, rows)
        .unwrap()
        .with_fingerprint(None)
        .is_ok());
}

/// `k_x = { exclude = ["sm_86"] }` on sm_80 + sm_86: an RTX 3090 loads the sm_86 cubin, which
/// lacks k_x, so the driver does not find k_x there although the sm_80 cubin holds it.
#[test]
fn a_kernel_the_loaded_image_lacks_is_refused_on_an_rtx_3090() {
    let m = module(&[("sm_80", None, &["k", "k_x"]), ("sm_86", None, &["k"])]);
    let err = m
        .check(&device("8.6", Some("580.65.06"), "NVIDIA GeForce RTX 3090"))
        .unwrap_err();
    expect_test::expect![[r#"
        module 'test' cannot run 1 of its 2 kernel(s) on NVIDIA GeForce RTX 3090 (compute capability 8.6, driver 580.65.06): the driver loads one image of a module, and the one it loads on compute capability 8.6 does not hold them
          k_x: CUDA_ERROR_NOT_FOUND (500)
            - the driver loads the sm_86 cubin of the module on CC 8.6, which does not hold it (sm_80 does): cuModuleGetFunction returns CUDA_ERROR_NOT_FOUND (500)
          fix: use a build of this program (or of the crate that ships module 'test') whose image for compute capability 8.6 holds every kernel; if you build it, build those kernels for every target, or move them to a module of their own"#]].assert_eq(&err.to_string());
    assert!(m.check(&device("8.0", None, "A100")).is_ok());
}

/// An entry header that disagrees with its cubin (tests/fixtures/gpu/one-image: sm_80 around
/// an sm_90 cubin) is refused before anything reaches the driver.
#[test]
fn a_cubin_whose_header_lies_is_refused() {
    let fixture = |name: &str| -> &'static [u8] {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gpu");
        Box::leak(std::fs::read(dir.join(name)).unwrap().into_boxed_slice())
    };
    let bytes = fixture("one-image/header-sm_80-holds-sm_90.fatbin");
    let err = Module::new("liar", bytes, &[("sm_80", None, &["a", "b"])]).unwrap_err();
    assert!(
        err.to_string()
            .contains("its header says sm_80, its cubin is sm_90"),
        "{err}"
    );
    // The honest fixture it was made from loads.
    let honest = fixture("sm_90.fatbin");
    assert!(Module::new("honest", honest, &[("sm_90", None, &["a", "b"])]).is_ok());
}

/// Issue 29: `with_policy` after a `check` kept the plan made under the old policy.
#[test]
fn a_new_policy_is_judged_anew() {
    let orin = device("8.7", None, "Jetson AGX Orin");
    let m = module(&[("sm_80", None, &["k"])]);
    assert!(
        m.check(&orin).is_ok(),
        "sm_80 runs on CC 8.7 by the driver's rule"
    );
    let strict = m.with_policy(Policy { strict_igpu: true });
    assert!(
        strict.check(&orin).is_err(),
        "the plan of the default policy was kept"
    );
}

mod declared;
