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

pub(crate) fn try_cargo_build(dir: &Path, target: &Path) -> (bool, String) {
    output(
        Command::new(cargo())
            .args(["build", "-v", "--offline"])
            .current_dir(dir)
            .env("CARGO_TARGET_DIR", target)
            .env_remove("RUSTFLAGS"),
    )
}

/// A throwaway crate whose build.rs uses fatkit-build (with `features`), holding `files` (their
/// directories made), the workspace's lock file (the same versions, all in the local registry:
/// --offline) and a one-target profile `t.toml` (which `files` may replace).
pub(crate) fn throwaway_crate(name: &str, features: &str, files: &[(&str, &str)]) -> PathBuf {
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
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

/// Outside the repository's target dir, whose lock the running `cargo test` may hold.
pub(crate) fn target_dir() -> PathBuf {
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

/// A `Build` of `files` in `dir` with the profile `dir/t.toml`, into `dir/out`, offline and
/// without cargo's lines: what the tests calling the API directly share.
pub(crate) fn offline_build(dir: &Path, files: &[&str]) -> fatkit_build::Build {
    let mut build = fatkit_build::Build::new();
    build
        .profile(dir.join("t.toml").display().to_string())
        .out_dir(dir.join("out"))
        .cargo_metadata(false)
        .offline(true);
    for f in files {
        build.file(dir.join(f));
    }
    build
}

/// `compile("saxpy")` over `saxpy.cu`: the index would overwrite the module's own `saxpy.rs`
/// (and the next build would refuse the file as changed). Refused before anything is built.
#[test]
fn an_index_named_like_its_module_is_refused_before_building() {
    let dir = temp_dir("index-named-like-module");
    std::fs::write(
        dir.join("saxpy.cu"),
        "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }\n",
    )
    .unwrap();
    let err = fatkit_build::Build::new()
        .profile("full")
        .file(dir.join("saxpy.cu"))
        .out_dir(dir.join("out"))
        .cargo_metadata(false)
        .offline(true)
        .try_compile("saxpy")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("the index saxpy.rs would replace module saxpy's own saxpy.rs (from ")
            && err.ends_with("saxpy.cu); give the index another name (such as \"kernels\")"),
        "{err}"
    );
    assert!(!dir.join("out").exists());
}

/// A source that compiles for some targets of the profile and not others (an architecture
/// guard it lacks) gets the ways out after the compiler's error.
#[test]
fn a_source_failing_for_some_targets_only_is_told_the_ways_out() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("fails-some-targets");
    std::fs::write(
        dir.join("t.toml"),
        "targets = [\"sm_75\", \"sm_80\"]\nptx = []\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("gated.cu"),
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800\n#error needs sm_80\n#endif\nextern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }\n",
    )
    .unwrap();
    let err = offline_build(&dir, &["gated.cu"])
        .try_compile("kernels")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("1 compile(s) failed; the first:\n"),
        "{err}"
    );
    assert!(
        err.contains("#error needs sm_80") || err.contains("needs sm_80"),
        "{err}"
    );
    let log = dir.join("out/kernels.fatkit-errors.log");
    assert!(
        err.contains(&format!("\nevery failure in full: {}\n", log.display()))
            || err.contains("/out/kernels.fatkit-errors.log\n"),
        "{err}"
    );
    let full = std::fs::read_to_string(&log).unwrap();
    assert!(full.contains("needs sm_80"), "{full}");
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("fix: ")
            && last.contains("gated.cu compiled for sm_80 and failed for sm_75; ")
            && last.contains(".file_targets(\"gated.cu\", \"sm_80+\")")
            && last.ends_with(
                "or build sm_75 with another toolkit (pin it in the profile's [toolchain] table)"
            ),
        "{err}"
    );
}

/// A crate that passes `--verbose` to nvcc (as mistralrs-quant does) gets nvcc's own error
/// in the failure's first line, never the echo of a command (`#$ cicc ...`, which mentions
/// `--display_error_number`); the log keeps the whole output, echoes included.
#[test]
fn a_verbose_compile_reports_the_compilers_own_error_first() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("verbose-failure");
    std::fs::write(dir.join("t.toml"), "targets = [\"sm_80\"]\nptx = []\n").unwrap();
    std::fs::write(
        dir.join("bad.cu"),
        "template <typename T>\n__global__ void dequant_kernel(T* out) {\n    out[0] = undefined_name;\n}\ntemplate __global__ void dequant_kernel<float>(float*);\n",
    )
    .unwrap();
    let err = offline_build(&dir, &["bad.cu"])
        .flag("--verbose")
        .flag("-Xptxas")
        .flag("-v")
        .try_compile("kernels")
        .unwrap_err()
        .to_string();
    let header = err.lines().nth(1).unwrap_or_default();
    assert!(
        header.contains("bad.cu:3: sm_80: nvcc ")
            && header.ends_with("): error: identifier \"undefined_name\" is undefined"),
        "{err}"
    );
    let full = std::fs::read_to_string(dir.join("out/kernels.fatkit-errors.log")).unwrap();
    assert!(full.contains("  | #$ "), "{full}");
}

/// Template instantiations of one kernel compiled out of the same targets are one finding
/// with a count, named as people read them, with a declaration keyed by the template's
/// name; that declaration (and one by a demangled instantiation) is accepted and builds.
#[test]
fn instantiations_of_one_template_are_one_finding_and_declare_by_name() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("instantiations");
    std::fs::write(
        dir.join("t.toml"),
        "targets = [\"sm_75\", \"sm_80\"]\nptx = []\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("q.cu"),
        "namespace quant {\n#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800\ntemplate <typename T, int N> __global__ void dequant_kernel(T* out) { out[N] = T(1); }\ntemplate __global__ void dequant_kernel<float, 1>(float*);\ntemplate __global__ void dequant_kernel<float, 2>(float*);\ntemplate __global__ void dequant_kernel<double, 4>(double*);\n#endif\n}\nextern \"C\" __global__ void plain(float* x) { x[0] = 1.0f; }\n",
    )
    .unwrap();
    let err = offline_build(&dir, &["q.cu"])
        .try_compile("kernels")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("1 compile(s) failed; the first:\n"),
        "{err}"
    );
    assert!(
        err.contains("kernel quant::dequant_kernel<...> (3 instantiations: quant::dequant_kernel<double, 4>, quant::dequant_kernel<float, 1> and 1 more) is in the sm_80 images but missing from sm_75"),
        "{err}"
    );
    assert!(
        err.contains("[package.metadata.fatkit.kernels] \"quant::dequant_kernel\" = { targets = \"sm_80+\" }")
            && err.contains(".kernel_targets(\"quant::dequant_kernel\", \"sm_80+\")"),
        "{err}"
    );
    assert!(!err.contains("_ZN5quant"), "{err}");
    for pattern in ["quant::dequant_kernel", "quant::dequant_kernel<*>"] {
        let report = offline_build(&dir, &["q.cu"])
            .kernel_targets(pattern, "sm_80+")
            .try_compile("kernels")
            .unwrap_or_else(|e| panic!("{pattern}: {e}"));
        assert_eq!(report.modules.len(), 1, "{pattern}");
        // The generated module names them for the runtime's messages; C names need none.
        let rust = std::fs::read_to_string(report.modules[0].rust.as_ref().unwrap()).unwrap();
        assert!(
            rust.contains("pub const NAMES: &[(&str, &str)] = &[\n")
                && rust.contains(", \"quant::dequant_kernel<double, 4>\"),\n")
                && !rust.contains("\"plain\", \"plain\""),
            "{rust}"
        );
    }
    // One instantiation declared leaves the other two to say.
    let err = offline_build(&dir, &["q.cu"])
        .kernel_targets("quant::dequant_kernel<float, 1>", "sm_80+")
        .try_compile("kernels")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("kernel quant::dequant_kernel<...> (2 instantiations: quant::dequant_kernel<double, 4>, quant::dequant_kernel<float, 2>)"),
        "{err}"
    );
}

/// Instantiations of one template that the driver would not find alike (declared for sm_80,
/// but an RTX 3090 loads the sm_86 cubin) are one finding with a count, named demangled.
#[test]
fn instantiations_the_driver_would_not_find_are_one_finding() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("instantiations-driver-view");
    std::fs::write(
        dir.join("t.toml"),
        "targets = [\"sm_80\", \"sm_86\"]\nptx = []\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("q.cu"),
        "namespace quant {\n#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ != 860\ntemplate <typename T, int N> __global__ void dequant_kernel(T* out) { out[N] = T(1); }\ntemplate __global__ void dequant_kernel<float, 1>(float*);\ntemplate __global__ void dequant_kernel<float, 2>(float*);\ntemplate __global__ void dequant_kernel<double, 4>(double*);\n#endif\n}\nextern \"C\" __global__ void plain(float* x) { x[0] = 1.0f; }\n",
    )
    .unwrap();
    let err = offline_build(&dir, &["q.cu"])
        .kernel_targets("quant::dequant_kernel", "sm_80")
        .try_compile("kernels")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("1 compile(s) failed; the first:\n"),
        "{err}"
    );
    assert!(
        err.contains("kernel quant::dequant_kernel<...> (3 instantiations: quant::dequant_kernel<double, 4>, quant::dequant_kernel<float, 1> and 1 more) (declared `targets = \"sm_80\" (quant::dequant_kernel)`) would not be found on CC 8.6")
            && err.contains("build quant::dequant_kernel<...> (3 instantiations"),
        "{err}"
    );
    assert!(!err.contains("_ZN5quant"), "{err}");
}

/// `Build::toolchain` pins a target as a profile's `[toolchain]` does, without a profile
/// file: a pin the profile cannot take is refused before any compiler is looked for, and one
/// it can builds.
#[test]
fn a_build_script_pins_a_target_to_a_toolchain() {
    let dir = temp_dir("build-toolchain-pin");
    std::fs::write(
        dir.join("t.toml"),
        "targets = [\"sm_75\", \"sm_80\"]\nptx = []\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("k.cu"),
        "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }\n",
    )
    .unwrap();
    for (target, pin, why) in [
        (
            "sm_90",
            "nvcc 13.2",
            "sm_90 is not a target of the profile; name one of sm_75 sm_80",
        ),
        ("sm_75", "gcc", "not a toolchain"),
        (
            "sm_75",
            "nvcc 9.0",
            "nvcc 9.0 cannot build sm_75; pin a toolchain that builds it, or remove the pin",
        ),
    ] {
        let err = offline_build(&dir, &["k.cu"])
            .toolchain(target, pin)
            .try_compile("kernels")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!("Build::toolchain(\"{target}\", \"{pin}\"): "))
                && err.contains(why),
            "{err}"
        );
    }
    if toolchain().is_none() {
        return;
    }
    let report = offline_build(&dir, &["k.cu"])
        .toolchain("sm_80", "nvcc 13")
        .try_compile("kernels")
        .unwrap();
    assert_eq!(report.modules.len(), 1);
}

/// Under `cargo build -j1` cargo gives the build script no jobserver token beyond its own:
/// the build's jobs run one at a time and the build ends (a worker waiting for a token that
/// never comes would hang it). A host-code library's host objects, which compile beside the
/// device jobs each holding a token, then compile on the build script's own once the device
/// jobs are done.
#[test]
fn a_build_script_under_cargo_j1_finishes() {
    if toolchain().is_none() {
        return;
    }
    let modules = "fn main() { let r = fatkit_build::Build::new().profile(\"t2.toml\").file(\"k.cu\").compile(\"kernels\"); assert_eq!(r.jobs_total, 4); }\n";
    let library = "fn main() { let l = fatkit_build::Build::new().profile(\"t2.toml\").file(\"k.cu\").compile_library(\"k\"); assert_eq!(l.report.jobs_total, 4); }\n";
    let host_code = "extern \"C\" __global__ void k(float* x) { x[0] *= 2.0f; }\nextern \"C\" void run_k(float* x) { k<<<1, 1>>>(x); }\n";
    for (name, build_rs, source, lib_rs) in [
        (
            "uses-fatkit-j1",
            modules,
            "extern \"C\" __global__ void k(float* x) { x[0] *= 2.0f; }\n",
            "include!(concat!(env!(\"OUT_DIR\"), \"/kernels.rs\"));\npub fn n() -> usize { k::FATBIN.len() }\n",
        ),
        (
            "uses-fatkit-j1-library",
            library,
            host_code,
            "extern \"C\" { pub fn run_k(x: *mut f32); }\n",
        ),
    ] {
        let dir = throwaway_crate(
            name,
            "",
            &[
                ("k.cu", source),
                (
                    "t2.toml",
                    "targets = [\"sm_80\", \"sm_86\", \"sm_90\"]\nptx = [\"compute_90\"]\n",
                ),
                ("build.rs", build_rs),
                ("src/lib.rs", lib_rs),
            ],
        );
        // A cold compile cache (so that the jobs run) sharing the provisioned toolchains.
        let cache = dir.join("cache");
        std::fs::create_dir_all(&cache).unwrap();
        std::os::unix::fs::symlink(
            fatkit_toolchain::cache_dir()
                .unwrap()
                .join("toolchains"),
            cache.join("toolchains"),
        )
        .unwrap();
        let (ok, text) = output(
            Command::new(cargo())
                .args(["build", "-v", "--offline", "-j1"])
                .current_dir(&dir)
                .env("CARGO_TARGET_DIR", target_dir())
                .env("FATKIT_CACHE_DIR", &cache)
                .env_remove("RUSTFLAGS"),
        );
        assert!(ok, "{name}: {text}");
        assert!(!text.contains("provisioning"), "{name}: {text}");
        assert!(text.contains("build-script-build"), "{name}: {text}");
        // The jobs ran (the cache was cold): their images are in it now.
        assert!(std::fs::read_dir(cache.join("build")).unwrap().count() > 0);
    }
}
