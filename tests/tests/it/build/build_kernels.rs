//! Toolchain tier: `build-kernels` with real nvcc. The outputs cuobjdump reads, the cache
//! (no-op rebuilds, header edits, a new target), compile errors, unbuildable profiles, and a
//! build killed halfway.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use fatkit_tests::{cuobjdump_extract, cuobjdump_list, fatkit_in_process, temp_dir, toolchain};

/// A throwaway workspace: `cuda-src/` with three modules, two of which include `h.cuh`.
struct Workspace {
    dir: PathBuf,
}

impl Workspace {
    fn new(name: &str, targets: &str) -> Workspace {
        let dir = temp_dir(name);
        let src = dir.join("cuda-src");
        std::fs::create_dir_all(src.join("include")).unwrap();
        std::fs::create_dir_all(dir.join("arch-profiles")).unwrap();
        std::fs::write(
            src.join("include/h.cuh"),
            "#pragma once\n#define SCALE 2.0f\n",
        )
        .unwrap();
        std::fs::write(src.join("a.cu"), "#include \"include/h.cuh\"\nextern \"C\" __global__ void ka(float* x) { x[threadIdx.x] *= SCALE; }\n").unwrap();
        std::fs::write(src.join("b.cu"), "#include \"include/h.cuh\"\nextern \"C\" __global__ void kb(float* x) { x[threadIdx.x] += SCALE; }\n").unwrap();
        std::fs::write(
            src.join("c.cu"),
            "extern \"C\" __global__ void kc(float* x) { x[threadIdx.x] = 0.0f; }\n",
        )
        .unwrap();
        let ws = Workspace { dir };
        ws.profile(targets);
        ws
    }

    fn profile(&self, targets: &str) {
        std::fs::write(
            self.dir.join("arch-profiles/t.toml"),
            format!("targets = [{targets}]\nptx = [\"compute_80\"]\n"),
        )
        .unwrap();
    }

    fn out(&self) -> PathBuf {
        self.dir.join("out")
    }

    fn args(&self) -> Vec<String> {
        fatkit_tests::build_kernels_args(&self.dir, "t")
    }

    /// Runs the build in process: (exit code, final report, human-readable output).
    fn build(&self) -> (u8, serde_json::Value, String) {
        let (code, out, err) = fatkit_in_process(&self.args());
        let report = out
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["event"] == "build_finished")
            .unwrap_or(serde_json::Value::Null);
        (code, report, format!("{out}{err}"))
    }
}

fn jobs_run(report: &serde_json::Value) -> u64 {
    report["jobs_run"].as_u64().unwrap()
}

#[test]
fn cache_rebuilds_exactly_what_changed() {
    if toolchain().is_none() {
        return;
    }
    let ws = Workspace::new("incremental", "\"sm_80\", \"sm_90\"");
    let (code, report, log) = ws.build();
    assert_eq!(code, 0, "{log}");
    assert_eq!(
        (report["jobs_total"].as_u64(), jobs_run(&report)),
        (Some(9), 9),
        "{log}"
    );

    // Nothing changed: nothing compiles, and no output is rewritten.
    let before = std::fs::metadata(ws.out().join("a.fatbin"))
        .unwrap()
        .modified()
        .unwrap();
    let (code, report, log) = ws.build();
    assert_eq!((code, jobs_run(&report)), (0, 0), "{log}");
    assert_eq!(
        std::fs::metadata(ws.out().join("a.fatbin"))
            .unwrap()
            .modified()
            .unwrap(),
        before
    );

    // A header edit recompiles the jobs of the two sources that include it, and only those.
    std::fs::write(
        ws.dir.join("cuda-src/include/h.cuh"),
        "#pragma once\n#define SCALE 3.0f\n",
    )
    .unwrap();
    let (code, report, log) = ws.build();
    assert_eq!((code, jobs_run(&report)), (0, 6), "{log}");

    // One more target: exactly one new job per source.
    ws.profile("\"sm_80\", \"sm_90\", \"sm_120\"");
    let (code, report, log) = ws.build();
    assert_eq!(
        (code, jobs_run(&report), report["jobs_total"].as_u64()),
        (0, 3, Some(12)),
        "{log}"
    );
    let listing = cuobjdump_list(&toolchain().unwrap(), &ws.out().join("c.fatbin"));
    let names: Vec<String> = listing.iter().map(|(_, t)| t.clone()).collect();
    assert_eq!(names, ["sm_120", "sm_80", "sm_90", "compute_80"]);
}

/// A PTX target shares the nvcc call of the cubin of its architecture (compute_80 with sm_80):
/// one front end for both, and the same bytes as each built alone.
#[test]
fn a_ptx_target_built_beside_its_cubin_is_the_bytes_each_makes_alone() {
    let Some(tc) = toolchain() else { return };
    let paired = Workspace::new("pair", "\"sm_80\", \"sm_90\"");
    let (code, report, log) = paired.build();
    assert_eq!(code, 0, "{log}");
    // 3 sources x (sm_80, sm_90, compute_80) in 3 x 2 nvcc calls.
    assert_eq!(
        (jobs_run(&report), report["compiler_calls"].as_u64()),
        (9, Some(6)),
        "{log}"
    );
    // sm_80 alone; compute_80 beside a cubin of another architecture, so alone too.
    let alone = Workspace::new("cubin-alone", "\"sm_80\"");
    std::fs::write(
        alone.dir.join("arch-profiles/t.toml"),
        "targets = [\"sm_80\"]\nptx = []\n",
    )
    .unwrap();
    let ptx_alone = Workspace::new("ptx-alone", "\"sm_90\"");
    for (ws, jobs) in [(&alone, 3), (&ptx_alone, 6)] {
        let (code, report, log) = ws.build();
        assert_eq!(code, 0, "{log}");
        assert_eq!(
            (jobs_run(&report), report["compiler_calls"].as_u64()),
            (jobs, Some(jobs)),
            "{log}"
        );
    }
    for module in ["a", "b", "c"] {
        let images = |ws: &Workspace| {
            let fatbin = ws.out().join(format!("{module}.fatbin"));
            let mut images = cuobjdump_extract(&tc, &fatbin, &ws.dir.join(format!("x-{module}")));
            images.sort();
            images
        };
        let mut each = images(&alone);
        each.extend(images(&ptx_alone));
        each.sort();
        assert_eq!(images(&paired), each, "{module}");
    }
}

#[test]
fn a_compile_error_fails_one_module_only() {
    if toolchain().is_none() {
        return;
    }
    let ws = Workspace::new("compile-error", "\"sm_80\"");
    std::fs::write(
        ws.dir.join("cuda-src/c.cu"),
        "extern \"C\" __global__ void kc(float* x) {\n  x[0] = ;\n}\n",
    )
    .unwrap();
    let (code, report, log) = ws.build();
    assert_eq!(code, 1, "{log}");
    let modules: Vec<(String, String)> = report["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["module"].as_str().unwrap().to_owned(),
                m["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        modules,
        [
            ("a".into(), "built".into()),
            ("b".into(), "built".into()),
            ("c".into(), "failed".into())
        ]
    );
    assert!(ws.out().join("a.fatbin").is_file() && !ws.out().join("c.fatbin").exists());
    let failures = report["failures"].as_array().unwrap();
    // sm_80 and compute_80; a and b in one call each, c's shared call failed and ran again
    // as two.
    assert_eq!(failures.len(), 2, "{log}");
    assert_eq!(report["compiler_calls"], 5, "{log}");
    let f = &failures[0];
    assert!(
        f["location"].as_str().unwrap().ends_with("cuda-src/c.cu:2"),
        "{f}"
    );
    assert_eq!(f["target"], "sm_80");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("error: expected an expression"),
        "{f}"
    );
    let command = f["command"].as_str().unwrap();
    assert!(
        command.contains("nvcc") && command.contains("code=sm_80") && command.contains("c.cu"),
        "{command}"
    );

    // The human format says the same: file:line, target, nvcc's message, the command.
    let args = ws.args();
    let at = args.iter().position(|a| a == "--message-format").unwrap();
    let argv: Vec<String> = args[..at].iter().chain(&args[at + 2..]).cloned().collect();
    let (code, out, _) = fatkit_in_process(&argv);
    assert_eq!(code, 1);
    assert!(
        out.contains("c.cu:2: sm_80: nvcc 13.2 failed")
            && out.contains("| ")
            && out.contains("command: "),
        "{out}"
    );
}

#[test]
fn a_target_no_toolchain_builds_is_refused_before_compiling() {
    let Some(tc) = toolchain() else { return };
    let tc = fatkit_toolchain::Toolchain::from(tc);
    let probe = fatkit_toolchain::probe(&tc).unwrap();
    if probe.targets.contains("sm_70".parse().unwrap()) {
        eprintln!("skipped: the default toolchain builds sm_70");
        return;
    }
    let ws = Workspace::new("unbuildable", "\"sm_70\", \"sm_80\"");
    // Only this toolchain: the library call, so that no other nvcc on the machine takes part.
    let profile = fatkit_package::profile::load(&ws.dir.join("arch-profiles/t.toml")).unwrap();
    use fatkit_build::pipeline::{Ask, BuildEnv, Request, Resources};
    let ask = Ask::new(
        profile,
        vec![ws.dir.join("cuda-src/a.cu")],
        ws.dir.clone(),
        ws.out(),
    );
    let cache = fatkit_build::cache::Cache::new(ws.dir.join("cache"));
    let with = Resources::new(cache, vec![(tc, probe)], Some(2), &BuildEnv::default()).unwrap();
    let req = Request { ask, with };
    let err = fatkit_build::pipeline::build(&req, &|_| {})
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("no toolchain found can build sm_70 (profile t)"),
        "{err}"
    );
    assert!(
        err.contains("nvcc 13.") && err.contains("builds sm_75 sm_80"),
        "{err}"
    );
    assert!(err.contains("fix: sm_70 needs CUDA 11.0 to 12.9"), "{err}");
    assert!(
        !ws.out().exists() && !ws.dir.join("cache").exists(),
        "something compiled"
    );
}

#[test]
fn outputs_survive_a_build_killed_halfway() {
    if toolchain().is_none() {
        return;
    }
    let ws = Workspace::new("killed", "\"sm_75\", \"sm_80\", \"sm_86\", \"sm_90\"");
    // A first complete build, so the outputs have a previous version.
    let (code, _, log) = ws.build();
    assert_eq!(code, 0, "{log}");
    let previous = std::fs::read(ws.out().join("a.fatbin")).unwrap();
    // Change every source, then kill the rebuild once some of its jobs have finished.
    for m in ["a", "b", "c"] {
        let path = ws.dir.join(format!("cuda-src/{m}.cu"));
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{text}// changed\n")).unwrap();
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_fatkit-e2e"))
        .args(ws.args())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    // Kill it as soon as the first job has finished; count every job it reported finished.
    use std::io::BufRead;
    let mut finished = 0;
    let mut killed = false;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if line.contains("\"job_finished\"") {
            finished += 1;
            if !killed {
                child.kill().unwrap(); // SIGKILL
                killed = true;
            }
        }
        assert!(
            !line.contains("build_finished"),
            "the build ended before it could be killed"
        );
    }
    child.wait().unwrap();
    assert!(killed && finished < 15, "finished {finished}");
    // Every output is the previous version or a complete new one.
    for m in ["a", "b", "c"] {
        let bytes = std::fs::read(ws.out().join(format!("{m}.fatbin"))).unwrap();
        fatkit_fatbin::Container::parse(&bytes, fatkit_fatbin::Strictness::KnownKindsOnly).unwrap();
        let manifest: serde_json::Value = serde_json::from_slice(
            &std::fs::read(ws.out().join(format!("{m}.manifest.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(manifest["module"], m);
    }
    assert!(
        std::fs::read(ws.out().join("a.fatbin")).unwrap() == previous
            || ws.out().join("a.fatbin").is_file()
    );
    // The next run succeeds and reuses every job that finished before the kill.
    let (code, report, log) = ws.build();
    assert_eq!(code, 0, "{log}");
    assert!(
        jobs_run(&report) <= 15 - finished,
        "finished {finished} before the kill; {log}"
    );
    assert!(jobs_run(&report) > 0, "{log}");
    assert!(std::fs::read_dir(ws.out())
        .unwrap()
        .flatten()
        .all(|e| !e.file_name().to_string_lossy().ends_with(".fatkit-tmp")));
}

/// The repository's own kernels for the `modern` profile: every module lists exactly the
/// profile's cubins and PTX, every cubin cuobjdump extracts is one nvcc produced, and the
/// generated Rust compiles.
#[test]
fn repository_kernels_for_the_modern_profile() {
    let Some(tc) = toolchain() else { return };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned();
    let dir = temp_dir("modern");
    let mut argv: Vec<String> = [
        "build-kernels",
        "--profile",
        "modern",
        "--offline",
        "--message-format",
        "json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for (flag, path) in [
        ("--src", root.join("cuda-src")),
        ("--out", dir.join("out")),
        ("--cache-dir", dir.join("cache")),
    ] {
        argv.push(flag.to_owned());
        argv.push(path.display().to_string());
    }
    let (code, out, err) = fatkit_in_process(&argv);
    assert_eq!(code, 0, "{out}{err}");

    let profile = fatkit_package::profile::ProfileSet::built_in()
        .load("modern")
        .unwrap();
    let mut expected: Vec<(String, String)> = profile
        .targets
        .iter()
        .map(|t| {
            (
                if t.is_cubin() { "cubin" } else { "ptx" }.to_owned(),
                t.to_string(),
            )
        })
        .collect();
    expected.sort();
    // Every object nvcc produced, by content.
    let mut produced = std::collections::HashSet::new();
    let mut stack = vec![dir.join("cache/objects")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_none() {
                produced.insert(std::fs::read(&p).unwrap());
            }
        }
    }
    let sources: Vec<PathBuf> = std::fs::read_dir(root.join("cuda-src"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "cu"))
        .collect();
    assert!(sources.len() >= 6);
    for source in &sources {
        let module = source.file_stem().unwrap().to_string_lossy().into_owned();
        let fatbin = dir.join("out").join(format!("{module}.fatbin"));
        assert_eq!(cuobjdump_list(&tc, &fatbin), expected, "{module}");
        for (kind, bytes) in cuobjdump_extract(&tc, &fatbin, &dir.join(format!("x-{module}"))) {
            if kind == "cubin" {
                assert!(
                    produced.contains(&bytes),
                    "{module}: an extracted cubin is not one nvcc produced"
                );
            }
        }
    }
    // A second run compiles nothing.
    let (code, out, _) = fatkit_in_process(&argv);
    assert_eq!(code, 0);
    let report: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(report["jobs_run"], 0, "{out}");

    // The generated modules compile, with their include_bytes! and constants.
    let lib = dir.join("check.rs");
    let includes: String = sources
        .iter()
        .map(|s| {
            let m = s.file_stem().unwrap().to_string_lossy();
            format!(
                "pub mod {m} {{ include!({:?}); }}\n",
                dir.join("out").join(format!("{m}.rs"))
            )
        })
        .collect();
    std::fs::write(&lib, format!("{includes}pub fn check() -> usize {{ softmax::FATBIN.len() + saxpy::kernels::SAXPY.len() + (softmax::FATBIN.as_ptr() as usize % 8) + saxpy::IMAGES.len() + saxpy::IMAGES[0].2.len() }}\n")).unwrap();
    let status = Command::new("rustc")
        .args(["--edition", "2021", "--crate-type", "lib", "--out-dir"])
        .arg(&dir)
        .arg(&lib)
        .status()
        .unwrap();
    assert!(status.success(), "the generated Rust does not compile");
}

/// The installed binary, human progress on stderr, worker threads printing while the main
/// thread runs: it must finish (a lock held on stderr by main once made it hang forever).
#[test]
fn the_binary_builds_with_human_progress_and_exits() {
    if toolchain().is_none() {
        return;
    }
    let ws = Workspace::new("binary", "\"sm_80\", \"sm_90\"");
    let args: Vec<String> = {
        let args = ws.args();
        let at = args.iter().position(|a| a == "--message-format").unwrap();
        args[..at].iter().chain(&args[at + 2..]).cloned().collect()
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_fatkit-e2e"))
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("fatkit build-kernels did not finish in 180 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("[  9/9]"), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("9 jobs: 9 compiled"));
}

/// A kernel whose signature depends on `__CUDA_ARCH__` (a `double` on sm_80, a `float` below)
/// is refused: no launch fits both images. The failure names the kernel, the parameter and the
/// targets of each layout; the other modules are written with their parameters recorded.
#[test]
fn a_kernel_whose_images_disagree_on_its_parameters_is_refused() {
    if toolchain().is_none() {
        return;
    }
    let ws = Workspace::new("params-disagree", "\"sm_75\", \"sm_80\"");
    std::fs::write(
        ws.dir.join("cuda-src/c.cu"),
        "#if __CUDA_ARCH__ >= 800\nextern \"C\" __global__ void kc(float* x, double s) { x[0] = s; }\n#else\nextern \"C\" __global__ void kc(float* x, float s) { x[0] = s; }\n#endif\n",
    )
    .unwrap();
    let (code, report, log) = ws.build();
    assert_eq!(code, 1, "{log}");
    let failures = report["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{log}");
    let f = &failures[0];
    assert_eq!(f["kind"], "params_disagree", "{f}");
    let message = f["message"].as_str().unwrap();
    assert!(
        message.starts_with("kernel kc: its images disagree on parameter 1: 8 bytes at offset 8 in sm_80 compute_80, 4 bytes at offset 8 in sm_75")
            || message.starts_with("kernel kc: its images disagree on parameter 1: 4 bytes at offset 8 in sm_75, 8 bytes at offset 8 in sm_80 compute_80"),
        "{message}"
    );
    assert!(
        message.contains("fix: give kc the same parameters on every architecture"),
        "{message}"
    );
    assert!(!ws.out().join("c.fatbin").exists());
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ws.out().join("a.manifest.json")).unwrap()).unwrap();
    assert_eq!(
        manifest["kernels"][0]["params"],
        serde_json::json!([{ "offset": 0, "size": 8 }])
    );
    let rust = std::fs::read_to_string(ws.out().join("a.rs")).unwrap();
    assert!(rust.contains("(\"ka\", &[(0, 8)]),"), "{rust}");
}
