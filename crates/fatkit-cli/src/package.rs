//! `package [--profile P]`: build the workspace's kernels and release binaries for a profile,
//! audit every kernel of every binary against it, and only then write the release archive
//! (`fatkit_project::archive`).

use std::io::Write;

use clap::Args;
use fatkit_project::archive::{self, Options};

use crate::build_kernels::Progress;
use crate::{Outcome, Result};

#[derive(Debug, Args)]
pub struct Package {
    /// The library's options, as the arguments they are (`fatkit_project::archive::Options`).
    #[command(flatten)]
    options: Options,
}

impl Package {
    pub fn run(self, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        let progress = Progress::new(false, out);
        let res = archive::package(&self.options, &progress);
        let write_failed = progress.failed();
        match res? {
            archive::Outcome::Packaged { .. } if !write_failed => Ok(Outcome::Ok),
            _ => Ok(Outcome::Finding),
        }
    }
}
