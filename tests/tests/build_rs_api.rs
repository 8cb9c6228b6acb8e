//! Toolchain tier: a crate whose build.rs uses `fatkit_build::Build` is Fresh on a second
//! `cargo build`, and its build script runs again after an included `.cuh` is touched; a
//! shared struct nvcc lays out differently from bindgen fails the build naming struct and field.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

use fatkit_tests::{cargo, output, repo_root as root, temp_dir, toolchain};

fn cargo_build(dir: &Path, target: &Path) -> String {
    let (ok, text) = try_cargo_build(dir, target);
    assert!(ok, "{text}");
    text
}

fn try_cargo_build(dir: &Path, target: &Path) -> (bool, String) {
    output(
        Command::new(cargo())
            .args(["build", "-v", "--offline"])
            .current_dir(dir)
            .env("CARGO_TARGET_DIR", target)
            .env_remove("RUSTFLAGS"),
    )
}

/// A throwaway crate whose build.rs uses fatkit-build (with `features`), holding `files`, the
/// workspace's lock file (the same versions, all in the local registry: --offline) and a
/// one-target profile `t.toml`.
fn throwaway_crate(name: &str, features: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = temp_dir(name);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n\n[build-dependencies]\nfatkit-build = {{ path = {:?}, features = [{features}] }}\n",
            root().join("crates/fatkit-build").display().to_string()
        ),
    )
    .unwrap();
    std::fs::copy(root().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    std::fs::write(dir.join("t.toml"), "targets = [\"sm_80\"]\nptx = []\n").unwrap();
    for (file, text) in files {
        std::fs::write(dir.join(file), text).unwrap();
    }
    dir
}

/// Outside the repository's target dir, whose lock the running `cargo test` may hold.
fn target_dir() -> PathBuf {
    root().join("target/tmp/build-rs-target")
}

#[test]
fn fresh_on_a_second_build_and_rebuilt_after_touching_a_header() {
    if toolchain().is_none() {
        return;
    }
    let dir = throwaway_crate(
        "uses-fatkit",
        "",
        &[
            ("h.cuh", "#define SCALE 2.0f\n"),
            (
                "k.cu",
                "#include \"h.cuh\"\nextern \"C\" __global__ void k(float* x) { x[0] *= SCALE; }\n",
            ),
            (
                "build.rs",
                "fn main() { fatkit_build::Build::new().profile(\"t.toml\").file(\"k.cu\").compile(\"kernels\"); }\n",
            ),
            (
                "src/lib.rs",
                "include!(concat!(env!(\"OUT_DIR\"), \"/kernels.rs\"));\npub fn n() -> usize { k::FATBIN.len() + k::kernels::K.len() }\n",
            ),
        ],
    );
    let target = target_dir();

    let first = cargo_build(&dir, &target);
    assert!(
        first.contains("Running") && first.contains("build-script-build"),
        "{first}"
    );
    // The index names its modules relative to itself: the directory can be committed or moved.
    let index = std::fs::read_dir(target.join("debug/build"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("out/kernels.rs"))
        .find(|p| p.is_file() && p.to_string_lossy().contains("uses-fatkit-"))
        .unwrap();
    let index = std::fs::read_to_string(index).unwrap();
    assert!(index.contains("include!(\"k.rs\")"), "{index}");
    let second = cargo_build(&dir, &target);
    assert!(second.contains("Fresh uses-fatkit"), "{second}");
    assert!(!second.contains("Running `"), "{second}");

    // Touch the header (same contents, new mtime): the build script runs again.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(dir.join("h.cuh"), "#define SCALE 2.0f\n").unwrap();
    let third = cargo_build(&dir, &target);
    assert!(
        third.contains("Dirty uses-fatkit") || third.contains("Running `"),
        "{third}"
    );
    assert!(third.contains("build-script-build"), "{third}");
}

#[test]
fn a_shared_struct_nvcc_lays_out_differently_fails_the_build() {
    if toolchain().is_none() {
        return;
    }
    let dir = throwaway_crate(
        "uses-fatkit-layout",
        "\"layout\"",
        &[
            (
                "shared.h",
                "typedef struct {\n  float a;\n#ifdef __CUDACC__\n  int device_only;\n#endif\n  float b;\n} Drifts;\n",
            ),
            (
                "k.cu",
                "#include \"shared.h\"\nextern \"C\" __global__ void k(Drifts d, float* x) { x[0] = d.b; }\n",
            ),
            (
                "build.rs",
                "fn main() { fatkit_build::Build::new().profile(\"t.toml\").file(\"k.cu\").shared_types(\"shared.h\").compile(\"kernels\"); }\n",
            ),
            (
                "src/lib.rs",
                "include!(concat!(env!(\"OUT_DIR\"), \"/kernels.rs\"));\n",
            ),
        ],
    );
    let target = target_dir();
    let (ok, text) = try_cargo_build(&dir, &target);
    assert!(!ok, "{text}");
    assert!(
        text.contains("struct Drifts, field b: offset 4 on the host (bindgen), 8 on the device (nvcc offsetof)"),
        "{text}"
    );

    // The same header without the device-only member builds, with the Rust type in the index.
    std::fs::write(
        dir.join("shared.h"),
        "typedef struct {\n  float a;\n  float b;\n} Drifts;\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("src/lib.rs"),
        "include!(concat!(env!(\"OUT_DIR\"), \"/kernels.rs\"));\npub fn d() -> shared_types::Drifts { shared_types::Drifts { a: 1.0, b: 2.0 } }\n",
    )
    .unwrap();
    cargo_build(&dir, &target);
}
