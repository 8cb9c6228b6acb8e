//! `doctor`: the toolchains found, what each builds, the GPUs and driver visible, and advice.

use std::io::Write;
use std::process::Command;

use clap::Args;
use fatkit_build::toolchain::{self, DEFAULT_CUDA};

use crate::{Outcome, Result};

#[derive(Debug, Args)]
pub struct Doctor {
    /// Show how this profile's targets route to the toolchains found
    #[arg(long, default_value = "full")]
    profile: String,
    /// Directory of profiles [default: arch-profiles/ here or in a parent directory]
    #[arg(long, env = "FATKIT_PROFILES_DIR", value_name = "DIR")]
    profiles_dir: Option<std::path::PathBuf>,
}

impl Doctor {
    pub fn run(self, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        let mut advice = Vec::new();
        let mut warnings = Vec::new();
        let mut toolchains =
            toolchain::for_targets(&fatkit_arch::TargetSet::new(), None, true, &mut |w| {
                warnings.push(w)
            })?;
        toolchains.sort_by_key(|(_, p)| p.preference());
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
            match (&p.host, p.compiler) {
                (Some(h), _) => writeln!(out, "    host    {} ({})", h.version, h.why)?,
                (None, fatkit_arch::Compiler::Nvcc) => {
                    writeln!(out, "    host    no g++ found on PATH")?
                }
                (None, fatkit_arch::Compiler::Nvrtc) => writeln!(
                    out,
                    "    headers {}",
                    tc.include_dirs
                        .iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(" ")
                )?,
            }
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
            advice.push(format!("no CUDA 12.x toolchain: sm_70 and sm_72 (Volta, Xavier) cannot be built; profile `full` needs one (`cargo xtask toolchain install --nvrtc` adds NVRTC {})", toolchain::DEFAULT_NVRTC));
        }
        self.routing(out, &toolchains, &mut advice)?;
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

    /// Which toolchain each target of the profile goes to.
    fn routing(
        &self,
        out: &mut (dyn Write + Send),
        toolchains: &[(toolchain::Toolchain, toolchain::Probe)],
        advice: &mut Vec<String>,
    ) -> Result<()> {
        let cwd = std::env::current_dir()?;
        let set = match &self.profiles_dir {
            Some(dir) => fatkit_build::ProfileSet::open(dir),
            None => fatkit_build::ProfileSet::discover(&cwd),
        };
        let profile = match set.and_then(|s| s.load(&self.profile)) {
            Ok(p) => p,
            Err(e) => {
                writeln!(out, "\nrouting: no profile to route ({e})")?;
                return Ok(());
            }
        };
        writeln!(out, "\nrouting of profile {}", profile.name)?;
        match fatkit_build::pipeline::route(&profile, toolchains) {
            Ok(routes) => {
                for (target, i) in routes {
                    if let Some((tc, p)) = toolchains.get(i) {
                        let why = profile.pins.get(&target).map_or_else(
                            || "newest that builds it".to_owned(),
                            |pin| format!("pinned to {pin}"),
                        );
                        writeln!(out, "  {:<12} {} ({why})", target.to_string(), tc.short(p))?;
                    }
                }
            }
            Err(e) => {
                writeln!(out, "  cannot route every target")?;
                advice.push(e.to_string().replace('\n', "\n    "));
            }
        }
        Ok(())
    }
}
