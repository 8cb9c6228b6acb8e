//! The tests of shipping them: `package`, `plan`, a vendored crate and its consumer, what the
//! README says.

pub(crate) mod package;
mod package_declared;
mod plan;
pub(crate) mod readme;
mod vendored;
