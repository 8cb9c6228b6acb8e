//! The kernels of `kernels/`, as `cargo xtask build-kernels` wrote them (build.rs checks they
//! are there and current, and sets FATKIT_KERNELS_DIR), embedded in the binary and checked
//! against a device before anything is loaded.

use fatkit_runtime::cudarc::driver::CudaSlice;
use fatkit_runtime::{Module, ModuleError};

/// The arguments of `vector_add_f32(const float* a, const float* b, float* out, int n)`, for
/// `loaded.kernel("vector_add_f32")?.launch(&stream, cfg, args)`.
pub type VectorAddF32<'a> = (
    &'a CudaSlice<f32>,
    &'a CudaSlice<f32>,
    &'a mut CudaSlice<f32>,
    i32,
);
/// The arguments of `vector_scale_f32(float* x, float s, int n)`.
pub type VectorScaleF32<'a> = (&'a mut CudaSlice<f32>, f32, i32);

/// `kernels/vector.cu`: `vector_add_f32`, `vector_scale_f32`.
pub fn vector() -> Result<&'static Module, &'static ModuleError> {
    static MODULE: std::sync::OnceLock<Result<Module, ModuleError>> = std::sync::OnceLock::new();
    MODULE
        .get_or_init(|| {
            fatkit_runtime::include_module!(concat!(env!("FATKIT_KERNELS_DIR"), "/vector.rs"))
        })
        .as_ref()
}

#[cfg(test)]
mod tests {
    use fatkit_runtime::Device;

    /// The launch types fit the parameters the build recorded, with no GPU.
    #[test]
    fn launch_types_fit_the_kernels() {
        let m = super::vector().unwrap();
        m.check_args::<super::VectorAddF32<'_>>("vector_add_f32")
            .unwrap();
        m.check_args::<super::VectorScaleF32<'_>>("vector_scale_f32")
            .unwrap();
        assert!(m
            .check_args::<super::VectorScaleF32<'_>>("vector_add_f32")
            .is_err());
    }

    #[test]
    fn every_kernel_runs_from_volta_to_blackwell() {
        for cc in ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"] {
            let device = Device::new(cc.parse().unwrap(), None).named(format!("a CC {cc} GPU"));
            let plan = super::vector().unwrap().check(&device);
            assert!(plan.is_ok(), "CC {cc}: {}", plan.unwrap_err());
        }
    }
}
