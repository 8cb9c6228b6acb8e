//! `kernels/saxpy.cu`, prebuilt for every target of the `full` profile into `kernels/prebuilt/`
//! (committed, shipped in the `.crate`): its users embed the kernels with no CUDA toolkit, and
//! fatkit-runtime checks a device before anything is loaded.
//!
//! ```
//! use fatkit_runtime::Device;
//! let module = fatkit_example_kernels::saxpy().unwrap();
//! // A simulated RTX 5090: both kernels have a cubin for it.
//! let device = Device::new("12.0".parse().unwrap(), None);
//! assert!(module.check(&device).is_ok());
//! ```

use fatkit_runtime::cuda::{LoadedModule, RuntimeError};
use fatkit_runtime::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};
use fatkit_runtime::{Module, ModuleError};

/// The arguments of `saxpy_f32(int n, float a, const float* x, float* y)`.
pub type SaxpyF32<'a> = (i32, f32, &'a CudaSlice<f32>, &'a mut CudaSlice<f32>);
/// The arguments of `saxpy_bf16(int n, __nv_bfloat16 a, const __nv_bfloat16* x,
/// __nv_bfloat16* y)`, each bf16 as its bits.
pub type SaxpyBf16<'a> = (i32, u16, &'a CudaSlice<u16>, &'a mut CudaSlice<u16>);

/// `y = a*x + y` over the shorter of `x` and `y`, on `stream`, with the module loaded on the
/// stream's context (`saxpy()?.load(&ctx)?`). A typed launch: the arguments are checked against
/// the kernel's parameters before the driver sees them.
pub fn saxpy_f32(
    loaded: &LoadedModule,
    stream: &CudaStream,
    a: f32,
    x: &CudaSlice<f32>,
    y: &mut CudaSlice<f32>,
) -> Result<(), RuntimeError> {
    let n = x.len().min(y.len());
    let n32 = i32::try_from(n).unwrap_or(i32::MAX);
    let cfg = LaunchConfig::for_num_elems(u32::try_from(n).unwrap_or(u32::MAX));
    let args: SaxpyF32<'_> = (n32, a, x, y);
    loaded.kernel("saxpy_f32")?.launch(stream, cfg, args)
}

/// `saxpy_f32` (every GPU from Volta) and `saxpy_bf16` (Ampere and newer, by declaration).
pub fn saxpy() -> Result<&'static Module, &'static ModuleError> {
    static MODULE: std::sync::OnceLock<Result<Module, ModuleError>> = std::sync::OnceLock::new();
    MODULE
        .get_or_init(|| {
            fatkit_runtime::include_module!(concat!(env!("FATKIT_KERNELS_DIR"), "/saxpy.rs"))
        })
        .as_ref()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use fatkit_runtime::Device;

    /// The launch types fit the parameters the build read from every image.
    #[test]
    fn launch_types_fit_the_kernels() {
        let module = super::saxpy().unwrap();
        module
            .check_args::<super::SaxpyF32<'_>>("saxpy_f32")
            .unwrap();
        module
            .check_args::<super::SaxpyBf16<'_>>("saxpy_bf16")
            .unwrap();
        assert_eq!(
            module.params("saxpy_bf16"),
            Some(&[(0, 4), (4, 2), (8, 8), (16, 8)][..])
        );
        assert!(module
            .check_args::<super::SaxpyF32<'_>>("saxpy_bf16")
            .is_err());
    }

    #[test]
    fn f32_runs_from_volta_and_bf16_from_ampere_by_declaration() {
        let module = super::saxpy().unwrap();
        for (cc, ampere) in [
            ("7.0", false),
            ("7.5", false),
            ("8.0", true),
            ("8.6", true),
            ("8.9", true),
            ("9.0", true),
            ("10.0", true),
            ("12.0", true),
        ] {
            let device = Device::new(cc.parse().unwrap(), None).named(format!("a CC {cc} GPU"));
            assert!(module.check(&device).is_ok(), "CC {cc}");
            let f32 = module.kernel_check(&device, "saxpy_f32").unwrap();
            assert!(f32.is_ok(), "CC {cc}: {f32:?}");
            let bf16 = module.kernel_check(&device, "saxpy_bf16").unwrap();
            assert_eq!(bf16.is_ok(), ampere, "CC {cc}: {bf16:?}");
            if let Err(failure) = bf16 {
                assert_eq!(
                    failure.declared,
                    Some("sm_80,sm_86,sm_89,sm_90,sm_100,sm_120,compute_120"),
                    "CC {cc}"
                );
            }
        }
    }
}

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
