//! Toolchain tier: the two classes the mistralrs-quant bench found in real host-code sources.
//!
//! - CUB's device-wide algorithms put their kernels in a namespace named after
//!   `__CUDA_ARCH_LIST__` (and their version): compiled one target at a time, each image would
//!   name them differently and the host object register a third set of names. Every compile of
//!   a module sees the module's whole list, so the images agree with what the host registers.
//! - A kernel whose stores alone are compiled out for older GPUs (gemv.cu's bf16 instantiations:
//!   its loop stays, so it is no stub) is declared for the targets its author supports: the
//!   declaration may narrow what the images hold, and `audit` and the runtime check then refuse
//!   it on the GPUs outside it, as declared.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::Path;

use fatkit_tests::{fatkit_in_process, temp_dir, toolchain};

use crate::build::build_rs_api::offline_build;

/// A launcher calling `cub::DeviceReduce::Sum`, as ops.cu of mistralrs-quant does.
const REDUCE_CU: &str = r#"#include <cub/device/device_reduce.cuh>
extern "C" __global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }
extern "C" int sum_bytes(const float* in, float* out, int n) {
    size_t bytes = 0;
    cub::DeviceReduce::Sum(nullptr, bytes, in, out, n);
    return (int)bytes;
}
extern "C" void run_scale(float* x) { scale<<<1, 32>>>(x); }
"#;

fn write(dir: &Path, targets: &str, file: &str, text: &str) {
    std::fs::write(
        dir.join("t.toml"),
        format!("targets = [{targets}]\nptx = []\n"),
    )
    .unwrap();
    std::fs::write(dir.join(file), text).unwrap();
}

/// The kernels of a library and the targets of the images holding each, by symbol.
fn kernels_of(library: &Path) -> Vec<(String, Vec<String>)> {
    let data = std::fs::read(library).unwrap();
    let report = fatkit_fatbin::inspect::inspect(
        "lib.a",
        &data,
        fatkit_fatbin::inspect::Depth::Kernels,
        &fatkit_fatbin::Limits::default(),
    );
    fatkit_audit::coverage::kernels(&report)
        .iter()
        .map(|k| {
            (
                k.name.clone(),
                k.targets().iter().map(|t| t.to_string()).collect(),
            )
        })
        .collect()
}

#[test]
fn a_library_using_cub_names_its_kernels_alike_in_every_image() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("cccl-one-toolkit");
    write(
        &dir,
        "\"sm_75\", \"sm_80\", \"sm_90\"",
        "reduce.cu",
        REDUCE_CU,
    );
    let lib = offline_build(&dir, &["reduce.cu"])
        .try_compile_library("reduce")
        .unwrap_or_else(|e| panic!("{e}"));
    let kernels = kernels_of(&lib.path);
    let cub: Vec<&(String, Vec<String>)> =
        kernels.iter().filter(|(k, _)| k.contains("cub")).collect();
    assert!(
        cub.len() >= 2,
        "CUB's reduce kernels are built: {kernels:?}"
    );
    for (kernel, targets) in &kernels {
        assert_eq!(targets, &["sm_75", "sm_80", "sm_90"], "{kernel}");
    }
    // Named after the module's whole list, as one nvcc call for all three would name them.
    assert!(
        cub.iter().all(|(k, _)| k.contains("750_800_900")),
        "{cub:?}"
    );
    let library = lib.path.display().to_string();
    for gpu in ["T4", "A100", "H100"] {
        let (code, out, err) = fatkit_in_process(&["audit", &library, "--gpu", gpu]);
        assert_eq!(code, 0, "{gpu}: {out}{err}");
    }
}

/// sm_70 is built by CUDA 12.4 (CUB 2), the rest by CUDA 13 (CUB 3): the images hold two
/// sets of CUB kernels. Refused with the cause and the declaration that builds the source with
/// one toolkit; declared, it builds.
#[test]
fn a_library_using_cub_across_two_toolkits_is_told_to_build_it_with_one() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("cccl-two-toolkits");
    write(
        &dir,
        "\"sm_70\", \"sm_80\", \"sm_90\"",
        "reduce.cu",
        REDUCE_CU,
    );
    let build = || {
        let mut b = fatkit_build::Build::new();
        b.profile(dir.join("t.toml").display().to_string())
            .file(dir.join("reduce.cu"))
            .out_dir(dir.join("out"))
            .cargo_metadata(false);
        b
    };
    let lib = build().try_compile_library("reduce");
    let two_toolkits = lib.as_ref().map_or(true, |l| {
        let versions: std::collections::BTreeSet<String> = l
            .report
            .routes
            .iter()
            .map(|r| r.version.to_string())
            .collect();
        versions.len() > 1
    });
    if !two_toolkits {
        eprintln!("skipped: one toolkit builds sm_70 and sm_90 here");
        return;
    }
    let err = lib.unwrap_err().to_string();
    assert!(
        err.contains("its images name their kernels differently by the toolkit that built them")
            && err.contains("CCCL")
            && err.contains(".file_targets(\"reduce.cu\", \"sm_80+\")"),
        "{err}"
    );
    let lib = build()
        .file_targets("reduce.cu", "sm_80+")
        .try_compile_library("reduce")
        .unwrap_or_else(|e| panic!("{e}"));
    let library = lib.path.display().to_string();
    let (code, out, err) =
        fatkit_in_process(&["audit", &library, "--require", "sm_70,sm_80,sm_90"]);
    assert_eq!(
        code, 0,
        "declared for sm_80+, sm_70 is not a gap: {out}{err}"
    );
    // Every kernel of the library is declared for newer GPUs: nothing of it runs on a V100,
    // by its author's design, and the answer says so rather than `yes`.
    let (code, out, err) = fatkit_in_process(&["audit", &library, "--gpu", "V100"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("NO on V100") && out.contains("declared"),
        "{out}"
    );
    let (code, out, err) = fatkit_in_process(&["audit", &library, "--gpu", "A100"]);
    assert_eq!(code, 0, "{out}{err}");
}

/// gemv.cu's shape: the loop stays for every target, the store only from sm_80 (bf16
/// arithmetic). Without a declaration the sm_75 image holds a kernel that does nothing useful
/// and fatkit cannot tell; declared `sm_80+`, the build accepts it and every reader refuses it
/// on a T4 as declared.
#[test]
fn a_kernel_whose_stores_alone_are_compiled_out_is_declared_for_its_targets() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("stores-compiled-out");
    write(
        &dir,
        "\"sm_75\", \"sm_80\"",
        "gemv.cu",
        r#"#include <cuda_bf16.h>
template <typename T>
__global__ void gemv(const T* a, T* out, int n) {
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        acc += (float)a[i];
        __syncthreads();
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    out[threadIdx.x] = (T)acc;
#endif
}
extern "C" void run_gemv_bf16(const __nv_bfloat16* a, __nv_bfloat16* o, int n) { gemv<<<1, 32>>>(a, o, n); }
extern "C" void run_gemv_f32(const float* a, float* o, int n) { gemv<<<1, 32>>>(a, o, n); }
"#,
    );
    let lib = offline_build(&dir, &["gemv.cu"])
        .kernel_targets("gemv<__nv_bfloat16>", "sm_80+")
        .try_compile_library("gemv")
        .unwrap_or_else(|e| panic!("{e}"));
    // The sm_75 image still holds it: the declaration narrows what was built.
    let kernels = kernels_of(&lib.path);
    assert!(
        kernels.iter().all(|(_, t)| t == &["sm_75", "sm_80"]),
        "{kernels:?}"
    );
    let library = lib.path.display().to_string();
    let (code, out, err) = fatkit_in_process(&["audit", &library, "--gpu", "T4"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("gemv<__nv_bfloat16>") && out.contains("declared"),
        "the declared kernel is named on a T4:\n{out}"
    );
    let (code, out, err) = fatkit_in_process(&["audit", &library, "--require", "sm_75,sm_80"]);
    assert_eq!(code, 0, "every gap declared: {out}{err}");
    let (code, out, err) = fatkit_in_process(&["audit", &library, "--gpu", "A100"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("declared"), "{out}");
}
