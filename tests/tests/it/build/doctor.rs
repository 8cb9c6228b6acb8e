//! `doctor` as a user runs it: the driver the profile's build needs, as this machine (else
//! fatkit's provisioned toolchains) would build it (issue 55): once "nothing to fix" and no word
//! of the driver.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use fatkit_tests::{fatkit_in_process, temp_dir};

fn doctor(args: &[&str]) -> (u8, String, String) {
    let dir = temp_dir("doctor-profiles");
    let mut all = vec!["doctor", "--profiles-dir", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    fatkit_in_process(&all)
}

#[test]
fn doctor_says_the_driver_full_needs_on_every_gpu() {
    let (code, out, err) = doctor(&["--profile", "full", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let floors = &json["driver"]["floors"];
    let gpu = |cc: &str| {
        floors["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["cc"] == cc)
            .unwrap_or_else(|| panic!("no {cc} in {floors}"))
            .clone()
    };
    assert_eq!(gpu("7.0")["floor"]["release"], "525.60.13", "{floors}");
    assert_eq!(gpu("9.0")["floor"]["release"], "580.65.06", "{floors}");
    assert_eq!(floors["release"]["floor"]["release"], "580.65.06");
    assert_eq!(floors["newer_gpus"]["release"], "595.45.04");
    // A host-code library links the CUDA 13.2 runtime statically: R580 on the V100 too.
    if let Some(host) = json["host_code"].as_object() {
        let set_by = host["floors"]["release"]["set_by"].as_array().unwrap();
        assert!(set_by.iter().any(|c| c == "7.0"), "{host:?}");
        assert_eq!(host["floors"]["release"]["floor"]["release"], "580.65.06");
    }

    let (code, text, _) = doctor(&["--profile", "full"]);
    assert_eq!(code, 0);
    let section = text
        .split("\ndriver a module of the profile needs")
        .nth(1)
        .unwrap_or_else(|| panic!("no driver section:\n{text}"));
    assert!(
        section.contains("release:       580.65.06 (CUDA 13.0), set by CC 7.5 8.0"),
        "{text}"
    );
    assert!(
        section.contains("lower:         525.60.13 (CUDA 12.0) on CC 7.0 7.2"),
        "{text}"
    );
    assert!(
        section.contains("newer GPUs:    595.45.04 (CUDA 13.2), for compute_120 PTX (ISA 9.2)"),
        "{text}"
    );
}
