//! Finding the toolchains of this machine, in the order docs/DESIGN.md gives.

use std::fs;
use std::path::{Path, PathBuf};

use fatkit_arch::Compiler;

use super::{list_provisioned, Nvcc, Nvrtc, Toolchain, ToolchainError};

/// Every toolchain this machine has. nvcc in the order docs/DESIGN.md gives: `explicit` (`--nvcc`),
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
    let mut add_nvcc =
        |nvcc: PathBuf, source: &str| add(Toolchain::Nvcc(Nvcc::from_binary(&nvcc, source)));
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
        let dirs: Vec<PathBuf> = read
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("cuda-"))
            })
            .collect();
        for dir in newest_first(dirs) {
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
        if tc.compiler() == Compiler::Nvcc {
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
        add(Toolchain::Nvrtc(Nvrtc {
            include_dirs: vec![root.join("include")],
            root,
            version: None,
            source: "FATKIT_NVRTC".to_owned(),
            library: lib,
        }));
    }
    for tc in provisioned.into_iter().rev() {
        if tc.compiler() == Compiler::Nvrtc {
            add(tc);
        }
    }
    Ok(found)
}

/// `/usr/local/cuda-*` directories newest release first, by the version in their name
/// (`cuda-12.4` before `cuda-9.2`, which a sort as text puts first); names without one last.
fn newest_first(mut dirs: Vec<PathBuf>) -> Vec<PathBuf> {
    let version = |p: &PathBuf| -> Option<(u32, u32)> {
        let name = p.file_name()?.to_str()?.strip_prefix("cuda-")?;
        let (major, minor) = name.split_once('.').unwrap_or((name, "0"));
        Some((major.parse().ok()?, minor.parse().ok()?))
    };
    dirs.sort_by(|a, b| version(b).cmp(&version(a)).then_with(|| a.cmp(b)));
    dirs
}

#[cfg(test)]
mod tests {
    use super::newest_first;
    use std::path::PathBuf;

    #[test]
    fn cuda_directories_are_tried_newest_release_first() {
        let dirs = ["cuda-9.2", "cuda-12.4", "cuda-11.8", "cuda-12.10", "cuda-x"]
            .map(|d| PathBuf::from("/usr/local").join(d))
            .to_vec();
        let names: Vec<String> = newest_first(dirs)
            .iter()
            .map(|d| d.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            ["cuda-12.10", "cuda-12.4", "cuda-11.8", "cuda-9.2", "cuda-x"]
        );
    }
}
