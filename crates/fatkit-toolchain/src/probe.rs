//! What a toolchain says about itself: release, build, every target it compiles and (nvcc)
//! the host compiler it will run, probed once per binary (by path, size and mtime) and cached.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use fatkit_arch::toolkit::{self, CudaVersion};
use fatkit_arch::Compiler;

use super::{cache_dir, io_err, Toolchain, ToolchainError};
use crate::command::{self, ToolError};

/// The host C++ compiler an nvcc runs, chosen when the default one is too new for it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostCompiler {
    /// Passed as `-ccbin`; `None`: nvcc's default (`g++` on `PATH`).
    pub ccbin: Option<PathBuf>,
    /// `--version`'s first line of the compiler used.
    pub version: String,
    /// Why this one, for `doctor` and the build report.
    pub why: String,
}

/// What a toolchain says about itself, probed once per binary (by path, size and mtime).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Probe {
    pub compiler: Compiler,
    pub version: CudaVersion,
    /// `nvcc --version`'s "Build ..." line (NVRTC: its library file name): tells builds of one
    /// release apart.
    pub build: String,
    /// Every target it compiles: `--list-gpu-code` / `--list-gpu-arch` (NVRTC:
    /// `nvrtcGetSupportedArchs`), plus the `a`/`f` variants the tables give its version for
    /// those SMs (some releases do not list them).
    pub targets: fatkit_arch::TargetSet,
    /// nvcc's host compiler; `None` for NVRTC, or when no g++ was found.
    pub host: Option<HostCompiler>,
    /// A hash of the binary's identity, build and host compiler: part of every cache key.
    pub identity: String,
}

impl Probe {
    /// The order targets prefer toolchains in, most preferred first when sorted: the newest
    /// release, nvcc before NVRTC of the same release.
    pub fn preference(&self) -> impl Ord {
        std::cmp::Reverse((self.version, std::cmp::Reverse(self.compiler)))
    }
}

fn binary_identity(path: &Path) -> Result<String, ToolchainError> {
    let meta = fs::metadata(path).map_err(io_err(path))?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let canonical = fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    Ok(
        blake3::hash(format!("{}|{}|{mtime}", canonical.display(), meta.len()).as_bytes())
            .to_hex()
            .to_string(),
    )
}

/// `g++ (Debian 12.2.0-14) 12.2.0` -> 12.
fn gcc_major(first_line: &str) -> Option<u32> {
    first_line
        .split_whitespace()
        .rev()
        .find_map(|w| w.split('.').next()?.parse().ok())
}

/// The host compiler for an nvcc of `cuda`: the default `g++` when nvcc supports it, else the
/// newest `g++-N` on `PATH` it does support.
pub(crate) fn choose_host_compiler(cuda: CudaVersion) -> Option<HostCompiler> {
    let max = toolkit::max_gcc(cuda);
    let default = command::on_path("g++").and_then(|p| command::version_line(&p));
    let default_major = default.as_deref().and_then(gcc_major);
    if let (Some(line), Some(major)) = (&default, default_major) {
        if major <= max {
            return Some(HostCompiler {
                ccbin: None,
                version: line.clone(),
                why: format!("the default g++ ({major}); nvcc {cuda} takes up to g++ {max}"),
            });
        }
    }
    let default_text = default_major.map_or_else(
        || "no default g++ was found".to_owned(),
        |m| format!("the default g++ {m} is newer than nvcc {cuda} supports (g++ {max} at most)"),
    );
    for n in (max.saturating_sub(8)..=max).rev() {
        let Some(path) = command::on_path(&format!("g++-{n}")) else {
            continue;
        };
        if let Some(line) = command::version_line(&path) {
            return Some(HostCompiler {
                ccbin: Some(path),
                version: line,
                why: format!("-ccbin g++-{n}: {default_text}"),
            });
        }
    }
    default.map(|line| HostCompiler {
        ccbin: None,
        version: line,
        why: format!("{default_text}, and no g++-{max} or older is on PATH: nvcc may refuse it; install g++-{max}"),
    })
}

/// The largest probe record read (a list of targets; kilobytes in practice): a record replaced
/// by a link to `/dev/zero` or a FIFO is a miss, not an endless read.
const MAX_PROBE: u64 = 1 << 20;

fn probes_dir() -> Result<PathBuf, ToolchainError> {
    Ok(cache_dir()?.join("probes"))
}

fn cached_probe(id: &str) -> Option<Probe> {
    let path = probes_dir().ok()?.join(format!("v2-{id}.json"));
    fatkit_read::read_limited(&path, MAX_PROBE)
        .ok()
        .and_then(|b| serde_json::from_slice::<Probe>(&b).ok())
}

fn store_probe(id: &str, probe: &Probe) {
    // A cache that cannot be written only costs a probe next time.
    if let (Ok(dir), Ok(json)) = (probes_dir(), serde_json::to_vec_pretty(probe)) {
        let _ = fatkit_package::out::write_atomic(&dir.join(format!("v2-{id}.json")), &json);
    }
}

/// The a/f variants of the SMs in `targets`, where the tables say `version` has them.
fn add_suffixed(targets: &mut fatkit_arch::TargetSet, version: CudaVersion) {
    for t in fatkit_arch::toolkit::targets_of(version).iter() {
        if t.suffix != fatkit_arch::Suffix::None
            && targets.contains(t.with_suffix(fatkit_arch::Suffix::None))
        {
            targets.insert(t);
        }
    }
}

/// Probes `tc`, from the cache when this very binary was probed before.
pub fn probe(tc: &Toolchain) -> Result<Probe, ToolchainError> {
    match tc {
        Toolchain::Nvcc(n) => probe_nvcc(n),
        Toolchain::Nvrtc(n) => probe_nvrtc(n),
    }
}

fn probe_nvrtc(tc: &super::Nvrtc) -> Result<Probe, ToolchainError> {
    let lib = tc.library.clone();
    let id = binary_identity(&lib)?;
    if let Some(probe) = cached_probe(&id) {
        return Ok(probe);
    }
    let nvrtc = crate::nvrtc::Nvrtc::open(&lib)?;
    let (major, minor) = nvrtc.version()?;
    let version = CudaVersion::new(
        u8::try_from(major).unwrap_or(0),
        u8::try_from(minor).unwrap_or(0),
    );
    let mut targets = fatkit_arch::TargetSet::new();
    for sm in nvrtc.supported_archs()? {
        for kind in [fatkit_arch::ImageKind::Cubin, fatkit_arch::ImageKind::Ptx] {
            if let Ok(t) = format!("sm_{sm}").parse::<fatkit_arch::Target>() {
                targets.insert(t.with_kind(kind));
            }
        }
    }
    add_suffixed(&mut targets, version);
    let build = lib
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let identity = blake3::hash(format!("nvrtc|{id}|{version}").as_bytes())
        .to_hex()
        .to_string();
    let probe = Probe {
        compiler: Compiler::Nvrtc,
        version,
        build,
        targets,
        host: None,
        identity,
    };
    store_probe(&id, &probe);
    Ok(probe)
}

fn probe_nvcc(tc: &super::Nvcc) -> Result<Probe, ToolchainError> {
    let nvcc = tc.nvcc();
    let id = binary_identity(&nvcc)?;
    if let Some(probe) = cached_probe(&id) {
        return Ok(probe);
    }
    let text = command::run(
        Command::new(&nvcc).arg("--version"),
        "this nvcc does not run; check the installation",
    )?;
    let version = text
        .split("release ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|v| v.trim().parse::<CudaVersion>().ok())
        .ok_or_else(|| ToolError {
            command: format!("{} --version", nvcc.display()),
            status: crate::command::ToolStatus::UnrecognisedOutput,
            output: text.clone(),
            hint: "expected \"Cuda compilation tools, release X.Y\"".to_owned(),
        })?;
    let build = text
        .lines()
        .find(|l| l.starts_with("Build "))
        .unwrap_or_default()
        .to_owned();
    let mut targets = fatkit_arch::TargetSet::new();
    for (flag, kind) in [
        ("--list-gpu-code", fatkit_arch::ImageKind::Cubin),
        ("--list-gpu-arch", fatkit_arch::ImageKind::Ptx),
    ] {
        let listed = command::run(
            Command::new(&nvcc).arg(flag),
            "this nvcc cannot list its targets",
        )?;
        for word in listed.split_whitespace() {
            if let Ok(t) = word.parse::<fatkit_arch::Target>() {
                targets.insert(t.with_kind(kind));
            }
        }
    }
    add_suffixed(&mut targets, version);
    let host = choose_host_compiler(version);
    let identity = blake3::hash(
        format!(
            "{id}|{build}|{}|{:?}",
            host.as_ref().map_or("", |h| h.version.as_str()),
            host.as_ref().and_then(|h| h.ccbin.as_ref())
        )
        .as_bytes(),
    )
    .to_hex()
    .to_string();
    let probe = Probe {
        compiler: Compiler::Nvcc,
        version,
        build,
        targets,
        host,
        identity,
    };
    store_probe(&id, &probe);
    Ok(probe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcc_versions() {
        assert_eq!(gcc_major("g++ (Debian 12.2.0-14+deb12u1) 12.2.0"), Some(12));
        assert_eq!(gcc_major("g++-11 (Debian 11.3.0-12) 11.3.0"), Some(11));
        assert_eq!(gcc_major("nothing"), None);
    }
}
