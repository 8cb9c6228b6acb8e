//! CUDA toolchains: NVIDIA's nvcc provisioned from its official pip wheels into a versioned
//! cache directory outside the repository (no root), and found again later.
//!
//! An install goes to a temporary directory beside its final place and is renamed into place
//! only once `nvcc --version` runs from it, under an exclusive lock: a killed install leaves
//! nothing half-written that a later run would trust, and the next run starts over (pip's own
//! download cache makes that cheap).

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;

use fatkit_arch::toolkit::CudaVersion;

/// The CUDA release provisioned by default: the newest whose PTX ISA and minimum driver are
/// both in the tables, so `audit --driver` verdicts on what it builds are never "unknown".
pub const DEFAULT_CUDA: CudaVersion = CudaVersion::new(13, 2);

/// The wheels that make a complete nvcc (plus cuobjdump) for CUDA 13.x.
pub const CUDA13_WHEELS: [&str; 6] = [
    "nvidia-cuda-nvcc",
    "nvidia-cuda-crt",
    "nvidia-nvvm",
    "nvidia-cuda-runtime",
    "nvidia-cuda-cccl",
    "nvidia-cuda-cuobjdump",
];

/// The environment variables discovery, provisioning and the cache read; build scripts
/// declare them with `cargo:rerun-if-env-changed`.
pub const ENV_VARS: [&str; 8] = [
    "FATKIT_NVCC",
    "CUDA_HOME",
    "CUDA_PATH",
    "PATH",
    "FATKIT_CACHE_DIR",
    "XDG_CACHE_HOME",
    "HOME",
    "FATKIT_PYTHON",
];

/// Marker written last into a finished install.
const COMPLETE: &str = ".fatkit-complete";

#[derive(Debug, thiserror::Error)]
pub enum ToolchainError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("CUDA {0} cannot be provisioned from wheels: only CUDA 13.x ships a complete nvcc on PyPI; install that CUDA yourself and set CUDA_HOME")]
    Unsupported(CudaVersion),
    #[error("`{command}` failed ({status}); {hint}\n{output}")]
    Command {
        command: String,
        status: String,
        output: String,
        hint: String,
    },
    #[error("no home directory to put the toolchain cache in; set FATKIT_CACHE_DIR")]
    NoCacheDir,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ToolchainError + '_ {
    move |source| ToolchainError::Io {
        path: path.to_owned(),
        source,
    }
}

/// A CUDA installation fatkit can drive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Toolchain {
    /// The directory holding `bin/nvcc`.
    pub root: PathBuf,
    pub version: Option<CudaVersion>,
    /// Where it came from: `provisioned`, `CUDA_HOME`, `PATH`, ...
    pub source: String,
}

impl Toolchain {
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

/// The cache root: `FATKIT_CACHE_DIR`, else `$XDG_CACHE_HOME/fatkit`, else `~/.cache/fatkit`.
pub fn cache_dir() -> Result<PathBuf, ToolchainError> {
    if let Some(dir) = std::env::var_os("FATKIT_CACHE_DIR") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("fatkit"));
    }
    std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(".cache/fatkit"))
        .ok_or(ToolchainError::NoCacheDir)
}

fn install_dir(cache: &Path, cuda: CudaVersion) -> PathBuf {
    cache.join("toolchains").join(format!("cuda-{cuda}"))
}

/// The root (holding `bin/nvcc`) inside a wheel install.
fn wheel_root(dir: &Path, cuda: CudaVersion) -> PathBuf {
    dir.join("nvidia").join(format!("cu{}", cuda.major))
}

/// The provisioned toolchain of `cuda`, if a complete install is in the cache.
pub fn provisioned(cuda: CudaVersion) -> Result<Option<Toolchain>, ToolchainError> {
    let dir = install_dir(&cache_dir()?, cuda);
    Ok(dir.join(COMPLETE).is_file().then(|| Toolchain {
        root: wheel_root(&dir, cuda),
        version: Some(cuda),
        source: format!("provisioned ({})", dir.display()),
    }))
}

/// Every complete provisioned install, oldest first.
pub fn list_provisioned() -> Result<Vec<Toolchain>, ToolchainError> {
    let dir = cache_dir()?.join("toolchains");
    let Ok(read) = fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in read.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(version) = name
            .strip_prefix("cuda-")
            .and_then(|v| v.parse::<CudaVersion>().ok())
        else {
            continue;
        };
        if let Some(tc) = provisioned(version)? {
            out.push(tc);
        }
    }
    out.sort_by_key(|t| t.version);
    Ok(out)
}

/// The Python that runs pip: `FATKIT_PYTHON`, else `python3`.
fn python() -> PathBuf {
    std::env::var_os("FATKIT_PYTHON").map_or_else(|| PathBuf::from("python3"), PathBuf::from)
}

fn run(cmd: &mut Command, hint: &str) -> Result<String, ToolchainError> {
    let command = format!("{cmd:?}").replace('"', "");
    let out = cmd.output().map_err(|e| ToolchainError::Command {
        command: command.clone(),
        status: "could not start".to_owned(),
        output: e.to_string(),
        hint: hint.to_owned(),
    })?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        let tail: Vec<&str> = text.lines().rev().take(20).collect();
        let output = tail.into_iter().rev().collect::<Vec<_>>().join("\n");
        return Err(ToolchainError::Command {
            command,
            status: out.status.to_string(),
            output,
            hint: hint.to_owned(),
        });
    }
    Ok(text)
}

/// Installs CUDA `cuda` (13.x) from NVIDIA's wheels unless a complete install is cached.
/// `log` receives one line per step.
pub fn provision(
    cuda: CudaVersion,
    log: &mut dyn FnMut(&str),
) -> Result<Toolchain, ToolchainError> {
    if cuda.major != 13 {
        return Err(ToolchainError::Unsupported(cuda));
    }
    if let Some(tc) = provisioned(cuda)? {
        return Ok(tc);
    }
    let cache = cache_dir()?;
    let toolchains = cache.join("toolchains");
    fs::create_dir_all(&toolchains).map_err(io_err(&toolchains))?;
    let lock_path = toolchains.join(format!(".cuda-{cuda}.lock"));
    let lock = File::create(&lock_path).map_err(io_err(&lock_path))?;
    log(&format!(
        "waiting for the install lock {}",
        lock_path.display()
    ));
    lock.lock().map_err(io_err(&lock_path))?;
    // Another process may have finished while we waited.
    if let Some(tc) = provisioned(cuda)? {
        return Ok(tc);
    }
    let dir = install_dir(&cache, cuda);
    let tmp = toolchains.join(format!(".cuda-{cuda}.partial"));
    for stale in [&tmp, &dir] {
        if stale.exists() {
            log(&format!(
                "removing an interrupted install {}",
                stale.display()
            ));
            fs::remove_dir_all(stale).map_err(io_err(stale))?;
        }
    }
    let specs: Vec<String> = CUDA13_WHEELS
        .iter()
        .map(|w| format!("{w}=={cuda}.*"))
        .collect();
    log(&format!(
        "installing CUDA {cuda} from NVIDIA's wheels ({}) into {}",
        CUDA13_WHEELS.join(", "),
        dir.display()
    ));
    let mut pip = Command::new(python());
    pip.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",
        "--no-input",
        "--target",
    ])
    .arg(&tmp)
    .args(&specs);
    run(&mut pip, "pip needs network access to PyPI; set FATKIT_PYTHON to a Python with pip, or install CUDA and set CUDA_HOME")?;
    let root = wheel_root(&tmp, cuda);
    for bin in [root.join("bin"), root.join("nvvm").join("bin")] {
        make_executable(&bin)?;
    }
    let version = run(
        Command::new(root.join("bin").join("nvcc")).arg("--version"),
        "the installed nvcc does not run on this machine",
    )?;
    if !version.contains(&format!("release {cuda}")) {
        return Err(ToolchainError::Command {
            command: "nvcc --version".to_owned(),
            status: "unexpected version".to_owned(),
            output: version,
            hint: format!("expected CUDA {cuda}"),
        });
    }
    let marker = tmp.join(COMPLETE);
    fs::write(&marker, format!("cuda {cuda}\n")).map_err(io_err(&marker))?;
    fs::rename(&tmp, &dir).map_err(io_err(&dir))?;
    log(&format!(
        "CUDA {cuda} ready: {}",
        wheel_root(&dir, cuda).join("bin").display()
    ));
    provisioned(cuda)?.ok_or(ToolchainError::Io {
        path: dir,
        source: std::io::Error::other("install vanished after it was renamed into place"),
    })
}

/// pip drops the executable bits of wheel files on some versions; restore them.
fn make_executable(dir: &Path) -> Result<(), ToolchainError> {
    use std::os::unix::fs::PermissionsExt;
    let Ok(read) = fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in read.flatten() {
        let path = entry.path();
        if path.is_file() {
            let mut perms = fs::metadata(&path).map_err(io_err(&path))?.permissions();
            perms.set_mode(perms.mode() | 0o755);
            fs::set_permissions(&path, perms).map_err(io_err(&path))?;
        }
    }
    Ok(())
}

/// The toolchain tests and tools should use: `FATKIT_NVCC` (a path to nvcc), else the
/// provisioned default, else `nvcc` on `PATH`.
pub fn find_default() -> Result<Option<Toolchain>, ToolchainError> {
    if let Some(nvcc) = std::env::var_os("FATKIT_NVCC") {
        let nvcc = PathBuf::from(nvcc);
        let root = nvcc
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        return Ok(Some(Toolchain {
            root,
            version: None,
            source: "FATKIT_NVCC".to_owned(),
        }));
    }
    if let Some(tc) = provisioned(DEFAULT_CUDA)? {
        return Ok(Some(tc));
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("nvcc"))
                .find(|n| n.is_file())
        })
        .unwrap_or_default();
    Ok(on_path.and_then(|nvcc| {
        let root = nvcc.parent()?.parent()?.to_path_buf();
        Some(Toolchain {
            root,
            version: None,
            source: "PATH".to_owned(),
        })
    }))
}

/// What a toolchain says about itself, probed once per binary (by path, size and mtime).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Probe {
    pub version: CudaVersion,
    /// `nvcc --version`'s "Build ..." line: tells builds of one release apart.
    pub build: String,
    /// Every target it compiles: `--list-gpu-code` / `--list-gpu-arch`, plus the `a`/`f`
    /// variants the tables give its version for those SMs (some releases do not list them).
    pub targets: fatkit_arch::TargetSet,
    /// The host compiler nvcc runs (`gcc --version`'s first line), if found.
    pub host_compiler: Option<String>,
    /// A hash of the binary's identity and build: part of every cache key.
    pub identity: String,
}

impl Toolchain {
    /// `nvcc 13.2 (provisioned /root/.cache/...)`.
    pub fn describe(&self, probe: Option<&Probe>) -> String {
        let version = probe
            .map(|p| p.version)
            .or(self.version)
            .map_or_else(|| "?".to_owned(), |v| v.to_string());
        format!(
            "nvcc {version} ({}, {})",
            self.source,
            self.nvcc().display()
        )
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

/// Probes `tc`, from the cache when this very binary was probed before.
pub fn probe(tc: &Toolchain) -> Result<Probe, ToolchainError> {
    let nvcc = tc.nvcc();
    let id = binary_identity(&nvcc)?;
    let cache = cache_dir()?.join("probes");
    let cached = cache.join(format!("{id}.json"));
    if let Some(probe) = fs::read(&cached)
        .ok()
        .and_then(|b| serde_json::from_slice::<Probe>(&b).ok())
    {
        return Ok(probe);
    }
    let text = run(
        Command::new(&nvcc).arg("--version"),
        "this nvcc does not run; check the installation",
    )?;
    let version = text
        .split("release ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|v| v.trim().parse::<CudaVersion>().ok())
        .ok_or_else(|| ToolchainError::Command {
            command: format!("{} --version", nvcc.display()),
            status: "unrecognised output".to_owned(),
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
        let listed = run(
            Command::new(&nvcc).arg(flag),
            "this nvcc cannot list its targets",
        )?;
        for word in listed.split_whitespace() {
            if let Ok(t) = word.parse::<fatkit_arch::Target>() {
                targets.insert(t.with_kind(kind));
            }
        }
    }
    // The a/f variants of listed SMs, where the tables say this release has them.
    for t in fatkit_arch::toolkit::targets_of(version).iter() {
        if t.suffix != fatkit_arch::Suffix::None
            && targets.contains(t.with_suffix(fatkit_arch::Suffix::None))
        {
            targets.insert(t);
        }
    }
    let host_compiler = Command::new("gcc")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_owned)
        });
    let identity =
        blake3::hash(format!("{id}|{build}|{}", host_compiler.as_deref().unwrap_or("")).as_bytes())
            .to_hex()
            .to_string();
    let probe = Probe {
        version,
        build,
        targets,
        host_compiler,
        identity,
    };
    if fs::create_dir_all(&cache).is_ok() {
        let tmp = cache.join(format!(".{id}.{}.tmp", std::process::id()));
        if let Ok(json) = serde_json::to_vec_pretty(&probe) {
            if fs::write(&tmp, json).is_ok() {
                let _ = fs::rename(&tmp, &cached);
            }
        }
    }
    Ok(probe)
}

/// Every nvcc this machine has, in the order DESIGN.md gives: `explicit` (`--nvcc`),
/// `FATKIT_NVCC`, `CUDA_HOME` / `CUDA_PATH`, `nvcc` on `PATH`, `/usr/local/cuda`, other known
/// system locations, then the provisioned ones. Duplicates (same real path) are dropped.
pub fn discover(explicit: Option<&Path>) -> Result<Vec<Toolchain>, ToolchainError> {
    let mut found: Vec<Toolchain> = Vec::new();
    let mut add = |nvcc: PathBuf, source: &str| {
        if !nvcc.is_file() {
            return;
        }
        let real = fs::canonicalize(&nvcc).unwrap_or_else(|_| nvcc.clone());
        if found
            .iter()
            .any(|t| fs::canonicalize(t.nvcc()).unwrap_or_else(|_| t.nvcc()) == real)
        {
            return;
        }
        // Debian's /usr/bin/nvcc is a wrapper whose CUDA root is /usr/lib/nvidia-cuda-toolkit;
        // `root` only matters for bin/nvcc and bin/cuobjdump, so the wrapper's parent works.
        if let Some(root) = nvcc.parent().and_then(Path::parent) {
            found.push(Toolchain {
                root: root.to_owned(),
                version: None,
                source: source.to_owned(),
            });
        }
    };
    if let Some(nvcc) = explicit {
        add(nvcc.to_owned(), "--nvcc");
    }
    if let Some(nvcc) = std::env::var_os("FATKIT_NVCC") {
        add(PathBuf::from(nvcc), "FATKIT_NVCC");
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(home) = std::env::var_os(var) {
            add(PathBuf::from(home).join("bin/nvcc"), var);
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            add(dir.join("nvcc"), "PATH");
        }
    }
    add(PathBuf::from("/usr/local/cuda/bin/nvcc"), "/usr/local/cuda");
    if let Ok(read) = fs::read_dir("/usr/local") {
        let mut dirs: Vec<PathBuf> = read
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("cuda-"))
            })
            .collect();
        dirs.sort();
        for dir in dirs.iter().rev() {
            add(dir.join("bin/nvcc"), "/usr/local/cuda-*");
        }
    }
    add(
        PathBuf::from("/usr/lib/nvidia-cuda-toolkit/bin/nvcc"),
        "Debian nvidia-cuda-toolkit",
    );
    add(PathBuf::from("/opt/cuda/bin/nvcc"), "/opt/cuda");
    for tc in list_provisioned()?.into_iter().rev() {
        add(tc.nvcc(), &tc.source);
    }
    Ok(found)
}

/// Every toolchain found, probed (one that fails to probe is reported through `warn` and
/// skipped); when none of them builds some of `targets` and `offline` is off, CUDA
/// [`DEFAULT_CUDA`] is provisioned first if the tables say it builds them.
pub fn for_targets(
    targets: &fatkit_arch::TargetSet,
    explicit: Option<&Path>,
    offline: bool,
    log: &mut dyn FnMut(String),
) -> Result<Vec<(Toolchain, Probe)>, ToolchainError> {
    let probe_all =
        |log: &mut dyn FnMut(String)| -> Result<Vec<(Toolchain, Probe)>, ToolchainError> {
            let mut out = Vec::new();
            for tc in discover(explicit)? {
                match probe(&tc) {
                    Ok(p) => out.push((tc, p)),
                    Err(e) => log(format!("skipping {}: {e}", tc.nvcc().display())),
                }
            }
            Ok(out)
        };
    let found = probe_all(log)?;
    let missing: Vec<fatkit_arch::Target> = targets
        .iter()
        .filter(|t| !found.iter().any(|(_, p)| p.targets.contains(*t)))
        .collect();
    let default_builds = fatkit_arch::toolkit::targets_of(DEFAULT_CUDA);
    if missing.is_empty()
        || offline
        || !missing.iter().all(|t| default_builds.contains(*t))
        || provisioned(DEFAULT_CUDA)?.is_some()
    {
        return Ok(found);
    }
    let names: Vec<String> = missing.iter().map(|t| t.to_string()).collect();
    log(format!(
        "no toolchain found builds {}; provisioning CUDA {DEFAULT_CUDA}",
        names.join(" ")
    ));
    provision(DEFAULT_CUDA, &mut |line| log(format!("toolchain: {line}")))?;
    probe_all(log)
}
