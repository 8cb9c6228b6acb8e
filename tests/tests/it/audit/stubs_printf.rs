//! Issue 53: stubs by what the code does. Kernels whose compiled-out body prints, asserts or
//! is empty are stubs, built with nvcc and checked against cuobjdump's disassembly; kernels
//! that return early under a condition, or print and work, are kernels.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::collections::BTreeMap;
use std::path::Path;

use super::stubs::{fatkit_bodies, sass_bodies};
use fatkit_tests::{fatkit_in_process, run, temp_dir, toolchain};

/// Issue 53: the stub shapes the detector missed, confirmed on an H200 (each traps with 719 or
/// 710, or does nothing, while audit counted it as running): llama.cpp's `NO_DEVICE_CODE`
/// (printf, then `__trap()`), CUTLASS's printf-and-trap and printf-and-return, `assert(false)`;
/// built with nvcc for sm_80 (compiled out) beside sm_90 (the body), as cubins and as the
/// compute_80 PTX the driver JIT-compiles. A kernel that returns early under a data-dependent
/// condition, and one that prints and stores, stay kernels. On the PTX route, `brkpt;` and an
/// empty body `{ }` are stubs too.
const PRINTF_SHAPES: &str = r#"
#include <cstdio>
#include <cassert>
#define BODY (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
static __device__ void no_device_code(const char *file, int line, const char *function, int arch, const char *list) {
    printf("%s:%d: ERROR: CUDA kernel %s has no device code compatible with CUDA arch %d. ggml-cuda.cu was compiled for: %s\n", file, line, function, arch, list);
    __trap();
}
extern "C" __global__ void llama(float *x, int n) {
#if BODY
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f;
#else
    no_device_code(__FILE__, __LINE__, __FUNCTION__, 800, "80;90");
#endif
}
extern "C" __global__ void cutlass_trap(float *x, int n) {
#if BODY
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1.0f;
#else
    printf("ERROR : Arch conditional MMA instruction used without targeting appropriate compute capability. Aborting.\n");
    __trap();
#endif
}
extern "C" __global__ void cutlass_return(float *x, int n) {
#if BODY
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] -= 1.0f;
#else
    printf("ERROR : Arch conditional MMA instruction used without targeting appropriate compute capability. Aborting.\n");
#endif
}
extern "C" __global__ void one_thread(float *x, int n) {
#if BODY
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = 4.0f;
#else
    if (threadIdx.x == 0) printf("FATAL: kernel is for sm90 and later\n");
#endif
}
extern "C" __global__ void asserts(float *x, int n) {
#if BODY
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = 3.0f;
#else
    assert(false);
#endif
}
extern "C" __global__ void early(float *x, int n) {
    if (threadIdx.x >= n) return;
#if BODY
    x[threadIdx.x] = 1.0f;
#else
    x[threadIdx.x] = 2.0f;
#endif
}
extern "C" __global__ void prints_and_works(float *x, int n) {
    printf("n = %d\n", n);
#if BODY
    x[0] = 1.0f;
#else
    x[0] = 2.0f;
#endif
}
"#;

/// The kernel table rows of `audit --all-kernels`: kernel -> its cells.
fn table_rows(text: &str) -> BTreeMap<String, Vec<String>> {
    text.lines()
        .skip_while(|l| !l.contains("coverage by compute capability"))
        .skip(2)
        .filter_map(|l| {
            let mut words = l.split_whitespace().map(str::to_owned);
            Some((words.next()?, words.collect()))
        })
        .collect()
}

/// `audit --strict --all-kernels` on `gpu`: every kernel held, and the kernel table printed.
fn strict_table(file: &Path, gpu: &str) -> (u8, String) {
    let file = file.to_str().unwrap();
    let args = ["audit", file, "--gpu", gpu, "--strict", "--all-kernels"];
    let (code, out, err) = fatkit_in_process(&args);
    (code, format!("{out}{err}"))
}

#[test]
fn printf_assert_brkpt_and_empty_bodies_are_stubs() {
    let Some(tc) = toolchain() else { return };
    let dir = temp_dir("stubs-printf");
    std::fs::write(dir.join("shapes.cu"), PRINTF_SHAPES).unwrap();
    // How each launches where its body is compiled out, as an H200 did it (docs/ARCH_RULES.md
    // section 9, 2026-11-28): `assert` traps (710), a printf of one thread returns having done
    // nothing.
    let stubs = [
        ("asserts", "traps"),
        ("cutlass_return", "returns"),
        ("cutlass_trap", "traps"),
        ("llama", "traps"),
        ("one_thread", "returns"),
    ];
    for (name, gencode) in [
        (
            "cubins.fatbin",
            ["arch=compute_80,code=sm_80", "arch=compute_90,code=sm_90"],
        ),
        (
            "ptx.fatbin",
            [
                "arch=compute_80,code=compute_80",
                "arch=compute_90,code=sm_90",
            ],
        ),
    ] {
        let args = [
            "--fatbin",
            "-gencode",
            gencode[0],
            "-gencode",
            gencode[1],
            "shapes.cu",
            "-o",
            name,
        ];
        run(&dir, &tc.nvcc(), &args);
        let file = dir.join(name);
        let (code, text) = strict_table(&file, "A100");
        let rows = table_rows(&text);
        for (k, _) in stubs {
            assert_eq!(rows[k][0], "stub", "{name} {k}: {text}");
        }
        if name == "cubins.fatbin" {
            let ours = fatkit_bodies(&file);
            for (k, how) in stubs {
                assert_eq!(ours[&("sm_80".to_owned(), k.to_owned())], how, "{k}");
            }
        }
        for k in ["early", "prints_and_works"] {
            assert_ne!(rows[k][0], "stub", "{name} {k}: {text}");
        }
        assert_eq!(code, 1, "{name}: {text}");
        assert!(text.contains("5 compiled out for it"), "{name}: {text}");
        if name == "cubins.fatbin" {
            // cuobjdump's disassembly, where it can make one, reads the same.
            let sass = std::process::Command::new(tc.cuobjdump().unwrap())
                .args(["-elf", "-sass", file.to_str().unwrap()])
                .output()
                .unwrap();
            let sass = String::from_utf8_lossy(&sass.stdout);
            let oracle = sass_bodies(&sass);
            let names = stubs.iter().map(|(k, _)| k);
            for k in names.chain(&["early", "prints_and_works"]) {
                let Some(said) = oracle.get(&("sm_80".to_owned(), (*k).to_owned())) else {
                    continue;
                };
                let ours = fatkit_bodies(&file)[&("sm_80".to_owned(), (*k).to_owned())];
                assert_eq!(ours, *said, "{k}: {sass}");
            }
        }
    }

    // PTX written by hand: `brkpt;` and an empty body, beside a compute_90 body.
    let body = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry b(.param .u64 p)\n{\n.reg .b64 %rd<2>;\nld.param.u64 %rd1, [p];\nst.global.u32 [%rd1], 1;\nret;\n}\n.visible .entry e(.param .u64 p)\n{\n.reg .b64 %rd<2>;\nld.param.u64 %rd1, [p];\nst.global.u32 [%rd1], 2;\nret;\n}\n";
    let stubbed = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry b(.param .u64 p)\n{\n\tbrkpt;\n}\n.visible .entry e(.param .u64 p)\n{ }\n";
    let file = dir.join("hand.fatbin");
    std::fs::write(
        &file,
        fatkit_fuzz::hostile::container(&[
            (1, 90, 0, body.as_bytes().to_vec(), 0),
            (1, 80, 0, stubbed.as_bytes().to_vec(), 0),
        ]),
    )
    .unwrap();
    let (code, text) = strict_table(&file, "A100");
    let rows = table_rows(&text);
    assert_eq!(
        (rows["b"][0].as_str(), rows["e"][0].as_str()),
        ("stub", "stub"),
        "{text}"
    );
    assert_eq!(code, 1, "{text}");
}
