//! Toolchain tier: NVIDIA's own libraries, from NVIDIA's wheels (fetched into the cache by
//! `cargo xtask test`), read as cuobjdump reads them, plus the embedded containers it misses.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::PathBuf;

use fatkit_fatbin::inspect::{extract_all, inspect, Depth};
use fatkit_fatbin::{Limits, Origin};
use fatkit_tests::{
    cuobjdump_extract, cuobjdump_list, curand_wheel, fatkit_in_process, run, temp_dir, toolchain,
};

#[test]
fn libcurand_reads_as_cuobjdump_reads_it() {
    let Some(tc) = toolchain() else { return };
    let Some(wheel) = curand_wheel() else { return };
    let dir = temp_dir("curand");
    let limits = Limits::default();

    // Through the wheel (a zip) as audit reads it ...
    let wheel_bytes = std::fs::read(&wheel).unwrap();
    let report = inspect("wheel", &wheel_bytes, Depth::Headers, &limits);
    let member = report
        .members
        .iter()
        .find(|m| m.name.contains("libcurand.so"))
        .expect("libcurand.so in the wheel");

    // ... and the library itself, for cuobjdump.
    run(
        &dir,
        &PathBuf::from("python3"),
        &["-m", "zipfile", "-e", wheel.to_str().unwrap(), "."],
    );
    let so = dir.join(
        member
            .name
            .trim_start_matches("wheel(")
            .trim_end_matches(')'),
    );
    let data = std::fs::read(&so).unwrap();
    assert_eq!(
        inspect("so", &data, Depth::Headers, &limits)
            .containers
            .len(),
        member.containers.len()
    );

    let images = member.all_images();
    let mut in_sections: Vec<(String, String)> = images
        .iter()
        .filter(|(_, origin, _)| matches!(origin, Origin::Section(_)))
        .map(|(_, _, e)| (e.kind.name(), e.target.unwrap().to_string()))
        .collect();
    in_sections.sort();
    let theirs = cuobjdump_list(&tc, &so);
    assert!(theirs.len() > 20, "{theirs:?}");
    assert_eq!(in_sections, theirs);

    let extracted = extract_all("so", &data, &limits);
    let mut ours: Vec<(String, Vec<u8>)> = Vec::new();
    for kind in ["cubin", "ptx"] {
        for x in extracted
            .iter()
            .filter(|x| x.kind.name() == kind && matches!(x.origin, Origin::Section(_)))
        {
            ours.push((kind.to_owned(), x.bytes.as_ref().unwrap().clone()));
        }
    }
    let theirs = cuobjdump_extract(&tc, &so, &dir);
    assert_eq!(ours.len(), theirs.len());
    assert!(
        ours == theirs,
        "an extracted image differs from cuobjdump's"
    );

    // The containers outside any section, which cuobjdump does not see, are reported too.
    let embedded = member
        .containers
        .iter()
        .filter(|c| c.origin == Origin::Scan)
        .count();
    assert!(embedded > 100, "only {embedded} embedded containers found");
}

/// `audit --json ARGS` in process: the exit code and the `(package, library, answers)` of
/// every library.
fn verdicts(args: &[&str]) -> (u8, Vec<(String, String, String)>) {
    let mut argv = vec!["audit", "--json", "--gpu", "V100", "--gpu", "RTX 5090"];
    argv.extend(args);
    let (code, out, _) = fatkit_in_process(&argv);
    let rows = fatkit_tests::library_rows(&out);
    (code, rows)
}

#[test]
fn a_directory_and_a_python_environment_read_as_the_wheel() {
    let Some(wheel) = curand_wheel() else { return };
    let dir = temp_dir("curand-env");
    let (code, from_wheel) = verdicts(&[wheel.to_str().unwrap()]);
    assert_eq!(code, 1, "{from_wheel:?}");
    assert_eq!(from_wheel.len(), 1, "{from_wheel:?}");
    assert_eq!(from_wheel[0].0, "\"nvidia_curand 10.4.5.25\"");
    assert_eq!(from_wheel[0].1, "nvidia/cu13/lib/libcurand.so.10");

    // Installed into a virtual environment, as pip installs it (offline, from the wheel).
    let venv = dir.join("venv");
    run(
        &dir,
        &PathBuf::from("python3"),
        &["-m", "venv", venv.to_str().unwrap()],
    );
    run(
        &dir,
        &venv.join("bin/python"),
        &[
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            wheel.to_str().unwrap(),
        ],
    );
    let (code, from_env) = verdicts(&["--python", venv.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(from_env, from_wheel);

    // The site-packages directory itself, as a directory.
    let site = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("site-packages"))
        .find(|p| p.is_dir())
        .unwrap();
    let (code, from_dir) = verdicts(&[site.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(from_dir, from_wheel);

    // The text answers first: one line per input, the library, the arch list. Kernels are
    // counted per module: curand holds some (the generators) in several single-arch containers.
    let (code, text, _) =
        fatkit_in_process(&["audit", "--python", venv.to_str().unwrap(), "--gpu", "V100"]);
    assert_eq!(code, 1);
    assert!(
        text.contains(": NO on V100 (CC 7.0): none of its 43 kernels runs; 14 are built for other GPUs only and 1 never launched (below)\n")
            && text.contains("  nvidia/cu13/lib/libcurand.so.10  NO  0 of 43 kernels run (14 for other GPUs)\n")
            // Not a PyTorch extension: the arch list in the notations its build takes.
            && text.contains("arch list:  CMAKE_CUDA_ARCHITECTURES=\"75;80;86;87;89;90;100;110;120\"")
            && !text.contains("TORCH_CUDA_ARCH_LIST"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_matrix_over_real_libraries_matches_each_gpu() {
    let Some(tc) = toolchain() else { return };
    let Some(wheel) = curand_wheel() else { return };
    // NVIDIA's device runtime library from the provisioned toolkit: an archive whose members
    // carry different architectures.
    let devrt = tc
        .nvcc()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("lib/libcudadevrt.a");
    assert!(devrt.is_file(), "{}", devrt.display());
    let checked = fatkit_tests::check_matrix_against_each_gpu(&[
        wheel.to_str().unwrap(),
        devrt.to_str().unwrap(),
    ]);
    assert_eq!(checked, 8 * 2);
}

/// Relocatable device code (`nvcc -rdc`) is a device link's input: beside the linked module the
/// runtime registers (`.nv_fatbin`), the `__nv_relfatbin` containers decide nothing. As in
/// NCCL 2.21.5, the relocatable code carries PTX the linked module does not: it must not make
/// a GPU only that PTX would serve "yes, by PTX JIT".
#[test]
fn relocatable_code_beside_a_linked_module_decides_nothing() {
    let Some(tc) = toolchain() else { return };
    let dir = fatkit_tests::temp_dir("rdc");
    std::fs::write(
        dir.join("k.cu"),
        "extern \"C\" __global__ void scale(float *x) { x[threadIdx.x] *= 2.0f; }\n",
    )
    .unwrap();
    fatkit_tests::run(
        &dir,
        &tc.nvcc(),
        &[
            "-rdc=true",
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "-gencode",
            "arch=compute_80,code=sm_80",
            "-gencode",
            "arch=compute_90,code=compute_90",
            "k.cu",
            "-o",
            "libk.so",
        ],
    );
    let lib = dir.join("libk.so").display().to_string();
    // cuobjdump lists the linked module's images by default: the sm_80 cubin.
    let listed = fatkit_tests::run(&dir, &tc.cuobjdump().unwrap(), &["--list-elf", &lib]);
    assert!(listed.contains("sm_80.cubin"), "{listed}");
    let (code, out, _) = fatkit_in_process(&["audit", &lib, "--gpu", "H100"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(": NO on H100 (CC 9.0): none of its 1 kernels runs"),
        "{out}"
    );
    assert!(out.contains("built for:  cubin sm_80; PTX none"), "{out}");
    let (code, out, _) = fatkit_in_process(&["audit", &lib, "--gpu", "A100"]);
    assert_eq!(code, 0, "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}
