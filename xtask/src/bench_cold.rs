//! `cargo xtask bench cold`: the cold path (page cache warm, no readings cache) of `audit` on
//! torch 2.15.0's `libtorch_cuda.so` (ZSTD entries), on libcurand and on the whole `pip install
//! torch==2.15.0` environment, fetched at run time, each set beside the tool a user would run
//! otherwise (`cuobjdump --list-elf`) and beside its floor: reading the files and inflating
//! each distinct payload once on every core, in process, and nothing else.
//!
//! Why that is a floor: a verdict says which kernels each image holds (the driver finds a
//! kernel only in the image it loads: docs/ARCH_RULES.md section 2), and a cubin keeps its
//! kernels' names in tables that only its section headers locate, and nvcc writes those at
//! the image's end: every image is inflated whole before its first name is known. The
//! lines printed say where the rest of the time goes, in bytes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fatkit_cli::{Error, Outcome, Result};
use fatkit_fatbin::inspect::{inflate_only, Inflated};
use fatkit_fatbin::Limits;
use fatkit_toolchain as toolchain;

use crate::bench_env::{fetch, install, walk};
use crate::harness::{fatkit_binary, median, whole};

/// Runs of each command, alternating with the other tool's.
const RUNS: usize = 3;

pub(crate) fn run() -> Result<Outcome> {
    let corpus = toolchain::cache_dir().map_err(Error::from)?.join("corpus");
    let t215 = corpus.join("env-torch-2.15.0");
    fetch("torch==2.15.0", true, &t215, "torch-2.15.0")?;
    let env = install(&t215)?;
    let t26 = corpus.join("env-torch-2.6.0");
    fetch("torch==2.6.0", true, &t26, "torch-2.6.0")?;
    let env26 = install(&t26)?;
    let fatkit = fatkit_binary()?;
    let tc = toolchain::find_default().map_err(Error::from)?;
    let Some(cuobjdump) = tc.as_ref().and_then(|t| t.cuobjdump()) else {
        return Err(crate::harness::failed(
            "bench cold: no cuobjdump; run `fatkit toolchain install` first",
        ));
    };
    let cores = fatkit_fatbin::par::cores();
    println!("== the cold path: page cache warm, no readings cache, {cores} cores, median of {RUNS} alternating runs");
    println!("floor = reading the file(s) and inflating each distinct payload once on every core, in process, nothing else");
    let torch = env.join("torch/lib/libtorch_cuda.so");
    let curand = env26.join("nvidia/curand/lib/libcurand.so.10");
    for (lib, args, target) in [
        (&torch, &["--gpu", "RTX 5090"][..], 10.0),
        (&torch, &["--json"][..], 3.0),
        (&curand, &["--json"][..], 3.0),
    ] {
        library(&fatkit, &cuobjdump, lib, args, target)?;
    }
    environment(&fatkit, &env)?;
    Ok(Outcome::Ok)
}

/// `fatkit audit LIB ARGS` against `cuobjdump --list-elf LIB` and against the floor.
fn library(fatkit: &Path, cuobjdump: &Path, lib: &Path, args: &[&str], target: f64) -> Result<()> {
    let mut ours_args: Vec<&std::ffi::OsStr> = vec!["audit".as_ref(), lib.as_os_str()];
    ours_args.extend(args.iter().map(std::ffi::OsStr::new));
    let theirs_args: Vec<&std::ffi::OsStr> = vec!["--list-elf".as_ref(), lib.as_os_str()];
    whole(fatkit, &ours_args)?;
    let (mut ours, mut theirs, mut floors) = (Vec::new(), Vec::new(), Vec::new());
    let mut bytes = Bytes::default();
    for _ in 0..RUNS {
        ours.push(whole(fatkit, &ours_args)?.0);
        theirs.push(whole(cuobjdump, &theirs_args)?.0);
        let (took, b) = floor(std::slice::from_ref(&lib.to_owned()))?;
        floors.push(took);
        bytes = b;
    }
    let (ours, theirs, floor) = (median(ours), median(theirs), median(floors));
    let name = lib.file_name().unwrap_or_default().to_string_lossy();
    println!(
        "\n{name} `audit {}`: fatkit {}, cuobjdump --list-elf {}: {:.1}x faster (target {target}x)",
        args.join(" "),
        secs(ours),
        secs(theirs),
        ratio(theirs, ours)
    );
    println!(
        "  floor {} (read {}; inflate {}): cuobjdump / floor = {:.1}x, the most any verdict that knows every image's kernels reaches on these cores; fatkit is {:.2}x its floor",
        secs(floor),
        secs(bytes.read),
        secs(floor.saturating_sub(bytes.read)),
        ratio(theirs, floor),
        ratio(ours, floor)
    );
    println!("  bytes: {}", bytes.line());
    Ok(())
}

/// `fatkit audit ENV --gpu "RTX 5090"` against its floor.
fn environment(fatkit: &Path, env: &Path) -> Result<()> {
    let args: Vec<&std::ffi::OsStr> = vec![
        "audit".as_ref(),
        env.as_os_str(),
        "--gpu".as_ref(),
        "RTX 5090".as_ref(),
    ];
    let mut files = Vec::new();
    walk(env, &mut files)?;
    whole(fatkit, &args)?;
    let (mut ours, mut floors, mut peak) = (Vec::new(), Vec::new(), 0);
    let mut bytes = Bytes::default();
    for _ in 0..RUNS {
        let (t, p) = whole(fatkit, &args)?;
        ours.push(t);
        peak = peak.max(p.unwrap_or(0));
        let (took, b) = floor(&files)?;
        floors.push(took);
        bytes = b;
    }
    let (ours, floor) = (median(ours), median(floors));
    println!(
        "\npip install torch==2.15.0 environment `audit --gpu \"RTX 5090\"`: fatkit {} (target 3 s), peak {} MiB",
        secs(ours),
        peak / 1024
    );
    println!(
        "  floor {} (read {}; inflate {}): fatkit is {:.2}x its floor",
        secs(floor),
        secs(bytes.read),
        secs(floor.saturating_sub(bytes.read)),
        ratio(ours, floor)
    );
    println!("  bytes: {}", bytes.line());
    Ok(())
}

/// What the floor read and inflated, and how long its reading alone took.
#[derive(Default)]
struct Bytes {
    files: usize,
    read_bytes: u64,
    read: Duration,
    /// The whole floor: reading and inflating.
    took: Duration,
    inflated: Inflated,
}

impl Bytes {
    fn line(&self) -> String {
        let i = &self.inflated;
        format!(
            "{} file(s), {:.0} MB read; {} entries, {} distinct and loadable, {:.0} MB stored, {:.2} GB inflated ({:.1} GB/s per core of inflating)",
            self.files,
            self.read_bytes as f64 / 1e6,
            i.entries,
            i.distinct,
            i.stored as f64 / 1e6,
            i.images as f64 / 1e9,
            self.rate(),
        )
    }

    /// Gigabytes inflated per second per core: the payloads' bytes out over the inflating
    /// part of the floor, all cores at work.
    fn rate(&self) -> f64 {
        let inflating = self.took.saturating_sub(self.read).as_secs_f64();
        self.inflated.images as f64
            / 1e9
            / (inflating * fatkit_fatbin::par::cores() as f64).max(1e-9)
    }
}

/// The floor of reading `files` (every core, largest first, as audit reads a directory)
/// and inflating what they hold; and, once more, their reading alone.
fn floor(files: &[PathBuf]) -> Result<(Duration, Bytes)> {
    let limits = Limits::default();
    let mut by_size: Vec<(u64, &PathBuf)> = files
        .iter()
        .map(|f| (std::fs::symlink_metadata(f).map_or(0, |m| m.len()), f))
        .collect();
    by_size.sort_by_key(|(len, _)| std::cmp::Reverse(*len));
    let read_only = Instant::now();
    let sizes = fatkit_fatbin::par::map(&by_size, Vec::new, |buf, (_, f)| {
        read_into(f, buf).map(|()| buf.len() as u64)
    });
    let read = read_only.elapsed();
    let start = Instant::now();
    let each = fatkit_fatbin::par::map(&by_size, Vec::new, |buf, (_, f)| {
        read_into(f, buf)?;
        Ok::<_, Error>(inflate_only(buf, &limits))
    });
    let took = start.elapsed();
    let mut bytes = Bytes {
        files: files.len(),
        read,
        took,
        ..Bytes::default()
    };
    for size in sizes {
        bytes.read_bytes += size?;
    }
    for one in each {
        let i = one?;
        bytes.inflated.entries += i.entries;
        bytes.inflated.distinct += i.distinct;
        bytes.inflated.stored += i.stored;
        bytes.inflated.images += i.images;
    }
    Ok((took, bytes))
}

/// `path` read whole into `buf` as audit reads it.
fn read_into(path: &Path, buf: &mut Vec<u8>) -> Result<()> {
    use fatkit_audit::read;
    let (file, len) = read::open_regular(path)?;
    read::read_into(file, len, buf).map_err(Error::from)
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}
