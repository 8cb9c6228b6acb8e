//! The fatkit command line, built with this test crate so its tests always spawn current code.
fn main() -> std::process::ExitCode {
    fatkit_cli::main()
}
