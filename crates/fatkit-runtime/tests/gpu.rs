//! GPU tier (ignored without a GPU). On a machine with an NVIDIA GPU and driver:
//!
//! ```sh
//! cargo test -p fatkit-runtime -p fatkit-demo --test gpu -- --ignored --nocapture
//! ```
//!
//! For fatbins built for the purpose (tests/fixtures/gpu: one target each; PTX only; `a`
//! images; the full profile), the check's prediction for kernel `a` must equal what
//! `cuModuleLoadData` and a launch actually do on this GPU.
#![allow(
    unsafe_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::ffi::{c_void, CString};
use std::path::Path;

use cudarc::driver::{result, CudaContext, DevicePtr};
use fatkit_fatbin::{Container, Strictness};
use fatkit_runtime::{cuda, ImageRow, Module};

/// tests/fixtures/gpu: `FATKIT_GPU_FIXTURES`, else the checkout this was built in, else the
/// current directory's (a test binary carried to a GPU machine runs in a copy elsewhere).
fn fixtures() -> std::path::PathBuf {
    if let Some(dir) = std::env::var_os("FATKIT_GPU_FIXTURES") {
        return dir.into();
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gpu");
    if built.is_dir() {
        return built;
    }
    Path::new("tests/fixtures/gpu").to_owned()
}

/// A Module made from a fixture fatbin, its IMAGES read back with fatkit's reader.
fn module_of(name: &'static str, fatbin: &'static [u8]) -> Module {
    try_module_of(name, fatbin).unwrap()
}

/// [`module_of`], or why `Module::new` refuses the fatbin (an entry whose header and cubin
/// disagree is refused: the build never writes one, so one it is given was not its own).
fn try_module_of(
    name: &'static str,
    fatbin: &'static [u8],
) -> Result<Module, fatkit_runtime::ModuleError> {
    let c = Container::parse(fatbin, Strictness::AnyKind).unwrap();
    let limits = fatkit_fatbin::Limits::default();
    let rows: Vec<ImageRow> = c
        .entries()
        .map(|e| {
            let target = e.target().unwrap();
            let image = e.image(&limits).unwrap();
            let kernels: Vec<&'static str> = if target.is_cubin() {
                fatkit_fatbin::cubin::inspect(&image).unwrap().kernels
            } else {
                fatkit_fatbin::ptx::inspect(&image).kernels
            }
            .into_iter()
            .map(|k| &*Box::leak(k.into_boxed_str()))
            .collect();
            let isa = target
                .is_ptx()
                .then(|| (e.code_version().0 as u8, e.code_version().1 as u8));
            let t: &'static str = Box::leak(target.to_string().into_boxed_str());
            (t, isa, &*Box::leak(kernels.into_boxed_slice()))
        })
        .collect();
    // The parameters as the build records them: read from the images, which agree.
    let mut params: Vec<fatkit_runtime::ParamRow> = Vec::new();
    for e in c.entries() {
        let image = e.image(&limits).unwrap();
        let layouts = if e.target().unwrap().is_cubin() {
            fatkit_fatbin::params::cubin(&image).unwrap()
        } else {
            fatkit_fatbin::params::ptx(&image).unwrap()
        };
        for (k, l) in layouts {
            let l: Vec<(u32, u32)> = l.iter().map(|p| (p.offset, p.size)).collect();
            match params.iter().find(|(name, _)| *name == k) {
                Some((_, known)) => assert_eq!(*known, &l[..], "{name}: {k}"),
                None => params.push((
                    Box::leak(k.into_boxed_str()),
                    Box::leak(l.into_boxed_slice()),
                )),
            }
        }
    }
    // The stubs, as the build records them for a kernel declared away from those targets.
    let report = fatkit_fatbin::inspect::inspect(
        name,
        fatbin,
        fatkit_fatbin::inspect::Depth::Kernels,
        &limits,
    );
    let mut stubs: Vec<fatkit_runtime::StubRow> = Vec::new();
    for m in fatkit_audit::coverage::modules(&report) {
        for (kernel, stubbed) in &m.stubs {
            for (image, kind) in stubbed {
                let target: &'static str =
                    Box::leak(m.images[*image].target.to_string().into_boxed_str());
                let kernel: &'static str = Box::leak(kernel.clone().into_boxed_str());
                stubs.push((target, kernel, kind.name()));
            }
        }
    }
    let m = Module::new(name, fatbin, Box::leak(rows.into_boxed_slice()))?
        .with_stubs(Box::leak(stubs.into_boxed_slice()))?;
    // SAFETY: every row was read from this fatbin's own images just above (and they agree).
    #[allow(unsafe_code)]
    Ok(unsafe { m.with_params(Box::leak(params.into_boxed_slice())) })
}

/// Loading through cudarc and a typed launch: the module and kernel are cudarc's own handles
/// (Send + Sync), a launch with wrong argument sizes is refused before the driver, the right
/// one computes.
#[test]
#[ignore = "needs an NVIDIA GPU: cargo test -p fatkit-runtime --test gpu -- --ignored"]
fn typed_launch_through_cudarc() {
    let dir = fixtures();
    let bytes: &'static [u8] = Box::leak(
        std::fs::read(dir.join("full.fatbin"))
            .unwrap()
            .into_boxed_slice(),
    );
    let module = module_of("full", bytes);
    assert_eq!(module.params("a"), Some(&[(0, 8), (8, 4), (12, 4)][..]));
    let ctx = CudaContext::new(0).unwrap();
    let loaded = module.load(&ctx).unwrap();
    let a = loaded.kernel("a").unwrap();
    let stream = ctx.default_stream();
    let mut buf = stream.clone_htod(&[1.0f32; 64]).unwrap();
    let cfg = cudarc::driver::LaunchConfig::for_num_elems(64);
    let err = a
        .launch(&stream, cfg, (&mut buf, 2.0f64, 64i32))
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("parameter 1 (at byte 8) is 4 bytes, the launch gives 8 (f64)"),
        "{err}"
    );
    std::thread::scope(|s| {
        s.spawn(|| a.launch(&stream, cfg, (&mut buf, 2.0f32, 64i32)).unwrap());
    });
    assert!(stream.clone_dtoh(&buf).unwrap().iter().all(|&v| v == 2.0));
    // cudarc's own function works with its builder too.
    let f = loaded.function("a").unwrap();
    drop(loaded);
    let _keeps_the_module_loaded = f;
}

/// `cuModuleLoadData` of `fatbin` in `ctx`: the module, or the load's error code.
fn load(
    ctx: &std::sync::Arc<CudaContext>,
    fatbin: &[u8],
) -> Result<cudarc::driver::sys::CUmodule, u32> {
    ctx.bind_to_thread().unwrap();
    // Copy into 8-byte aligned memory, as cuModuleLoadData wants.
    let words: Vec<u64> = fatbin
        .chunks(8)
        .map(|c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(w)
        })
        .collect();
    // SAFETY: `words` holds a whole fatbin and outlives the call; the context is current.
    unsafe { result::module::load_data(words.as_ptr().cast::<c_void>()) }.map_err(|e| e.0 as u32)
}

/// What the driver does: the load's error code, or whether a launch of `a` ran.
fn actual(ctx: &std::sync::Arc<CudaContext>, fatbin: &[u8]) -> Result<(), u32> {
    let module = load(ctx, fatbin)?;
    // SAFETY: `module` was just loaded.
    let f = unsafe { result::module::get_function(module, CString::new("a").unwrap()) }
        .map_err(|e| e.0 as u32)?;
    let stream = ctx.default_stream();
    let buf = stream.clone_htod(&[1.0f32; 64]).unwrap();
    let (ptr, guard) = buf.device_ptr(&stream);
    let (mut p, mut s, mut n) = (ptr, 2.0f32, 64i32);
    let mut params = [
        (&mut p as *mut u64).cast::<c_void>(),
        (&mut s as *mut f32).cast(),
        (&mut n as *mut i32).cast(),
    ];
    // SAFETY: a(float*, float, int) with a 64-float buffer and n = 64.
    let launched = unsafe {
        result::launch_kernel(f, (1, 1, 1), (64, 1, 1), 0, stream.cu_stream(), &mut params)
    };
    stream.synchronize().map_err(|e| e.0 as u32)?;
    drop(guard);
    let out = stream.clone_dtoh(&buf).unwrap();
    // SAFETY: unloaded once, after its last use.
    unsafe { result::module::unload(module) }.unwrap();
    launched.map_err(|e| e.0 as u32)?;
    assert!(
        out.iter().all(|&v| v == 2.0),
        "kernel a computed {:?}",
        &out[..4]
    );
    Ok(())
}

#[test]
#[ignore = "needs an NVIDIA GPU: cargo test -p fatkit-runtime --test gpu -- --ignored"]
fn prediction_matrix_matches_the_driver() {
    let device = cuda::devices().expect("a GPU and its driver")[0].clone();
    let ctx = CudaContext::new(0).unwrap();
    let dir = fixtures();
    let mut rows = Vec::new();
    let mut mismatches = 0;
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".fatbin"))
        .collect();
    names.sort();
    for file in names {
        let bytes: &'static [u8] =
            Box::leak(std::fs::read(dir.join(&file)).unwrap().into_boxed_slice());
        let name: &'static str =
            Box::leak(file.trim_end_matches(".fatbin").to_owned().into_boxed_str());
        let module = module_of(name, bytes);
        let predicted = match module.plan(&device).kernel("a") {
            Some(Ok(sel)) => Ok(sel.target.to_string()),
            Some(Err(f)) => Err(f.code),
            None => Err(0),
        };
        let got = actual(&ctx, bytes);
        let agree =
            predicted.is_ok() == got.is_ok() && predicted.as_ref().err() == got.as_ref().err();
        mismatches += usize::from(!agree);
        rows.push(format!(
            "{name:<12} predicted {:<22} driver {:<12} {}",
            format!("{predicted:?}"),
            format!("{got:?}"),
            if agree { "ok" } else { "MISMATCH" }
        ));
    }
    println!(
        "{} (CC {}, driver {:?})",
        device.name, device.cc, device.driver
    );
    for r in &rows {
        println!("  {r}");
    }
    assert!(rows.len() >= 13);
    assert_eq!(mismatches, 0, "the check disagrees with the driver");
}

/// What the driver does with `fatbin` and `kernel`: the load's error code, or
/// `cuModuleGetFunction`'s (500 for a name the loaded image lacks), or found.
fn driver_finds(ctx: &std::sync::Arc<CudaContext>, fatbin: &[u8], kernel: &str) -> Result<(), u32> {
    let module = load(ctx, fatbin)?;
    // SAFETY: `module` was just loaded.
    let found = unsafe { result::module::get_function(module, CString::new(kernel).unwrap()) }
        .map(|_| ())
        .map_err(|e| e.0 as u32);
    // SAFETY: unloaded once, after its last use.
    unsafe { result::module::unload(module) }.unwrap();
    found
}

/// The one-image-per-module rule (docs/ARCH_RULES.md section 2) on this GPU: for every fixture
/// of tests/fixtures/gpu/one-image (and the single-target ones) and each kernel, what `audit`'s
/// model predicts (fatkit_audit::coverage over the container, fatkit_arch::load) against
/// `cuModuleLoadData` + `cuModuleGetFunction`. An unknown prediction is listed, not counted:
/// this run is what settles it.
#[test]
#[ignore = "needs an NVIDIA GPU: cargo test -p fatkit-runtime --test gpu -- --ignored"]
fn load_matches_the_driver() {
    use fatkit_arch::rules::Status;
    let device = cuda::devices().expect("a GPU and its driver")[0].clone();
    let ctx = CudaContext::new(0).unwrap();
    let root = fixtures();
    let mut files: Vec<std::path::PathBuf> = ["one-image", "."]
        .iter()
        .flat_map(|d| std::fs::read_dir(root.join(d)).unwrap().flatten())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "fatbin"))
        .collect();
    files.sort();
    let (mut rows, mut mismatches, mut unknown) = (Vec::new(), 0, 0);
    for path in &files {
        let bytes = std::fs::read(path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let report = fatkit_fatbin::inspect::inspect(
            &name,
            &bytes,
            fatkit_fatbin::inspect::Depth::Kernels,
            &fatkit_fatbin::Limits::default(),
        );
        for k in fatkit_audit::coverage::kernels(&report) {
            let (verdict, fate, status) = k.fate(&device, fatkit_arch::Policy::default());
            let predicted = match status {
                Status::Runs => Some(Ok(())),
                Status::Fails => Some(Err(fate
                    .error()
                    .map_or_else(|| verdict.selection.err().map_or(0, |e| e.code()), |e| e.0))),
                Status::Unknown => None,
            };
            let got = driver_finds(&ctx, &bytes, &k.name);
            let verdict = match &predicted {
                None => {
                    unknown += 1;
                    "unknown (settled by this run)"
                }
                Some(p) if *p == got => "ok",
                Some(_) => {
                    mismatches += 1;
                    "MISMATCH"
                }
            };
            rows.push(format!(
                "{name:<36} {:<3} predicted {:<12} driver {:<12} {verdict}",
                k.name,
                format!("{predicted:?}"),
                format!("{got:?}"),
            ));
        }
    }
    println!(
        "{} (CC {}, driver {:?})",
        device.name, device.cc, device.driver
    );
    for r in &rows {
        println!("  {r}");
    }
    println!("  {unknown} unknown predictions");
    assert!(rows.len() >= 20, "{rows:?}");
    assert_eq!(mismatches, 0, "the model disagrees with the driver");
}

/// What the driver does with kernel `name` of `fatbin` (signature `(float* x, float s, int n)`,
/// `x[i] = s`): the load's or `cuModuleGetFunction`'s error code, or the launch's result and
/// whether it wrote its output (a stub returns success and leaves it untouched).
fn driver_runs(
    ctx: &std::sync::Arc<CudaContext>,
    fatbin: &[u8],
    name: &str,
) -> Result<(Result<(), u32>, bool), u32> {
    let module = load(ctx, fatbin)?;
    // SAFETY: `module` was just loaded.
    let found = unsafe { result::module::get_function(module, CString::new(name).unwrap()) };
    let f = match found {
        Ok(f) => f,
        Err(e) => {
            // SAFETY: unloaded once, after its last use.
            unsafe { result::module::unload(module) }.unwrap();
            return Err(e.0 as u32);
        }
    };
    let stream = ctx.default_stream();
    let buf = stream.clone_htod(&[1.0f32; 64]).unwrap();
    let (ptr, guard) = buf.device_ptr(&stream);
    let (mut p, mut s, mut n) = (ptr, 2.0f32, 64i32);
    let mut params = [
        (&mut p as *mut u64).cast::<c_void>(),
        (&mut s as *mut f32).cast(),
        (&mut n as *mut i32).cast(),
    ];
    // SAFETY: every kernel of device.cu takes (float*, float, int); 64 floats, n = 64.
    let launched = unsafe {
        result::launch_kernel(f, (1, 1, 1), (64, 1, 1), 0, stream.cu_stream(), &mut params)
    }
    .map_err(|e| e.0 as u32);
    let synced = stream.synchronize().map_err(|e| e.0 as u32);
    drop(guard);
    let out = stream.clone_dtoh(&buf).unwrap();
    // SAFETY: unloaded once, after its last use.
    unsafe { result::module::unload(module) }.unwrap();
    Ok((launched.and(synced), out.iter().all(|&v| v == 2.0)))
}

/// Issue 46: the fixtures `build-device.sh` makes on the GPU machine with its own CUDA (newest
/// PTX ISA, LZ4 and ZSTD entries, `a` and `f` targets, a kernel missing above a lower image,
/// a stub), in `FATKIT_GPU_BUILT`: for each kernel, what `audit`'s model and the runtime's
/// `Module` check predict, against `cuModuleLoadData`, `cuModuleGetFunction` and a launch.
/// A kernel that launches but leaves its output untouched is reported as compiled out.
#[test]
#[ignore = "needs an NVIDIA GPU and FATKIT_GPU_BUILT: see tests/fixtures/gpu/build-device.sh"]
fn device_built_fixtures_match_the_driver() {
    use fatkit_arch::rules::Status;
    let Some(dir) = std::env::var_os("FATKIT_GPU_BUILT") else {
        panic!("FATKIT_GPU_BUILT: the directory build-device.sh wrote");
    };
    let device = cuda::devices().expect("a GPU and its driver")[0].clone();
    let ctx = CudaContext::new(0).unwrap();
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "fatbin"))
        .collect();
    files.sort();
    let (mut rows, mut mismatches) = (Vec::new(), 0);
    for path in &files {
        let bytes: &'static [u8] = Box::leak(std::fs::read(path).unwrap().into_boxed_slice());
        let name: &'static str = Box::leak(
            path.file_stem()
                .unwrap()
                .to_string_lossy()
                .into_owned()
                .into_boxed_str(),
        );
        let report = fatkit_fatbin::inspect::inspect(
            name,
            bytes,
            fatkit_fatbin::inspect::Depth::Kernels,
            &fatkit_fatbin::Limits::default(),
        );
        // A fatbin the runtime refuses to hold never reaches the driver through it: its
        // runtime column says so, and audit alone is compared.
        let module = try_module_of(name, bytes);
        let plan = module.as_ref().ok().map(|m| m.plan(&device));
        for k in fatkit_audit::coverage::kernels(&report) {
            let (verdict, fate, status) = k.fate(&device, fatkit_arch::Policy::default());
            let audit = match status {
                Status::Runs => Some(Ok(())),
                Status::Fails => Some(Err(fate
                    .error()
                    .map_or_else(|| verdict.selection.err().map_or(0, |e| e.code()), |e| e.0))),
                Status::Unknown => None,
            };
            let runtime = plan.as_ref().map(|plan| match plan.kernel(&k.name) {
                Some(Ok(_)) => Some(Ok(())),
                Some(Err(f)) => Some(Err(f.code)),
                None => None,
            });
            let got = driver_runs(&ctx, bytes, &k.name);
            // A kernel predicted compiled out (`FATKIT_KERNEL_COMPILED_OUT`, 0) is confirmed by a
            // launch that succeeds and leaves its output untouched; any other success is a run.
            let found = match &got {
                Ok((Ok(()), false)) if audit == Some(Err(0)) => Err(0),
                Ok(_) => Ok(()),
                Err(c) => Err(*c),
            };
            let launch = match &got {
                Ok((Ok(()), true)) => "launched, wrote its output".to_owned(),
                Ok((Ok(()), false)) => {
                    "launched (success), output untouched: compiled out".to_owned()
                }
                Ok((Err(code), _)) => format!("launch failed ({code})"),
                Err(_) => "-".to_owned(),
            };
            // An unknown prediction is listed, not counted: this run is what settles it.
            let verdict = match (&audit, &runtime) {
                (None, _) | (_, Some(None)) => "unknown (settled by this run)",
                (Some(a), None) if *a == found => "ok (runtime refuses the fatbin)",
                (Some(a), Some(Some(r))) if *a == found && *r == found => "ok",
                _ => {
                    mismatches += 1;
                    "MISMATCH"
                }
            };
            let runtime = match (&runtime, &module) {
                (Some(r), _) => format!("{r:?}"),
                (None, Err(e)) => format!("refused: {e}"),
                (None, Ok(_)) => unreachable!("a plan exists for every module"),
            };
            rows.push(format!(
                "{name:<30} {:<5} audit {:<10} runtime {runtime:<10} driver {:<10} {launch:<52} {verdict}",
                k.name,
                format!("{audit:?}"),
                format!("{found:?}"),
            ));
        }
    }
    println!(
        "{} (CC {}, driver {:?})",
        device.name, device.cc, device.driver
    );
    for r in &rows {
        println!("  {r}");
    }
    // Any directory of fatbins of device.cu's kernels: build-device.sh's, or modules
    // build-kernels wrote (as the 2026-11-27 run did for each compression).
    assert!(!rows.is_empty(), "no kernel in {}", dir.to_string_lossy());
    assert_eq!(mismatches, 0, "a prediction disagrees with the driver");
}

/// `audit` with no `--gpu` answers for the GPUs in front of it (issue 44): the ones `nvidia-smi`
/// lists (`fatkit_audit::local`) are the ones the CUDA driver enumerates, each with the compute
/// capability the driver reports for it.
#[test]
#[ignore = "needs an NVIDIA GPU: cargo test -p fatkit-runtime --test gpu -- --ignored"]
fn the_gpus_audit_sees_are_the_ones_the_driver_runs() {
    let fatkit_audit::local::Visible::Gpus { gpus, driver } = fatkit_audit::local::visible() else {
        panic!("a machine with a GPU, and nvidia-smi lists none (FATKIT_NVIDIA_SMI set?)");
    };
    assert!(driver.is_some(), "nvidia-smi named no driver version");
    let count = CudaContext::device_count().unwrap();
    let mut from_driver: Vec<String> = (0..count)
        .map(|i| {
            let ctx = CudaContext::new(usize::try_from(i).unwrap()).unwrap();
            let (major, minor) = ctx.compute_capability().unwrap();
            format!("{major}.{minor}")
        })
        .collect();
    from_driver.sort();
    from_driver.dedup();
    let mut seen: Vec<String> = gpus.iter().map(|g| g.cc.to_string()).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen, from_driver, "nvidia-smi's GPUs {gpus:?}");
    eprintln!("audit sees {gpus:?}, driver {driver:?}; the CUDA driver: CC {from_driver:?}");
}
