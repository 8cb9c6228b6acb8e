//! Toolchain tier: NVIDIA's own libraries, from NVIDIA's wheels (fetched into the cache by
//! `cargo xtask test`), read as cuobjdump reads them, plus the embedded containers it misses.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::PathBuf;

use fatkit_fatbin::inspect::{extract_all, inspect, Depth};
use fatkit_fatbin::{Limits, Origin};
use fatkit_tests::{cuobjdump_extract, cuobjdump_list, in_ci, run, temp_dir, toolchain};

fn curand_wheel() -> Option<PathBuf> {
    let dir = fatkit_build::toolchain::cache_dir().unwrap().join("corpus");
    let found = std::fs::read_dir(&dir).ok().and_then(|rd| {
        rd.flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().contains("nvidia_curand"))
    });
    if found.is_none() {
        assert!(
            !in_ci(),
            "CI=true and no curand wheel in {}; `cargo xtask test` downloads it",
            dir.display()
        );
        eprintln!("skipped: no curand wheel in {}", dir.display());
    }
    found
}

#[test]
fn libcurand_reads_as_cuobjdump_reads_it() {
    let Some(tc) = toolchain() else { return };
    let Some(wheel) = curand_wheel() else { return };
    let dir = temp_dir("curand");
    let limits = Limits::default();

    // Through the wheel (a zip) as audit reads it ...
    let wheel_bytes = std::fs::read(&wheel).unwrap();
    let report = inspect("wheel", &wheel_bytes, Depth::Headers, &limits);
    let member = report
        .members
        .iter()
        .find(|m| m.name.contains("libcurand.so"))
        .expect("libcurand.so in the wheel");

    // ... and the library itself, for cuobjdump.
    run(
        &dir,
        &PathBuf::from("python3"),
        &["-m", "zipfile", "-e", wheel.to_str().unwrap(), "."],
    );
    let so = dir.join(
        member
            .name
            .trim_start_matches("wheel(")
            .trim_end_matches(')'),
    );
    let data = std::fs::read(&so).unwrap();
    assert_eq!(
        inspect("so", &data, Depth::Headers, &limits)
            .containers
            .len(),
        member.containers.len()
    );

    let images = member.all_images();
    let mut in_sections: Vec<(String, String)> = images
        .iter()
        .filter(|(_, origin, _)| matches!(origin, Origin::Section(_)))
        .map(|(_, _, e)| (e.kind.name(), e.target.unwrap().to_string()))
        .collect();
    in_sections.sort();
    let theirs = cuobjdump_list(&tc, &so);
    assert!(theirs.len() > 20, "{theirs:?}");
    assert_eq!(in_sections, theirs);

    let extracted = extract_all("so", &data, &limits);
    let mut ours: Vec<(String, Vec<u8>)> = Vec::new();
    for kind in ["cubin", "ptx"] {
        for x in extracted
            .iter()
            .filter(|x| x.kind.name() == kind && matches!(x.origin, Origin::Section(_)))
        {
            ours.push((kind.to_owned(), x.bytes.as_ref().unwrap().clone()));
        }
    }
    let theirs = cuobjdump_extract(&tc, &so, &dir);
    assert_eq!(ours.len(), theirs.len());
    assert!(
        ours == theirs,
        "an extracted image differs from cuobjdump's"
    );

    // The containers outside any section, which cuobjdump does not see, are reported too.
    let embedded = member
        .containers
        .iter()
        .filter(|c| c.origin == Origin::Scan)
        .count();
    assert!(embedded > 100, "only {embedded} embedded containers found");
}
