//! `cargo xtask bench host-crates`: public crates whose `.cu` files hold host launchers
//! (candle-rotary, built by bindgen_cuda's `build_lib`; mistralrs-paged-attn, by cudaforge),
//! fetched from crates.io at run time and checked against the index's sha256, never copied
//! into this repository. Each is built as its author would after the README's migration: a
//! throwaway crate whose build.rs calls `Build::compile_library` over the crate's sources with
//! the crate's own flags, for a profile (`full` by default), with an empty compile cache (the
//! provisioned toolchains are shared). Then:
//!
//! - the binary linking every module passes `fatkit audit --require PROFILE`;
//! - cuobjdump lists, for every object of the library, one image of every target of the profile;
//! - the cold build (the whole `cargo build`, dependencies already compiled) is timed against
//!   the crate's own tool for one architecture (one `nvcc -c --gpu-architecture=sm_80` per file,
//!   all files at once, as bindgen_cuda and cudaforge run them) and against nvcc with every
//!   `-gencode` of the profile the newest nvcc builds and `--threads 0`, one call per file, all
//!   files at once.
//!
//! A build that fails or is refused is reported with fatkit's message: that is the finding.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use fatkit_cli::{Error, Outcome, Result};
use fatkit_toolchain as toolchain;

use crate::real_crates::{fetch, unpack};

mod check;
use check::check;

/// A public crate with host-code sources: the files its build script compiles (relative to
/// the crate's root), those it leaves out, its nvcc flags, and what its author declares after
/// the migration: sources built for some targets only (`Build::file_targets`) and kernels
/// built for some only (`Build::kernel_targets`).
pub(crate) struct HostCrate {
    pub(crate) name: &'static str,
    pub(crate) version: &'static str,
    files: &'static [&'static str],
    /// File-name globs its build script excludes for every architecture fatkit builds.
    exclude: &'static [&'static str],
    flags: &'static [&'static str],
    file_targets: &'static [(&'static str, &'static str)],
    kernel_targets: &'static [(&'static str, &'static str)],
}

/// The nvcc flags both crates' build scripts pass (their kernels come from vLLM), less
/// `--verbose` and `--ptxas-options=-v`, which only print.
const VLLM_FLAGS: &[&str] = &[
    "-std=c++17",
    "-O3",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_HALF2_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
    "--use_fast_math",
];

pub(crate) const CRATES: &[HostCrate] = &[
    HostCrate {
        name: "candle-rotary",
        version: "0.0.1",
        files: &["kernels/rotary.cu"],
        exclude: &[],
        flags: VLLM_FLAGS,
        file_targets: &[],
        kernel_targets: &[],
    },
    HostCrate {
        name: "mistralrs-paged-attn",
        version: "0.8.1",
        // Its build.rs: `.source_glob("src/cuda/*.cu")`; `-DENABLE_FP8` only when the one
        // architecture it builds is sm_80 or newer, so not for a profile with sm_70.
        files: &["src/cuda/*.cu"],
        exclude: &[],
        flags: VLLM_FLAGS,
        file_targets: &[],
        kernel_targets: &[],
    },
    HostCrate {
        name: "mistralrs-quant",
        version: "0.8.1",
        // Its build.rs (cudaforge): `.source_glob("kernels/*/*.cu")`; for a GPU of CC 8.0 or
        // newer it excludes the `dummy_*.cu` and `*_dummy.cu` stand-ins, below it the sources
        // that need sm_80 throughout (Marlin's mma.sync, cp.async and ldmatrix; FP8; WMMA on
        // bf16). Built for every GPU at once, the real ones are declared for sm_80 and newer.
        files: &["kernels/*/*.cu"],
        exclude: &["dummy_*.cu", "*_dummy.cu"],
        flags: VLLM_FLAGS,
        // afq.cu too: its bf16 `dequant_value` is defined for sm_80 and newer only (ptxas:
        // unresolved extern function below), which the crate's own build meets on a T4.
        file_targets: &[
            ("marlin_*.cu", "sm_80+"),
            ("*_fp8.cu", "sm_80+"),
            ("*_fp8_gemm.cu", "sm_80+"),
            ("*_wmma.cu", "sm_80+"),
            ("afq.cu", "sm_80+"),
            // CUB's device-wide algorithms: CUDA 12.4's CUB (sm_70) names its kernels
            // differently from CUDA 13's, and the host code registers one toolkit's names, so
            // these are built by CUDA 13 alone (docs/BUILDS.md, "One architecture list per
            // module").
            ("ops.cu", "sm_75+"),
            ("dequant.cu", "sm_75+"),
        ],
        // Their bodies (gemv) or instantiations (hqq) under `#if __CUDA_ARCH__ >= 800`.
        kernel_targets: &[
            ("gemv_kernel_batched<__nv_bfloat16, *>", "sm_80+"),
            ("dequantize_*_kernel<__nv_bfloat16>", "sm_80+"),
            // ops.cu's bf16 nonzero count and select (CUB over a bf16 transform iterator),
            // under `#if __CUDA_ARCH__ >= 800`.
            ("*NonZeroOp<__nv_bfloat16>*", "sm_80+"),
        ],
    },
];

/// One crate's result.
struct Row {
    krate: String,
    files: usize,
    /// The cold `cargo build`, when it succeeded, and its peak memory (KiB, largest process).
    fatkit: Option<f64>,
    peak_kib: Option<u64>,
    one_arch: Option<f64>,
    every_gencode: Option<f64>,
    /// Every target of the profile: `every_gencode`, and at once an nvcc 12.4 for the targets
    /// CUDA 13.2 cannot build (sm_70); `None` without one, or if it failed.
    every_target: Option<f64>,
    problems: Vec<String>,
}

pub fn run(profile: &str, only: &[String]) -> Result<Outcome> {
    let targets = fatkit_package::profile::ProfileSet::built_in()
        .load(profile)?
        .all_targets();
    let (tc, cuobjdump) = crate::real_crates::default_toolchain()?;
    let cache = toolchain::cache_dir().map_err(Error::from)?;
    let store = cache.join("corpus/crates");
    std::fs::create_dir_all(&store)?;
    let root = crate::harness::workspace_root();
    let scratch = root.join("target/bench-host-crates");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;

    let mut rows = Vec::new();
    for krate in CRATES.iter().filter(|c| {
        only.is_empty()
            || only
                .iter()
                .any(|o| *o == c.name || *o == format!("{}@{}", c.name, c.version))
    }) {
        let label = format!("{}@{}", krate.name, krate.version);
        eprintln!("bench: {label}");
        let file = fetch(krate.name, krate.version, &store)?;
        unpack(&file, &scratch)?;
        let unpacked = scratch.join(format!("{}-{}", krate.name, krate.version));
        let files = crate::crate_files::expand(&unpacked, krate.files, krate.exclude)?;
        let mut row = Row {
            krate: label,
            files: files.len(),
            fatkit: None,
            peak_kib: None,
            one_arch: None,
            every_gencode: None,
            every_target: None,
            problems: Vec::new(),
        };
        let ws = workspace(&root, krate, &unpacked, &files, profile)?;
        // A fresh compile cache that shares the provisioned toolchains.
        let cold = scratch.join(format!("cache-{}", krate.name));
        std::fs::create_dir_all(&cold)?;
        std::os::unix::fs::symlink(cache.join("toolchains"), cold.join("toolchains"))?;
        // Dependencies first (fatkit-build and its tree), with a profile of one target that
        // the timed build then leaves: the build script runs again, nothing else does.
        std::fs::write(ws.join("warm.toml"), "targets = [\"sm_80\"]\nptx = []\n")?;
        let warm = cargo_build(&ws, &[("FATKIT_PROFILE", ws.join("warm.toml").as_os_str())])?;
        if !warm.0 {
            row.problems
                .push(format!("warming the dependencies failed:\n{}", warm.1));
            rows.push(row);
            continue;
        }
        let start = Instant::now();
        let (ok, text, peak) = cargo_build(&ws, &[("FATKIT_CACHE_DIR", cold.as_os_str())])?;
        let seconds = start.elapsed().as_secs_f64();
        row.peak_kib = peak;
        eprintln!(
            "bench: {}: cold cargo build for {profile}: {seconds:.1} s ({})",
            row.krate,
            if ok { "ok" } else { "failed" }
        );
        if ok {
            row.fatkit = Some(seconds);
            eprintln!(
                "bench: {}: peak memory of the build's largest process: {}",
                row.krate,
                peak.map_or_else(|| "-".to_owned(), |k| format!("{} MiB", k / 1024))
            );
            check(&ws, krate, profile, &targets, &cuobjdump, &mut row)?;
        } else {
            row.problems.push(format!(
                "cargo build for {profile} failed after {seconds:.1} s:\n{}",
                crate::harness::error_of(&text)
            ));
        }
        time_baselines(&tc, (&unpacked, &files), krate, &targets, &mut row)?;
        rows.push(row);
    }
    if rows.is_empty() {
        return Err(crate::harness::failed(format!(
            "no crate named {}; the crates are: {}",
            only.join(", "),
            CRATES.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")
        )));
    }
    print(profile, &targets, &rows);
    Ok(if rows.iter().all(|r| r.problems.is_empty()) {
        Outcome::Ok
    } else {
        Outcome::Finding
    })
}

/// The crate's sources built by plain nvcc, timed into `row`: for sm_80 alone (the crates' own
/// tools), with every `-gencode` CUDA 13.2 builds of each source's targets (its declaration's,
/// else the profile's: the work fatkit does), and with those and nvcc 12.4 for the rest.
fn time_baselines(
    tc: &fatkit_toolchain::Nvcc,
    (unpacked, files): (&Path, &[PathBuf]),
    krate: &HostCrate,
    targets: &fatkit_arch::TargetSet,
    row: &mut Row,
) -> Result<()> {
    let nvcc = tc.nvcc();
    let sm_80 = vec![(nvcc.clone(), vec!["--gpu-architecture=sm_80".to_owned()])];
    row.one_arch = baseline(unpacked, files, krate.flags, &|_| sm_80.clone())?;
    let rules = check::file_rules(krate, targets)?;
    // A source's targets, those CUDA 13.2 builds (`true`) or the others.
    let gencodes = |f: &Path, newest: bool| -> Vec<String> {
        let name = f.file_name().map(Path::new).unwrap_or(f);
        let own = fatkit_package::kernel_sets::rule_for(&rules, name)
            .map_or_else(|| targets.clone(), |r| r.targets.clone());
        own.iter()
            .filter(|t| fatkit_arch::toolkit::can_build(toolchain::DEFAULT_CUDA, *t) == newest)
            .flat_map(fatkit_build::pipeline::gencode)
            .collect()
    };
    let threads = ["--threads".to_owned(), "0".to_owned()];
    let every = |f: &Path| -> Vec<String> {
        gencodes(f, true)
            .into_iter()
            .chain(threads.clone())
            .collect()
    };
    eprintln!(
        "bench: {}: one nvcc per file for sm_80: {}",
        row.krate,
        row.one_arch
            .map_or_else(|| "failed".to_owned(), |s| format!("{s:.1} s"))
    );
    row.every_gencode = baseline(unpacked, files, krate.flags, &|f| {
        vec![(nvcc.clone(), every(f))]
    })?;
    eprintln!(
        "bench: {}: one nvcc per file with every -gencode: {}",
        row.krate,
        row.every_gencode
            .map_or_else(|| "failed".to_owned(), |s| format!("{s:.1} s"))
    );
    let cuda_12 = toolchain::provisioned(fatkit_arch::toolkit::CudaVersion::new(12, 4))
        .map_err(Error::from)?;
    let older_any = files.iter().any(|f| !gencodes(f, false).is_empty());
    if let (true, Some(cuda_12)) = (older_any, cuda_12) {
        row.every_target = baseline(unpacked, files, krate.flags, &|f| {
            let older = gencodes(f, false);
            let mut runs = vec![(nvcc.clone(), every(f))];
            if !older.is_empty() {
                runs.push((
                    cuda_12.nvcc(),
                    older.into_iter().chain(threads.clone()).collect(),
                ));
            }
            runs
        })?;
        eprintln!(
            "bench: {}: and nvcc 12.4 at once for the rest: {}",
            row.krate,
            row.every_target
                .map_or_else(|| "failed".to_owned(), |s| format!("{s:.1} s"))
        );
    }
    Ok(())
}

fn print(profile: &str, targets: &fatkit_arch::TargetSet, rows: &[Row]) {
    println!("profile {profile}: {targets}; cold builds, wall seconds");
    println!(
        "{:<28} {:>5} {:>9} {:>9} {:>12} {:>7} {:>14} {:>7} {:>13} {:>7}  verdict",
        "crate",
        "files",
        "fatkit",
        "peak MiB",
        "one arch",
        "ratio",
        "every gencode",
        "ratio",
        "every target",
        "ratio"
    );
    let secs = |s: Option<f64>| s.map_or_else(|| "-".to_owned(), |s| format!("{s:.1}"));
    let ratio = |base: Option<f64>, ours: Option<f64>| match (base, ours) {
        (Some(b), Some(o)) if o > 0.0 => format!("{:.2}x", b / o),
        _ => "-".to_owned(),
    };
    for r in rows {
        println!(
            "{:<28} {:>5} {:>9} {:>9} {:>12} {:>7} {:>14} {:>7} {:>13} {:>7}  {}",
            r.krate,
            r.files,
            secs(r.fatkit),
            r.peak_kib
                .map_or_else(|| "-".to_owned(), |k| (k / 1024).to_string()),
            secs(r.one_arch),
            ratio(r.one_arch, r.fatkit),
            secs(r.every_gencode),
            ratio(r.every_gencode, r.fatkit),
            secs(r.every_target),
            ratio(r.every_target, r.fatkit),
            if r.problems.is_empty() {
                "ok"
            } else {
                "FAILED"
            }
        );
    }
    println!("(ratio: the other command's time over fatkit's; above 1, fatkit is faster. every gencode: nvcc 13.2 per file with the -gencode of every target it builds and --threads 0; every target: that and, at once, nvcc 12.4 per file for the rest, as fatkit builds them: the work fatkit does, though no nvcc merges the two into one object)");
    for r in rows.iter().filter(|r| !r.problems.is_empty()) {
        println!("\n{}:", r.krate);
        for p in &r.problems {
            println!("  {}", p.replace('\n', "\n  "));
        }
    }
}

/// The crate as its author would have it after the migration, in place of the unpacked one:
/// a Cargo.toml with no dependency but fatkit's, a build.rs calling `compile_library` over its
/// sources (named relative to the crate), and a main that links every module (its `FATBIN` is
/// the library's symbol) and checks a simulated V100 and RTX 5090 before any launch.
fn workspace(
    root: &Path,
    krate: &HostCrate,
    unpacked: &Path,
    files: &[PathBuf],
    profile: &str,
) -> Result<PathBuf> {
    std::fs::write(
        unpacked.join("Cargo.toml"),
        format!(
            "[package]\nname = \"host-{0}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\
             autolib = false\nautobins = false\nautotests = false\nautoexamples = false\nautobenches = false\n\n\
             [[bin]]\nname = \"host-{0}\"\npath = \"fatkit-main.rs\"\n\n[workspace]\n\n\
             [dependencies]\nfatkit-runtime = {{ path = {1:?} }}\n\n\
             [build-dependencies]\nfatkit-build = {{ path = {2:?} }}\n",
            krate.name,
            root.join("crates/fatkit-runtime").display().to_string(),
            root.join("crates/fatkit-build").display().to_string()
        ),
    )?;
    std::fs::copy(root.join("Cargo.lock"), unpacked.join("Cargo.lock"))?;
    let relative = |f: &PathBuf| f.strip_prefix(unpacked).unwrap_or(f).display().to_string();
    let mut build =
        format!("fn main() {{\n    fatkit_build::Build::new()\n        .profile({profile:?})\n");
    for f in files {
        build.push_str(&format!("        .file({:?})\n", relative(f)));
    }
    for flag in krate.flags {
        build.push_str(&format!("        .flag({flag:?})\n"));
    }
    for (pattern, targets) in krate.file_targets {
        build.push_str(&format!(
            "        .file_targets({pattern:?}, {targets:?})\n"
        ));
    }
    for (pattern, targets) in krate.kernel_targets {
        build.push_str(&format!(
            "        .kernel_targets({pattern:?}, {targets:?})\n"
        ));
    }
    build.push_str("        .compile_library(\"kernels\");\n}\n");
    std::fs::write(unpacked.join("build.rs"), build)?;
    let mut main = String::from(
        "fn main() {\n    let mut ok = true;\n    let devices = [(\"V100\", \"7.0\"), (\"T4\", \"7.5\"), (\"A100\", \"8.0\"), (\"RTX 5090\", \"12.0\")];\n",
    );
    for f in files {
        let module = fatkit_build::pipeline::module_name(f);
        main.push_str(&format!(
            "    let m = fatkit_runtime::include_module!(concat!(env!(\"OUT_DIR\"), \"/{module}.rs\")).unwrap();\n    for (name, cc) in devices {{\n        let d = fatkit_runtime::Device::new(cc.parse().unwrap(), None).named(name);\n        if let Err(e) = m.check(&d) {{ ok = false; println!(\"{{e}}\"); }}\n    }}\n"
        ));
    }
    main.push_str("    std::process::exit(if ok { 0 } else { 1 });\n}\n");
    std::fs::write(unpacked.join("fatkit-main.rs"), main)?;
    Ok(unpacked.to_owned())
}

/// `cargo build --release` in `ws` with `env`: whether it succeeded, its output, and the peak
/// memory (KiB) of its largest process, from `/usr/bin/time` where it exists.
fn cargo_build(ws: &Path, env: &[(&str, &std::ffi::OsStr)]) -> Result<(bool, String, Option<u64>)> {
    let cargo = crate::harness::cargo();
    let time = Path::new("/usr/bin/time");
    let mut cmd = match time.is_file() {
        true => {
            let mut c = Command::new(time);
            c.args(["-f", "fatkit-peak-kib=%M"]).arg(cargo);
            c
        }
        false => Command::new(cargo),
    };
    cmd.args(["build", "--release", "--offline"])
        .current_dir(ws)
        .env_remove("RUSTFLAGS")
        .env_remove("FATKIT_PROFILE")
        .env_remove("FATKIT_CACHE_DIR");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let peak = stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("fatkit-peak-kib="))
        .and_then(|n| n.trim().parse().ok());
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &stderr,
        peak,
    ))
}

/// The compilers a baseline runs on a file: each nvcc with its arguments.
type Runs<'a> = dyn Fn(&Path) -> Vec<(PathBuf, Vec<String>)> + 'a;

/// Runs every command `runs` gives each file (an nvcc and its arguments), all at once, each as
/// `nvcc -c FLAGS ARGS -Xcompiler -fPIC -o OBJECT FILE` in `root`; the wall time, if all
/// succeeded.
fn baseline(
    root: &Path,
    files: &[PathBuf],
    flags: &[&str],
    runs: &Runs<'_>,
) -> Result<Option<f64>> {
    let out = root.join("baseline-objects");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out)?;
    let start = Instant::now();
    let mut children = Vec::new();
    for (i, f) in files.iter().enumerate() {
        for (r, (nvcc, args)) in runs(f).iter().enumerate() {
            let child = Command::new(nvcc)
                .current_dir(root)
                .arg("-c")
                .args(flags)
                .args(args)
                .args(["-Xcompiler", "-fPIC", "-o"])
                .arg(out.join(format!("{i}-{r}.o")))
                .arg(f)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()?;
            children.push(child);
        }
    }
    let mut ok = true;
    for c in children {
        let o = c.wait_with_output()?;
        if !o.status.success() {
            ok = false;
            eprintln!(
                "baseline nvcc failed: {}",
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .take(5)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(ok.then_some(seconds))
}
