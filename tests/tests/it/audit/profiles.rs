#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

//! `profiles` as a user runs it, on fatkit's built-in profiles.
//! Snapshots live in tests/snapshots/; `UPDATE_EXPECT=1 cargo test -p fatkit-tests` rewrites them.

use std::path::PathBuf;

use expect_test::{expect, expect_file};

/// A directory with no `arch-profiles/` in it or above it: only the built-ins.
fn empty_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fatkit-profiles-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `fatkit ARGS...` in process with only the built-in profiles (an empty directory as
/// `--profiles-dir`); returns (exit code, stdout, stderr).
fn fatkit(args: &[&str]) -> (u8, String, String) {
    let dir = empty_dir();
    let mut argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    if args.first() == Some(&"profiles") && !args.contains(&"--profiles-dir") {
        argv.push("--profiles-dir".into());
        argv.push(dir.display().to_string());
    }
    fatkit_tests::fatkit_in_process(&argv)
}

#[test]
fn lists_the_profiles() {
    let (code, out, err) = fatkit(&["profiles"]);
    assert_eq!((code, err.as_str()), (0, ""));
    expect_file!["../../../snapshots/profiles.txt"].assert_eq(&out);
    let (code, out, _) = fatkit(&["profiles", "--json"]);
    assert_eq!(code, 0);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = json["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["consumer", "datacenter", "dev", "full", "jetson", "modern"]
    );
    assert_eq!(json["errors"].as_array().unwrap().len(), 0);
    // `full` as fatkit builds it (nvcc 13.2, and a CUDA 12 toolchain for sm_70): R580 set by
    // every GPU but the V100's 7.0 (and Xavier's 7.2, which loads the same sm_70 cubin), not
    // the 12.8-12.9 a single toolkit would need, nor its PTX's 595 (issue 55).
    let full = &json["builds"]["full"];
    let by = |t: &str| {
        full["built"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["target"] == t)
            .map(|b| format!("{} {}", b["compiler"], b["cuda"]))
            .unwrap()
    };
    assert_eq!(by("sm_90"), r#""nvcc" "13.2""#);
    assert!(by("sm_70").ends_with(r#""12.9""#) || by("sm_70").ends_with(r#""12.4""#));
    let release = &full["floors"]["release"];
    assert_eq!(release["floor"]["release"], "580.65.06");
    let set_by: Vec<&str> = release["set_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(
        set_by.contains(&"12.0") && !set_by.contains(&"7.0"),
        "{set_by:?}"
    );
    assert_eq!(full["floors"]["newer_gpus"]["release"], "595.45.04");
}

#[test]
fn show_explains_a_profile() {
    let (code, out, _) = fatkit(&["profiles", "show", "full"]);
    assert_eq!(code, 0);
    expect_file!["../../../snapshots/profiles-show-full.txt"].assert_eq(&out);
    let (code, out, _) = fatkit(&[
        "profiles",
        "show",
        "jetson",
        "--strict-igpu",
        "--driver",
        "575.51",
    ]);
    assert_eq!(code, 0);
    expect_file!["../../../snapshots/profiles-show-jetson-strict.txt"].assert_eq(&out);
}

#[test]
fn full_on_an_rtx_5080_uses_the_sm_120_cubin() {
    let (code, out, _) = fatkit(&["profiles", "show", "full", "--gpu", "RTX 5080"]);
    assert_eq!(code, 0);
    expect![[r#"
        GPU       GeForce RTX 5080 (compute capability 12.0)
        driver    not given: PTX judged by architecture only
        profile   full: sm_70 sm_75 sm_80 sm_86 sm_89 sm_90 sm_100 sm_120 compute_120
        PTX       ISA 9.2 if written by CUDA 13.2; PTX ISA 9.2 needs driver >= 595.45.04 (CUDA 13.2) (--cuda to assume another toolkit)
        verdict   runs: the driver selects the sm_120 cubin, built for exactly this GPU
    "#]]
    .assert_eq(&out);
}

#[test]
fn full_on_a_v100_uses_the_sm_70_cubin() {
    let (code, out, _) = fatkit(&["profiles", "show", "full", "--gpu", "V100", "--json"]);
    assert_eq!(code, 0);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["status"], "runs");
    assert_eq!(json["selected"]["target"], "sm_70");
    assert_eq!(json["selected"]["kind"], "cubin");
    assert_eq!(json["selected"]["exact"], true);
    assert_eq!(json["gpu"]["cc"], "7.0");
}

#[test]
fn consumer_on_an_h100_says_why_nothing_runs() {
    let (code, out, _) = fatkit(&["profiles", "show", "consumer", "--gpu", "H100"]);
    assert_eq!(code, 1);
    expect_file!["../../../snapshots/profiles-show-consumer-h100.txt"].assert_eq(&out);
    let (code, out, _) = fatkit(&["profiles", "show", "consumer", "--gpu", "H100", "--json"]);
    assert_eq!(code, 1);
    expect_file!["../../../snapshots/profiles-show-consumer-h100.json"].assert_eq(&out);
}

#[test]
fn ptx_too_new_for_the_driver_is_error_222() {
    // datacenter has no sm_120 cubin: an RTX 5090 depends on the compute_100 PTX.
    let args = [
        "profiles",
        "show",
        "datacenter",
        "--gpu",
        "RTX 5090",
        "--cuda",
        "13.0",
    ];
    let (code, out, _) = fatkit(&[&args[..], &["--driver", "575.51"]].concat());
    assert_eq!(code, 1);
    assert!(
        out.contains("CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222)"),
        "{out}"
    );
    assert!(
        out.contains("install driver 580.65.06 or newer (CUDA 13.0)"),
        "{out}"
    );
    let (code, out, _) = fatkit(&[&args[..], &["--driver", "580.65"]].concat());
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("the compute_100 PTX, JIT-compiled"), "{out}");
    // CUDA 13.3 PTX needs 610.43.02 (its release notes): 600.1 refuses it.
    let show = |cuda: &str, driver: &str| {
        fatkit(&[
            "profiles",
            "show",
            "datacenter",
            "--gpu",
            "RTX 5090",
            "--cuda",
            cuda,
            "--driver",
            driver,
        ])
    };
    let (code, out, _) = show("13.3", "600.1");
    assert_eq!(code, 1);
    assert!(
        out.contains("CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222)")
            && out.contains("PTX ISA 9.3 needs driver >= 610.43.02"),
        "{out}"
    );
    // CUDA 13.4 PTX has no published minimum driver (a branch, R615): unknown, never a
    // silent pass.
    let (code, out, _) = show("13.4", "620.1");
    assert_eq!(code, 1);
    assert!(
        out.contains("verdict   unknown:") && out.contains("PTX ISA 9.4"),
        "{out}"
    );
}

#[test]
fn bad_profile_exits_2_with_position_and_suggestion() {
    let dir = std::env::temp_dir().join(format!("fatkit-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("typo.toml");
    std::fs::write(
        &path,
        "description = \"typo\"\ntargets = [\"sm_80\", \"sm_91\"]\n",
    )
    .unwrap();
    let dir_arg = dir.display().to_string();
    let (code, out, err) = fatkit(&["profiles", "show", "typo", "--profiles-dir", &dir_arg]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert_eq!(
        err.replace(&dir_arg, "DIR"),
        "error: DIR/typo.toml:2:22: 'sm_91': unknown target sm_91: no CUDA toolkit builds it; did you mean sm_90 or sm_90a?\n"
    );
    // The listing shows the good profiles and names the bad one, and fails.
    std::fs::write(dir.join("good.toml"), "targets = [\"sm_90\"]\n").unwrap();
    let (code, out, err) = fatkit(&["profiles", "--profiles-dir", &dir_arg]);
    assert_eq!(code, 2);
    assert!(
        out.contains("good ") && out.contains("typo: invalid: "),
        "{out}"
    );
    assert!(err.contains("1 invalid profile(s)"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_arguments_exit_2() {
    for args in [
        &["profiles", "show", "full", "--gpu", "Radeon 7900"][..],
        &[
            "profiles", "show", "full", "--gpu", "9.0", "--driver", "banana",
        ],
        &["profiles", "show", "full", "--cuda", "thirteen"],
        &["profiles", "show", "nonexistent"],
        &["profiles", "show"],
        &["no-such-command"],
    ] {
        let (code, out, err) = fatkit(args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(!err.is_empty(), "{args:?}");
    }
    let (_, _, err) = fatkit(&["profiles", "show", "ful"]);
    assert!(err.contains("did you mean 'full'?"), "{err}");
}
