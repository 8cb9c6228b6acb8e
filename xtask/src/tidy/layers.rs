//! fatkit-audit's layers (ARCHITECTURE.md, fatkit-audit): the readers (files, wheels,
//! directories, container images, environments, the local GPU query) make records, the verdict
//! judges them, the renderer writes the verdict; they meet only in the record, which imports
//! neither. Every top-level module of the crate is in exactly one layer, so a new one must be
//! placed before it builds on anything.

use std::collections::BTreeMap;
use std::path::Path;

use super::{code_lines, library_sources, root};

/// Each layer: its top-level modules, and the layers its modules may import (besides their
/// own and the crate root's re-exports of fatkit-read and the error type).
const LAYERS: &[(&str, &[&str], &[&str])] = &[
    (
        "readers",
        &[
            "input",
            "inputs",
            "image",
            "environment",
            "local",
            "readings",
        ],
        &["record"],
    ),
    ("record", &["record"], &[]),
    (
        "verdict",
        &[
            "coverage",
            "summary",
            "answer",
            "collection",
            "fix",
            "gate",
            "general",
            "kernel",
            "profiles",
            "variants",
            "words",
        ],
        &["record"],
    ),
    // What changed between two audits: it reads what lib.rs joins, as the renderer does.
    ("comparison", &["diff"], &["verdict", "record", "root"]),
    // The renderer writes what lib.rs joins (`Audited`, its `Options`) and the comparison.
    // The renderers: the text, and the kernel bill of materials (CycloneDX).
    (
        "renderer",
        &["text", "bom", "sarif"],
        &["verdict", "comparison", "record", "root"],
    ),
];

/// What any module may take from the crate root: where the layers are joined (`lib.rs`).
const ROOT_ITEMS: &[&str] = &["read", "Error", "Result"];

/// The top-level module of a source under `crates/<krate>/src/`: `image/tar.rs` -> `image`,
/// `lib.rs` -> none (the root, where the layers are joined).
fn module_of(path: &str, krate: &str) -> Option<String> {
    let rel = path.strip_prefix(&format!("crates/{krate}/src/"))?;
    let first = rel.split('/').next()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib").then(|| name.to_owned())
}

/// Every `crate::NAME` a line names.
fn crate_names(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() && after.starts_with('{') {
            // `crate::{a, b}`: each name of the group.
            let group = after[1..].split('}').next().unwrap_or("");
            out.extend(
                group
                    .split(',')
                    .map(|n| n.trim().split("::").next().unwrap_or("").to_owned())
                    .filter(|n| !n.is_empty()),
            );
        } else if !name.is_empty() {
            out.push(name);
        }
        rest = after;
    }
    out
}

/// Lines of `krate`'s library code under `root` that import across its layers, as
/// `path:line: from -> to`; and each top-level module in no layer.
fn crossings(root: &Path, krate: &str) -> Vec<String> {
    let layer_of: BTreeMap<&str, &str> = LAYERS
        .iter()
        .flat_map(|(layer, modules, _)| modules.iter().map(move |m| (*m, *layer)))
        .collect();
    let mut out = Vec::new();
    for (shown, code) in library_sources(root, &[krate]) {
        let Some(module) = module_of(&shown, krate) else {
            continue;
        };
        let Some(&layer) = layer_of.get(module.as_str()) else {
            out.push(format!(
                "{shown}: module `{module}` is in no layer; place it in LAYERS"
            ));
            continue;
        };
        let allowed = LAYERS
            .iter()
            .find(|(l, _, _)| *l == layer)
            .map_or(&[][..], |(_, _, may)| *may);
        for (n, line) in code_lines(&code) {
            for name in crate_names(line) {
                if ROOT_ITEMS.contains(&name.as_str()) || name == module {
                    continue;
                }
                let to = layer_of.get(name.as_str()).copied().unwrap_or("root");
                if to != layer && !allowed.contains(&to) {
                    out.push(format!("{shown}:{n}: {layer} -> {to} (crate::{name})"));
                }
            }
        }
    }
    out
}

#[test]
fn readers_and_the_verdict_meet_only_in_the_record() {
    let found = crossings(&root(), "fatkit-audit");
    assert!(
        found.is_empty(),
        "fatkit-audit's layers import each other; the readers make records (crate::record), the verdict judges them, the renderer writes the verdict, and only lib.rs joins them:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_reader_importing_the_verdict_is_caught() {
    let dir = std::env::temp_dir().join(format!("fatkit-tidy-layers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let src = dir.join("crates/fatkit-audit/src");
    std::fs::create_dir_all(src.join("image")).unwrap();
    std::fs::write(src.join("lib.rs"), "use crate::coverage::X;\n").unwrap();
    std::fs::write(
        src.join("image/tar.rs"),
        "use crate::coverage::Declarations;\nuse crate::{record::Input, read};\n",
    )
    .unwrap();
    std::fs::write(src.join("summary.rs"), "use crate::{inputs, fix::Fix};\n").unwrap();
    std::fs::write(src.join("record.rs"), "use crate::answer::RunTime;\n").unwrap();
    std::fs::write(src.join("shiny.rs"), "pub fn f() {}\n").unwrap();
    let mut found = crossings(&dir, "fatkit-audit");
    found.sort();
    assert_eq!(
        found,
        [
            "crates/fatkit-audit/src/image/tar.rs:1: readers -> verdict (crate::coverage)",
            "crates/fatkit-audit/src/record.rs:1: record -> verdict (crate::answer)",
            "crates/fatkit-audit/src/shiny.rs: module `shiny` is in no layer; place it in LAYERS",
            "crates/fatkit-audit/src/summary.rs:1: verdict -> readers (crate::inputs)",
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
