//! Issue 42: kernels whose body is compiled out for a target (an `EXIT`- or trap-only stub)
//! are seen in every image kind, checked against cuobjdump's disassembly, and never counted as
//! running. Toolchain tier: Debian's nvcc 11.8 with its cuobjdump (Maxwell to Hopper), and
//! fatkit's CUDA 13.2 (Turing to Blackwell).
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fatkit_fatbin::inspect::{inspect, Depth};
use fatkit_fatbin::Limits;
use fatkit_tests::{cli, debian_nvcc, fatkit_in_process, run, temp_dir, toolchain};

/// `body` works everywhere; `exit_stub` and `trap_stub` have their body below CC 8.0 compiled
/// out (returning, trapping); `empty` is written empty; `traps` traps everywhere.
const SOURCE: &str = r#"
extern "C" __global__ void body(float* x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = s;
}
extern "C" __global__ void exit_stub(float* x, float s, int n) {
#if __CUDA_ARCH__ >= 800
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = s;
#endif
}
extern "C" __global__ void trap_stub(float* x, float s, int n) {
#if __CUDA_ARCH__ >= 800
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = s;
#else
  __trap();
#endif
}
extern "C" __global__ void empty() {}
extern "C" __global__ void traps() { __trap(); }
"#;

/// What `cuobjdump -sass` shows of each function, per cubin architecture
/// (`fatkit_fuzz::sass`).
pub(crate) fn sass_bodies(sass: &str) -> BTreeMap<(String, String), &'static str> {
    fatkit_fuzz::sass::bodies(sass)
        .into_iter()
        .map(|(arch, function, body)| ((arch, function), body))
        .collect()
}

/// What fatkit reads of each cubin's kernels: `returns`, `traps` or `code`.
pub(crate) fn fatkit_bodies(file: &Path) -> BTreeMap<(String, String), &'static str> {
    let bytes = std::fs::read(file).unwrap();
    let report = inspect("f", &bytes, Depth::Kernels, &Limits::default());
    let mut out = BTreeMap::new();
    for c in &report.containers {
        for e in &c.entries {
            let Some(t) = e.target.filter(|t| t.is_cubin()) else {
                continue;
            };
            for k in &e.kernels {
                let body = match e.empty_bodies.iter().find(|(n, _)| n == k) {
                    Some((_, fatkit_arch::load::Stub::Returns)) => "returns",
                    Some((_, fatkit_arch::load::Stub::Traps)) => "traps",
                    None => "code",
                };
                out.insert((t.to_string(), k.clone()), body);
            }
        }
    }
    out
}

/// `audit --strict`: every kernel held to every GPU, a stub of the image built for the GPU
/// included (docs/ARCH_RULES.md section 11).
fn strict(file: &Path, gpu: &str) -> (u8, String) {
    let (code, out, err) =
        fatkit_in_process(&["audit", file.to_str().unwrap(), "--gpu", gpu, "--strict"]);
    (code, format!("{out}{err}"))
}

fn json(file: &Path, gpu: &str) -> serde_json::Value {
    let (_, out, _) = fatkit_in_process(&[
        "audit",
        file.to_str().unwrap(),
        "--gpu",
        gpu,
        "--json",
        "--strict",
    ]);
    serde_json::from_str(&out).unwrap()
}

/// Builds SOURCE with `nvcc` into `dir/name` (extra arguments: the targets and the kind).
fn build(nvcc: &Path, dir: &Path, name: &str, args: &[&str]) -> PathBuf {
    std::fs::write(dir.join("stubs.cu"), SOURCE).unwrap();
    let mut all: Vec<&str> = Vec::new();
    if nvcc.starts_with("/usr/lib/nvidia-cuda-toolkit") {
        all.extend(["-ccbin", "g++-11"]);
    }
    all.extend_from_slice(args);
    all.extend(["stubs.cu", "-o", name]);
    run(dir, nvcc, &all);
    dir.join(name)
}

#[test]
fn every_stub_cuobjdump_shows_and_no_other_maxwell_to_hopper() {
    let Some(nvcc) = debian_nvcc() else { return };
    let cuobjdump = nvcc.with_file_name("cuobjdump");
    let cuobjdump = if cuobjdump.is_file() {
        cuobjdump
    } else {
        PathBuf::from("/usr/bin/cuobjdump")
    };
    let dir = temp_dir("stubs-11.8");
    let mut gencode = Vec::new();
    for sm in ["50", "61", "70", "75", "80", "86", "90"] {
        gencode.push("-gencode".to_owned());
        gencode.push(format!("arch=compute_{sm},code=sm_{sm}"));
    }
    let mut args: Vec<&str> = gencode.iter().map(String::as_str).collect();
    args.push("--fatbin");
    let fatbin = build(&nvcc, &dir, "stubs.fatbin", &args);
    let sass = run(
        &dir,
        &cuobjdump,
        &["-elf", "-sass", fatbin.to_str().unwrap()],
    );
    let theirs = sass_bodies(&sass);
    let ours = fatkit_bodies(&fatbin);
    assert_eq!(ours, theirs, "fatkit against cuobjdump -sass:\n{sass}");
    // The cases, as cuobjdump shows them: stubs below sm_80, bodies from it, `empty` and
    // `traps` the same everywhere.
    for arch in ["sm_50", "sm_61", "sm_70", "sm_75"] {
        assert_eq!(
            theirs[&(arch.to_owned(), "exit_stub".to_owned())],
            "returns"
        );
        assert_eq!(theirs[&(arch.to_owned(), "trap_stub".to_owned())], "traps");
    }
    for arch in ["sm_80", "sm_86", "sm_90"] {
        assert_eq!(theirs[&(arch.to_owned(), "exit_stub".to_owned())], "code");
    }
    assert_eq!(theirs.len(), 7 * 5);

    // The verdicts, kernel by kernel (--strict): on a T4 the two stubs do not run, named,
    // exit 1; a kernel written empty (or trapping everywhere) is not a stub; on an A100 the
    // stubs of sm_75 are not loaded.
    let (code, text) = strict(&fatbin, "T4");
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("PARTLY on T4 (CC 7.5): 3 of 5 kernels run; 2 compiled out for it")
            && text.contains("compiled out for sm_75: returns at once")
            && text.contains("compiled out for sm_75: traps"),
        "{text}"
    );
    let v = json(&fatbin, "T4");
    let on = &v["files"][0]["libraries"][0]["on"][0];
    assert_eq!(on["compiled_out"], 2, "{v:#}");
    assert_eq!(on["run"], 3, "{v:#}");
    // By default the sm_75 image is built for a T4 and the bodies are in the others: the
    // build meant them for those GPUs, set aside, counted.
    let (code, text) = cli::audit_on(&fatbin, "T4", false).text();
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(
            "yes on T4 (CC 7.5): 3 of 5 kernels run; 2 are built for other GPUs only (below)"
        ),
        "{text}"
    );
    let (code, text) = cli::audit_on(&fatbin, "A100", false).text();
    assert_eq!(code, 0, "{text}");
    assert!(!text.contains("compiled out"), "{text}");
    // --require: a stub of a required target is a gap.
    let (code, out, err) =
        fatkit_in_process(&["audit", fatbin.to_str().unwrap(), "--require", "sm_75"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("sm_75: 2 kernels: compiled out for sm_75: the image CC 7.5 loads holds only a stub of it: exit_stub, trap_stub"),
        "{out}"
    );

    // In a host object (its .nv_fatbin section) the same.
    let mut args: Vec<&str> = gencode.iter().map(String::as_str).collect();
    args.push("-c");
    let object = build(&nvcc, &dir, "stubs.o", &args);
    let (code, text) = strict(&object, "T4");
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("2 compiled out for it"), "{text}");
}

#[test]
fn a_ptx_stub_is_a_stub_where_the_driver_jit_compiles_it() {
    let Some(tc) = toolchain() else { return };
    let dir = temp_dir("stubs-ptx");
    // compute_75 PTX (exit_stub is `ret;`, trap_stub `trap;`) beside an sm_80 cubin: a T4 JITs
    // the PTX, an A100 loads the cubin.
    let fatbin = build(
        &tc.nvcc(),
        &dir,
        "ptx.fatbin",
        &[
            "--fatbin",
            "-gencode",
            "arch=compute_75,code=compute_75",
            "-gencode",
            "arch=compute_80,code=sm_80",
        ],
    );
    // No image built for a T4: the compiled-out kernels are reached through a fallback, a
    // failure by default too.
    let (code, text) = cli::audit_on(&fatbin, "T4", false).text();
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("2 compiled out for it")
            && text.contains("compiled out for compute_75: returns at once")
            && text.contains("compiled out for compute_75: traps")
            && text.contains("whose code of it does no work before ret;"),
        "{text}"
    );
    let (code, text) = cli::audit_on(&fatbin, "A100", false).text();
    assert_eq!(code, 0, "{text}");
    // PTX alone: no image holds a body, so nothing is a stub (written or compiled out, the
    // code cannot tell).
    let alone = build(
        &tc.nvcc(),
        &dir,
        "alone.fatbin",
        &["--fatbin", "-gencode", "arch=compute_75,code=compute_75"],
    );
    let (_, text) = cli::audit_on(&alone, "T4", false).text();
    assert!(!text.contains("compiled out"), "{text}");
}

#[test]
fn stubs_of_cuda_13_turing_to_blackwell() {
    let Some(tc) = toolchain() else { return };
    let dir = temp_dir("stubs-13");
    let mut gencode = Vec::new();
    for sm in ["75", "80", "90", "100", "120"] {
        gencode.push("-gencode".to_owned());
        gencode.push(format!("arch=compute_{sm},code=sm_{sm}"));
    }
    let mut args: Vec<&str> = gencode.iter().map(String::as_str).collect();
    args.push("--fatbin");
    let fatbin = build(&tc.nvcc(), &dir, "stubs13.fatbin", &args);
    let ours = fatkit_bodies(&fatbin);
    assert_eq!(
        ours[&("sm_75".to_owned(), "exit_stub".to_owned())],
        "returns"
    );
    assert_eq!(ours[&("sm_75".to_owned(), "trap_stub".to_owned())], "traps");
    for sm in ["sm_80", "sm_90", "sm_100", "sm_120"] {
        for k in ["body", "exit_stub", "trap_stub"] {
            assert_eq!(ours[&(sm.to_owned(), k.to_owned())], "code", "{sm} {k}");
        }
        assert_eq!(ours[&(sm.to_owned(), "empty".to_owned())], "returns");
        assert_eq!(ours[&(sm.to_owned(), "traps".to_owned())], "traps");
    }
    // Where cuobjdump can disassemble (an nvdisasm beside it or on PATH), the same.
    let cuobjdump = tc.cuobjdump().unwrap();
    let sass = std::process::Command::new(&cuobjdump)
        .args(["-elf", "-sass", fatbin.to_str().unwrap()])
        .output()
        .unwrap();
    let sass = String::from_utf8_lossy(&sass.stdout);
    if sass.contains("Function : ") {
        assert_eq!(ours, sass_bodies(&sass), "{sass}");
    } else {
        eprintln!(
            "cuobjdump -sass printed no code (no nvdisasm): compared with the encodings only"
        );
    }
    let (code, text) = cli::audit_on(&fatbin, "RTX 5090", false).text();
    assert_eq!(code, 0, "{text}");
    let (code, text) = strict(&fatbin, "T4");
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("2 compiled out for it"), "{text}");
}

/// A package whose kernels are SOURCE, for `targets` (sm_75 and sm_80, PTX compute_80), with
/// `kernels` as its `[package.metadata.fatkit.kernels]` table: (exit code, output, the
/// package's output directory).
fn build_package(name: &str, kernels: &str) -> (u8, String, PathBuf) {
    let dir = temp_dir(name);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join("arch-profiles")).unwrap();
    std::fs::write(dir.join("src/lib.rs"), "").unwrap();
    std::fs::write(dir.join("stubs.cu"), SOURCE).unwrap();
    std::fs::write(
        dir.join("arch-profiles/t.toml"),
        "targets = [\"sm_75\", \"sm_80\"]\nptx = [\"compute_80\"]\n",
    )
    .unwrap();
    let manifest = dir.join("Cargo.toml");
    std::fs::write(
        &manifest,
        format!(
            "[package]\nname = \"stubs\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[package.metadata.fatkit]\nprofile = \"t\"\nsources = [\"stubs.cu\"]\n\n[package.metadata.fatkit.kernels]\n{kernels}\n[workspace]\n"
        ),
    )
    .unwrap();
    let cache = dir.join("cache");
    let (code, out, err) = fatkit_in_process(&[
        "build-kernels",
        "--offline",
        "--manifest-path",
        manifest.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
    ]);
    (code, format!("{out}{err}"), dir.join("target/fatkit/stubs"))
}

#[test]
fn the_build_refuses_a_stub_it_was_not_told_of_and_records_one_declared() {
    if toolchain().is_none() {
        return;
    }
    // Undeclared: the build fails naming the kernels, where their body is compiled out, and
    // the fixes; nothing is written.
    let (code, log, out) = build_package("stubs-undeclared", "");
    assert_eq!(code, 1, "{log}");
    for want in [
        "exit_stub",
        "trap_stub",
        "kernel exit_stub's body is compiled out of sm_75: there its code only returns at once",
        "kernel trap_stub's body is compiled out of sm_75: there its code only traps",
        "a launch would succeed and do nothing; its body is in sm_80 compute_80",
        "guard the whole kernel (the #if around its __global__ definition)",
        "the images with only a stub of it: sm_75 by nvcc",
        "exit_stub = { targets = \"sm_80+\" }",
    ] {
        assert!(log.contains(want), "{want}: {log}");
    }
    assert!(!log.contains("missing from sm_75"), "{log}");
    assert!(!out.join("stubs.fatbin").exists(), "{log}");

    // Declared away from sm_75: built, the stubs recorded in the manifest and STUBS.
    let (code, log, out) = build_package(
        "stubs-declared",
        "exit_stub = { targets = \"sm_80+\" }\ntrap_stub = { targets = \"sm_80+\" }\n",
    );
    assert_eq!(code, 0, "{log}");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("stubs.manifest.json")).unwrap()).unwrap();
    let sm75 = manifest["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["target"] == "sm_75")
        .unwrap();
    assert_eq!(
        sm75["stubs"],
        serde_json::json!([
            {"kernel": "exit_stub", "stub": "returns"},
            {"kernel": "trap_stub", "stub": "traps"}
        ]),
        "{manifest:#}"
    );
    assert_eq!(
        sm75["kernels"],
        serde_json::json!(["body", "empty", "traps"]),
        "{manifest:#}"
    );
    let rust = std::fs::read_to_string(out.join("stubs.rs")).unwrap();
    assert!(
        rust.contains("pub const STUBS: &[(&str, &str, &str)] = &[\n    (\"sm_75\", \"exit_stub\", \"returns\"),\n    (\"sm_75\", \"trap_stub\", \"traps\"),\n];"),
        "{rust}"
    );

    // The runtime, from the generated rows: on a T4 the declared stubs are refused before any
    // launch, with their own error; on an A100 they run.
    let leak = |s: &str| -> &'static str { Box::leak(s.to_owned().into_boxed_str()) };
    let fatbin: &'static [u8] = Box::leak(
        std::fs::read(out.join("stubs.fatbin"))
            .unwrap()
            .into_boxed_slice(),
    );
    let rows: Vec<fatkit_runtime::ImageRow> = manifest["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let kernels: Vec<&'static str> = e["kernels"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| leak(k.as_str().unwrap()))
                .collect();
            let isa = e["ptx_isa"].as_str().map(|v| {
                let (a, b) = v.split_once('.').unwrap();
                (a.parse().unwrap(), b.parse().unwrap())
            });
            (
                leak(e["target"].as_str().unwrap()),
                isa,
                &*Box::leak(kernels.into_boxed_slice()),
            )
        })
        .collect();
    let stubs: &'static [fatkit_runtime::StubRow] = &[
        ("sm_75", "exit_stub", "returns"),
        ("sm_75", "trap_stub", "traps"),
    ];
    let declared = rust
        .split_once("pub static DECLARED: &str = \"")
        .and_then(|(_, rest)| rest.split_once("\";"))
        .map(|(record, _)| leak(record))
        .unwrap();
    let module = fatkit_runtime::Module::new("stubs", fatbin, Box::leak(rows.into_boxed_slice()))
        .unwrap()
        .with_stubs(stubs)
        .unwrap()
        .with_declared(declared);
    let t4 = fatkit_arch::rules::Device::new("7.5".parse().unwrap(), None);
    let a100 = fatkit_arch::rules::Device::new("8.0".parse().unwrap(), None);
    let refused = module.kernel_check(&t4, "exit_stub").unwrap().unwrap_err();
    assert_eq!(refused.error, "FATKIT_KERNEL_COMPILED_OUT", "{refused:?}");
    assert!(
        refused
            .reasons
            .iter()
            .any(|r| r.contains("compiled out for sm_75: returns at once")),
        "{refused:?}"
    );
    assert!(module.kernel_check(&t4, "trap_stub").unwrap().is_err());
    assert!(module.kernel_check(&t4, "body").unwrap().is_ok());
    assert!(module.kernel_check(&a100, "exit_stub").unwrap().is_ok());
    // Declared: the module check passes on the T4, refusing only those kernels.
    assert!(module.check(&t4).is_ok());
    assert_eq!(
        module
            .kernel_check(&t4, "exit_stub")
            .unwrap()
            .unwrap_err()
            .declared,
        Some("sm_80,compute_80")
    );
}

/// Issue 42: a kernel whose body is compiled out below sm_80, declared `targets = "sm_80+"`,
/// is packaged as declared; the same fatbin embedded raw (no declaration in the binary) is a
/// gap naming the stub, and no archive is written.
#[test]
fn a_declared_stub_is_packaged_as_declared_and_a_raw_one_is_a_gap() {
    if toolchain().is_none() || !fatkit_tests::nvrtc_available() {
        return;
    }
    let dir = crate::ship::package::downstream(
        "package-stub",
        "\n[package.metadata.fatkit.kernels]\nhalve_bf16 = { targets = \"sm_80+\" }\n",
    );
    let krate = dir.join("crates/fatkit-example");
    std::fs::write(
        krate.join("kernels/halve.cu"),
        "extern \"C\" __global__ void halve_bf16(float* x, int n) {\n\
         #if __CUDA_ARCH__ >= 800\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) x[i] *= 0.5f;\n#endif\n}\n\
         extern \"C\" __global__ void halve_f32(float* x, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) x[i] *= 0.5f;\n}\n",
    )
    .unwrap();
    // The binary embeds the module as fatkit-runtime does, its declaration with it.
    std::fs::write(
        krate.join("src/main.rs"),
        "fn main() {\n    let m = fatkit_runtime::include_module!(concat!(env!(\"FATKIT_KERNELS_DIR\"), \"/halve.rs\")).unwrap();\n    println!(\"{}\", m.name());\n}\n",
    )
    .unwrap();
    let (code, out, err) = crate::ship::package::package(&dir);
    assert_eq!(code, 0, "{out}\n{err}");
    let (_, coverage) = crate::ship::package::unpacked(&dir, &out);
    let binary = &coverage["binaries"][0];
    assert_eq!(binary["gaps"], serde_json::json!([]), "{binary}");
    let declared: Vec<String> = binary["declared"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            format!(
                "{} {}",
                g["kernel"].as_str().unwrap(),
                g["target"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        declared,
        ["halve_bf16 sm_70", "halve_bf16 sm_75"],
        "{binary}"
    );

    // Embedded raw, without the declaration: the stubs are gaps, and nothing is written.
    std::fs::write(
        krate.join("src/main.rs"),
        "static FATBIN: &[u8] = include_bytes!(concat!(env!(\"FATKIT_KERNELS_DIR\"), \"/halve.fatbin\"));\n\
         fn main() { println!(\"{}\", std::hint::black_box(FATBIN).len()); }\n",
    )
    .unwrap();
    std::fs::remove_dir_all(dir.join("dist")).unwrap();
    let (code, out, err) = crate::ship::package::package(&dir);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains(": kernel halve_bf16: sm_75 (")
            && out
                .contains("compiled out for sm_75: the image CC 7.5 loads holds only a stub of it"),
        "{out}"
    );
    let written: Vec<_> = std::fs::read_dir(dir.join("dist"))
        .map(|r| r.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(written.is_empty(), "no archive: {written:?}");
}
