//! `cargo xtask`: the fatkit commands, plus `test`, the project's one test entry point.

mod bench;
mod bench_audit;
mod bench_cold;
mod bench_collections;
mod bench_compilers;
mod bench_compilers_host;
mod bench_env;
mod bench_hostile;
mod bench_lock;
mod bench_packages;
mod bench_plan;
mod bench_runtime;
mod bench_stubs;
mod bench_windows;
mod crate_files;
mod fuzz;
mod harness;
mod host_crates;
mod real_crates;
mod shared_cache;
mod test;
mod tidy;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "cargo xtask", about = "fatkit commands for this workspace")]
enum Xtask {
    #[command(flatten)]
    Fatkit(fatkit_cli::Command),
    /// Run every check CI runs: formatting, clippy, and the whole test suite
    Test(test::Test),
    /// Benchmarks with targets (ratios from one run, never timed assertions in tests)
    Bench(bench::Bench),
    /// Coverage-guided fuzzing of every parser (cargo-fuzz on nightly)
    Fuzz(fuzz::Fuzz),
}

fn main() -> std::process::ExitCode {
    let res = match Xtask::parse() {
        Xtask::Fatkit(cmd) => cmd.run(&mut std::io::stdout()),
        Xtask::Test(cmd) => cmd.run(),
        Xtask::Bench(cmd) => cmd.run(),
        Xtask::Fuzz(cmd) => cmd.run(),
    };
    std::process::ExitCode::from(fatkit_cli::finish(res, &mut std::io::stderr()))
}
