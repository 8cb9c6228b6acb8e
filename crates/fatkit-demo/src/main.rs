//! `fatkit-demo`: runs the repository's kernels on the first GPU and checks them against the
//! CPU. Without a GPU or driver: one line saying so, exit 1.

use std::process::ExitCode;

fn main() -> ExitCode {
    let res = fatkit_demo::Modules::embedded().and_then(|m| fatkit_demo::run(&m));
    match res {
        Ok((device, outcomes)) => {
            println!("{} (compute capability {})", device.name, device.cc);
            let mut ok = true;
            for o in &outcomes {
                println!(
                    "  {:<16} max error {:.2e} (tolerance {:.0e}) {}",
                    o.kernel,
                    o.max_error,
                    o.tolerance,
                    if o.ok() { "ok" } else { "WRONG" }
                );
                ok &= o.ok();
            }
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            // One line: the first line of the error; the rest (per-kernel reasons) follows.
            eprintln!("fatkit-demo: {e}");
            ExitCode::FAILURE
        }
    }
}
