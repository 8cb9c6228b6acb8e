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
//! `cargo xtask bench hostile`: every hostile input shape at large scales, its time and peak
//! memory as the input doubles (see `bench_hostile`).
//!
//! `cargo xtask bench stubs`: kernels compiled out for a GPU in real CUDA wheels from PyPI,
//! counted per library and architecture and compared with cuobjdump -sass (see `bench_stubs`).
//!
//! `cargo xtask bench env`: real Python environments from PyPI, checked and timed (see
//! `bench_env`).
//!
//! `cargo xtask bench environments`: the package's answer on the packages people install, from
//! PyPI (see `bench_packages`).
//!
//! `cargo xtask bench lock`: a real lock judged before install, cold and warm (see
//! `bench_lock`).
//!
//! `cargo xtask bench compilers`: the run-time compilers of real packages from PyPI, Triton's
//! ptxas per release, machine and GPU, and PTX text in a host binary (see `bench_compilers`).
//!
//! `cargo xtask bench windows`: NVIDIA's `win_amd64` wheels against their manylinux twins
//! (`nvidia-curand` 10.4.5.25: `curand64_10.dll` and `libcurand.so.10`), fetched into the cache:
//! the same kernels, targets and containers (see `bench_windows`).
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
use fatkit_cli::{Error, Outcome, Result};
use fatkit_toolchain as toolchain;

use crate::harness::{median, workspace_root, SccacheServer};

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
    /// Kernels compiled out for a GPU in real CUDA wheels from PyPI (vLLM, bitsandbytes):
    /// fatkit's stub counts per library and architecture, against cuobjdump -sass
    Stubs,
    /// Every hostile shape of input at large scales: the whole audit's time and peak memory
    /// at three sizes doubling each time (the README's table)
    Hostile {
        /// Only these shapes [default: all]
        shapes: Vec<String>,
    },
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
    /// The package's answer on the packages people install (fetched now): torch 2.15 and its
    /// environment, vLLM, sgl-kernel, FlashInfer, xformers, ONNX Runtime, torchao and cuDNN on
    /// the GPUs and drivers their users have, each answer checked (docs/ARCH_RULES.md section 11)
    Environments,
    /// The cold path (fetched now): `audit` of torch 2.15.0's libtorch_cuda.so (a verdict and
    /// --json), libcurand (--json) and the torch 2.15.0 environment, against cuobjdump
    /// --list-elf and against the floor of reading the files and inflating every payload
    Cold,
    /// A real lock judged before install (fetched now): vLLM 0.33.0 resolved against PyPI, as
    /// a requirements file and as a pylock.toml, cold and warm, on an RTX 5090, a T4 and an H100
    Lock,
    /// NVIDIA's Windows wheels (fetched now) against their Linux twins: the same kernels,
    /// targets and containers, read from PE sections and ELF ones
    Windows,
    /// Inputs of thousands of files from PyPI (fetched now): flashinfer-cubin 0.6.13's 15,970
    /// cubins on an RTX 5090 and a B200 on one screen, and installed in a container image
    Collections,
    /// Run-time compilers of real packages (fetched now): triton 3.5.0, 3.6.0 and 3.9.0 for
    /// x86-64 on a T4 and an H100 and for aarch64 on a GB10 and a Jetson T5000, each answer
    /// and its chosen ptxas checked (docs/ARCH_RULES.md section 12); jax-cuda13-plugin beside
    /// nvidia-cuda-nvcc on an H100; PTX text in a Rust binary built against candle-kernels
    Compilers,
    /// Host-code crates from crates.io (fetched now) built by compile_library for a profile,
    /// against their own tool for one architecture and nvcc with every -gencode
    HostCrates {
        #[arg(long, default_value = fatkit_package::profile::DEFAULT)]
        profile: String,
        /// Only these: `candle-rotary`, `mistralrs-paged-attn` [default: both]
        crates: Vec<String>,
    },
    /// Kernel sources of public crates from crates.io (fetched now) built for a profile
    Crates {
        #[arg(long, default_value = fatkit_package::profile::DEFAULT)]
        profile: String,
        /// Only these: `candle-kernels` or `candle-kernels@0.8.0` [default: all]
        crates: Vec<String>,
    },
}

impl Bench {
    pub fn run(self) -> Result<Outcome> {
        if let Some(outcome) = crate::harness::rerun_optimised() {
            return outcome;
        }
        match self.what {
            What::Audit { files, runs } => crate::bench_audit::audit(files, runs.max(1)),
            What::Build { profile } => build(&profile),
            What::Runtime => crate::bench_runtime::runtime(),
            What::Stubs => crate::bench_stubs::run(),
            What::Hostile { shapes } => crate::bench_hostile::run(&shapes),
            What::Env => crate::bench_env::run(),
            What::Environments => crate::bench_packages::run(),
            What::Lock => crate::bench_lock::run(),
            What::Cold => crate::bench_cold::run(),
            What::Collections => crate::bench_collections::run(),
            What::Compilers => crate::bench_compilers::run(),
            What::Windows => crate::bench_windows::run(),
            What::Crates { profile, crates } => crates_run(&profile, &crates),
            What::HostCrates { profile, crates } => crate::host_crates::run(&profile, &crates),
            What::SharedCache { profile } => crate::shared_cache::run(&profile),
        }
    }
}

fn timed(cmd: &mut Command) -> Result<(Duration, String)> {
    let start = Instant::now();
    let out = cmd.output()?;
    let took = start.elapsed();
    if !out.status.success() {
        return Err(crate::harness::failed(format!(
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
    let profile = fatkit_package::profile::ProfileSet::built_in().load(profile_name)?;
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
    let launcher = fatkit_toolchain::launcher::provisioned_sccache(
        &toolchain::cache_dir().map_err(Error::from)?,
    );
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

/// `bench crates NAME...`: a crate whose sources hold their own launchers is built the way its
/// users' binaries are, by `compile_library` (`bench host-crates`); the others as modules.
fn crates_run(profile: &str, only: &[String]) -> Result<Outcome> {
    let is_host = |o: &String| {
        crate::host_crates::CRATES
            .iter()
            .any(|c| *o == c.name || *o == format!("{}@{}", c.name, c.version))
    };
    let host: Vec<String> = only.iter().filter(|o| is_host(o)).cloned().collect();
    match (host.is_empty(), host.len() == only.len()) {
        (true, _) => crate::real_crates::run(profile, only),
        (false, true) => crate::host_crates::run(profile, &host),
        (false, false) => Err(crate::harness::failed(format!(
            "{} build as host-code libraries and the others as modules: name them in two runs",
            host.join(", ")
        ))),
    }
}
