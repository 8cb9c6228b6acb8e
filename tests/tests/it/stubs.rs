//! Issue 42: kernels whose body is compiled out for a target (an `EXIT`- or trap-only stub)
//! are seen in every image kind, checked against cuobjdump's disassembly, and never counted as
//! running. Toolchain tier: Debian's nvcc 11.8 with its cuobjdump (Maxwell to Hopper), and
//! fatkit's CUDA 13.2 (Turing to Blackwell).
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fatkit_fatbin::inspect::{inspect, Depth};
use fatkit_fatbin::Limits;
use fatkit_tests::{debian_nvcc, fatkit_in_process, run, temp_dir, toolchain};

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

/// What `cuobjdump -sass` shows of each function, per cubin architecture: `returns` or `traps`
/// where nothing but a stack set-up (`MOV`/`LDC R1`), `NOP`s and never-executed (`@!PT`)
/// instructions come before an `EXIT` or `BPT.TRAP`, else `code`.
fn sass_bodies(sass: &str) -> BTreeMap<(String, String), &'static str> {
    let mut out = BTreeMap::new();
    let (mut arch, mut function, mut decided) = (String::new(), None::<String>, false);
    for line in sass.lines() {
        let t = line.trim();
        if let Some(a) = t.strip_prefix("arch = ") {
            arch = a.to_owned();
        } else if let Some(f) = t.strip_prefix("Function : ") {
            function = Some(f.to_owned());
            decided = false;
        } else if let (Some(f), false, true) = (&function, decided, t.starts_with("/*")) {
            // `/*0010*/   EXIT ;   /* 0x... */`
            let Some(ins) = t
                .split("*/")
                .nth(1)
                .map(|s| s.trim().trim_end_matches(';').trim())
            else {
                continue;
            };
            let ins = ins.split(';').next().unwrap_or(ins).trim();
            if ins.is_empty() || ins.starts_with("@!PT") || ins == "NOP" {
                continue;
            }
            if (ins.starts_with("MOV R1,") || ins.starts_with("LDC R1,")) && ins.contains("c[0x0]")
            {
                continue;
            }
            let body = match ins {
                "EXIT" => "returns",
                _ if ins.starts_with("BPT.TRAP") => "traps",
                _ => "code",
            };
            out.insert((arch.clone(), f.clone()), body);
            decided = true;
        }
    }
    out
}

/// What fatkit reads of each cubin's kernels: `returns`, `traps` or `code`.
fn fatkit_bodies(file: &Path) -> BTreeMap<(String, String), &'static str> {
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

fn audit(file: &Path, gpu: &str) -> (u8, String) {
    let (code, out, err) = fatkit_in_process(&["audit", file.to_str().unwrap(), "--gpu", gpu]);
    (code, format!("{out}{err}"))
}

fn json(file: &Path, gpu: &str) -> serde_json::Value {
    let (_, out, _) = fatkit_in_process(&["audit", file.to_str().unwrap(), "--gpu", gpu, "--json"]);
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
    let sass = run(&dir, &cuobjdump, &["-sass", fatbin.to_str().unwrap()]);
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

    // The verdicts: on a T4 the two stubs do not run, named, exit 1; a kernel written empty
    // (or trapping everywhere) is not a stub; on an A100 the stubs of sm_75 are not loaded.
    let (code, text) = audit(&fatbin, "T4");
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
    let (code, text) = audit(&fatbin, "A100");
    assert_eq!(code, 0, "{text}");
    assert!(!text.contains("compiled out"), "{text}");

    // In a host object (its .nv_fatbin section) the same.
    let mut args: Vec<&str> = gencode.iter().map(String::as_str).collect();
    args.push("-c");
    let object = build(&nvcc, &dir, "stubs.o", &args);
    let (code, text) = audit(&object, "T4");
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
    let (code, text) = audit(&fatbin, "T4");
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("2 compiled out for it")
            && text.contains("compiled out for compute_75: returns at once")
            && text.contains("compiled out for compute_75: traps")
            && text.contains("whose code of it is only ret;"),
        "{text}"
    );
    let (code, text) = audit(&fatbin, "A100");
    assert_eq!(code, 0, "{text}");
    // PTX alone: no image holds a body, so nothing is a stub (written or compiled out, the
    // code cannot tell).
    let alone = build(
        &tc.nvcc(),
        &dir,
        "alone.fatbin",
        &["--fatbin", "-gencode", "arch=compute_75,code=compute_75"],
    );
    let (_, text) = audit(&alone, "T4");
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
    assert_eq!(ours[&("sm_75".to_owned(), "exit_stub".to_owned())], "returns");
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
        .args(["-sass", fatbin.to_str().unwrap()])
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
    let (code, text) = audit(&fatbin, "RTX 5090");
    assert_eq!(code, 0, "{text}");
    let (code, text) = audit(&fatbin, "T4");
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("2 compiled out for it"), "{text}");
}
