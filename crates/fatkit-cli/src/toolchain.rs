//! `toolchain install [--cuda VER] [--nvrtc | --sccache]` and `toolchain list`.

use std::io::Write;

use clap::{Args, Subcommand};
use fatkit_arch::toolkit::CudaVersion;
use fatkit_toolchain::{self as toolchain, DEFAULT_CUDA, DEFAULT_NVRTC};

use fatkit_audit::text::table;

use crate::{Error, Outcome, Result};

#[derive(Debug, Args)]
pub struct ToolchainCmd {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Provision NVIDIA's nvcc and cuobjdump (or NVRTC) from their pip wheels into the cache
    /// (no root); `--cuda 12.4`: Debian's build of nvcc 12.4 (sm_70 for host code)
    Install {
        /// The release to install [default: 13.2 for nvcc, 12.9 for NVRTC; nvcc 13.x or 12.4]
        #[arg(long, value_name = "X.Y")]
        cuda: Option<String>,
        /// Install NVRTC 12.x and its CUDA headers instead of nvcc (builds sm_70, sm_72)
        #[arg(long, conflicts_with = "sccache")]
        nvrtc: bool,
        /// Build sccache and sccache-dist (a pinned release, from crates.io with cargo) for
        /// `build-kernels --launcher sccache` instead of a CUDA toolchain
        #[arg(long, conflicts_with = "cuda")]
        sccache: bool,
    },
    /// List the toolchains provisioned in the cache
    List {
        /// Print only the bin directory of the default toolchain (for PATH)
        #[arg(long)]
        bin_dir: bool,
    },
}

impl ToolchainCmd {
    pub fn run(self, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        match self.action {
            Action::Install { sccache: true, .. } => {
                let mut err = std::io::stderr();
                let bin = toolchain::provision_sccache(&mut |line| {
                    let _ = writeln!(err, "toolchain: {line}");
                })?;
                writeln!(out, "{}", bin.display())?;
                Ok(Outcome::Ok)
            }
            Action::Install { cuda, nvrtc, .. } => {
                let (compiler, default) = if nvrtc {
                    (fatkit_arch::Compiler::Nvrtc, DEFAULT_NVRTC)
                } else {
                    (fatkit_arch::Compiler::Nvcc, DEFAULT_CUDA)
                };
                let cuda: CudaVersion =
                    crate::parse_option("--cuda", cuda.as_deref())?.unwrap_or(default);
                let mut err = std::io::stderr();
                let tc = toolchain::provision_of(compiler, cuda, &mut |line| {
                    // Progress only: a closed stderr loses it, not the install.
                    let _ = writeln!(err, "toolchain: {line}");
                })?;
                let shown = shown_path(&tc);
                writeln!(out, "{}", shown.display())?;
                Ok(Outcome::Ok)
            }
            Action::List { bin_dir: true } => match toolchain::find_default()? {
                Some(tc) => {
                    writeln!(out, "{}", tc.bin_dir().display())?;
                    Ok(Outcome::Ok)
                }
                None => Err(Error::NoToolchain),
            },
            Action::List { bin_dir: false } => {
                let rows: Vec<Vec<String>> = toolchain::list_provisioned()?
                    .into_iter()
                    .map(|tc| {
                        let version = tc
                            .version()
                            .map_or_else(|| "?".to_owned(), |v| v.to_string());
                        let cuobjdump = if tc.as_nvcc().and_then(|n| n.cuobjdump()).is_some() {
                            "yes"
                        } else {
                            "no"
                        };
                        let path = shown_path(&tc);
                        vec![
                            tc.compiler().to_string(),
                            version,
                            cuobjdump.to_owned(),
                            path.display().to_string(),
                        ]
                    })
                    .collect();
                writeln!(out, "cache: {}", toolchain::cache_dir()?.display())?;
                write!(
                    out,
                    "{}",
                    table::render(&["COMPILER", "CUDA", "CUOBJDUMP", "PATH"], &rows)
                )?;
                Ok(Outcome::Ok)
            }
        }
    }
}

/// What a person wants to see of a toolchain: nvcc's `bin/`, or the NVRTC library.
fn shown_path(tc: &toolchain::Toolchain) -> std::path::PathBuf {
    match tc {
        toolchain::Toolchain::Nvcc(n) => n.bin_dir(),
        toolchain::Toolchain::Nvrtc(n) => n.library.clone(),
    }
}
