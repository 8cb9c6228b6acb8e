//! `package [--profile P]`: build the workspace's kernels and release binaries for a profile,
//! audit every kernel of every binary against it, and only then write the release archive
//! (`fatkit_build::release`).

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use fatkit_build::release::{self, Options};

use crate::build_kernels::Progress;
use crate::{Outcome, Result};

#[derive(Debug, Args)]
pub struct Package {
    /// The arch profile every kernel of every binary must cover
    #[arg(long, default_value = fatkit_build::profile::DEFAULT)]
    profile: String,
    /// The workspace's Cargo.toml [default: the workspace of the current directory]
    #[arg(long, value_name = "PATH")]
    manifest_path: Option<PathBuf>,
    /// The cargo profile the binaries are built with
    #[arg(long, default_value = "release", value_name = "NAME")]
    cargo_profile: String,
    /// Cargo's target directory [default: the workspace's]
    #[arg(long, value_name = "DIR")]
    target_dir: Option<PathBuf>,
    /// Where the archive goes [default: dist/ in the workspace root]
    #[arg(long, value_name = "DIR")]
    dist: Option<PathBuf>,
}

impl Package {
    pub fn run(self, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        let dir = match &self.manifest_path {
            Some(p) => p
                .parent()
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
            None => std::env::current_dir()?,
        };
        let opts = Options {
            profile: self.profile,
            dir,
            cargo_profile: self.cargo_profile,
            target_dir: self.target_dir,
            dist: self.dist,
        };
        let progress = Progress::new(false, out);
        let res = release::package(&opts, &progress);
        let write_failed = progress.failed();
        match res? {
            release::Outcome::Packaged { .. } if !write_failed => Ok(Outcome::Ok),
            _ => Ok(Outcome::Finding),
        }
    }
}
