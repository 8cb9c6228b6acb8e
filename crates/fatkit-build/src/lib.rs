//! Building kernels with fatkit: the content-addressed cache, the pipeline (plan, nvcc in
//! parallel, bundling, generated Rust), [`Build`] (the `build.rs` API), `build-kernels`'
//! projects, `package`'s release and `doctor`; with, under their own names, the crates it
//! builds on: fatkit-package (profiles, the module format, the build-script check) and
//! fatkit-toolchain (discovery, probing, provisioning, NVRTC, launchers).
//!
//! This is the only fatkit crate that spawns compilers and writes build outputs. Without its
//! default feature `build` it is only the build-script check of prebuilt kernels
//! ([`prebuilt::check_or_exit`]) and what that check reads (profiles, `[package.metadata.fatkit]`,
//! manifests): a handful of small dependencies, no compiler, no C code, for the users of a
//! crate that ships its kernels.

#[cfg(feature = "build")]
pub mod builder;
#[cfg(feature = "build")]
pub mod cache;
#[cfg(feature = "build")]
pub mod doctor;
#[cfg(feature = "build")]
pub mod floor;
#[cfg(feature = "build")]
pub mod host;
#[cfg(feature = "build")]
pub mod jobs;
#[cfg(feature = "layout")]
pub mod layout;
#[cfg(feature = "build")]
pub mod owned;
#[cfg(feature = "build")]
pub mod pipeline;
#[cfg(feature = "build")]
pub mod plan;
#[cfg(feature = "build")]
pub mod project;
#[cfg(feature = "build")]
pub mod refused;
#[cfg(feature = "build")]
pub mod release;
pub mod workspace;

// The light half (what a kernel crate's users compile: profiles, the module format, package
// metadata, the build-script check) is its own crate, under the same names here.
pub use fatkit_package::{error, flags, kernel_sets, module, out, prebuilt, profile, sources};
// The toolchains (discovery, probing, provisioning, NVRTC, launchers, spawning a tool) are
// their own crate too, under the same names here.
#[cfg(feature = "build")]
pub use fatkit_toolchain::{self as toolchain, command, launcher, nvrtc};

#[cfg(feature = "build")]
pub use builder::{cuda_cc, Build};
pub use error::BuildError;
pub use profile::{ProfileError, ProfileSet};

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
