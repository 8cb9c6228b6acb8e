//! The installed `fatkit` binary: exit codes and where its words go.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

fn fatkit(args: &[&str]) -> (i32, String, String) {
    let profiles = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../arch-profiles");
    let out = Command::new(env!("CARGO_BIN_EXE_fatkit"))
        .args(args)
        .env("FATKIT_PROFILES_DIR", profiles)
        .output()
        .unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (
        out.status.code().unwrap_or(-1),
        text(out.stdout),
        text(out.stderr),
    )
}

#[test]
fn exit_codes_mean_ok_finding_bad_input() {
    let (code, out, err) = fatkit(&["profiles", "show", "full", "--gpu", "RTX 5080"]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(out.contains("the sm_120 cubin"), "{out}");

    let (code, out, _) = fatkit(&["profiles", "show", "consumer", "--gpu", "H100"]);
    assert_eq!(code, 1);
    assert!(out.contains("CUDA_ERROR_NO_BINARY_FOR_GPU (209)"), "{out}");

    let (code, out, err) = fatkit(&["profiles", "show", "full", "--gpu", "RTX 6000"]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(
        err.starts_with("error: --gpu: 'RTX 6000' matches GPUs"),
        "{err}"
    );
}

#[test]
fn malformed_profile_is_exit_2_not_a_panic() {
    let dir = std::env::temp_dir().join(format!("fatkit-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(&path, "targets = [\"sm_70\", \"sm_91\"]\n").unwrap();
    let (code, _, err) = fatkit(&["profiles", "show", path.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("bad.toml:1:22: 'sm_91'") && err.contains("did you mean sm_90 or sm_90a?"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn help_and_version_succeed() {
    let (code, out, _) = fatkit(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("profiles"), "{out}");
    let (code, out, _) = fatkit(&["--version"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("fatkit "), "{out}");
}
