//! `doctor`: the toolchains found and what each builds, how a profile's targets route to them,
//! the GPUs and driver visible, and what to fix, as one data type ([`Diagnosis`]) that the
//! command line renders as text or JSON.

use std::path::{Path, PathBuf};

use fatkit_arch::{Compiler, Suffix, Target};
use serde::Serialize;

use fatkit_build::pipeline;
use fatkit_package::profile;
use fatkit_toolchain::{self as toolchain, ToolchainError, DEFAULT_CUDA, DEFAULT_NVRTC};

/// One toolchain found.
#[derive(Clone, Debug, Serialize)]
pub struct ToolchainRow {
    /// `nvcc 13.2 (provisioned ..., /path/bin/nvcc)`.
    pub description: String,
    pub compiler: Compiler,
    pub version: fatkit_arch::CudaVersion,
    /// Plain cubins it builds.
    pub cubins: Vec<Target>,
    /// Arch- and family-specific cubins it builds.
    pub special: Vec<Target>,
    /// nvcc: the host compiler and why.
    pub host: Option<String>,
    /// NVRTC: the header directories of its release.
    pub headers: Vec<PathBuf>,
    /// nvcc: `cuobjdump` beside it.
    pub cuobjdump: Option<PathBuf>,
}

/// A target of the profile and the toolchain that builds it.
#[derive(Clone, Debug, Serialize)]
pub struct RouteRow {
    pub target: Target,
    /// `nvcc 13.2`.
    pub toolchain: String,
    /// `newest that builds it`, `pinned to nvcc 11.8`.
    pub why: String,
}

/// How the profile routes, or why it cannot.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum Routing {
    Routed {
        profile: String,
        routes: Vec<RouteRow>,
    },
    Unroutable {
        profile: String,
        error: String,
    },
    NoProfile {
        error: String,
    },
}

/// What a host-code library (`Build::compile_library`) of the profile would be built with, and
/// what its runtime asks of its users' drivers (docs/ARCH_RULES.md section 3).
#[derive(Clone, Debug, Serialize)]
pub struct HostCodeRow {
    /// The nvcc that compiles the host code: `nvcc 13.2 (provisioned ...)`.
    pub nvcc: String,
    /// The release of the static runtime it links.
    pub runtime: fatkit_arch::CudaVersion,
    /// What that runtime needs of a user's driver: `580.65.06 (CUDA 13.0)`.
    pub driver: String,
    /// The driver each GPU needs for a library of the profile's images linking that runtime
    /// (its floor on every GPU, the V100 included).
    pub floors: Option<fatkit_arch::floor::Floors>,
    /// Targets of the profile no nvcc found builds (NVRTC compiles no host code): the first
    /// build of unguarded host code provisions Debian's nvcc 12.4 for them.
    pub without_nvcc: Vec<Target>,
}

/// The GPUs nvidia-smi sees, or why none.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum Gpus {
    /// `name, compute capability, driver` lines as nvidia-smi prints them.
    Found {
        lines: Vec<String>,
    },
    Failed {
        message: String,
    },
    NoDriver,
}

/// The compiler launcher: the one `FATKIT_LAUNCHER` sets, and the sccache fatkit built.
#[derive(Clone, Debug, Serialize)]
pub struct LauncherRow {
    /// `FATKIT_LAUNCHER`, found and checked: `sccache 0.19.0 (FATKIT_LAUNCHER: /path)`.
    pub configured: Option<String>,
    /// Why the `FATKIT_LAUNCHER` set cannot be used.
    pub error: Option<String>,
    /// `toolchain install --sccache`'s sccache, if it has run.
    pub provisioned_sccache: Option<PathBuf>,
}

/// Everything `doctor` says.
#[derive(Clone, Debug, Serialize)]
pub struct Diagnosis {
    pub toolchains: Vec<ToolchainRow>,
    pub warnings: Vec<String>,
    pub routing: Routing,
    /// The driver the profile's build needs on each GPU, as routed here (else as fatkit's
    /// provisioned toolchains would build it); `None` when no profile loads or nothing builds it.
    pub driver: Option<crate::floor::Today>,
    /// `None` when no profile loads or no nvcc builds any of its targets.
    pub host_code: Option<HostCodeRow>,
    pub gpus: Gpus,
    pub launcher: LauncherRow,
    pub advice: Vec<String>,
}

/// Looks at this machine for profile `profile` (a name or `.toml` path, looked up from `base`
/// or in `profiles_dir`).
pub fn diagnose(
    profile: &str,
    base: &Path,
    profiles_dir: Option<&Path>,
) -> Result<Diagnosis, ToolchainError> {
    let mut advice = Vec::new();
    let mut warnings = Vec::new();
    let mut found = toolchain::for_targets(&fatkit_arch::TargetSet::new(), None, true, &mut |w| {
        warnings.push(w)
    })?;
    found.sort_by_key(|(_, p)| p.preference());
    if found.is_empty() {
        advice.push(format!("`cargo xtask toolchain install` provisions CUDA {DEFAULT_CUDA} from NVIDIA's wheels (no root)"));
    }
    let toolchains = found.iter().map(|(tc, p)| toolchain_row(tc, p)).collect();
    if !found.is_empty() && found.iter().all(|(_, p)| p.version.major >= 13) {
        advice.push(format!("no CUDA 12.x toolchain: sm_70 and sm_72 (Volta, Xavier) cannot be built; profile `full` needs one (`cargo xtask toolchain install --nvrtc` adds NVRTC {DEFAULT_NVRTC})"));
    }
    let loaded = profile::load_spec(profile, base, profiles_dir);
    let driver = loaded
        .as_ref()
        .ok()
        .and_then(|p| crate::floor::today_with(p, &found));
    let host_code = loaded.as_ref().ok().and_then(|p| {
        let row = host_code_row(p, &found)?;
        Some(HostCodeRow {
            floors: driver.as_ref().map(|d| d.linking(row.runtime)),
            ..row
        })
    });
    let routing = routing(loaded, &found, &mut advice);
    if toolchain::provisioned(DEFAULT_CUDA)?.is_none() {
        advice.push(format!(
            "CUDA {DEFAULT_CUDA} is not provisioned; `cargo xtask toolchain install` adds it"
        ));
    }
    let gpus = gpus();
    let launcher = launcher_row(&mut advice);
    Ok(Diagnosis {
        toolchains,
        warnings,
        routing,
        driver,
        host_code,
        gpus,
        launcher,
        advice,
    })
}

/// One row of the toolchains found.
fn toolchain_row(tc: &toolchain::Toolchain, p: &toolchain::Probe) -> ToolchainRow {
    ToolchainRow {
        description: tc.describe(Some(p)),
        compiler: p.compiler,
        version: p.version,
        cubins: p
            .targets
            .cubins()
            .filter(|t| t.suffix == Suffix::None)
            .collect(),
        special: p
            .targets
            .cubins()
            .filter(|t| t.suffix != Suffix::None)
            .collect(),
        host: p
            .host
            .as_ref()
            .map(|h| format!("{} ({})", h.version, h.why)),
        headers: tc.include_dirs().to_vec(),
        cuobjdump: tc.as_nvcc().and_then(toolchain::Nvcc::cuobjdump),
    }
}

/// How `loaded`, the profile, routes to the toolchains `found`: each target's toolchain and
/// why, or why it cannot (also said as advice).
fn routing(
    loaded: Result<fatkit_arch::profile::Profile, fatkit_package::profile::ProfileError>,
    found: &[(toolchain::Toolchain, toolchain::Probe)],
    advice: &mut Vec<String>,
) -> Routing {
    match loaded {
        Err(e) => Routing::NoProfile {
            error: e.to_string(),
        },
        Ok(p) => match pipeline::route(&p, found) {
            Ok(routes) => Routing::Routed {
                profile: p.name.clone(),
                routes: routes
                    .iter()
                    .filter_map(|(target, i)| {
                        let (tc, probe) = found.get(*i)?;
                        Some(RouteRow {
                            target: *target,
                            toolchain: tc.short(probe),
                            why: p.pins.get(target).map_or_else(
                                || "newest that builds it".to_owned(),
                                |pin| format!("pinned to {pin}"),
                            ),
                        })
                    })
                    .collect(),
            },
            Err(e) => {
                advice.push(e.to_string().replace('\n', "\n    "));
                Routing::Unroutable {
                    profile: p.name.clone(),
                    error: e.to_string(),
                }
            }
        },
    }
}

/// The GPUs `nvidia-smi` lists, or why there are none to list (the driver asked as `audit`
/// asks it: `fatkit_audit::local`).
fn gpus() -> Gpus {
    match fatkit_audit::local::ask() {
        fatkit_audit::local::Asked::Answered(text) => Gpus::Found {
            lines: text.lines().map(str::to_owned).collect(),
        },
        fatkit_audit::local::Asked::NoDriver => Gpus::NoDriver,
        fatkit_audit::local::Asked::Failed(message) => Gpus::Failed { message },
    }
}

/// `FATKIT_LAUNCHER` checked as a build would check it, and the provisioned sccache.
fn launcher_row(advice: &mut Vec<String>) -> LauncherRow {
    let cache = toolchain::cache_dir().ok();
    let provisioned_sccache = cache
        .as_deref()
        .and_then(fatkit_toolchain::launcher::provisioned_sccache);
    let env = std::env::var("FATKIT_LAUNCHER").ok();
    let (configured, error) =
        match fatkit_toolchain::launcher::configured(None, env.as_deref(), None) {
            Ok(l) => (
                l.as_ref()
                    .map(fatkit_toolchain::launcher::Launcher::describe),
                None,
            ),
            Err(e) => {
                advice.push(e.to_string());
                (None, Some(e.to_string()))
            }
        };
    LauncherRow {
        configured,
        error,
        provisioned_sccache,
    }
}

/// [`HostCodeRow`] of `profile` with the toolchains `found`.
fn host_code_row(
    profile: &fatkit_arch::profile::Profile,
    found: &[(toolchain::Toolchain, toolchain::Probe)],
) -> Option<HostCodeRow> {
    let (nvcc, probe, _) = fatkit_build::host::host_compiler_of(profile, found)?;
    // The driver its runtime needs: the first of its CUDA major (minor version compatibility).
    let runtime = fatkit_arch::floor::Basis::Runtime {
        cuda: probe.version,
    };
    Some(HostCodeRow {
        nvcc: format!("nvcc {} ({})", probe.version, nvcc.source),
        runtime: probe.version,
        driver: fatkit_arch::floor::Floor::of(runtime).to_string(),
        floors: None,
        without_nvcc: profile
            .all_targets()
            .iter()
            .filter(|t| {
                !found
                    .iter()
                    .any(|(_, p)| p.compiler == Compiler::Nvcc && p.targets.contains(*t))
            })
            .collect(),
    })
}
