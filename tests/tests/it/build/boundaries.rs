//! Issue 53, the build's boundaries, with real nvcc and NVRTC: what the preprocessor looked for
//! and did not find is part of a cached kernel's key, what a path resolves to is checked after
//! a compile, a file still settling is waited for, the include scan reads within limits, and
//! the NVRTC mirror writes only inside its stage.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fatkit_tests::{fatkit_in_process, nvrtc_available, temp_dir, toolchain};

use crate::hostile::adversarial_build::Project;

/// The kernel names of each entry of a module's manifest.
fn kernel_names(out: &Path, module: &str) -> Vec<String> {
    let text = std::fs::read(out.join(format!("{module}.manifest.json"))).unwrap();
    let manifest: serde_json::Value = serde_json::from_slice(&text).unwrap();
    let mut names: Vec<String> = manifest["entries"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["kernels"].as_array().unwrap().clone())
        .map(|k| k.as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// A project whose kernels are named by what `#if __has_include` finds: `extra.cuh` next to
/// the source, `more.cuh` in an include directory, `aliased.cuh` through an alias macro.
const PROBING: &str = "#if __has_include(\"extra.cuh\")\n#include \"extra.cuh\"\n#endif\n\
#if __has_include(<more.cuh>)\n#include <more.cuh>\n#endif\n\
#define HAS(x) __has_include(x)\n#if HAS(\"aliased.cuh\")\n#include \"aliased.cuh\"\n#endif\n\
#ifndef KA\n#define KA ka_plain\n#endif\n#ifndef KB\n#define KB kb_plain\n#endif\n#ifndef KC\n#define KC kc_plain\n#endif\n\
extern \"C\" __global__ void KA(float* x) { x[0] = 1.0f; }\n\
extern \"C\" __global__ void KB(float* x) { x[0] = 2.0f; }\n\
extern \"C\" __global__ void KC(float* x) { x[0] = 3.0f; }\n";

/// `#if __has_include("extra.cuh")`: a header that appeared after a build was no dependency
/// ("0 compiled, 1 cached", the old kernel), on nvcc, on NVRTC and in an include directory.
/// Every name a compile looked for and did not find is now recorded with its cache entry:
/// when one appears, the module is compiled again, on both routes.
#[test]
fn a_header_probed_for_and_absent_is_a_dependency_on_both_routes() {
    if toolchain().is_none() || !nvrtc_available() {
        return;
    }
    let p = Project::new("boundary-probe");
    let src = p.dir.join("cuda-src");
    std::fs::remove_file(src.join("a.cu")).unwrap();
    std::fs::write(src.join("b.cu"), PROBING).unwrap();
    let (code, run, log) = p.build("old");
    assert_eq!((code, run), (0, 2), "{log}");
    assert_eq!(
        kernel_names(&p.dir.join("out"), "b"),
        ["ka_plain", "kb_plain", "kc_plain"]
    );
    for (at, define, want) in [
        ("extra.cuh", "#define KA ka_extra\n", "ka_extra"),
        ("include/more.cuh", "#define KB kb_more\n", "kb_more"),
        ("aliased.cuh", "#define KC kc_aliased\n", "kc_aliased"),
    ] {
        std::fs::write(src.join(at), define).unwrap();
        let (code, run, log) = p.build("old");
        assert_eq!(
            (code, run),
            (0, 2),
            "{at} appeared: sm_70 (NVRTC) and sm_80 (nvcc) compile again: {log}"
        );
        assert!(
            kernel_names(&p.dir.join("out"), "b").contains(&want.to_owned()),
            "{at}: {log}"
        );
    }
    // Nothing more appeared: all cached.
    let (code, run, log) = p.build("old");
    assert_eq!((code, run), (0, 0), "{log}");
}

/// A probe whose name only the preprocessor makes cannot be covered by any key: refused
/// before compiling, naming the fix.
#[test]
fn a_probe_by_a_name_only_the_preprocessor_makes_is_refused() {
    if toolchain().is_none() {
        return;
    }
    let p = Project::new("boundary-opaque-probe");
    std::fs::write(
        p.dir.join("cuda-src/b.cu"),
        "#define STR_(x) #x\n#define STR(x) STR_(x)\n#if __has_include(STR(extra.cuh))\n#endif\nextern \"C\" __global__ void kb(float* x) { x[0] = 1.0f; }\n",
    )
    .unwrap();
    let (code, _, log) = p.build("one");
    assert_eq!(code, 2, "{log}");
    assert!(
        log.contains("__has_include(STR(extra.cuh))")
            && log.contains("write the name as a literal"),
        "{log}"
    );
}

/// In a vendored package the build-script check passed once a probed header appeared, and
/// the crate embedded the old kernel. The manifest now records the names looked for and not
/// found, and the check names the one that appeared; the build compiles it on both routes.
#[test]
fn a_probed_header_appearing_fails_the_vendored_check() {
    if toolchain().is_none() || !nvrtc_available() {
        return;
    }
    let dir = temp_dir("boundary-probe-vendored");
    let kernels = dir.join("kernels");
    std::fs::create_dir_all(&kernels).unwrap();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join("arch-profiles")).unwrap();
    std::fs::write(dir.join("src/lib.rs"), "").unwrap();
    std::fs::write(
        dir.join("arch-profiles/old.toml"),
        "targets = [\"sm_70\", \"sm_80\"]\nptx = []\n",
    )
    .unwrap();
    std::fs::write(kernels.join("k.cu"), PROBING).unwrap();
    let manifest = dir.join("Cargo.toml");
    std::fs::write(
        &manifest,
        "[package]\nname = \"probing\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[package.metadata.fatkit]\nprofile = \"old\"\nsources = [\"kernels/k.cu\"]\nvendor = \"kernels/prebuilt\"\n\n[workspace]\n",
    )
    .unwrap();
    let build = || {
        let (code, out, err) = fatkit_in_process(&[
            "build-kernels",
            "--offline",
            "--manifest-path",
            manifest.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{out}{err}");
    };
    build();
    let prebuilt = kernels.join("prebuilt");
    let config = serde_json::json!({
        "profile": "old",
        "sources": ["kernels/k.cu"],
        "vendor": "kernels/prebuilt",
    });
    let pkg = fatkit_package::workspace::kernel_package("probing", &manifest, &config).unwrap();
    let check = || {
        fatkit_package::prebuilt::check_modules(
            &pkg,
            &prebuilt,
            None,
            fatkit_package::prebuilt::Mode::Vendored,
        )
    };
    assert!(check().is_ok(), "{:?}", check().err());
    std::fs::write(kernels.join("extra.cuh"), "#define KA ka_extra\n").unwrap();
    let why = format!("{:?}", check().err());
    assert!(why.contains("kernels/extra.cuh appeared"), "{why}");
    build();
    assert!(kernel_names(&prebuilt, "k").contains(&"ka_extra".to_owned()));
    assert!(check().is_ok(), "{:?}", check().err());
}

/// A `cuda-src/k.cu` whose kernel is named by `<name.h>`, found in the include directory
/// `inc` (given by a flag), and a one-target profile; `name.h` as `make_name` makes it.
fn named_by_include_dir(dir: &Path, make_name: impl Fn(&Path)) -> Vec<String> {
    let src = dir.join("cuda-src");
    let inc = dir.join("inc");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&inc).unwrap();
    std::fs::create_dir_all(dir.join("arch-profiles")).unwrap();
    std::fs::write(
        dir.join("arch-profiles/one.toml"),
        "targets = [\"sm_90\"]\nptx = []\n",
    )
    .unwrap();
    make_name(&inc);
    std::fs::write(
        src.join("k.cu"),
        "#include <name.h>\nextern \"C\" __global__ void NAME(float* x) { x[0] = 1.0f; }\n",
    )
    .unwrap();
    let mut args = fatkit_tests::build_kernels_args(dir, "one");
    args.push(format!("--flag=-I{}", inc.display()));
    args
}

/// An nvcc that runs the real one between `before` and `after` (once: a marker file says it
/// did), for its compile calls.
fn nvcc_between(dir: &Path, before: &str, after: &str) -> PathBuf {
    let real = toolchain().unwrap().nvcc();
    let bin = dir.join("between-cuda/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let m = dir.join("done");
    let script = format!(
        "#!/bin/sh\ncase \" $* \" in *\" -cubin \"*|*\" --fatbin \"*) if [ ! -e {m} ]; then touch {m}; {before}; {real} \"$@\"; s=$?; {after}; exit $s; fi;; esac\nexec {real} \"$@\"\n",
        m = m.display(),
        real = real.display()
    );
    let nvcc = bin.join("nvcc");
    std::fs::write(&nvcc, script).unwrap();
    std::fs::set_permissions(&nvcc, std::fs::Permissions::from_mode(0o755)).unwrap();
    nvcc
}

/// A header symlink pointed elsewhere during a compile and back: the stamps after the compile
/// followed the link to the first header, unchanged, and the other header's kernel was stored
/// under the first one's key for good. The links and include directories on the way are now
/// checked: the compile runs again, and every build has the first header's kernel.
#[test]
fn a_header_link_pointed_elsewhere_during_a_compile_and_back_is_compiled_again() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("boundary-link-swap");
    let mut args = named_by_include_dir(&dir, |inc| {
        std::fs::write(inc.join("a.h"), "#define NAME kernel_a\n").unwrap();
        std::fs::write(inc.join("b.h"), "#define NAME kernel_b\n").unwrap();
        std::os::unix::fs::symlink("a.h", inc.join("name.h")).unwrap();
    });
    let link = dir.join("inc/name.h").display().to_string();
    let nvcc = nvcc_between(
        &dir,
        &format!("ln -sfn b.h {link}"),
        &format!("ln -sfn a.h {link}"),
    );
    args.push(format!("--nvcc={}", nvcc.display()));
    let (code, out, err) = fatkit_in_process(&args);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(kernel_names(&dir.join("out"), "k"), ["kernel_a"]);
    // The cache holds the first header's kernel under its key.
    let at = args.iter().position(|a| a == "--out").unwrap();
    args[at + 1] = dir.join("out2").display().to_string();
    let (code, out, err) = fatkit_in_process(&args);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(kernel_names(&dir.join("out2"), "k"), ["kernel_a"]);
}

/// The same with the include directory renamed away (another in its place) and back.
#[test]
fn an_include_directory_renamed_away_during_a_compile_and_back_is_compiled_again() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("boundary-dir-swap");
    let mut args = named_by_include_dir(&dir, |inc| {
        std::fs::write(inc.join("name.h"), "#define NAME kernel_a\n").unwrap();
    });
    let inc = dir.join("inc").display().to_string();
    let nvcc = nvcc_between(
        &dir,
        &format!("mv {inc} {inc}.away; mkdir {inc}; echo '#define NAME kernel_b' > {inc}/name.h"),
        &format!("rm -r {inc}; mv {inc}.away {inc}"),
    );
    args.push(format!("--nvcc={}", nvcc.display()));
    let (code, out, err) = fatkit_in_process(&args);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(kernel_names(&dir.join("out"), "k"), ["kernel_a"]);
    let at = args.iter().position(|a| a == "--out").unwrap();
    args[at + 1] = dir.join("out2").display().to_string();
    let (code, out, err) = fatkit_in_process(&args);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(kernel_names(&dir.join("out2"), "k"), ["kernel_a"]);
}

/// Headers a generator wrote just before the build, reached through macros (the include
/// scan cannot see them): the compile waited for the first one to settle, then found the
/// next one too recent and failed "kept changing while it was compiled" though nothing
/// changed during the build. A file settling when the build starts is waited for.
#[test]
fn headers_generated_just_before_the_build_are_waited_for_not_refused() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("boundary-settling");
    let src = dir.join("cuda-src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(dir.join("arch-profiles")).unwrap();
    std::fs::write(
        dir.join("arch-profiles/one.toml"),
        "targets = [\"sm_90\"]\nptx = []\n",
    )
    .unwrap();
    let n = 16;
    let mut source =
        "#define STR_(x) #x\n#define STR(x) STR_(x)\n#define GEN(n) STR(gen##n.h)\n".to_owned();
    for i in 0..n {
        source.push_str(&format!("#include GEN({i:02})\n"));
    }
    source.push_str("extern \"C\" __global__ void NAME(float* x) { x[0] = 1.0f; }\n");
    std::fs::write(src.join("k.cu"), source).unwrap();
    // The generator: one header every 50 ms, the last just before the build.
    for i in 0..n {
        let define = if i == n - 1 {
            "#define NAME generated\n"
        } else {
            "\n"
        };
        std::fs::write(src.join(format!("gen{i:02}.h")), define).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, out, err) = fatkit_in_process(&fatkit_tests::build_kernels_args(&dir, "one"));
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(kernel_names(&dir.join("out"), "k"), ["generated"]);
}

/// Runs `fatkit ARGS` in a process of its own, killed after `limit`: (exit code, output,
/// seconds), or a panic naming what kept it running.
fn fatkit_within(
    args: &[String],
    env: &[(&str, &str)],
    limit: Duration,
    what: &str,
) -> (i32, String, f64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fatkit-e2e"))
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            let _ = child.wait();
            panic!(
                "{what}: build-kernels still ran after {} s",
                limit.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.code().unwrap_or(-1),
        text,
        start.elapsed().as_secs_f64(),
    )
}

/// The include scan read a header to its end before any size check: a sparse 8 TiB header,
/// or `/proc/self/pagemap`, kept build-kernels reading for hours. The scan reads through the
/// bounded reader: over the input limit, or a pseudo file of the kernel, is refused at once.
#[test]
fn a_giant_or_pseudo_header_is_refused_without_reading_it() {
    if toolchain().is_none() {
        return;
    }
    let p = Project::new("boundary-giant-header");
    let big = p.dir.join("cuda-src/big.cuh");
    let file = std::fs::File::create(&big).unwrap();
    if file.set_len(8 << 40).is_err() {
        file.set_len(1 << 40).unwrap();
    }
    for (include, says) in [
        ("\"big.cuh\"", "over the"),
        ("\"/proc/self/pagemap\"", "pseudo file"),
    ] {
        std::fs::write(
            p.dir.join("cuda-src/b.cu"),
            format!("#include {include}\nextern \"C\" __global__ void kb(float* x) {{ x[0] = 1.0f; }}\n"),
        )
        .unwrap();
        let (code, log, _) = fatkit_within(&p.args("one"), &[], Duration::from_secs(60), include);
        assert_eq!(code, 2, "{include}: {log}");
        assert!(
            log.contains("refused before compiling") && log.contains(says),
            "{include}: {log}"
        );
    }
}

/// The scan stopped silently at 10,000 headers, so a FIFO past that point reached the
/// preprocessor, which waited for the job's time limit. Past the cap is an error naming it.
#[test]
fn more_headers_than_the_cap_is_an_error_not_a_silent_stop() {
    if toolchain().is_none() {
        return;
    }
    let p = Project::new("boundary-header-cap");
    let many = p.dir.join("cuda-src/many");
    std::fs::create_dir_all(&many).unwrap();
    let mut source = String::new();
    for i in 0..=10_000 {
        std::fs::write(many.join(format!("h{i:05}.h")), "").unwrap();
        source.push_str(&format!("#include \"many/h{i:05}.h\"\n"));
    }
    // The first header includes a FIFO no one writes.
    std::fs::write(many.join("h00000.h"), "#include \"pipe.h\"\n").unwrap();
    assert!(Command::new("mkfifo")
        .arg(many.join("pipe.h"))
        .status()
        .unwrap()
        .success());
    source.push_str("extern \"C\" __global__ void kb(float* x) { x[0] = 1.0f; }\n");
    std::fs::write(p.dir.join("cuda-src/b.cu"), source).unwrap();
    let (code, log, _) = fatkit_within(
        &p.args("one"),
        &[("FATKIT_JOB_TIMEOUT", "30")],
        Duration::from_secs(120),
        "10,001 headers",
    );
    assert_eq!(code, 2, "{log}");
    assert!(
        log.contains("more than 10000 headers") && log.contains("include fewer headers"),
        "{log}"
    );
}
