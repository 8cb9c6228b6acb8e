//! Toolchain tier: `Build::compile_library` and `cuda_cc`, host code into a static library
//! whose one registered fatbin is the module's: the compilers it picks, its host objects,
//! and the failure it names (device, host code, a kernel the images lack).
#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::Path;
use std::process::Command;

use fatkit_tests::{temp_dir, toolchain};

use crate::build::build_rs_api::offline_build;

/// `cuda_cc` compiles each file with one nvcc, so a profile no single nvcc builds (sm_70 and
/// sm_120: CUDA 13 has no sm_70, CUDA 12 before 12.8 no sm_120) is refused naming the
/// compilers found and `compile_library`, which builds it; where an nvcc of CUDA 12.8 or 12.9
/// is found, it builds both and is the one chosen.
#[test]
fn cuda_cc_of_a_profile_no_single_nvcc_builds_names_compile_library() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("cuda-cc-split");
    let profile = dir.join("split.toml");
    std::fs::write(&profile, "targets = [\"sm_70\", \"sm_120\"]\nptx = []\n").unwrap();
    match fatkit_build::cuda_cc(&profile.display().to_string()) {
        Err(e) => {
            let e = e.to_string();
            assert!(
                e.starts_with("no single nvcc found builds every target of profile split (sm_70 sm_120); cc compiles each file with one nvcc (found: ")
                    && e.contains("compile_library(name)"),
                "{e}"
            );
        }
        Ok(build) => {
            let nvcc = build.get_compiler();
            let version = Command::new(nvcc.path()).arg("--version").output().unwrap();
            let text = String::from_utf8_lossy(&version.stdout).into_owned();
            assert!(
                text.contains("release 12.8") || text.contains("release 12.9"),
                "{text}"
            );
        }
    }
}

/// A host-code library honours a profile's pin, and Debian's nvcc 11.8 gets the g++ it
/// accepts (g++-11, not the default g++ 12 it refuses): its sm_70 is 11.8's, the rest and the
/// host object CUDA 13's.
#[test]
fn a_host_code_library_honours_a_pin_to_nvcc_11_8_with_its_host_compiler() {
    if toolchain().is_none() || fatkit_tests::debian_nvcc().is_none() {
        return;
    }
    let dir = temp_dir("host-lib-pin-11-8");
    std::fs::write(
        dir.join("t.toml"),
        "targets = [\"sm_70\", \"sm_80\"]\nptx = []\n\n[toolchain]\nsm_70 = \"nvcc 11.8\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("p.cu"),
        "extern \"C\" __global__ void k(float* x) { x[0] = 3.0f; }\nextern \"C\" void run_k(float* x) { k<<<1, 1>>>(x); }\n",
    )
    .unwrap();
    let lib = offline_build(&dir, &["p.cu"])
        .try_compile_library("pinned")
        .unwrap_or_else(|e| panic!("{e}"));
    let routes: Vec<(String, String)> = lib
        .report
        .routes
        .iter()
        .map(|r| {
            (
                r.targets.to_string(),
                format!("{} {}", r.version, r.host.clone().unwrap_or_default()),
            )
        })
        .collect();
    let pinned = routes
        .iter()
        .find(|(t, _)| t == "sm_70")
        .unwrap_or_else(|| panic!("{routes:?}"));
    assert!(
        pinned.1.starts_with("11.8 ") && pinned.1.contains("g++-11"),
        "{routes:?}"
    );
    assert!(
        lib.host_compiler.starts_with("nvcc 13."),
        "{}",
        lib.host_compiler
    );
    assert!(lib.path.is_file());
}

/// A library's host objects compile among its device jobs; when a device job fails, that
/// failure is the error (the host compile of the same source fails too, and stops mattering).
#[test]
fn a_library_whose_device_compile_fails_reports_the_device_failure() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("host-lib-device-error");
    std::fs::write(dir.join("t.toml"), "targets = [\"sm_80\"]\nptx = []\n").unwrap();
    std::fs::write(
        dir.join("bad.cu"),
        "extern \"C\" __global__ void k(float* x) {\n#ifdef __CUDA_ARCH__\n  x[0] = ;\n#endif\n}\nextern \"C\" void run_k(float* x) { k<<<1, 1>>>(x); }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("good.cu"),
        "extern \"C\" __global__ void g(float* x) { x[0] = 1.0f; }\nextern \"C\" void run_g(float* x) { g<<<1, 1>>>(x); }\n",
    )
    .unwrap();
    let err = offline_build(&dir, &["bad.cu", "good.cu"])
        .try_compile_library("mixed")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("1 compile(s) failed; the first:\n") && err.contains("bad.cu:3: sm_80"),
        "{err}"
    );
    assert!(!err.contains("host compile"), "{err}");
    assert!(!dir.join("out/libmixed.a").exists());
}

/// A library's host object is the nvcc call that also builds its module's images of one
/// architecture (compute_80 and sm_80 here): one compiler call in all, whose images are the
/// bytes nvcc's own `--fatbin` of that architecture makes. With the images cached, the host
/// object is still a call of its own.
#[test]
fn a_host_object_builds_its_modules_images_of_one_architecture_on_the_way() {
    let Some(tc) = toolchain() else {
        return;
    };
    let dir = temp_dir("host-lib-shared-call");
    std::fs::write(
        dir.join("t.toml"),
        "targets = [\"sm_80\"]\nptx = [\"compute_80\"]\n",
    )
    .unwrap();
    // A line of its own per run: a cache miss for both targets.
    let nonce = format!("{:?}", std::time::SystemTime::now());
    std::fs::write(
        dir.join("k.cu"),
        format!("// {nonce}\nextern \"C\" __global__ void k(float* x) {{ x[0] = 2.0f; }}\nextern \"C\" void run_k(float* x) {{ k<<<1, 1>>>(x); }}\n"),
    )
    .unwrap();
    let lib = offline_build(&dir, &["k.cu"])
        .try_compile_library("shared")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((lib.report.jobs_run, lib.report.compiler_calls), (2, 1));
    let ours = std::fs::read(dir.join("out/k.fatbin")).unwrap();
    let theirs = dir.join("theirs.fatbin");
    let status = std::process::Command::new(tc.nvcc())
        .current_dir(&dir)
        .args([
            "--fatbin",
            "-gencode",
            "arch=compute_80,code=[sm_80,compute_80]",
        ])
        .args(["-Xcicc", "--orig_src_path_name=k.cu", "-o"])
        .arg(&theirs)
        .arg("k.cu")
        .status()
        .unwrap();
    assert!(status.success());
    let theirs = std::fs::read(&theirs).unwrap();
    let limits = fatkit_fatbin::Limits::default();
    let images = |bytes: &[u8]| -> Vec<(Option<fatkit_arch::Target>, Vec<u8>)> {
        let mut all: Vec<_> = fatkit_fatbin::inspect::extract_all("f", bytes, &limits)
            .into_iter()
            .map(|e| (e.target, e.bytes.unwrap()))
            .collect();
        all.sort();
        all
    };
    let (ours, theirs) = (images(&ours), images(&theirs));
    assert_eq!(ours.len(), 2);
    assert!(
        ours == theirs,
        "the host call's images differ from nvcc --fatbin's"
    );
    let again = offline_build(&dir, &["k.cu"])
        .try_compile_library("shared")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((again.report.jobs_run, again.report.compiler_calls), (0, 1));
}

/// Host code that fails to compile while the device code compiles: the host compile's
/// failure is the error, naming the line and the host compile.
#[test]
fn a_library_whose_host_code_fails_names_the_host_compile() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("host-lib-host-error");
    std::fs::write(dir.join("t.toml"), "targets = [\"sm_80\"]\nptx = []\n").unwrap();
    std::fs::write(
        dir.join("host_bad.cu"),
        "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }\n#ifndef __CUDA_ARCH__\nstatic int broken = ;\n#endif\nextern \"C\" void run_k(float* x) { k<<<1, 1>>>(x); }\n",
    )
    .unwrap();
    let err = offline_build(&dir, &["host_bad.cu"])
        .try_compile_library("hostbad")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("1 compile(s) failed; the first:\n")
            && err.contains("host_bad.cu:3: compute_80: nvcc ")
            && err.contains("(host code) failed"),
        "{err}"
    );
    assert!(!dir.join("out/libhostbad.a").exists());
}

/// A source given through a symbolic link makes the module of the file it resolves to; its
/// host object, compiled among the device jobs, is named the same way and meets it.
#[test]
fn a_library_source_given_through_a_symbolic_link_builds() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("host-lib-symlink");
    std::fs::write(dir.join("t.toml"), "targets = [\"sm_80\"]\nptx = []\n").unwrap();
    std::fs::write(
        dir.join("real.cu"),
        "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }\nextern \"C\" void run_k(float* x) { k<<<1, 1>>>(x); }\n",
    )
    .unwrap();
    std::os::unix::fs::symlink("real.cu", dir.join("link.cu")).unwrap();
    let lib = offline_build(&dir, &["link.cu"])
        .try_compile_library("linked")
        .unwrap_or_else(|e| panic!("{e}"));
    let modules: Vec<&str> = lib
        .report
        .modules
        .iter()
        .map(|m| m.module.as_str())
        .collect();
    assert_eq!(modules, ["real"]);
    assert!(lib.path.is_file() && dir.join("out/fatkit-lib-linked/real.o").is_file());
}

/// A host-code library whose kernels NVRTC builds (pinned here): a template kernel that only a
/// host-side launch instantiates is in no image, and the build names it instead of writing a
/// library whose launch would fail on every GPU; instantiated explicitly, it is built.
#[test]
fn a_host_code_library_names_a_kernel_its_images_lack() {
    if toolchain().is_none() || !fatkit_tests::nvrtc_available() {
        return;
    }
    let dir = temp_dir("host-lib-template");
    std::fs::write(
        dir.join("t.toml"),
        "targets = [\"sm_75\"]\nptx = []\n\n[toolchain]\nsm_75 = \"nvrtc 12.9\"\n",
    )
    .unwrap();
    let source = |explicit: &str| {
        format!(
            "extern \"C\" __global__ void zero(float* x) {{ x[threadIdx.x] = 0.0f; }}\ntemplate <typename T> __global__ void fill(T* x, T v) {{ x[threadIdx.x] = v; }}\n{explicit}\n#ifndef __CUDACC_RTC__\nextern \"C\" void run_fill(float* x) {{ fill<float><<<1, 32>>>(x, 1.0f); }}\n#endif\n"
        )
    };
    let build = |dir: &Path| offline_build(dir, &["fill.cu"]).try_compile_library("fill");
    std::fs::write(dir.join("fill.cu"), source("")).unwrap();
    let err = build(&dir).unwrap_err().to_string();
    assert!(
        err.contains("/fill.cu: the host code registers kernel fill<float>, which none of the module's images holds, so its launch would fail with cudaErrorInvalidDeviceFunction on every GPU; the images hold zero; fix: "),
        "{err}"
    );
    assert!(err.contains("instantiate it explicitly"), "{err}");
    assert!(!dir.join("out/libfill.a").exists());

    std::fs::write(
        dir.join("fill.cu"),
        source("template __global__ void fill<float>(float*, float);"),
    )
    .unwrap();
    let lib = build(&dir).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(lib.path, dir.join("out/libfill.a"));
    assert!(
        lib.link_lines
            .contains(&"cargo:rustc-link-lib=static=cudart_static".to_owned()),
        "{:?}",
        lib.link_lines
    );
    // The system's shared runtime instead: `libcudart.so`, or the versioned file by name.
    let shared = offline_build(&dir, &["fill.cu"])
        .cudart(fatkit_build::host::Cudart::Shared)
        .try_compile_library("fill")
        .unwrap_or_else(|e| panic!("{e}"));
    let runtime = shared
        .link_lines
        .iter()
        .find(|l| l.contains("cudart"))
        .unwrap();
    assert!(
        runtime == "cargo:rustc-link-lib=dylib=cudart"
            || *runtime
                == format!(
                    "cargo:rustc-link-lib=dylib:+verbatim=libcudart.so.{}",
                    shared.runtime.major
                ),
        "{runtime}"
    );
    let data = std::fs::read(&lib.path).unwrap();
    let report = fatkit_fatbin::inspect::inspect(
        "libfill.a",
        &data,
        fatkit_fatbin::inspect::Depth::Kernels,
        &fatkit_fatbin::Limits::default(),
    );
    let kernels = fatkit_audit::coverage::kernels(&report);
    let names: Vec<&str> = kernels.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["_Z4fillIfEvPT_S0_", "zero"]);
    for k in &kernels {
        let targets: Vec<String> = k.targets().iter().map(|t| t.to_string()).collect();
        assert_eq!(targets, ["sm_75"], "{}", k.name);
    }
}

/// A host-code library for `sm_70` whose host code is not guarded, as public crates write it:
/// NVRTC cannot compile it and CUDA 13 has no sm_70, so unless an nvcc of CUDA 12.4 or newer
/// is found, Debian's nvcc 12.4 is provisioned (docs/BUILDS.md) and builds sm_70; the library
/// holds the kernel for both targets.
#[test]
fn a_host_code_library_for_sm_70_is_built_by_an_nvcc_of_cuda_12() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("host-lib-sm70");
    std::fs::write(
        dir.join("t.toml"),
        "targets = [\"sm_70\", \"sm_80\"]\nptx = []\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("scale.cu"),
        "#include <cuda_bf16.h>\nextern \"C\" __global__ void scale(__nv_bfloat16* x) { x[threadIdx.x] = __ldg(x + threadIdx.x); }\nextern \"C\" void run_scale(__nv_bfloat16* x) { scale<<<1, 32>>>(x); }\n",
    )
    .unwrap();
    let lib = fatkit_build::Build::new()
        .profile(dir.join("t.toml").display().to_string())
        .file(dir.join("scale.cu"))
        .out_dir(dir.join("out"))
        .cargo_metadata(false)
        .try_compile_library("scale")
        .unwrap_or_else(|e| panic!("{e}"));
    let sm70 = lib
        .report
        .routes
        .iter()
        .find(|r| r.targets.iter().any(|t| t.to_string() == "sm_70"))
        .expect("a route for sm_70");
    assert_eq!(sm70.compiler, fatkit_arch::Compiler::Nvcc, "{sm70:?}");
    assert!(
        sm70.version >= fatkit_arch::toolkit::CudaVersion::new(12, 4),
        "{sm70:?}"
    );
    let data = std::fs::read(&lib.path).unwrap();
    let report = fatkit_fatbin::inspect::inspect(
        "libscale.a",
        &data,
        fatkit_fatbin::inspect::Depth::Kernels,
        &fatkit_fatbin::Limits::default(),
    );
    let kernels = fatkit_audit::coverage::kernels(&report);
    let found: Vec<(String, Vec<String>)> = kernels
        .iter()
        .map(|k| {
            (
                k.name.clone(),
                k.targets().iter().map(|t| t.to_string()).collect(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [(
            "scale".to_owned(),
            vec!["sm_70".to_owned(), "sm_80".to_owned()]
        )]
    );
}
