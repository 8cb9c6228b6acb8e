//! Says, for a few GPUs, which saxpy kernels of fatkit-example-kernels would run, then checks
//! the GPUs of this machine (none is fine: it says so).

use fatkit_runtime::Device;

fn main() -> std::process::ExitCode {
    let module = match fatkit_example_kernels::saxpy() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("vendored-consumer: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    for (cc, name) in [
        ("7.0", "V100"),
        ("8.0", "A100"),
        ("9.0", "H100"),
        ("12.0", "RTX 5090"),
    ] {
        let Ok(cc) = cc.parse() else { continue };
        let device = Device::new(cc, None).named(name);
        for kernel in ["saxpy_f32", "saxpy_bf16"] {
            match module.kernel_check(&device, kernel) {
                Some(Ok(selected)) => println!("{name}: {kernel} runs ({})", selected.target),
                Some(Err(failure)) => match failure.declared {
                    Some(targets) => println!(
                        "{name}: {kernel} does not run: built for {targets} only, by the crate's design"
                    ),
                    None => println!("{name}: {kernel} does not run: {}", failure.error),
                },
                None => println!("{name}: no kernel {kernel}"),
            }
        }
    }
    match fatkit_runtime::cuda::verify_all_devices(&[module]) {
        Ok(devices) => {
            for d in devices {
                println!(
                    "{}: every kernel of {} has an image",
                    d.describe(),
                    module.name()
                );
            }
        }
        Err(e) => println!("this machine's GPUs: {e}"),
    }
    std::process::ExitCode::SUCCESS
}
