//! The fatkit command line as a library: every command is a clap `Args` struct with a `run`
//! method, so the `fatkit` binary and any workspace's `cargo xtask` share them.
//!
//! Exit codes: 0 success, 1 a finding (a gap, a GPU not covered, a compile error),
//! 2 bad input or an internal failure.

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

pub mod audit;
pub mod build_kernels;
pub mod diff;
pub mod doctor;
pub mod package;
pub mod plan;
pub mod profiles;
pub mod toolchain;

/// What a command found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0.
    Ok,
    /// Exit 1: the command ran and found a gap.
    Finding,
}

/// Why a command could not do its job (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Profile(#[from] fatkit_package::profile::ProfileError),
    #[error(transparent)]
    Toolchain(#[from] fatkit_toolchain::ToolchainError),
    #[error("--gpu: {0}")]
    Gpu(#[from] fatkit_arch::products::LookupError),
    /// A value that does not parse: the option it was given to, and why.
    #[error("{option}: {error}")]
    Parse {
        option: &'static str,
        error: fatkit_arch::ParseError,
    },
    #[error(transparent)]
    Audit(#[from] fatkit_audit::Error),
    #[error(transparent)]
    Build(#[from] fatkit_build::BuildError),
    /// `audit` ran, and whether some kernel runs is unknown.
    #[error("whether some kernel runs is unknown: the rules, which variant is loaded, or what is built at install cannot be said (see the reasons above)")]
    AuditUnknown,
    /// `audit` ran, and some input is unknown or corrupt.
    #[error("some input is unknown or corrupt; see the errors above")]
    AuditInvalid,
    /// `--matrix SET` names no set.
    #[error("--matrix: no GPU set named '{set}'; use one of {known}, or give --gpu several times")]
    NoGpuSet { set: String, known: String },
    /// `diff` of two inputs of different kinds.
    #[error("diff: OLD is {old} and NEW {new}; compare two of a kind (two wheels, two directories or locks, two images, two binaries)")]
    DiffKinds {
        old: &'static str,
        new: &'static str,
    },
    /// `--fail-on` names no regression.
    #[error("--fail-on: '{0}' is not a kind of regression; use answer-worse, gpu-lost, kernels-lost, targets-dropped, ptx-removed, floor-raised, stubs-added, now-by-ptx or library-gone")]
    FailOn(String),
    #[error("--driver: needs a GPU to check; add --gpu NAME or --matrix")]
    DriverWithoutGpu,
    /// `--require` is empty, or neither a profile nor a target list.
    #[error(transparent)]
    Require(#[from] fatkit_package::profile::RequireError),
    #[error("no toolchain found; run `cargo xtask toolchain install`")]
    NoToolchain,
    #[error(transparent)]
    Plan(#[from] fatkit_arch::target_search::PlanError),
    #[error(transparent)]
    Measure(#[from] fatkit_project::weigh::MeasureError),
    /// `plan` without DIR: the candidates did not build.
    #[error("the candidate modules did not build (the errors above); fix them, or name a directory of built modules (fatkit plan DIR)")]
    PlanNotBuilt,
    /// `plan --write` without DIR in a workspace of several units.
    #[error("--write: the workspace has {0} units to plan; name one unit's modules (fatkit plan DIR --write FILE.toml)")]
    PlanWhich(usize),
    /// `plan --budget` is not a size.
    #[error("--budget: {0}")]
    Budget(String),
    /// `plan --for crate` for a unit whose modules no `.crate` holds.
    #[error("--for crate: {0} is not vendored: its modules are built where the package is built (target/fatkit), and its .crate holds none of them; plan it --for fatbin (the modules a binary embeds), or vendor them ([package.metadata.fatkit] vendor = \"kernels/prebuilt\") to ship them in the .crate")]
    PlanNotVendored(String),
    /// `plan --for` names no way of shipping.
    #[error("--for: '{0}' is not a way a package ships; use crate, wheel or fatbin")]
    Shipped(String),
    /// An error of a command a workspace's own xtask adds beside fatkit's (its benches, its
    /// fuzzing), as that command words it.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

impl Error {
    pub(crate) const EXIT_CODE: u8 = 2;
}

/// Parses an optional option value, naming the option in the error.
pub(crate) fn parse_option<T>(option: &'static str, value: Option<&str>) -> Result<Option<T>>
where
    T: std::str::FromStr<Err = fatkit_arch::ParseError>,
{
    value
        .map(str::parse)
        .transpose()
        .map_err(|error| Error::Parse { option, error })
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The commands every fatkit front end offers.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Which GPUs and drivers each kernel of a binary, wheel, directory or Python environment runs on
    Audit(audit::Audit),
    /// Build every kernel module (cuda-src/*.cu, [package.metadata.fatkit]) for every target of a profile
    BuildKernels(build_kernels::BuildKernels),
    /// What changed between two releases: GPUs lost, kernels lost, PTX removed, driver floors raised
    Diff(diff::Diff),
    /// Build the release binaries, audit every kernel against a profile, write dist/*.tar.gz
    Package(package::Package),
    /// The toolchains found, what each builds, the GPUs and driver visible, what to fix
    Doctor(doctor::Doctor),
    /// List the arch profiles, or explain one: targets, toolkits, GPUs covered
    Profiles(profiles::Profiles),
    /// Of the targets built in a directory, the set covering the most GPUs within a size budget
    Plan(Box<plan::Plan>),
    /// Provision and list CUDA toolchains (NVIDIA's wheels, no root)
    Toolchain(toolchain::ToolchainCmd),
}

impl Command {
    pub fn run(self, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        match self {
            Command::Audit(cmd) => cmd.run(out),
            Command::BuildKernels(cmd) => cmd.run(out),
            Command::Diff(cmd) => cmd.run(out),
            Command::Doctor(cmd) => cmd.run(out),
            Command::Package(cmd) => cmd.run(out),
            Command::Profiles(cmd) => cmd.run(out),
            Command::Plan(cmd) => (*cmd).run(out),
            Command::Toolchain(cmd) => cmd.run(out),
        }
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "fatkit",
    version,
    about = "Build, pack and audit multi-architecture CUDA fatbins"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Runs a command and turns its outcome into an exit code, printing errors to `err` as
/// `error: ...` lines.
pub fn finish(res: Result<Outcome>, err: &mut dyn Write) -> u8 {
    match res {
        Ok(Outcome::Ok) => 0,
        Ok(Outcome::Finding) => 1,
        // The reader went away (`fatkit audit big.so | head`): stop quietly, like other tools.
        Err(Error::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            // Nothing better to do if stderr itself is gone.
            let _ = writeln!(err, "error: {e}");
            Error::EXIT_CODE
        }
    }
}

/// Parses `args` (program name first) and runs the command; what `fatkit` does.
pub fn run_args<I, T>(args: I, out: &mut (dyn Write + Send), err: &mut dyn Write) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    run_as("fatkit", args, out, err)
}

/// [`run_args`] for the program the user typed as `bin_name` (`fatkit`, `cargo fatkit`): the
/// name its usage and errors show.
fn run_as<I, T>(bin_name: &str, args: I, out: &mut (dyn Write + Send), err: &mut dyn Write) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let parsed = Cli::command()
        .bin_name(bin_name)
        .try_get_matches_from(args)
        .and_then(|m| Cli::from_arg_matches(&m));
    match parsed {
        Ok(cli) => finish(cli.command.run(out), err),
        Err(e) => {
            let to_out = !e.use_stderr();
            let text = e.render().to_string();
            let _ = if to_out {
                out.write_all(text.as_bytes())
            } else {
                err.write_all(text.as_bytes())
            };
            if to_out {
                0
            } else {
                Error::EXIT_CODE
            }
        }
    }
}

/// SIGINT and SIGTERM stop the compilers a build started before fatkit exits (130, 143).
fn stop_on_signals() {
    if let Err(e) = fatkit_toolchain::command::stop_on_signals() {
        eprintln!("warning: cannot handle SIGINT and SIGTERM ({e}); compilers may outlive an interrupted build");
    }
}

/// The `fatkit` binary.
pub fn main() -> ExitCode {
    stop_on_signals();
    let mut out = fatkit_package::out::ReaderMayLeave::new(std::io::stdout());
    let code = run_args(std::env::args_os(), &mut out, &mut std::io::stderr());
    ExitCode::from(code)
}

/// The arguments of `cargo fatkit ARGS`: cargo runs `cargo-fatkit fatkit ARGS`, so the word
/// `fatkit` after the program is cargo's, not the user's (`cargo-fatkit ARGS` run by hand has
/// none).
fn cargo_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    if args.get(1).is_some_and(|a| a == "fatkit") {
        args.remove(1);
    }
    args
}

/// The `cargo-fatkit` binary: `cargo fatkit build-kernels`, `cargo fatkit audit FILE`, ... in
/// any workspace, without an xtask.
pub fn cargo_main() -> ExitCode {
    stop_on_signals();
    let mut out = fatkit_package::out::ReaderMayLeave::new(std::io::stdout());
    let args = cargo_args(std::env::args_os());
    let code = run_as("cargo fatkit", args, &mut out, &mut std::io::stderr());
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_runs_the_subcommand_with_its_name_first() {
        let os = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            cargo_args(os(&["cargo-fatkit", "fatkit", "audit", "x"])),
            os(&["cargo-fatkit", "audit", "x"])
        );
        assert_eq!(
            cargo_args(os(&["cargo-fatkit", "audit", "fatkit"])),
            os(&["cargo-fatkit", "audit", "fatkit"])
        );
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run_as(
            "cargo fatkit",
            ["cargo-fatkit", "--help"],
            &mut out,
            &mut err,
        );
        let help = String::from_utf8_lossy(&out);
        assert_eq!(code, 0);
        assert!(help.contains("Usage: cargo fatkit <COMMAND>"), "{help}");
    }
}

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
