//! `cargo xtask bench runtime`: the first check of a ten-target module and every later one,
//! and a typed launch's argument packing.

use std::time::Instant;

use fatkit_cli::{Outcome, Result};

use crate::harness::median;

/// A module like build-kernels makes for the `modern` profile: ten cubins and PTX, five kernels.
const TEN_TARGETS: &[fatkit_runtime::ImageRow] = &[
    ("sm_75", None, &["k0", "k1", "k2", "k3", "k4"]),
    ("sm_80", None, &["k0", "k1", "k2", "k3", "k4"]),
    ("sm_86", None, &["k0", "k1", "k2", "k3", "k4"]),
    ("sm_87", None, &["k0", "k1", "k2", "k3", "k4"]),
    ("sm_89", None, &["k0", "k1", "k2", "k3", "k4"]),
    ("sm_90", None, &["k0", "k1", "k2", "k3", "k4"]),
    ("sm_100", None, &["k0", "k1", "k2", "k3", "k4"]),
    ("sm_103", None, &["k0", "k1", "k2", "k3", "k4"]),
    ("sm_110", None, &["k0", "k1", "k2", "k3", "k4"]),
    ("sm_120", None, &["k0", "k1", "k2", "k3", "k4"]),
    ("compute_120", Some((9, 2)), &["k0", "k1", "k2", "k3", "k4"]),
];

/// A fatbin holding an empty entry for each of `rows`' targets: what `Module::new` validates.
fn fatbin_of(rows: &[fatkit_runtime::ImageRow]) -> &'static [u8] {
    let targets: Vec<fatkit_arch::Target> =
        rows.iter().filter_map(|(t, _, _)| t.parse().ok()).collect();
    Box::leak(fatkit_runtime::fatbin::placeholder(&targets).into_boxed_slice())
}

/// The median of `values`.
fn median_f64(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// `launches` launches of saxpy_f32 through cudarc's own builder: ns per launch.
fn builder(
    stream: &std::sync::Arc<fatkit_runtime::cudarc::driver::CudaStream>,
    f: &fatkit_runtime::cudarc::driver::CudaFunction,
    (x, y): (
        &fatkit_runtime::cudarc::driver::CudaSlice<f32>,
        &mut fatkit_runtime::cudarc::driver::CudaSlice<f32>,
    ),
    cfg: fatkit_runtime::cudarc::driver::LaunchConfig,
    launches: u32,
) -> std::result::Result<f64, Box<dyn std::error::Error>> {
    use fatkit_runtime::cudarc::driver::PushKernelArg;
    stream.synchronize()?;
    let start = Instant::now();
    for _ in 0..launches {
        let (n, a) = (1024i32, 2.0f32);
        // SAFETY: saxpy_f32(int, float, const float*, float*) with 1024-float buffers.
        #[allow(unsafe_code)]
        unsafe {
            stream
                .launch_builder(f)
                .arg(&n)
                .arg(&a)
                .arg(x)
                .arg(&mut *y)
                .launch(cfg)
        }?;
    }
    stream.synchronize()?;
    Ok((start.elapsed() / launches).as_secs_f64() * 1e9)
}

/// What a typed launch adds to cudarc's builder: on a GPU, both launch paths timed on the same
/// kernel; without one, the only extra work (the argument check) alone.
fn typed_launch() -> Result<()> {
    use fatkit_runtime::cudarc::driver::{CudaContext, CudaSlice, LaunchConfig};
    use std::hint::black_box;
    type SaxpyF32<'a> = fatkit_example_kernels::SaxpyF32<'a>;
    let module =
        fatkit_example_kernels::saxpy().map_err(|e| crate::harness::failed(e.to_string()))?;
    let params = module.params("saxpy_f32");
    let n: u32 = 20_000_000;
    let mut check = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        for _ in 0..n {
            let ok = fatkit_runtime::launch::check::<SaxpyF32<'_>>(
                black_box("saxpy"),
                black_box("saxpy_f32"),
                black_box(params),
            );
            black_box(ok.is_ok());
        }
        check.push(start.elapsed() / n);
    }
    println!(
        "{:<52} {:>8.1}ns",
        "typed launch: the argument check it adds",
        median(check).as_secs_f64() * 1e9
    );
    let gpu = fatkit_runtime::cuda::devices()
        .ok()
        .filter(|d| !d.is_empty());
    if gpu.is_none() {
        println!(
            "{:<52} {:>10}",
            "typed launch vs cudarc's builder (whole launch)", "no GPU"
        );
        return Ok(());
    }
    // The two paths in turns, each first every other round, so that neither meets a fuller
    // launch queue or a warmer cache than the other; the difference is taken round by round.
    let run = || -> std::result::Result<(f64, f64, Vec<f64>), Box<dyn std::error::Error>> {
        let ctx = CudaContext::new(0)?;
        let stream = ctx.default_stream();
        let loaded = module.load(&ctx)?;
        let kernel = loaded.kernel("saxpy_f32")?;
        let f = loaded.function("saxpy_f32")?;
        let x: CudaSlice<f32> = stream.alloc_zeros(1024)?;
        let mut y: CudaSlice<f32> = stream.alloc_zeros(1024)?;
        let cfg = LaunchConfig::for_num_elems(1024);
        let launches = 100_000u32;
        let (mut ours, mut theirs, mut diffs) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..12 {
            let typed =
                |y: &mut CudaSlice<f32>| -> std::result::Result<f64, Box<dyn std::error::Error>> {
                    stream.synchronize()?;
                    let start = Instant::now();
                    for _ in 0..launches {
                        let args: SaxpyF32<'_> = (1024, 2.0, &x, &mut *y);
                        kernel.launch(&stream, cfg, args)?;
                    }
                    stream.synchronize()?;
                    Ok((start.elapsed() / launches).as_secs_f64() * 1e9)
                };
            let (o, t) = if round % 2 == 0 {
                let o = typed(&mut y)?;
                (o, builder(&stream, &f, (&x, &mut y), cfg, launches)?)
            } else {
                let t = builder(&stream, &f, (&x, &mut y), cfg, launches)?;
                (typed(&mut y)?, t)
            };
            ours.push(o);
            theirs.push(t);
            diffs.push(o - t);
        }
        Ok((median_f64(ours), median_f64(theirs), diffs))
    };
    let (ours, theirs, mut diffs) = run().map_err(|e| crate::harness::failed(e.to_string()))?;
    diffs.sort_by(f64::total_cmp);
    println!(
        "{:<52} {:>8.1}ns",
        "cudarc's builder, per launch (saxpy_f32, 1024)", theirs
    );
    println!("{:<52} {:>8.1}ns", "typed launch, per launch", ours);
    println!(
        "{:<52} {:>8.1}ns  (target within 20 ns; rounds {:.0}..{:.0} ns)",
        "typed launch minus cudarc's builder (median round)",
        median_f64(diffs.clone()),
        diffs.first().copied().unwrap_or(0.0),
        diffs.last().copied().unwrap_or(0.0)
    );
    let _ = (ours, theirs);
    Ok(())
}

pub(crate) fn runtime() -> Result<Outcome> {
    use std::hint::black_box;
    let device = fatkit_runtime::Device::new(fatkit_arch::Cc::new(12, 0), "595.45.04".parse().ok())
        .named("simulated RTX 5090");
    let fatbin = fatbin_of(TEN_TARGETS);
    // First call: a fresh module each time (construction from IMAGES, then the first check).
    let mut construct = Vec::new();
    let mut first = Vec::new();
    for _ in 0..2000 {
        let start = Instant::now();
        let module = fatkit_runtime::Module::new("bench", fatbin, TEN_TARGETS)
            .map_err(|e| crate::harness::failed(e.to_string()))?;
        let built = Instant::now();
        let plan =
            black_box(module.check(&device)).map_err(|e| crate::harness::failed(e.to_string()))?;
        first.push(built.elapsed());
        construct.push(built - start);
        black_box(plan);
    }
    // Every later call: what a launch pays, the cached plan and the kernel's entry in it.
    let module = fatkit_runtime::Module::new("bench", fatbin, TEN_TARGETS)
        .map_err(|e| crate::harness::failed(e.to_string()))?;
    let _ = module.check(&device);
    // A launcher resolves the kernel's name once, then checks by index on every launch.
    let (k1, k4) = (
        module.kernel_index("k1").unwrap_or(0),
        module.kernel_index("k4").unwrap_or(0),
    );
    let n: u32 = 20_000_000;
    let mut per_call = Vec::new();
    let mut by_name = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        for i in 0..n {
            let idx = if i % 2 == 0 { k1 } else { k4 };
            let ok = module.with_plan(black_box(&device), |plan| {
                plan.kernel_at(black_box(idx)).is_some_and(|r| r.is_ok())
            });
            black_box(ok);
        }
        per_call.push(start.elapsed() / n);
        let start = Instant::now();
        for i in 0..n / 4 {
            let kernel = if i % 2 == 0 { "k1" } else { "k4" };
            black_box(
                module
                    .kernel_check(black_box(&device), black_box(kernel))
                    .is_some(),
            );
        }
        by_name.push(start.elapsed() / (n / 4));
    }
    println!("{:<52} {:>10}", "measure", "value");
    println!(
        "{:<52} {:>8.1}us  (target < 50 us)",
        "first check of a ten-target module (median of 2000)",
        median(first).as_secs_f64() * 1e6
    );
    println!(
        "{:<52} {:>8.1}us",
        "  building the Module from IMAGES, before it",
        median(construct).as_secs_f64() * 1e6
    );
    println!(
        "{:<52} {:>8.1}ns  (target < 20 ns)",
        "every later check (cached plan, kernel by index)",
        median(per_call).as_secs_f64() * 1e9
    );
    println!(
        "{:<52} {:>8.1}ns",
        "  the same by kernel name (kernel_check)",
        median(by_name).as_secs_f64() * 1e9
    );
    typed_launch()?;
    Ok(Outcome::Ok)
}
