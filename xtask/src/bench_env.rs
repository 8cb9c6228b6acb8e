//! `cargo xtask bench env`: real Python environments from PyPI, fetched at run time into the
//! cache (never into the repository), each answer checked against what its user saw, every
//! library's images compared with cuobjdump's, and the speed of `audit` against cuobjdump's as
//! ratios from this one run (issue 28).
//!
//! - torch 2.6.0 with the nvidia-*-cu12 wheels it requires, installed (every wheel unpacked
//!   into one site-packages, 5.2 GB) and as `pip download` leaves them (2.9 GB of wheels), on
//!   an RTX 5070 Ti with driver 570.124.06: at most 60 lines, exit 1, torch NO, cuBLAS and
//!   cuDNN yes by PTX JIT, no UNKNOWN.
//! - `libcublasLt.so.12` of that environment on an H100: exit 0.
//! - torch 2.7.1 (CUDA 12.6, PyPI's default) on an RTX 5090: NO.
//! - bitsandbytes 0.50.2 on a V100: which variants run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fatkit_cli::{Error, Outcome, Result};
use fatkit_fatbin::inspect::{inspect, Depth};
use fatkit_fatbin::{EntryKind, Limits, Origin};
use fatkit_toolchain as toolchain;

use crate::harness::{fatkit_binary, whole};

/// Every manylinux tag of `machine` (`x86_64`, `aarch64`) pip should take: NVIDIA's CUDA 13
/// wheels are tagged `manylinux_2_18` to `manylinux_2_35` (nvidia-cuda-cupti 13.2.86: 2_25),
/// and pip matches a tag exactly.
pub(crate) fn platforms(machine: &str) -> Vec<String> {
    let mut out: Vec<String> = (17..=40)
        .rev()
        .map(|n| format!("manylinux_2_{n}_{machine}"))
        .collect();
    out.push(format!("manylinux2014_{machine}"));
    out
}

/// `pip download SPEC` for CPython 3.12 on x86-64 Linux into `dir`, once (`marker` names a
/// file the download leaves).
pub(crate) fn fetch(spec: &str, deps: bool, dir: &Path, marker: &str) -> Result<()> {
    fetch_for("x86_64", spec, deps, dir, marker)
}

/// [`fetch`] for the Linux machine `machine` (`x86_64`, `aarch64`).
pub(crate) fn fetch_for(
    machine: &str,
    spec: &str,
    deps: bool,
    dir: &Path,
    marker: &str,
) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let present = std::fs::read_dir(dir)?
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with(marker));
    if present {
        return Ok(());
    }
    eprintln!("bench env: fetching {spec} ({machine}) from PyPI");
    let mut cmd = Command::new("python3");
    cmd.args([
        "-m",
        "pip",
        "download",
        "--quiet",
        "--disable-pip-version-check",
    ])
    .args(["--only-binary", ":all:", "--python-version", "3.12"]);
    if !deps {
        cmd.arg("--no-deps");
    }
    for p in platforms(machine) {
        cmd.args(["--platform", &p]);
    }
    let ok = cmd.arg("-d").arg(dir).arg(spec).status()?.success();
    if !ok {
        return Err(crate::harness::failed(format!(
            "bench env: pip could not download {spec}; check the network and python3 -m pip"
        )));
    }
    Ok(())
}

/// Where the wheels of `dir` are installed: one `site-packages` beside it (every wheel
/// unpacked into the same directory, as pip lays an environment out), so that the download
/// stays as pip left it.
fn installed(dir: &Path) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push("-site-packages");
    dir.with_file_name(name)
}

/// The environment of the wheels in `dir` as a user has it (see [`installed`]), unpacked once:
/// a file beside it lists the wheels once all are in, and a different list starts over.
pub(crate) fn install(dir: &Path) -> Result<PathBuf> {
    let to = installed(dir);
    let mut wheels: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect();
    wheels.sort();
    let list: String = wheels
        .iter()
        .filter_map(|w| w.file_name())
        .map(|n| format!("{}\n", n.to_string_lossy()))
        .collect();
    // Beside the directory, its whole name kept (`with_extension` would cut "2.6.0-site-packages").
    let mut done = to.clone().into_os_string();
    done.push(".complete");
    let done = PathBuf::from(done);
    if std::fs::read_to_string(&done).is_ok_and(|l| l == list) && to.is_dir() {
        return Ok(to);
    }
    let _ = std::fs::remove_file(&done);
    if to.exists() {
        std::fs::remove_dir_all(&to)?;
    }
    eprintln!(
        "bench env: installing {} wheels into {}",
        wheels.len(),
        to.display()
    );
    for wheel in &wheels {
        let ok = Command::new("python3")
            .args(["-m", "zipfile", "-e"])
            .arg(wheel)
            .arg(&to)
            .status()?
            .success();
        if !ok {
            return Err(crate::harness::failed(format!(
                "bench env: cannot unpack {}",
                wheel.display()
            )));
        }
    }
    std::fs::write(&done, list)?;
    Ok(to)
}

/// Every shared library of an installed environment.
fn libraries(site: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    walk(site, &mut out)?;
    out.retain(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().contains(".so"))
    });
    out.sort();
    Ok(out)
}

/// Every regular file under `dir`, as audit walks a directory (links not followed).
pub(crate) fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for e in std::fs::read_dir(dir)?.flatten() {
        let kind = e.file_type()?;
        if kind.is_dir() {
            walk(&e.path(), out)?;
        } else if kind.is_file() {
            out.push(e.path());
        }
    }
    Ok(())
}

/// `fatkit audit ARGS`: exit code and standard output.
pub(crate) fn audit(fatkit: &Path, args: &[&str]) -> Result<(i32, String)> {
    let out = Command::new(fatkit).arg("audit").args(args).output()?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    ))
}

/// One check: what was asked, and whether it held.
pub(crate) struct Check {
    what: String,
    held: bool,
    saw: String,
}

pub(crate) fn check(checks: &mut Vec<Check>, what: &str, held: bool, saw: impl Into<String>) {
    checks.push(Check {
        what: what.to_owned(),
        held,
        saw: saw.into(),
    });
}

/// Images per target (`sm_90`, `compute_90`).
type Counts = BTreeMap<String, usize>;

/// Images per target, as cuobjdump lists a library (`ELF file 1: x.sm_90.cubin`, `PTX file
/// 1: x.sm_90.ptx`; the executable fatbin, else the relocatable one) and as fatkit reads the
/// same sections: for cubins and for PTX, the kind, cuobjdump's (or why it failed), fatkit's.
fn image_lists(cuobjdump: &Path, lib: &Path) -> Result<Vec<Listing>> {
    let data = fatkit_cli::audit::read_file(lib)?;
    let report = inspect("bench", &data, Depth::Headers, &Limits::default());
    let mut out = Vec::new();
    for (flag, kind, entry) in [
        ("--list-elf", "cubin", EntryKind::Cubin),
        ("--list-ptx", "ptx", EntryKind::Ptx),
    ] {
        let run = Command::new(cuobjdump).arg(flag).arg(lib).output()?;
        let stderr = String::from_utf8_lossy(&run.stderr);
        let theirs = if run.status.success() || stderr.contains("does not contain device code") {
            let mut counts = Counts::new();
            for line in String::from_utf8_lossy(&run.stdout).lines() {
                let Some(name) = line.split(": ").nth(1) else {
                    continue;
                };
                let Some(arch) = name.rsplit('.').nth(1).filter(|a| a.starts_with("sm_")) else {
                    continue;
                };
                let target = match kind {
                    "ptx" => arch.replacen("sm_", "compute_", 1),
                    _ => arch.to_owned(),
                };
                *counts.entry(target).or_default() += 1;
            }
            Ok(counts)
        } else {
            Err(stderr.lines().last().unwrap_or_default().trim().to_owned())
        };
        let mut ours = Counts::new();
        for (_, origin, image) in report.loaded_images() {
            if !matches!(origin, Origin::Section(_)) || image.kind != entry {
                continue;
            }
            if let Some(t) = image.target {
                *ours.entry(t.to_string()).or_default() += 1;
            }
        }
        out.push((kind, theirs, ours));
    }
    Ok(out)
}

/// One kind of image of a library: `cubin` or `ptx`, cuobjdump's counts or why it failed,
/// fatkit's.
type Listing = (&'static str, std::result::Result<Counts, String>, Counts);

/// The torch 2.6.0 environment on an RTX 5070 Ti with driver 570.124.06, checked against
/// what its user saw; `what` says which form of it `dir` is.
fn environment_checks(
    fatkit: &Path,
    what: &str,
    dir: &Path,
    checks: &mut Vec<Check>,
) -> Result<()> {
    let arg = dir.display().to_string();
    let (code, text) = audit(
        fatkit,
        &[&arg, "--gpu", "RTX 5070 Ti", "--driver", "570.124.06"],
    )?;
    let lines = text.lines().count();
    println!("== torch 2.6.0 environment, {what}, on an RTX 5070 Ti, driver 570.124.06 ({lines} lines, exit {code})");
    print!("{text}");
    let named = |c: &str| format!("{what}: {c}");
    check(checks, &named("exit 1"), code == 1, format!("exit {code}"));
    check(
        checks,
        &named("at most 60 lines"),
        lines <= 60,
        format!("{lines} lines"),
    );
    check(checks, &named("no UNKNOWN"), !text.contains("UNKNOWN"), "");
    check(
        checks,
        &named("torch 2.6.0 does not run on CC 12.0"),
        text.contains("\n  torch 2.6.0: NO"),
        "",
    );
    for dist in ["nvidia_cublas_cu12", "nvidia_cudnn_cu12"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("  {dist} ")))
            .unwrap_or_default();
        check(
            checks,
            &named(&format!("{dist} runs by PTX JIT")),
            line.contains(": yes, by PTX JIT"),
            line.trim(),
        );
    }
    Ok(())
}

pub fn run() -> Result<Outcome> {
    let corpus = toolchain::cache_dir().map_err(Error::from)?.join("corpus");
    let env = corpus.join("env-torch-2.6.0");
    fetch("torch==2.6.0", true, &env, "torch-2.6.0")?;
    let extra = corpus.join("env-extra");
    fetch("torch==2.7.1", false, &extra, "torch-2.7.1")?;
    fetch("bitsandbytes==0.50.2", false, &extra, "bitsandbytes-0.50.2")?;
    let fatkit = fatkit_binary()?;
    let tc = toolchain::find_default().map_err(Error::from)?;
    let cuobjdump = tc.as_ref().and_then(|t| t.cuobjdump());
    let mut checks = Vec::new();

    // The environment, as its user has it (installed), and as pip downloaded it (wheels).
    let site = install(&env)?;
    for (what, dir) in [("installed", &site), ("as wheels", &env)] {
        environment_checks(&fatkit, what, dir, &mut checks)?;
    }
    let libs = libraries(&site)?;
    library_checks(&fatkit, &libs, &extra, &mut checks)?;
    match &cuobjdump {
        Some(cuobjdump) => against_cuobjdump(cuobjdump, &site, &libs, &mut checks)?,
        None => check(
            &mut checks,
            "cuobjdump found (provision CUDA: cargo xtask build-kernels)",
            false,
            "",
        ),
    }

    speed(&fatkit, cuobjdump.as_deref(), &site, &env, &libs)?;

    let failed = print_checks(&checks);
    Ok(if failed == 0 {
        Outcome::Ok
    } else {
        Outcome::Finding
    })
}

/// The verdicts a user of these libraries would ask for: cuBLASLt on an H100, torch 2.7.1
/// (CUDA 12.6) on an RTX 5090, bitsandbytes' variants on a V100.
fn library_checks(
    fatkit: &Path,
    libs: &[PathBuf],
    extra: &Path,
    checks: &mut Vec<Check>,
) -> Result<()> {
    let lt = libs
        .iter()
        .find(|p| p.ends_with("nvidia/cublas/lib/libcublasLt.so.12"));
    if let Some(lt) = lt {
        let (code, text) = audit(fatkit, &[&lt.display().to_string(), "--gpu", "H100"])?;
        check(
            checks,
            "libcublasLt.so.12 on an H100 exits 0",
            code == 0,
            text.lines().next().unwrap_or_default(),
        );
    } else {
        check(checks, "libcublasLt.so.12 found", false, "");
    }
    let wheel = |prefix: &str| {
        std::fs::read_dir(extra)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
            })
    };
    if let Some(torch) = wheel("torch-2.7.1") {
        let (code, text) = audit(fatkit, &[&torch.display().to_string(), "--gpu", "RTX 5090"])?;
        let first = text.lines().next().unwrap_or_default().to_owned();
        check(
            checks,
            "torch 2.7.1 (CUDA 12.6) on an RTX 5090 is NO",
            code == 1 && first.contains(": NO on"),
            first,
        );
    }
    if let Some(bnb) = wheel("bitsandbytes-0.50.2") {
        let (_, text) = audit(fatkit, &[&bnb.display().to_string(), "--gpu", "V100"])?;
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with("on V100: run:"))
            .unwrap_or_default()
            .trim()
            .to_owned();
        check(
            checks,
            "bitsandbytes on a V100 names the variants that run",
            line.contains("CUDA 12.8") && line.contains("do not: CUDA 13.0"),
            line,
        );
    }
    Ok(())
}

/// Every library's images per target, as fatkit reads them against cuobjdump's lists: a
/// difference fails a check.
fn against_cuobjdump(
    cuobjdump: &Path,
    site: &Path,
    libs: &[PathBuf],
    checks: &mut Vec<Check>,
) -> Result<()> {
    println!("\n== images per target, fatkit against cuobjdump --list-elf/--list-ptx");
    for lib in libs {
        let name = lib.strip_prefix(site).unwrap_or(lib).display().to_string();
        for (kind, theirs, ours) in image_lists(cuobjdump, lib)? {
            let total: usize = ours.values().sum();
            match theirs {
                Err(why) => {
                    println!("  {name}: {kind}: cuobjdump fails ({why}); fatkit reads {total}")
                }
                Ok(t) if t == ours => {
                    if total > 0 {
                        println!("  {name}: {kind}: the same {total}");
                    }
                }
                Ok(t) => {
                    println!("  {name}: {kind}: DIFFERS: cuobjdump {t:?}, fatkit {ours:?}");
                    check(
                        checks,
                        &format!("{name}: {kind} images as cuobjdump's"),
                        false,
                        "",
                    );
                }
            }
        }
    }
    Ok(())
}

/// The checks, each marked, and how many failed.
pub(crate) fn print_checks(checks: &[Check]) -> usize {
    println!("\n== checks");
    let mut failed = 0;
    for c in checks {
        let mark = if c.held { "ok  " } else { "FAIL" };
        failed += usize::from(!c.held);
        match c.saw.is_empty() {
            true => println!("  {mark} {}", c.what),
            false => println!("  {mark} {} ({})", c.what, c.saw),
        }
    }
    failed
}

/// The speed targets of issue 28, as ratios from this run: a verdict on libtorch_cuda.so 10x
/// `cuobjdump --list-elf`, `audit --json` 3x on libcurand and libtorch_cuda.so, memory at most
/// 0.3x, the environment under 10 s.
fn speed(
    fatkit: &Path,
    cuobjdump: Option<&Path>,
    site: &Path,
    wheels: &Path,
    libs: &[PathBuf],
) -> Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("\n== speed: whole commands, one run each after a warm-up, {cores} cores");
    let secs = |d: Duration| d.as_secs_f64();
    for (what, dir, target) in [
        ("installed", site, " (target: under 10 s)"),
        ("as wheels, every member inflated", wheels, ""),
    ] {
        let args: Vec<&std::ffi::OsStr> = vec![
            "audit".as_ref(),
            dir.as_os_str(),
            "--gpu".as_ref(),
            "RTX 5070 Ti".as_ref(),
        ];
        whole(fatkit, &args)?;
        let (t, peak) = whole(fatkit, &args)?;
        println!(
            "  environment {what} ({:.1} GB): {:.1} s, peak {} MiB{target}",
            tree_size(dir) as f64 / 1e9,
            secs(t),
            peak.map_or_else(|| "-".to_owned(), |p| (p / 1024).to_string())
        );
    }
    let Some(cuobjdump) = cuobjdump else {
        return Ok(());
    };
    for (lib, verdict, target) in [
        ("torch/lib/libtorch_cuda.so", true, 10.0),
        ("torch/lib/libtorch_cuda.so", false, 3.0),
        ("nvidia/curand/lib/libcurand.so.10", false, 3.0),
    ] {
        let Some(path) = libs.iter().find(|p| p.ends_with(lib)) else {
            continue;
        };
        let p = path.as_os_str();
        let ours: Vec<&std::ffi::OsStr> = match verdict {
            true => vec!["audit".as_ref(), p, "--gpu".as_ref(), "RTX 5090".as_ref()],
            false => vec!["audit".as_ref(), "--json".as_ref(), p],
        };
        let theirs: Vec<&std::ffi::OsStr> = vec!["--list-elf".as_ref(), p];
        whole(fatkit, &ours)?;
        let (a, pa) = whole(fatkit, &ours)?;
        let (b, pb) = whole(cuobjdump, &theirs)?;
        let mem = match (pa, pb) {
            (Some(a), Some(b)) if b > 0 => format!("{:.2}x", a as f64 / b as f64),
            _ => "-".to_owned(),
        };
        println!(
            "  {lib} {}: fatkit {:.2} s, cuobjdump --list-elf {:.2} s: {:.1}x faster (target {target}x); memory {mem} of cuobjdump's (target 0.3x)",
            if verdict { "verdict (--gpu)" } else { "--json" },
            secs(a),
            secs(b),
            secs(b) / secs(a).max(1e-9)
        );
    }
    Ok(())
}

/// Bytes of the regular files under `dir`.
fn tree_size(dir: &Path) -> u64 {
    let mut files = Vec::new();
    let _ = walk(dir, &mut files);
    files
        .iter()
        .filter_map(|f| f.symlink_metadata().ok())
        .map(|m| m.len())
        .sum()
}
