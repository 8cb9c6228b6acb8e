//! A fatkit project, over the compile engine (fatkit-build): what `build-kernels` builds
//! ([`units`]: a directory of sources, or a workspace's `cuda-src/` and every package declaring
//! `[package.metadata.fatkit]`), reading a workspace with `cargo metadata` ([`workspace`]),
//! `package`'s release archive ([`archive`]), `doctor`, the driver floor of the toolchains a
//! machine has ([`floor`]) and the target planner's weighing of built modules ([`weigh`]).

pub mod archive;
pub mod doctor;
pub mod floor;
pub mod units;
pub mod weigh;
pub mod workspace;
