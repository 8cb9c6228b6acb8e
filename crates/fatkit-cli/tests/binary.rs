//! The installed `fatkit` binary: exit codes and where its words go.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

/// Runs the binary from an empty directory of its own (removed after): no `arch-profiles/`,
/// only the built-ins.
fn fatkit(args: &[&str]) -> (i32, String, String) {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let empty = std::env::temp_dir().join(format!("fatkit-binary-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fatkit"))
        .args(args)
        .current_dir(&empty)
        .env_remove("FATKIT_PROFILES_DIR")
        .output()
        .unwrap();
    std::fs::remove_dir_all(&empty).unwrap();
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

/// The built-in profiles work from a directory with no `arch-profiles/` anywhere above it.
#[test]
fn built_in_profiles_from_an_empty_directory() {
    let (code, out, err) = fatkit(&["profiles", "show", "full", "--gpu", "V100"]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(out.contains("the sm_70 cubin"), "{out}");
    assert!(out.contains("profile   full:"), "{out}");

    let fatbin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gpu/full.fatbin");
    let (code, out, err) = fatkit(&["audit", fatbin.to_str().unwrap(), "--require", "full"]);
    // The fixture has no sm_70 image and kernel b no sm_120: gaps, exit 1, not a missing profile.
    assert_eq!((code, err.as_str()), (1, ""), "{out}");
    assert!(
        out.contains(
            "require sm_70 sm_75 sm_80 sm_86 sm_89 sm_90 sm_100 sm_120 compute_120: 4 gap(s)"
        ),
        "{out}"
    );
}
