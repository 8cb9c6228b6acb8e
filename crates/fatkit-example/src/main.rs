//! Checks every GPU of this machine against the embedded kernels, then says what would run.

fn main() -> std::process::ExitCode {
    let module = match fatkit_example::vector() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("fatkit-example: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match fatkit_runtime::cuda::verify_all_devices(&[module]) {
        Ok(devices) => {
            for d in devices {
                println!(
                    "{}: every kernel of {} has an image",
                    d.describe(),
                    module.name()
                );
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("fatkit-example: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
