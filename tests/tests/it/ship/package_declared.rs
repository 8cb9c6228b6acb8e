//! Toolchain tier: `package` of a crate with a kernel declared for fewer targets: shown as
//! declared, its GPUs still covered with the kernel named; the same fatbin without the
//! declaration is a gap.
#![allow(clippy::unwrap_used, clippy::panic)]

use fatkit_tests::{nvrtc_available, toolchain};

use crate::ship::package::{downstream, package, unpacked};

/// A kernel declared without sm_120 is packaged, its exception shown as declared (the binary
/// carries the declaration fatkit-runtime embeds); a binary holding the same fatbin without
/// the declaration (embedded with `include_bytes!`) is refused, and nothing is written.
#[test]
fn a_declared_exclusion_is_packaged_as_declared_and_a_gap_refused() {
    if toolchain().is_none() || !nvrtc_available() {
        return;
    }
    let dir = downstream(
        "package-declared",
        "\n[package.metadata.fatkit.kernels]\nvector_scale_f32 = { exclude = [\"sm_120\", \"compute_120\"] }\n",
    );
    let (code, out, err) = package(&dir);
    assert_eq!(code, 0, "{out}\n{err}");
    let (unpacked, coverage) = unpacked(&dir, &out);
    let binary = &coverage["binaries"][0];
    assert_eq!(binary["gaps"], serde_json::json!([]), "{binary}");
    let declared: Vec<String> = binary["declared"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| format!("{} {}", g["kernel"], g["target"]))
        .collect();
    assert_eq!(
        declared,
        [
            "\"vector_scale_f32\" \"sm_120\"",
            "\"vector_scale_f32\" \"compute_120\""
        ]
    );
    let scale = binary["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "vector_scale_f32")
        .unwrap();
    let declared_targets = scale["declared"].as_array().unwrap();
    assert!(
        !declared_targets.contains(&"sm_120".into()) && declared_targets.contains(&"sm_100".into()),
        "{scale}"
    );
    let md = std::fs::read_to_string(unpacked.join("COVERAGE.md")).unwrap();
    assert!(
        md.contains("| `vector_scale_f32` | cubin sm_70 |")
            && md.contains("| not built (declared) |")
            && md.contains("Declared exceptions:")
            && md.contains("| `vector_scale_f32` | sm_70 sm_75 "),
        "{md}"
    );
    // CC 12.0 stays covered, its declared kernel named: the one kernel that runs there counts.
    let blackwell = coverage["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["cc"] == "12.0");
    assert_eq!(
        blackwell.map(|g| g["declared"].clone()),
        Some(serde_json::json!(["vector_scale_f32"]))
    );

    // The same fatbin, embedded raw: the binary holds no declaration, so sm_120 is a gap.
    let krate = dir.join("crates/fatkit-example");
    std::fs::write(
        krate.join("src/main.rs"),
        "static FATBIN: &[u8] = include_bytes!(concat!(env!(\"FATKIT_KERNELS_DIR\"), \"/vector.fatbin\"));\n\
         fn main() { println!(\"{}\", std::hint::black_box(FATBIN).len()); }\n",
    )
    .unwrap();
    std::fs::remove_dir_all(dir.join("dist")).unwrap();
    let (code, out, err) = package(&dir);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains("gap: binary fatkit-example: the container at fatkit-example@0x")
            && out.contains(": kernel vector_scale_f32: sm_120 (GeForce RTX 5090, ")
            && out.contains("no image of its module that holds it runs on CC 12.0"),
        "{out}"
    );
    assert!(
        !out.contains("kernel vector_add_f32"),
        "only the excluded kernel: {out}"
    );
    let written: Vec<_> = std::fs::read_dir(dir.join("dist"))
        .map(|r| r.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        written.is_empty(),
        "no archive, no partial file: {written:?}"
    );
}

/// A crate that builds its kernels in its build script alone (`compile_library`, the README's
/// migration: no `[package.metadata.fatkit]`, no `cuda-src/`) is packaged: its build script
/// builds for the profile, its library's objects carry the declaration, and the T4 stays
/// covered with the declared kernel named.
#[test]
fn a_crate_whose_build_script_builds_its_kernels_is_packaged() {
    if toolchain().is_none() {
        return;
    }
    use crate::build::file_targets::{ASYNC_CU, LINKING_MAIN, PLAIN_CU};
    let dir = crate::build::build_rs_api::throwaway_crate(
        "quant-app",
        "",
        &[
            ("t.toml", "targets = [\"sm_75\", \"sm_80\", \"sm_90\"]\nptx = []\n"),
            ("build.rs", "fn main() {\n    fatkit_build::Build::new()\n        .file(\"kernels/plain.cu\")\n        .file(\"kernels/async_copy.cu\")\n        .file_targets(\"async_copy.cu\", \"sm_80+\")\n        .compile_library(\"quant\");\n}\n"),
            ("kernels/plain.cu", PLAIN_CU),
            ("kernels/async_copy.cu", ASYNC_CU),
            ("src/main.rs", LINKING_MAIN),
        ],
    );
    let root = fatkit_tests::repo_root();
    let profile = dir.join("t.toml").display().to_string();
    let manifest = dir.join("Cargo.toml").display().to_string();
    let dist = dir.join("dist").display().to_string();
    let target = root
        .join("target/fatkit-tests-package")
        .display()
        .to_string();
    let (code, out, err) = fatkit_tests::fatkit_in_process(&[
        "package",
        "--manifest-path",
        &manifest,
        "--profile",
        &profile,
        "--cargo-profile",
        "dev",
        "--target-dir",
        &target,
        "--dist",
        &dist,
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("the binaries' build scripts build their kernels"),
        "{out}"
    );
    let (unpacked, coverage) = unpacked(&dir, &out);
    let binary = &coverage["binaries"][0];
    assert_eq!(binary["gaps"], serde_json::json!([]), "{binary}");
    let turing = coverage["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["cc"] == "7.5");
    assert_eq!(
        turing.map(|g| g["declared"].clone()),
        Some(serde_json::json!(["copy_async"])),
        "{}",
        coverage["gpus"]
    );
    let md = std::fs::read_to_string(unpacked.join("COVERAGE.md")).unwrap();
    assert!(
        md.contains("not built (declared)") && md.contains("| `copy_async` |"),
        "{md}"
    );
}
