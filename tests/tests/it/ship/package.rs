//! Toolchain tier: a downstream-style workspace (a copy of `crates/fatkit-example`: kernels
//! declared in `[package.metadata.fatkit]`, embedded with fatkit-runtime) through
//! `build-kernels` discovery and `package`: the archive and its coverage, a kernel declared
//! without sm_120 packaged as a declared exception, and the refusal of a binary without the
//! declaration.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::{Path, PathBuf};

use fatkit_tests::{fatkit_in_process, nvrtc_available, run, temp_dir, toolchain};

fn repo() -> PathBuf {
    std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap()
}

/// A workspace holding the example crate, with `overrides` as its per-kernel overrides.
pub(crate) fn downstream(name: &str, overrides: &str) -> PathBuf {
    let repo = repo();
    let dir = temp_dir(name);
    let krate = dir.join("crates/fatkit-example");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    std::fs::create_dir_all(krate.join("kernels")).unwrap();
    std::fs::create_dir_all(dir.join("arch-profiles")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        "[workspace]\nmembers = [\"crates/fatkit-example\"]\nresolver = \"2\"\n\n[workspace.metadata.fatkit]\nname = \"downstream\"\n",
    )
    .unwrap();
    std::fs::write(
        krate.join("Cargo.toml"),
        format!(
            "[package]\nname = \"fatkit-example\"\nversion = \"0.3.0\"\nedition = \"2021\"\n\n\
             [dependencies]\nfatkit-runtime = {{ path = \"{}\" }}\n\n\
             [build-dependencies]\nfatkit-package = {{ path = \"{}\" }}\n\n\
             [package.metadata.fatkit]\nprofile = \"full\"\nsources = [\"kernels\"]\n{overrides}",
            repo.join("crates/fatkit-runtime").display(),
            repo.join("crates/fatkit-package").display()
        ),
    )
    .unwrap();
    for file in ["build.rs", "src/lib.rs", "src/main.rs", "kernels/vector.cu"] {
        std::fs::copy(
            repo.join("crates/fatkit-example").join(file),
            krate.join(file),
        )
        .unwrap();
    }
    // The workspace's lock file: the same versions, nothing to resolve online.
    std::fs::copy(repo.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    std::fs::copy(
        repo.join("crates/fatkit-package/profiles/full.toml"),
        dir.join("arch-profiles/full.toml"),
    )
    .unwrap();
    dir
}

/// `package` for a dev build, in a target directory the tests share: one at a time, since
/// every copy of the crate builds the same `target/debug/fatkit-example`.
/// The archive `package` wrote in `dir/dist` (`out`: what it printed), unpacked into
/// `dir/unpacked`, and its COVERAGE.json.
pub(crate) fn unpacked(dir: &Path, out: &str) -> (PathBuf, serde_json::Value) {
    let archive = std::fs::read_dir(dir.join("dist"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".tar.gz"))
        .unwrap_or_else(|| panic!("no archive:\n{out}"));
    let unpacked = dir.join("unpacked");
    std::fs::create_dir_all(&unpacked).unwrap();
    run(
        &unpacked,
        Path::new("tar"),
        &["xzf", archive.to_str().unwrap(), "--strip-components=1"],
    );
    let coverage: serde_json::Value =
        serde_json::from_slice(&std::fs::read(unpacked.join("COVERAGE.json")).unwrap()).unwrap();
    (unpacked, coverage)
}

pub(crate) fn package(dir: &Path) -> (u8, String, String) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let manifest = dir.join("Cargo.toml").display().to_string();
    let target = repo()
        .join("target/fatkit-tests-package")
        .display()
        .to_string();
    let dist = dir.join("dist").display().to_string();
    fatkit_in_process(&[
        "package",
        "--manifest-path",
        &manifest,
        "--cargo-profile",
        "dev",
        "--target-dir",
        &target,
        "--dist",
        &dist,
    ])
}

#[test]
fn package_writes_an_archive_whose_coverage_is_complete() {
    if toolchain().is_none() || !nvrtc_available() {
        return;
    }
    let dir = downstream("package-ok", "");
    let (code, out, err) = package(&dir);
    assert_eq!(code, 0, "{out}\n{err}");
    // build-kernels found the package through its metadata.
    assert!(
        out.contains("== package fatkit-example (profile full)"),
        "{out}"
    );
    // Where cargo builds the binaries (--target-dir), so that the crate's build.rs finds them.
    assert!(repo()
        .join("target/fatkit-tests-package/fatkit/fatkit-example/vector.fatbin")
        .is_file());
    let host = out
        .lines()
        .find_map(|l| l.split("downstream-0.3.0-").nth(1))
        .and_then(|rest| rest.split(".tar.gz").next())
        .unwrap_or_else(|| panic!("no archive named:\n{out}"))
        .to_owned();
    let stem = format!("downstream-0.3.0-{host}");
    let archive = dir.join("dist").join(format!("{stem}.tar.gz"));
    let unpacked = dir.join("unpacked");
    std::fs::create_dir_all(&unpacked).unwrap();
    run(
        &unpacked,
        Path::new("tar"),
        &["xzf", archive.to_str().unwrap()],
    );
    let root = unpacked.join(&stem);
    // SHA256SUMS verifies with the standard tool.
    let checked = run(&root, Path::new("sha256sum"), &["-c", "SHA256SUMS"]);
    for name in ["bin/fatkit-example", "COVERAGE.json", "COVERAGE.md"] {
        assert!(checked.contains(&format!("{name}: OK")), "{checked}");
    }
    let coverage: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("COVERAGE.json")).unwrap()).unwrap();
    assert_eq!(coverage["profile"], "full");
    let targets = coverage["targets"].as_array().unwrap().clone();
    assert_eq!(targets.len(), 9);
    let binary = &coverage["binaries"][0];
    assert_eq!(binary["name"], "fatkit-example");
    let kernels = binary["kernels"].as_array().unwrap();
    let names: Vec<&str> = kernels
        .iter()
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["vector_add_f32", "vector_scale_f32"]);
    for k in kernels {
        assert_eq!(k["images"].as_array().unwrap(), &targets, "{k}");
    }
    assert_eq!(binary["gaps"], serde_json::json!([]));
    let gpus: Vec<&str> = coverage["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["cc"].as_str().unwrap())
        .collect();
    assert!(gpus.contains(&"7.0") && gpus.contains(&"12.0"), "{gpus:?}");
    // An x86_64 binary: no GPU that lives only in aarch64 machines (Jetson, GB10, GH200).
    let products = coverage["gpus"].to_string();
    assert!(
        !products.contains("GB10") && !products.contains("Jetson"),
        "{products}"
    );
    // The driver (issue 55): R580 set by every GPU but 7.0 (sm_70 by CUDA 12.x), and the
    // compute_120 PTX's 595 only for GPUs newer than the tables.
    let floors = &coverage["driver"];
    let md = std::fs::read_to_string(root.join("COVERAGE.md")).unwrap();
    assert_eq!(floors["release"]["floor"]["release"], "580.65.06");
    assert!(!floors["release"]["set_by"].to_string().contains("\"7.0\""));
    assert_eq!(floors["newer_gpus"]["release"], "595.45.04", "{floors}");
    for line in [
        "| `vector_scale_f32` | cubin sm_70 | cubin sm_75 |",
        "Minimum NVIDIA driver: 580.65.06 (CUDA 13.0), set by CC 7.5 8.0",
        "GPUs newer than the tables: 595.45.04 (CUDA 13.2), for compute_120 PTX (ISA 9.2)",
        "| 525.60.13 (CUDA 12.0) | sm_70 cubin from CUDA 12.",
    ] {
        assert!(md.contains(line), "{line}:\n{md}");
    }
    // The README's release section, as written: its COVERAGE.md lines and the V100's row.
    crate::ship::readme::holds_release_lines(&md);
}

/// Declarations the driver would not honour are refused at build time, each with a fix that
/// works: `exclude = ["sm_120"]` with `full` (a CC 12.x GPU loads the sm_120 cubin, not the
/// compute_120 PTX that holds the kernel), `exclude = ["sm_86"]` on sm_80 + sm_86 (an RTX 3090
/// loads the sm_86 cubin), and a module whose sm_75 image holds no kernel.
#[test]
fn declarations_the_driver_would_not_honour_are_refused_with_a_fix_that_works() {
    if toolchain().is_none() || !nvrtc_available() {
        return;
    }
    let build = |dir: &Path| {
        let manifest = dir.join("Cargo.toml").display().to_string();
        fatkit_in_process(&["build-kernels", "--offline", "--manifest-path", &manifest])
    };
    let dir = downstream(
        "driver-view-ptx",
        "\n[package.metadata.fatkit.kernels]\nvector_scale_f32 = { exclude = [\"sm_120\"] }\n",
    );
    let (code, out, err) = build(&dir);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains("kernel vector_scale_f32 (declared `exclude = [\"sm_120\"]`) would not be found on CC 12.0 (")
            && out.contains("the sm_120 cubin, and vector_scale_f32 is not in it")
            && out.contains("`vector_scale_f32 = { exclude = [\"sm_120\", \"compute_120\"] }`"),
        "{out}"
    );
    // The fix it names builds.
    let toml = dir.join("crates/fatkit-example/Cargo.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(
        &toml,
        text.replace("[\"sm_120\"]", "[\"sm_120\", \"compute_120\"]"),
    )
    .unwrap();
    let (code, out, err) = build(&dir);
    assert_eq!(code, 0, "{out}\n{err}");

    // An RTX 3090 loads the sm_86 cubin: a kernel excluded from it is not found there.
    let dir = downstream(
        "driver-view-3090",
        "\n[package.metadata.fatkit.kernels]\nvector_scale_f32 = { exclude = [\"sm_86\"] }\n",
    );
    std::fs::write(
        dir.join("arch-profiles/full.toml"),
        "description = \"two Ampere targets\"\ntargets = [\"sm_80\", \"sm_86\"]\n",
    )
    .unwrap();
    let (code, out, err) = build(&dir);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains("kernel vector_scale_f32 (declared `exclude = [\"sm_86\"]`) would not be found on CC 8.6 (A40, GeForce RTX 3090 Ti), 8.7 (Jetson AGX Orin), 8.9 (L4, GeForce RTX 4090)")
            && out.contains("build vector_scale_f32 for sm_86 too"),
        "{out}"
    );

    // Every kernel declared away from sm_75: the sm_75 image would be empty.
    let dir = downstream(
        "driver-view-empty",
        "\n[package.metadata.fatkit.kernels]\nvector_add_f32 = { exclude = [\"sm_75\"] }\nvector_scale_f32 = { exclude = [\"sm_75\"] }\n",
    );
    std::fs::write(
        dir.join("arch-profiles/full.toml"),
        "description = \"Turing and Ampere\"\ntargets = [\"sm_75\", \"sm_80\"]\n",
    )
    .unwrap();
    let (code, out, err) = build(&dir);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains("the sm_75 image holds no kernel")
            && out.contains("drop sm_75 from the profile's targets"),
        "{out}"
    );
}

/// A binary holding an application's module built for `full` and a dependency's module built
/// for sm_90 only, both with the same kernels: kernels are known by their module, so the
/// dependency's do not borrow the application's sm_80 image. `package` refuses, naming the
/// module, the kernel and the GPUs, and writes nothing.
#[test]
fn a_module_built_for_fewer_targets_is_not_covered_by_a_same_named_one() {
    if toolchain().is_none() || !nvrtc_available() {
        return;
    }
    let dir = downstream("package-two-modules", "");
    // The dependency's module: the same source, for sm_90 only.
    std::fs::write(
        dir.join("arch-profiles/hopper.toml"),
        "description = \"one target\"\ntargets = [\"sm_90\"]\n",
    )
    .unwrap();
    let dep = dir.join("dep");
    let (code, out, err) = fatkit_in_process(&[
        "build-kernels",
        "--offline",
        "--profiles-dir",
        &dir.join("arch-profiles").display().to_string(),
        "--profile",
        "hopper",
        "--src",
        &dir.join("crates/fatkit-example/kernels")
            .display()
            .to_string(),
        "--out",
        &dep.display().to_string(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let main = dir.join("crates/fatkit-example/src/main.rs");
    let mut text = std::fs::read_to_string(&main).unwrap().replace(
        "fn main() -> std::process::ExitCode {",
        "fn main() -> std::process::ExitCode {\n    std::hint::black_box(DEPENDENCY_KERNELS.len());",
    );
    text.push_str(&format!(
        "\nstatic DEPENDENCY_KERNELS: &[u8] = include_bytes!({:?});\n",
        dep.join("vector.fatbin").display().to_string()
    ));
    std::fs::write(&main, text).unwrap();
    let (code, out, err) = package(&dir);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains(": kernel vector_scale_f32: sm_80 (A100, ")
            && out.contains("gap: binary fatkit-example: the container at fatkit-example@0x")
            && !out.contains("module 'vector': kernel"),
        "the dependency's container is named, the application's module has no gap: {out}"
    );
    assert!(
        !dir.join("dist").exists()
            || std::fs::read_dir(dir.join("dist"))
                .unwrap()
                .next()
                .is_none()
    );
}

#[test]
fn an_override_the_source_ignores_is_a_build_error() {
    if toolchain().is_none() || !nvrtc_available() {
        return;
    }
    // kernels/vector.cu guards only its own kernel names; this override names a kernel
    // whose source has no #ifndef FATKIT_SKIP_ guard.
    let dir = downstream("override-unguarded", "");
    std::fs::write(
        dir.join("crates/fatkit-example/kernels/extra.cu"),
        "extern \"C\" __global__ void unguarded(float* x) { x[0] = 1.0f; }\n",
    )
    .unwrap();
    let toml = dir.join("crates/fatkit-example/Cargo.toml");
    let mut text = std::fs::read_to_string(&toml).unwrap();
    text.push_str("\n[package.metadata.fatkit.kernels]\nunguarded = { exclude = [\"sm_90\"] }\n");
    std::fs::write(&toml, text).unwrap();
    let (code, out, err) = fatkit_in_process(&[
        "build-kernels",
        "--profiles-dir",
        &dir.join("arch-profiles").display().to_string(),
        "--src",
        &dir.join("crates/fatkit-example/kernels")
            .display()
            .to_string(),
        "--out",
        &dir.join("out").display().to_string(),
    ]);
    // --src builds that directory alone, without the package's overrides: fine.
    assert_eq!(code, 0, "{out}\n{err}");
    // Through the package's metadata the override applies, and has no effect: refused.
    let (code, out, err) = package(&dir);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains("the sm_90 images hold kernel unguarded, which its declaration `exclude = [\"sm_90\"]` leaves out")
            && out.contains("#ifndef FATKIT_SKIP_unguarded"),
        "{out}"
    );
}

#[test]
fn an_override_naming_no_kernel_is_an_error() {
    if toolchain().is_none() || !nvrtc_available() {
        return;
    }
    let dir = downstream(
        "override-typo",
        "\n[package.metadata.fatkit.kernels]\nvectr_scale_f32 = { exclude = [\"sm_120\"] }\n",
    );
    let manifest = dir.join("Cargo.toml").display().to_string();
    let (code, out, err) = fatkit_in_process(&["build-kernels", "--manifest-path", &manifest]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains("the kernel declaration \"vectr_scale_f32\" matches no kernel of any module; the kernels are vector_add_f32, vector_scale_f32"),
        "{out}"
    );
}

/// A malformed `[package.metadata.fatkit]` is refused before anything compiles, naming the
/// Cargo.toml, the package and the fix (exit 2).
#[test]
fn malformed_package_metadata_names_the_manifest() {
    let cases = [
        ("metadata-missing-source", "sources = [\"kernels/nope.cu\"]\n", "source "),
        ("metadata-unknown-key", "sources = [\"kernels\"]\nsourcs = []\n", "unknown field `sourcs`"),
        (
            "metadata-bad-target",
            "sources = [\"kernels\"]\n[package.metadata.fatkit.kernels]\nvector_add_f32 = { exclude = [\"sm_9x\"] }\n",
            "'sm_9x'",
        ),
        (
            "metadata-not-in-profile",
            "sources = [\"kernels\"]\n[package.metadata.fatkit.kernels]\nvector_add_f32 = { exclude = [\"sm_87\"] }\n",
            "\"vector_add_f32\": 'sm_87': sm_87 is not a target of the profile",
        ),
    ];
    for (name, metadata, want) in cases {
        let dir = downstream(name, "");
        let toml = dir.join("crates/fatkit-example/Cargo.toml");
        let text = std::fs::read_to_string(&toml).unwrap();
        let head = text.split("[package.metadata.fatkit]").next().unwrap();
        std::fs::write(
            &toml,
            format!("{head}[package.metadata.fatkit]\n{metadata}"),
        )
        .unwrap();
        let manifest = dir.join("Cargo.toml").display().to_string();
        let (code, out, err) =
            fatkit_in_process(&["build-kernels", "--offline", "--manifest-path", &manifest]);
        assert_eq!(code, 2, "{name}: {out}\n{err}");
        assert!(
            err.contains("crates/fatkit-example/Cargo.toml") && err.contains(want),
            "{name}: {err}"
        );
    }
}

/// `{ path, module }` names a module other than the source's stem.
#[test]
fn module_names_come_from_the_metadata() {
    if toolchain().is_none() || !nvrtc_available() {
        return;
    }
    let dir = downstream("metadata-module-name", "");
    let toml = dir.join("crates/fatkit-example/Cargo.toml");
    let text = std::fs::read_to_string(&toml).unwrap().replace(
        "sources = [\"kernels\"]",
        "sources = [{ path = \"kernels/vector.cu\", module = \"vec_ops\" }]",
    );
    std::fs::write(&toml, text).unwrap();
    let manifest = dir.join("Cargo.toml").display().to_string();
    let (code, out, err) = fatkit_in_process(&["build-kernels", "--manifest-path", &manifest]);
    assert_eq!(code, 0, "{out}\n{err}");
    let out_dir = dir.join("target/fatkit/fatkit-example");
    assert!(out_dir.join("vec_ops.fatbin").is_file(), "{out}");
    assert!(!out_dir.join("vector.fatbin").exists());
    let rust = std::fs::read_to_string(out_dir.join("vec_ops.rs")).unwrap();
    assert!(
        rust.contains("pub const NAME: &str = \"vec_ops\";"),
        "{rust}"
    );
}

#[test]
fn a_package_list_naming_no_binary_is_refused() {
    let dir = downstream("package-list-typo", "");
    let toml = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&toml).unwrap().replace(
        "name = \"downstream\"",
        "name = \"downstream\"\npackage = [\"fatkit-exampel\"]",
    );
    std::fs::write(&toml, text).unwrap();
    let (code, out, err) = package(&dir);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("package lists 'fatkit-exampel', which is no binary of a workspace member; name one of fatkit-example"),
        "{err}"
    );
}

/// `cargo build` of the crate (its build.rs runs fatkit_package::prebuilt::check) with the
/// workspace's target directory set elsewhere by `.cargo/config.toml`: before the kernels
/// exist it fails naming the module and the command; after `build-kernels` it passes; after
/// an edit of the source it fails naming the stale module and the changed file.
#[test]
fn missing_or_stale_kernels_fail_the_cargo_build_naming_the_command() {
    if toolchain().is_none() || !nvrtc_available() {
        return;
    }
    let dir = downstream("stale-kernels", "");
    let target = repo().join("target/fatkit-tests-stale");
    let _ = std::fs::remove_dir_all(target.join("fatkit"));
    std::fs::create_dir_all(dir.join(".cargo")).unwrap();
    std::fs::write(
        dir.join(".cargo/config.toml"),
        format!("[build]\ntarget-dir = {:?}\n", target.display().to_string()),
    )
    .unwrap();
    let cargo_build = || {
        let out = std::process::Command::new(std::env::var("CARGO").unwrap_or("cargo".into()))
            .args(["build", "--quiet", "--package", "fatkit-example"])
            .current_dir(&dir)
            .env_remove("CARGO_TARGET_DIR")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, err) = cargo_build();
    assert!(!ok, "built without kernels: {err}");
    assert!(
        err.contains("module vector (kernels/vector.cu) is not built")
            && err.contains(
                "run `cargo xtask build-kernels` (or `fatkit build-kernels`) in the workspace"
            ),
        "{err}"
    );
    let manifest = dir.join("Cargo.toml").display().to_string();
    let build_kernels = || {
        let (code, out, err) = fatkit_in_process(&["build-kernels", "--manifest-path", &manifest]);
        assert_eq!(code, 0, "{out}\n{err}");
    };
    build_kernels();
    assert!(target.join("fatkit/fatkit-example/vector.fatbin").is_file());
    let (ok, err) = cargo_build();
    assert!(ok, "{err}");

    let source = dir.join("crates/fatkit-example/kernels/vector.cu");
    let mut text = std::fs::read_to_string(&source).unwrap();
    text.push_str("// an edit\n");
    std::fs::write(&source, text).unwrap();
    let (ok, err) = cargo_build();
    assert!(!ok, "built with stale kernels: {err}");
    assert!(
        err.contains("module vector is stale: kernels/vector.cu changed"),
        "{err}"
    );
    build_kernels();
    let (ok, err) = cargo_build();
    assert!(ok, "{err}");
}
