//! Issue 54, Tile IR: nvcc 13.3+ with `-enable-tile` puts a kernel written in CUDA Tile C++ in a
//! second fatbin of the object: a cubin for `code=sm_100`, Tile IR bytecode (entry kind 0x80)
//! for `code=compute_100`. The cubin is judged as any cubin; the Tile IR entry is named, its
//! bytecode version read, and its kernels, which fatkit does not read, leave the library
//! UNKNOWN (docs/ARCH_RULES.md section 13). Fixtures: tests/fixtures/tile/build.sh (CUDA 13.5
//! from PyPI).
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::{Path, PathBuf};

use fatkit_tests::{cli, toolchain};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/tile")
        .join(name)
}

fn audit(file: &Path, json: bool) -> (i32, String) {
    let f = file.to_str().unwrap();
    let mut args = vec![f, "--gpu", "B200", "--driver", "13050"];
    if json {
        args.push("--json");
        return cli::audit(&args).out();
    }
    cli::audit(&args).text()
}

#[test]
fn a_tile_ir_entry_is_named_and_leaves_its_library_unknown() {
    let file = fixture("tile-ir.o");
    let (code, text) = audit(&file, false);
    assert_eq!(code, 2, "{text}");
    let first = text.lines().next().unwrap();
    assert!(first.contains("UNKNOWN on B200"), "{text}");
    assert!(first.contains("its Tile IR is not judged"), "{text}");
    assert!(
        text.contains("Tile IR for sm_100 at 0x808 (bytecode 13.5): its kernels are not read"),
        "{text}"
    );
    let (_, json) = audit(&file, true);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let entries: Vec<(String, u64)> = v["files"][0]["report"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["entries"].as_array().unwrap().clone())
        .map(|e| {
            (
                e["kind"].as_str().unwrap_or("?").to_owned(),
                e["arch"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        [("ptx".to_owned(), 100), ("tile_ir".to_owned(), 100)],
        "{json}"
    );
    // cuobjdump sees the same two entries.
    let Some(tc) = toolchain() else { return };
    let listed = std::process::Command::new(tc.cuobjdump().unwrap())
        .args(["-all", file.to_str().unwrap()])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    let kinds: Vec<&str> = listed
        .lines()
        .filter(|l| l.starts_with("Fatbin "))
        .collect();
    assert_eq!(
        kinds,
        ["Fatbin ptx code:", "Fatbin tile ir code:"],
        "{listed}"
    );
}

#[test]
fn a_tile_cubin_is_judged_as_a_cubin() {
    let (code, text) = audit(&fixture("tile-cubin.o"), false);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("yes on B200"), "{text}");
    assert!(text.contains("2 of 2 kernels run"), "{text}");
    assert!(!text.contains("Tile IR"), "{text}");
}
