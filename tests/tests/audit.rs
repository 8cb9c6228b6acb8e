//! `audit` as a user runs it on the committed fixtures: text and JSON, verdicts and exit codes.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};

use expect_test::{expect, expect_file};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/small")
        .join(name)
}

/// `fatkit audit ARGS...` in process, with fixture paths shortened to their names.
fn audit(args: &[&str]) -> (u8, String, String) {
    let dir = fixture("");
    let mut argv = vec!["audit".to_owned()];
    argv.extend(args.iter().map(|a| {
        if a.ends_with(".fatbin") {
            fixture(a).display().to_string()
        } else {
            (*a).to_owned()
        }
    }));
    let (code, out, err) = fatkit_tests::fatkit_in_process(&argv);
    let clean = |s: String| s.replace(&dir.display().to_string(), "");
    (code, clean(out), clean(err))
}

#[test]
fn text_report_of_a_fatbin() {
    let (code, out, err) = audit(&["plain.fatbin"]);
    assert_eq!((code, err.as_str()), (0, ""));
    expect_file!["../snapshots/audit-plain.txt"].assert_eq(&out);
}

#[test]
fn json_report_with_require_and_gpu() {
    let (code, out, _) = audit(&[
        "plain.fatbin",
        "--require",
        "sm_80 sm_120",
        "--gpu",
        "RTX 5090",
        "--json",
    ]);
    assert_eq!(code, 1);
    expect_file!["../snapshots/audit-plain.json"].assert_eq(&out);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["exit_code"], 1);
    assert_eq!(
        json["files"][0]["require"]["gaps"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn require_a_profile_lists_every_gap() {
    // Turing to Hopper cubins and compute_90 PTX: the RTX 50 series runs on PTX JIT.
    let (code, out, _) = audit(&["ptx-jit.fatbin", "--require", "consumer"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("require sm_75 sm_86 sm_89 sm_120 compute_120: every kernel covered"),
        "{out}"
    );
    let (code, out, _) = audit(&["plain.fatbin", "--require", "full"]);
    assert_eq!(code, 1);
    let gaps: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("    "))
        .map(str::trim)
        .collect();
    expect![[r#"
        [
            "a sm_70: no cubin or PTX that runs on CC 7.0",
            "a sm_75: no cubin or PTX that runs on CC 7.5",
            "a sm_100: no cubin or PTX that runs on CC 10.0",
            "b sm_70: no cubin or PTX that runs on CC 7.0",
            "b sm_75: no cubin or PTX that runs on CC 7.5",
            "b sm_100: no cubin or PTX that runs on CC 10.0",
            "b sm_120: no cubin or PTX that runs on CC 12.0",
            "b compute_120: no PTX that JIT-compiles for CC 12.0",
        ]
    "#]]
    .assert_debug_eq(&gaps);
}

#[test]
fn gpu_verdicts_name_the_kernel_and_why() {
    let (code, out, _) = audit(&["plain.fatbin", "--gpu", "RTX 5090"]);
    assert_eq!(code, 1);
    assert!(out.contains("    b: does not run: CUDA_ERROR_NO_BINARY_FOR_GPU (209): has sm_80 sm_90, none runs on CC 12.0"), "{out}");
    assert!(!out.contains("    a: "), "{out}");
    let (code, out, _) = audit(&["ptx-jit.fatbin", "--gpu", "RTX 5090", "--driver", "575.51"]);
    assert_eq!(code, 1);
    assert!(
        out.contains("PTX ISA 9.2 needs driver >= 595.45.04 (CUDA 13.2); driver is 575.51"),
        "{out}"
    );
    let (code, out, _) = audit(&[
        "ptx-jit.fatbin",
        "--gpu",
        "RTX 5090",
        "--driver",
        "595.45.04",
    ]);
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = audit(&["ptx-jit.fatbin", "--gpu", "sm_90a-nonsense"]);
    assert_eq!((code, out.as_str()), (2, ""));
}

#[test]
fn invalid_input_exits_2_naming_file_and_offset() {
    let dir = std::env::temp_dir().join(format!("fatkit-audit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data = std::fs::read(fixture("size.fatbin")).unwrap();
    let truncated = dir.join("truncated.fatbin");
    std::fs::write(&truncated, &data[..1000]).unwrap();
    let (code, out, err) = audit(&[truncated.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.contains("truncated.fatbin: at offset 0x0: truncated fatbin container: needs 3952 bytes, 1000 left"), "{out}");
    assert!(err.starts_with("error: some input is invalid"), "{err}");
    let (code, _, err) = audit(&["/nonexistent/x.so"]);
    assert_eq!(code, 2);
    assert!(
        err.starts_with("error: /nonexistent/x.so: cannot read:"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn no_device_code_is_not_a_pass_when_something_is_required() {
    let exe = std::env::current_exe().unwrap();
    let exe = exe.to_str().unwrap();
    let (code, out, _) = audit(&[exe]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("no device code found"), "{out}");
    let (code, out, _) = audit(&[exe, "--gpu", "H100"]);
    assert_eq!(code, 1, "{out}");
}
