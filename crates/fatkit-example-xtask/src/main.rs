fn main() -> std::process::ExitCode {
    fatkit_cli::main()
}
