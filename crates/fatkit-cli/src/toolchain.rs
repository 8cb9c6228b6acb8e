//! `toolchain install [--cuda VER]` and `toolchain list`.

use std::io::Write;

use clap::{Args, Subcommand};
use fatkit_arch::toolkit::CudaVersion;
use fatkit_build::toolchain::{self, ToolchainError, DEFAULT_CUDA};

use crate::{table, Error, Outcome, Result};

#[derive(Debug, Args)]
pub struct ToolchainCmd {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Provision NVIDIA's nvcc and cuobjdump from their pip wheels into the cache (no root)
    Install {
        /// The CUDA 13.x release to install
        #[arg(long, value_name = "X.Y", default_value_t = DEFAULT_CUDA.to_string())]
        cuda: String,
    },
    /// List the toolchains provisioned in the cache
    List {
        /// Print only the bin directory of the default toolchain (for PATH)
        #[arg(long)]
        bin_dir: bool,
    },
}

impl From<ToolchainError> for Error {
    fn from(e: ToolchainError) -> Error {
        Error::Input(e.to_string())
    }
}

impl ToolchainCmd {
    pub fn run(self, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        match self.action {
            Action::Install { cuda } => {
                let cuda: CudaVersion = cuda.parse()?;
                let tc = toolchain::provision(cuda, &mut |line| eprintln!("toolchain: {line}"))?;
                writeln!(out, "{}", tc.bin_dir().display())?;
                Ok(Outcome::Ok)
            }
            Action::List { bin_dir: true } => match toolchain::find_default()? {
                Some(tc) => {
                    writeln!(out, "{}", tc.bin_dir().display())?;
                    Ok(Outcome::Ok)
                }
                None => Err(Error::Input(
                    "no toolchain found; run `cargo xtask toolchain install`".to_owned(),
                )),
            },
            Action::List { bin_dir: false } => {
                let rows: Vec<Vec<String>> = toolchain::list_provisioned()?
                    .into_iter()
                    .map(|tc| {
                        let version = tc.version.map_or_else(|| "?".to_owned(), |v| v.to_string());
                        let cuobjdump = if tc.cuobjdump().is_some() {
                            "yes"
                        } else {
                            "no"
                        };
                        vec![
                            version,
                            cuobjdump.to_owned(),
                            tc.bin_dir().display().to_string(),
                        ]
                    })
                    .collect();
                writeln!(out, "cache: {}", toolchain::cache_dir()?.display())?;
                write!(
                    out,
                    "{}",
                    table::render(&["CUDA", "CUOBJDUMP", "BIN"], &rows)
                )?;
                Ok(Outcome::Ok)
            }
        }
    }
}
