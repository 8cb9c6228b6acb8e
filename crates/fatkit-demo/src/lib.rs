//! The repository's kernels, embedded with `fatkit_runtime::include_module!`, run on the first
//! GPU and compared with CPU references.
#![allow(unsafe_code)]
// kernel launches: every block says what it relies on
// CPU reference loops index within bounds they compute themselves.
#![allow(clippy::indexing_slicing)]

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use fatkit_runtime::cuda::{self, LoadedModule, RuntimeError};
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

/// A kernel argument: a device buffer or a scalar, as cuLaunchKernel wants its address.
enum Arg<'a> {
    Buf(&'a CudaSlice<f32>),
    I32(i32),
    F32(f32),
    /// A struct passed by value, at most 8 bytes (`SaxpyParams`).
    Params(params::SaxpyParams),
}

fn launch(
    m: &LoadedModule<'_>,
    kernel: &str,
    stream: &Arc<CudaStream>,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    args: &[Arg<'_>],
) -> Res<()> {
    let f = m.function(kernel)?;
    let mut guards = Vec::new();
    let mut values: Vec<u64> = Vec::with_capacity(args.len());
    for a in args {
        values.push(match a {
            Arg::Buf(b) => {
                let (ptr, guard) = b.device_ptr(stream);
                guards.push(guard);
                ptr
            }
            Arg::I32(v) => u64::from(*v as u32),
            Arg::F32(v) => u64::from(v.to_bits()),
            Arg::Params(p) => {
                const _: () = assert!(std::mem::size_of::<params::SaxpyParams>() <= 8);
                let mut slot = 0u64;
                // SAFETY: SaxpyParams is plain old data no larger than the u64 it is copied
                // into (checked above); the bytes are the struct's, in the layout nvcc was
                // shown to share.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        (p as *const params::SaxpyParams).cast::<u8>(),
                        (&mut slot as *mut u64).cast::<u8>(),
                        std::mem::size_of::<params::SaxpyParams>(),
                    );
                }
                slot
            }
        });
    }
    // Each parameter's address: 8 bytes for pointers, the low 4 bytes (little-endian) for
    // i32/f32, which is what the kernels declare.
    let mut params: Vec<*mut c_void> = values
        .iter_mut()
        .map(|v| (v as *mut u64).cast::<c_void>())
        .collect();
    // SAFETY: `params` has one entry per parameter of `kernel` (the signatures in cuda-src),
    // each pointing at a value of that parameter's type that lives until this call returns;
    // the device buffers are alive and as large as the grid reads and writes.
    unsafe { f.launch(stream, grid, block, 0, &mut params) }?;
    stream.synchronize()?;
    drop(guards);
    Ok(())
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Runs saxpy, the block reduction, matmul and softmax on device 0 and compares each with
/// the CPU. Checks every device first: a module that cannot run is an error before anything
/// loads.
pub fn run(modules: &Modules) -> Res<(Device, Vec<Outcome>)> {
    let devices = cuda::verify_all_devices(&modules.all())?;
    let device = devices.into_iter().next().ok_or(RuntimeError::NoDevice)?;
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    let mut out = Vec::new();

    // saxpy: y = 2x + y
    let n: i32 = 1 << 16;
    let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32 * 0.5).collect();
    let y: Vec<f32> = (0..n).map(|i| (i % 13) as f32).collect();
    let (dx, dy) = (stream.clone_htod(&x)?, stream.clone_htod(&y)?);
    let m = modules.saxpy.load(&ctx)?;
    launch(
        &m,
        "saxpy",
        &stream,
        (64, 1, 1),
        (256, 1, 1),
        &[Arg::I32(n), Arg::F32(2.0), Arg::Buf(&dx), Arg::Buf(&dy)],
    )?;
    let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| 2.0 * a + b).collect();
    out.push(Outcome {
        kernel: "saxpy",
        max_error: max_diff(&stream.clone_dtoh(&dy)?, &want),
        tolerance: 1e-5,
    });

    // saxpy_params: y = 3x + y, the scalars in the struct shared through bindgen
    let dy2 = stream.clone_htod(&y)?;
    launch(
        &m,
        "saxpy_params",
        &stream,
        (64, 1, 1),
        (256, 1, 1),
        &[
            Arg::Params(params::SaxpyParams { alpha: 3.0, n }),
            Arg::Buf(&dx),
            Arg::Buf(&dy2),
        ],
    )?;
    let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| 3.0 * a + b).collect();
    out.push(Outcome {
        kernel: "saxpy_params",
        max_error: max_diff(&stream.clone_dtoh(&dy2)?, &want),
        tolerance: 1e-5,
    });

    // reduction: sum of x
    let sum = stream.alloc_zeros::<f32>(1)?;
    let m = modules.reduce.load(&ctx)?;
    launch(
        &m,
        "reduce_sum_f32",
        &stream,
        (32, 1, 1),
        (256, 1, 1),
        &[Arg::Buf(&dx), Arg::Buf(&sum), Arg::I32(n)],
    )?;
    let want: f32 = x.iter().sum();
    let got = stream
        .clone_dtoh(&sum)?
        .first()
        .copied()
        .unwrap_or(f32::NAN);
    out.push(Outcome {
        kernel: "reduce_sum_f32",
        max_error: (got - want).abs() / want.abs(),
        tolerance: 1e-4,
    });

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
    let (da, db, dc) = (
        stream.clone_htod(&a)?,
        stream.clone_htod(&b)?,
        stream.alloc_zeros::<f32>(mm * nn)?,
    );
    let m = modules.matmul.load(&ctx)?;
    let grid = (nn.div_ceil(16) as u32, mm.div_ceil(16) as u32, 1);
    launch(
        &m,
        "matmul_f32",
        &stream,
        grid,
        (16, 16, 1),
        &[
            Arg::Buf(&da),
            Arg::Buf(&db),
            Arg::Buf(&dc),
            Arg::I32(mm as i32),
            Arg::I32(nn as i32),
            Arg::I32(kk as i32),
        ],
    )?;
    out.push(Outcome {
        kernel: "matmul_f32",
        max_error: max_diff(&stream.clone_dtoh(&dc)?, &want),
        tolerance: 1e-3,
    });

    // softmax over rows
    let (rows, cols) = (37usize, 1000usize);
    let s: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 13) % 29) as f32 * 0.1 - 1.0)
        .collect();
    let mut want = vec![0.0f32; rows * cols];
    for r in 0..rows {
        let row = &s[r * cols..(r + 1) * cols];
        let mx = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let total: f32 = row.iter().map(|v| (v - mx).exp()).sum();
        for c in 0..cols {
            want[r * cols + c] = (row[c] - mx).exp() / total;
        }
    }
    let (ds, dout) = (
        stream.clone_htod(&s)?,
        stream.alloc_zeros::<f32>(rows * cols)?,
    );
    let m = modules.softmax.load(&ctx)?;
    launch(
        &m,
        "softmax_f32",
        &stream,
        (rows as u32, 1, 1),
        (256, 1, 1),
        &[Arg::Buf(&ds), Arg::Buf(&dout), Arg::I32(cols as i32)],
    )?;
    out.push(Outcome {
        kernel: "softmax_f32",
        max_error: max_diff(&stream.clone_dtoh(&dout)?, &want),
        tolerance: 1e-5,
    });
    Ok((device, out))
}
