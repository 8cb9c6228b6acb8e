//! `cargo xtask bench compilers`: run-time compilers (docs/ARCH_RULES.md section 12) on real
//! inputs, fetched at run time into the cache (never into the repository), each answer checked
//! against what Triton's rule says its users meet.
//!
//! - triton 3.5.0, 3.6.0 and 3.9.0, the x86-64 wheels on a T4 and an H100 and the aarch64
//!   ones on a GB10 and a Jetson T5000 (Thor, sm_110a): the exit code, the first line's words,
//!   the chosen ptxas's kind, release and target in `--json`, the blocker where it is NO, and a
//!   fix naming `TRITON_PTXAS_PATH` or `TRITON_PTXAS_BLACKWELL_PATH` and a triton release where
//!   its ptxas cannot compile for the GPU; 3.9.0 on an H100 under driver 570.124.06, whose
//!   ptxas-blackwell 13.4 makes cubins that driver refuses; an x86-64 wheel on a GB10, refused
//!   by platform.
//! - PTX text in a host binary (candle-kernels from crates.io), and JAX's CUDA 13 plugin beside
//!   NVIDIA's nvcc wheel: see `bench_compilers_host`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fatkit_cli::{Error, Outcome, Result};
use fatkit_toolchain as toolchain;

use crate::bench_env::{audit, check, fetch_for, print_checks, Check};
use crate::bench_packages::fix_lines;
use crate::harness::{at, fatkit_binary, text_at};

/// The chosen compiler as `--json` must name it: its kind, release, target, and whether its
/// targets hold the GPU's.
#[derive(Clone, Copy)]
struct Chosen {
    kind: &'static str,
    release: &'static str,
    target: &'static str,
    compiles: bool,
}

const fn chosen(
    kind: &'static str,
    release: &'static str,
    target: &'static str,
    compiles: bool,
) -> Option<Chosen> {
    Some(Chosen {
        kind,
        release,
        target,
        compiles,
    })
}

/// What an answer must be: its exit code, words of its first line, the chosen compiler, the
/// blocker kinds that may stop it (empty: none), words its fix lines hold.
struct Want {
    exit: i32,
    first: &'static [&'static str],
    chosen: Option<Chosen>,
    blocker: &'static [&'static str],
    fix: &'static [&'static str],
}

/// One case: the triton release, the machine its wheel is for, the GPU and the driver.
struct Case {
    triton: &'static str,
    machine: &'static str,
    gpu: &'static str,
    driver: Option<&'static str>,
    want: Want,
}

const fn yes(
    triton: &'static str,
    machine: &'static str,
    gpu: &'static str,
    first: &'static [&'static str],
    chosen: Option<Chosen>,
) -> Case {
    Case {
        triton,
        machine,
        gpu,
        driver: None,
        want: Want {
            exit: 0,
            first,
            chosen,
            blocker: &[],
            fix: &[],
        },
    }
}

const fn no(
    (triton, machine, gpu, driver): (
        &'static str,
        &'static str,
        &'static str,
        Option<&'static str>,
    ),
    first: &'static [&'static str],
    chosen: Option<Chosen>,
    blocker: &'static [&'static str],
    fix: &'static [&'static str],
) -> Case {
    Case {
        triton,
        machine,
        gpu,
        driver,
        want: Want {
            exit: 1,
            first,
            chosen,
            blocker,
            fix,
        },
    }
}

const P: &str = "triton_ptxas";
const PB: &str = "triton_ptxas_blackwell";
const X86: &str = "x86_64";
const ARM: &str = "aarch64";

/// Every case, as Triton's rule (docs/ARCH_RULES.md section 12) answers it.
const CASES: &[Case] = &[
    yes(
        "3.5.0",
        X86,
        "T4",
        &[": yes on T4"],
        chosen(P, "12.8", "sm_75", true),
    ),
    yes(
        "3.6.0",
        X86,
        "T4",
        &[": yes on T4"],
        chosen(P, "12.8", "sm_75", true),
    ),
    yes(
        "3.9.0",
        X86,
        "T4",
        &[": yes on T4"],
        chosen(P, "12.9", "sm_75", true),
    ),
    yes(
        "3.5.0",
        X86,
        "H100",
        &[": yes on H100"],
        chosen(P, "12.8", "sm_90a", true),
    ),
    yes(
        "3.6.0",
        X86,
        "H100",
        &[": yes on H100"],
        chosen(P, "12.8", "sm_90a", true),
    ),
    yes(
        "3.9.0",
        X86,
        "H100",
        &[": yes on H100"],
        chosen(PB, "13.4", "sm_90a", true),
    ),
    no(
        ("3.5.0", ARM, "GB10", None),
        &[
            ": NO on GB10",
            "ptxas of CUDA 12.8",
            "cannot compile sm_121a",
        ],
        chosen(P, "12.8", "sm_121a", false),
        &["compiler"],
        &[
            "TRITON_PTXAS_PATH",
            "CUDA 12.9 or newer",
            "triton 3.6.0 or newer",
        ],
    ),
    yes(
        "3.6.0",
        ARM,
        "GB10",
        &[": yes on GB10"],
        chosen(PB, "12.9", "sm_121a", true),
    ),
    yes(
        "3.9.0",
        ARM,
        "GB10",
        &[": yes on GB10"],
        chosen(PB, "13.4", "sm_121a", true),
    ),
    no(
        ("3.5.0", ARM, "Jetson T5000", None),
        &[
            ": NO on Jetson T5000",
            "ptxas of CUDA 12.8",
            "cannot compile sm_110a",
        ],
        chosen(P, "12.8", "sm_110a", false),
        &["compiler"],
        &[
            "TRITON_PTXAS_PATH",
            "CUDA 13.0 or newer",
            "triton 3.7.1 or newer",
        ],
    ),
    no(
        ("3.6.0", ARM, "Jetson T5000", None),
        &[
            ": NO on Jetson T5000",
            "ptxas-blackwell of CUDA 12.9",
            "cannot compile sm_110a",
        ],
        chosen(PB, "12.9", "sm_110a", false),
        &["compiler"],
        &[
            "TRITON_PTXAS_BLACKWELL_PATH",
            "CUDA 13.0 or newer",
            "triton 3.7.1 or newer",
        ],
    ),
    yes(
        "3.9.0",
        ARM,
        "Jetson T5000",
        &[": yes on Jetson T5000"],
        chosen(PB, "13.4", "sm_110a", true),
    ),
    // Its ptxas-blackwell 13.4 compiles sm_90a, and a CUDA 12.8 driver refuses what it makes;
    // the cubins of the CUPTI it bundles (CUDA 13.3) may stop it first: either blocker is right.
    no(
        ("3.9.0", X86, "H100", Some("570.124.06")),
        &[": NO on H100", "580.65.06"],
        chosen(PB, "13.4", "sm_90a", true),
        &["driver", "compiler"],
        &["580.65.06"],
    ),
    // GB10 lives only in aarch64 machines: an x86-64 wheel is refused by platform.
    no(
        ("3.9.0", X86, "GB10", None),
        &[": NO on GB10", "aarch64"],
        None,
        &["platform"],
        &["aarch64 build of triton"],
    ),
];

/// The three triton releases, each for both machines.
const RELEASES: &[&str] = &["3.5.0", "3.6.0", "3.9.0"];

/// Where the wheels of `machine` are kept, fetched from PyPI once.
fn wheels(corpus: &Path, machine: &str) -> Result<PathBuf> {
    let dir = corpus.join(format!("compilers-{machine}"));
    for v in RELEASES {
        fetch_for(
            machine,
            &format!("triton=={v}"),
            false,
            &dir,
            &format!("triton-{v}-"),
        )?;
    }
    Ok(dir)
}

/// The triton `version` wheel of `dir`.
fn wheel(dir: &Path, version: &str) -> Result<PathBuf> {
    let prefix = format!("triton-{version}-");
    std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with(&prefix) && n.ends_with(".whl")
            })
        })
        .ok_or_else(|| {
            crate::harness::failed(format!(
                "bench compilers: no {prefix}*.whl in {}",
                dir.display()
            ))
        })
}

/// A row of the table: the case, the answer's verdict and exit code, the chosen compiler, the
/// blocker, and the time of the text answer.
struct Row {
    case: String,
    verdict: String,
    exit: i32,
    compiler: String,
    blocker: String,
    took: Duration,
}

/// The whole answer (`answer.on[0]`) and the chosen compilers of triton's distribution on it,
/// from `--json`.
fn from_json(text: &str) -> (serde_json::Value, Vec<serde_json::Value>) {
    let v: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    let answer = at(&v, "/files/0/answer");
    let chosen = at(answer, "/distributions")
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| text_at(d, "/name").starts_with("triton "))
        .flat_map(|d| {
            at(d, "/on/0/compilers")
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|c| at(c, "/chosen") == true)
        .collect();
    (at(answer, "/on/0").clone(), chosen)
}

/// The words the text uses for a compiler kind, and its file under `triton/backends/nvidia/bin`.
fn words(kind: &str) -> (&'static str, &'static str) {
    match kind {
        PB => ("ptxas-blackwell", "ptxas-blackwell"),
        _ => ("ptxas", "ptxas"),
    }
}

/// One case: audits the wheel in text and `--json`, prints the answer, checks it.
fn case(fatkit: &Path, dir: &Path, c: &Case, checks: &mut Vec<Check>) -> Result<Row> {
    let input = wheel(dir, c.triton)?.display().to_string();
    let mut args = vec![input.as_str(), "--gpu", c.gpu];
    if let Some(d) = c.driver {
        args.extend(["--driver", d]);
    }
    let name = format!(
        "triton {} ({}) on {}{}",
        c.triton,
        c.machine,
        c.gpu,
        c.driver
            .map_or_else(String::new, |d| format!(", driver {d}"))
    );
    let start = Instant::now();
    let (code, text) = audit(fatkit, &args)?;
    let took = start.elapsed();
    println!(
        "== {name} (exit {code}, {:.2} s)\n{text}",
        took.as_secs_f64()
    );
    let first = text.lines().next().unwrap_or_default();
    let w = &c.want;
    check(
        checks,
        &format!("{name}: exit {}", w.exit),
        code == w.exit,
        format!("exit {code}"),
    );
    for word in w.first {
        check(
            checks,
            &format!("{name}: the first line says {word:?}"),
            first.contains(word),
            "",
        );
    }
    let fixes = fix_lines(&text).join(" ");
    for word in w.fix {
        check(
            checks,
            &format!("{name}: a fix says {word:?}"),
            fixes.contains(word),
            "",
        );
    }
    args.push("--json");
    let (_, json) = audit(fatkit, &args)?;
    let (whole, compilers) = from_json(&json);
    let blocker = text_at(&whole, "/blocker/kind").to_owned();
    json_checks(&name, (&whole, &compilers, &text), w, checks);
    if let (Some(d), Some(c)) = (c.driver, compilers.first()) {
        // Whichever blocker fires first, the chosen ptxas's cubins are too new for the driver.
        check(
            checks,
            &format!("{name}: --json says what the chosen compiler makes needs a newer driver"),
            at(c, "/driver_too_old") == true,
            format!("needs_driver {}, driver {d}", at(c, "/needs_driver")),
        );
    }
    let compiler = compilers.first().map_or_else(
        || "-".to_owned(),
        |c| {
            let s = |f: &str| c[f].as_str().unwrap_or("?").to_owned();
            format!(
                "{} {} for {}",
                words(&s("kind")).0,
                s("release"),
                s("target")
            )
        },
    );
    Ok(Row {
        case: name,
        verdict: text_at(&whole, "/verdict").to_owned(),
        exit: code,
        compiler,
        blocker,
        took,
    })
}

/// The checks of `--json`: the blocker, and the chosen compiler's kind, release, target and
/// whether it compiles; the text naming it where it runs.
fn json_checks(
    name: &str,
    (whole, compilers, text): (&serde_json::Value, &[serde_json::Value], &str),
    w: &Want,
    checks: &mut Vec<Check>,
) {
    let blocker = text_at(whole, "/blocker/kind");
    let want_blocker = match w.blocker {
        [] => "none".to_owned(),
        b => b.join(" or "),
    };
    check(
        checks,
        &format!("{name}: blocker {want_blocker}"),
        w.blocker.is_empty() && blocker.is_empty() || w.blocker.contains(&blocker),
        format!("blocker {blocker:?}"),
    );
    let Some(want) = w.chosen else {
        return;
    };
    let [c] = compilers else {
        check(
            checks,
            &format!("{name}: one chosen compiler in --json"),
            false,
            format!("{} chosen", compilers.len()),
        );
        return;
    };
    let saw = format!(
        "{} {} {} compiles {}",
        at(c, "/kind"),
        at(c, "/release"),
        at(c, "/target"),
        at(c, "/compiles")
    );
    check(
        checks,
        &format!(
            "{name}: --json chooses {} {} for {}, compiles {}",
            want.kind, want.release, want.target, want.compiles
        ),
        at(c, "/kind") == want.kind
            && at(c, "/release") == want.release
            && at(c, "/target") == want.target
            && at(c, "/compiles") == want.compiles,
        saw,
    );
    if w.exit == 0 {
        let (words, file) = words(want.kind);
        let line = format!(
            "run-time compiler: {words} of CUDA {} (triton/backends/nvidia/bin/{file}): compiles {}",
            want.release, want.target
        );
        check(
            checks,
            &format!("{name}: the text says {line:?}"),
            text.contains(&line),
            "",
        );
    }
}

/// The table of every case, as the README has it.
fn print_table(rows: &[Row]) {
    println!("\n== triton's ptxas, per wheel and GPU");
    println!("| case | verdict (exit) | chosen compiler | blocker | seconds |");
    println!("|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} ({}) | {} | {} | {:.2} |",
            r.case,
            r.verdict,
            r.exit,
            r.compiler,
            if r.blocker.is_empty() {
                "-"
            } else {
                &r.blocker
            },
            r.took.as_secs_f64()
        );
    }
}

pub fn run() -> Result<Outcome> {
    let corpus = toolchain::cache_dir().map_err(Error::from)?.join("corpus");
    let x86 = wheels(&corpus, X86)?;
    let arm = wheels(&corpus, ARM)?;
    let fatkit = fatkit_binary()?;
    let mut checks = Vec::new();
    let mut rows = Vec::new();
    for c in CASES {
        let dir = if c.machine == ARM { &arm } else { &x86 };
        rows.push(case(&fatkit, dir, c, &mut checks)?);
    }
    print_table(&rows);
    crate::bench_compilers_host::jax(&fatkit, &corpus, &mut checks)?;
    crate::bench_compilers_host::candle(&fatkit, &mut checks)?;
    let failed = print_checks(&checks);
    Ok(if failed == 0 {
        Outcome::Ok
    } else {
        Outcome::Finding
    })
}
