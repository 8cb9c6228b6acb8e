//! The build's failure classes from the adversarial run (issue 17) with real nvcc: names that
//! are paths, two builds into one directory, inputs missing from the cache key, environment
//! problems found after compiling, a compiler that waits on its input.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fatkit_tests::{fatkit_in_process, temp_dir, toolchain};

/// A `cuda-src/` with two modules (one includes `include/params.h`) and two profiles.
pub(crate) struct Project {
    pub(crate) dir: PathBuf,
}

impl Project {
    pub(crate) fn new(name: &str) -> Project {
        let dir = temp_dir(name);
        let src = dir.join("cuda-src");
        std::fs::create_dir_all(src.join("include")).unwrap();
        std::fs::create_dir_all(dir.join("arch-profiles")).unwrap();
        std::fs::write(src.join("include/params.h"), "#define SCALE 2.0f\n").unwrap();
        std::fs::write(
            src.join("a.cu"),
            "#include \"params.h\"\nextern \"C\" __global__ void ka(float* x) { x[threadIdx.x] *= SCALE; }\n",
        )
        .unwrap();
        std::fs::write(
            src.join("b.cu"),
            "extern \"C\" __global__ void kb(float* x) { x[threadIdx.x] += 1.0f; }\n",
        )
        .unwrap();
        for (profile, targets, ptx) in [
            ("two", "\"sm_80\", \"sm_90\"", "\"compute_90\""),
            ("one", "\"sm_90\"", ""),
            // sm_70: NVRTC 12.9's (CUDA 13 builds no sm_70), beside nvcc's sm_80.
            ("old", "\"sm_70\", \"sm_80\"", ""),
        ] {
            std::fs::write(
                dir.join(format!("arch-profiles/{profile}.toml")),
                format!("targets = [{targets}]\nptx = [{ptx}]\n"),
            )
            .unwrap();
        }
        Project { dir }
    }

    pub(crate) fn args(&self, profile: &str) -> Vec<String> {
        let mut args = fatkit_tests::build_kernels_args(&self.dir, profile);
        let include = self.dir.join("cuda-src/include");
        args.push(format!("--flag=-I{}", include.display()));
        args
    }

    /// (exit code, jobs run, everything printed).
    pub(crate) fn build_with(&self, args: &[String]) -> (u8, u64, String) {
        let (code, out, err) = fatkit_in_process(args);
        let run = out
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["event"] == "build_finished")
            .and_then(|v| v["jobs_run"].as_u64())
            .unwrap_or(0);
        (code, run, format!("{out}{err}"))
    }

    pub(crate) fn build(&self, profile: &str) -> (u8, u64, String) {
        self.build_with(&self.args(profile))
    }

    /// [`Project::build`] in a process of its own with `NAME=value` set: the tests of this
    /// binary run in parallel in one process, whose environment they share.
    pub(crate) fn build_in_env(&self, profile: &str, name: &str, value: &str) -> (u8, u64, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_fatkit-e2e"))
            .args(self.args(profile))
            .env(name, value)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let run = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["event"] == "build_finished")
            .and_then(|v| v["jobs_run"].as_u64())
            .unwrap_or(0);
        let code = out.status.code().unwrap_or(-1) as u8;
        (
            code,
            run,
            format!("{stdout}{}", String::from_utf8_lossy(&out.stderr)),
        )
    }
}

/// A module's three files agree: the manifest's entries, the `.rs` TARGETS and the
/// fatbin's entries are the same targets, and the `.rs` fingerprint is the fatbin's.
fn consistent(out: &Path, module: &str) -> Result<String, String> {
    let fatbin = std::fs::read(out.join(format!("{module}.fatbin"))).unwrap();
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.join(format!("{module}.manifest.json"))).unwrap(),
    )
    .unwrap();
    let rust = std::fs::read_to_string(out.join(format!("{module}.rs"))).unwrap();
    let container =
        fatkit_fatbin::Container::parse(&fatbin, fatkit_fatbin::Strictness::AnyKind).unwrap();
    let mut in_fatbin: Vec<String> = container
        .entries()
        .map(|e| e.target().unwrap().to_string())
        .collect();
    let mut in_manifest: Vec<String> = manifest["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["target"].as_str().unwrap().to_owned())
        .collect();
    let targets_line = rust
        .lines()
        .find(|l| l.starts_with("pub const TARGETS"))
        .unwrap()
        .to_owned();
    in_fatbin.sort();
    in_manifest.sort();
    let print = format!(
        "Some(({}, {:#018x}))",
        fatbin.len(),
        fatkit_arch::fingerprint::fingerprint(&fatbin)
    );
    if in_fatbin != in_manifest
        || !in_manifest
            .iter()
            .all(|t| targets_line.contains(&format!("\"{t}\"")))
        || !rust.contains(&print)
        || manifest["fatbin_size"] != fatbin.len()
    {
        return Err(format!(
            "{module}: fatbin {in_fatbin:?}, manifest {in_manifest:?}, .rs {targets_line}"
        ));
    }
    Ok(in_fatbin.join(" "))
}

#[test]
fn two_builds_with_different_profiles_into_one_directory_leave_whole_modules() {
    if toolchain().is_none() {
        return;
    }
    let p = Project::new("adv-concurrent");
    // Warm the cache: every round is then two builds of cache hits, racing on the outputs.
    for profile in ["two", "one"] {
        let (code, _, log) = p.build(profile);
        assert_eq!(code, 0, "{log}");
    }
    let fatkit = env!("CARGO_BIN_EXE_fatkit-e2e");
    let mut seen = std::collections::BTreeSet::new();
    for round in 0..100 {
        let children: Vec<_> = ["two", "one"]
            .iter()
            .map(|profile| {
                Command::new(fatkit)
                    .args(p.args(profile))
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        for module in ["a", "b"] {
            match consistent(&p.dir.join("out"), module) {
                Ok(targets) => {
                    seen.insert(targets);
                }
                Err(e) => panic!("round {round}: {e}"),
            }
        }
    }
    eprintln!("module target sets seen: {seen:?}");
}

#[test]
fn a_compile_environment_variable_is_part_of_the_cache_key() {
    if toolchain().is_none() {
        return;
    }
    let p = Project::new("adv-env");
    let (code, run, log) = p.build("one");
    assert_eq!((code, run), (0, 2), "{log}");
    let before = std::fs::read(p.dir.join("out/b.fatbin")).unwrap();
    let (code, run, log) = p.build_in_env("one", "NVCC_APPEND_FLAGS", "-lineinfo");
    assert_eq!((code, run), (0, 2), "the flag must compile again: {log}");
    assert_ne!(before, std::fs::read(p.dir.join("out/b.fatbin")).unwrap());
    let (code, run, log) = p.build("one");
    assert_eq!((code, run), (0, 0), "back to the first key: {log}");
}

#[test]
fn a_new_header_that_shadows_an_included_one_compiles_again() {
    if toolchain().is_none() {
        return;
    }
    let p = Project::new("adv-shadow");
    let (code, run, log) = p.build("one");
    assert_eq!((code, run), (0, 2), "{log}");
    let (code, run, log) = p.build("one");
    assert_eq!((code, run), (0, 0), "{log}");
    // The source's own directory is searched before the include directory.
    std::fs::write(p.dir.join("cuda-src/params.h"), "#define SCALE 3.0f\n").unwrap();
    let (code, run, log) = p.build("one");
    assert_eq!(
        (code, run),
        (0, 1),
        "a.cu reads the new params.h now: {log}"
    );
}

#[test]
fn an_unwritable_cache_or_output_is_one_exit_2_before_compiling() {
    let p = Project::new("adv-unwritable");
    // A file where a directory should be: unwritable even for root.
    let blocker = p.dir.join("blocker");
    std::fs::write(&blocker, "").unwrap();
    let mut args = p.args("one");
    let at = args.iter().position(|a| a == "--cache-dir").unwrap();
    args[at + 1] = blocker.join("cache").display().to_string();
    let (code, run, log) = p.build_with(&args);
    assert_eq!((code, run), (2, 0), "{log}");
    assert!(log.contains("the compile cache cannot be written"), "{log}");
    assert!(log.contains("--cache-dir or FATKIT_CACHE_DIR"), "{log}");
    assert_eq!(
        log.lines().filter(|l| l.starts_with("error")).count(),
        1,
        "{log}"
    );

    let mut args = p.args("one");
    let at = args.iter().position(|a| a == "--out").unwrap();
    args[at + 1] = blocker.join("out").display().to_string();
    let (code, run, log) = p.build_with(&args);
    assert_eq!((code, run), (2, 0), "{log}");
    assert!(
        log.contains("cannot be the output directory")
            && log.contains("blocker is a file, not a directory"),
        "{log}"
    );
    assert!(
        !log.contains("job_finished"),
        "found only after compiling: {log}"
    );
}

#[test]
fn nvcc_reads_no_stdin_and_a_hung_compile_is_stopped() {
    if toolchain().is_none() {
        return;
    }
    let p = Project::new("adv-stdin");
    std::fs::write(
        p.dir.join("cuda-src/b.cu"),
        "#include \"/dev/stdin\"\nextern \"C\" __global__ void kb(float* x) { x[0] = 1.0f; }\n",
    )
    .unwrap();
    // stdin a pipe that stays open: a compiler that reads it waits forever.
    let mut child = Command::new(env!("CARGO_BIN_EXE_fatkit-e2e"))
        .args(p.args("one"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(120) {
            child.kill().unwrap();
            panic!("the build waits on its stdin");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // A source that includes a FIFO no one writes: refused before anything compiles (issue 41:
    // the include is resolved first, and only regular files are read).
    let fifo = p.dir.join("cuda-src/pipe.h");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    std::fs::write(
        p.dir.join("cuda-src/b.cu"),
        "#include \"pipe.h\"\nextern \"C\" __global__ void kb(float* x) { x[0] = 1.0f; }\n",
    )
    .unwrap();
    let (code, _, log) = p.build_in_env("one", "FATKIT_JOB_TIMEOUT", "5");
    assert_eq!(code, 2, "{log}");
    assert!(
        log.contains("includes")
            && log.contains("pipe.h")
            && log.contains("refused before compiling"),
        "{log}"
    );
    // A name only the preprocessor makes (nvcc reads it where it is): the job is stopped at
    // the limit.
    std::fs::write(
        p.dir.join("cuda-src/b.cu"),
        "#define S_(x) #x\n#define S(x) S_(x)\n#include S(pipe.h)\nextern \"C\" __global__ void kb(float* x) { x[0] = 1.0f; }\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fatkit-e2e"))
        .args(p.args("one"))
        .env("FATKIT_JOB_TIMEOUT", "5")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{log}");
    assert!(log.contains("stopped after 5 s"), "{log}");
    assert!(log.contains("FATKIT_JOB_TIMEOUT"), "{log}");
}

#[test]
fn a_non_utf8_path_is_refused_not_mangled() {
    use std::os::unix::ffi::OsStrExt;
    let p = Project::new("adv-utf8");
    let odd = p.dir.join(std::ffi::OsStr::from_bytes(b"src-\xff"));
    std::fs::create_dir_all(&odd).unwrap();
    std::fs::copy(p.dir.join("cuda-src/b.cu"), odd.join("b.cu")).unwrap();
    let args = p.args("one");
    let at = args.iter().position(|a| a == "--src").unwrap();
    // Given through the process, as a user's shell would.
    let out = Command::new(env!("CARGO_BIN_EXE_fatkit-e2e"))
        .args(&args[..at + 1])
        .arg(&odd)
        .args(&args[at + 2..])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not UTF-8"), "{err}");
}

/// Issue 29: a header found only through an `-I` in the flags was not in the NVRTC job's
/// cache key: after an edit the sm_70 image (NVRTC's) was the old build while sm_80 (nvcc's)
/// was rebuilt, so a V100 computed one thing and every other GPU another. One header search
/// serves compiling, the cache key and the recorded inputs, for every compiler.
#[test]
fn a_header_found_through_a_flag_is_in_every_compilers_key() {
    if toolchain().is_none() {
        return;
    }
    let p = Project::new("adv-flag-include");
    let (code, run, log) = p.build("old");
    assert_eq!((code, run), (0, 4), "{log}");
    let image = |target: &str| fatkit_tests::image_of(&p.dir.join("out/a.fatbin"), target);
    let before = image("sm_70");
    // params.h lies in cuda-src/include, which only the flags' -I names.
    std::fs::write(
        p.dir.join("cuda-src/include/params.h"),
        "#define SCALE 5.0f\n",
    )
    .unwrap();
    let (code, run, log) = p.build("old");
    assert_eq!((code, run), (0, 2), "a.cu for sm_70 and sm_80: {log}");
    assert_ne!(before, image("sm_70"), "the sm_70 image is the old build");
}

/// Issue 29: the same sources built in two checkouts at different paths gave different
/// fatbins: nvcc names internal-linkage symbols after a hash of the source's path, and PTX
/// jobs ran with absolute paths. Every job (nvcc's cubins and PTX, NVRTC's) compiles from the
/// project root with relative paths: every module is the same byte for byte.
#[test]
fn two_checkouts_at_different_paths_build_the_same_bytes() {
    if toolchain().is_none() {
        return;
    }
    let a = Project::new("adv-checkout-one");
    let b = Project::new("adv-checkout-two-at-another-path");
    let internal = "namespace { __device__ __noinline__ float twice(float v) { return 2.0f * v; } }\nstatic __device__ __noinline__ float thrice(float v) { return 3.0f * v; }\nextern \"C\" __global__ void kc(float* x) { x[threadIdx.x] = twice(x[threadIdx.x]) + thrice(1.0f); }\n";
    let mut built = Vec::new();
    for p in [&a, &b] {
        std::fs::write(p.dir.join("cuda-src/c.cu"), internal).unwrap();
        std::fs::write(
            p.dir.join("arch-profiles/mixed.toml"),
            "targets = [\"sm_70\", \"sm_80\"]\nptx = [\"compute_90\"]\n",
        )
        .unwrap();
        let (code, _, log) = p.build("mixed");
        assert_eq!(code, 0, "{log}");
        let ptx = fatkit_tests::image_of(&p.dir.join("out/c.fatbin"), "compute_90");
        assert!(
            String::from_utf8_lossy(&ptx).contains("_INTERNAL_"),
            "c.cu must have internal-linkage symbols for this test to mean anything"
        );
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(p.dir.join("out"))
            .unwrap()
            .flatten()
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        files.sort();
        built.push(files);
    }
    let names = |f: &[(String, Vec<u8>)]| f.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&built[0]), names(&built[1]));
    for ((name, one), (_, two)) in built[0].iter().zip(&built[1]) {
        assert!(one == two, "{name} differs between the checkouts");
    }
}

/// Every `.json` under `dir`.
fn json_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            json_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "json") {
            out.push(p);
        }
    }
}

/// Issue 29: a cache entry's `.json` replaced by a link to `/dev/zero` was read without bound.
/// Every read of the cache goes through the bounded, regular-files-only reader: such an entry
/// is a miss, and the build compiles again.
#[test]
fn a_cache_record_that_links_to_an_endless_device_is_a_miss() {
    if toolchain().is_none() {
        return;
    }
    let p = Project::new("adv-cache-zero");
    let (code, run, log) = p.build("one");
    assert_eq!((code, run), (0, 2), "{log}");
    let mut records = Vec::new();
    json_files(&p.dir.join("cache"), &mut records);
    assert!(!records.is_empty());
    for r in &records {
        std::fs::remove_file(r).unwrap();
        std::os::unix::fs::symlink("/dev/zero", r).unwrap();
    }
    let (code, run, log) = p.build("one");
    assert_eq!((code, run), (0, 2), "every record a miss: {log}");
}

/// Issue 29: kernel-name constants of names that differ only in case were made by appending
/// `_` until free: cubic work, and a generated module quadratic in size.
#[test]
fn kernels_whose_names_differ_only_in_case_generate_a_linear_module() {
    if toolchain().is_none() {
        return;
    }
    let p = Project::new("adv-case-names");
    let kernels: String = (0..2000u32)
        .map(|i| {
            let name: String = (0..11)
                .map(|b| if i & (1 << b) == 0 { 'k' } else { 'K' })
                .collect();
            format!("extern \"C\" __global__ void {name}(float* x) {{ x[0] = {i}.0f; }}\n")
        })
        .collect();
    std::fs::write(p.dir.join("cuda-src/b.cu"), kernels).unwrap();
    let (code, _, log) = p.build("one");
    assert_eq!(code, 0, "{log}");
    let rust = std::fs::read_to_string(p.dir.join("out/b.rs")).unwrap();
    let constants = rust.matches("pub const KKKKKKKKKKK").count();
    assert_eq!(constants, 2000);
    assert!(rust.len() < 400_000, "{} bytes", rust.len());
}
