//! Issue 53, NVRTC's copies: the mirror NVRTC compiles from writes only inside the job's
//! stage, never wider than the source's mode, and leaves nothing behind; finding headers named
//! through macros is linear in their number. With the provisioned NVRTC.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Instant;

use fatkit_tests::{fatkit_in_process, nvrtc_available, temp_dir, toolchain};

/// A project whose one profile builds sm_70 only (NVRTC's: CUDA 13 builds no sm_70), with
/// `k.cu` as given; the build's arguments.
fn nvrtc_project(dir: &Path, source: &str) -> Vec<String> {
    std::fs::create_dir_all(dir.join("cuda-src")).unwrap();
    std::fs::create_dir_all(dir.join("arch-profiles")).unwrap();
    std::fs::write(
        dir.join("arch-profiles/seventy.toml"),
        "targets = [\"sm_70\"]\nptx = []\n",
    )
    .unwrap();
    std::fs::write(dir.join("cuda-src/k.cu"), source).unwrap();
    fatkit_tests::build_kernels_args(dir, "seventy")
}

/// Every file under `dir` named `name`.
fn files_named(dir: &Path, name: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(read) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in read.flatten() {
        let path = e.path();
        if e.file_type().unwrap().is_dir() {
            out.extend(files_named(&path, name));
        } else if e.file_name() == name {
            out.push(path);
        }
    }
    out
}

/// `#include "../../../../tmp/x/private/key"` (a 0600 file) made the mirror copy it outside
/// the job's stage (to `cache/tmp/.../private/key`), with mode 0644, left behind, and NVRTC's
/// log printed its first line; climbing further, NVRTC read it through the toolchain's include
/// directory, a file the build never hashed. What is copied is placed by its canonical path
/// inside the stage, and a name whose `..` climbs past the root is refused before NVRTC runs:
/// nothing of the file is printed, and it is neither changed nor copied anywhere after.
#[test]
fn the_nvrtc_mirror_writes_only_inside_its_stage() {
    if toolchain().is_none() || !nvrtc_available() {
        return;
    }
    let dir = temp_dir("nvrtc-mirror-escape");
    let private = dir.join("private");
    std::fs::create_dir_all(&private).unwrap();
    let key = private.join("key");
    std::fs::write(&key, "SECRET-FIRST-LINE\n").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let proj = dir.join("proj");
    let canonical = std::fs::canonicalize(&dir).unwrap();
    let depth = std::fs::canonicalize(proj.parent().unwrap())
        .unwrap()
        .components()
        .count()
        + 1;
    // Up past the root (two more `..` than the source's directory is deep), then down to the
    // key: the real path is the key; in a mirror resolved as written, two levels above it.
    let ups = "../".repeat(depth + 2);
    let rel = canonical.join("private/key");
    let include = format!("{ups}{}", rel.strip_prefix("/").unwrap().display());
    for (include, escapes) in [(include.as_str(), true), ("../../private/key", false)] {
        let _ = std::fs::remove_dir_all(&proj);
        let args = nvrtc_project(
            &proj,
            &format!("#include \"{include}\"\nextern \"C\" __global__ void k(float* x) {{ x[0] = 1.0f; }}\n"),
        );
        let (code, out, err) = fatkit_in_process(&args);
        assert_eq!(code, 1, "{include}: the key is no CUDA: {out}{err}");
        if escapes {
            let log = format!("{out}{err}");
            assert!(
                log.contains("climbs out of") && !log.contains("SECRET"),
                "{include}: {log}"
            );
        }
        assert_eq!(
            std::fs::read_to_string(&key).unwrap(),
            "SECRET-FIRST-LINE\n",
            "{include}"
        );
        let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{include}");
        assert_eq!(
            files_named(&proj, "key"),
            Vec::<std::path::PathBuf>::new(),
            "{include}"
        );
        assert_eq!(
            files_named(&dir, "key"),
            std::slice::from_ref(&key),
            "{include}"
        );
    }
}

/// Headers named through macros in an include directory, which the include scan cannot see:
/// NVRTC was run again for each, one at a time (320 / 640 / 1280 headers: 4.0 / 9.2 / 26.2 s).
/// After a few misses, a miss copies its directory's headers: four times the headers take
/// less than four times as long (before: 6.7 / 10.5 / 33.8 s here, 5x).
#[test]
fn nvrtc_finds_headers_named_through_macros_in_linear_time() {
    if toolchain().is_none() || !nvrtc_available() {
        return;
    }
    let mut seconds = Vec::new();
    // The shape `cargo xtask bench hostile` runs large.
    let shape = &fatkit_fuzz::hostile::BUILD_SHAPES[0];
    for n in [shape.small, 2 * shape.small, 4 * shape.small] {
        let dir = temp_dir(&format!("nvrtc-macro-headers-{n}"));
        let args = fatkit_fuzz::hostile::build_args(&(shape.make)(n, &dir));
        let start = Instant::now();
        let (code, out, err) = fatkit_in_process(&args);
        seconds.push(start.elapsed().as_secs_f64());
        assert_eq!(code, 0, "{out}{err}");
    }
    eprintln!("300 / 600 / 1200 headers through macros: {seconds:.2?} s");
    assert!(
        seconds[2] < 4.0 * seconds[0].max(0.5),
        "faster than linear growth: {seconds:.2?} s"
    );
}
