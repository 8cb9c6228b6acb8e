//! docs/GUARANTEES.md names, for each mechanism, the tests that hold it. A claim is only as
//! true as its test: every test it names must exist, so that a renamed or removed test makes
//! the document fail, not lie.

use std::collections::BTreeSet;
use std::path::Path;

use super::{files, root};

/// The names of every `fn` in the repository's Rust files.
fn functions(root: &Path) -> BTreeSet<String> {
    let mut all = Vec::new();
    files(root, &mut all);
    let mut names = BTreeSet::new();
    for file in all
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
    {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for rest in text.split("fn ").skip(1) {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            names.insert(name);
        }
    }
    names
}

/// The tests `text` names: backquoted `module::name` or `name` whose last part reads as a
/// test's name (lowercase words joined by at least three underscores).
fn named_tests(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|quoted| {
            let last = quoted.rsplit("::").next()?;
            let is_test = !last.starts_with('_')
                && last.matches('_').count() >= 3
                && last
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            is_test.then(|| last.to_owned())
        })
        .collect()
}

#[test]
fn every_test_the_guarantees_name_exists() {
    let root = root();
    let text = std::fs::read_to_string(root.join("docs/GUARANTEES.md")).unwrap();
    let named = named_tests(&text);
    assert!(named.len() >= 20, "too few tests named: {named:?}");
    let functions = functions(&root);
    let missing: Vec<&String> = named.iter().filter(|n| !functions.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "docs/GUARANTEES.md names tests that do not exist; name the test that holds the claim, or drop the claim:\n{missing:?}"
    );
}

#[test]
fn a_test_named_is_read_as_one() {
    let named = named_tests("held by `boundaries::a_crates_metadata_names_no_program_of_its_own` and `out::inside`, `fatkit_fatbin::printable`");
    assert_eq!(
        named.into_iter().collect::<Vec<_>>(),
        ["a_crates_metadata_names_no_program_of_its_own"]
    );
}

/// The benches the documents name (`cargo xtask bench NAME`), each with the file naming it.
fn benches_named(root: &Path) -> Vec<(String, String)> {
    let mut docs = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    if let Ok(dir) = std::fs::read_dir(root.join("docs")) {
        docs.extend(dir.flatten().map(|e| e.path()));
    }
    let mut out = Vec::new();
    for doc in docs
        .iter()
        .filter(|d| d.extension().is_some_and(|e| e == "md"))
    {
        let Ok(text) = std::fs::read_to_string(doc) else {
            continue;
        };
        for rest in text.split("cargo xtask bench ").skip(1) {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '-')
                .collect();
            if !name.is_empty() {
                let at = doc.strip_prefix(root).unwrap_or(doc);
                out.push((name, at.display().to_string()));
            }
        }
    }
    out
}

/// A document naming a bench that does not exist sends its reader to an error: every
/// `cargo xtask bench NAME` of the README and the docs is one of `cargo xtask bench`'s.
#[test]
fn every_bench_the_documents_name_exists() {
    use clap::Args;
    let command = crate::bench::Bench::augment_args(clap::Command::new("bench"));
    let known: BTreeSet<String> = command
        .get_subcommands()
        .map(|c| c.get_name().to_owned())
        .collect();
    assert!(
        known.contains("cold") && known.contains("environments"),
        "{known:?}"
    );
    let named = benches_named(&root());
    assert!(named.len() > 10, "the README names the benches: {named:?}");
    let unknown: Vec<String> = named
        .iter()
        .filter(|(name, _)| !known.contains(name))
        .map(|(name, doc)| {
            format!("{doc}: `cargo xtask bench {name}` is no bench; the benches are {known:?}")
        })
        .collect();
    assert!(unknown.is_empty(), "{}", unknown.join("\n"));
}
