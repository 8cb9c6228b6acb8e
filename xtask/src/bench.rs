//! Benchmarks with targets, reported as ratios measured in one run (never timed assertions).
//!
//! `cargo xtask bench audit [FILE]`: the whole `fatkit audit --json FILE` command against
//! `cuobjdump --list-elf FILE` (a wheel: `fatkit audit WHEEL --gpu "RTX 5090"` against
//! `unzip -p` of its libraries, with peak memory), runs alternating, page cache warm; the
//! container scan alone beside it.
//!
//! `cargo xtask bench build [--profile P]`: a cold `build-kernels` of `cuda-src/` against nvcc
//! run once per file with every `-gencode` flag (sequentially, and with `--threads 0`), the
//! same cold build with `--launcher sccache` and sccache's cache empty, the no-op rebuild, and
//! parallel efficiency.
//!
//! `cargo xtask bench env`: real Python environments from PyPI, checked and timed (see
//! `bench_env`).
//!
//! `cargo xtask bench crates [NAME...]`: kernel sources of public crates, fetched from
//! crates.io at run time, built for `full` (see `real_crates`).
//!
//! Default input: `libcufft.so` (~237 MB, ~18,000 containers, none in a section) from NVIDIA's
//! `nvidia-cufft` wheel, `libcurand.so` (~105 MB) where cuobjdump does find device code (to
//! check that the scan finds everything cuobjdump finds), and PyTorch 2.7.0's wheel from PyPI
//! (865 MB) with its `libtorch_cuda.so` (1.06 GB), all fetched into the cache once.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use fatkit_build::toolchain;
use fatkit_cli::{Error, Outcome, Result};
use fatkit_fatbin::inspect::{inspect, Depth};
use fatkit_fatbin::{Limits, Origin};

use crate::harness::{fatkit_binary, whole, workspace_root, SccacheServer};

#[derive(Debug, Args)]
pub struct Bench {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// The whole audit command against cuobjdump --list-elf (and unzip, for a wheel)
    Audit {
        /// Files to audit [default: libcufft.so, libcurand.so from NVIDIA's wheels, torch's wheel and its libtorch_cuda.so]
        files: Vec<PathBuf>,
        /// Timed runs per file (the median is reported)
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// The runtime check: first call for a ten-target module, and every later call
    Runtime,
    /// Cold and no-op build-kernels against plain nvcc
    Build {
        #[arg(long, default_value = "modern")]
        profile: String,
    },
    /// Two checkouts of candle-kernels (from crates.io) sharing one redis through sccache
    SharedCache {
        #[arg(long, default_value = "consumer")]
        profile: String,
    },
    /// Real Python environments from PyPI (fetched now): the torch 2.6.0 environment on an RTX
    /// 5070 Ti, cuBLASLt on an H100, torch 2.7.1 on an RTX 5090, bitsandbytes on a V100, every
    /// library's images against cuobjdump's, and audit's speed against cuobjdump's
    Env,
    /// Host-code crates from crates.io (fetched now) built by compile_library for a profile,
    /// against their own tool for one architecture and nvcc with every -gencode
    HostCrates {
        #[arg(long, default_value = fatkit_build::profile::DEFAULT)]
        profile: String,
        /// Only these: `candle-rotary`, `mistralrs-paged-attn` [default: both]
        crates: Vec<String>,
    },
    /// Kernel sources of public crates from crates.io (fetched now) built for a profile
    Crates {
        #[arg(long, default_value = fatkit_build::profile::DEFAULT)]
        profile: String,
        /// Only these: `candle-kernels` or `candle-kernels@0.8.0` [default: all]
        crates: Vec<String>,
    },
}

const WHEELS: [(&str, &str); 2] = [
    ("nvidia-cufft==12.5.0.14", "libcufft.so"),
    ("nvidia-curand==10.4.5.25", "libcurand.so"),
];

/// A PyTorch wheel from PyPI built for sm_50..sm_90 (CUDA 12.6, no sm_120): the case.
const TORCH: &str = "torch==2.7.0";
const TORCH_WHEEL: &str = "torch-2.7.0-cp312-cp312-manylinux_2_28_x86_64.whl";

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
            What::Build { profile } => build(&profile),
            What::Runtime => runtime(),
            What::Env => crate::bench_env::run(),
            What::Crates { profile, crates } => crate::real_crates::run(&profile, &crates),
            What::HostCrates { profile, crates } => crate::host_crates::run(&profile, &crates),
            What::SharedCache { profile } => crate::real_crates::shared_cache(&profile),
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
        let ok = crate::test::pip_download(spec, &dir)?;
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
            return Err(Error::Input(format!(
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
            return Err(Error::Input(format!(
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

fn audit(files: Vec<PathBuf>, runs: usize) -> Result<Outcome> {
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

fn timed(cmd: &mut Command) -> Result<(Duration, String)> {
    let start = Instant::now();
    let out = cmd.output()?;
    let took = start.elapsed();
    if !out.status.success() {
        return Err(Error::Input(format!(
            "{cmd:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok((took, String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// CPU seconds (user + system) of this process's waited-for children and their descendants,
/// from /proc/self/stat (`cutime`, `cstime`, in USER_HZ = 100 ticks per second on Linux).
fn children_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // After the command name: state is field 3, so cutime (16) and cstime (17) are at 13, 14.
    let ticks: f64 = fields.get(13)?.parse::<f64>().ok()? + fields.get(14)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

fn build(profile_name: &str) -> Result<Outcome> {
    let root = workspace_root();
    let profile = fatkit_build::ProfileSet::built_in().load(profile_name)?;
    let tc = toolchain::provision(toolchain::DEFAULT_CUDA, &mut |l| {
        eprintln!("toolchain: {l}")
    })
    .map_err(Error::from)?;
    let scratch = root.join("target/bench-build");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let src = root.join("cuda-src");
    let sources = fatkit_build::pipeline::sources_in(&src)?;

    // fatkit, cold: an empty cache. The binary is this (release) xtask.
    let exe = std::env::current_exe()?;
    let fatkit_args = |cache: &str| -> Vec<String> {
        let d = |p: &str| scratch.join(p).display().to_string();
        vec![
            "build-kernels".into(),
            "--profile".into(),
            profile_name.into(),
            "--offline".into(),
            "--message-format".into(),
            "json".into(),
            "--nvcc".into(),
            tc.nvcc().display().to_string(),
            "--src".into(),
            src.display().to_string(),
            "--out".into(),
            d("out"),
            "--cache-dir".into(),
            d(cache),
        ]
    };
    eprintln!(
        "bench: cold build-kernels ({} sources, profile {profile_name})",
        sources.len()
    );
    let cpu_before = children_cpu_seconds().unwrap_or(0.0);
    let (cold, stdout) = timed(
        Command::new(&exe)
            .args(fatkit_args("cache"))
            .current_dir(&root),
    )?;
    let cpu = children_cpu_seconds().unwrap_or(0.0) - cpu_before;
    let report: serde_json::Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_default();
    let jobs = report
        .get("jobs_run")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    let calls = report
        .get("compiler_calls")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    let mut noop = Vec::new();
    for _ in 0..5 {
        noop.push(
            timed(
                Command::new(&exe)
                    .args(fatkit_args("cache"))
                    .current_dir(&root),
            )?
            .0,
        );
    }
    let noop = median(noop);

    // The same cold build with a launcher configured: sccache with an empty cache of its own,
    // so every cubin job is a miss (its server started by the first job, as a user's is).
    let with_launcher = launcher_build(&exe, fatkit_args("cache-launcher"), (&root, &scratch))?;

    let (seq, threads0) = nvcc_baselines(&tc, &profile, (&sources, &src), &scratch)?;
    BuildFigures {
        profile: profile_name,
        sources: sources.len(),
        jobs,
        calls,
        cores,
        cold,
        seq,
        threads0,
        with_launcher,
        noop,
        cpu,
    }
    .print();
    Ok(Outcome::Ok)
}

/// nvcc once per file of `sources` (in `src`) with every `-gencode` flag of `profile`,
/// sequentially, then with `--threads 0`: the two total times.
fn nvcc_baselines(
    tc: &toolchain::Nvcc,
    profile: &fatkit_arch::profile::Profile,
    (sources, src): (&[PathBuf], &Path),
    scratch: &Path,
) -> Result<(Duration, Duration)> {
    let mut gencode: Vec<String> = Vec::new();
    for t in profile.targets.iter() {
        let virt = t.with_kind(fatkit_arch::ImageKind::Ptx);
        gencode.push("-gencode".into());
        gencode.push(format!("arch={virt},code={t}"));
    }
    let mut plain = Vec::new();
    for threads in [None, Some("0")] {
        eprintln!(
            "bench: nvcc --fatbin per file{}",
            threads.map_or(String::new(), |t| format!(" --threads {t}"))
        );
        let mut total = Duration::ZERO;
        for s in sources {
            let out = scratch.join(format!(
                "{}.fatbin",
                s.file_stem()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            ));
            let mut cmd = Command::new(tc.nvcc());
            cmd.arg("--fatbin")
                .args(&gencode)
                .arg(format!("-I{}", src.display()));
            if let Some(t) = threads {
                cmd.args(["--threads", t]);
            }
            cmd.arg(s).arg("-o").arg(out);
            total += timed(&mut cmd)?.0;
        }
        plain.push(total);
    }
    Ok((
        plain.first().copied().unwrap_or_default(),
        plain.get(1).copied().unwrap_or_default(),
    ))
}

/// The cold build with sccache as its launcher, its cache empty (every cubin job a miss, its
/// server started by the first job, as a user's is); `None` without a provisioned sccache.
fn launcher_build(
    exe: &Path,
    mut args: Vec<String>,
    (root, scratch): (&Path, &Path),
) -> Result<Option<Duration>> {
    let launcher =
        fatkit_build::launcher::provisioned_sccache(&toolchain::cache_dir().map_err(Error::from)?);
    Ok(match &launcher {
        Some(sccache) => {
            eprintln!("bench: cold build-kernels --launcher sccache (sccache's cache empty)");
            let server = SccacheServer::new(
                sccache,
                scratch,
                &[("SCCACHE_DIR", scratch.join("sccache").display().to_string())],
            )?;
            args.extend(["--launcher".to_owned(), sccache.display().to_string()]);
            let took = timed(server.env(Command::new(exe).args(args).current_dir(root)))?.0;
            Some(took)
        }
        None => {
            eprintln!("bench: no provisioned sccache (`cargo xtask toolchain install --sccache`): the launcher row is left out");
            None
        }
    })
}

/// `bench build`'s figures, printed as one table.
struct BuildFigures<'a> {
    profile: &'a str,
    sources: usize,
    jobs: u64,
    calls: u64,
    cores: usize,
    cold: Duration,
    seq: Duration,
    threads0: Duration,
    with_launcher: Option<Duration>,
    noop: Duration,
    cpu: f64,
}

impl BuildFigures<'_> {
    fn print(&self) {
        let Self {
            profile: profile_name,
            sources,
            jobs,
            calls,
            cores,
            cold,
            seq,
            threads0,
            with_launcher,
            noop,
            cpu,
        } = *self;
        let ideal = cpu / cores as f64;
        let efficiency = ideal / cold.as_secs_f64();
        println!(
            "profile {profile_name}: {} sources, {jobs} jobs in {calls} compiler calls, {cores} cores, CUDA {}",
            sources,
            toolchain::DEFAULT_CUDA
        );
        println!("{:<44} {:>10}", "measure", "value");
        println!(
            "{:<44} {:>9.2}s",
            "fatkit build-kernels, cold",
            cold.as_secs_f64()
        );
        println!(
            "{:<44} {:>9.2}s",
            "nvcc --fatbin per file, sequential",
            seq.as_secs_f64()
        );
        println!(
            "{:<44} {:>9.2}s",
            "nvcc --fatbin per file, --threads 0",
            threads0.as_secs_f64()
        );
        println!(
            "{:<44} {:>9.2}x  (target >= 1.7x)",
            "speed-up vs sequential nvcc",
            seq.as_secs_f64() / cold.as_secs_f64()
        );
        println!(
            "{:<44} {:>9.2}x  (target >= 1.0x)",
            "speed-up vs nvcc --threads 0",
            threads0.as_secs_f64() / cold.as_secs_f64()
        );
        if let Some(l) = with_launcher {
            println!(
                "{:<44} {:>9.2}s",
                "fatkit build-kernels, cold, --launcher sccache",
                l.as_secs_f64()
            );
            println!(
                "{:<44} {:>9.2}x  (target >= 1.0x)",
                "  (sccache's cache empty) vs nvcc --threads 0",
                threads0.as_secs_f64() / l.as_secs_f64()
            );
        }
        println!(
            "{:<44} {:>8.0}ms  (target < 300 ms)",
            "no-op rebuild (whole process, median of 5)",
            noop.as_secs_f64() * 1e3
        );
        println!(
            "{:<44} {:>9.2}s",
            "CPU time of the cold build (all processes)", cpu
        );
        println!(
            "{:<44} {:>9.2}s",
            "CPU time / cores (the ideal wall time)", ideal
        );
        println!(
            "{:<44} {:>9.1}%  (target >= 90%)",
            "parallel efficiency",
            efficiency * 100.0
        );
    }
}

/// A module like build-kernels makes for the `modern` profile: ten cubins and PTX, five kernels.
const TEN_TARGETS: &[fatkit_runtime::ImageRow] = &[
    ("sm_75", None, &["k0", "k1", "k2", "k3", "k4"]),
    ("sm_80", None, &["k0", "k1", "k2", "k3", "k4"]),
    ("sm_86", None, &["k0", "k1", "k2", "k3", "k4"]),
    ("sm_87", None, &["k0", "k1", "k2", "k3", "k4"]),
    ("sm_89", None, &["k0", "k1", "k2", "k3", "k4"]),
    ("sm_90", None, &["k0", "k1", "k2", "k3", "k4"]),
    ("sm_100", None, &["k0", "k1", "k2", "k3", "k4"]),
    ("sm_103", None, &["k0", "k1", "k2", "k3", "k4"]),
    ("sm_110", None, &["k0", "k1", "k2", "k3", "k4"]),
    ("sm_120", None, &["k0", "k1", "k2", "k3", "k4"]),
    ("compute_120", Some((9, 2)), &["k0", "k1", "k2", "k3", "k4"]),
];

/// A fatbin holding an empty entry for each of `rows`' targets: what `Module::new` validates.
fn fatbin_of(rows: &[fatkit_runtime::ImageRow]) -> &'static [u8] {
    let targets: Vec<fatkit_arch::Target> =
        rows.iter().filter_map(|(t, _, _)| t.parse().ok()).collect();
    Box::leak(fatkit_runtime::fatbin::placeholder(&targets).into_boxed_slice())
}

/// What a typed launch adds to cudarc's builder: on a GPU, both launch paths timed on the same
/// kernel; without one, the only extra work (the argument check) alone.
fn typed_launch() -> Result<()> {
    use fatkit_runtime::cudarc::driver::{CudaContext, CudaSlice, LaunchConfig, PushKernelArg};
    use std::hint::black_box;
    type SaxpyF32<'a> = fatkit_example_kernels::SaxpyF32<'a>;
    let module = fatkit_example_kernels::saxpy().map_err(|e| Error::Input(e.to_string()))?;
    let params = module.params("saxpy_f32");
    let n: u32 = 20_000_000;
    let mut check = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        for _ in 0..n {
            let ok = fatkit_runtime::launch::check::<SaxpyF32<'_>>(
                black_box("saxpy"),
                black_box("saxpy_f32"),
                black_box(params),
            );
            black_box(ok.is_ok());
        }
        check.push(start.elapsed() / n);
    }
    println!(
        "{:<52} {:>8.1}ns",
        "typed launch: the argument check it adds",
        median(check).as_secs_f64() * 1e9
    );
    let gpu = fatkit_runtime::cuda::devices()
        .ok()
        .filter(|d| !d.is_empty());
    if gpu.is_none() {
        println!(
            "{:<52} {:>10}",
            "typed launch vs cudarc's builder (whole launch)", "no GPU"
        );
        return Ok(());
    }
    let run = || -> std::result::Result<(f64, f64), Box<dyn std::error::Error>> {
        let ctx = CudaContext::new(0)?;
        let stream = ctx.default_stream();
        let loaded = module.load(&ctx)?;
        let kernel = loaded.kernel("saxpy_f32")?;
        let f = loaded.function("saxpy_f32")?;
        let x: CudaSlice<f32> = stream.alloc_zeros(1024)?;
        let mut y: CudaSlice<f32> = stream.alloc_zeros(1024)?;
        let cfg = LaunchConfig::for_num_elems(1024);
        let launches = 200_000u32;
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            stream.synchronize()?;
            let start = Instant::now();
            for _ in 0..launches {
                let args: SaxpyF32<'_> = (1024, 2.0, &x, &mut y);
                kernel.launch(&stream, cfg, args)?;
            }
            stream.synchronize()?;
            ours.push(start.elapsed() / launches);
            let start = Instant::now();
            for _ in 0..launches {
                let (n, a) = (1024i32, 2.0f32);
                // SAFETY: saxpy_f32(int, float, const float*, float*) with 1024-float buffers.
                #[allow(unsafe_code)]
                unsafe {
                    stream
                        .launch_builder(&f)
                        .arg(&n)
                        .arg(&a)
                        .arg(&x)
                        .arg(&mut y)
                        .launch(cfg)
                }?;
            }
            stream.synchronize()?;
            theirs.push(start.elapsed() / launches);
        }
        Ok((
            median(ours).as_secs_f64() * 1e9,
            median(theirs).as_secs_f64() * 1e9,
        ))
    };
    let (ours, theirs) = run().map_err(|e| Error::Input(e.to_string()))?;
    println!(
        "{:<52} {:>8.1}ns",
        "cudarc's builder, per launch (saxpy_f32, 1024)", theirs
    );
    println!("{:<52} {:>8.1}ns", "typed launch, per launch", ours);
    println!(
        "{:<52} {:>8.1}ns  (target within 20 ns)",
        "typed launch minus cudarc's builder",
        ours - theirs
    );
    Ok(())
}

fn runtime() -> Result<Outcome> {
    use std::hint::black_box;
    let device = fatkit_runtime::Device::new(fatkit_arch::Cc::new(12, 0), "595.45.04".parse().ok())
        .named("simulated RTX 5090");
    let fatbin = fatbin_of(TEN_TARGETS);
    // First call: a fresh module each time (construction from IMAGES, then the first check).
    let mut construct = Vec::new();
    let mut first = Vec::new();
    for _ in 0..2000 {
        let start = Instant::now();
        let module = fatkit_runtime::Module::new("bench", fatbin, TEN_TARGETS)
            .map_err(|e| Error::Input(e.to_string()))?;
        let built = Instant::now();
        let plan = black_box(module.check(&device)).map_err(|e| Error::Input(e.to_string()))?;
        first.push(built.elapsed());
        construct.push(built - start);
        black_box(plan);
    }
    // Every later call: what a launch pays, the cached plan and the kernel's entry in it.
    let module = fatkit_runtime::Module::new("bench", fatbin, TEN_TARGETS)
        .map_err(|e| Error::Input(e.to_string()))?;
    let _ = module.check(&device);
    // A launcher resolves the kernel's name once, then checks by index on every launch.
    let (k1, k4) = (
        module.kernel_index("k1").unwrap_or(0),
        module.kernel_index("k4").unwrap_or(0),
    );
    let n: u32 = 20_000_000;
    let mut per_call = Vec::new();
    let mut by_name = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        for i in 0..n {
            let idx = if i % 2 == 0 { k1 } else { k4 };
            let ok = module.with_plan(black_box(&device), |plan| {
                plan.kernel_at(black_box(idx)).is_some_and(|r| r.is_ok())
            });
            black_box(ok);
        }
        per_call.push(start.elapsed() / n);
        let start = Instant::now();
        for i in 0..n / 4 {
            let kernel = if i % 2 == 0 { "k1" } else { "k4" };
            black_box(
                module
                    .kernel_check(black_box(&device), black_box(kernel))
                    .is_some(),
            );
        }
        by_name.push(start.elapsed() / (n / 4));
    }
    println!("{:<52} {:>10}", "measure", "value");
    println!(
        "{:<52} {:>8.1}us  (target < 50 us)",
        "first check of a ten-target module (median of 2000)",
        median(first).as_secs_f64() * 1e6
    );
    println!(
        "{:<52} {:>8.1}us",
        "  building the Module from IMAGES, before it",
        median(construct).as_secs_f64() * 1e6
    );
    println!(
        "{:<52} {:>8.1}ns  (target < 20 ns)",
        "every later check (cached plan, kernel by index)",
        median(per_call).as_secs_f64() * 1e9
    );
    println!(
        "{:<52} {:>8.1}ns",
        "  the same by kernel name (kernel_check)",
        median(by_name).as_secs_f64() * 1e9
    );
    typed_launch()?;
    Ok(Outcome::Ok)
}
