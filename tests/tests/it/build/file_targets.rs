//! Toolchain tier: a source that compiles only for sm_80 and newer (`cp.async` with no `#if`
//! on `__CUDA_ARCH__`, as Marlin's kernels are written) is told the declaration that builds
//! it for those targets alone; declared with `Build::file_targets` or
//! `[package.metadata.fatkit.files]`, it is built for them, its kernels are declared for
//! them, and the declaration travels in the library's objects to `audit`.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::Path;

use fatkit_tests::{fatkit_in_process, temp_dir, toolchain};

use crate::build::build_rs_api::offline_build;

/// `cp.async` (sm_80 and newer) unguarded, with its launcher: ptxas refuses it for sm_75.
pub(crate) const ASYNC_CU: &str = r#"extern "C" __global__ void copy_async(float* dst, const float* src) {
    __shared__ float s[32];
    unsigned at = (unsigned)__cvta_generic_to_shared(&s[threadIdx.x]);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" :: "r"(at), "l"(src + threadIdx.x));
    asm volatile("cp.async.wait_all;\n" ::);
    dst[threadIdx.x] = s[threadIdx.x];
}
extern "C" void run_copy_async(float* d, const float* s) { copy_async<<<1, 32>>>(d, s); }
"#;

/// A crate's main that links both sources' launchers (so their objects reach the binary)
/// without launching them: there is no GPU here.
pub(crate) const LINKING_MAIN: &str = "extern \"C\" {\n    fn run_scale(x: *mut f32);\n    fn run_copy_async(d: *mut f32, s: *const f32);\n}\n\nfn main() {\n    // Linked, not launched: there is no GPU here.\n    if std::env::args().count() > 9 {\n        unsafe {\n            run_scale(std::ptr::null_mut());\n            run_copy_async(std::ptr::null_mut(), std::ptr::null());\n        }\n    }\n}\n";

/// A kernel every target builds, with its launcher.
pub(crate) const PLAIN_CU: &str = "extern \"C\" __global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }\nextern \"C\" void run_scale(float* x) { scale<<<1, 32>>>(x); }\n";

fn sources(dir: &Path) {
    std::fs::write(
        dir.join("t.toml"),
        "targets = [\"sm_75\", \"sm_80\", \"sm_90\"]\nptx = []\n",
    )
    .unwrap();
    std::fs::write(dir.join("async_copy.cu"), ASYNC_CU).unwrap();
    std::fs::write(dir.join("plain.cu"), PLAIN_CU).unwrap();
}

#[test]
fn a_source_for_sm_80_and_newer_is_offered_then_built_by_its_declaration() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("file-targets-library");
    sources(&dir);
    // Undeclared: it fails for sm_75, and the error offers the declaration.
    let err = offline_build(&dir, &["async_copy.cu", "plain.cu"])
        .try_compile_library("quant")
        .unwrap_err()
        .to_string();
    let fix = err.lines().last().unwrap_or_default();
    assert!(
        fix.contains("async_copy.cu compiled for sm_80 sm_90 and failed for sm_75")
            && fix.contains(
                "`[package.metadata.fatkit.files] \"async_copy.cu\" = { targets = \"sm_80+\" }`"
            )
            && fix.contains(".file_targets(\"async_copy.cu\", \"sm_80+\")"),
        "{err}"
    );

    // Declared: built for sm_80 and sm_90 alone, the other source for every target.
    let lib = offline_build(&dir, &["async_copy.cu", "plain.cu"])
        .file_targets("async_*.cu", "sm_80+")
        .try_compile_library("quant")
        .unwrap_or_else(|e| panic!("{e}"));
    let jobs: usize = lib.report.jobs_total;
    assert_eq!(jobs, 5, "2 targets of async_copy.cu, 3 of plain.cu");
    let generated = std::fs::read_to_string(dir.join("out/async_copy.rs")).unwrap();
    assert!(
        generated.contains(";copy_async=sm_80,sm_90;end;"),
        "the module declares its kernel for the source's targets:\n{generated}"
    );
    let library = lib.path.display().to_string();
    // The library alone (no generated module included anywhere) carries the declaration.
    let (code, out, err) =
        fatkit_in_process(&["audit", &library, "--require", "sm_75,sm_80,sm_90"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = fatkit_in_process(&["audit", &library, "--gpu", "T4"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("copy_async"),
        "the declared kernel is named:\n{out}"
    );
    let (code, out, err) = fatkit_in_process(&["audit", &library, "--gpu", "A100"]);
    assert_eq!(code, 0, "{out}{err}");

    // A declaration naming no source is refused, naming the sources.
    let err = offline_build(&dir, &["async_copy.cu", "plain.cu"])
        .file_targets("marlin*.cu", "sm_80+")
        .try_compile_library("quant")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("Build::file_targets \"marlin*.cu\" matches none of the sources (")
            && err.contains("async_copy.cu, ")
            && err.contains("plain.cu); fix the name or the path"),
        "{err}"
    );
}

/// The cudaforge way with `kernel_sets_as_built()`: a bf16 kernel whose body is under
/// `#if __CUDA_ARCH__ >= 800` is a stub in the sm_75 image, accepted as built; the library
/// alone (no generated module included) tells `audit` so: on a T4 it is declared, not
/// "compiled out".
#[test]
fn a_library_built_as_built_carries_its_declarations_to_audit() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("as-built-library");
    sources(&dir);
    std::fs::write(
        dir.join("bf16.cu"),
        "#include <cuda_bf16.h>\nextern \"C\" __global__ void scale_bf16(__nv_bfloat16* x) {\n#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n    x[threadIdx.x] = __hmul(x[threadIdx.x], x[threadIdx.x]);\n#endif\n}\nextern \"C\" __global__ void scale_f32(float* x) { x[threadIdx.x] *= x[threadIdx.x]; }\nextern \"C\" void run_scale_bf16(__nv_bfloat16* x) { scale_bf16<<<1, 32>>>(x); }\nextern \"C\" void run_scale_f32(float* x) { scale_f32<<<1, 32>>>(x); }\n",
    )
    .unwrap();
    let lib = offline_build(&dir, &["bf16.cu", "plain.cu"])
        .kernel_sets_as_built()
        .try_compile_library("quant")
        .unwrap_or_else(|e| panic!("{e}"));
    let library = lib.path.display().to_string();
    let (code, out, err) = fatkit_in_process(&["audit", &library, "--gpu", "T4"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("scale_bf16: declared for sm_80 sm_90") && !out.contains("compiled out"),
        "{out}"
    );
    let (code, out, err) =
        fatkit_in_process(&["audit", &library, "--require", "sm_75,sm_80,sm_90"]);
    assert_eq!(code, 0, "{out}{err}");

    // A source whose every kernel is a stub on sm_75 would leave the driver an image of stubs
    // to load there: refused, offering the source's declaration, which then builds.
    std::fs::write(
        dir.join("bf16_only.cu"),
        "#include <cuda_bf16.h>\nextern \"C\" __global__ void only_bf16(__nv_bfloat16* x) {\n#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n    x[threadIdx.x] = __hmul(x[threadIdx.x], x[threadIdx.x]);\n#endif\n}\nextern \"C\" void run_only_bf16(__nv_bfloat16* x) { only_bf16<<<1, 32>>>(x); }\n",
    )
    .unwrap();
    let err = offline_build(&dir, &["bf16_only.cu"])
        .kernel_sets_as_built()
        .try_compile_library("only")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("the sm_75 image holds no kernel")
            && err.contains(".file_targets(\"bf16_only.cu\", \"sm_80+\")"),
        "{err}"
    );
    offline_build(&dir, &["bf16_only.cu"])
        .kernel_sets_as_built()
        .file_targets("bf16_only.cu", "sm_80+")
        .try_compile_library("only")
        .unwrap_or_else(|e| panic!("{e}"));
}

/// A package with both sources in `kernels/`, for sm_75, sm_80 and sm_90, and `files` as
/// its `[package.metadata.fatkit.files]` table: (exit code, output, its output directory).
fn build_package(name: &str, files: &str) -> (u8, String, std::path::PathBuf) {
    let dir = temp_dir(name);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join("kernels")).unwrap();
    std::fs::create_dir_all(dir.join("arch-profiles")).unwrap();
    std::fs::write(dir.join("src/lib.rs"), "").unwrap();
    sources(&dir.join("kernels"));
    std::fs::rename(dir.join("kernels/t.toml"), dir.join("arch-profiles/t.toml")).unwrap();
    let manifest = dir.join("Cargo.toml");
    std::fs::write(
        &manifest,
        format!(
            "[package]\nname = \"quant\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[package.metadata.fatkit]\nprofile = \"t\"\nsources = [\"kernels\"]\n{files}\n[workspace]\n"
        ),
    )
    .unwrap();
    let (code, out, err) = fatkit_in_process(&[
        "build-kernels",
        "--offline",
        "--manifest-path",
        manifest.to_str().unwrap(),
        "--cache-dir",
        dir.join("cache").to_str().unwrap(),
    ]);
    (code, format!("{out}{err}"), dir.join("target/fatkit/quant"))
}

#[test]
fn a_package_declares_a_sources_targets_in_its_metadata() {
    if toolchain().is_none() {
        return;
    }
    let (code, log, _) = build_package("file-targets-undeclared", "");
    assert_eq!(code, 1, "{log}");
    assert!(
        log.contains("help: ")
            && log.contains("async_copy.cu compiled for sm_80 sm_90 and failed for sm_75")
            && log.contains(
                "[package.metadata.fatkit.files] \"async_copy.cu\" = { targets = \"sm_80+\" }"
            ),
        "{log}"
    );
    let (code, log, out) = build_package(
        "file-targets-declared",
        "\n[package.metadata.fatkit.files]\n\"kernels/async_*.cu\" = { targets = \"sm_80+\" }\n",
    );
    assert_eq!(code, 0, "{log}");
    let out = out.display().to_string();
    let (code, text, err) = fatkit_in_process(&["audit", &out, "--require", "sm_75,sm_80,sm_90"]);
    assert_eq!(code, 0, "{text}{err}");
    let (code, text, err) = fatkit_in_process(&["audit", &out, "--gpu", "T4"]);
    assert_eq!(code, 0, "{text}{err}");
    assert!(
        text.contains(": yes on T4 (CC 7.5): 1 of 2 kernels in 2 libraries run; 1 is built for other GPUs only (below)\n")
            && text.contains("    1 kernel declared by their crate for other targets\n      declared: copy_async\n"),
        "{text}"
    );

    // `sources` written as a table (where the targets of some sources would go) is told where.
    let dir = temp_dir("file-targets-as-sources");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/lib.rs"), "").unwrap();
    let manifest = dir.join("Cargo.toml");
    std::fs::write(
        &manifest,
        "[package]\nname = \"quant\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[package.metadata.fatkit.sources]\n\"async_*.cu\" = { targets = \"sm_80+\" }\n\n[workspace]\n",
    )
    .unwrap();
    let (code, out, err) = fatkit_in_process(&[
        "build-kernels",
        "--offline",
        "--manifest-path",
        manifest.to_str().unwrap(),
    ]);
    let log = format!("{out}{err}");
    assert_eq!(code, 2, "{log}");
    assert!(log.contains("[package.metadata.fatkit.files]"), "{log}");
}

/// The README's migration from bindgen_cuda or cudaforge, its `// after:` block as written, in
/// a crate outside the repository whose Rust code calls the launchers and includes no
/// generated module: the binary answers with the declarations its library carries.
#[test]
fn readme_migration() {
    if toolchain().is_none() {
        return;
    }
    let readme = std::fs::read_to_string(fatkit_tests::repo_root().join("README.md")).unwrap();
    let after = readme
        .split_once("// after: every target of `full`")
        .and_then(|(_, rest)| rest.split_once('\n'))
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(block, _)| block)
        .expect("README.md: the migration's `// after:` block");
    let build = format!("fn main() {{\n{after}}}\n");
    let dir = crate::build::build_rs_api::throwaway_crate(
        "readme-migration",
        "",
        &[
            ("build.rs", &build),
            ("kernels/rotary.cu", PLAIN_CU),
            ("kernels/marlin.cu", ASYNC_CU),
            ("src/main.rs", LINKING_MAIN),
        ],
    );
    let target = crate::build::build_rs_api::target_dir();
    let (ok, text) = crate::build::build_rs_api::try_cargo_build(&dir, &target);
    assert!(ok, "{text}");
    let exe = target.join("debug/readme-migration").display().to_string();
    let (code, out, err) = fatkit_in_process(&["audit", &exe, "--require", "full"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = fatkit_in_process(&["audit", &exe, "--gpu", "T4"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(": yes on T4 (CC 7.5): ") && out.contains("copy_async"),
        "the declared kernel is named:\n{out}"
    );
    for gpu in ["A100", "RTX 5090"] {
        let (code, out, err) = fatkit_in_process(&["audit", &exe, "--gpu", gpu]);
        assert_eq!(code, 0, "{gpu}: {out}{err}");
    }
    audit_states_the_floor_and_the_declared_exception(&exe);
}

/// `audit` of a binary that links the CUDA runtime and holds a kernel declared for sm_80+: the
/// per-GPU driver is the one floor (never below the runtime's), and "runs on" names the kernel
/// its crate declares for fewer GPUs rather than saying "every kernel".
fn audit_states_the_floor_and_the_declared_exception(exe: &str) {
    let cuda = |line: &str| -> Option<(u32, u32)> {
        let (_, v) = line.rsplit_once("(CUDA ")?;
        let (major, minor) = v.split_once(')')?.0.split_once('.')?;
        Some((major.parse().ok()?, minor.parse().ok()?))
    };
    let (code, out, err) = fatkit_in_process(&["audit", exe, "--gpu", "V100"]);
    assert_eq!(code, 0, "{out}{err}");
    let line = |start: &str| out.lines().find(|l| l.trim_start().starts_with(start));
    let runtime = line("runtime:").and_then(cuda);
    let on = line("on V100:").and_then(cuda);
    assert!(on.is_some(), "the per-GPU line names a driver:\n{out}");
    assert!(on >= runtime, "never below the runtime linked:\n{out}");
    let (code, out, err) = fatkit_in_process(&["audit", exe, "--require", "full"]);
    assert_eq!(code, 0, "{out}{err}");
    let runs_on = out.lines().find(|l| l.trim_start().starts_with("runs on:"));
    assert!(
        runs_on.is_some_and(|l| l.contains(" 7.5 ")
            && l.contains("(every kernel but 1 its crate declares for fewer GPUs: copy_async)")),
        "the declared kernel is the exception:\n{out}"
    );
}
