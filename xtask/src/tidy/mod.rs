//! Tests that keep the repository's own rules true (rust-analyzer's `xtask/src/tidy.rs` is
//! the model): every document a comment or doc cites exists; `allow(unsafe_code)` appears only
//! in the files ARCHITECTURE.md lists; the audit JSON doc names every field the JSON has;
//! the crate graph and the no-I/O crates are as ARCHITECTURE.md states (`graph`); no crate has
//! a circle of imports, read from every `use` tree (`circles`); no library spawns a process
//! but through the one runner (`spawns`); no module or function outgrows what a reader takes
//! in (`size`).

#![cfg(test)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

mod circles;
mod claims;
mod decisions;

mod graph;
mod layers;
mod renderers;
mod size;
mod spawns;
mod surface;
mod verdict;

fn root() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    dir.parent().unwrap_or(dir).to_owned()
}

/// The `.rs` and `.md` files under `dir`, less build outputs and hidden directories.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(read) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in read.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "dist" {
            continue;
        }
        if path.is_dir() {
            files(&path, out);
        } else if name.ends_with(".rs") || name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// A source file's library code, `rel` its path from the repository root: `None` for test
/// code (`tests.rs`, `*_tests.rs`, anything under a `tests` directory, a file that is
/// `#![cfg(test)]` as a whole), else its text before its unit tests (a line starting
/// `#[cfg(test)]`).
fn library_code<'t>(rel: &Path, text: &'t str) -> Option<&'t str> {
    let name = rel.file_name()?.to_string_lossy();
    let test_file = name == "tests.rs"
        || name.ends_with("_tests.rs")
        || rel.components().any(|c| c.as_os_str() == "tests")
        || text.lines().any(|l| l.trim() == "#![cfg(test)]");
    if test_file {
        return None;
    }
    let end = match text.find("\n#[cfg(test)]") {
        _ if text.starts_with("#[cfg(test)]") => 0,
        Some(i) => i,
        None => text.len(),
    };
    text.get(..end)
}

/// The library code ([`library_code`]) of every `.rs` file under `src/` of the crates named
/// in `krates`, in that order (of every crate under `crates/` when `krates` is empty), as
/// (path from `root`, code).
fn library_sources(root: &Path, krates: &[&str]) -> Vec<(String, String)> {
    let mut all = Vec::new();
    if krates.is_empty() {
        files(&root.join("crates"), &mut all);
    } else {
        for krate in krates {
            files(&root.join("crates").join(krate).join("src"), &mut all);
        }
    }
    all.iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
        .filter_map(|file| {
            let rel = file.strip_prefix(root).unwrap_or(file);
            let in_src = rel
                .components()
                .nth(2)
                .is_some_and(|c| c.as_os_str() == "src");
            let text = std::fs::read_to_string(file).ok().filter(|_| in_src)?;
            let code = library_code(rel, &text)?;
            Some((rel.display().to_string(), code.to_owned()))
        })
        .collect()
}

/// The lines of `code` with their numbers (from 1), each cut at a `//` comment.
fn code_lines(code: &str) -> impl Iterator<Item = (usize, &str)> {
    code.lines()
        .enumerate()
        .map(|(n, line)| (n + 1, line.split("//").next().unwrap_or("")))
}

/// Files fatkit writes that are named like documents but are outputs, not citations.
const GENERATED: &[&str] = &["COVERAGE.md"];

/// Every `docs/*.md` or `SHOUTING.md` a file names that does not exist: a citation is looked
/// up from the repository root, then beside the citing file.
fn missing_citations(root: &Path) -> Vec<String> {
    let mut all = Vec::new();
    files(root, &mut all);
    let mut missing = Vec::new();
    // These tests name example citations on purpose.
    for file in all
        .iter()
        .filter(|f| !f.starts_with(root.join("xtask/src/tidy")))
    {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for cited in citations(&text) {
            let here = file.parent().unwrap_or(root);
            if !root.join(&cited).is_file() && !here.join(&cited).is_file() {
                let rel = file.strip_prefix(root).unwrap_or(file);
                missing.push(format!(
                    "{}: cites {cited}, which does not exist",
                    rel.display()
                ));
            }
        }
    }
    missing
}

/// The document paths in `text`: `docs/NAME.md`, `dir/docs/NAME.md`, and bare `UPPER_CASE.md`
/// (ARCHITECTURE.md, README.md).
fn citations(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || "_-./".contains(c))) {
        let word = word.trim_end_matches('.');
        let Some(stem) = word.strip_suffix(".md") else {
            continue;
        };
        let name = stem.rsplit('/').next().unwrap_or(stem);
        let shouting = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit());
        if GENERATED.contains(&word) {
            continue;
        }
        if word.contains("docs/") || (shouting && !word.contains('/')) {
            out.insert(word.to_owned());
        }
    }
    out
}

/// The files ARCHITECTURE.md's "Unsafe code" section lists, in backticks.
fn unsafe_allowed(root: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap_or_default();
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("Unsafe code"))
        .unwrap_or("");
    section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.ends_with(".rs"))
        .map(str::to_owned)
        .collect()
}

/// Files holding `allow(unsafe_code)` that ARCHITECTURE.md does not list.
fn unlisted_unsafe(root: &Path) -> Vec<String> {
    let allowed = unsafe_allowed(root);
    let mut all = Vec::new();
    files(root, &mut all);
    let needle = ["allow(", "unsafe_code)"].concat();
    // These tests name the attribute as text.
    let tidy = root.join("xtask/src/tidy");
    all.iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs") && !f.starts_with(&tidy))
        .filter(|f| std::fs::read_to_string(f).is_ok_and(|t| t.contains(&needle)))
        .map(|f| f.strip_prefix(root).unwrap_or(f).display().to_string())
        .filter(|rel| !allowed.contains(rel))
        .collect()
}

/// Every object key in a JSON value, less the keys of maps keyed by compute capability.
fn keys(value: &serde_json::Value, out: &mut BTreeSet<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                if !k.starts_with(|c: char| c.is_ascii_digit()) {
                    out.insert(k.clone());
                }
                keys(v, out);
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| keys(v, out)),
        _ => {}
    }
}

#[test]
fn every_cited_document_exists() {
    let missing = missing_citations(&root());
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn a_deleted_document_is_caught() {
    let dir = std::env::temp_dir().join(format!("fatkit-tidy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("docs")).unwrap();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("docs/RULES.md"), "# rules\n").unwrap();
    std::fs::write(
        dir.join("src/lib.rs"),
        "//! See docs/RULES.md section 2 and docs/GONE.md.\n",
    )
    .unwrap();
    assert_eq!(
        missing_citations(&dir),
        ["src/lib.rs: cites docs/GONE.md, which does not exist"]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unsafe_code_only_where_architecture_md_says() {
    let root = root();
    assert!(
        !unsafe_allowed(&root).is_empty(),
        "ARCHITECTURE.md has no \"## Unsafe code\" section listing files"
    );
    let unlisted = unlisted_unsafe(&root);
    assert!(
        unlisted.is_empty(),
        "allow(unsafe_code) in files ARCHITECTURE.md's \"Unsafe code\" section does not list: {unlisted:?}; list them there with why, or remove the unsafe"
    );
    for listed in unsafe_allowed(&root) {
        assert!(
            root.join(&listed).is_file(),
            "ARCHITECTURE.md lists {listed}, which does not exist"
        );
    }
}

#[test]
fn the_audit_json_doc_names_every_field() {
    let root = root();
    let doc = std::fs::read_to_string(root.join("crates/fatkit-cli/docs/audit-json.md")).unwrap();
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("tests/snapshots/audit-plain.json")).unwrap(),
    )
    .unwrap();
    let mut all = BTreeSet::new();
    keys(&json, &mut all);
    let undocumented: Vec<&String> = all
        .iter()
        .filter(|k| !doc.contains(&format!("\"{k}\"")))
        .collect();
    assert!(
        undocumented.is_empty(),
        "crates/fatkit-cli/docs/audit-json.md does not name these fields of `audit --json`: {undocumented:?}"
    );
}
