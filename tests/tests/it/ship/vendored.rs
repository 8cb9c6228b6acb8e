//! The vendored way: crates/fatkit-example-kernels ships its modules in kernels/prebuilt/.
//! - Its `.crate` holds them and stays small; a consumer that depends on it by version (the
//!   packaged crates patched in, as a registry would give them) builds with no CUDA toolkit,
//!   Python, network or fatkit cache, and its binary passes `fatkit audit --require full`.
//! - The committed modules are what `build-kernels` writes from the sources, byte for byte, with
//!   an empty cache in another directory; editing a header then fails `cargo build` naming the
//!   module and the command, and after the command it passes.
#![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::process::Command;

use fatkit_tests::{cargo, fatkit_in_process, output, repo_root as root, temp_dir, toolchain};

/// fatkit-fatbin, fatkit-lock, fatkit-audit, fatkit-toolchain and fatkit-build too: the
/// consumer builds none of them, but `cargo package` of fatkit-runtime resolves its
/// dev-dependencies (fatkit-audit needs fatkit-lock).
const CRATES: [&str; 11] = [
    "fatkit-arch",
    "fatkit-read",
    "fatkit-run",
    "fatkit-fatbin",
    "fatkit-lock",
    "fatkit-audit",
    "fatkit-package",
    "fatkit-toolchain",
    "fatkit-build",
    "fatkit-runtime",
    "fatkit-example-kernels",
];

/// `cargo package` of the crates a consumer pulls in, unpacked under `dir/registry/`, as cargo
/// unpacks a registry's crates: `(name, unpacked directory, .crate size)`.
fn packaged(dir: &Path) -> Vec<(String, PathBuf, u64)> {
    let target = dir.join("package-target");
    let mut cmd = Command::new(cargo());
    cmd.args(["package", "--no-verify", "--allow-dirty", "--offline"])
        .arg("--target-dir")
        .arg(&target)
        .current_dir(root());
    for c in CRATES {
        cmd.args(["-p", c]);
    }
    let (ok, text) = output(&mut cmd);
    assert!(ok, "{text}");
    let registry = dir.join("registry");
    std::fs::create_dir_all(&registry).unwrap();
    CRATES
        .iter()
        .map(|name| {
            let file = target.join(format!("package/{name}-0.1.0.crate"));
            let size = std::fs::metadata(&file).unwrap().len();
            let (ok, text) = output(
                Command::new("tar")
                    .arg("xzf")
                    .arg(&file)
                    .arg("-C")
                    .arg(&registry),
            );
            assert!(ok, "{text}");
            (
                name.to_string(),
                registry.join(format!("{name}-0.1.0")),
                size,
            )
        })
        .collect()
}

#[test]
fn a_consumer_builds_with_no_toolkit_and_its_binary_passes_audit_require_full() {
    let dir = temp_dir("vendored-consumer");

    // `cargo package --list` ships the prebuilt modules.
    let (ok, list) = output(
        Command::new(cargo())
            .args([
                "package",
                "--list",
                "--allow-dirty",
                "--offline",
                "-p",
                "fatkit-example-kernels",
            ])
            .current_dir(root()),
    );
    assert!(ok, "{list}");
    for file in [
        "kernels/prebuilt/saxpy.fatbin",
        "kernels/prebuilt/saxpy.rs",
        "kernels/prebuilt/saxpy.manifest.json",
        "kernels/saxpy.cu",
        "kernels/common.cuh",
    ] {
        assert!(list.lines().any(|l| l == file), "{file} not in:\n{list}");
    }

    let crates = packaged(&dir);
    let (_, kernels_dir, crate_size) = crates
        .iter()
        .find(|(name, _, _)| name == "fatkit-example-kernels")
        .unwrap();
    let prebuilt: u64 = std::fs::read_dir(kernels_dir.join("kernels/prebuilt"))
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len())
        .sum();
    eprintln!(
        "fatkit-example-kernels-0.1.0.crate: {crate_size} bytes (gzip), holding {prebuilt} bytes of prebuilt modules"
    );
    assert!(
        *crate_size < 10 << 20,
        "{crate_size} bytes: over crates.io's 10 MB"
    );
    assert!(kernels_dir.join("Cargo.toml.orig").is_file());

    // The consumer, its [patch] pointing at the unpacked crates.
    let consumer = dir.join("consumer");
    std::fs::create_dir_all(consumer.join("src")).unwrap();
    let example = root().join("examples/vendored-consumer");
    std::fs::copy(example.join("src/main.rs"), consumer.join("src/main.rs")).unwrap();
    let manifest = std::fs::read_to_string(example.join("Cargo.toml")).unwrap();
    let mut manifest = manifest[..manifest.find("[patch.crates-io]").unwrap()].to_owned();
    manifest.push_str("[patch.crates-io]\n");
    for (name, unpacked, _) in &crates {
        manifest.push_str(&format!(
            "{name} = {{ path = {:?} }}\n",
            unpacked.display().to_string()
        ));
    }
    std::fs::write(consumer.join("Cargo.toml"), manifest).unwrap();
    std::fs::copy(root().join("Cargo.lock"), consumer.join("Cargo.lock")).unwrap();

    // PATH: cargo and rustc, and the linker; nothing else. No fatkit cache, no CUDA variables.
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["cc", "ld", "as"] {
        let found = ["/usr/bin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap();
        std::os::unix::fs::symlink(found, bin.join(tool)).unwrap();
    }
    let rust_bin = cargo().canonicalize().unwrap().parent().unwrap().to_owned();
    for dir in [&bin, &rust_bin] {
        for forbidden in ["nvcc", "python3", "python", "pip", "nvidia-smi"] {
            assert!(
                !dir.join(forbidden).exists(),
                "{forbidden} in {}",
                dir.display()
            );
        }
    }
    let home = std::env::var("HOME").unwrap();
    let cargo_home = std::env::var("CARGO_HOME").unwrap_or_else(|_| format!("{home}/.cargo"));
    let target = root().join("target/fatkit-tests-consumer");
    let (ok, text) = output(
        Command::new(rust_bin.join("cargo"))
            .args(["build", "--offline"])
            .current_dir(&consumer)
            .env_clear()
            .env("PATH", std::env::join_paths([&bin, &rust_bin]).unwrap())
            .env("HOME", &home)
            .env("CARGO_HOME", &cargo_home)
            .env("CARGO_TARGET_DIR", &target)
            .env("FATKIT_CACHE_DIR", dir.join("no-such-cache")),
    );
    assert!(ok, "{text}");
    assert!(!dir.join("no-such-cache").exists());
    let binary = target.join("debug/vendored-consumer");

    let (code, out, err) =
        fatkit_in_process(&["audit", binary.to_str().unwrap(), "--require", "full"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("saxpy_bf16"), "{out}");

    let (ok, ran) = output(&mut Command::new(&binary));
    assert!(ok, "{ran}");
    assert!(ran.contains("RTX 5090: saxpy_f32 runs (sm_120)"), "{ran}");
    assert!(ran.contains("V100: saxpy_f32 runs (sm_70)"), "{ran}");
    assert!(ran.contains("V100: saxpy_bf16 does not run"), "{ran}");
}

/// A workspace of its own holding a copy of fatkit-example-kernels, its dependencies the
/// repository's.
fn copied_kernel_crate(dir: &Path) -> PathBuf {
    let ws = dir.join("ws");
    let krate = ws.join("fatkit-example-kernels");
    let from = root().join("crates/fatkit-example-kernels");
    for sub in ["src", "kernels"] {
        std::fs::create_dir_all(krate.join(sub)).unwrap();
    }
    for file in [
        "Cargo.toml",
        "README.md",
        "build.rs",
        "src/lib.rs",
        "kernels/saxpy.cu",
        "kernels/common.cuh",
    ] {
        std::fs::copy(from.join(file), krate.join(file)).unwrap();
    }
    std::fs::write(
        ws.join("Cargo.toml"),
        format!(
            "[workspace]\nresolver = \"2\"\nmembers = [\"fatkit-example-kernels\"]\n\n\
             [workspace.package]\nversion = \"0.1.0\"\nedition = \"2021\"\nrust-version = \"1.89\"\n\
             license = \"MIT OR Apache-2.0\"\nrepository = \"https://example.invalid/fatkit\"\n\n\
             [workspace.dependencies]\nfatkit-runtime = {{ path = {:?} }}\n\
             fatkit-package = {{ path = {:?} }}\n\n[workspace.lints.rust]\n",
            root().join("crates/fatkit-runtime").display().to_string(),
            root().join("crates/fatkit-package").display().to_string(),
        ),
    )
    .unwrap();
    std::fs::copy(root().join("Cargo.lock"), ws.join("Cargo.lock")).unwrap();
    ws
}

fn build_kernels(ws: &Path, cache: &Path) {
    let (code, out, err) = fatkit_in_process(&[
        "build-kernels",
        "--manifest-path",
        ws.join("Cargo.toml").to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
}

fn cargo_build(ws: &Path) -> (bool, String) {
    output(
        Command::new(cargo())
            .args(["build", "--offline"])
            .current_dir(ws)
            .env(
                "CARGO_TARGET_DIR",
                root().join("target/fatkit-tests-vendored"),
            )
            .env_remove("RUSTFLAGS"),
    )
}

#[test]
fn committed_modules_are_reproduced_byte_for_byte_and_an_edit_fails_the_build_until_rebuilt() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("vendored-stale");
    let ws = copied_kernel_crate(&dir);
    let prebuilt = ws.join("fatkit-example-kernels/kernels/prebuilt");

    // Nothing built yet: the build says what to run.
    let (ok, text) = cargo_build(&ws);
    assert!(!ok, "{text}");
    assert!(
        text.contains("kernels of package fatkit-example-kernels are missing in")
            && text.contains("module saxpy (kernels/saxpy.cu) is not built")
            && text.contains("run `cargo xtask build-kernels` (or `fatkit build-kernels`)"),
        "{text}"
    );

    // Another directory, an empty cache: the same bytes as the repository's.
    build_kernels(&ws, &dir.join("empty-cache"));
    let committed = root().join("crates/fatkit-example-kernels/kernels/prebuilt");
    for file in ["saxpy.fatbin", "saxpy.rs", "saxpy.manifest.json"] {
        let fresh = std::fs::read(prebuilt.join(file)).unwrap();
        let ours = std::fs::read(committed.join(file)).unwrap();
        assert!(
            fresh == ours,
            "{file}: a fresh build differs from the committed one ({} vs {} bytes); run `cargo xtask build-kernels` and commit crates/fatkit-example-kernels/kernels/prebuilt",
            fresh.len(),
            ours.len()
        );
    }
    let (ok, text) = cargo_build(&ws);
    assert!(ok, "{text}");

    // A header edited, no rebuild: the build fails naming the module, the file and the command.
    let header = ws.join("fatkit-example-kernels/kernels/common.cuh");
    let mut text = std::fs::read_to_string(&header).unwrap();
    text.push_str("// edited\n");
    std::fs::write(&header, text).unwrap();
    let (ok, text) = cargo_build(&ws);
    assert!(!ok, "{text}");
    assert!(
        text.contains("kernels of package fatkit-example-kernels are stale in")
            && text.contains("module saxpy is stale: kernels/common.cuh changed")
            && text.contains("commit kernels/prebuilt, then build again"),
        "{text}"
    );

    // A module whose source is gone (renamed, deleted) is removed, not shipped.
    let manifest = std::fs::read_to_string(prebuilt.join("saxpy.manifest.json")).unwrap();
    let renamed = manifest.replace("\"module\": \"saxpy\"", "\"module\": \"old\"");
    assert_ne!(renamed, manifest);
    std::fs::write(prebuilt.join("old.manifest.json"), renamed).unwrap();
    std::fs::copy(prebuilt.join("saxpy.rs"), prebuilt.join("old.rs")).unwrap();
    std::fs::copy(prebuilt.join("saxpy.fatbin"), prebuilt.join("old.fatbin")).unwrap();
    std::fs::write(prebuilt.join("notes.txt"), "not fatkit's").unwrap();

    build_kernels(&ws, &dir.join("empty-cache"));
    let (ok, text) = cargo_build(&ws);
    assert!(ok, "{text}");
    let mut left: Vec<String> = std::fs::read_dir(&prebuilt)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "notes.txt",
            "saxpy.fatbin",
            "saxpy.manifest.json",
            "saxpy.rs"
        ]
    );

    // Issue 29: a partial commit or a merge leaves another build's fatbin beside the manifest
    // (here one byte differs): the check names the file; a build puts the module right.
    let fatbin = prebuilt.join("saxpy.fatbin");
    let mut bytes = std::fs::read(&fatbin).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&fatbin, bytes).unwrap();
    let (ok, text) = cargo_build(&ws);
    assert!(!ok, "{text}");
    assert!(
        text.contains("module saxpy is stale: kernels/prebuilt/saxpy.fatbin is not the file saxpy.manifest.json records"),
        "{text}"
    );
    build_kernels(&ws, &dir.join("empty-cache"));
    let (ok, text) = cargo_build(&ws);
    assert!(ok, "{text}");
}
