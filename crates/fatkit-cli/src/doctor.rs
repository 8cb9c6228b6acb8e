//! `doctor`: the toolchains found, what each builds, the GPUs and driver visible, and advice.

use std::io::Write;
use std::process::Command;

use clap::Args;
use fatkit_build::toolchain::{self, DEFAULT_CUDA};

use crate::{Outcome, Result};

#[derive(Debug, Args)]
pub struct Doctor {}

impl Doctor {
    pub fn run(self, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        let mut advice = Vec::new();
        let mut warnings = Vec::new();
        let toolchains =
            toolchain::for_targets(&fatkit_arch::TargetSet::new(), None, true, &mut |w| {
                warnings.push(w)
            })?;
        writeln!(
            out,
            "toolchains (in the order build-kernels prefers them for a target: newest first)"
        )?;
        if toolchains.is_empty() {
            writeln!(out, "  none found")?;
            advice.push("`cargo xtask toolchain install` provisions CUDA 13.2 from NVIDIA's wheels (no root)".to_owned());
        }
        for (tc, p) in &toolchains {
            let plain: Vec<String> = p
                .targets
                .cubins()
                .filter(|t| t.suffix == fatkit_arch::Suffix::None)
                .map(|t| t.to_string())
                .collect();
            let special: Vec<String> = p
                .targets
                .cubins()
                .filter(|t| t.suffix != fatkit_arch::Suffix::None)
                .map(|t| t.to_string())
                .collect();
            writeln!(out, "  {}", tc.describe(Some(p)))?;
            writeln!(out, "    cubins  {}", plain.join(" "))?;
            if !special.is_empty() {
                writeln!(out, "    a/f     {}", special.join(" "))?;
            }
            writeln!(
                out,
                "    host    {}",
                p.host_compiler.as_deref().unwrap_or("no gcc found on PATH")
            )?;
            writeln!(
                out,
                "    cuobjdump {}",
                tc.cuobjdump()
                    .map_or_else(|| "not installed".to_owned(), |c| c.display().to_string())
            )?;
        }
        for w in &warnings {
            writeln!(out, "  warning: {w}")?;
        }
        if toolchains.iter().all(|(_, p)| p.version.major >= 13) && !toolchains.is_empty() {
            advice.push("no CUDA 12.x toolchain: sm_70 and sm_72 (Volta, Xavier) cannot be built; profile `full` needs one".to_owned());
        }
        if toolchain::provisioned(DEFAULT_CUDA)?.is_none() {
            advice.push(format!(
                "CUDA {DEFAULT_CUDA} is not provisioned; `cargo xtask toolchain install` adds it"
            ));
        }
        writeln!(out, "\nGPUs and driver")?;
        match Command::new("nvidia-smi")
            .args([
                "--query-gpu=name,compute_cap,driver_version",
                "--format=csv,noheader",
            ])
            .output()
        {
            Ok(o) if o.status.success() => {
                for line in String::from_utf8_lossy(&o.stdout).lines() {
                    writeln!(out, "  {line}")?;
                }
            }
            Ok(o) => writeln!(
                out,
                "  nvidia-smi failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )?,
            Err(_) => {
                writeln!(out, "  no NVIDIA driver found (nvidia-smi is not on PATH): fine for building and auditing; GPU tests will not run")?;
            }
        }
        writeln!(out, "\nadvice")?;
        if advice.is_empty() {
            writeln!(out, "  nothing to fix")?;
        }
        for a in &advice {
            writeln!(out, "  - {a}")?;
        }
        Ok(Outcome::Ok)
    }
}
