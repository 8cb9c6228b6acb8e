//! `cargo xtask fuzz`: the coverage-guided campaign over every harness of crates/fatkit-fuzz,
//! with cargo-fuzz (libFuzzer) on the nightly toolchain. Each harness starts from its seeds
//! (`fatkit_fuzz::seeds`) in `fuzz/corpus/<harness>/`; a crash is left in
//! `fuzz/artifacts/<harness>/`, to be fixed and kept in `fuzz/regressions/<harness>/`, which
//! the smoke test replays in every test run.

use std::path::Path;

use clap::Args;
use fatkit_cli::{Error, Outcome, Result};
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
}

impl Fuzz {
    pub fn run(self) -> Result<Outcome> {
        let root = crate::harness::workspace_root();
        let sh = shell(&root.join("fuzz"))?;
        let have = cmd!(sh, "cargo +nightly fuzz --version")
            .quiet()
            .ignore_stdout()
            .ignore_stderr()
            .run()
            .is_ok();
        if !have {
            return Err(Error::Input(
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
            Ok(Outcome::Ok)
        } else {
            Err(Error::Input(format!(
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
