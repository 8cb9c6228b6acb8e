//! The parts of `cargo xtask bench compilers` beside Triton: PTX text in a host binary, and an
//! NVIDIA compiler wheel beside the package that runs it.
//!
//! - A Rust program built now against candle-kernels 0.8.4 from crates.io (its build script
//!   runs the provisioned nvcc with `CUDA_COMPUTE_CAP=80` and writes one PTX file per `.cu`
//!   into its `OUT_DIR`, which the crate's constants `include_str!`): audited on an A100 and a
//!   T4, every PTX block of the binary found, with the `.entry` names, `.target` and `.version`
//!   of the file it came from. Where it cannot be built (no provisioned CUDA, no network, over
//!   15 minutes), it is skipped with a message.
//! - jax-cuda13-plugin 0.12.0.1 beside nvidia-cuda-nvcc 13.5.37 (x86-64 wheels), as wheels in
//!   one directory and installed into one site-packages, on an H100: the plugin's answer, and
//!   the nvcc wheel's ptxas named as a run-time compiler.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fatkit_cli::{Error, Result};
use fatkit_toolchain as toolchain;

use crate::bench_env::{audit, check, fetch, install, Check};
use crate::harness::{at, text_at};

/// The candle-kernels release built: the last whose build script only writes PTX (0.9 adds a
/// static library of MoE kernels linked against cudart, 0.10 moved to cudaforge).
const CANDLE: &str = "0.8.4";

/// The PTX constants of candle-kernels 0.8.4, one per `.cu` file.
const MODULES: &[&str] = &[
    "AFFINE",
    "BINARY",
    "CAST",
    "CONV",
    "FILL",
    "INDEXING",
    "QUANTIZED",
    "REDUCE",
    "SORT",
    "TERNARY",
    "UNARY",
];

/// How long the build may take on this 2-core machine before it is skipped.
const BUILD_LIMIT: Duration = Duration::from_secs(15 * 60);

/// One PTX file candle-kernels' build script wrote: its name, `.entry` names, `.target` and
/// `.version`.
struct PtxFile {
    name: String,
    entries: BTreeSet<String>,
    target: String,
    version: String,
}

impl PtxFile {
    fn read(path: &Path) -> Result<PtxFile> {
        let text = std::fs::read_to_string(path)?;
        let mut file = PtxFile {
            name: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            entries: BTreeSet::new(),
            target: String::new(),
            version: String::new(),
        };
        for line in text.lines() {
            let t = line.trim_start();
            let directive = |d: &str| t.strip_prefix(d).map(|r| r.trim().to_owned());
            if let Some(v) = directive(".version ") {
                file.version = v;
            } else if let Some(v) = directive(".target ") {
                file.target = v;
            } else if let Some(rest) = t
                .strip_prefix(".visible .entry ")
                .or_else(|| t.strip_prefix(".entry "))
            {
                let name: String = rest
                    .chars()
                    .take_while(|c| *c != '(' && !c.is_whitespace())
                    .collect();
                file.entries.insert(name);
            }
        }
        Ok(file)
    }
}

/// Why the candle part is skipped, said once.
fn skip(why: &str) {
    println!("\n== candle-kernels {CANDLE} in a Rust binary: skipped: {why}");
}

/// The directory of the program, its manifest and `main`, fresh.
fn write_program(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir.join("src"))?;
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"candle-ptx-probe\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [dependencies]\ncandle-kernels = \"={CANDLE}\"\n\n[workspace]\n"
        ),
    )?;
    let refs: String = MODULES
        .iter()
        .map(|m| format!("        candle_kernels::{m},\n"))
        .collect();
    std::fs::write(
        dir.join("src/main.rs"),
        format!(
            "fn main() {{\n    let all = [\n{refs}    ];\n    \
             // Through black_box, so that the PTX text stays in the binary as a program loading it has it.\n    \
             let bytes: usize = std::hint::black_box(all).iter().map(|p| p.len()).sum();\n    \
             println!(\"{{}} PTX modules, {{bytes}} bytes\", all.len());\n}}\n"
        ),
    )?;
    Ok(())
}

/// `cargo build --release` of the program in `dir` with the provisioned nvcc first on PATH,
/// its log in `dir/build.log`: how long it took, or why it did not finish.
fn build(
    dir: &Path,
    nvcc_bin: &Path,
    cuda_root: &Path,
) -> Result<std::result::Result<Duration, String>> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![nvcc_bin.to_owned()];
    paths.extend(std::env::split_paths(&path));
    let log = std::fs::File::create(dir.join("build.log"))?;
    let start = Instant::now();
    let mut child = Command::new(crate::harness::cargo())
        .args(["build", "--release"])
        .current_dir(dir)
        .env(
            "PATH",
            std::env::join_paths(paths).map_err(|e| crate::harness::failed(e.to_string()))?,
        )
        .env("CUDA_COMPUTE_CAP", "80")
        .env("CUDA_ROOT", cuda_root)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env_remove("RUSTFLAGS")
        .stdout(log.try_clone()?)
        .stderr(log)
        .stdin(Stdio::null())
        .spawn()?;
    loop {
        if let Some(status) = child.try_wait()? {
            let took = start.elapsed();
            if status.success() {
                return Ok(Ok(took));
            }
            let text = std::fs::read_to_string(dir.join("build.log")).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(8).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Ok(Err(format!(
                "cargo build failed ({status}):\n{}",
                tail.join("\n")
            )));
        }
        if start.elapsed() > BUILD_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(Err(format!(
                "cargo build took over {} s on this machine",
                BUILD_LIMIT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The PTX files the build script wrote (`target/release/build/candle-kernels-*/out/*.ptx`).
fn ptx_files(target: &Path) -> Result<Vec<PtxFile>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(target.join("release/build"))?.flatten() {
        if !e
            .file_name()
            .to_string_lossy()
            .starts_with("candle-kernels-")
        {
            continue;
        }
        let Ok(files) = std::fs::read_dir(e.path().join("out")) else {
            continue;
        };
        for f in files.flatten() {
            if f.path().extension().is_some_and(|x| x == "ptx") {
                out.push(PtxFile::read(&f.path())?);
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The candle part: the program built, its PTX files read, its binary audited and checked.
pub(crate) fn candle(fatkit: &Path, checks: &mut Vec<Check>) -> Result<()> {
    let Some(nvcc) = toolchain::provisioned(toolchain::DEFAULT_CUDA).map_err(Error::from)? else {
        skip("no provisioned CUDA (cargo xtask build-kernels provisions it)");
        return Ok(());
    };
    let bin = nvcc.bin_dir();
    let root = bin.parent().map(Path::to_path_buf).unwrap_or_default();
    if !root.join("include/cuda.h").is_file() {
        skip(&format!("no include/cuda.h under {}", root.display()));
        return Ok(());
    }
    let dir = std::env::temp_dir().join("fatkit-bench-candle-ptx");
    write_program(&dir)?;
    eprintln!("bench compilers: building a program against candle-kernels {CANDLE} (nvcc of {}, CUDA_COMPUTE_CAP=80)", bin.display());
    let took = match build(&dir, &bin, &root)? {
        Ok(t) => t,
        Err(why) => {
            skip(&format!(
                "{why}\n(its log: {})",
                dir.join("build.log").display()
            ));
            return Ok(());
        }
    };
    let exe = dir.join("target/release/candle-ptx-probe");
    let files = ptx_files(&dir.join("target"))?;
    binary_checks(fatkit, (&exe, &files), took, checks)?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The binary audited on an A100 (every kernel by PTX JIT) and a T4 (none), and every PTX file
/// the build wrote found in it as a block of text with its kernels, target and ISA.
fn binary_checks(
    fatkit: &Path,
    (exe, files): (&Path, &[PtxFile]),
    took: Duration,
    checks: &mut Vec<Check>,
) -> Result<()> {
    let total: usize = files.iter().map(|f| f.entries.len()).sum();
    println!(
        "\n== candle-kernels {CANDLE} in a Rust binary ({} bytes, cargo build {:.1} s): {} PTX files, {total} .entry",
        std::fs::metadata(exe)?.len(),
        took.as_secs_f64(),
        files.len()
    );
    for f in files {
        println!(
            "  {}: {} .entry, .target {}, .version {}",
            f.name,
            f.entries.len(),
            f.target,
            f.version
        );
    }
    check(
        checks,
        "candle: its build wrote one PTX file per constant",
        files.len() == MODULES.len(),
        format!("{} files", files.len()),
    );
    let e = exe.display().to_string();
    for (gpu, exit, first) in [
        ("A100", 0, ": yes, by PTX JIT on A100"),
        ("T4", 1, ": NO on T4"),
    ] {
        let start = Instant::now();
        let (code, text) = audit(fatkit, &[&e, "--gpu", gpu])?;
        let secs = start.elapsed().as_secs_f64();
        println!("== the candle binary on {gpu} (exit {code}, {secs:.2} s)\n{text}");
        let name = format!("candle binary on {gpu}");
        check(
            checks,
            &format!("{name}: exit {exit}"),
            code == exit,
            format!("exit {code}"),
        );
        check(
            checks,
            &format!("{name}: the first line says {first:?}"),
            text.lines().next().unwrap_or_default().contains(first),
            "",
        );
        let (_, json) = audit(fatkit, &[&e, "--gpu", gpu, "--json"])?;
        let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
        let on = at(&v, "/files/0/answer/on/0");
        let fields: &[&str] = if exit == 0 {
            &["kernels", "run", "by_ptx"]
        } else {
            &["kernels", "failing"]
        };
        for f in fields {
            check(
                checks,
                &format!("{name}: --json {f} is every .entry ({total})"),
                at(on, &format!("/{f}")).as_u64() == Some(total as u64),
                format!("{f} {}", at(on, &format!("/{f}"))),
            );
        }
        if exit == 0 {
            block_checks(&v, files, checks);
        }
    }
    Ok(())
}

/// Every PTX file found in the binary as one block of text: its kernels, its target as
/// `compute_NN` and its `.version` as the PTX ISA.
fn block_checks(v: &serde_json::Value, files: &[PtxFile], checks: &mut Vec<Check>) {
    let blocks: Vec<&serde_json::Value> = at(v, "/files/0/report/images")
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| !at(i, "/origin/text").is_null())
        .collect();
    check(
        checks,
        "candle binary: --json finds one block of PTX text per file",
        blocks.len() == files.len(),
        format!("{} blocks", blocks.len()),
    );
    for f in files {
        let target = f.target.replacen("sm_", "compute_", 1);
        let block = blocks.iter().find(|b| {
            let kernels: BTreeSet<String> = at(b, "/kernels")
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect();
            kernels == f.entries
        });
        let saw = block.map_or_else(
            || "no block with its kernels".to_owned(),
            |b| {
                format!(
                    "{} ISA {} in {}",
                    text_at(b, "/target"),
                    text_at(b, "/ptx_isa"),
                    text_at(b, "/origin/text")
                )
            },
        );
        check(
            checks,
            &format!(
                "candle binary: {}: its {} kernels, {target}, PTX ISA {}",
                f.name,
                f.entries.len(),
                f.version
            ),
            block.is_some_and(|b| {
                text_at(b, "/target") == target && text_at(b, "/ptx_isa") == f.version
            }),
            saw,
        );
    }
}

/// The JAX plugin and the nvcc wheel its `with-cuda` extra requires.
const JAX: &[(&str, &str)] = &[
    ("jax-cuda13-plugin==0.12.0.1", "jax_cuda13_plugin-0.12.0.1"),
    ("nvidia-cuda-nvcc==13.5.37", "nvidia_cuda_nvcc-13.5.37"),
];

/// jax-cuda13-plugin beside nvidia-cuda-nvcc on an H100, as wheels in one directory and
/// installed: the plugin runs, and the nvcc wheel's ptxas is named as a run-time compiler.
pub(crate) fn jax(fatkit: &Path, corpus: &Path, checks: &mut Vec<Check>) -> Result<()> {
    let dir = corpus.join("compilers-jax");
    for (spec, marker) in JAX {
        fetch(spec, false, &dir, marker)?;
    }
    let site = install(&dir)?;
    let line = "run-time compiler: ptxas of CUDA 13.5 (nvidia/cu13/bin/ptxas): compiles sm_90";
    for (what, input) in [("as wheels in one directory", &dir), ("installed", &site)] {
        let name = format!("jax-cuda13-plugin and nvidia-cuda-nvcc {what}, on an H100");
        let input = input.display().to_string();
        let start = Instant::now();
        let (code, text) = audit(fatkit, &[&input, "--gpu", "H100"])?;
        let secs = start.elapsed().as_secs_f64();
        println!("\n== {name} (exit {code}, {secs:.2} s)\n{text}");
        check(
            checks,
            &format!("{name}: exit 0"),
            code == 0,
            format!("exit {code}"),
        );
        for (words, held) in [
            (
                ": yes on H100",
                text.lines()
                    .next()
                    .unwrap_or_default()
                    .contains(": yes on H100"),
            ),
            (
                "jax_cuda13_plugin 0.12.0.1: yes",
                text.contains("jax_cuda13_plugin 0.12.0.1: yes"),
            ),
            (line, text.contains(line)),
        ] {
            check(checks, &format!("{name}: says {words:?}"), held, "");
        }
        let (_, json) = audit(fatkit, &[&input, "--gpu", "H100", "--json"])?;
        let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
        let ptxas = at(&v, "/files/0/answer/distributions")
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|d| {
                at(d, "/on/0/compilers")
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .find(|c| text_at(c, "/name") == "nvidia/cu13/bin/ptxas");
        check(
            checks,
            &format!("{name}: --json names nvidia/cu13/bin/ptxas 13.5, compiling sm_90"),
            ptxas.as_ref().is_some_and(|c| {
                text_at(c, "/kind") == "ptxas"
                    && text_at(c, "/release") == "13.5"
                    && text_at(c, "/target") == "sm_90"
                    && at(c, "/compiles") == true
            }),
            ptxas.map_or_else(|| "not named".to_owned(), |c| c.to_string()),
        );
    }
    Ok(())
}
