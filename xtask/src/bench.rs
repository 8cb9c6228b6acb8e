//! `cargo xtask bench audit [FILE]`: scan throughput of the container finder against
//! `cuobjdump --list-elf` on the same file, from the page cache, as ratios from one run.
//!
//! Default input: `libcufft.so` (~237 MB, ~18,000 containers, none in a section) from NVIDIA's
//! `nvidia-cufft` wheel, plus `libcurand.so` (~105 MB) where cuobjdump does find device code,
//! to check that the scan finds everything cuobjdump finds.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use fatkit_build::toolchain;
use fatkit_cli::{Error, Outcome, Result};
use fatkit_fatbin::inspect::{inspect, Depth};
use fatkit_fatbin::{Limits, Origin};

#[derive(Debug, Args)]
pub struct Bench {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// Scan throughput against cuobjdump --list-elf
    Audit {
        /// Files to scan [default: libcufft.so and libcurand.so from NVIDIA's wheels]
        files: Vec<PathBuf>,
        /// Timed runs per file (the median is reported)
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
}

const WHEELS: [(&str, &str); 2] = [
    ("nvidia-cufft==12.5.0.14", "libcufft.so"),
    ("nvidia-curand==10.4.5.25", "libcurand.so"),
];

impl Bench {
    pub fn run(self) -> Result<Outcome> {
        if cfg!(debug_assertions) {
            // Timings of a debug build mean nothing: run this again, optimised.
            let args: Vec<String> = std::env::args().skip(1).collect();
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let status = Command::new(cargo)
                .args(["run", "--quiet", "--release", "--package", "xtask", "--"])
                .args(&args)
                .status()?;
            return Ok(if status.success() {
                Outcome::Ok
            } else {
                Outcome::Finding
            });
        }
        match self.what {
            What::Audit { files, runs } => audit(files, runs.max(1)),
        }
    }
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs.get(xs.len() / 2).copied().unwrap_or_default()
}

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
        let ok = Command::new("python3")
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--disable-pip-version-check",
                "-d",
            ])
            .arg(&dir)
            .arg(spec)
            .status()?
            .success();
        let wheel = std::fs::read_dir(&dir)?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.extension().is_some_and(|e| e == "whl") && p.to_string_lossy().contains(&stem)
            });
        let Some(wheel) = wheel.filter(|_| ok) else {
            return Err(Error::Input(format!(
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
                return Err(Error::Input(format!(
                    "{lib} not found in {}",
                    wheel.display()
                )))
            }
        }
    }
    Ok(out)
}

fn audit(files: Vec<PathBuf>, runs: usize) -> Result<Outcome> {
    let files = if files.is_empty() { corpus()? } else { files };
    let tc = toolchain::find_default().map_err(Error::from)?;
    let cuobjdump = tc.as_ref().and_then(|t| t.cuobjdump());
    let limits = Limits::default();
    println!("scan = every container and cubin found and validated, headers read (no decompression); median of {runs} runs, page cache warm");
    println!(
        "{:<22} {:>9} {:>11} {:>10} {:>12} {:>14} {:>9} {:>10}",
        "file", "MB", "containers", "scan ms", "scan GB/s", "cuobjdump ms", "ratio", "finds all"
    );
    for file in &files {
        let data = fatkit_cli::audit::read_file(file)?;
        let mb = data.len() as f64 / 1e6;
        // Warm the page cache and the map.
        let mut report = inspect("bench", &data, Depth::Headers, &limits);
        let mut times = Vec::new();
        for _ in 0..runs {
            let start = Instant::now();
            report = inspect("bench", &data, Depth::Headers, &limits);
            times.push(start.elapsed());
        }
        let scan = median(times);
        let n_containers = report.containers.len();
        let (cuobj_ms, finds_all) = match &cuobjdump {
            Some(cuobjdump) => {
                let mut times = Vec::new();
                let mut listing = String::new();
                for _ in 0..runs.min(3) {
                    let start = Instant::now();
                    let out = Command::new(cuobjdump)
                        .arg("--list-elf")
                        .arg(file)
                        .output()?;
                    times.push(start.elapsed());
                    listing = String::from_utf8_lossy(&out.stdout).into_owned();
                }
                let theirs = listing
                    .lines()
                    .filter(|l| l.starts_with("ELF file"))
                    .count();
                let ours = report
                    .all_images()
                    .iter()
                    .filter(|(_, o, e)| {
                        matches!(o, Origin::Section(_)) && e.kind == fatkit_fatbin::EntryKind::Cubin
                    })
                    .count();
                (Some(median(times)), Some(ours == theirs))
            }
            None => (None, None),
        };
        let name = file
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let gbs = data.len() as f64 / scan.as_secs_f64() / 1e9;
        let (c_ms, ratio) = match cuobj_ms {
            Some(c) => (
                format!("{:.1}", c.as_secs_f64() * 1e3),
                format!("{:.1}x", c.as_secs_f64() / scan.as_secs_f64()),
            ),
            None => ("-".to_owned(), "-".to_owned()),
        };
        let finds = finds_all.map_or("-", |ok| if ok { "yes" } else { "NO" });
        println!("{name:<22} {mb:>9.1} {n_containers:>11} {:>10.1} {gbs:>12.2} {c_ms:>14} {ratio:>9} {finds:>10}", scan.as_secs_f64() * 1e3);
    }
    Ok(Outcome::Ok)
}
