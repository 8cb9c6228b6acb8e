//! Building kernels with fatkit: arch profiles now; toolchains, planning, the cache and
//! bundling as they land.
//!
//! This is the only fatkit crate that touches the file system for builds and, once toolchains
//! land, the only one that spawns compilers.

pub mod cache;
pub mod pipeline;
pub mod profile;
pub mod toolchain;

pub use profile::{ProfileError, ProfileSet};
