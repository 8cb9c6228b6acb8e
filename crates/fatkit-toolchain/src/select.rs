//! The set of toolchains a build uses: every one found and probed, after provisioning
//! NVIDIA's defaults where they would build a target with a newer release.

use std::path::Path;

use fatkit_arch::Compiler;

use super::{
    discover, probe, provision_of, provisioned, provisioned_of, Nvcc, Probe, Toolchain,
    ToolchainError, DEFAULT_CUDA, DEFAULT_NVRTC,
};
use crate::command;

/// The toolchain tests and tools should use: `FATKIT_NVCC` (a path to nvcc), else the
/// provisioned default, else `nvcc` on `PATH`.
pub fn find_default() -> Result<Option<Nvcc>, ToolchainError> {
    if let Some(nvcc) = std::env::var_os("FATKIT_NVCC") {
        return Ok(Some(Nvcc::from_binary(Path::new(&nvcc), "FATKIT_NVCC")));
    }
    if let Some(tc) = provisioned(DEFAULT_CUDA)? {
        return Ok(Some(tc));
    }
    Ok(command::on_path("nvcc").map(|nvcc| Nvcc::from_binary(&nvcc, "PATH")))
}

/// Every toolchain found, probed (one that fails to probe is reported through `log` and
/// skipped); see [`for_profile`] for what is provisioned first.
pub fn for_targets(
    targets: &fatkit_arch::TargetSet,
    explicit: Option<&Path>,
    offline: bool,
    log: &mut dyn FnMut(String),
) -> Result<Vec<(Toolchain, Probe)>, ToolchainError> {
    let wanted: Vec<(fatkit_arch::Target, Option<fatkit_arch::Pin>)> =
        targets.iter().map(|t| (t, None)).collect();
    for_wanted(
        &wanted,
        explicit,
        offline,
        &[Compiler::Nvcc, Compiler::Nvrtc],
        log,
    )
}

/// The toolchains for a profile. Unless `offline`, NVIDIA's default toolchains are
/// provisioned first where they would build some target of the profile with a newer release
/// than anything found (respecting the profile's pins): the nvcc of [`DEFAULT_CUDA`], and the
/// NVRTC of [`DEFAULT_NVRTC`] for sm_70 and sm_72, which CUDA 13 dropped. A failed NVRTC
/// install is only a warning while the toolchains found still build every target.
pub fn for_profile(
    profile: &fatkit_arch::profile::Profile,
    explicit: Option<&Path>,
    offline: bool,
    log: &mut dyn FnMut(String),
) -> Result<Vec<(Toolchain, Probe)>, ToolchainError> {
    for_profile_with(
        profile,
        explicit,
        offline,
        &[Compiler::Nvcc, Compiler::Nvrtc],
        log,
    )
}

/// [`for_profile`], provisioning only the default toolchains of `compilers` (a host-code
/// library has no use for NVRTC, which compiles no host code).
pub fn for_profile_with(
    profile: &fatkit_arch::profile::Profile,
    explicit: Option<&Path>,
    offline: bool,
    compilers: &[Compiler],
    log: &mut dyn FnMut(String),
) -> Result<Vec<(Toolchain, Probe)>, ToolchainError> {
    let wanted: Vec<(fatkit_arch::Target, Option<fatkit_arch::Pin>)> = profile
        .all_targets()
        .iter()
        .map(|t| (t, profile.pins.get(&t).copied()))
        .collect();
    for_wanted(&wanted, explicit, offline, compilers, log)
}

fn for_wanted(
    wanted: &[(fatkit_arch::Target, Option<fatkit_arch::Pin>)],
    explicit: Option<&Path>,
    offline: bool,
    compilers: &[Compiler],
    log: &mut dyn FnMut(String),
) -> Result<Vec<(Toolchain, Probe)>, ToolchainError> {
    let probe_all =
        |log: &mut dyn FnMut(String)| -> Result<Vec<(Toolchain, Probe)>, ToolchainError> {
            let mut out = Vec::new();
            for tc in discover(explicit)? {
                match probe(&tc) {
                    // One installation reached twice (Debian's /usr/bin/nvcc is a script
                    // running /usr/lib/nvidia-cuda-toolkit/bin/nvcc): keep the first.
                    Ok(p)
                        if out.iter().any(|(_, q): &(Toolchain, Probe)| {
                            q.compiler == p.compiler
                                && q.version == p.version
                                && q.build == p.build
                                && !p.build.is_empty()
                        }) => {}
                    Ok(p) => out.push((tc, p)),
                    Err(e) => log(format!("skipping {}: {e}", tc.program().display())),
                }
            }
            Ok(out)
        };
    let mut found = probe_all(log)?;
    if offline {
        return Ok(found);
    }
    for (compiler, version) in [
        (Compiler::Nvcc, DEFAULT_CUDA),
        (Compiler::Nvrtc, DEFAULT_NVRTC),
    ] {
        if !compilers.contains(&compiler) {
            continue;
        }
        let builds = fatkit_arch::toolkit::targets_of(version);
        // The targets this default would build with a newer release than any found.
        let better: Vec<fatkit_arch::Target> = wanted
            .iter()
            .filter(|(t, pin)| {
                builds.contains(*t)
                    && pin.is_none_or(|p| p.matches(compiler, version))
                    && found
                        .iter()
                        .filter(|(_, p)| p.targets.contains(*t))
                        .filter(|(_, p)| pin.is_none_or(|pin| pin.matches(p.compiler, p.version)))
                        .all(|(_, p)| p.version < version)
            })
            .map(|(t, _)| *t)
            .collect();
        if better.is_empty() || provisioned_of(compiler, version)?.is_some() {
            continue;
        }
        let names: Vec<String> = better.iter().map(|t| t.to_string()).collect();
        log(format!(
            "{compiler} {version} builds {} with a newer release than any toolchain found; provisioning it",
            names.join(" ")
        ));
        match provision_of(compiler, version, &mut |line| {
            log(format!("toolchain: {line}"))
        }) {
            Ok(_) => found = probe_all(log)?,
            Err(e)
                if compiler == Compiler::Nvrtc
                    && wanted
                        .iter()
                        .all(|(t, _)| found.iter().any(|(_, p)| p.targets.contains(*t))) =>
            {
                log(format!(
                    "warning: {e}; building with the toolchains found instead"
                ));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(found)
}
