//! Why a build, or the build-script check of prebuilt kernels, could not run at all.

use std::path::{Path, PathBuf};

/// Why a build could not run at all (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Profile(#[from] crate::profile::ProfileError),
    /// An error of the build proper (fatkit-build's plan or toolchains), as it says itself.
    #[error(transparent)]
    Build(Box<dyn std::error::Error + Send + Sync>),
}

/// A [`BuildError::Io`] for `path`, for `map_err`.
pub fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |source| BuildError::Io {
        path: path.to_owned(),
        source,
    }
}
