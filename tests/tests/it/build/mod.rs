//! The tests of building kernels: `build-kernels`, `Build` in build scripts, toolchains, launchers,
//! the cache.

mod boundaries;
mod build_kernels;
pub(crate) mod build_rs_api;
mod build_rs_library;
mod cccl;
mod doctor;
pub(crate) mod file_targets;
mod interrupted;
mod launcher;
mod layout;
mod multi_toolchain;
mod nvrtc_stage;
mod one_unit;
mod real_kernels;
