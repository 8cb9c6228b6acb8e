//! `cargo fatkit ...`: cargo runs this binary for its subcommand `fatkit`.

fn main() -> std::process::ExitCode {
    fatkit_cli::cargo_main()
}
