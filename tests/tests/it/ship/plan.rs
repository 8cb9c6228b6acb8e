//! `fatkit plan` (issue 45, in part): the targets of the committed example module (built by
//! nvcc for `full`), measured as a `.crate` ships them, and the set covering the most GPUs
//! within a budget: everything when it all fits (the `full` profile unchanged), a refusal
//! naming the smallest size when nothing does, a required GPU's cubin kept, no ZSTD under a
//! driver older than CUDA 12.4, and `--write` writing a profile fatkit reads back.
#![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]

use fatkit_tests::{fatkit_in_process, repo_root as root, temp_dir};

use crate::hostile::adversarial_outputs::build_package;

/// `fatkit plan` of the example module, copied out of its package (whose `.crate` would hold
/// the workspace's lock, which changes with every dependency): the module's files alone.
fn plan(args: &[&str]) -> (u8, String) {
    let dir = temp_dir("plan-modules");
    let prebuilt = root().join("crates/fatkit-example-kernels/kernels/prebuilt");
    for file in std::fs::read_dir(prebuilt).unwrap() {
        let file = file.unwrap().path();
        std::fs::copy(&file, dir.join(file.file_name().unwrap())).unwrap();
    }
    let mut all = vec!["plan", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    // Modules in no package ship as fatbins unless told (as `plan` without DIR weighs them).
    if !args.contains(&"--for") {
        all.extend_from_slice(&["--for", "crate"]);
    }
    let (code, out, err) = fatkit_in_process(&all);
    (code, format!("{out}{err}"))
}

fn line<'a>(text: &'a str, start: &str) -> &'a str {
    text.lines()
        .find(|l| l.trim_start().starts_with(start))
        .unwrap_or_else(|| panic!("no line {start:?}:\n{text}"))
}

#[test]
fn the_planner_weighs_what_each_target_adds() {
    // Everything fits: the full profile, unchanged, uncompressed.
    let (code, text) = plan(&["--budget", "10 MiB"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(
        line(&text, "targets:").trim(),
        "targets:  sm_70 sm_75 sm_80 sm_86 sm_89 sm_90 sm_100 sm_120 compute_120",
        "{text}"
    );
    assert_eq!(line(&text, "compress:").trim(), "compress: none", "{text}");
    assert!(
        text.contains("CC 12.0  from a cubin  GeForce RTX 5090"),
        "{text}"
    );
    // The driver, from the images themselves (sm_70 by CUDA 12.9, the rest by 13.2): R580
    // wherever a 13.2 cubin loads, R525 on the V100, and the PTX's 595 only on GPUs newer
    // than the tables, never as the package's floor (issue 55).
    let release = line(&text, "release:");
    assert!(
        release.contains("580.65.06 (CUDA 13.0), set by CC 7.5 8.0"),
        "{text}"
    );
    assert!(
        !release.contains("7.0 ") && !release.contains("595"),
        "{text}"
    );
    assert!(
        line(&text, "lower:")
            .contains("525.60.13 (CUDA 12.0) on CC 7.0 7.2 (sm_70 cubin from CUDA 12.9)"),
        "{text}"
    );
    assert!(
        line(&text, "newer GPUs:").contains("595.45.04 (CUDA 13.2), for compute_120 PTX (ISA 9.2)"),
        "{text}"
    );

    // Nothing fits: refused, naming the smallest size that meets the goal.
    let (code, text) = plan(&["--budget", "100"]);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("no choice of targets fits 100 bytes: the smallest that meets the goal is"),
        "{text}"
    );

    // A small budget leaves the RTX 5090 out; with it required, its cubin is kept.
    let (code, text) = plan(&["--budget", "4500"]);
    assert_eq!(code, 0, "{text}");
    assert!(!line(&text, "targets:").contains("sm_120"), "{text}");
    let (code, text) = plan(&["--budget", "4500", "--gpu", "RTX 5090"]);
    assert_eq!(code, 0, "{text}");
    assert!(line(&text, "targets:").contains("sm_120"), "{text}");
    assert!(text.contains("CC 12.0  from a cubin"), "{text}");

    // As a .crate, gzip finds what the targets' images share: compressing the entries first
    // only loses that, and the plan says so by not compressing (every target fits 6500).
    let (_, text) = plan(&["--budget", "6500"]);
    assert_eq!(line(&text, "compress:").trim(), "compress: none", "{text}");
    // The search's estimate is the size as written, within 1%.
    let size = line(&text, "size:");
    let numbers: Vec<u64> = size
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .filter(|&n| n > 1000)
        .collect();
    let [written, estimate] = numbers[..] else {
        panic!("{size}")
    };
    assert!(estimate.abs_diff(written) * 100 <= written, "{size}");

    // As bare fatbins, ZSTD keeps every target within 10,500 bytes, and says what it needs of
    // the driver; under a CUDA 12.2 driver it is never chosen, and fewer targets fit.
    let (_, text) = plan(&["--budget", "10500", "--for", "fatbin"]);
    assert_eq!(
        line(&text, "targets:").trim(),
        "targets:  sm_70 sm_75 sm_80 sm_86 sm_89 sm_90 sm_100 sm_120 compute_120",
        "{text}"
    );
    assert!(
        text.contains("compress: zstd (needs a CUDA 12.4-level driver)"),
        "{text}"
    );
    for budget in ["6000", "10500", "20000"] {
        let (_, text) = plan(&[
            "--budget",
            budget,
            "--for",
            "fatbin",
            "--driver",
            "535.104.05",
        ]);
        assert!(!text.contains("zstd"), "{budget}: {text}");
    }

    // The example's cubins but sm_70 are from CUDA 13.2: a CUDA 12.2 driver loads none of
    // them, so they are not counted for the GPUs that driver runs, and the plan says how to
    // ship them for it; sm_70's (CUDA 12.9) runs V100 and T4 there.
    let (code, text) = plan(&["--budget", "10 MiB", "--driver", "535.104.05"]);
    assert_eq!(code, 0, "{text}");
    assert!(!line(&text, "targets:").contains("sm_80"), "{text}");
    assert!(text.contains("CC 8.0   nothing runs"), "{text}");
    assert!(text.contains("CC 7.5   from a cubin"), "{text}");
    assert!(
        text.contains("not counted: sm_75 sm_80 sm_86 sm_89 sm_90 (cubins from CUDA 13.2, which need a CUDA 13.x driver; driver 535.104.05 is at the CUDA 12.2 level): to count them, build them with a CUDA 12.x nvcc"),
        "{text}"
    );

    // --write writes a profile fatkit reads.
    let dir = temp_dir("plan");
    let file = dir.join("planned.toml");
    let (code, text) = plan(&[
        "--budget",
        "10500",
        "--for",
        "fatbin",
        "--write",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{text}");
    let written = std::fs::read_to_string(&file).unwrap();
    let profile = fatkit_package::profile::parse(&file, &written).unwrap();
    assert_eq!(profile.compress.name(), "zstd", "{written}");
    // The budget goes with it: build-kernels holds a build with this profile to it.
    let budget = profile.budget.unwrap();
    assert_eq!(
        (budget.bytes, budget.shipped.name()),
        (10500, "fatbin"),
        "{written}"
    );
    assert!(
        line(&text, "targets:").contains(&profile.targets.to_string()),
        "{text}\n{written}"
    );
}

/// A vendoring package with a profile of its own: `full`'s targets within `budget`.
fn budgeted_package(dir: &std::path::Path, budget: &str) -> std::path::PathBuf {
    let budget = format!("budget = \"{budget}\"\nfor = \"crate\"\n");
    vendoring_package(dir, &budget)
}

/// A vendoring package whose profile (`full`'s targets) ends with `extra` lines.
fn vendoring_package(dir: &std::path::Path, extra: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join("arch-profiles")).unwrap();
    std::fs::write(dir.join("src/lib.rs"), "// the crate's own code\n").unwrap();
    for file in ["saxpy.cu", "common.cuh"] {
        std::fs::copy(
            root()
                .join("crates/fatkit-example-kernels/kernels")
                .join(file),
            dir.join(file),
        )
        .unwrap();
    }
    std::fs::write(
        dir.join("arch-profiles/release.toml"),
        format!(
            "targets = [\"sm_70\", \"sm_75\", \"sm_80\", \"sm_86\", \"sm_89\", \"sm_90\", \"sm_100\", \"sm_120\"]\nptx = [\"compute_120\"]\n{extra}"
        ),
    )
    .unwrap();
    let manifest = dir.join("Cargo.toml");
    std::fs::write(
        &manifest,
        "[package]\nname = \"budgeted\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[package.metadata.fatkit]\nprofile = \"release\"\nsources = [\"saxpy.cu\"]\nvendor = \"kernels/prebuilt\"\n\n[package.metadata.fatkit.kernels]\n\"*_bf16\" = { targets = \"sm_80+\" }\n\n[workspace]\n",
    )
    .unwrap();
    manifest
}

/// A profile's budget, or the package's own (`[package.metadata.fatkit] budget`), holds after
/// every build: over it, `build-kernels` fails naming the size, the budget and the plan that
/// fits; within it, it passes. (The same check holds every
/// vendored package to crates.io's 10 MiB, before `cargo publish` would refuse it.)
#[test]
fn a_build_over_its_budget_fails_naming_the_plan_that_fits() {
    if fatkit_tests::toolchain().is_none() {
        return;
    }
    let dir = temp_dir("plan-budget");
    let manifest = budgeted_package(&dir, "6 KB");
    let build = || build_package(&manifest);
    let (code, log) = build();
    assert_eq!(code, 2, "{log}");
    assert!(
        log.contains("over its budget of 6000 bytes;")
            && log.contains("bytes as a crate")
            && log.contains("with compress = \"")
            && log.contains("fatkit plan "),
        "{log}"
    );
    // A budget it meets.
    let manifest = budgeted_package(&dir, "1 MiB");
    let (code, log) = build();
    assert_eq!(code, 0, "{log}");
    // The package's own budget holds over its profile's, and changes nothing of what was
    // built (its modules' recorded inputs leave it out: nothing is compiled again).
    let recorded = dir.join("kernels/prebuilt/saxpy.manifest.json");
    let before = std::fs::read(&recorded).unwrap();
    let text = std::fs::read_to_string(&manifest).unwrap().replace(
        "vendor = \"kernels/prebuilt\"\n",
        "vendor = \"kernels/prebuilt\"\nbudget = \"6 KB\"\nfor = \"crate\"\n",
    );
    std::fs::write(&manifest, text).unwrap();
    let (code, log) = build();
    assert_eq!(code, 2, "{log}");
    assert!(log.contains("over its budget of 6000 bytes;"), "{log}");
    assert_eq!(
        std::fs::read(&recorded).unwrap(),
        before,
        "the recorded inputs changed"
    );
}

/// Without a directory, `plan` builds the workspace's units as build-kernels does (for
/// `--profile`, from the cache where it can) and plans each; a build that fails is an error
/// naming why, never a plan of nothing.
#[test]
fn plan_builds_its_candidates_when_given_no_directory() {
    if fatkit_tests::toolchain().is_none() {
        return;
    }
    let dir = temp_dir("plan-workspace");
    std::fs::create_dir_all(dir.join("cuda-src")).unwrap();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"planned\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    let kernel = "extern \"C\" __global__ void scale(float* x, float a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }\n";
    std::fs::write(dir.join("cuda-src/scale.cu"), kernel).unwrap();
    let manifest = dir.join("Cargo.toml");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "plan",
            "--offline",
            "--manifest-path",
            manifest.to_str().unwrap(),
            "--profile",
            "full",
            "--budget",
            "10 MiB",
        ];
        args.extend_from_slice(extra);
        fatkit_in_process(&args)
    };
    let (code, out, err) = run(&[]);
    assert_eq!(code, 0, "{out}{err}");
    // cuda-src's modules are built into target/fatkit: they ship in a binary, not a .crate.
    assert!(
        out.starts_with(
            "cuda-src: 1 modules, 9 targets measured; within 10.0 MiB (10485760 bytes) as fatbin:"
        ),
        "{out}"
    );
    let (code, crate_out, crate_err) = run(&["--for", "crate"]);
    assert_eq!(code, 2, "{crate_out}{crate_err}");
    assert!(
        crate_err.contains("--for crate: cuda-src is not vendored:")
            && crate_err.contains("--for fatbin"),
        "{crate_err}"
    );
    assert_eq!(
        line(&out, "targets:").trim(),
        "targets:  sm_70 sm_75 sm_80 sm_86 sm_89 sm_90 sm_100 sm_120 compute_120",
        "{out}"
    );
    // A source that does not compile: the error, and no plan.
    std::fs::write(dir.join("cuda-src/broken.cu"), "this is not CUDA\n").unwrap();
    let (code, out, err) = run(&[]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("the candidate modules did not build"), "{err}");
    assert!(!out.contains("targets:"), "{out}");
}

/// A vendored package is held to crates.io's 10 MiB with no budget of its own, before `cargo
/// publish` would refuse it: over it (an 11 MiB file no compression shrinks beside the
/// modules), `build-kernels` fails naming the limit, and `cargo package` confirms the `.crate`
/// is over it; under it, the estimate the check makes is within 5% of cargo's `.crate`.
#[test]
fn a_vendored_package_over_crates_io_limit_is_refused_before_publish() {
    if fatkit_tests::toolchain().is_none() {
        return;
    }
    let dir = temp_dir("plan-crates-io");
    let manifest = vendoring_package(&dir, "");
    let build = || build_package(&manifest);
    // cargo's own `.crate` of the package: its size.
    let package = || -> u64 {
        let target = dir.with_extension("target");
        let _ = std::fs::remove_dir_all(&target);
        let out = std::process::Command::new(std::env::var("CARGO").unwrap_or("cargo".into()))
            .args([
                "package",
                "--no-verify",
                "--allow-dirty",
                "--offline",
                "--target-dir",
            ])
            .arg(&target)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::metadata(target.join("package/budgeted-0.1.0.crate"))
            .unwrap()
            .len()
    };
    // Bytes no compressor shrinks (xorshift), `len` of them.
    let noise = |len: usize| -> Vec<u8> {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()[0]
            })
            .collect()
    };
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(dir.join("data/weights.bin"), noise(11 << 20)).unwrap();
    let (code, log) = build();
    assert_eq!(code, 2, "{log}");
    assert!(
        log.contains("bytes as a crate, over crates.io's limit of 10485760 bytes;"),
        "{log}"
    );
    assert!(package() > 10 << 20, "cargo's .crate is within the limit");

    // 9 MiB of it: within the limit, built, and the check's estimate agrees with cargo.
    std::fs::write(dir.join("data/weights.bin"), noise(9 << 20)).unwrap();
    let (code, log) = build();
    assert_eq!(code, 0, "{log}");
    let real = package();
    let (code, text) = {
        let (code, out, err) = fatkit_in_process(&[
            "plan",
            dir.join("kernels/prebuilt").to_str().unwrap(),
            "--budget",
            "10 MiB",
        ]);
        (code, format!("{out}{err}"))
    };
    assert_eq!(code, 0, "{text}");
    let size = line(&text, "size:");
    let written: u64 = size
        .split(['(', ' '])
        .find_map(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{size}"));
    assert!(
        written.abs_diff(real) * 20 <= real,
        "predicted {written}, cargo's .crate {real}"
    );
}

/// `package` holds the profile's budget as build-kernels does: its kernels over it, it fails
/// naming the size, the budget and the plan that fits, before any binary is built, and writes
/// no archive.
#[test]
fn package_fails_over_the_profiles_budget_and_writes_nothing() {
    if fatkit_tests::toolchain().is_none() {
        return;
    }
    let dir = crate::ship::package::downstream("plan-package", "");
    let profile = dir.join("arch-profiles/full.toml");
    let mut text = std::fs::read_to_string(&profile).unwrap();
    text.push_str("budget = \"2 KiB\"\nfor = \"fatbin\"\n");
    std::fs::write(&profile, text).unwrap();
    let (code, out, err) = crate::ship::package::package(&dir);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("bytes as a fatbin, over its budget of 2048 bytes;")
            && err.contains("fatkit plan "),
        "{err}"
    );
    assert!(!dir.join("dist").exists(), "{out}{err}");
}

/// What a compressed library needs of the driver: an sm_80 cubin built by Debian's CUDA 11.8
/// (a CUDA 11.8-level driver loads it), written by fatkit's writer ZSTD- and LZ4-compressed,
/// on an A100. Under a CUDA 12.2 driver the ZSTD one is UNKNOWN, naming the CUDA 12.4-level
/// driver ZSTD entries need (docs/ARCH_RULES.md section 3); at that driver it runs; the LZ4
/// one and the uncompressed one run under both.
#[test]
fn audit_says_what_a_compressed_library_needs_of_the_driver() {
    use fatkit_fatbin::container::Compression;
    let Some(nvcc) = fatkit_tests::debian_nvcc() else {
        return;
    };
    let dir = temp_dir("plan-compressed");
    std::fs::write(
        dir.join("k.cu"),
        "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n",
    )
    .unwrap();
    fatkit_tests::run(
        &dir,
        &nvcc,
        &["-cubin", "-arch=sm_80", "k.cu", "-o", "k.cubin"],
    );
    let cubin = std::fs::read(dir.join("k.cubin")).unwrap();
    let audit = |compression: Compression, driver: &str| -> (u8, String) {
        let file = dir.join(format!("k-{}.fatbin", compression.name()));
        let fatbin = fatkit_fatbin::write::write(&[fatkit_fatbin::write::Input {
            target: "sm_80".parse().unwrap(),
            data: &cubin,
            identifier: Some("k.cu"),
            compression,
        }])
        .unwrap();
        std::fs::write(&file, fatbin).unwrap();
        let (code, out, err) = fatkit_in_process(&[
            "audit",
            file.to_str().unwrap(),
            "--gpu",
            "A100",
            "--driver",
            driver,
        ]);
        (code, format!("{out}{err}"))
    };
    let (code, text) = audit(Compression::Zstd, "535.104.05");
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("UNKNOWN on A100")
            && text.contains("sm_80 ZSTD-compressed entries: need driver >= 550.54.14 (CUDA 12.4)")
            && text.contains("update the driver, or build without compression"),
        "{text}"
    );
    let (code, text) = audit(Compression::Zstd, "550.54.14");
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("yes on A100"), "{text}");
    for compression in [Compression::Lz4, Compression::None] {
        let (code, text) = audit(compression, "535.104.05");
        assert_eq!(code, 0, "{}: {text}", compression.name());
        assert!(!text.contains("compressed entries"), "{text}");
    }
}

/// A cubin whose note names a CUDA newer than the tables (the one-image fixture from "CUDA
/// 19.9") is not counted with no driver given, since which driver loads it is unknown: the
/// plan says no target runs and why, never an empty list alone; with a driver it names the
/// CUDA major that driver would need.
#[test]
fn a_cubin_from_a_cuda_newer_than_the_tables_is_not_counted_and_said() {
    let dir = temp_dir("plan-newer-cuda");
    std::fs::copy(
        root().join("tests/fixtures/gpu/one-image/cubin-from-cuda-19.9.fatbin"),
        dir.join("k.fatbin"),
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["plan", dir.to_str().unwrap(), "--budget", "10 MiB"];
        args.extend_from_slice(extra);
        let (code, out, err) = fatkit_in_process(&args);
        assert_eq!(code, 0, "{out}{err}");
        out
    };
    let text = run(&["--for", "fatbin"]);
    assert_eq!(
        line(&text, "targets:").trim(),
        "targets:  none (no target runs any GPU of the tables)",
        "{text}"
    );
    assert!(
        text.contains("not counted: sm_90 (cubins from CUDA 19.9, newer than the tables: which driver loads them is unknown); pass --driver"),
        "{text}"
    );
    let text = run(&["--for", "fatbin", "--driver", "580.65.06"]);
    assert!(
        text.contains("not counted: sm_90 (cubins from CUDA 19.9, which need a CUDA 19.x driver; driver 580.65.06 is at the CUDA 13.0 level)"),
        "{text}"
    );
}
