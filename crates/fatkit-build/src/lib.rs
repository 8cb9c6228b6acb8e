//! The fatkit compile engine: what a build is asked resolved once ([`resolve`]), the
//! content-addressed [`cache`], the [`pipeline`] (plan, nvcc and NVRTC in parallel, the
//! kernel-list and driver checks, bundling, generated Rust), [`Build`] (the `build.rs` API) and
//! host-code libraries ([`host`]). It depends on the crates it builds with by name:
//! fatkit-package (profiles, the module format, declarations) and fatkit-toolchain (discovery,
//! probing, provisioning, NVRTC, launchers); a project's units, `package`, `doctor` and the
//! planner's weighing are fatkit-project's, over this crate.
//!
//! With fatkit-toolchain, the crates that spawn compilers (every spawn through fatkit-run);
//! the one that writes build outputs. A crate whose kernels are prebuilt needs none of it:
//! its build script checks them with `fatkit_package::prebuilt::check_or_exit`.

pub(crate) mod builder;
pub mod cache;
pub mod host;
pub(crate) mod jobs;
#[cfg(feature = "layout")]
pub mod layout;
pub mod owned;
pub mod pipeline;
pub mod refused;
pub mod resolve;

pub use builder::{cuda_cc, Build};
pub use fatkit_package::error::BuildError;

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
