//! GPU targets, every notation for them, and the rules that decide which image of a fatbin a
//! CUDA driver runs on a given GPU.
//!
//! Pure data and functions: no I/O, no processes, nothing but `serde`.
//! The facts come from docs/ARCH_RULES.md; where a fact rests on one source it is a table row,
//! not a branch, and carries [`toolkit::Confidence::Medium`].

mod cc;
pub mod compiler;
pub mod declared;
pub mod driver;
pub(crate) mod driver_release;
pub mod explain;
pub mod fingerprint;
pub mod floor;
pub mod load;
pub mod notation;
pub(crate) mod parse;
pub mod products;
pub mod profile;
pub mod rules;
pub mod size_budget;
mod target;
pub mod target_search;
pub mod toolkit;

pub use cc::Cc;
pub use compiler::{Compiler, Pin};
pub use driver::{DriverRelease, DriverVersion};
pub use notation::Notation;
pub use parse::ParseError;
pub use profile::Compression;
pub use rules::{Device, Image, Policy, Verdict};
pub use target::{ImageKind, Suffix, Target, TargetSet};
pub use toolkit::{CudaVersion, PtxIsa};

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
