//! Toolchain tier: several toolchains in one fatbin. NVRTC 12.9 (provisioned from its wheel)
//! and Debian's nvcc 11.8 beside the provisioned CUDA 13 nvcc: routing, pins, merged fatbins
//! read by cuobjdump, kernel lists that must agree, NVRTC's diagnostics.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::{Path, PathBuf};

use fatkit_tests::{
    cuobjdump_list, cuobjdump_toolkits, debian_nvcc, fatkit_in_process, nvrtc_available, temp_dir,
    toolchain,
};

/// A throwaway workspace with one profile `p` and the given sources.
struct Workspace {
    dir: PathBuf,
}

impl Workspace {
    fn new(name: &str, profile: &str, sources: &[(&str, &str)]) -> Workspace {
        let dir = temp_dir(name);
        std::fs::create_dir_all(dir.join("cuda-src/include")).unwrap();
        std::fs::create_dir_all(dir.join("arch-profiles")).unwrap();
        std::fs::write(dir.join("arch-profiles/p.toml"), profile).unwrap();
        std::fs::write(
            dir.join("cuda-src/include/h.cuh"),
            "#pragma once\n#define SCALE 2.0f\n",
        )
        .unwrap();
        for (name, text) in sources {
            std::fs::write(dir.join("cuda-src").join(name), text).unwrap();
        }
        Workspace { dir }
    }

    fn path(&self, p: &str) -> String {
        self.dir.join(p).display().to_string()
    }

    /// `build-kernels --profile p` (JSON): (exit code, final report, stderr).
    fn build(&self, out: &str) -> (u8, serde_json::Value, String) {
        let args = [
            "build-kernels",
            "--profile",
            "p",
            "--message-format",
            "json",
            "--profiles-dir",
            &self.path("arch-profiles"),
            "--src",
            &self.path("cuda-src"),
            "--out",
            &self.path(out),
            "--cache-dir",
            &self.path("cache"),
            "--jobs",
            "2",
        ];
        let (code, stdout, stderr) = fatkit_in_process(&args);
        let report = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["event"] == "build_finished")
            .unwrap_or_else(|| panic!("no report (exit {code}):\n{stdout}\n{stderr}"));
        (code, report, format!("{stdout}\n{stderr}"))
    }
}

const KERNEL: &str = "#include \"include/h.cuh\"\nextern \"C\" __global__ void k(float* x) { x[threadIdx.x] *= SCALE; }\nextern \"C\" __global__ void k2(float* x, int n) { if (threadIdx.x < n) x[threadIdx.x] = 0.0f; }\n";

/// `(compiler, version)` per entry target, from a module manifest.
fn manifest_compilers(path: &Path) -> Vec<(String, String, String)> {
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    m["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["target"].as_str().unwrap().to_owned(),
                e["compiler"].as_str().unwrap().to_owned(),
                e["toolkit"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The acceptance of issue 5: the repository's own `cargo xtask build-kernels` (default
/// profile `full`) makes, for every module, sm_70..sm_120 cubins and compute_120 PTX, the
/// sm_70 cubin by NVRTC 12.9 and the others by CUDA 13.
#[test]
fn repository_full_build_merges_nvrtc_and_nvcc() {
    let Some(tc) = toolchain() else { return };
    if !nvrtc_available() {
        return;
    }
    let out = temp_dir("repo-full");
    let out_arg = out.display().to_string();
    let (code, stdout, stderr) = fatkit_in_process(&["build-kernels", "--out", &out_arg]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("profile full:") && stdout.contains("sm_70 -> nvrtc 12.9"),
        "the report names the routes:\n{stdout}"
    );
    let sources = fatkit_build::pipeline::sources_in(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../cuda-src"),
    )
    .unwrap();
    assert!(sources.len() >= 6);
    let mut expected: Vec<(String, String)> = [
        "sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120",
    ]
    .iter()
    .map(|t| ("cubin".to_owned(), t.to_string()))
    .collect();
    expected.push(("ptx".to_owned(), "compute_120".to_owned()));
    expected.sort();
    for source in sources {
        let module = fatkit_build::pipeline::module_name(&source);
        let fatbin = out.join(format!("{module}.fatbin"));
        assert_eq!(cuobjdump_list(&tc, &fatbin), expected, "{module}");
        for (sm, toolkit) in cuobjdump_toolkits(&tc, &fatbin) {
            if sm == "70" {
                assert_eq!(toolkit, "129", "{module}: sm_70 must come from NVRTC 12.9");
            } else {
                assert!(
                    toolkit.starts_with("13."),
                    "{module}: sm_{sm} from {toolkit}"
                );
            }
        }
        let compilers = manifest_compilers(&out.join(format!("{module}.manifest.json")));
        for (target, compiler, version) in compilers {
            let want = if target == "sm_70" {
                ("nvrtc", "12.9")
            } else {
                ("nvcc", "13.2")
            };
            assert_eq!(
                (compiler.as_str(), version.as_str()),
                want,
                "{module} {target}"
            );
        }
    }
}

/// A profile pin routes sm_70 to Debian's nvcc 11.8 (with g++-11 chosen as its host
/// compiler); its cubin is merged into the same fatbin as CUDA 13's sm_80.
#[test]
fn pinned_nvcc_11_8_merges_into_a_cuda_13_fatbin() {
    let Some(tc) = toolchain() else { return };
    let Some(_) = debian_nvcc() else { return };
    let ws = Workspace::new(
        "pin-11-8",
        "targets = [\"sm_70\", \"sm_80\"]\nptx = []\n\n[toolchain]\nsm_70 = \"nvcc 11.8\"\n",
        &[("a.cu", KERNEL)],
    );
    let (code, report, log) = ws.build("out");
    assert_eq!(code, 0, "{log}");
    let fatbin = ws.dir.join("out/a.fatbin");
    let mut toolkits = cuobjdump_toolkits(&tc, &fatbin);
    toolkits.sort();
    assert_eq!(
        toolkits,
        [
            ("70".to_owned(), "118".to_owned()),
            ("80".to_owned(), "13.2".to_owned())
        ]
    );
    let routes = report["routes"].as_array().unwrap();
    let pinned = routes
        .iter()
        .find(|r| r["version"] == "11.8")
        .unwrap_or_else(|| panic!("{routes:?}"));
    assert_eq!(pinned["why"], "pinned");
    assert_eq!(pinned["targets"], serde_json::json!(["sm_70"]));
    let host = pinned["host"].as_str().unwrap();
    assert!(host.contains("g++-11"), "{host}");
    assert_eq!(
        manifest_compilers(&ws.dir.join("out/a.manifest.json")),
        [
            ("sm_70".into(), "nvcc".into(), "11.8".into()),
            ("sm_80".into(), "nvcc".into(), "13.2".into())
        ]
    );
    // audit reads the same toolkits cuobjdump printed.
    let (code, out, err) = fatkit_in_process(&["audit", "--json", &fatbin.display().to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let entries: Vec<(String, String)> = v["files"][0]["report"]["containers"][0]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["target"].as_str().unwrap().to_owned(),
                e["toolkit"].as_str().unwrap_or("none").to_owned(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        [
            ("sm_70".to_owned(), "11.8".to_owned()),
            ("sm_80".to_owned(), "13.2".to_owned())
        ]
    );
}

/// `audit --json` as `(kernel, targets)` rows.
fn audited(file: &Path) -> Vec<(String, Vec<String>)> {
    let (code, out, err) = fatkit_in_process(&["audit", "--json", &file.display().to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["files"][0]["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["name"].as_str().unwrap().to_owned(),
                k["targets"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_str().unwrap().to_owned())
                    .collect(),
            )
        })
        .collect()
}

/// The same source for the same target, by nvcc 13.2, NVRTC 12.9 and (when installed) nvcc
/// 11.8: `audit` reports the three fatbins identically, and each report says who built it.
#[test]
fn one_source_by_several_toolchains_audits_identically() {
    if toolchain().is_none() || !nvrtc_available() {
        return;
    }
    let mut pins = vec!["nvcc 13", "nvrtc 12.9"];
    if debian_nvcc().is_some() {
        pins.push("nvcc 11.8");
    }
    let ws = Workspace::new(
        "same-source",
        "targets = [\"sm_80\"]\n",
        &[("a.cu", KERNEL)],
    );
    let mut seen = Vec::new();
    for (i, pin) in pins.iter().enumerate() {
        std::fs::write(
            ws.dir.join("arch-profiles/p.toml"),
            format!("targets = [\"sm_80\"]\nptx = []\n[toolchain]\nsm_80 = \"{pin}\"\n"),
        )
        .unwrap();
        let out = format!("out{i}");
        let (code, report, log) = ws.build(&out);
        assert_eq!(code, 0, "{pin}: {log}");
        let route = &report["routes"][0];
        let built_by = format!(
            "{} {}",
            route["compiler"].as_str().unwrap(),
            route["version"].as_str().unwrap()
        );
        assert!(
            built_by.starts_with(&pin[..5]),
            "{pin}: built by {built_by}"
        );
        seen.push((pin, audited(&ws.dir.join(out).join("a.fatbin"))));
    }
    let first = &seen[0].1;
    assert_eq!(
        first,
        &[
            ("k".to_owned(), vec!["sm_80".to_owned()]),
            ("k2".to_owned(), vec!["sm_80".to_owned()])
        ]
    );
    for (pin, rows) in &seen {
        assert_eq!(rows, first, "{pin}");
    }
}

/// NVRTC sees no host code, so a template kernel that only a host-side launch instantiates is
/// silently missing from its image: the build fails naming the kernel, the target and NVRTC.
#[test]
fn a_kernel_nvrtc_drops_is_a_build_error() {
    if toolchain().is_none() || !nvrtc_available() {
        return;
    }
    let source = "template <typename T> __global__ void scale(T* p, T a) { p[threadIdx.x] *= a; }\n\
        #ifndef __CUDACC_RTC__\nvoid launch_scale(float* p, float a) { scale<float><<<1, 32>>>(p, a); }\n#endif\n\
        extern \"C\" __global__ void other(float* p) { p[0] = 1.0f; }\n";
    let ws = Workspace::new(
        "nvrtc-drops",
        "targets = [\"sm_70\", \"sm_80\"]\nptx = []\n[toolchain]\nsm_70 = \"nvrtc\"\n",
        &[("t.cu", source), ("a.cu", KERNEL)],
    );
    let (code, report, log) = ws.build("out");
    assert_eq!(code, 1, "{log}");
    let status: Vec<(&str, &str)> = report["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["module"].as_str().unwrap(), m["status"].as_str().unwrap()))
        .collect();
    assert_eq!(status, [("a", "built"), ("t", "failed")]);
    assert!(!ws.dir.join("out/t.fatbin").exists());
    let failures = report["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{failures:?}");
    let f = &failures[0];
    assert_eq!(f["target"], "sm_70");
    let message = f["message"].as_str().unwrap();
    assert!(
        message.contains(
            "kernel scale<float> is in the sm_80 images but missing from sm_70\nthe images without it: sm_70 by nvrtc 12.9"
        ) && message.contains("fix: NVRTC compiles no host code, so a template kernel"),
        "{message}"
    );
}

/// NVRTC's diagnostics are reported like nvcc's: file:line, target, toolchain, message.
#[test]
fn nvrtc_compile_errors_name_file_line_and_target() {
    if toolchain().is_none() || !nvrtc_available() {
        return;
    }
    let ws = Workspace::new(
        "nvrtc-error",
        "targets = [\"sm_80\"]\nptx = []\n[toolchain]\nsm_80 = \"nvrtc\"\n",
        &[(
            "c.cu",
            "extern \"C\" __global__ void kc(float* x) {\n  x[0] = ;\n}\n",
        )],
    );
    let (code, report, log) = ws.build("out");
    assert_eq!(code, 1, "{log}");
    let f = &report["failures"][0];
    assert!(
        f["location"].as_str().unwrap().ends_with("cuda-src/c.cu:2"),
        "{f}"
    );
    assert_eq!(f["target"], "sm_80");
    assert_eq!(f["toolchain"], "nvrtc 12.9");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("error: expected an expression"),
        "{f}"
    );
}
