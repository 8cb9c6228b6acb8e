//! Each library crate's public surface, held to the count ARCHITECTURE.md records (its
//! "## Public surface" block): a change that makes an item public raises the number on
//! purpose, in the same change, or makes the item `pub(crate)`.

use std::collections::BTreeMap;
use std::path::Path;

use super::{code_lines, library_sources, root};

/// The counts ARCHITECTURE.md records: `crate: N` lines of its "## Public surface" block.
fn recorded(architecture: &str) -> BTreeMap<String, usize> {
    let section = architecture
        .split("\n## ")
        .find(|s| s.starts_with("Public surface"))
        .unwrap_or("");
    let block = section.split("```").nth(1).unwrap_or("");
    block
        .lines()
        .filter_map(|line| {
            let (name, count) = line.split_once(':')?;
            Some((name.trim().to_owned(), count.trim().parse().ok()?))
        })
        .collect()
}

/// Whether a code line declares a public item: `pub` (not `pub(crate)` or `pub(super)`)
/// before `fn`, `struct`, `enum`, `trait`, `type`, `const`, `static`, `mod` or `use`
/// (fields and enum variants are their type's).
fn declares_public(line: &str) -> bool {
    let Some(rest) = line.trim_start().strip_prefix("pub ") else {
        return false;
    };
    let rest = rest
        .trim_start_matches("unsafe ")
        .trim_start_matches("async ");
    [
        "fn ", "struct ", "enum ", "trait ", "type ", "const ", "static ", "mod ", "use ",
    ]
    .iter()
    .any(|k| rest.starts_with(k))
}

/// Each library crate under `root/crates` (a `src/lib.rs`) with its public items.
fn counted(root: &Path) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let Ok(read) = std::fs::read_dir(root.join("crates")) else {
        return out;
    };
    for dir in read.flatten().map(|e| e.path()) {
        if !dir.join("src/lib.rs").is_file() {
            continue;
        }
        let Some(krate) = dir.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let n = library_sources(root, &[krate])
            .iter()
            .map(|(_, code)| code_lines(code).filter(|(_, l)| declares_public(l)).count())
            .sum();
        out.insert(krate.to_owned(), n);
    }
    out
}

/// Each crate whose count differs from the recorded one, or that has none recorded.
fn differences(root: &Path, architecture: &str) -> Vec<String> {
    let recorded = recorded(architecture);
    let mut out = Vec::new();
    for (krate, n) in counted(root) {
        match recorded.get(&krate) {
            None => out.push(format!(
                "{krate}: {n} public items and no line in ARCHITECTURE.md's public surface; add `{krate}: {n}`"
            )),
            Some(&r) if r < n => out.push(format!(
                "{krate}: {n} public items, {r} recorded; make the new ones pub(crate), or raise the number in ARCHITECTURE.md on purpose and say what they are for"
            )),
            Some(&r) if r > n => out.push(format!(
                "{krate}: {n} public items, {r} recorded; lower the number in ARCHITECTURE.md to {n}"
            )),
            Some(_) => {}
        }
    }
    out
}

#[test]
fn every_crate_keeps_its_recorded_public_surface() {
    let root = root();
    let architecture = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap_or_default();
    let found = differences(&root, &architecture);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn a_new_public_item_is_caught() {
    let dir = std::env::temp_dir().join(format!("fatkit-tidy-surface-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("crates/fatkit-x/src")).unwrap();
    std::fs::write(
        dir.join("crates/fatkit-x/src/lib.rs"),
        "pub mod a;\npub(crate) fn b() {}\npub struct C {\n    pub field: u8,\n}\nimpl C {\n    pub fn d() {}\n    pub(super) fn e() {}\n}\npub use a::F;\npub unsafe fn g() {}\n#[cfg(test)]\nmod tests {\n    pub fn h() {}\n}\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("crates/fatkit-y/src")).unwrap();
    std::fs::write(dir.join("crates/fatkit-y/src/lib.rs"), "pub fn y() {}\n").unwrap();
    let architecture = "# A\n\n## Public surface\n\n```text\nfatkit-x: 4\n```\n";
    assert_eq!(
        differences(&dir, architecture),
        [
            "fatkit-x: 5 public items, 4 recorded; make the new ones pub(crate), or raise the number in ARCHITECTURE.md on purpose and say what they are for",
            "fatkit-y: 1 public items and no line in ARCHITECTURE.md's public surface; add `fatkit-y: 1`",
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
