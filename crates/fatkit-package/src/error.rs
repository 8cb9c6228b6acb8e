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
    /// The build-script check run where cargo did not set `var`.
    #[error("{var} is not set: fatkit_package::prebuilt::check runs in a build script")]
    NotInBuildScript { var: &'static str },
    #[error("{}: not UTF-8", .0.display())]
    ManifestNotUtf8(PathBuf),
    #[error("{}: no [package.metadata.fatkit]; list the package's kernels there (see the fatkit README)", .0.display())]
    NoFatkitTable(PathBuf),
    #[error("{}: {source}", path.display())]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("OUT_DIR {}: not laid out as cargo lays it out (<target dir>/<profile>/build/<package>-<hash>/out); run this check from a build script cargo runs", .0.display())]
    OutDirLayout(PathBuf),
    /// A package's modules are missing or stale: `what` says which (`are stale`, `are
    /// missing`, `are stale or missing`), a line per module, and the fix for where they are.
    #[error("kernels of package {package} {what} in {}:\n  {}\n{fix}", dir.display(), lines.join("\n  "))]
    Unfit {
        package: String,
        what: &'static str,
        dir: PathBuf,
        lines: Vec<String>,
        fix: String,
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
