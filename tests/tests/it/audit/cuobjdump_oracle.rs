//! Toolchain tier: files built here with real nvcc read by fatkit exactly as cuobjdump reads
//! them, and `audit` verdicts on them. Skips without a toolchain, except in CI where that fails.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use fatkit_fatbin::inspect::{extract_all, inspect, Depth};
use fatkit_fatbin::{Limits, Origin};
use fatkit_tests::{cli, cuobjdump_extract, cuobjdump_list, run, temp_dir, toolchain};
use fatkit_toolchain::Nvcc as Toolchain;

const KERNELS: &str = include_str!("../../../fixtures/small/kernels.cu");

/// Several targets: cubins for sm_75, sm_80, sm_90, sm_120 and PTX for compute_120.
const GENCODE: [&str; 8] = [
    "-gencode",
    "arch=compute_75,code=sm_75",
    "-gencode",
    "arch=compute_80,code=sm_80",
    "-gencode",
    "arch=compute_90,code=sm_90",
    "-gencode",
    "arch=compute_120,code=[sm_120,compute_120]",
];

fn nvcc(tc: &Toolchain, dir: &Path, extra: &[&str]) {
    let mut args: Vec<&str> = GENCODE.to_vec();
    args.extend_from_slice(extra);
    run(dir, &tc.nvcc(), &args);
}

/// Builds every kind of file the reader must handle; returns their paths.
fn build_all(tc: &Toolchain, dir: &Path) -> Vec<PathBuf> {
    std::fs::write(dir.join("k.cu"), KERNELS).unwrap();
    std::fs::write(
        dir.join("main.cu"),
        "#include <cstdio>\nextern \"C\" __global__ void a(float*, float, int);\nint main() { std::printf(\"%p\\n\", (void*)a); }\n",
    )
    .unwrap();
    nvcc(tc, dir, &["--fatbin", "k.cu", "-o", "plain.fatbin"]);
    nvcc(
        tc,
        dir,
        &[
            "--fatbin",
            "-Xfatbin",
            "-compress-all",
            "k.cu",
            "-o",
            "compress-all.fatbin",
        ],
    );
    nvcc(
        tc,
        dir,
        &[
            "--fatbin",
            "--compress-mode=size",
            "k.cu",
            "-o",
            "size.fatbin",
        ],
    );
    nvcc(
        tc,
        dir,
        &[
            "--fatbin",
            "--compress-mode=speed",
            "k.cu",
            "-o",
            "speed.fatbin",
        ],
    );
    nvcc(tc, dir, &["-c", "k.cu", "-o", "k.o"]);
    nvcc(tc, dir, &["-rdc=true", "-c", "k.cu", "-o", "k_rdc.o"]);
    nvcc(tc, dir, &["k.cu", "main.cu", "-o", "app"]);
    nvcc(
        tc,
        dir,
        &["-Xcompiler", "-fPIC", "-shared", "k.cu", "-o", "libk.so"],
    );
    run(dir, Path::new("ar"), &["rcs", "libk.a", "k.o", "k_rdc.o"]);
    [
        "plain.fatbin",
        "compress-all.fatbin",
        "size.fatbin",
        "speed.fatbin",
        "k.o",
        "k_rdc.o",
        "app",
        "libk.so",
        "libk.a",
    ]
    .iter()
    .map(|f| dir.join(f))
    .collect()
}

#[test]
fn reading_equals_cuobjdump_byte_for_byte() {
    let Some(tc) = toolchain() else { return };
    let dir = temp_dir("oracle");
    let limits = Limits::default();
    for file in build_all(&tc, &dir) {
        let data = std::fs::read(&file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let report = inspect(&name, &data, Depth::Kernels, &limits);
        assert!(
            report.all_errors().is_empty(),
            "{name}: {:?}",
            report.all_errors()
        );
        let images = report.all_images();
        assert!(
            images.iter().all(|(_, origin, _)| **origin != Origin::Scan),
            "{name}: nvcc output found by scan"
        );
        let mut ours: Vec<(String, String)> = images
            .iter()
            .map(|(_, _, e)| (e.kind.name(), e.target.unwrap().to_string()))
            .collect();
        ours.sort();
        let theirs = cuobjdump_list(&tc, &file);
        assert!(!theirs.is_empty(), "{name}: cuobjdump lists nothing");
        assert_eq!(ours, theirs, "{name}: (kind, target) lists differ");

        // Every image, decompressed, equals cuobjdump's extraction: cubins in order, then PTX.
        let extracted = extract_all(&name, &data, &limits);
        let mut ours: Vec<(String, Vec<u8>)> = Vec::new();
        for kind in ["cubin", "ptx"] {
            for x in extracted.iter().filter(|x| x.kind.name() == kind) {
                ours.push((kind.to_owned(), x.bytes.as_ref().unwrap().clone()));
            }
        }
        let theirs = cuobjdump_extract(&tc, &file, &dir.join(format!("{name}.x")));
        assert_eq!(
            ours.len(),
            theirs.len(),
            "{name}: number of extracted images"
        );
        for (idx, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            assert!(
                a == b,
                "{name}: image {idx} ({}) differs: {} vs {} bytes",
                a.0,
                a.1.len(),
                b.1.len()
            );
        }
    }
}

/// `kernels.cu` built into `k.fatbin`: a cubin per arch in `cubins`, and a cubin plus PTX
/// for `with_ptx`.
fn kernels_fatbin(tc: &Toolchain, dir: &Path, cubins: &[&str], with_ptx: &str) -> PathBuf {
    std::fs::write(dir.join("k.cu"), KERNELS).unwrap();
    let mut args: Vec<String> = ["--fatbin", "k.cu", "-o", "k.fatbin"]
        .map(String::from)
        .to_vec();
    for arch in cubins {
        args.push("-gencode".into());
        args.push(format!("arch=compute_{arch},code=sm_{arch}"));
    }
    args.push("-gencode".into());
    args.push(format!(
        "arch=compute_{with_ptx},code=[sm_{with_ptx},compute_{with_ptx}]"
    ));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run(dir, &tc.nvcc(), &args);
    dir.join("k.fatbin")
}

#[test]
fn kernel_compiled_out_for_sm_120_is_named() {
    let Some(tc) = toolchain() else { return };
    let dir = temp_dir("kernel-gap");
    let file = kernels_fatbin(&tc, &dir, &["80", "86", "89", "90"], "120");
    let (code, out) = cli::audit(&[file.to_str().unwrap(), "--gpu", "RTX 5090"]).text();
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("PARTLY on GeForce RTX 5090 (CC 12.0): 1 of 2 kernels run\n"),
        "{out}"
    );
    assert!(
        // The driver loads the sm_120 cubin for the module: b is not in it.
        out.contains("  1 of 2 kernels do not run on GeForce RTX 5090, by reason:\n         1  the driver loads the sm_120 cubin of the module on CC 12.0, which does not hold it (sm_80 sm_86 sm_89 sm_90 do): cuModuleGetFunction returns CUDA_ERROR_NOT_FOUND (500)\n            b\n"),
        "{out}"
    );
    // The same file covers an H100 completely.
    let (code, out) = cli::audit(&[file.to_str().unwrap(), "--gpu", "H100"]).text();
    assert_eq!(code, 0, "{out}");
}

#[test]
fn ptx_too_new_for_the_driver_and_jit_with_a_new_one() {
    let Some(tc) = toolchain() else { return };
    let dir = temp_dir("ptx-isa");
    let file = kernels_fatbin(&tc, &dir, &["75", "80", "86", "89"], "90");
    let file = file.to_str().unwrap();
    let (code, out) = cli::audit(&[file, "--gpu", "RTX 5090", "--driver", "575.51"]).text();
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222)") && out.contains("PTX ISA"),
        "{out}"
    );
    // At or above the minimum driver for the ISA nvcc wrote, PTX JIT covers it.
    let report = inspect(
        "k",
        &std::fs::read(file).unwrap(),
        Depth::Headers,
        &Limits::default(),
    );
    let isa = report
        .all_images()
        .iter()
        .find_map(|(_, _, e)| e.ptx_isa)
        .unwrap();
    let need = fatkit_arch::driver::PtxRequirement::of(isa);
    match need.min_driver {
        Some(min) => {
            let (code, out) =
                cli::audit(&[file, "--gpu", "RTX 5090", "--driver", &min.to_string()]).text();
            assert_eq!(code, 0, "{out}");
        }
        None => {
            // A toolkit newer than the tables: the verdict is "unknown" and names the ISA.
            let (code, out) = cli::audit(&[file, "--gpu", "RTX 5090", "--driver", "999.99"]).text();
            assert_eq!(code, 1, "{out}");
            assert!(
                out.contains("unknown") && out.contains(&format!("PTX ISA {isa}")),
                "{out}"
            );
        }
    }
}

/// Our writer against NVIDIA's: for uncompressed cubins (plain, `a`, `f`, new ABI with its
/// `.nv.compat` blob) with an identifier, byte-identical to `fatbinary`; compressed (LZ4,
/// ZSTD) and with PTX, every image cuobjdump extracts equals what went in.
#[test]
fn writer_matches_fatbinary_and_cuobjdump() {
    let Some(tc) = toolchain() else { return };
    let dir = temp_dir("writer");
    std::fs::write(dir.join("k.cu"), KERNELS).unwrap();
    let targets = ["sm_80", "sm_90a", "sm_100f", "sm_120"];
    let mut cubins = Vec::new();
    for t in targets {
        let arch = t.replace("sm_", "compute_");
        let out = format!("{t}.cubin");
        run(
            &dir,
            &tc.nvcc(),
            &[
                "-cubin",
                "-gencode",
                &format!("arch={arch},code={t}"),
                "k.cu",
                "-o",
                &out,
            ],
        );
        cubins.push((
            t.parse::<fatkit_arch::Target>().unwrap(),
            std::fs::read(dir.join(&out)).unwrap(),
        ));
    }
    run(
        &dir,
        &tc.nvcc(),
        &["-ptx", "-arch=compute_120", "k.cu", "-o", "k.ptx"],
    );
    let ptx = std::fs::read(dir.join("k.ptx")).unwrap();

    let mut args: Vec<String> = vec![
        "-64".into(),
        "--create=nv.fatbin".into(),
        "--ident=k.cu".into(),
        "--compress-mode=none".into(),
    ];
    for (t, _) in &cubins {
        args.push(format!(
            "--image3=kind=elf,sm={},file={t}.cubin",
            t.to_string().trim_start_matches("sm_")
        ));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&dir, &tc.bin_dir().join("fatbinary"), &args);
    let theirs = std::fs::read(dir.join("nv.fatbin")).unwrap();
    let inputs: Vec<fatkit_fatbin::write::Input<'_>> = cubins
        .iter()
        .map(|(t, data)| fatkit_fatbin::write::Input {
            target: *t,
            data,
            identifier: Some("k.cu"),
            compression: fatkit_fatbin::Compression::None,
        })
        .collect();
    let ours = fatkit_fatbin::write::write(&inputs).unwrap();
    std::fs::write(dir.join("ours.fatbin"), &ours).unwrap();
    assert!(
        ours == theirs,
        "our container differs from fatbinary's ({} vs {} bytes)",
        ours.len(),
        theirs.len()
    );

    for compression in [
        fatkit_fatbin::Compression::Lz4,
        fatkit_fatbin::Compression::Zstd,
    ] {
        let mut inputs: Vec<fatkit_fatbin::write::Input<'_>> = cubins
            .iter()
            .map(|(t, data)| fatkit_fatbin::write::Input {
                target: *t,
                data,
                identifier: Some("k.cu"),
                compression,
            })
            .collect();
        inputs.push(fatkit_fatbin::write::Input {
            target: "compute_120".parse().unwrap(),
            data: &ptx,
            identifier: Some("k.cu"),
            compression,
        });
        let path = dir.join(format!("{compression:?}.fatbin"));
        std::fs::write(&path, fatkit_fatbin::write::write(&inputs).unwrap()).unwrap();
        let mut expected: Vec<(String, String)> = inputs
            .iter()
            .map(|i| {
                (
                    if i.target.is_cubin() { "cubin" } else { "ptx" }.to_owned(),
                    i.target.to_string(),
                )
            })
            .collect();
        expected.sort();
        assert_eq!(cuobjdump_list(&tc, &path), expected, "{compression:?}");
        let extracted = cuobjdump_extract(&tc, &path, &dir.join(format!("x-{compression:?}")));
        let mut want: Vec<(String, Vec<u8>)> = cubins
            .iter()
            .map(|(_, d)| ("cubin".to_owned(), d.clone()))
            .collect();
        want.push(("ptx".to_owned(), ptx.clone()));
        assert!(
            extracted == want,
            "{compression:?}: cuobjdump extracts other bytes than were written"
        );
    }
}

/// Kernel signatures of every kind a real library has: scalars of each size, pointers with
/// and without `__restrict__`, half and bf16 by value, structs of 16-byte alignment and
/// with arrays, a template instantiation, a `__grid_constant__` struct, no parameters.
const SIGNATURES: &str = r#"
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstddef>
struct __align__(16) Aligned { float4 v; int n; };
struct Shape { long long dims[4]; int rank; };
extern "C" __global__ void scalars(char c, short s, int i, long long l, float f, double d) {}
extern "C" __global__ void pointers(const float* __restrict__ x, float* y, size_t n) {}
extern "C" __global__ void halves(int n, __half a, __nv_bfloat16 b, const __half* x, __nv_bfloat16* y) {}
extern "C" __global__ void structs(char tag, Aligned a, Shape s, const float* x) {}
extern "C" __global__ void grid_constant(const __grid_constant__ Shape s, float* out) {}
extern "C" __global__ void none() {}
template <typename T> __global__ void scale(T* x, T a, unsigned n) {}
template __global__ void scale<double>(double*, double, unsigned);
template __global__ void scale<char>(char*, char, unsigned);
"#;

/// cuobjdump -elf's decoding of every `EIATTR_KPARAM_INFO`: kernel -> [(offset, size)].
fn cuobjdump_params(tc: &Toolchain, cubin: &Path) -> BTreeMap<String, Vec<(u32, u32)>> {
    let out = Command::new(tc.cuobjdump().unwrap())
        .arg("-elf")
        .arg(cubin)
        .output()
        .unwrap();
    let hex = |line: &str, key: &str| -> u32 {
        let at = line.find(key).unwrap() + key.len();
        let v = line[at..]
            .trim_start_matches([' ', ':', '\t'])
            .split_whitespace()
            .next()
            .unwrap();
        u32::from_str_radix(v.trim_start_matches("0x"), 16).unwrap()
    };
    let mut section = None;
    let mut by: BTreeMap<String, Vec<(u32, u32, u32)>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let t = line.trim();
        if t.starts_with('.') && !t.contains(' ') {
            section = t.strip_prefix(".nv.info.").map(str::to_owned);
        } else if let (Some(k), true) = (&section, t.contains("Ordinal")) {
            by.entry(k.clone()).or_default().push((
                hex(t, "Ordinal"),
                hex(t, "Offset"),
                hex(t, "Size"),
            ));
        } else if let (Some(k), true) = (&section, t.starts_with("Attribute:")) {
            by.entry(k.clone()).or_default();
        }
    }
    by.into_iter()
        .map(|(k, mut v)| {
            v.sort();
            (k, v.into_iter().map(|(_, o, s)| (o, s)).collect())
        })
        .collect()
}

/// fatkit's parameter layouts equal cuobjdump's decoding of every cubin, from CUDA 13's nvcc
/// and Debian's CUDA 11.8 (old ABI), and the layout read from PTX equals the cubins'.
#[test]
fn parameter_layouts_equal_cuobjdump_and_ptx() {
    let Some(tc) = toolchain() else { return };
    let dir = temp_dir("params-oracle");
    std::fs::write(dir.join("sig.cu"), SIGNATURES).unwrap();
    let mut compilers = vec![(tc.nvcc(), vec!["sm_75", "sm_90", "sm_120"])];
    if let Some(old) = fatkit_tests::debian_nvcc() {
        compilers.push((old, vec!["sm_52", "sm_70"]));
    }
    let mut checked = 0;
    for (i, (nvcc, arches)) in compilers.iter().enumerate() {
        let ptx = dir.join(format!("sig{i}.ptx"));
        let arch = format!("-arch={}", arches[arches.len() - 1]);
        run(
            &dir,
            nvcc,
            &["-ptx", &arch, "sig.cu", "-o", ptx.to_str().unwrap()],
        );
        let from_ptx = fatkit_fatbin::params::ptx(&std::fs::read(&ptx).unwrap()).unwrap();
        assert_eq!(from_ptx.len(), 8, "{from_ptx:?}");
        for sm in arches {
            let cubin = dir.join(format!("sig{i}.{sm}.cubin"));
            let arch = format!("-arch={sm}");
            run(
                &dir,
                nvcc,
                &["-cubin", &arch, "sig.cu", "-o", cubin.to_str().unwrap()],
            );
            let ours: BTreeMap<String, Vec<(u32, u32)>> =
                fatkit_fatbin::params::cubin(&std::fs::read(&cubin).unwrap())
                    .unwrap()
                    .into_iter()
                    .map(|(k, v)| (k, v.iter().map(|p| (p.offset, p.size)).collect()))
                    .collect();
            let theirs = cuobjdump_params(&tc, &cubin);
            assert_eq!(ours, theirs, "{}: {sm}", nvcc.display());
            let ptx_layouts: BTreeMap<String, Vec<(u32, u32)>> = from_ptx
                .iter()
                .map(|(k, v)| (k.clone(), v.iter().map(|p| (p.offset, p.size)).collect()))
                .collect();
            assert_eq!(ours, ptx_layouts, "{}: {sm} against PTX", nvcc.display());
            checked += 1;
        }
    }
    assert!(checked >= 3);
    // A few layouts spelled out, so that agreeing on nonsense cannot pass.
    let ptx = fatkit_fatbin::params::ptx(&std::fs::read(dir.join("sig0.ptx")).unwrap()).unwrap();
    let l = |k: &str| -> Vec<(u32, u32)> { ptx[k].iter().map(|p| (p.offset, p.size)).collect() };
    assert_eq!(
        l("scalars"),
        [(0, 1), (2, 2), (4, 4), (8, 8), (16, 4), (24, 8)]
    );
    assert_eq!(l("halves"), [(0, 4), (4, 2), (6, 2), (8, 8), (16, 8)]);
    assert_eq!(l("structs"), [(0, 1), (16, 32), (48, 40), (88, 8)]);
    assert_eq!(l("none"), []);
}

#[test]
fn a_static_kernel_is_a_kernel_in_its_cubin_as_in_its_ptx() {
    let Some(tc) = toolchain() else { return };
    let dir = temp_dir("static-kernel");
    std::fs::write(
        dir.join("s.cu"),
        "static __global__ void hidden(int *p) { *p = 1; }\n\
         __global__ void shown(int *p) { hidden<<<1, 1>>>(p); }\n\
         void launch(int *p) { hidden<<<1, 1>>>(p); }\n",
    )
    .unwrap();
    run(
        &dir,
        &tc.nvcc(),
        &[
            "--fatbin",
            "-rdc=true",
            "s.cu",
            "-o",
            "s.fatbin",
            "-gencode",
            "arch=compute_80,code=[sm_80,compute_80]",
        ],
    );
    let file = dir.join("s.fatbin");
    let (code, out) = cli::audit(&[file.to_str().unwrap(), "--json"]).text();
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut by_kind: Vec<(String, Vec<String>)> = v["files"][0]["report"]["containers"][0]
        ["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let kernels = e["kernels"].as_array().unwrap();
            (
                e["target"].as_str().unwrap().to_owned(),
                kernels
                    .iter()
                    .map(|k| k.as_str().unwrap().to_owned())
                    .filter(|k| !k.contains("shown"))
                    .collect(),
            )
        })
        .collect();
    by_kind.sort();
    assert_eq!(by_kind.len(), 2, "{by_kind:?}");
    // The static kernel, under its mangled local name, in both images.
    assert_eq!(by_kind[0].1.len(), 1, "{by_kind:?}");
    assert_eq!(by_kind[0].1, by_kind[1].1, "{by_kind:?}");
    assert!(by_kind[0].1[0].contains("hidden"), "{by_kind:?}");
}
