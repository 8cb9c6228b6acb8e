//! CUDA toolchains: nvcc, and NVRTC (NVIDIA's runtime compiler library), provisioned from
//! NVIDIA's official pip wheels into versioned cache directories outside the repository (no
//! root), found again later, and probed for what they build.
//!
//! An install goes to a temporary directory beside its final place and is renamed into place
//! only once `nvcc --version` runs from it, under an exclusive lock: a killed install leaves
//! nothing half-written that a later run would trust, and the next run starts over (pip's own
//! download cache makes that cheap).

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;

use fatkit_arch::toolkit::CudaVersion;
use fatkit_arch::Compiler;

/// The CUDA release provisioned by default: the newest whose PTX ISA and minimum driver are
/// both in the tables, so `audit --driver` verdicts on what it builds are never "unknown".
pub const DEFAULT_CUDA: CudaVersion = CudaVersion::new(13, 2);

/// The NVRTC release provisioned beside nvcc: the newest CUDA 12, the last to build sm_70 and
/// sm_72 (Volta, Xavier), which CUDA 13 dropped. No CUDA 12 nvcc is published as wheels.
pub const DEFAULT_NVRTC: CudaVersion = CudaVersion::new(12, 9);

/// The wheels of NVRTC 12.x: the library, and the CUDA headers (runtime, CCCL) kernels include.
pub const NVRTC12_WHEELS: [&str; 3] = [
    "nvidia-cuda-nvrtc-cu12",
    "nvidia-cuda-runtime-cu12",
    "nvidia-cuda-cccl-cu12",
];

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
const COMPLETE: &str = ".fatkit-complete";

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

/// A CUDA compiler fatkit can drive: an nvcc, or an NVRTC library with the headers of its
/// release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Toolchain {
    pub compiler: Compiler,
    /// nvcc: the directory holding `bin/nvcc`. NVRTC: the installation (for messages).
    pub root: PathBuf,
    pub version: Option<CudaVersion>,
    /// Where it came from: `provisioned`, `CUDA_HOME`, `PATH`, ...
    pub source: String,
    /// NVRTC: the library. nvcc: `None`.
    pub library: Option<PathBuf>,
    /// Header directories the compiler needs besides the project's (NVRTC has no CUDA headers
    /// of its own: those of its release, from the runtime and CCCL wheels).
    pub include_dirs: Vec<PathBuf>,
}

impl Toolchain {
    /// An nvcc installation whose `bin/nvcc` is under `root`.
    pub fn nvcc_at(root: PathBuf, version: Option<CudaVersion>, source: &str) -> Toolchain {
        Toolchain {
            compiler: Compiler::Nvcc,
            root,
            version,
            source: source.to_owned(),
            library: None,
            include_dirs: Vec::new(),
        }
    }

    /// The installation of an nvcc binary: `root` is its directory's parent (Debian's
    /// /usr/bin/nvcc wrapper gives /usr, which only matters for bin/nvcc and bin/cuobjdump).
    pub fn from_nvcc(nvcc: &Path, source: &str) -> Toolchain {
        let root = nvcc
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        Toolchain::nvcc_at(root, None, source)
    }

    pub fn bin_dir(&self) -> PathBuf {
        self.root.join("bin")
    }

    pub fn nvcc(&self) -> PathBuf {
        self.bin_dir().join("nvcc")
    }

    /// The file that identifies this toolchain: nvcc, or the NVRTC library.
    pub fn program(&self) -> PathBuf {
        match (&self.compiler, &self.library) {
            (Compiler::Nvrtc, Some(lib)) => lib.clone(),
            _ => self.nvcc(),
        }
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

fn install_dir(cache: &Path, compiler: Compiler, cuda: CudaVersion) -> PathBuf {
    let kind = match compiler {
        Compiler::Nvcc => "cuda",
        Compiler::Nvrtc => "nvrtc",
    };
    cache.join("toolchains").join(format!("{kind}-{cuda}"))
}

/// The root (holding `bin/nvcc`) inside a wheel install.
fn wheel_root(dir: &Path, cuda: CudaVersion) -> PathBuf {
    dir.join("nvidia").join(format!("cu{}", cuda.major))
}

/// An NVRTC 12.x wheel install: the library and the header directories.
fn nvrtc_in(dir: &Path, cuda: CudaVersion, source: String) -> Toolchain {
    let nvidia = dir.join("nvidia");
    Toolchain {
        compiler: Compiler::Nvrtc,
        library: Some(
            nvidia
                .join("cuda_nvrtc/lib")
                .join(format!("libnvrtc.so.{}", cuda.major)),
        ),
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
        Compiler::Nvcc => Toolchain::nvcc_at(wheel_root(&dir, cuda), Some(cuda), &source),
        Compiler::Nvrtc => nvrtc_in(&dir, cuda, source),
    }))
}

/// The provisioned nvcc of `cuda`, if a complete install is in the cache.
pub fn provisioned(cuda: CudaVersion) -> Result<Option<Toolchain>, ToolchainError> {
    provisioned_of(Compiler::Nvcc, cuda)
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
    out.sort_by_key(|t| (t.version, t.compiler));
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
    provision_of(Compiler::Nvcc, cuda, log)
}

/// Installs `compiler` at `cuda` from NVIDIA's wheels unless a complete install is cached:
/// nvcc for CUDA 13.x, NVRTC (with its release's headers) for CUDA 12.x.
pub fn provision_of(
    compiler: Compiler,
    cuda: CudaVersion,
    log: &mut dyn FnMut(&str),
) -> Result<Toolchain, ToolchainError> {
    let wheels: &[&str] = match (compiler, cuda.major) {
        (Compiler::Nvcc, 13) => &CUDA13_WHEELS,
        (Compiler::Nvrtc, 12) => &NVRTC12_WHEELS,
        _ => return Err(ToolchainError::Unsupported(format!("{compiler} {cuda}"))),
    };
    if let Some(tc) = provisioned_of(compiler, cuda)? {
        return Ok(tc);
    }
    let cache = cache_dir()?;
    let dir = install_dir(&cache, compiler, cuda);
    let specs: Vec<String> = wheels.iter().map(|w| format!("{w}=={cuda}.*")).collect();
    let what = format!(
        "{compiler} {cuda} from NVIDIA's wheels ({})",
        wheels.join(", ")
    );
    pip_install(&dir, &what, &specs, log, &|tmp: &Path| match compiler {
        Compiler::Nvcc => {
            let root = wheel_root(tmp, cuda);
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
            Ok(())
        }
        Compiler::Nvrtc => {
            // Not loaded from here: a library opened at the temporary path would keep looking
            // for its builtins there after the rename. Its files are checked instead; the
            // first probe loads it from its final place.
            let tc = nvrtc_in(tmp, cuda, String::new());
            let mut needed: Vec<PathBuf> = tc.library.iter().cloned().collect();
            needed.extend(tc.include_dirs.first().map(|d| d.join("cuda_fp16.h")));
            needed.push(tmp.join("nvidia/cuda_cccl/include/nv/target"));
            check_files(&needed, &specs)
        }
    })?;
    let tc = provisioned_of(compiler, cuda)?.ok_or(ToolchainError::Io {
        path: dir,
        source: std::io::Error::other("install vanished after it was renamed into place"),
    })?;
    log(&format!(
        "{compiler} {cuda} ready: {}",
        tc.program().display()
    ));
    Ok(tc)
}

fn check_files(needed: &[PathBuf], specs: &[String]) -> Result<(), ToolchainError> {
    match needed.iter().find(|p| !p.exists()) {
        Some(missing) => Err(ToolchainError::Command {
            command: format!("pip install {}", specs.join(" ")),
            status: "incomplete install".to_owned(),
            output: format!("{} is missing", missing.display()),
            hint: "the wheels' layout changed; report it".to_owned(),
        }),
        None => Ok(()),
    }
}

/// The libclang release bindgen uses when `LIBCLANG_PATH` names none: PyPI's `libclang`
/// wheel, so that no root is needed.
pub const LIBCLANG_WHEEL: &str = "libclang==18.1.*";

/// The directory holding `libclang.so` for bindgen: `LIBCLANG_PATH` if set, else the one
/// provisioned from [`LIBCLANG_WHEEL`] into the cache (installed now unless `offline`).
pub fn libclang_dir(offline: bool, log: &mut dyn FnMut(&str)) -> Result<PathBuf, ToolchainError> {
    if let Some(dir) = std::env::var_os("LIBCLANG_PATH").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let dir = cache_dir()?.join("toolchains").join("libclang-18");
    let lib = |root: &Path| root.join("clang").join("native");
    if dir.join(COMPLETE).is_file() {
        return Ok(lib(&dir));
    }
    if offline {
        return Err(ToolchainError::Unsupported(
            "libclang (offline: set LIBCLANG_PATH to a directory holding libclang.so)".to_owned(),
        ));
    }
    let specs = [LIBCLANG_WHEEL.to_owned()];
    pip_install(
        &dir,
        "libclang 18 (PyPI's libclang wheel)",
        &specs,
        log,
        &|tmp| check_files(&[lib(tmp).join("libclang.so")], &specs),
    )?;
    Ok(lib(&dir))
}

/// `pip install --target` of `specs` into `dir`, under a file lock, through a partial
/// directory renamed into place once `verify` accepts it. A complete install is left alone.
fn pip_install(
    dir: &Path,
    what: &str,
    specs: &[String],
    log: &mut dyn FnMut(&str),
    verify: &dyn Fn(&Path) -> Result<(), ToolchainError>,
) -> Result<(), ToolchainError> {
    let toolchains = dir
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    fs::create_dir_all(&toolchains).map_err(io_err(&toolchains))?;
    let name = dir
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let lock_path = toolchains.join(format!(".{name}.lock"));
    let lock = File::create(&lock_path).map_err(io_err(&lock_path))?;
    log(&format!(
        "waiting for the install lock {}",
        lock_path.display()
    ));
    lock.lock().map_err(io_err(&lock_path))?;
    // Another process may have finished while we waited.
    if dir.join(COMPLETE).is_file() {
        return Ok(());
    }
    let tmp = toolchains.join(format!(".{name}.partial"));
    for stale in [&tmp, &dir.to_path_buf()] {
        if stale.exists() {
            log(&format!(
                "removing an interrupted install {}",
                stale.display()
            ));
            fs::remove_dir_all(stale).map_err(io_err(stale))?;
        }
    }
    log(&format!("installing {what} into {}", dir.display()));
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
    .args(specs);
    run(&mut pip, "pip needs network access to PyPI; set FATKIT_PYTHON to a Python with pip, or install CUDA and set CUDA_HOME")?;
    verify(&tmp)?;
    let marker = tmp.join(COMPLETE);
    fs::write(&marker, format!("{what}\n")).map_err(io_err(&marker))?;
    fs::rename(&tmp, dir).map_err(io_err(dir))?;
    Ok(())
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
        return Ok(Some(Toolchain::from_nvcc(Path::new(&nvcc), "FATKIT_NVCC")));
    }
    if let Some(tc) = provisioned(DEFAULT_CUDA)? {
        return Ok(Some(tc));
    }
    Ok(on_path("nvcc").map(|nvcc| Toolchain::from_nvcc(&nvcc, "PATH")))
}

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

impl Toolchain {
    /// `nvcc 13.2 (provisioned /root/.cache/..., /path/bin/nvcc)`.
    pub fn describe(&self, probe: Option<&Probe>) -> String {
        let version = probe
            .map(|p| p.version)
            .or(self.version)
            .map_or_else(|| "?".to_owned(), |v| v.to_string());
        format!(
            "{} {version} ({}, {})",
            self.compiler,
            self.source,
            self.program().display()
        )
    }

    /// `nvcc 13.2`, `nvrtc 12.9`.
    pub fn short(&self, probe: &Probe) -> String {
        format!("{} {}", self.compiler, probe.version)
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

/// The newest GCC major an nvcc release accepts as its host compiler, from NVIDIA's
/// installation guides (Medium confidence: one source per row).
pub fn max_gcc(cuda: CudaVersion) -> u32 {
    match (cuda.major, cuda.minor) {
        (0..=10, _) => 8,
        (11, 0) => 9,
        (11, 1..=3) => 10,
        (11, _) => 11,
        (12, 0..=3) => 12,
        (12, 4..=7) => 13,
        (12, _) => 14,
        _ => 15,
    }
}

/// `g++ (Debian 12.2.0-14) 12.2.0` -> 12.
fn gcc_major(first_line: &str) -> Option<u32> {
    first_line
        .split_whitespace()
        .rev()
        .find_map(|w| w.split('.').next()?.parse().ok())
}

fn first_line_of(program: &Path) -> Option<String> {
    Command::new(program)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_owned)
        })
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The host compiler for an nvcc of `cuda`: the default `g++` when nvcc supports it, else the
/// newest `g++-N` on `PATH` it does support.
pub fn choose_host_compiler(cuda: CudaVersion) -> Option<HostCompiler> {
    let max = max_gcc(cuda);
    let default = on_path("g++").and_then(|p| first_line_of(&p));
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
        let Some(path) = on_path(&format!("g++-{n}")) else {
            continue;
        };
        if let Some(line) = first_line_of(&path) {
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

fn probes_dir() -> Result<PathBuf, ToolchainError> {
    Ok(cache_dir()?.join("probes"))
}

fn cached_probe(id: &str) -> Option<Probe> {
    let path = probes_dir().ok()?.join(format!("v2-{id}.json"));
    fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Probe>(&b).ok())
}

fn store_probe(id: &str, probe: &Probe) {
    let Ok(dir) = probes_dir() else { return };
    if fs::create_dir_all(&dir).is_ok() {
        let tmp = dir.join(format!(".{id}.{}.tmp", std::process::id()));
        if let Ok(json) = serde_json::to_vec_pretty(probe) {
            if fs::write(&tmp, json).is_ok() {
                let _ = fs::rename(&tmp, dir.join(format!("v2-{id}.json")));
            }
        }
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
    match tc.compiler {
        Compiler::Nvcc => probe_nvcc(tc),
        Compiler::Nvrtc => probe_nvrtc(tc),
    }
}

fn probe_nvrtc(tc: &Toolchain) -> Result<Probe, ToolchainError> {
    let lib = tc.program();
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

fn probe_nvcc(tc: &Toolchain) -> Result<Probe, ToolchainError> {
    let nvcc = tc.nvcc();
    let id = binary_identity(&nvcc)?;
    if let Some(probe) = cached_probe(&id) {
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

/// Every toolchain this machine has. nvcc in the order DESIGN.md gives: `explicit` (`--nvcc`),
/// `FATKIT_NVCC`, `CUDA_HOME` / `CUDA_PATH`, `nvcc` on `PATH`, `/usr/local/cuda`, other known
/// system locations, then the provisioned ones; then NVRTC: `FATKIT_NVRTC` (a `libnvrtc.so`,
/// with the `include/` beside its `lib*/`), then the provisioned ones. Duplicates (same real
/// path) are dropped.
pub fn discover(explicit: Option<&Path>) -> Result<Vec<Toolchain>, ToolchainError> {
    let mut found: Vec<Toolchain> = Vec::new();
    let mut add = |tc: Toolchain| {
        let program = tc.program();
        if !program.is_file() {
            return;
        }
        let real = fs::canonicalize(&program).unwrap_or_else(|_| program.clone());
        if found
            .iter()
            .any(|t| fs::canonicalize(t.program()).unwrap_or_else(|_| t.program()) == real)
        {
            return;
        }
        found.push(tc);
    };
    let mut add_nvcc = |nvcc: PathBuf, source: &str| add(Toolchain::from_nvcc(&nvcc, source));
    if let Some(nvcc) = explicit {
        add_nvcc(nvcc.to_owned(), "--nvcc");
    }
    if let Some(nvcc) = std::env::var_os("FATKIT_NVCC") {
        add_nvcc(PathBuf::from(nvcc), "FATKIT_NVCC");
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(home) = std::env::var_os(var) {
            add_nvcc(PathBuf::from(home).join("bin/nvcc"), var);
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            add_nvcc(dir.join("nvcc"), "PATH");
        }
    }
    add_nvcc(PathBuf::from("/usr/local/cuda/bin/nvcc"), "/usr/local/cuda");
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
            add_nvcc(dir.join("bin/nvcc"), "/usr/local/cuda-*");
        }
    }
    add_nvcc(
        PathBuf::from("/usr/lib/nvidia-cuda-toolkit/bin/nvcc"),
        "Debian nvidia-cuda-toolkit",
    );
    add_nvcc(PathBuf::from("/opt/cuda/bin/nvcc"), "/opt/cuda");
    let provisioned = list_provisioned()?;
    for tc in provisioned.iter().rev() {
        if tc.compiler == Compiler::Nvcc {
            add(tc.clone());
        }
    }
    if let Some(lib) = std::env::var_os("FATKIT_NVRTC") {
        let lib = PathBuf::from(lib);
        let root = lib
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        add(Toolchain {
            compiler: Compiler::Nvrtc,
            include_dirs: vec![root.join("include")],
            root,
            version: None,
            source: "FATKIT_NVRTC".to_owned(),
            library: Some(lib),
        });
    }
    for tc in provisioned.into_iter().rev() {
        if tc.compiler == Compiler::Nvrtc {
            add(tc);
        }
    }
    Ok(found)
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
    for_wanted(&wanted, explicit, offline, log)
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
    let wanted: Vec<(fatkit_arch::Target, Option<fatkit_arch::Pin>)> = profile
        .all_targets()
        .iter()
        .map(|t| (t, profile.pins.get(&t).copied()))
        .collect();
    for_wanted(&wanted, explicit, offline, log)
}

fn for_wanted(
    wanted: &[(fatkit_arch::Target, Option<fatkit_arch::Pin>)],
    explicit: Option<&Path>,
    offline: bool,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_compiler_limits() {
        assert_eq!(max_gcc(CudaVersion::new(11, 8)), 11);
        assert_eq!(max_gcc(CudaVersion::new(12, 9)), 14);
        assert_eq!(max_gcc(CudaVersion::new(13, 2)), 15);
        assert_eq!(gcc_major("g++ (Debian 12.2.0-14+deb12u1) 12.2.0"), Some(12));
        assert_eq!(gcc_major("g++-11 (Debian 11.3.0-12) 11.3.0"), Some(11));
        assert_eq!(gcc_major("nothing"), None);
    }
}
