//! Installing NVIDIA's toolchains (and libclang for bindgen) from PyPI wheels into the
//! fatkit cache, without root; and sccache, built from crates.io.
//!
//! An install goes to a temporary directory beside its final place and is renamed into place
//! only once it is checked (nvcc runs, NVRTC's files are there), under an exclusive lock: a
//! killed install leaves nothing half-written that a later run would trust, and the next run
//! starts over (pip's own download cache makes that cheap).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use fatkit_arch::toolkit::CudaVersion;
use fatkit_arch::Compiler;

use super::{
    cache_dir, debian, install_dir, io_err, nvcc_root, nvrtc_in, provisioned_of, Nvcc, Toolchain,
    ToolchainError, COMPLETE, CUDA13_WHEELS, NVRTC12_WHEELS,
};
use crate::command::{self, ToolError};
use crate::launcher::SCCACHE_VERSION;

/// The Python that runs pip: `FATKIT_PYTHON`, else `python3`.
fn python() -> PathBuf {
    std::env::var_os("FATKIT_PYTHON").map_or_else(|| PathBuf::from("python3"), PathBuf::from)
}

/// Installs CUDA `cuda` (13.x) from NVIDIA's wheels unless a complete install is cached.
/// `log` receives one line per step.
pub fn provision(cuda: CudaVersion, log: &mut dyn FnMut(&str)) -> Result<Nvcc, ToolchainError> {
    match provision_of(Compiler::Nvcc, cuda, log)? {
        Toolchain::Nvcc(n) => Ok(n),
        Toolchain::Nvrtc(_) => Err(ToolchainError::Unsupported(format!("nvcc {cuda}"))),
    }
}

/// Installs `compiler` at `cuda` unless a complete install is cached: nvcc for CUDA 13.x and
/// NVRTC (with its release's headers) for CUDA 12.x from NVIDIA's wheels, nvcc 12.4 from
/// Debian's packages ([`debian`]).
pub fn provision_of(
    compiler: Compiler,
    cuda: CudaVersion,
    log: &mut dyn FnMut(&str),
) -> Result<Toolchain, ToolchainError> {
    if compiler == Compiler::Nvcc && cuda == debian::DEBIAN_CUDA {
        return provision_debian(log);
    }
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
            let root = nvcc_root(tmp, cuda);
            for bin in [root.join("bin"), root.join("nvvm").join("bin")] {
                make_executable(&bin)?;
            }
            command::expect_version(
                &root.join("bin").join("nvcc"),
                &format!("release {cuda}"),
                &format!("CUDA {cuda}"),
            )
            .map_err(ToolchainError::from)
        }
        Compiler::Nvrtc => {
            // Not loaded from here: a library opened at the temporary path would keep looking
            // for its builtins there after the rename. Its files are checked instead; the
            // first probe loads it from its final place.
            let tc = nvrtc_in(tmp, cuda, String::new());
            let mut needed: Vec<PathBuf> = vec![tc.library.clone()];
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

/// CUDA 12.4's nvcc from Debian's packages and NVIDIA's header wheels ([`debian`]).
fn provision_debian(log: &mut dyn FnMut(&str)) -> Result<Toolchain, ToolchainError> {
    let cuda = debian::DEBIAN_CUDA;
    if let Some(tc) = provisioned_of(Compiler::Nvcc, cuda)? {
        return Ok(tc);
    }
    let dir = install_dir(&cache_dir()?, Compiler::Nvcc, cuda);
    let specs: Vec<String> = debian::HEADER_WHEELS
        .iter()
        .map(|w| w.to_string())
        .collect();
    let fill = |tmp: &Path| debian::fill(tmp, &python(), &|into: &Path| pip_into(into, &specs));
    install(
        &dir,
        &format!(
            "nvcc {cuda} from Debian's packages, with the headers of NVIDIA's wheels ({})",
            specs.join(", ")
        ),
        log,
        &fill,
        &debian::verify,
    )?;
    let tc = provisioned_of(Compiler::Nvcc, cuda)?.ok_or(ToolchainError::Io {
        path: dir,
        source: std::io::Error::other("install vanished after it was renamed into place"),
    })?;
    log(&format!("nvcc {cuda} ready: {}", tc.program().display()));
    Ok(tc)
}

fn check_files(needed: &[PathBuf], specs: &[String]) -> Result<(), ToolchainError> {
    match needed.iter().find(|p| !p.exists()) {
        Some(missing) => Err(ToolchainError::Tool(ToolError {
            command: format!("pip install {}", specs.join(" ")),
            status: crate::command::ToolStatus::IncompleteInstall,
            output: format!("{} is missing", missing.display()),
            hint: "the wheels' layout changed; report it".to_owned(),
        })),
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
    install(dir, what, log, &|tmp: &Path| pip_into(tmp, specs), verify)
}

/// `pip install --target dir specs`, no dependencies.
fn pip_into(dir: &Path, specs: &[String]) -> Result<(), ToolchainError> {
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
    .arg(dir)
    .args(specs);
    command::run(&mut pip, "pip needs network access to PyPI; set FATKIT_PYTHON to a Python with pip, or install CUDA and set CUDA_HOME")?;
    Ok(())
}

/// sccache [`SCCACHE_VERSION`] and `sccache-dist`, built from crates.io by `cargo install`
/// (`--locked`, feature `dist-server`) into the cache, unless a complete build is there.
/// Minutes of compiling, once. Returns the `sccache` binary.
pub fn provision_sccache(log: &mut dyn FnMut(&str)) -> Result<PathBuf, ToolchainError> {
    let cache = cache_dir()?;
    if let Some(bin) = crate::launcher::provisioned_sccache(&cache) {
        return Ok(bin);
    }
    let dir = crate::launcher::sccache_dir(&cache);
    let cargo = std::env::var_os("CARGO").map_or_else(|| PathBuf::from("cargo"), PathBuf::from);
    let fill = |tmp: &Path| {
        let mut cmd = Command::new(&cargo);
        cmd.args([
            "install",
            "sccache",
            "--version",
            &format!("={SCCACHE_VERSION}"),
            "--locked",
            "--no-track",
            "--features",
            "dist-server",
            "--root",
        ])
        .arg(tmp)
        // Its own target directory, removed with the partial install if it fails.
        .env("CARGO_TARGET_DIR", tmp.join("target"));
        command::run(
            &mut cmd,
            "building sccache needs Rust (cargo) and network access to crates.io",
        )?;
        let target = tmp.join("target");
        fs::remove_dir_all(&target).map_err(io_err(&target))
    };
    let verify = |tmp: &Path| {
        let bin = tmp.join("bin");
        check_files(
            &[bin.join("sccache"), bin.join("sccache-dist")],
            &[format!("sccache {SCCACHE_VERSION}")],
        )?;
        command::expect_version(
            &bin.join("sccache"),
            SCCACHE_VERSION,
            &format!("sccache {SCCACHE_VERSION}"),
        )
        .map_err(ToolchainError::from)
    };
    install(
        &dir,
        &format!("sccache {SCCACHE_VERSION} with sccache-dist (cargo install, a few minutes)"),
        log,
        &fill,
        &verify,
    )?;
    let bin = dir.join("bin").join("sccache");
    log(&format!(
        "sccache {SCCACHE_VERSION} ready: {}",
        bin.display()
    ));
    Ok(bin)
}

/// Fills `dir` with `fill`, under a file lock, through a partial directory renamed into place
/// once `verify` accepts it. A complete install is left alone.
fn install(
    dir: &Path,
    what: &str,
    log: &mut dyn FnMut(&str),
    fill: &dyn Fn(&Path) -> Result<(), ToolchainError>,
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
    let lock = fatkit_package::out::lock_file(&lock_path).map_err(io_err(&lock_path))?;
    // Said only when another process holds it: then the wait can be minutes.
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            log(&format!(
                "waiting for the install lock {} (another fatkit is installing it)",
                lock_path.display()
            ));
            lock.lock().map_err(io_err(&lock_path))?;
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io_err(&lock_path)(e)),
    }
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
    fill(&tmp)?;
    verify(&tmp)?;
    let marker = tmp.join(COMPLETE);
    fatkit_package::out::write_atomic(&marker, format!("{what}\n").as_bytes())
        .map_err(io_err(&marker))?;
    fatkit_package::out::rename_into_place(&tmp, dir).map_err(io_err(dir))?;
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
