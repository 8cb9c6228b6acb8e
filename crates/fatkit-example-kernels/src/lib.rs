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

use fatkit_runtime::{ManifestError, Module};

/// `saxpy_f32` (every GPU from Volta) and `saxpy_bf16` (Ampere and newer, by declaration).
pub fn saxpy() -> Result<&'static Module, &'static ManifestError> {
    static MODULE: std::sync::OnceLock<Result<Module, ManifestError>> = std::sync::OnceLock::new();
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
