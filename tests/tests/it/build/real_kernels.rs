//! Kernel code written the way real projects write it (tests/fixtures/real-kernels: standard
//! headers, fp16/bf16/fp8, templates behind `extern "C"`, warp shuffles, a shared header,
//! constexpr host helpers, arch-guarded kernels) built for `full` with real flags, by
//! `build-kernels` from `[package.metadata.fatkit]` in a workspace outside this repository and by
//! `fatkit_build::Build`: sm_70 by NVRTC 12.9 (a CUDA 12 compiler), sm_75..sm_120 and
//! compute_120 by nvcc 13, as cuobjdump reads them.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::{Path, PathBuf};

use fatkit_tests::{cuobjdump_list, cuobjdump_toolkits, fatkit_in_process, temp_dir, toolchain};

const FLAGS: &str = r#"["-std=c++17", "--expt-relaxed-constexpr", "-O3", "--use_fast_math"]"#;
const DECLARED: &str = r#"
[package.metadata.fatkit.kernels]
"*_bf16" = { targets = "sm_80+" }
"*_fp8" = { targets = "sm_89+" }
"#;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/real-kernels/kernels")
}

/// A workspace with one kernel crate holding the corpus; `table` ends its Cargo.toml.
fn workspace(name: &str, table: &str) -> PathBuf {
    let dir = temp_dir(name);
    std::fs::write(
        dir.join("Cargo.toml"),
        "[workspace]\nmembers = [\"kern\"]\nresolver = \"2\"\n",
    )
    .unwrap();
    let krate = dir.join("kern");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    std::fs::create_dir_all(krate.join("kernels")).unwrap();
    std::fs::write(krate.join("src/lib.rs"), "").unwrap();
    std::fs::write(
        krate.join("Cargo.toml"),
        format!(
            "[package]\nname = \"kern\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[package.metadata.fatkit]\nprofile = \"full\"\nsources = [\"kernels\"]\nflags = {FLAGS}\n{table}"
        ),
    )
    .unwrap();
    for entry in std::fs::read_dir(corpus()).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, krate.join("kernels").join(path.file_name().unwrap())).unwrap();
    }
    dir
}

fn build_kernels(ws: &Path, more: &[&str]) -> (u8, String) {
    let manifest = ws.join("Cargo.toml");
    let mut args = vec![
        "build-kernels",
        "--manifest-path",
        manifest.to_str().unwrap(),
    ];
    args.extend(more);
    let (code, out, err) = fatkit_in_process(&args);
    (code, format!("{out}{err}"))
}

/// Every module: sm_70 (by CUDA 12.x) through sm_120 cubins and compute_120 PTX, per cuobjdump;
/// the arch-guarded kernels recorded as declared.
fn assert_full(tc: &fatkit_toolchain::Nvcc, out: &Path, modules: &[&str]) {
    let expected: Vec<(String, String)> = [
        "sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120",
    ]
    .iter()
    .map(|t| ("cubin".to_owned(), t.to_string()))
    .chain([("ptx".to_owned(), "compute_120".to_owned())])
    .collect();
    for m in modules {
        let fatbin = out.join(format!("{m}.fatbin"));
        let mut listed = cuobjdump_list(tc, &fatbin);
        listed.sort_by_key(|(k, t)| {
            let n: u32 = t
                .trim_start_matches(|c: char| !c.is_ascii_digit())
                .parse()
                .unwrap_or(0);
            (k.clone(), n)
        });
        assert_eq!(listed, expected, "{}", fatbin.display());
        let sm70 = cuobjdump_toolkits(tc, &fatbin)
            .into_iter()
            .find(|(sm, _)| sm == "70")
            .unwrap();
        assert!(
            sm70.1.starts_with("12"),
            "{m}: sm_70 built by {sm70:?}, not CUDA 12"
        );
    }
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("quant.manifest.json")).unwrap()).unwrap();
    let declared: Vec<(String, String)> = manifest["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|k| {
            Some((
                k["name"].as_str()?.to_owned(),
                k["declared"].as_str()?.to_owned(),
            ))
        })
        .collect();
    assert_eq!(
        declared,
        [
            (
                "quantize_fp8".to_owned(),
                "targets = \"sm_89+\" (*_fp8)".to_owned()
            ),
            (
                "rmsnorm_bf16".to_owned(),
                "targets = \"sm_80+\" (*_bf16)".to_owned()
            )
        ]
    );
    let rust = std::fs::read_to_string(out.join("quant.rs")).unwrap();
    assert!(
        rust.contains("rmsnorm_bf16=sm_80,sm_86,sm_89,sm_90,sm_100,sm_120,compute_120;"),
        "{rust}"
    );
}

#[test]
fn corpus_builds_for_full_from_package_metadata() {
    let Some(tc) = toolchain() else { return };
    if !fatkit_tests::nvrtc_available() {
        return;
    }
    let ws = workspace("real-kernels-metadata", DECLARED);
    let (code, out) = build_kernels(&ws, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("3 modules (3 written, 0 failed)"), "{out}");
    let out = ws.join("target/fatkit/kern");
    assert_full(&tc, &out, &["quant", "softmax", "unary"]);
    audit_reads_the_declarations(&out.join("quant.fatbin"));
}

/// `audit` of a module's fatbin reads the declarations of the generated module beside it:
/// `--require full` passes and lists them apart; on a V100 only the declared kernels fail,
/// named as declared, and the file passes as `Module::check` does.
fn audit_reads_the_declarations(fatbin: &Path) {
    let file = fatbin.to_str().unwrap();
    let (code, out, err) = fatkit_in_process(&["audit", file, "--require", "full"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("every kernel covered")
            && out.contains("declared by the crate, not gaps (2 kernel(s)")
            && out.contains("    rmsnorm_bf16: not built for sm_70 sm_75\n")
            && out.contains("    quantize_fp8: not built for sm_70 sm_75 sm_80 sm_86\n"),
        "{out}"
    );
    let (code, out, err) = fatkit_in_process(&["audit", file, "--gpu", "V100"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("do not run"), "{out}");
    let declared: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(": declared for "))
        .map(str::trim)
        .collect();
    assert_eq!(declared.len(), 2, "{out}");
    assert!(
        declared[0].starts_with("quantize_fp8: declared for sm_89 ")
            && declared[1].starts_with("rmsnorm_bf16: declared for sm_80 "),
        "{out}"
    );
    // Without the generated module beside it, the same fatbin has gaps.
    let alone = fatbin.with_file_name("alone.fatbin");
    std::fs::copy(fatbin, &alone).unwrap();
    let (code, out, _) = fatkit_in_process(&[
        "audit",
        alone.to_str().unwrap(),
        "--require",
        "full",
        "--all-kernels",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("    sm_70: ")
            && l.contains(": no cubin or PTX that runs on CC 7.0: ")
            && l.contains("rmsnorm_bf16")),
        "{out}"
    );
}

#[test]
fn corpus_builds_for_full_from_a_build_script() {
    let Some(tc) = toolchain() else { return };
    if !fatkit_tests::nvrtc_available() {
        return;
    }
    let out = temp_dir("real-kernels-build-api");
    let mut build = fatkit_build::Build::new();
    build
        .profile("full")
        .files(["quant.cu", "softmax.cu", "unary.cu"].map(|f| corpus().join(f)))
        .kernel_targets("*_bf16", "sm_80+")
        .kernel_targets("*_fp8", "sm_89+")
        .out_dir(&out)
        .cargo_metadata(false);
    for flag in [
        "-std=c++17",
        "--expt-relaxed-constexpr",
        "-O3",
        "--use_fast_math",
    ] {
        build.flag(flag);
    }
    let report = build.try_compile("kernels").unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_full(&tc, &out, &["quant", "softmax", "unary"]);
}

/// Undeclared guards fail the build naming the declaration; a flag NVRTC lacks and a host-side
/// launch on the NVRTC route fail before anything compiles, naming flag or file:line.
#[test]
fn undeclared_kernels_and_what_nvrtc_cannot_do_are_refused() {
    if toolchain().is_none() || !fatkit_tests::nvrtc_available() {
        return;
    }
    let ws = workspace("real-kernels-undeclared", "");
    let (code, out) = build_kernels(&ws, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("kernel rmsnorm_bf16 is in the sm_80 sm_86 sm_89 sm_90 sm_100 sm_120 compute_120 images but missing from sm_70 sm_75"),
        "{out}"
    );
    assert!(
        out.contains("`[package.metadata.fatkit.kernels] rmsnorm_bf16 = { targets = \"sm_80+\" }`")
            && out.contains(".kernel_targets(\"quantize_fp8\", \"sm_89+\")"),
        "{out}"
    );

    let (code, out) = build_kernels(&ws, &["--flag=--extended-lambda"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(
            "flag '--extended-lambda': nvrtc 12.9 builds sm_70 (profile full) and cannot honour it"
        ),
        "{out}"
    );
    assert!(!out.contains("jobs,"), "compiled before refusing: {out}");

    std::fs::write(
        ws.join("kern/kernels/launch.cu"),
        "#include \"common.cuh\"\nextern \"C\" __global__ void k(float* x) { x[0] = 1; }\n// k<<<1, 1>>>(x) in a comment is fine\nvoid launch(float* x) {\n    k<<<1, 32>>>(x);\n}\n",
    )
    .unwrap();
    let (code, out) = build_kernels(&ws, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("kern/kernels/launch.cu:5: a kernel launch (<<<...>>>) is host code, which NVRTC cannot compile"),
        "{out}"
    );
    assert!(!out.contains("jobs,"), "compiled before refusing: {out}");
}
