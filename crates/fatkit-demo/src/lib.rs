//! The repository's kernels, embedded with `fatkit_runtime::include_module!`, run on the first
//! GPU with typed launches (each checked against the parameters the build read from the
//! kernel's images) and compared with CPU references.
// CPU reference loops index within bounds they compute themselves.
#![allow(clippy::indexing_slicing)]

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use fatkit_runtime::cuda::{self, LoadedModule, RuntimeError};
use fatkit_runtime::launch::{ByValue, KernelArgs};
use fatkit_runtime::{Device, Module};

/// `cuda-src/include/params.h` as Rust types (bindgen), laid out as nvcc lays them out: the
/// build script had nvcc check every size, alignment and field offset.
pub mod params {
    #![allow(
        non_camel_case_types,
        non_snake_case,
        non_upper_case_globals,
        dead_code
    )]
    include!(concat!(env!("OUT_DIR"), "/params_types.rs"));

    // SAFETY: plain C data (a float and an int) whose size, alignment and field offsets the
    // build checked against nvcc's layout: what the kernel reads is what the host wrote.
    #[allow(unsafe_code)]
    unsafe impl cudarc::driver::DeviceRepr for SaxpyParams {}
}

/// The arguments of every launch [`run`] makes, one type per kernel signature: the launches
/// use them, and a test without a GPU checks each against the parameters the build recorded.
pub mod signatures {
    use super::*;
    /// `saxpy(int n, float a, const float* x, float* y)`
    pub type Saxpy<'a> = (i32, f32, &'a CudaSlice<f32>, &'a mut CudaSlice<f32>);
    /// `saxpy_params(SaxpyParams p, const float* x, float* y)`
    pub type SaxpyParams<'a> = (
        ByValue<params::SaxpyParams>,
        &'a CudaSlice<f32>,
        &'a mut CudaSlice<f32>,
    );
    /// `reduce_sum_f32(const float* x, float* out, int n)`, `cluster_sum_f32` alike
    pub type Sum<'a> = (&'a CudaSlice<f32>, &'a mut CudaSlice<f32>, i32);
    /// `matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)`
    pub type Matmul<'a> = (
        &'a CudaSlice<f32>,
        &'a CudaSlice<f32>,
        &'a mut CudaSlice<f32>,
        i32,
        i32,
        i32,
    );
    /// `softmax_T(const T* x, T* y, int cols)`; f16 and bf16 travel as their bits (`u16`)
    pub type Softmax<'a, T> = (&'a CudaSlice<T>, &'a mut CudaSlice<T>, i32);
    /// `rmsnorm_T(const T* x, const T* w, T* y, int cols, float eps)`
    pub type Rmsnorm<'a, T> = (
        &'a CudaSlice<T>,
        &'a CudaSlice<T>,
        &'a mut CudaSlice<T>,
        i32,
        f32,
    );
}

/// Every module of `cuda-src/`, as fatkit built them for this binary.
#[derive(Debug)]
pub struct Modules {
    pub saxpy: Module,
    pub reduce: Module,
    pub matmul: Module,
    pub softmax: Module,
    pub rmsnorm: Module,
    pub cluster_sum: Module,
}

impl Modules {
    pub fn embedded() -> Result<Modules, Box<dyn std::error::Error>> {
        Ok(Modules {
            saxpy: fatkit_runtime::include_module!(concat!(env!("OUT_DIR"), "/saxpy.rs"))?,
            reduce: fatkit_runtime::include_module!(concat!(env!("OUT_DIR"), "/reduce.rs"))?,
            matmul: fatkit_runtime::include_module!(concat!(env!("OUT_DIR"), "/matmul.rs"))?,
            softmax: fatkit_runtime::include_module!(concat!(env!("OUT_DIR"), "/softmax.rs"))?,
            rmsnorm: fatkit_runtime::include_module!(concat!(env!("OUT_DIR"), "/rmsnorm.rs"))?,
            cluster_sum: fatkit_runtime::include_module!(concat!(
                env!("OUT_DIR"),
                "/cluster_sum.rs"
            ))?,
        })
    }

    pub fn all(&self) -> [&Module; 6] {
        [
            &self.saxpy,
            &self.reduce,
            &self.matmul,
            &self.softmax,
            &self.rmsnorm,
            &self.cluster_sum,
        ]
    }
}

/// One kernel's run: its largest difference from the CPU reference.
#[derive(Debug)]
pub struct Outcome {
    pub kernel: &'static str,
    pub max_error: f32,
    pub tolerance: f32,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.max_error <= self.tolerance
    }
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// One typed launch, then a synchronisation: the arguments are checked against the kernel's
/// recorded parameters before anything reaches the driver.
fn launch<A: KernelArgs>(
    m: &LoadedModule,
    kernel: &str,
    stream: &Arc<CudaStream>,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    args: A,
) -> Res<()> {
    let cfg = LaunchConfig {
        grid_dim: grid,
        block_dim: block,
        shared_mem_bytes: 0,
    };
    m.kernel(kernel)?.launch(stream, cfg, args)?;
    stream.synchronize()?;
    Ok(())
}

/// f32 to bf16 bits, rounded to nearest even.
fn bf16_bits(v: f32) -> u16 {
    let b = v.to_bits();
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

fn bf16_value(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// f32 to f16 bits, truncated; values below f16's normal range become zero (the demo's data
/// stays within it).
fn f16_bits(v: f32) -> u16 {
    let b = v.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    if exp <= 0 {
        return sign;
    }
    if exp >= 31 {
        return sign | 0x7c00;
    }
    sign | ((exp as u16) << 10) | ((b & 0x7f_ffff) >> 13) as u16
}

fn f16_value(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let man = f32::from(h & 0x3ff);
    sign * match exp {
        0 => man * 2f32.powi(-24),
        31 => f32::INFINITY,
        e => (1.0 + man / 1024.0) * 2f32.powi(e - 15),
    }
}

/// A half-precision format as the kernels see it: the bits of each value.
#[derive(Clone, Copy)]
struct Half {
    to_bits: fn(f32) -> u16,
    value: fn(u16) -> f32,
}

const F16: Half = Half {
    to_bits: f16_bits,
    value: f16_value,
};
const BF16: Half = Half {
    to_bits: bf16_bits,
    value: bf16_value,
};

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The CPU's softmax of each row.
fn softmax_cpu(s: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut want = vec![0.0f32; rows * cols];
    for r in 0..rows {
        let row = &s[r * cols..(r + 1) * cols];
        let mx = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let total: f32 = row.iter().map(|v| (v - mx).exp()).sum();
        for c in 0..cols {
            want[r * cols + c] = (row[c] - mx).exp() / total;
        }
    }
    want
}

/// The CPU's RMS norm of each row.
fn rmsnorm_cpu(x: &[f32], w: &[f32], rows: usize, cols: usize, eps: f32) -> Vec<f32> {
    let mut want = vec![0.0f32; rows * cols];
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let ms: f32 = row.iter().map(|v| v * v).sum::<f32>() / cols as f32;
        let scale = 1.0 / (ms + eps).sqrt();
        for c in 0..cols {
            want[r * cols + c] = row[c] * scale * w[c];
        }
    }
    want
}

/// Runs every kernel of `cuda-src/` on device 0 with typed launches and compares each with the
/// CPU. Checks every device first: a module that cannot run is an error before anything loads.
pub fn run(modules: &Modules) -> Res<(Device, Vec<Outcome>)> {
    let devices = cuda::verify_all_devices(&modules.all())?;
    let device = devices.into_iter().next().ok_or(RuntimeError::NoDevice)?;
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    let mut out = Vec::new();
    let (x, dx) = saxpy(modules, &ctx, &stream, &mut out)?;
    sums(modules, &ctx, &stream, &x, &dx, &mut out)?;
    matmul(modules, &ctx, &stream, &mut out)?;
    softmax(modules, &ctx, &stream, &mut out)?;
    rmsnorm(modules, &ctx, &stream, &mut out)?;
    Ok((device, out))
}

/// The block of the one-dimensional launches.
const BLOCK: (u32, u32, u32) = (256, 1, 1);

/// saxpy and saxpy_params; the input `x` they share with the reductions, on the host and the
/// device.
fn saxpy(
    modules: &Modules,
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    out: &mut Vec<Outcome>,
) -> Res<(Vec<f32>, CudaSlice<f32>)> {
    // saxpy: y = 2x + y
    let n: i32 = 1 << 16;
    let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32 * 0.5).collect();
    let y: Vec<f32> = (0..n).map(|i| (i % 13) as f32).collect();
    let (dx, mut dy) = (stream.clone_htod(&x)?, stream.clone_htod(&y)?);
    let m = modules.saxpy.load(ctx)?;
    let args: signatures::Saxpy<'_> = (n, 2.0, &dx, &mut dy);
    launch(&m, "saxpy", stream, (64, 1, 1), BLOCK, args)?;
    let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| 2.0 * a + b).collect();
    out.push(Outcome {
        kernel: "saxpy",
        max_error: max_diff(&stream.clone_dtoh(&dy)?, &want),
        tolerance: 1e-5,
    });

    // saxpy_params: y = 3x + y, the scalars in the struct shared through bindgen
    let mut dy2 = stream.clone_htod(&y)?;
    let p = ByValue(params::SaxpyParams { alpha: 3.0, n });
    let args: signatures::SaxpyParams<'_> = (p, &dx, &mut dy2);
    launch(&m, "saxpy_params", stream, (64, 1, 1), BLOCK, args)?;
    let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| 3.0 * a + b).collect();
    out.push(Outcome {
        kernel: "saxpy_params",
        max_error: max_diff(&stream.clone_dtoh(&dy2)?, &want),
        tolerance: 1e-5,
    });

    Ok((x, dx))
}

/// The sum of `x`, by blocks and by clusters.
fn sums(
    modules: &Modules,
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    x: &[f32],
    dx: &CudaSlice<f32>,
    out: &mut Vec<Outcome>,
) -> Res<()> {
    // reductions: the sum of x, by blocks and by clusters (of one BLOCK, the default launch)
    let n = x.len() as i32;
    let total: f32 = x.iter().sum();
    for (module, kernel) in [
        (&modules.reduce, "reduce_sum_f32"),
        (&modules.cluster_sum, "cluster_sum_f32"),
    ] {
        let mut sum = stream.alloc_zeros::<f32>(1)?;
        let m = module.load(ctx)?;
        let args: signatures::Sum<'_> = (dx, &mut sum, n);
        launch(&m, kernel, stream, (32, 1, 1), BLOCK, args)?;
        let got = stream
            .clone_dtoh(&sum)?
            .first()
            .copied()
            .unwrap_or(f32::NAN);
        out.push(Outcome {
            kernel,
            max_error: (got - total).abs() / total.abs(),
            tolerance: 1e-4,
        });
    }

    Ok(())
}

/// matmul against the CPU's product.
fn matmul(
    modules: &Modules,
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    out: &mut Vec<Outcome>,
) -> Res<()> {
    // matmul: [m, k] x [k, n]
    let (mm, kk, nn) = (67usize, 45usize, 53usize);
    let a: Vec<f32> = (0..mm * kk).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    let b: Vec<f32> = (0..kk * nn).map(|i| ((i * 3) % 7) as f32 - 3.0).collect();
    let mut want = vec![0.0f32; mm * nn];
    for r in 0..mm {
        for c in 0..nn {
            want[r * nn + c] = (0..kk).map(|i| a[r * kk + i] * b[i * nn + c]).sum();
        }
    }
    let (da, db, mut dc) = (
        stream.clone_htod(&a)?,
        stream.clone_htod(&b)?,
        stream.alloc_zeros::<f32>(mm * nn)?,
    );
    let m = modules.matmul.load(ctx)?;
    let grid = (nn.div_ceil(16) as u32, mm.div_ceil(16) as u32, 1);
    let args: signatures::Matmul<'_> = (&da, &db, &mut dc, mm as i32, nn as i32, kk as i32);
    launch(&m, "matmul_f32", stream, grid, (16, 16, 1), args)?;
    out.push(Outcome {
        kernel: "matmul_f32",
        max_error: max_diff(&stream.clone_dtoh(&dc)?, &want),
        tolerance: 1e-3,
    });

    Ok(())
}

/// softmax in f32, f16 and bf16.
fn softmax(
    modules: &Modules,
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    out: &mut Vec<Outcome>,
) -> Res<()> {
    // softmax over rows, in f32, f16 and bf16 (the CPU reference from the rounded inputs)
    let (rows, cols) = (37usize, 1000usize);
    let s: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 13) % 29) as f32 * 0.1 - 1.0)
        .collect();
    let m = modules.softmax.load(ctx)?;
    let grid = (rows as u32, 1, 1);
    let (ds, mut dout) = (
        stream.clone_htod(&s)?,
        stream.alloc_zeros::<f32>(rows * cols)?,
    );
    let args: signatures::Softmax<'_, f32> = (&ds, &mut dout, cols as i32);
    launch(&m, "softmax_f32", stream, grid, BLOCK, args)?;
    out.push(Outcome {
        kernel: "softmax_f32",
        max_error: max_diff(&stream.clone_dtoh(&dout)?, &softmax_cpu(&s, rows, cols)),
        tolerance: 1e-5,
    });
    for (half, kernel, tolerance) in [(F16, "softmax_f16", 1e-5), (BF16, "softmax_bf16", 3e-5)] {
        let bits: Vec<u16> = s.iter().map(|&v| (half.to_bits)(v)).collect();
        let rounded: Vec<f32> = bits.iter().map(|&h| (half.value)(h)).collect();
        let (ds, mut dout) = (
            stream.clone_htod(&bits)?,
            stream.alloc_zeros::<u16>(rows * cols)?,
        );
        let args: signatures::Softmax<'_, u16> = (&ds, &mut dout, cols as i32);
        launch(&m, kernel, stream, grid, BLOCK, args)?;
        let got: Vec<f32> = stream
            .clone_dtoh(&dout)?
            .iter()
            .map(|&h| (half.value)(h))
            .collect();
        out.push(Outcome {
            kernel,
            max_error: max_diff(&got, &softmax_cpu(&rounded, rows, cols)),
            tolerance,
        });
    }

    Ok(())
}

/// RMS norm in f32, f16 and bf16.
fn rmsnorm(
    modules: &Modules,
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    out: &mut Vec<Outcome>,
) -> Res<()> {
    // RMS norm over rows, in f32, f16 and bf16
    let (rows, cols, eps) = (23usize, 768usize, 1e-5f32);
    let xs: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 5) % 17) as f32 * 0.25 - 2.0)
        .collect();
    let ws: Vec<f32> = (0..cols).map(|i| 0.5 + (i % 7) as f32 * 0.125).collect();
    let m = modules.rmsnorm.load(ctx)?;
    let grid = (rows as u32, 1, 1);
    let (dxs, dws, mut dys) = (
        stream.clone_htod(&xs)?,
        stream.clone_htod(&ws)?,
        stream.alloc_zeros::<f32>(rows * cols)?,
    );
    let args: signatures::Rmsnorm<'_, f32> = (&dxs, &dws, &mut dys, cols as i32, eps);
    launch(&m, "rmsnorm_f32", stream, grid, BLOCK, args)?;
    out.push(Outcome {
        kernel: "rmsnorm_f32",
        max_error: max_diff(
            &stream.clone_dtoh(&dys)?,
            &rmsnorm_cpu(&xs, &ws, rows, cols, eps),
        ),
        tolerance: 1e-4,
    });
    for (half, kernel, tolerance) in [(F16, "rmsnorm_f16", 5e-3), (BF16, "rmsnorm_bf16", 4e-2)] {
        let xb: Vec<u16> = xs.iter().map(|&v| (half.to_bits)(v)).collect();
        let wb: Vec<u16> = ws.iter().map(|&v| (half.to_bits)(v)).collect();
        let xr: Vec<f32> = xb.iter().map(|&h| (half.value)(h)).collect();
        let wr: Vec<f32> = wb.iter().map(|&h| (half.value)(h)).collect();
        let (dxb, dwb, mut dyb) = (
            stream.clone_htod(&xb)?,
            stream.clone_htod(&wb)?,
            stream.alloc_zeros::<u16>(rows * cols)?,
        );
        let args: signatures::Rmsnorm<'_, u16> = (&dxb, &dwb, &mut dyb, cols as i32, eps);
        launch(&m, kernel, stream, grid, BLOCK, args)?;
        let got: Vec<f32> = stream
            .clone_dtoh(&dyb)?
            .iter()
            .map(|&h| (half.value)(h))
            .collect();
        out.push(Outcome {
            kernel,
            max_error: max_diff(&got, &rmsnorm_cpu(&xr, &wr, rows, cols, eps)),
            tolerance,
        });
    }
    Ok(())
}
