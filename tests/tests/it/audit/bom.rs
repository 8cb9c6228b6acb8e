//! `audit --format cyclonedx` (issue 57): a kernel bill of materials that the CycloneDX
//! project's own Python library validates against the 1.6 schema, whose components are the
//! distributions and their libraries, and whose per-GPU properties are the audit's answers.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use fatkit_tests::{cli, cyclonedx_python, output, repo_root, temp_dir};

/// A wheel of distribution `pkg 1.0` holding the fixture fatbin as a library.
fn wheel(dir: &Path) -> PathBuf {
    let fatbin = std::fs::read(repo_root().join("tests/fixtures/small/plain.fatbin")).unwrap();
    let path = dir.join("pkg-1.0-py3-none-any.whl");
    let mut w = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    let options = zip::write::SimpleFileOptions::default();
    for (name, data) in [
        ("pkg/lib/kernels.fatbin", fatbin.as_slice()),
        (
            "pkg-1.0.dist-info/RECORD",
            b"pkg/lib/kernels.fatbin,,\n".as_slice(),
        ),
    ] {
        w.start_file(name, options).unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap();
    path
}

/// What the CycloneDX library says of `document`: `None` when it validates.
pub(super) fn validate(python: &Path, document: &str, dir: &Path) -> Option<String> {
    let file = dir.join("bom.json");
    std::fs::write(&file, document).unwrap();
    let script = "import sys\n\
        from cyclonedx.schema import SchemaVersion\n\
        from cyclonedx.validation.json import JsonStrictValidator\n\
        error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(open(sys.argv[1]).read())\n\
        print(error if error else 'valid')\n";
    let (ok, text) = output(Command::new(python).args(["-c", script]).arg(&file));
    assert!(ok, "the validator did not run: {text}");
    (text.trim() != "valid").then_some(text)
}

#[test]
fn a_kernel_bill_of_materials_is_valid_cyclonedx_with_the_audits_answers() {
    let Some(python) = cyclonedx_python() else {
        return;
    };
    let dir = temp_dir("bom");
    let wheel = wheel(&dir);
    let args = [
        wheel.to_str().unwrap(),
        "--gpu",
        "RTX 5090",
        "--gpu",
        "H100",
    ];
    let (_, bom, err) = cli::audit(&[&args[..], &["--format", "cyclonedx"]].concat()).parts();
    assert_eq!(validate(&python, &bom, &dir), None, "{bom}{err}");
    // The validator can fail: a document without its format is refused.
    let mut broken: serde_json::Value = serde_json::from_str(&bom).unwrap();
    broken.as_object_mut().unwrap().remove("bomFormat");
    assert!(validate(&python, &broken.to_string(), &dir).is_some());

    // The distribution, with its package URL, holds the library; its answers are the audit's.
    let bom: serde_json::Value = serde_json::from_str(&bom).unwrap();
    let dist = &bom["components"][0];
    assert_eq!(
        (&dist["name"], &dist["version"], &dist["purl"]),
        (&"pkg".into(), &"1.0".into(), &"pkg:pypi/pkg@1.0".into()),
        "{bom}"
    );
    let library = &dist["components"][0];
    assert_eq!(library["name"], "pkg/lib/kernels.fatbin", "{bom}");
    let property = |name: &str| -> String {
        library["properties"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .map(|p| p["value"].as_str().unwrap().to_owned())
            .unwrap_or_else(|| panic!("no property {name}: {bom}"))
    };
    let (_, json, _) = cli::audit(&[&args[..], &["--json"]].concat()).parts();
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let on = json["files"][0]["libraries"][0]["on"].as_array().unwrap();
    for (i, gpu) in ["GeForce RTX 5090 (CC 12.0)", "H100 (CC 9.0)"]
        .iter()
        .enumerate()
    {
        let answer = &on[i];
        let words = property(&format!("fatkit:on:{gpu}"));
        let want = match answer["answer"].as_str().unwrap() {
            "runs" => "yes",
            "runs_by_ptx" => "yes, by PTX JIT",
            "partly" => "PARTLY",
            "no" => "NO",
            other => other,
        };
        assert_eq!(words, want, "{gpu}: {bom}");
        assert_eq!(
            property(&format!("fatkit:on:{gpu}:kernels-run")),
            format!("{} of {}", answer["run"], answer["kernels"])
        );
    }
    assert_eq!(property("fatkit:targets:cubin"), "sm_80 sm_90 sm_120");
    assert_eq!(property("fatkit:targets:ptx"), "compute_120");
}
