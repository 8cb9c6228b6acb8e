//! Issue 54, run-time compilers: Triton compiles every kernel on the user's machine with the
//! `ptxas` it bundles (`ptxas` below the CC its release names, `ptxas-blackwell` from it), for
//! the exact GPU (`sm_121a`). A `ptxas` whose targets lack the GPU's stops the package
//! (triton-lang/triton#8539: triton 3.5.0 on a DGX Spark, "Value 'sm_121a' is not defined for
//! option 'gpu-name'"); NVRTC and nvJitLink are named with what they compile. Each compiler is
//! read from its bytes, never run (docs/ARCH_RULES.md section 12).
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::Path;

use fatkit_tests::{cli, temp_dir, toolchain};

/// The strings `ptxas` 12.8.93 holds, as triton 3.5.0's wheel has them: its version, and its
/// table of `--gpu-name` values (read from the wheel's binary; its `--help` on an H200 lists
/// the same).
fn ptxas_12_8() -> Vec<u8> {
    let mut b = b"....Cuda compilation tools, release %d.%d\0".to_vec();
    b.extend_from_slice(b"Cuda compilation tools, release 12.8, V12.8.93\nBuild cuda_12.8.r12.8/compiler.35583870_0\0");
    for t in [
        "50", "52", "53", "60", "61", "62", "70", "72", "75", "80", "86", "87", "89", "90", "90a",
        "100", "100a", "101", "101a", "120", "120a",
    ] {
        b.extend_from_slice(format!("sm_{t}\0compute_{t}\0").as_bytes());
    }
    b
}

/// A site-packages holding triton `version` with the given `ptxas` and `ptxas-blackwell`
/// bytes, and its RECORD.
fn triton(dir: &Path, version: &str, ptxas: &[u8], blackwell: Option<&[u8]>) {
    let bin = dir.join("triton/backends/nvidia/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("ptxas"), ptxas).unwrap();
    let mut record = "triton/backends/nvidia/bin/ptxas,,\n".to_owned();
    if let Some(b) = blackwell {
        std::fs::write(bin.join("ptxas-blackwell"), b).unwrap();
        record.push_str("triton/backends/nvidia/bin/ptxas-blackwell,,\n");
    }
    let info = dir.join(format!("triton-{version}.dist-info"));
    std::fs::create_dir_all(&info).unwrap();
    std::fs::write(info.join("RECORD"), record).unwrap();
}

#[test]
fn tritons_ptxas_decides_where_it_compiles() {
    // triton 3.5.0: one ptxas, CUDA 12.8.
    let old = temp_dir("compilers-triton-3.5");
    triton(&old, "3.5.0", &ptxas_12_8(), None);
    let (code, text) = cli::audit_on(&old, "GB10", false).text();
    assert_eq!(code, 1, "{text}");
    let first = text.lines().next().unwrap();
    assert!(first.contains("NO on GB10"), "{text}");
    assert!(
        first.contains(
            "its ptxas of CUDA 12.8 (triton/backends/nvidia/bin/ptxas) cannot compile sm_121a"
        ),
        "{text}"
    );
    assert!(
        text.contains("fix: point TRITON_PTXAS_PATH at a ptxas of CUDA 12.9 or newer")
            && text.contains("or install triton 3.6.0 or newer"),
        "{text}"
    );
    // The same on a T4 compiles: sm_75, no `a`.
    let (code, text) = cli::audit_on(&old, "T4", false).text();
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("compiles at run time on T4"), "{text}");
    assert!(
        text.contains("ptxas of CUDA 12.8 (triton/backends/nvidia/bin/ptxas): compiles sm_75"),
        "{text}"
    );

    // triton 3.6.0: ptxas-blackwell from CC 10.0; here the provisioned CUDA's own ptxas (a
    // real binary, never run): it compiles sm_121a and sm_110a, and not Rubin's sm_107a.
    let Some(tc) = toolchain() else { return };
    let real = std::fs::read(tc.nvcc().with_file_name("ptxas")).unwrap();
    let new = temp_dir("compilers-triton-3.6");
    triton(&new, "3.6.0", &ptxas_12_8(), Some(&real));
    let (code, text) = cli::audit_on(&new, "GB10", false).text();
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("ptxas-blackwell of CUDA 13.2"), "{text}");
    assert!(text.contains("compiles sm_121a"), "{text}");
    let (code, text) = cli::audit_on(&new, "Rubin", true).out();
    assert_eq!(code, 1, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let whole = &v["files"][0]["answer"]["on"][0];
    assert_eq!(whole["verdict"], "no", "{text}");
    assert_eq!(whole["blocker"]["kind"], "compiler", "{text}");
    assert_eq!(whole["blocker"]["compiler"]["target"], "sm_107a", "{text}");
    assert_eq!(
        whole["blocker"]["compiler"]["kind"], "triton_ptxas_blackwell",
        "{text}"
    );
    assert_eq!(whole["fixes"][0]["fix"], "compiler", "{text}");
    assert_eq!(whole["fixes"][0]["triton"], "3.9.0", "{text}");
    // Below CC 10.0, 3.6.0 runs its ptxas 12.8: an H100 is compiled for by that one.
    let (_, text) = cli::audit_on(&new, "H100", true).out();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let compilers = v["files"][0]["answer"]["distributions"][0]["on"][0]["compilers"]
        .as_array()
        .unwrap()
        .clone();
    let chosen: Vec<&str> = compilers
        .iter()
        .filter(|c| c["chosen"] == true)
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    assert_eq!(chosen, ["triton_ptxas"], "{text}");
}

/// Beside a package that runs, a Triton that cannot compile for the GPU makes the environment
/// PARTLY, named in the headline; NVRTC is named with what it compiles, and decides nothing.
#[test]
fn an_environment_with_a_triton_that_cannot_compile_is_partly() {
    let Some(tc) = toolchain() else { return };
    let env = temp_dir("compilers-env");
    triton(&env, "3.5.0", &ptxas_12_8(), None);
    let lib = env.join("kernels/lib");
    std::fs::create_dir_all(&lib).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gpu/sm_120.fatbin");
    std::fs::copy(fixtures, lib.join("k.fatbin")).unwrap();
    let info = env.join("kernels-1.0.dist-info");
    std::fs::create_dir_all(&info).unwrap();
    std::fs::write(info.join("RECORD"), "kernels/lib/k.fatbin,,\n").unwrap();
    // NVRTC: a real one's bytes, where the toolchain has one.
    let nvrtc = tc
        .nvcc()
        .parent()
        .and_then(Path::parent)
        .map(|cu| cu.join("lib"))
        .and_then(|l| std::fs::read_dir(l).ok())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libnvvm.so"))
        });
    if let Some(nvvm) = &nvrtc {
        let to = env.join("nvidia/cu13/lib");
        std::fs::create_dir_all(&to).unwrap();
        std::fs::copy(nvvm, to.join(nvvm.file_name().unwrap())).unwrap();
    }
    let (code, text) = cli::audit_on(&env, "GB10", false).text();
    assert_eq!(code, 1, "{text}");
    let first = text.lines().next().unwrap();
    assert!(first.contains("PARTLY on GB10"), "{text}");
    assert!(
        first.contains("triton 3.5.0 cannot compile its kernels for it"),
        "{text}"
    );
    assert!(text.contains("triton 3.5.0: NO"), "{text}");
    assert!(text.contains("kernels 1.0: yes"), "{text}");
    if nvrtc.is_some() {
        assert!(
            text.contains("run-time compiler: NVVM of CUDA 13.2"),
            "{text}"
        );
    }
}

/// A file named like a compiler with nothing readable in it: named, its targets unknown, and
/// the package UNKNOWN there; a name that only looks like one is not read as one.
#[test]
fn an_unreadable_compiler_decides_nothing() {
    let dir = temp_dir("compilers-unreadable");
    triton(&dir, "3.5.0", b"not a ptxas", None);
    std::fs::write(
        dir.join("triton/ptxas.md"),
        "Cuda compilation tools, release 12.8, V12.8.93",
    )
    .unwrap();
    let (code, text) = cli::audit_on(&dir, "GB10", false).text();
    assert_eq!(code, 2, "{text}");
    assert!(
        text.lines().next().unwrap().contains("UNKNOWN on GB10"),
        "{text}"
    );
    assert!(text.contains("ptxas of an unread release (triton/backends/nvidia/bin/ptxas): asked for sm_121a; its targets could not be read"), "{text}");
    assert!(!text.contains("ptxas.md"), "{text}");
}

/// A program that compiles CUDA C++ it holds with NVRTC (issue 54: cudarc's and CuPy's
/// users): one linking the provisioned NVRTC 12.9 (`DT_NEEDED libnvrtc.so.12`), one loading it
/// by name (`dlopen`). Each compiles at run time, its kernels named from the source text, and
/// the NVRTC it uses judged by its major: CUDA 12 compiles sm_90, no CUDA 12 NVRTC compiles
/// Rubin's sm_107.
#[test]
fn a_program_compiling_cuda_c_with_nvrtc_compiles_at_run_time() {
    if !fatkit_tests::nvrtc_available() {
        return;
    }
    let Ok(Some(fatkit_toolchain::Toolchain::Nvrtc(nvrtc))) = fatkit_toolchain::provisioned_of(
        fatkit_arch::Compiler::Nvrtc,
        fatkit_toolchain::DEFAULT_NVRTC,
    ) else {
        panic!("NVRTC is provisioned but not found");
    };
    let dir = temp_dir("compilers-nvrtc-program");
    let source = r#"static const char *src = "extern \"C\" __global__ void saxpy(float a, float *x, float *y, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = a * x[i] + y[i];\n}\n__global__ void __launch_bounds__(128) scale(float *x) { x[threadIdx.x] *= 2.0f; }\n";"#;
    let linked = format!(
        "#include <stdio.h>\n#include <nvrtc.h>\n{source}\nint main(void) {{ nvrtcProgram p; nvrtcCreateProgram(&p, src, \"k.cu\", 0, NULL, NULL); printf(\"%p\\n\", (void *)p); return 0; }}\n"
    );
    let loaded = format!(
        "#include <dlfcn.h>\n#include <stdio.h>\n{source}\nint main(void) {{ void *h = dlopen(\"libnvrtc.so.12\", RTLD_NOW); printf(\"%p %s\\n\", h, src); return 0; }}\n"
    );
    std::fs::write(dir.join("linked.c"), linked).unwrap();
    std::fs::write(dir.join("loaded.c"), loaded).unwrap();
    let include = nvrtc.library.parent().unwrap().with_file_name("include");
    let lib = nvrtc.library.parent().unwrap();
    let gcc = |args: &[&str]| {
        let out = std::process::Command::new("gcc")
            .current_dir(&dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let (i, l) = (
        format!("-I{}", include.display()),
        format!("-L{}", lib.display()),
    );
    gcc(&["linked.c", &i, &l, "-l:libnvrtc.so.12", "-o", "linked"]);
    gcc(&["loaded.c", "-ldl", "-o", "loaded"]);
    for (program, how) in [
        ("linked", "DT_NEEDED libnvrtc.so.12"),
        ("loaded", "loads libnvrtc.so.12"),
    ] {
        let file = dir.join(program);
        let (code, text) = cli::audit_on(&file, "H100", false).text();
        assert_eq!(code, 0, "{text}");
        assert!(text.contains("compiles at run time on H100"), "{text}");
        assert!(
            text.contains(&format!("compiles 2 kernels' CUDA C++ at run time ({how}): an NVRTC of CUDA 12.0 or later compiles sm_90")),
            "{text}"
        );
        let (_, json) = cli::audit_on(&file, "Rubin", true).out();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let found = &v["files"][0]["report"]["nvrtc_sources"][0];
        assert_eq!(
            found["kernels"],
            serde_json::json!(["saxpy", "scale"]),
            "{json}"
        );
        let on = &v["files"][0]["answer"]["distributions"][0]["on"][0]["nvrtc_sources"][0];
        assert_eq!(on["from"], serde_json::Value::Null, "{json}");
        assert_eq!(on["target"], "sm_107", "{json}");
    }
}

/// PyTorch hands Triton its own ptxas (its inductor sets `TRITON_PTXAS_PATH` to
/// `torch/bin/ptxas`; an H200 ran torch's 13.0 in place of triton 3.6.0's 12.8): beside a torch
/// that ships one, triton 3.5.0 on a GB10 compiles with it.
#[test]
fn pytorchs_ptxas_stands_in_for_tritons() {
    let Some(tc) = toolchain() else { return };
    let env = temp_dir("compilers-torch-ptxas");
    triton(&env, "3.5.0", &ptxas_12_8(), None);
    let bin = env.join("torch/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(tc.nvcc().with_file_name("ptxas"), bin.join("ptxas")).unwrap();
    let info = env.join("torch-2.11.0.dist-info");
    std::fs::create_dir_all(&info).unwrap();
    std::fs::write(info.join("RECORD"), "torch/bin/ptxas,,\n").unwrap();
    let (code, text) = cli::audit_on(&env, "GB10", false).text();
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("run-time compiler: ptxas of CUDA 13.2 (torch/bin/ptxas): compiles sm_121a"),
        "{text}"
    );
}
