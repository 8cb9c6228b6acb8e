//! `audit` with no `--gpu` on a machine whose driver lists GPUs answers for them, with the
//! driver's version, and says so; with no driver visible it answers as it always has
//! (issue 44). The driver is a stand-in `nvidia-smi` printing what the real one prints.
#![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]

use std::path::Path;

use fatkit_tests::{cli, repo_root as root, temp_dir};

/// `fatkit audit ARGS` as the tests' binary, with `FATKIT_NVIDIA_SMI` set to `smi`.
fn audit(smi: &str, args: &[&str]) -> (i32, String) {
    let all: Vec<&str> = std::iter::once("audit")
        .chain(args.iter().copied())
        .collect();
    let program = Path::new(env!("CARGO_BIN_EXE_fatkit-e2e"));
    cli::process(program, &all, &[("FATKIT_NVIDIA_SMI", smi)]).out()
}

#[test]
fn the_gpus_of_this_machine_are_the_ones_asked_about_by_default() {
    let dir = temp_dir("here");
    let smi = dir.join("nvidia-smi");
    std::fs::write(
        &smi,
        "#!/bin/sh\necho 'NVIDIA GeForce RTX 5090, 12.0, 575.51.02'\n",
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let smi = smi.to_str().unwrap();
    let fixture = root().join("tests/fixtures/small/plain.fatbin");
    let fixture = fixture.to_str().unwrap();

    let (code, here) = audit(smi, &[fixture]);
    let (asked_code, asked) = audit(
        "",
        &[
            fixture,
            "--gpu",
            "NVIDIA GeForce RTX 5090",
            "--driver",
            "575.51.02",
        ],
    );
    let first = here.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        "this machine: GeForce RTX 5090 (CC 12.0), driver 575.51.02 (from nvidia-smi; --gpu NAME asks about another GPU)"
    );
    // The rest is the answer for that GPU and driver, as if asked for.
    let rest: String = here.lines().skip(2).map(|l| format!("{l}\n")).collect();
    assert_eq!((code, rest.as_str()), (asked_code, asked.as_str()));
    assert!(asked.contains("RTX 5090"), "{asked}");

    // No driver (none to ask, or the program is not there): as without a GPU.
    let (code, none) = audit("", &[fixture]);
    let (missing_code, missing) = audit("/nonexistent/nvidia-smi", &[fixture]);
    assert_eq!((code, none.as_str()), (missing_code, missing.as_str()));
    assert!(!none.contains("this machine"), "{none}");
    assert_ne!(none, rest);
    // --gpu wins over the machine's.
    let (_, v100) = audit(smi, &[fixture, "--gpu", "V100"]);
    assert!(
        !v100.contains("this machine") && v100.contains("V100"),
        "{v100}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
