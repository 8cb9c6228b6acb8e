//! Issue 41, what `audit` answers for what it cannot read: PTX whose text it cannot parse
//! decides nothing (exit 2), a declaration record speaks for its own container only (no
//! deduplication merges another into it), a zip is read only when its end records are those
//! of a zip, and an input past its budget is unknown, saying what was too large.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::{Path, PathBuf};

use fatkit_fuzz::hostile::container;
use fatkit_tests::{fatkit_in_process, temp_dir};

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A PTX entry of `text` whose header says compute_70 (kind 1, arch 70).
fn ptx70(text: &str) -> (u16, u32, u64, Vec<u8>, u64) {
    (1, 70, 0, text.as_bytes().to_vec(), 0)
}

/// PTX text fatkit cannot parse was judged by its entry header: "yes, by PTX JIT on V100",
/// exit 0. It is unreadable now: the library is unknown (exit 2), naming why.
#[test]
fn ptx_that_cannot_be_read_decides_nothing() {
    let dir = temp_dir("hostile-unreadable-ptx");
    for (i, text) in [
        "garbage with .entry k( in it\n",
        "/* an unclosed comment\n.version 7.0\n.target sm_70\n.entry k(\n",
        ".entry k(\n.version 7.0\n.target sm_70\n",
    ]
    .iter()
    .enumerate()
    {
        let file = write(&dir, &format!("p{i}.fatbin"), &container(&[ptx70(text)]));
        let (code, out, err) =
            fatkit_in_process(&["audit", file.to_str().unwrap(), "--gpu", "V100"]);
        assert_eq!(code, 2, "{text:?}: {out}{err}");
        assert!(
            out.contains("PTX text fatkit cannot read"),
            "{text:?}: {out}{err}"
        );
        assert!(!out.contains("yes"), "{text:?}: {out}");
    }
    // Readable PTX opened by a comment is read as ptxas reads it.
    let fine = "/* made by hand */\n.version 7.0\n.target sm_70\n.address_size 64\n.visible .entry k()\n{\nret;\n}\n";
    let file = write(&dir, "fine.fatbin", &container(&[ptx70(fine)]));
    let (code, out, err) = fatkit_in_process(&["audit", file.to_str().unwrap(), "--gpu", "V100"]);
    assert_eq!(code, 0, "{out}{err}");
}

/// Two containers with the same kernels and targets but other bytes, and a record bound to the
/// first declaring its kernel for sm_80 only: deduplication merged the second into the first,
/// so the record excused the second's kernel too. Each is its own module now.
#[test]
fn a_declaration_record_speaks_for_its_own_container_only() {
    let dir = temp_dir("hostile-declaration-leak");
    let ptx = |tag: &str| {
        format!(".version 8.0\n.target sm_80\n.address_size 64\n// {tag}\n.visible .entry k()\n{{\nret;\n}}\n")
    };
    let entry = |tag: &str| (1u16, 80u32, 0u64, ptx(tag).into_bytes(), 0u64);
    let declared = container(&[entry("declared")]);
    let other = container(&[entry("another")]);
    assert_eq!(declared.len(), other.len());
    let record = format!(
        "{}module=m;fatbin={}:{:016x};k=compute_80;end;",
        fatkit_arch::declared::MAGIC,
        declared.len(),
        fatkit_arch::fingerprint::fingerprint(&declared)
    );
    let mut bytes = vec![0u8; 64];
    bytes.extend_from_slice(&declared);
    bytes.extend_from_slice(&other);
    bytes.extend_from_slice(record.as_bytes());
    let file = write(&dir, "two.bin", &bytes);
    let (code, out, err) =
        fatkit_in_process(&["audit", file.to_str().unwrap(), "--require", "sm_70"]);
    // The declared container's kernel is excused; the other's is a gap.
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("k"), "{out}");
    // Without the other container, nothing fails.
    let mut alone = vec![0u8; 64];
    alone.extend_from_slice(&declared);
    alone.extend_from_slice(record.as_bytes());
    let file = write(&dir, "one.bin", &alone);
    let (code, out, err) =
        fatkit_in_process(&["audit", file.to_str().unwrap(), "--require", "sm_70"]);
    assert_eq!(code, 0, "{out}{err}");
}

/// A file that starts as a zip but does not end as one (no end record reaching the end, or one
/// naming a central directory that is not there) is refused before the zip crate sees it.
#[test]
fn a_zip_without_its_end_records_is_not_read_as_one() {
    let dir = temp_dir("hostile-zip-ends");
    let mut bytes = b"PK\x03\x04".to_vec();
    bytes.resize(64, 0);
    let mut eocd = [0u8; 22];
    eocd[0..4].copy_from_slice(b"PK\x05\x06");
    eocd[8..10].copy_from_slice(&1u16.to_le_bytes());
    eocd[10..12].copy_from_slice(&1u16.to_le_bytes());
    for _ in 0..1000 {
        bytes.extend_from_slice(&eocd);
    }
    let file = write(&dir, "fake-1.0-py3-none-any.whl", &bytes);
    let (code, out, err) = fatkit_in_process(&["audit", file.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        out.contains("names a central directory that is not before it"),
        "{out}{err}"
    );
}

/// Every hostile shape the generator knows, at its small scale: each answers, or says it is
/// unknown and why, never a verdict read from half of it (the growth test, tests/growth.rs,
/// times them).
#[test]
fn a_spent_budget_is_an_unknown_answer_naming_what() {
    let dir = temp_dir("hostile-budget");
    let shape = fatkit_fuzz::hostile::SHAPES
        .iter()
        .find(|s| s.name == "directory-of-bombs")
        .unwrap();
    let path = (shape.make)(48, &dir);
    let (code, out, err) = fatkit_in_process(&["audit", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        out.contains(": UNKNOWN: not read to the end: the compressed entries need more inflation than the input's budget allows"),
        "{out}{err}"
    );
}
