//! `cargo xtask fuzz`: the coverage-guided campaign over every harness of crates/fatkit-fuzz,
//! with cargo-fuzz (libFuzzer) on the nightly toolchain. Each harness starts from its seeds
//! (`fatkit_fuzz::seeds`) in `fuzz/corpus/<harness>/`; a crash is left in
//! `fuzz/artifacts/<harness>/`, to be fixed and kept in `fuzz/regressions/<harness>/`, which
//! the smoke test replays in every test run.
//!
//! After the campaign every harness's corpus (what libFuzzer kept, the seeds and the
//! regressions) is replayed in process, optimised, and timed input by input: the report is the
//! time per input byte, median and worst, and an input slower than [`SLOW_NS_PER_BYTE`] (past
//! a floor for small inputs) is a finding, as a crash is: a hostile shape of work that grows
//! faster than its input shows there first. `--replay` times the corpus without fuzzing (no
//! nightly toolchain needed).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use fatkit_cli::{Outcome, Result};
use xshell::cmd;

use crate::harness::shell;

#[derive(Debug, Args)]
pub struct Fuzz {
    /// Executions per harness
    #[arg(long, default_value_t = 10_000_000)]
    runs: u64,
    /// Only these harnesses (default: all)
    harness: Vec<String>,
    /// Largest input libFuzzer makes, in bytes
    #[arg(long, default_value_t = 65_536)]
    max_len: usize,
    /// Only time the corpora input by input (no campaign, no nightly toolchain)
    #[arg(long)]
    replay: bool,
}

/// An input slower than this per byte is a finding (about 100x what the parsers take on real
/// files: a fatbin of 1 MB is read in well under a millisecond)...
const SLOW_NS_PER_BYTE: f64 = 10_000.0;
/// ...once it takes longer than this at all (a small input's time is mostly fixed cost).
const SLOW_FLOOR: Duration = Duration::from_millis(50);

impl Fuzz {
    pub fn run(self) -> Result<Outcome> {
        if let Some(outcome) = crate::harness::rerun_optimised() {
            return outcome;
        }
        let root = crate::harness::workspace_root();
        if self.replay {
            return replay_all(&root, &self.harness);
        }
        let sh = shell(&root.join("fuzz"))?;
        let have = cmd!(sh, "cargo +nightly fuzz --version")
            .quiet()
            .ignore_stdout()
            .ignore_stderr()
            .run()
            .is_ok();
        if !have {
            return Err(crate::harness::failed(
                "cargo fuzz on the nightly toolchain is not installed; install it with `rustup toolchain install nightly && cargo +nightly install cargo-fuzz`".to_owned(),
            ));
        }
        let mut failed = Vec::new();
        for &(name, _) in fatkit_fuzz::HARNESSES {
            if !self.harness.is_empty() && !self.harness.iter().any(|h| h == name) {
                continue;
            }
            let corpus = root.join("fuzz/corpus").join(name);
            seed(&root, name, &corpus)?;
            eprintln!("==> fuzz {name}: {} executions", self.runs);
            // No sanitizer: the parsers are safe Rust; overflow checks and debug assertions are
            // on (fuzz/Cargo.toml), so arithmetic bugs still crash.
            let runs = format!("-runs={}", self.runs);
            let max_len = format!("-max_len={}", self.max_len);
            let run = cmd!(
                sh,
                "cargo +nightly fuzz run --sanitizer none -O {name} {corpus} -- {runs} {max_len} -timeout=10 -rss_limit_mb=4096 -print_final_stats=1"
            )
            .run();
            if run.is_err() {
                failed.push(name);
            }
        }
        if failed.is_empty() {
            replay_all(&root, &self.harness)
        } else {
            Err(crate::harness::failed(format!(
                "fuzzing found crashes in {}; see fuzz/artifacts/, fix them, and keep each input in fuzz/regressions/<harness>/",
                failed.join(", ")
            )))
        }
    }
}

/// Writes harness `name`'s seeds into its corpus directory.
fn seed(root: &Path, name: &str, corpus: &Path) -> Result<()> {
    std::fs::create_dir_all(corpus)?;
    for (i, bytes) in fatkit_fuzz::seeds(name, root).iter().enumerate() {
        std::fs::write(corpus.join(format!("seed-{i}")), bytes)?;
    }
    Ok(())
}

/// Every harness's corpus, seeds and regressions replayed and timed (see the module's words).
fn replay_all(root: &Path, only: &[String]) -> Result<Outcome> {
    println!(
        "{:<10} {:>7} {:>10} {:>12} {:>12}  slowest input",
        "harness", "inputs", "MiB", "median ns/B", "worst ns/B"
    );
    let mut slow = Vec::new();
    for &(name, harness) in fatkit_fuzz::HARNESSES {
        if !only.is_empty() && !only.iter().any(|h| h == name) {
            continue;
        }
        let mut inputs: Vec<(String, Vec<u8>)> = fatkit_fuzz::seeds(name, root)
            .into_iter()
            .enumerate()
            .map(|(i, b)| (format!("seed {i}"), b))
            .collect();
        for dir in [
            root.join("fuzz/corpus").join(name),
            root.join("fuzz/regressions").join(name),
        ] {
            for path in files_in(&dir) {
                // The campaign's own corpus: files libFuzzer wrote, at most max_len each.
                if let Ok(bytes) = std::fs::read(&path) {
                    inputs.push((path.display().to_string(), bytes));
                }
            }
        }
        let mut rates: Vec<f64> = Vec::new();
        let mut worst: Option<(f64, Duration, &str, usize)> = None;
        let mut total = 0usize;
        for (label, bytes) in &inputs {
            let start = Instant::now();
            harness(bytes);
            let took = start.elapsed();
            total += bytes.len();
            let rate = took.as_nanos() as f64 / bytes.len().max(1) as f64;
            rates.push(rate);
            if worst.is_none_or(|(w, ..)| rate > w) {
                worst = Some((rate, took, label, bytes.len()));
            }
            if rate > SLOW_NS_PER_BYTE && took > SLOW_FLOOR {
                slow.push(format!(
                    "{name}: {label} ({} bytes) took {:.1} ms, {rate:.0} ns per byte",
                    bytes.len(),
                    took.as_secs_f64() * 1e3
                ));
            }
        }
        rates.sort_by(f64::total_cmp);
        let median = rates.get(rates.len() / 2).copied().unwrap_or(0.0);
        let (w, took, label, len) = worst.unwrap_or((0.0, Duration::ZERO, "-", 0));
        println!(
            "{name:<10} {:>7} {:>10.2} {median:>12.1} {w:>12.1}  {label} ({len} B, {:.2} ms)",
            inputs.len(),
            total as f64 / (1 << 20) as f64,
            took.as_secs_f64() * 1e3
        );
    }
    if slow.is_empty() {
        println!(
            "no input took more than {SLOW_NS_PER_BYTE} ns per byte (past {} ms)",
            SLOW_FLOOR.as_millis()
        );
        Ok(Outcome::Ok)
    } else {
        for s in &slow {
            println!("slow: {s}");
        }
        Ok(Outcome::Finding)
    }
}

/// The files directly in `dir` (none if it does not exist), in name order.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}
