//! What a fatkit kernel crate ships and its users' build scripts check, with no compiler and
//! no C code: arch profiles ([`profile`]), compile flags ([`flags`]), declared kernel sets
//! ([`kernel_sets`]), the module format ([`module`]), `[package.metadata.fatkit]`
//! ([`workspace`]), the outputs' write discipline ([`out`]), source naming ([`sources`]), and
//! the build-script check of prebuilt kernels ([`prebuilt::check_or_exit`]). A crate whose
//! kernels are prebuilt depends on this crate alone; the compile engine (fatkit-build) builds
//! on it, naming it.

pub mod error;
pub mod flags;
pub(crate) mod inputs;
pub mod kernel_sets;
pub mod module;
pub mod out;
pub mod prebuilt;
pub mod profile;
pub mod sources;
pub mod workspace;

pub use error::BuildError;
pub use profile::{ProfileError, ProfileSet};
