//! fatkit as a Rust user installs it: `cargo install --locked --path crates/fatkit-cli` gives `fatkit`
//! and `cargo-fatkit`, and `cargo fatkit ...` works in a workspace that has no xtask, with the
//! same answers and exit codes as `fatkit ...` (issue 44).
#![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]

use std::path::Path;
use std::process::Command;

use fatkit_tests::{cargo, output, repo_root as root, temp_dir};

/// Runs `program args` in `dir` with `bin` first on PATH: (exit code, stdout, stderr).
fn run_in(dir: &Path, bin: &Path, program: &Path, args: &[&str]) -> (i32, String, String) {
    let path = std::env::join_paths(std::iter::once(bin.to_owned()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("FATKIT_PROFILES_DIR")
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn cargo_install_gives_fatkit_and_a_cargo_subcommand_that_answers_alike() {
    let dir = temp_dir("installed");
    let install_root = dir.join("root");
    // A target directory kept between runs (debug, so it shares nothing with the release
    // builds), as a user's own would be.
    let target = root().join("target/it-cargo-install");
    let (ok, text) = output(
        Command::new(cargo())
            .args(["install", "--debug", "--locked", "--offline", "--path"])
            .arg(root().join("crates/fatkit-cli"))
            .arg("--root")
            .arg(&install_root)
            .arg("--target-dir")
            .arg(&target),
    );
    assert!(ok, "{text}");
    let bin = install_root.join("bin");
    for name in ["fatkit", "cargo-fatkit"] {
        assert!(
            bin.join(name).is_file(),
            "cargo install did not give {name}: {text}"
        );
    }

    // A workspace of its own, without an xtask.
    let ws = dir.join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(
        ws.join("Cargo.toml"),
        "[package]\nname = \"consumer\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(ws.join("src/main.rs"), "fn main() {}\n").unwrap();
    let fixture = root().join("tests/fixtures/small/plain.fatbin");
    let fixture = fixture.to_str().unwrap();
    let mut codes = Vec::new();
    for args in [
        vec!["audit", fixture, "--gpu", "RTX 5090"],
        vec!["audit", fixture, "--gpu", "V100"],
        vec!["profiles", "show", "full", "--gpu", "RTX 5080"],
        vec!["profiles", "show", "consumer", "--gpu", "H100"],
    ] {
        let direct = run_in(&ws, &bin, &bin.join("fatkit"), &args);
        let mut sub = vec!["fatkit"];
        sub.extend(&args);
        let through_cargo = run_in(&ws, &bin, &cargo(), &sub);
        assert_eq!(through_cargo, direct, "cargo fatkit {args:?}");
        codes.push(direct.0);
    }
    // The codes differ by input (the two profiles answers: 0 and 1), so the comparison above
    // compared something.
    assert_eq!(codes.get(2..), Some(&[0, 1][..]));
    let (code, help, _) = run_in(&ws, &bin, &cargo(), &["fatkit", "--help"]);
    assert_eq!(code, 0);
    assert!(help.contains("Usage: cargo fatkit <COMMAND>"), "{help}");
    let (code, _, err) = run_in(&ws, &bin, &cargo(), &["fatkit", "no-such-command"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cargo fatkit"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
