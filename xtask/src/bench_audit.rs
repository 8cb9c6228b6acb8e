//! `cargo xtask bench audit [FILE]`: the whole `fatkit audit --json FILE` command against
//! `cuobjdump --list-elf FILE` (a wheel: against `unzip`), on NVIDIA's libraries and torch's,
//! fetched into the fatkit cache.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fatkit_cli::{Error, Outcome, Result};
use fatkit_fatbin::inspect::{inspect, Depth};
use fatkit_fatbin::{Limits, Origin};
use fatkit_toolchain as toolchain;

use crate::harness::median;
use crate::harness::{fatkit_binary, whole};

const WHEELS: [(&str, &str); 2] = [
    ("nvidia-cufft==12.5.0.14", "libcufft.so"),
    ("nvidia-curand==10.4.5.25", "libcurand.so"),
];

/// A PyTorch wheel from PyPI built for sm_50..sm_90 (CUDA 12.6, no sm_120): the case.
const TORCH: &str = "torch==2.7.0";
const TORCH_WHEEL: &str = "torch-2.7.0-cp312-cp312-manylinux_2_28_x86_64.whl";

/// The default corpus: the libraries inside NVIDIA's wheels, extracted into the cache.
fn corpus() -> Result<Vec<PathBuf>> {
    let dir = toolchain::cache_dir().map_err(Error::from)?.join("corpus");
    std::fs::create_dir_all(&dir)?;
    let mut out = Vec::new();
    for (spec, lib) in WHEELS {
        let stem = spec.replace('-', "_").replace("==", "-");
        let unpacked = dir.join(&stem);
        let find_lib = |d: &Path| -> Option<PathBuf> {
            let lib_dir = d.join("nvidia/cu13/lib");
            std::fs::read_dir(lib_dir)
                .ok()?
                .flatten()
                .map(|e| e.path())
                .find(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(lib))
                })
        };
        if let Some(path) = find_lib(&unpacked) {
            out.push(path);
            continue;
        }
        eprintln!("bench: fetching {spec}");
        let ok = crate::test::pip_download(spec, &dir)?;
        let wheel = std::fs::read_dir(&dir)?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.extension().is_some_and(|e| e == "whl") && p.to_string_lossy().contains(&stem)
            });
        let Some(wheel) = wheel.filter(|_| ok) else {
            return Err(crate::harness::failed(format!(
                "could not download {spec}; pass files to bench instead"
            )));
        };
        let ok = Command::new("python3")
            .args(["-m", "zipfile", "-e"])
            .arg(&wheel)
            .arg(&unpacked)
            .status()?
            .success();
        match find_lib(&unpacked).filter(|_| ok) {
            Some(path) => out.push(path),
            None => {
                return Err(crate::harness::failed(format!(
                    "{lib} not found in {}",
                    wheel.display()
                )))
            }
        }
    }
    Ok(out)
}

/// The torch wheel in the corpus (downloaded once, 865 MB), and its libtorch_cuda.so.
fn torch_corpus() -> Result<(PathBuf, PathBuf)> {
    let dir = toolchain::cache_dir().map_err(Error::from)?.join("corpus");
    std::fs::create_dir_all(&dir)?;
    let wheel = dir.join(TORCH_WHEEL);
    if !wheel.is_file() {
        eprintln!("bench: fetching {TORCH} (865 MB) from PyPI");
        let ok = Command::new("python3")
            .args(["-m", "pip", "download", "--quiet", "--no-deps"])
            .args(["--only-binary", ":all:", "--python-version", "3.12"])
            .args(["--platform", "manylinux_2_28_x86_64", "-d"])
            .arg(&dir)
            .arg(TORCH)
            .status()?
            .success();
        if !ok || !wheel.is_file() {
            return Err(crate::harness::failed(format!(
                "could not download {TORCH}; pass files to bench instead"
            )));
        }
    }
    let unpacked = dir.join("torch_lib");
    let lib = unpacked.join("torch/lib/libtorch_cuda.so");
    if !lib.is_file() {
        let ok = Command::new("unzip")
            .args(["-q", "-o"])
            .arg(&wheel)
            .arg("torch/lib/libtorch_cuda.so")
            .arg("-d")
            .arg(&unpacked)
            .status()?
            .success();
        if !ok {
            return Err(crate::harness::failed(format!(
                "unzip could not extract libtorch_cuda.so from {}",
                wheel.display()
            )));
        }
    }
    Ok((wheel, lib))
}

/// The container finder alone on `file`, in process, at headers depth: the containers, the
/// median of `runs` timings, and its report.
fn scan_times(
    file: &Path,
    runs: usize,
    limits: &Limits,
) -> Result<(
    usize,
    Option<Duration>,
    Option<fatkit_fatbin::inspect::FileReport>,
)> {
    let data = fatkit_cli::audit::read_file(file)?;
    let mut report = inspect("bench", &data, Depth::Headers, limits);
    let mut times = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        report = inspect("bench", &data, Depth::Headers, limits);
        times.push(start.elapsed());
    }
    Ok((report.containers.len(), Some(median(times)), Some(report)))
}

/// `fatkit ours_args` and the `other` command run alternately `runs` times, the page cache
/// warmed first: the medians of each, and fatkit's peak memory in KiB.
fn alternate(
    fatkit: &Path,
    ours_args: &[&std::ffi::OsStr],
    other: Option<&(PathBuf, Vec<&std::ffi::OsStr>)>,
    runs: usize,
) -> Result<(Duration, Option<Duration>, u64)> {
    whole(fatkit, ours_args)?;
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    let mut peak = 0u64;
    for _ in 0..runs {
        let (t, p) = whole(fatkit, ours_args)?;
        ours.push(t);
        peak = peak.max(p.unwrap_or(0));
        if let Some((prog, args)) = other {
            theirs.push(whole(prog, args)?.0);
        }
    }
    Ok((
        median(ours),
        (!theirs.is_empty()).then(|| median(theirs)),
        peak,
    ))
}

/// Whether fatkit finds every cubin of `file`'s ELF sections that `cuobjdump --list-elf`
/// lists: `yes`, `NO`, or `-` without cuobjdump or a report.
fn finds_all(
    cuobjdump: Option<&Path>,
    file: &Path,
    report: Option<&fatkit_fatbin::inspect::FileReport>,
) -> Result<&'static str> {
    let (Some(cuobjdump), Some(report)) = (cuobjdump, report) else {
        return Ok("-");
    };
    let listing = Command::new(cuobjdump)
        .arg("--list-elf")
        .arg(file)
        .output()?;
    let listing = String::from_utf8_lossy(&listing.stdout);
    let n_theirs = listing
        .lines()
        .filter(|l| l.starts_with("ELF file"))
        .count();
    let n_ours = report
        .all_images()
        .iter()
        .filter(|(_, o, e)| {
            matches!(o, Origin::Section(_)) && e.kind == fatkit_fatbin::EntryKind::Cubin
        })
        .count();
    Ok(if n_ours == n_theirs { "yes" } else { "NO" })
}

pub(crate) fn audit(files: Vec<PathBuf>, runs: usize) -> Result<Outcome> {
    let files = if files.is_empty() {
        let mut files = corpus()?;
        let (wheel, lib) = torch_corpus()?;
        files.push(lib);
        files.push(wheel);
        files
    } else {
        files
    };
    let tc = toolchain::find_default().map_err(Error::from)?;
    let cuobjdump = tc.as_ref().and_then(|t| t.cuobjdump());
    let fatkit = fatkit_binary()?;
    let limits = Limits::default();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut verdicts: Vec<(String, String)> = Vec::new();
    println!("whole command, as a user runs it: `fatkit audit --json FILE` against `cuobjdump --list-elf FILE` (a wheel: `fatkit audit WHEEL --gpu \"RTX 5090\"` against `unzip -p WHEEL '*.so*'`, inflating its libraries); median of {runs} alternating runs each, page cache warm, {cores} cores");
    println!("scan = the container finder alone, in process (no decompression), for comparison");
    println!(
        "{:<36} {:>8} {:>11} {:>9} {:>11} {:>11} {:>8} {:>10} {:>9} {:>9}",
        "file",
        "MB",
        "containers",
        "scan ms",
        "fatkit ms",
        "other ms",
        "ratio",
        "peak MiB",
        "scan x",
        "finds all"
    );
    for file in &files {
        let is_wheel = file.extension().is_some_and(|e| e == "whl");
        let name = file
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let mb = std::fs::metadata(file)?.len() as f64 / 1e6;
        let (n_containers, scan, report) = if is_wheel {
            (0, None, None)
        } else {
            scan_times(file, runs, &limits)?
        };
        let path = file.as_os_str();
        let ours_args: Vec<&std::ffi::OsStr> = if is_wheel {
            vec![
                "audit".as_ref(),
                path,
                "--gpu".as_ref(),
                "RTX 5090".as_ref(),
            ]
        } else {
            vec!["audit".as_ref(), "--json".as_ref(), path]
        };
        let other: Option<(PathBuf, Vec<&std::ffi::OsStr>)> = if is_wheel {
            Some((
                PathBuf::from("unzip"),
                vec!["-p".as_ref(), path, "*.so*".as_ref()],
            ))
        } else {
            cuobjdump
                .clone()
                .map(|c| (c, vec!["--list-elf".as_ref(), path]))
        };
        let (ours, theirs, peak) = alternate(&fatkit, &ours_args, other.as_ref(), runs)?;
        let finds_all = finds_all(cuobjdump.as_deref(), file, report.as_ref())?;
        let ms = |d: Duration| format!("{:.0}", d.as_secs_f64() * 1e3);
        let (other_ms, ratio) = match theirs {
            Some(t) => (
                ms(t),
                format!("{:.1}x", t.as_secs_f64() / ours.as_secs_f64()),
            ),
            None => ("-".to_owned(), "-".to_owned()),
        };
        let (scan_ms, scan_x) = match (scan, theirs) {
            (Some(s), Some(t)) => (
                format!("{:.1}", s.as_secs_f64() * 1e3),
                format!("{:.1}x", t.as_secs_f64() / s.as_secs_f64()),
            ),
            (Some(s), None) => (format!("{:.1}", s.as_secs_f64() * 1e3), "-".to_owned()),
            _ => ("-".to_owned(), "-".to_owned()),
        };
        let peak = if peak > 0 {
            format!("{:.0}", peak as f64 / 1024.0)
        } else {
            "-".to_owned()
        };
        println!(
            "{name:<36} {mb:>8.1} {n_containers:>11} {scan_ms:>9} {:>11} {other_ms:>11} {ratio:>8} {peak:>10} {scan_x:>9} {finds_all:>9}",
            ms(ours)
        );
        if is_wheel {
            verdicts.push((name, wheel_verdict(&fatkit, file)?));
        }
    }
    for (name, v) in verdicts {
        println!("{name} on an RTX 5090: {v}");
    }
    Ok(Outcome::Ok)
}

/// The text verdict of a wheel on an RTX 5090, checked against what a person needs of it: the
/// exit code, one screen, the libraries named, the arch list, no Python file as device code.
fn wheel_verdict(fatkit: &Path, wheel: &Path) -> Result<String> {
    let out = Command::new(fatkit)
        .arg("audit")
        .arg(wheel)
        .args(["--gpu", "RTX 5090"])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let lines = text.lines().count();
    let code = out.status.code().unwrap_or(-1);
    let checks = [
        ("exit 1", code == 1),
        ("one screen (<= 60 lines)", lines <= 60),
        ("names libtorch_cuda.so", text.contains("libtorch_cuda.so")),
        (
            "TORCH_CUDA_ARCH_LIST shown",
            text.contains("TORCH_CUDA_ARCH_LIST=\""),
        ),
        ("no .py as device code", !text.contains(".py")),
    ];
    let failed: Vec<&str> = checks
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(c, _)| *c)
        .collect();
    let first = text.lines().next().unwrap_or_default();
    Ok(format!(
        "exit {code}, {lines} lines: {}\n  {first}",
        if failed.is_empty() {
            "ok (exit 1, one screen, names libtorch_cuda.so, TORCH_CUDA_ARCH_LIST, no .py)"
                .to_owned()
        } else {
            format!("NOT ok: {}", failed.join(", "))
        }
    ))
}
