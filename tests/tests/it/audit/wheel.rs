//! fatkit as a Python user installs it (issue 44): maturin builds the `fatkit` command into a
//! wheel, pip installs it into a fresh virtual environment with no Rust on `PATH`, and the
//! command runs there: `--version`, and `audit --python`, which by default judges the
//! environment it was installed into.
#![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]

use std::path::Path;
use std::process::Command;

use fatkit_tests::{maturin, output, repo_root as root, temp_dir};

/// Runs `program args` with only the system's directories on `PATH` (no cargo, no rustc).
fn without_rust(program: &Path, args: &[&str]) -> (bool, String) {
    output(
        Command::new(program)
            .args(args)
            .env("PATH", "/usr/bin:/bin"),
    )
}

#[test]
fn the_wheel_installs_with_pip_and_audits_its_own_environment() {
    let Some(maturin) = maturin() else { return };
    let dir = temp_dir("wheel");
    let wheels = dir.join("wheels");
    let (ok, text) = output(
        Command::new(&maturin)
            .args(["build", "--locked", "--offline", "--manifest-path"])
            .arg(root().join("crates/fatkit-cli/Cargo.toml"))
            .arg("--out")
            .arg(&wheels)
            .arg("--target-dir")
            .arg(root().join("target/it-maturin")),
    );
    assert!(ok, "{text}");
    let wheel: Vec<_> = std::fs::read_dir(&wheels)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    assert_eq!(wheel.len(), 1, "{wheel:?}");
    let name = wheel[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("fatkit-0.1.0-py3-none-"), "{name}");

    let venv = dir.join("venv");
    let (ok, text) = without_rust(
        Path::new("/usr/bin/env"),
        &["python3", "-m", "venv", venv.to_str().unwrap()],
    );
    assert!(ok, "{text}");
    let (ok, text) = without_rust(
        &venv.join("bin/pip"),
        &["install", "--no-index", wheel[0].to_str().unwrap()],
    );
    assert!(ok, "{text}");
    let fatkit = venv.join("bin/fatkit");
    let (ok, version) = without_rust(&fatkit, &["--version"]);
    assert!(ok && version.trim() == "fatkit 0.1.0", "{version}");

    // Without a value, --python is the interpreter that installed fatkit: the environment's
    // own site-packages, not the system's.
    let (ok, audit) = without_rust(&fatkit, &["audit", "--python"]);
    assert!(ok, "{audit}");
    let site = venv.canonicalize().unwrap();
    assert!(audit.contains(&*site.to_string_lossy()), "{audit}");
    assert!(!audit.contains("/usr/lib/python3/dist-packages"), "{audit}");
    std::fs::remove_dir_all(&dir).unwrap();
}
