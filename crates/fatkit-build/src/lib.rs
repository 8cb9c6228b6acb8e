//! Building kernels with fatkit: arch profiles, toolchains (discovery, probing, provisioning),
//! the content-addressed cache, the pipeline (plan, nvcc in parallel, bundling, generated Rust)
//! and [`Build`], the `build.rs` API.
//!
//! This is the only fatkit crate that spawns compilers and writes build outputs.

pub mod builder;
pub mod cache;
pub mod command;
pub mod doctor;
pub mod flags;
pub mod kernel_sets;
#[cfg(feature = "layout")]
pub mod layout;
pub mod module;
pub mod nvrtc;
pub mod out;
pub mod pipeline;
pub mod prebuilt;
pub mod profile;
pub mod project;
pub mod release;
pub mod toolchain;
pub mod workspace;

pub use builder::{cuda_cc, Build};
pub use profile::{ProfileError, ProfileSet};
