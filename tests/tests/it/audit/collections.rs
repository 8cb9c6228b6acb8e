//! Collections built per GPU (issue 44): a distribution of standalone cubins, each a module a
//! loader picks for the GPU it is built for, answers on one screen. Files for other GPUs are
//! aside, not failures; a distribution with nothing for the GPU asked about holds nothing for
//! it (exit 1), said as such, with no "install a build made for it"; `--strict` holds every
//! file to every GPU. The cubins are the committed fixtures nvcc built (tests/fixtures/small).
#![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]

use std::path::PathBuf;

use fatkit_tests::{cli, repo_root as root, temp_dir};

/// An installed distribution `pkg 1.0` of `copies` cubins for each of sm_80, sm_90, sm_120.
fn collection(copies: usize) -> PathBuf {
    let site = temp_dir("collections").join("site-packages");
    let cubins = site.join("pkg/cubins");
    std::fs::create_dir_all(&cubins).unwrap();
    std::fs::create_dir_all(site.join("pkg-1.0.dist-info")).unwrap();
    let golden = root().join("tests/fixtures/small/golden/plain.fatbin.x");
    let mut record = String::new();
    for (file, target) in [
        ("plain.1.sm_80.cubin", "sm_80"),
        ("plain.2.sm_90.cubin", "sm_90"),
        ("plain.3.sm_120.cubin", "sm_120"),
    ] {
        for i in 0..copies {
            let name = format!("kernel_{i:03}_{target}.cubin");
            std::fs::copy(golden.join(file), cubins.join(&name)).unwrap();
            record.push_str(&format!("pkg/cubins/{name},,\n"));
        }
    }
    std::fs::write(site.join("pkg-1.0.dist-info/RECORD"), record).unwrap();
    site
}

#[test]
fn a_collection_built_per_gpu_answers_on_one_screen() {
    let site = collection(40);
    // The RTX 5090's files run; the others are for other GPUs, not failures.
    let (code, text) = cli::audit(&[site.to_str().unwrap(), "--gpu", "RTX 5090"]).text();
    assert_eq!(code, 0, "{text}");
    let first = text.lines().next().unwrap();
    assert!(
        first.contains("yes on GeForce RTX 5090 (CC 12.0)"),
        "{text}"
    );
    assert!(first.contains("in 120 libraries"), "{text}");
    assert!(
        text.lines().count() <= 60,
        "{} lines:\n{text}",
        text.lines().count()
    );
    for row in [
        "40 libraries like .../kernel_000_sm_80.cubin",
        "40 libraries like .../kernel_000_sm_90.cubin",
        "40 libraries like .../kernel_000_sm_120.cubin",
    ] {
        assert!(text.contains(row), "{row}:\n{text}");
    }
    assert!(text.contains("for other GPUs"), "{text}");
    assert!(!text.contains("install a build"), "{text}");

    // A GPU none of its files is for: it holds nothing for it.
    let (code, text) = cli::audit(&[site.to_str().unwrap(), "--gpu", "T4"]).text();
    assert_eq!(code, 1, "{text}");
    let first = text.lines().next().unwrap();
    assert!(
        first.contains(
            "NO on T4 (CC 7.5): it holds nothing for this GPU: its 200 kernels in 120 libraries"
        ),
        "{text}"
    );
    assert!(
        first.contains("(40 for sm_120, 40 for sm_80, 40 for sm_90)"),
        "{text}"
    );
    assert!(!text.contains("install a build"), "{text}");

    // --strict holds every file to every GPU.
    let (code, text) =
        cli::audit(&[site.to_str().unwrap(), "--gpu", "RTX 5090", "--strict"]).text();
    assert_eq!(code, 1, "{text}");

    // -v keeps every library's line.
    let (_, text) = cli::audit(&[site.to_str().unwrap(), "--gpu", "RTX 5090", "-v"]).text();
    assert!(text.contains("pkg/cubins/kernel_039_sm_90.cubin"), "{text}");

    // --json: every library, each file for other GPUs said so.
    let (_, json) = cli::audit(&[site.to_str().unwrap(), "--gpu", "RTX 5090", "--json"]).text();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let libs = v["files"][0]["libraries"].as_array().unwrap();
    assert_eq!(libs.len(), 120);
    let other = libs
        .iter()
        .filter(|l| l["on"][0]["answer"] == "other_gpus")
        .count();
    assert_eq!(other, 80, "{json}");
}

/// One cubin alone is the file asked about: judged as it is, with the fix.
#[test]
fn one_cubin_alone_is_judged_as_it_is() {
    let cubin = root().join("tests/fixtures/small/golden/plain.fatbin.x/plain.1.sm_80.cubin");
    let (code, text) = cli::audit(&[cubin.to_str().unwrap(), "--gpu", "RTX 5090"]).text();
    assert_eq!(code, 1, "{text}");
    assert!(
        text.lines()
            .next()
            .unwrap()
            .contains(": NO on GeForce RTX 5090"),
        "{text}"
    );
    assert!(!text.contains("for other GPUs"), "{text}");
}
