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
    #[error(transparent)]
    Workspace(#[from] crate::workspace::WorkspaceError),
    /// A tool fatkit ran failed (rustc, cargo).
    #[error(transparent)]
    Tool(#[from] fatkit_run::ToolError),
    /// A tool fatkit ran on `path` failed (objcopy on a host object, ar on a library).
    #[error("{}: {source}", path.display())]
    ToolOn {
        path: PathBuf,
        source: fatkit_run::ToolError,
    },
    /// A manifest that is not TOML.
    #[error("{}: {source}", path.display())]
    Toml {
        path: PathBuf,
        source: toml::de::Error,
    },
    /// An error of the build proper (fatkit-build's plan or toolchains), as it says itself.
    #[error(transparent)]
    Build(Box<dyn std::error::Error + Send + Sync>),
}

impl BuildError {
    /// An error of the build proper (a toolchain, the layout check, an output file that is
    /// not fatkit's), kept whole: [`BuildError::Build`].
    pub fn of(e: impl std::error::Error + Send + Sync + 'static) -> BuildError {
        BuildError::Build(Box::new(e))
    }
}

/// A [`BuildError::Io`] for `path`, for `map_err`.
pub fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |source| BuildError::Io {
        path: path.to_owned(),
        source,
    }
}
