//! `diff OLD NEW`: does the new release still run where the old one did? Both read and judged
//! as `audit` judges them, on the same GPUs and driver; the changes are
//! [`fatkit_audit::diff`]'s, printed as text or its JSON data.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use fatkit_audit::analyse;
use fatkit_audit::diff::Unfit;

use crate::{Error, Outcome, Result};

#[derive(Debug, Args)]
pub struct Diff {
    /// The old release: a binary, wheel, directory, container image or lock
    #[arg(value_name = "OLD")]
    old: PathBuf,
    /// The new release, of the same kind
    #[arg(value_name = "NEW")]
    new: PathBuf,
    /// The GPUs to compare on: product names or compute capabilities, given several times or
    /// comma-separated [default: one of each generation, Volta to Blackwell]
    #[arg(long, value_name = "NAME|X.Y", value_delimiter = ',')]
    gpu: Vec<String>,
    /// The driver of the GPUs: as nvidia-smi prints it (570.86.10) or cuDriverGetVersion's integer (12080)
    #[arg(long, value_name = "VER")]
    driver: Option<String>,
    /// The changes that fail the run (exit 1), comma-separated: gpu-lost, kernels-lost,
    /// targets-dropped, ptx-removed, floor-raised, stubs-added, now-by-ptx, library-gone, answer-worse [default: all of them]
    #[arg(long, value_name = "KINDS", value_delimiter = ',')]
    fail_on: Vec<String>,
    /// Print JSON for machines instead of text
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    lock: fatkit_lock::LockArgs,
}

impl Diff {
    pub fn run(self, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        let counted = fatkit_audit::diff::counted(&self.fail_on).map_err(Error::FailOn)?;
        let driver = crate::parse_option("--driver", self.driver.as_deref())?;
        let gpus = crate::audit::gpus_of(&self.gpu, None)?;
        let lock = self.lock.settings().map_err(fatkit_audit::Error::from)?;
        let options = fatkit_audit::diff::options(gpus, driver, lock);
        let (old, new) = (
            analyse(&[self.old], &options)?,
            analyse(&[self.new], &options)?,
        );
        let diff = fatkit_audit::diff::diff(&old, &new).map_err(|unfit| match unfit {
            Unfit::Invalid => Error::AuditInvalid,
            Unfit::Kinds(a, b) => Error::DiffKinds {
                old: a.words(),
                new: b.words(),
            },
        })?;
        if self.json {
            serde_json::to_writer_pretty(&mut *out, &diff).map_err(std::io::Error::from)?;
            writeln!(out)?;
        } else {
            fatkit_audit::text::write_diff(out, &diff, &counted)?;
        }
        Ok(match diff.regressions(&counted) {
            0 => Outcome::Ok,
            _ => Outcome::Finding,
        })
    }
}
