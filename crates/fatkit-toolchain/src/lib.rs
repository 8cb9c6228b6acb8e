//! CUDA toolchains: nvcc installations and NVRTC libraries with the headers of their release.
//! [`discover()`] finds them on the machine, [`probe()`] asks each what it builds, [`provision()`]
//! installs NVIDIA's from pip wheels into the fatkit cache (no root), and `select` picks the
//! set a profile needs, provisioning what would build a target with a newer release.
//!
//! Beside them, the tools around a compile: [`command`], the one way fatkit spawns a tool and
//! reports its failure; [`launcher`], a compiler launcher such as sccache; [`nvrtc`], the NVRTC
//! library bound at run time.

use std::fs;
use std::path::{Path, PathBuf};

use fatkit_arch::toolkit::CudaVersion;
use fatkit_arch::Compiler;

use crate::command::ToolError;

pub mod command;
pub mod launcher;
pub mod nvrtc;
pub mod scan;

pub mod debian;
pub(crate) mod discover;
pub mod probe;
pub(crate) mod provision;
pub(crate) mod select;
pub mod std_headers;

pub use discover::discover;
pub use probe::{probe, HostCompiler, Probe};
pub use provision::{libclang_dir, provision, provision_of, provision_sccache, LIBCLANG_WHEEL};
pub use select::{find_default, for_profile, for_profile_with, for_targets};

/// The CUDA release provisioned by default: the newest whose PTX ISA and minimum driver are
/// both in the tables, so `audit --driver` verdicts on what it builds are never "unknown".
pub const DEFAULT_CUDA: CudaVersion = CudaVersion::new(13, 2);

/// The NVRTC release provisioned beside nvcc: the newest CUDA 12, the last to build sm_70 and
/// sm_72 (Volta, Xavier), which CUDA 13 dropped. No CUDA 12 nvcc is published as wheels
/// (for host code, which NVRTC cannot compile, [`debian`] provisions Debian's CUDA 12.4).
pub const DEFAULT_NVRTC: CudaVersion = CudaVersion::new(12, 9);

/// The wheels of NVRTC 12.x: the library, and the CUDA headers (runtime, CCCL) kernels include.
pub(crate) const NVRTC12_WHEELS: [&str; 3] = [
    "nvidia-cuda-nvrtc-cu12",
    "nvidia-cuda-runtime-cu12",
    "nvidia-cuda-cccl-cu12",
];

/// The wheels that make a complete nvcc (plus cuobjdump) for CUDA 13.x.
pub(crate) const CUDA13_WHEELS: [&str; 6] = [
    "nvidia-cuda-nvcc",
    "nvidia-cuda-crt",
    "nvidia-nvvm",
    "nvidia-cuda-runtime",
    "nvidia-cuda-cccl",
    "nvidia-cuda-cuobjdump",
];

/// The environment variables discovery, provisioning and the cache read; build scripts
/// declare them with `cargo:rerun-if-env-changed`.
pub const ENV_VARS: [&str; 9] = [
    "FATKIT_NVCC",
    "FATKIT_NVRTC",
    "CUDA_HOME",
    "CUDA_PATH",
    "PATH",
    "FATKIT_CACHE_DIR",
    "XDG_CACHE_HOME",
    "HOME",
    "FATKIT_PYTHON",
];

/// Marker written last into a finished install.
pub(crate) const COMPLETE: &str = ".fatkit-complete";

impl From<ToolchainError> for fatkit_package::BuildError {
    fn from(e: ToolchainError) -> fatkit_package::BuildError {
        fatkit_package::BuildError::Build(Box::new(e))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ToolchainError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0} cannot be provisioned from wheels: PyPI has a complete nvcc only for CUDA 13.x and NVRTC with its headers only for 12.x; install that CUDA yourself and set CUDA_HOME (or FATKIT_NVRTC)")]
    Unsupported(String),
    #[error(transparent)]
    Nvrtc(#[from] crate::nvrtc::NvrtcError),
    #[error(transparent)]
    Tool(#[from] ToolError),
    #[error("FATKIT_CACHE_DIR is set but empty, which would put the cache in the current directory; unset it (the cache is then ~/.cache/fatkit) or name a directory")]
    EmptyCacheDir,
    #[error("no home directory to put the toolchain cache in; set FATKIT_CACHE_DIR")]
    NoCacheDir,
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ToolchainError + '_ {
    move |source| ToolchainError::Io {
        path: path.to_owned(),
        source,
    }
}

/// An nvcc installation: `bin/nvcc` (and often `bin/cuobjdump`, `bin/fatbinary`) under `root`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nvcc {
    pub root: PathBuf,
    pub version: Option<CudaVersion>,
    /// Where it came from: `provisioned (...)`, `CUDA_HOME`, `PATH`, ...
    pub source: String,
}

impl Nvcc {
    pub fn at(root: PathBuf, version: Option<CudaVersion>, source: &str) -> Nvcc {
        Nvcc {
            root,
            version,
            source: source.to_owned(),
        }
    }

    /// The installation of an nvcc binary: `root` is its directory's parent (Debian's
    /// /usr/bin/nvcc wrapper gives /usr, which only matters for bin/nvcc and bin/cuobjdump).
    pub fn from_binary(nvcc: &Path, source: &str) -> Nvcc {
        let root = nvcc
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        Nvcc::at(root, None, source)
    }

    pub fn bin_dir(&self) -> PathBuf {
        self.root.join("bin")
    }

    pub fn nvcc(&self) -> PathBuf {
        self.bin_dir().join("nvcc")
    }

    /// `cuobjdump` beside nvcc, if this installation has it.
    pub fn cuobjdump(&self) -> Option<PathBuf> {
        let path = self.bin_dir().join("cuobjdump");
        path.is_file().then_some(path)
    }
}

/// An NVRTC library with the CUDA headers of its release (NVRTC ships none of its own).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nvrtc {
    /// `libnvrtc.so.N`.
    pub library: PathBuf,
    /// The installation, for messages and to tell its headers from the project's.
    pub root: PathBuf,
    /// The release's CUDA headers (runtime, CCCL), searched after the project's.
    pub include_dirs: Vec<PathBuf>,
    pub version: Option<CudaVersion>,
    pub source: String,
}

impl From<Nvcc> for Toolchain {
    fn from(nvcc: Nvcc) -> Toolchain {
        Toolchain::Nvcc(nvcc)
    }
}

/// A CUDA compiler fatkit can drive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Toolchain {
    Nvcc(Nvcc),
    Nvrtc(Nvrtc),
}

impl Toolchain {
    pub fn compiler(&self) -> Compiler {
        match self {
            Toolchain::Nvcc(_) => Compiler::Nvcc,
            Toolchain::Nvrtc(_) => Compiler::Nvrtc,
        }
    }

    /// The file that identifies this toolchain: nvcc, or the NVRTC library.
    pub fn program(&self) -> PathBuf {
        match self {
            Toolchain::Nvcc(n) => n.nvcc(),
            Toolchain::Nvrtc(n) => n.library.clone(),
        }
    }

    /// The installation directory: its headers are the toolchain's, not the project's.
    pub fn root(&self) -> &Path {
        match self {
            Toolchain::Nvcc(n) => &n.root,
            Toolchain::Nvrtc(n) => &n.root,
        }
    }

    pub fn source(&self) -> &str {
        match self {
            Toolchain::Nvcc(n) => &n.source,
            Toolchain::Nvrtc(n) => &n.source,
        }
    }

    pub fn version(&self) -> Option<CudaVersion> {
        match self {
            Toolchain::Nvcc(n) => n.version,
            Toolchain::Nvrtc(n) => n.version,
        }
    }

    pub fn as_nvcc(&self) -> Option<&Nvcc> {
        match self {
            Toolchain::Nvcc(n) => Some(n),
            Toolchain::Nvrtc(_) => None,
        }
    }

    /// Header directories the compiler needs besides the project's: NVRTC's release headers.
    pub fn include_dirs(&self) -> &[PathBuf] {
        match self {
            Toolchain::Nvcc(_) => &[],
            Toolchain::Nvrtc(n) => &n.include_dirs,
        }
    }

    /// `nvcc 13.2 (provisioned /root/.cache/..., /path/bin/nvcc)`.
    pub fn describe(&self, probe: Option<&Probe>) -> String {
        let version = probe
            .map(|p| p.version)
            .or(self.version())
            .map_or_else(|| "?".to_owned(), |v| v.to_string());
        format!(
            "{} {version} ({}, {})",
            self.compiler(),
            self.source(),
            self.program().display()
        )
    }

    /// `nvcc 13.2`, `nvrtc 12.9`.
    pub fn short(&self, probe: &Probe) -> String {
        format!("{} {}", self.compiler(), probe.version)
    }
}

/// The cache root: `FATKIT_CACHE_DIR`, else `$XDG_CACHE_HOME/fatkit`, else `~/.cache/fatkit`.
pub fn cache_dir() -> Result<PathBuf, ToolchainError> {
    if let Some(dir) = std::env::var_os("FATKIT_CACHE_DIR") {
        if dir.is_empty() {
            return Err(ToolchainError::EmptyCacheDir);
        }
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("fatkit"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".cache/fatkit"))
        .ok_or(ToolchainError::NoCacheDir)
}

pub(crate) fn install_dir(cache: &Path, compiler: Compiler, cuda: CudaVersion) -> PathBuf {
    let kind = match compiler {
        Compiler::Nvcc => "cuda",
        Compiler::Nvrtc => "nvrtc",
    };
    cache.join("toolchains").join(format!("{kind}-{cuda}"))
}

/// The root (holding `bin/nvcc`) inside a provisioned install: NVIDIA's wheels for CUDA 13,
/// Debian's build for CUDA 12 ([`debian`]).
pub(crate) fn nvcc_root(dir: &Path, cuda: CudaVersion) -> PathBuf {
    if cuda.major >= 13 {
        dir.join("nvidia").join(format!("cu{}", cuda.major))
    } else {
        dir.join("cuda")
    }
}

/// An NVRTC 12.x wheel install: the library and the header directories.
pub(crate) fn nvrtc_in(dir: &Path, cuda: CudaVersion, source: String) -> Nvrtc {
    let nvidia = dir.join("nvidia");
    Nvrtc {
        library: nvidia
            .join("cuda_nvrtc/lib")
            .join(format!("libnvrtc.so.{}", cuda.major)),
        include_dirs: vec![
            nvidia.join("cuda_runtime/include"),
            nvidia.join("cuda_cccl/include"),
        ],
        root: nvidia,
        version: Some(cuda),
        source,
    }
}

/// The provisioned toolchain of `compiler` at `cuda`, if a complete install is in the cache.
pub fn provisioned_of(
    compiler: Compiler,
    cuda: CudaVersion,
) -> Result<Option<Toolchain>, ToolchainError> {
    let dir = install_dir(&cache_dir()?, compiler, cuda);
    if !dir.join(COMPLETE).is_file() {
        return Ok(None);
    }
    let source = format!("provisioned ({})", dir.display());
    Ok(Some(match compiler {
        Compiler::Nvcc => Toolchain::Nvcc(Nvcc::at(nvcc_root(&dir, cuda), Some(cuda), &source)),
        Compiler::Nvrtc => Toolchain::Nvrtc(nvrtc_in(&dir, cuda, source)),
    }))
}

/// The provisioned nvcc of `cuda`, if a complete install is in the cache.
pub fn provisioned(cuda: CudaVersion) -> Result<Option<Nvcc>, ToolchainError> {
    Ok(match provisioned_of(Compiler::Nvcc, cuda)? {
        Some(Toolchain::Nvcc(n)) => Some(n),
        _ => None,
    })
}

/// Every complete provisioned install (nvcc and NVRTC), oldest first.
pub fn list_provisioned() -> Result<Vec<Toolchain>, ToolchainError> {
    let dir = cache_dir()?.join("toolchains");
    let Ok(read) = fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in read.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let parsed = [("cuda-", Compiler::Nvcc), ("nvrtc-", Compiler::Nvrtc)]
            .into_iter()
            .find_map(|(prefix, c)| Some((c, name.strip_prefix(prefix)?.parse().ok()?)));
        let Some((compiler, version)) = parsed else {
            continue;
        };
        if let Some(tc) = provisioned_of(compiler, version)? {
            out.push(tc);
        }
    }
    out.sort_by_key(|t| (t.version(), t.compiler()));
    Ok(out)
}
