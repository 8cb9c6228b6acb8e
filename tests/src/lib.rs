//! Helpers for the end-to-end tests in `tests/`: the real toolchain, temporary directories,
//! and cuobjdump as the oracle.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

use fatkit_build::toolchain::{self, Nvcc as Toolchain};

/// Whether this is CI, where a missing toolchain fails a test instead of skipping it.
pub fn in_ci() -> bool {
    fatkit_build::command::is_ci()
}

/// nvcc and cuobjdump, or `None` (after saying so) outside CI. In CI a missing toolchain
/// panics: `cargo xtask test` provisions it first, so its absence is a real failure.
pub fn toolchain() -> Option<Toolchain> {
    let found =
        toolchain::find_default().unwrap_or_else(|e| panic!("looking for a toolchain: {e}"));
    match found {
        Some(tc) if tc.nvcc().is_file() && tc.cuobjdump().is_some() => Some(tc),
        _ if in_ci() => panic!(
            "CI=true and no nvcc + cuobjdump found; `cargo xtask toolchain install` provisions them (or set FATKIT_NVCC)"
        ),
        _ => {
            eprintln!("skipped: no nvcc + cuobjdump; run `cargo xtask toolchain install`");
            None
        }
    }
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// The cargo running these tests.
pub fn cargo() -> PathBuf {
    PathBuf::from(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
}

/// Runs `cmd`: whether it succeeded, and its stdout then its stderr.
pub fn output(cmd: &mut Command) -> (bool, String) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{:?}: {e}", cmd.get_program()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A fresh directory under the target dir's tmp, unique per test.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/tmp/fatkit-tests")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs a command in `dir`, panicking with its output when it fails. Returns stdout.
pub fn run(dir: &Path, program: &Path, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    assert!(
        out.status.success(),
        "{} {args:?} failed ({}):\n{}{}",
        program.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// cuobjdump's reading of a file as sorted `(kind, target)` pairs, from its default output
/// (`Fatbin elf code:` / `Fatbin ptx code:` blocks with `arch = sm_100f`: its `--list-elf`
/// file names drop the `f`). Empty when cuobjdump finds no device code.
pub fn cuobjdump_list(tc: &Toolchain, file: &Path) -> Vec<(String, String)> {
    let cuobjdump = tc.cuobjdump().unwrap();
    let res = Command::new(&cuobjdump).arg(file).output().unwrap();
    let mut out = Vec::new();
    let mut kind = None;
    for line in String::from_utf8_lossy(&res.stdout).lines() {
        let line = line.trim();
        if line.starts_with("Fatbin elf code") {
            kind = Some("cubin");
        } else if line.starts_with("Fatbin ptx code") {
            kind = Some("ptx");
        } else if let (Some(k), Some(arch)) = (kind, line.strip_prefix("arch = ")) {
            let target = if k == "ptx" {
                arch.replace("sm_", "compute_")
            } else {
                arch.to_owned()
            };
            out.push((k.to_owned(), target));
            kind = None;
        }
    }
    out.sort();
    out
}

/// What `cuobjdump -xelf all` and `-xptx all` extract: `(kind, bytes)` in cuobjdump's
/// numbering order (ELF files first, then PTX files).
pub fn cuobjdump_extract(tc: &Toolchain, file: &Path, scratch: &Path) -> Vec<(String, Vec<u8>)> {
    let cuobjdump = tc.cuobjdump().unwrap();
    let file = std::fs::canonicalize(file).unwrap();
    let mut out = Vec::new();
    for (flag, kind, ext) in [("-xelf", "cubin", "cubin"), ("-xptx", "ptx", "ptx")] {
        let dir = scratch.join(format!("x-{kind}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let listing = run(&dir, &cuobjdump, &[flag, "all", file.to_str().unwrap()]);
        // "Extracting ELF file    3: libk.3.sm_80.cubin": keep cuobjdump's order.
        for line in listing.lines().filter(|l| l.starts_with("Extracting")) {
            let name = line
                .split(": ")
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap();
            assert!(name.ends_with(ext), "{line}");
            out.push((kind.to_owned(), std::fs::read(dir.join(name)).unwrap()));
        }
    }
    out
}

/// Runs `fatkit ARGS...` in process: (exit code, stdout, stderr).
pub fn fatkit_in_process<S: AsRef<str>>(args: &[S]) -> (u8, String, String) {
    let argv: Vec<&str> = std::iter::once("fatkit")
        .chain(args.iter().map(AsRef::as_ref))
        .collect();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = fatkit_cli::run_args(&argv, &mut out, &mut err);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// Whether the provisioned NVRTC 12.9 is there; in CI its absence panics (`cargo xtask test`
/// provisions it).
pub fn nvrtc_available() -> bool {
    let found = toolchain::provisioned_of(fatkit_arch::Compiler::Nvrtc, toolchain::DEFAULT_NVRTC)
        .unwrap_or_else(|e| panic!("looking for NVRTC: {e}"));
    match found {
        Some(_) => true,
        None if in_ci() => panic!(
            "CI=true and NVRTC {} is not provisioned; `cargo xtask toolchain install --nvrtc` adds it",
            toolchain::DEFAULT_NVRTC
        ),
        None => {
            eprintln!("skipped: NVRTC is not provisioned; run `cargo xtask toolchain install --nvrtc`");
            false
        }
    }
}

/// Debian's nvcc 11.8 (package nvidia-cuda-toolkit), which `.ci/run` installs; in CI its
/// absence panics.
pub fn debian_nvcc() -> Option<PathBuf> {
    let nvcc = PathBuf::from("/usr/lib/nvidia-cuda-toolkit/bin/nvcc");
    if nvcc.is_file() {
        return Some(nvcc);
    }
    if in_ci() {
        panic!("CI=true and Debian's nvidia-cuda-toolkit is missing; `bash .ci/install-debian-cuda` installs it");
    }
    eprintln!("skipped: Debian's nvidia-cuda-toolkit is not installed; `bash .ci/install-debian-cuda` installs it");
    None
}

/// `cuobjdump -elf`'s header line of every cubin: `(sm, toolkit)` such as `("70", "129")` or
/// `("80", "13.2")`, in file order.
pub fn cuobjdump_toolkits(tc: &Toolchain, file: &Path) -> Vec<(String, String)> {
    let cuobjdump = tc.cuobjdump().unwrap();
    let text = run(
        Path::new("."),
        &cuobjdump,
        &["-elf", file.to_str().unwrap()],
    );
    text.lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("64bit elf") || l.starts_with("64-bit ELF"))
        .filter_map(|l| {
            let field = |name: &str| {
                l.split([',', ' '])
                    .find_map(|w| w.strip_prefix(name))
                    .map(str::to_owned)
            };
            Some((field("sm=")?, field("toolkit=")?))
        })
        .collect()
}
