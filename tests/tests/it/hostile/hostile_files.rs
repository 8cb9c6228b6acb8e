//! Issue 41, files that are not what they seem: a profile or a header that is a FIFO or a
//! device is refused (never waited on, never read without end), a relative `--cache-dir` is
//! the directory it names wherever the compilers run, no probe file outlives a full disk, and
//! no vendor directory lies inside one of Cargo's own at any depth. Commands that could hang
//! run as processes of their own, stopped by a guard: a hang fails the test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fatkit_tests::{fatkit_in_process, nvrtc_available, temp_dir, toolchain};

const KERNEL: &str = "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }\n";

/// `cmd` to its end, or killed after `limit`: (exit code, everything printed), `None` on a hang.
fn guarded(cmd: &mut Command, limit: Duration) -> Option<(i32, String)> {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = temp_dir(&format!("guarded-{n}"));
    let (out, err) = (dir.join("out"), dir.join("err"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let text = format!(
                "{}{}",
                std::fs::read_to_string(&out).unwrap_or_default(),
                std::fs::read_to_string(&err).unwrap_or_default()
            );
            return Some((status.code().unwrap_or(-1), text));
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn fatkit() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fatkit-e2e"))
}

fn mkfifo(path: &Path) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
}

/// A profile in arch-profiles/ that is a FIFO hung `fatkit profiles` and `--profile`; one that
/// is a link to /dev/zero was killed for memory. Both are refused, naming the file.
#[test]
fn a_profile_that_is_a_fifo_or_a_device_is_refused() {
    let dir = temp_dir("hostile-profile-kinds");
    let profiles = dir.join("arch-profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    mkfifo(&profiles.join("fifo.toml"));
    std::os::unix::fs::symlink("/dev/zero", profiles.join("zero.toml")).unwrap();
    std::fs::write(dir.join("k.cu"), KERNEL).unwrap();
    for name in ["fifo", "zero"] {
        for args in [
            vec!["profiles", "show", name],
            vec![
                "build-kernels",
                "--offline",
                "--profile",
                name,
                "--src",
                ".",
            ],
        ] {
            let got = guarded(
                fatkit().args(&args).current_dir(&dir),
                Duration::from_secs(60),
            );
            let (code, text) = got.unwrap_or_else(|| panic!("{args:?} hangs"));
            assert_eq!(code, 2, "{args:?}: {text}");
            assert!(
                text.contains(&format!("{name}.toml")) && text.contains("not a regular file"),
                "{args:?}: {text}"
            );
        }
    }
    // Listing the profiles names the broken ones without reading them whole.
    let got = guarded(
        fatkit().arg("profiles").current_dir(&dir),
        Duration::from_secs(60),
    );
    assert!(got.is_some(), "fatkit profiles hangs");
}

/// A header linked to /dev/zero made cc1plus grow by a gigabyte a second until the job's time
/// limit; a FIFO header on a target NVRTC builds hung the build forever. Both are refused
/// before anything compiles, naming the source and the header.
#[test]
fn a_header_that_is_a_device_or_a_fifo_is_refused_before_compiling() {
    if toolchain().is_none() || !nvrtc_available() {
        return;
    }
    for (i, (profile, targets, kind)) in [
        ("nvcc", "\"sm_90\"", "zero"),
        ("nvrtc", "\"sm_70\"", "fifo"),
        ("nvrtc", "\"sm_70\"", "zero"),
    ]
    .iter()
    .enumerate()
    {
        let dir = temp_dir(&format!("hostile-header-kinds-{i}"));
        let src = dir.join("cuda-src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::create_dir_all(dir.join("arch-profiles")).unwrap();
        std::fs::write(
            dir.join(format!("arch-profiles/{profile}.toml")),
            format!("targets = [{targets}]\nptx = []\n"),
        )
        .unwrap();
        let header = src.join("h.cuh");
        match *kind {
            "fifo" => mkfifo(&header),
            _ => std::os::unix::fs::symlink("/dev/zero", &header).unwrap(),
        }
        std::fs::write(src.join("k.cu"), format!("#include \"h.cuh\"\n{KERNEL}")).unwrap();
        let args = fatkit_tests::build_kernels_args(&dir, profile);
        let got = guarded(
            fatkit().args(&args).env("FATKIT_JOB_TIMEOUT", "300"),
            Duration::from_secs(120),
        );
        let (code, text) = got.unwrap_or_else(|| panic!("{profile} {kind}: the build hangs"));
        assert_eq!(code, 2, "{profile} {kind}: {text}");
        assert!(
            text.contains("k.cu includes")
                && text.contains("h.cuh")
                && text.contains("refused before compiling"),
            "{profile} {kind}: {text}"
        );
    }
}

/// A workspace whose kernel package `kern` (vendored, so built in its own directory) lies below
/// the workspace root: a relative `--cache-dir`, given from the root, named another directory
/// where the compilers ran, and every compile failed in cc1plus.
#[test]
fn a_relative_cache_dir_is_the_directory_it_names() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("hostile-relative-cache");
    let kern = dir.join("kern");
    std::fs::create_dir_all(kern.join("src")).unwrap();
    std::fs::create_dir_all(kern.join("kernels")).unwrap();
    std::fs::write(kern.join("src/lib.rs"), "").unwrap();
    std::fs::write(kern.join("kernels/k.cu"), KERNEL).unwrap();
    std::fs::write(
        kern.join("Cargo.toml"),
        "[package]\nname = \"kern\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[package.metadata.fatkit]\nprofile = \"dev\"\nsources = [\"kernels\"]\nvendor = \"kernels/prebuilt\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        "[workspace]\nmembers = [\"kern\"]\nresolver = \"2\"\n",
    )
    .unwrap();
    let got = guarded(
        fatkit()
            .args([
                "build-kernels",
                "--offline",
                "--cache-dir",
                "relative-cache",
            ])
            .current_dir(&dir),
        Duration::from_secs(300),
    );
    let (code, text) = got.unwrap();
    assert_eq!(code, 0, "{text}");
    assert!(dir.join("relative-cache/sources").is_dir(), "{text}");
    assert!(!kern.join("relative-cache").exists(), "{text}");
    assert!(kern.join("kernels/prebuilt/k.fatbin").is_file(), "{text}");
}

/// Every `.fatkit-probe.*` file under `dir`.
fn probes(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(read) = std::fs::read_dir(dir) else {
        return;
    };
    for e in read.flatten() {
        let path = e.path();
        if path.is_dir() {
            probes(&path, out);
        } else if e
            .file_name()
            .to_string_lossy()
            .starts_with(".fatkit-probe.")
        {
            out.push(path);
        }
    }
}

/// A full disk (no byte may be written: `ulimit -f 0`) left `.fatkit-probe.*` files in the
/// cache and output directories for good. The build stops (exit 2) and leaves none.
#[test]
fn no_probe_file_outlives_a_full_disk() {
    let dir = temp_dir("hostile-full-disk");
    let src = dir.join("cuda-src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(dir.join("arch-profiles")).unwrap();
    std::fs::write(
        dir.join("arch-profiles/one.toml"),
        "targets = [\"sm_90\"]\nptx = []\n",
    )
    .unwrap();
    std::fs::write(src.join("k.cu"), KERNEL).unwrap();
    let args = fatkit_tests::build_kernels_args(&dir, "one").join(" ");
    let script = format!(
        "trap '' XFSZ; ulimit -f 0; exec {} {args}",
        env!("CARGO_BIN_EXE_fatkit-e2e")
    );
    let got = guarded(
        Command::new("sh").args(["-c", &script]),
        Duration::from_secs(120),
    );
    let (code, text) = got.unwrap();
    assert_eq!(code, 2, "{text}");
    let mut left = Vec::new();
    probes(&dir, &mut left);
    assert!(left.is_empty(), "{left:?}: {text}");
}

/// `vendor = "src/bin/x"` (or `tests/x`, `examples/x`, `benches/x`, `target/x`, `.git`) was
/// accepted, and a generated module there broke `cargo build`. A vendor directory inside one of
/// Cargo's own, at any depth, is refused before anything compiles.
#[test]
fn no_vendor_directory_lies_inside_one_of_cargos() {
    for (i, vendor) in [
        "src/bin/x",
        "src/kernels",
        "tests/x",
        "examples/x/y",
        "benches/x",
        "target/x",
        ".git",
        "kernels/.git/x",
    ]
    .iter()
    .enumerate()
    {
        let dir = temp_dir(&format!("hostile-vendor-{i}"));
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::write(dir.join("src/lib.rs"), "").unwrap();
        std::fs::write(dir.join("k.cu"), KERNEL).unwrap();
        let manifest = dir.join("Cargo.toml");
        std::fs::write(
            &manifest,
            format!(
                "[package]\nname = \"victim\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[package.metadata.fatkit]\nprofile = \"dev\"\nsources = [\"k.cu\"]\nvendor = {vendor:?}\n\n[workspace]\n"
            ),
        )
        .unwrap();
        let (code, out, err) = fatkit_in_process(&[
            "build-kernels",
            "--offline",
            "--manifest-path",
            manifest.to_str().unwrap(),
        ]);
        assert_eq!(code, 2, "{vendor}: {out}{err}");
        assert!(
            err.contains("is one of Cargo's directories"),
            "{vendor}: {err}"
        );
        assert!(!dir.join(vendor).join("k.rs").exists(), "{vendor}");
    }
}
