//! Issue 54, PTX wherever it is stored: text in a Rust binary (`include_str!`, as candle's
//! kernels, bindgen_cuda's `build_ptx` and cudarc's `Ptx` users ship it), in a C program's
//! string array, and in a static library's member. Each was `no device code found`; each is
//! found now, named by the section it sits in, and judged as a PTX file is.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::{Path, PathBuf};

use fatkit_tests::{cargo, fatkit_in_process, run, temp_dir, toolchain};

const KERNELS: &str = "extern \"C\" __global__ void saxpy(float a, float *x, float *y, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = a * x[i] + y[i];\n}\nextern \"C\" __global__ void scale(float *x, int n) {\n  int i = threadIdx.x;\n  if (i < n) x[i] *= 2.0f;\n}\n";

/// compute_80 PTX of [`KERNELS`], made by nvcc in `dir`.
fn ptx(dir: &Path, nvcc: &Path) -> PathBuf {
    std::fs::write(dir.join("k.cu"), KERNELS).unwrap();
    run(
        dir,
        nvcc,
        &["-ptx", "-arch=compute_80", "k.cu", "-o", "k.ptx"],
    );
    dir.join("k.ptx")
}

/// A Rust program holding the PTX as an `include_str!` constant it passes on.
fn rust_binary(dir: &Path, ptx: &Path) -> PathBuf {
    let krate = dir.join("rust");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    std::fs::copy(ptx, krate.join("src/k.ptx")).unwrap();
    std::fs::write(
        krate.join("Cargo.toml"),
        "[package]\nname = \"ptx-holder\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(
        krate.join("src/main.rs"),
        "const PTX: &str = include_str!(\"k.ptx\");\nfn main() {\n    println!(\"{}\", std::hint::black_box(PTX).len());\n}\n",
    )
    .unwrap();
    let target = krate.join("target");
    let status = std::process::Command::new(cargo())
        .args(["build", "--release", "--offline", "--quiet"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(&krate)
        .status()
        .unwrap();
    assert!(status.success());
    target.join("release/ptx-holder")
}

/// A C program holding the PTX as a string array, and a static library of its object.
fn c_program_and_library(dir: &Path, ptx: &Path) -> (PathBuf, PathBuf) {
    let text = std::fs::read_to_string(ptx).unwrap();
    let literal: String = text
        .lines()
        .map(|l| {
            format!(
                "  \"{}\\n\"\n",
                l.replace('\\', "\\\\").replace('"', "\\\"")
            )
        })
        .collect();
    std::fs::write(
        dir.join("holder.c"),
        format!("#include <stdio.h>\nconst char kernels_ptx[] =\n{literal};\nint main(void) {{ puts(kernels_ptx); return 0; }}\n"),
    )
    .unwrap();
    run(
        dir,
        Path::new("gcc"),
        &["-O2", "-c", "holder.c", "-o", "holder.o"],
    );
    run(dir, Path::new("gcc"), &["holder.o", "-o", "holder"]);
    run(dir, Path::new("ar"), &["rcs", "libholder.a", "holder.o"]);
    (dir.join("holder"), dir.join("libholder.a"))
}

#[test]
fn ptx_text_in_host_binaries_and_archives_is_found_and_judged() {
    let Some(tc) = toolchain() else { return };
    let dir = temp_dir("ptx-text");
    let ptx = ptx(&dir, &tc.nvcc());
    let rust = rust_binary(&dir, &ptx);
    let (program, library) = c_program_and_library(&dir, &ptx);
    for file in [&rust, &program, &library] {
        let shown = file.to_str().unwrap();
        let (code, out, err) = fatkit_in_process(&["audit", shown, "--gpu", "A100", "-v"]);
        assert_eq!(code, 0, "{shown}: {out}{err}");
        assert!(
            out.contains("yes, by PTX JIT on A100 (CC 8.0): 2 of 2 kernels run"),
            "{shown}: {out}"
        );
        assert!(out.contains(".rodata (PTX text)"), "{shown}: {out}");
        assert!(out.contains("compute_80"), "{shown}: {out}");
        // compute_80 PTX does not reach a CC 7.5 GPU.
        let (code, out, err) = fatkit_in_process(&["audit", shown, "--gpu", "T4"]);
        assert_eq!(code, 1, "{shown}: {out}{err}");
        assert!(out.contains("NO on T4"), "{shown}: {out}");
    }
}
