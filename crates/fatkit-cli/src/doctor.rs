//! `doctor`: the toolchains found, what each builds, the GPUs and driver visible, and advice
//! (`fatkit_project::doctor::diagnose`), as text or JSON.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use fatkit_project::doctor::{self, Diagnosis, Gpus, HostCodeRow, Routing, ToolchainRow};

use crate::{Outcome, Result};

#[derive(Debug, Args)]
pub struct Doctor {
    /// Show how this profile's targets route to the toolchains found
    #[arg(long, default_value = fatkit_package::profile::DEFAULT)]
    profile: String,
    /// Local profiles that add to or override the built-ins [default: arch-profiles/ here or in a parent]
    #[arg(long, env = "FATKIT_PROFILES_DIR", value_name = "DIR")]
    profiles_dir: Option<PathBuf>,
    /// Print JSON for machines instead of text
    #[arg(long)]
    json: bool,
}

impl Doctor {
    pub fn run(self, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        let cwd = std::env::current_dir()?;
        let diagnosis = doctor::diagnose(&self.profile, &cwd, self.profiles_dir.as_deref())?;
        if self.json {
            serde_json::to_writer_pretty(&mut *out, &diagnosis).map_err(std::io::Error::from)?;
            writeln!(out)?;
        } else {
            write_text(out, &diagnosis)?;
        }
        Ok(Outcome::Ok)
    }
}

fn names(targets: &[fatkit_arch::Target]) -> String {
    targets
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// One toolchain found: what it builds, with which host compiler or headers, and cuobjdump.
fn write_toolchain(out: &mut dyn Write, tc: &ToolchainRow) -> std::io::Result<()> {
    writeln!(out, "  {}", tc.description)?;
    writeln!(out, "    cubins  {}", names(&tc.cubins))?;
    if !tc.special.is_empty() {
        writeln!(out, "    a/f     {}", names(&tc.special))?;
    }
    match (&tc.host, tc.compiler) {
        (Some(h), _) => writeln!(out, "    host    {h}")?,
        (None, fatkit_arch::Compiler::Nvcc) => writeln!(out, "    host    no g++ found on PATH")?,
        (None, fatkit_arch::Compiler::Nvrtc) => {
            let dirs: Vec<String> = tc.headers.iter().map(|d| d.display().to_string()).collect();
            writeln!(out, "    headers {}", dirs.join(" "))?
        }
    }
    writeln!(
        out,
        "    cuobjdump {}",
        tc.cuobjdump
            .as_ref()
            .map_or_else(|| "not installed".to_owned(), |c| c.display().to_string())
    )?;
    Ok(())
}

/// What a host-code library built here would link, and what its users' drivers need.
fn write_host_code(out: &mut dyn Write, h: &HostCodeRow) -> std::io::Result<()> {
    writeln!(out, "\nhost-code libraries (compile_library)")?;
    writeln!(out, "  host code   {}", h.nvcc)?;
    writeln!(
        out,
        "  runtime     CUDA {} linked statically: users need a driver >= {}; Build::cudart(Cudart::Shared) links the system's libcudart.so.{} instead",
        h.runtime, h.driver, h.runtime.major
    )?;
    if let Some(f) = &h.floors {
        writeln!(
            out,
            "  driver      {}",
            fatkit_audit::text::floors::release(f)
        )?;
    }
    if !h.without_nvcc.is_empty() {
        writeln!(
            out,
            "  {:<11} no nvcc found builds it, and NVRTC compiles no host code: the first such build provisions Debian's nvcc 12.4 (or `fatkit toolchain install --cuda 12.4`)",
            names(&h.without_nvcc)
        )?;
    }
    Ok(())
}

/// The driver the profile's modules need on each GPU, and which toolkit builds each target.
fn write_driver(out: &mut dyn Write, t: &fatkit_project::floor::Today) -> std::io::Result<()> {
    let from = match t.toolchains {
        fatkit_project::floor::Toolchains::Installed => "the toolchains above",
        fatkit_project::floor::Toolchains::Provisioned => "the toolchains fatkit provisions",
    };
    writeln!(
        out,
        "\ndriver a module of the profile needs (built by {from})"
    )?;
    for line in fatkit_audit::text::floors::lines(&t.floors, "  ") {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn write_text(out: &mut dyn Write, d: &Diagnosis) -> std::io::Result<()> {
    writeln!(
        out,
        "toolchains (in the order build-kernels prefers them for a target: newest first)"
    )?;
    if d.toolchains.is_empty() {
        writeln!(out, "  none found")?;
    }
    for tc in &d.toolchains {
        write_toolchain(out, tc)?;
    }
    for w in &d.warnings {
        writeln!(out, "  warning: {w}")?;
    }
    match &d.routing {
        Routing::Routed { profile, routes } => {
            writeln!(out, "\nrouting of profile {profile}")?;
            for r in routes {
                writeln!(
                    out,
                    "  {:<12} {} ({})",
                    r.target.to_string(),
                    r.toolchain,
                    r.why
                )?;
            }
        }
        Routing::Unroutable { profile, .. } => {
            writeln!(out, "\nrouting of profile {profile}")?;
            writeln!(out, "  cannot route every target")?;
        }
        Routing::NoProfile { error } => writeln!(out, "\nrouting: no profile to route ({error})")?,
    }
    if let Some(t) = &d.driver {
        write_driver(out, t)?;
    }
    if let Some(h) = &d.host_code {
        write_host_code(out, h)?;
    }
    writeln!(out, "\nGPUs and driver")?;
    match &d.gpus {
        Gpus::Found { lines } => {
            for line in lines {
                writeln!(out, "  {line}")?;
            }
        }
        Gpus::Failed { message } => writeln!(out, "  nvidia-smi failed: {message}")?,
        Gpus::NoDriver => writeln!(out, "  no NVIDIA driver found (nvidia-smi is not on PATH): fine for building and auditing; GPU tests will not run")?,
    }
    writeln!(
        out,
        "\ncompiler launcher (cubin jobs; --launcher, FATKIT_LAUNCHER or the launcher key)"
    )?;
    let l = &d.launcher;
    match (&l.configured, &l.error) {
        (Some(c), _) => writeln!(out, "  FATKIT_LAUNCHER  {c}")?,
        (None, Some(_)) => writeln!(out, "  FATKIT_LAUNCHER  unusable (see advice)")?,
        (None, None) => writeln!(out, "  FATKIT_LAUNCHER  not set: nvcc runs directly")?,
    }
    match &l.provisioned_sccache {
        Some(p) => writeln!(out, "  sccache          {}", p.display())?,
        None => writeln!(
            out,
            "  sccache          not provisioned (`fatkit toolchain install --sccache` builds it)"
        )?,
    }
    writeln!(out, "\nadvice")?;
    if d.advice.is_empty() {
        writeln!(out, "  nothing to fix")?;
    }
    for a in &d.advice {
        writeln!(out, "  - {a}")?;
    }
    Ok(())
}
