//! The crate graph ARCHITECTURE.md states, and the crates it says do no I/O of their own.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::{code_lines, library_sources, root};

/// The crate graph ARCHITECTURE.md states (its "## Crate graph" block): per crate, the
/// workspace crates its normal dependencies may name, and, where the line says `only`, the one
/// set of other crates it may depend on.
fn stated_graph(architecture: &str) -> Vec<(String, BTreeSet<String>, Option<BTreeSet<String>>)> {
    let section = architecture
        .split("\n## ")
        .find(|s| s.starts_with("Crate graph"))
        .unwrap_or("");
    let block = section.split("```").nth(1).unwrap_or("");
    block
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let (ours, only) = match rest.split_once(';') {
                Some((ours, only)) => (ours, only.trim().strip_prefix("only")),
                None => (rest, None),
            };
            let words = |s: &str| s.split_whitespace().map(str::to_owned).collect();
            Some((name.trim().to_owned(), words(ours), only.map(words)))
        })
        .collect()
}

/// The names in the `[dependencies]` table of a `Cargo.toml` (`name = ...`,
/// `name.workspace = true`); build and dev dependencies are not the crate's own graph.
fn dependencies(manifest: &str) -> BTreeSet<String> {
    table(manifest, "[dependencies]")
}

/// The names in the table `header` (`[dev-dependencies]`) of a `Cargo.toml`.
fn table(manifest: &str, header: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut inside = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == header;
            continue;
        }
        if !inside || line.starts_with('#') {
            continue;
        }
        if let Some((key, _)) = line.split_once('=') {
            let name = key.trim().trim_end_matches(".workspace").trim();
            if !name.is_empty() {
                out.insert(name.to_owned());
            }
        }
    }
    out
}

/// Every way the workspace's manifests break the stated graph: a crate not in it, a dependency
/// on a workspace crate it does not list, or an outside one where it says `only`.
fn graph_violations(root: &Path, architecture: &str) -> Vec<String> {
    let stated = stated_graph(architecture);
    let mut manifests: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("Cargo.toml"))
        .filter(|p| p.is_file())
        .collect();
    manifests.extend(["xtask/Cargo.toml", "tests/Cargo.toml"].map(|p| root.join(p)));
    manifests.sort();
    let ours: BTreeSet<String> = manifests
        .iter()
        .filter_map(|m| package_name(&std::fs::read_to_string(m).ok()?))
        .collect();
    let mut out = Vec::new();
    for manifest in &manifests {
        let Ok(text) = std::fs::read_to_string(manifest) else {
            continue;
        };
        let Some(name) = package_name(&text) else {
            continue;
        };
        let Some((_, allowed, only)) = stated.iter().find(|(n, _, _)| *n == name) else {
            out.push(format!(
                "{name}: not in ARCHITECTURE.md's crate graph; add its line"
            ));
            continue;
        };
        for dep in dependencies(&text) {
            if ours.contains(&dep) && !allowed.contains(&dep) {
                out.push(format!(
                    "{name} depends on {dep}, which ARCHITECTURE.md's crate graph does not allow it"
                ));
            }
            if let Some(only) = only {
                if !ours.contains(&dep) && !only.contains(&dep) {
                    out.push(format!(
                        "{name} depends on {dep}; ARCHITECTURE.md's crate graph says only {}",
                        only.iter().cloned().collect::<Vec<_>>().join(" ")
                    ));
                }
            }
        }
    }
    out
}

/// `name = "..."` of a manifest's `[package]`.
fn package_name(manifest: &str) -> Option<String> {
    let package = manifest.split("[package]").nth(1)?;
    let line = package
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with('['))
        .find(|l| l.starts_with("name"))?;
    Some(line.split_once('=')?.1.trim().trim_matches('"').to_owned())
}

/// What a crate that ARCHITECTURE.md says does no I/O of its own must not write: touch the
/// file system, spawn a process or open a socket.
const IO_WORDS: &[&str] = &[
    "std::fs",
    "fs::read",
    "fs::write",
    "File::open",
    "File::create",
    "Command::new",
    "std::process::Command",
    "std::net",
];

/// The crates whose invariant is no I/O of their own: fatkit-arch (the rules: "does no I/O,
/// spawns nothing"), fatkit-fatbin (the formats over bytes: "no I/O and no processes") and
/// fatkit-cli (it parses, calls one library function, renders).
const NO_IO_CRATES: &[&str] = &["fatkit-arch", "fatkit-fatbin", "fatkit-cli"];

/// How a file is opened or read whole other than through fatkit-read's one bounded reader
/// (docs/GUARANTEES.md, "Only regular files, read with limits"): a FIFO named where a file is
/// expected would block, a link to `/dev/zero` never end.
const UNBOUNDED_READS: &[&str] = &[
    "fs::read(",
    "fs::read_to_string(",
    "File::open(",
    "OpenOptions::new(",
];

/// The library crates that read what users and crates name, and so read only through
/// fatkit-read (which alone opens files). fatkit-fuzz reads its own corpus; xtask is the
/// project's own tooling.
const BOUNDED_READERS: &[&str] = &[
    "fatkit-audit",
    "fatkit-lock",
    "fatkit-package",
    "fatkit-toolchain",
    "fatkit-build",
    "fatkit-project",
    "fatkit-cli",
    "fatkit-runtime",
];

/// Lines of `krate`'s library code (as [`io_violations`] reads it) that use one of `words`.
fn word_violations(root: &Path, krate: &str, words: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for (shown, code) in library_sources(root, &[krate]) {
        for (n, line) in code_lines(&code) {
            if let Some(word) = words.iter().find(|w| line.contains(**w)) {
                out.push(format!("{shown}:{n}: {word}"));
            }
        }
    }
    out
}

/// Lines of `krate`'s sources that do I/O, as `path:line: word`; its unit tests (`tests.rs`,
/// `*_tests.rs`, what follows `#[cfg(test)]`) may read their fixtures.
fn io_violations(root: &Path, krate: &str) -> Vec<String> {
    word_violations(root, krate, IO_WORDS)
}

#[test]
fn every_file_is_read_through_the_one_bounded_reader() {
    let root = root();
    for krate in BOUNDED_READERS {
        let mut reads = word_violations(&root, krate, UNBOUNDED_READS);
        // The one writer opens files for writing.
        reads.retain(|r| !r.starts_with(&format!("{THE_WRITER}:")));
        assert!(
            reads.is_empty(),
            "{krate} opens or reads a file itself; read it with fatkit_read (read_limited, open_regular, for_each_line), which refuses a FIFO or a device and reads no more than a limit:\n{}",
            reads.join("\n")
        );
    }
}

#[test]
fn an_unbounded_read_is_caught() {
    let dir = std::env::temp_dir().join(format!("fatkit-tidy-read-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let src = dir.join("crates/fatkit-package/src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "pub fn f() { let _ = std::fs::read_to_string(\"p\"); }\n#[cfg(test)]\nfn t() { let _ = std::fs::read(\"x\"); }\n",
    )
    .unwrap();
    assert_eq!(
        word_violations(&dir, "fatkit-package", UNBOUNDED_READS),
        ["crates/fatkit-package/src/lib.rs:1: fs::read_to_string("]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_crate_graph_is_the_one_architecture_md_states() {
    let root = root();
    let architecture = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    assert!(
        stated_graph(&architecture).len() >= 5,
        "ARCHITECTURE.md has no \"## Crate graph\" block"
    );
    let violations = graph_violations(&root, &architecture);
    assert!(violations.is_empty(), "{}", violations.join("\n"));
    for krate in NO_IO_CRATES {
        let io = io_violations(&root, krate);
        assert!(
            io.is_empty(),
            "{krate} touches files, spawns processes or opens sockets itself, which ARCHITECTURE.md says it does not; move it into a crate that does I/O (fatkit-audit, fatkit-toolchain, fatkit-build):\n{}",
            io.join("\n")
        );
    }
}

#[test]
fn a_forbidden_dependency_is_caught() {
    let dir = std::env::temp_dir().join(format!("fatkit-tidy-graph-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (krate, deps) in [
        (
            "fatkit-arch",
            "serde.workspace = true\nfatkit-build.workspace = true\n",
        ),
        (
            "fatkit-build",
            "fatkit-arch.workspace = true\nregex = \"1\"\n",
        ),
        ("fatkit-new", "fatkit-arch.workspace = true\n"),
    ] {
        std::fs::create_dir_all(dir.join("crates").join(krate)).unwrap();
        std::fs::write(
            dir.join("crates").join(krate).join("Cargo.toml"),
            format!("[package]\nname = \"{krate}\"\n\n[dependencies]\n{deps}\n[dev-dependencies]\nfatkit-cli.workspace = true\n"),
        )
        .unwrap();
    }
    let architecture = "# A\n\n## Crate graph\n\n```text\nfatkit-arch: ; only serde\nfatkit-build: fatkit-arch\n```\n";
    assert_eq!(
        graph_violations(&dir, architecture),
        [
            "fatkit-arch depends on fatkit-build, which ARCHITECTURE.md's crate graph does not allow it",
            "fatkit-new: not in ARCHITECTURE.md's crate graph; add its line",
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn io_in_a_crate_that_does_none_is_caught() {
    let dir = std::env::temp_dir().join(format!("fatkit-tidy-io-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let src = dir.join("crates/fatkit-arch/src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "// std::fs in a comment is fine\npub fn f() { let _ = std::fs::read(\"x\"); }\n",
    )
    .unwrap();
    assert_eq!(
        io_violations(&dir, "fatkit-arch"),
        ["crates/fatkit-arch/src/lib.rs:2: std::fs"]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The crates the publish dry run of `cargo xtask test` names (`-p NAME`).
fn published_in_test(test_rs: &str) -> BTreeSet<String> {
    let Some(start) = test_rs.find("\"publish dry run\"") else {
        return BTreeSet::new();
    };
    let rest = test_rs.get(start..).unwrap_or("");
    let step = rest.split("));").next().unwrap_or("");
    let words: Vec<&str> = step.split('"').skip(1).step_by(2).collect();
    words
        .windows(2)
        .filter(|w| w.first() == Some(&"-p"))
        .filter_map(|w| w.get(1).map(|s| (*s).to_owned()))
        .collect()
}

#[test]
fn every_published_crate_is_in_the_publish_dry_run() {
    let root = root();
    let test_rs = std::fs::read_to_string(root.join("xtask/src/test.rs")).unwrap();
    let named = published_in_test(&test_rs);
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
        let manifest = std::fs::read_to_string(entry.path().join("Cargo.toml")).unwrap_or_default();
        let Some(name) = package_name(&manifest) else {
            continue;
        };
        if !manifest.contains("publish = false") && !named.contains(&name) {
            missing.push(name);
        }
    }
    assert!(
        named.len() > 3 && missing.is_empty(),
        "crates that can be published but that the publish dry run of `cargo xtask test` does not package (a crate another depends on fails there only once CI runs): add `-p NAME` to it in xtask/src/test.rs, or set publish = false: {missing:?}"
    );
}

/// The crate names of the `CRATES` array of the vendored test: what its local registry holds.
fn vendored_crates(vendored_rs: &str) -> BTreeSet<String> {
    let Some(start) = vendored_rs.find("const CRATES") else {
        return BTreeSet::new();
    };
    let rest = vendored_rs.get(start..).unwrap_or("");
    let array = rest.split("];").next().unwrap_or("");
    array
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The vendored consumer's local registry (`tests/tests/it/ship/vendored.rs`) must hold every
/// workspace crate that `cargo package` of fatkit-runtime and fatkit-example-kernels reaches:
/// their dependencies and fatkit-runtime's dev-dependencies, and theirs, transitively. A crate
/// missing there fails only in a clean clone (fatkit-lock did, once).
#[test]
fn the_vendored_registry_holds_every_crate_the_consumer_reaches() {
    let root = root();
    let manifest = |name: &str| {
        std::fs::read_to_string(root.join("crates").join(name).join("Cargo.toml")).ok()
    };
    let mut reach: BTreeSet<String> = BTreeSet::new();
    let mut queue: Vec<String> = vec!["fatkit-runtime".into(), "fatkit-example-kernels".into()];
    if let Some(m) = manifest("fatkit-runtime") {
        queue.extend(table(&m, "[dev-dependencies]"));
    }
    while let Some(name) = queue.pop() {
        let Some(m) = manifest(&name) else { continue };
        if reach.insert(name) {
            queue.extend(dependencies(&m));
        }
    }
    let vendored = std::fs::read_to_string(root.join("tests/tests/it/ship/vendored.rs")).unwrap();
    let held = vendored_crates(&vendored);
    let missing: Vec<&String> = reach.difference(&held).collect();
    assert!(
        reach.len() > 5 && missing.is_empty(),
        "the vendored test's local registry lacks crates that `cargo package` of the consumer reaches; add them to CRATES in tests/tests/it/ship/vendored.rs: {missing:?}"
    );
}

/// What writes, renames, copies or links a file: only `fatkit_package::out` may.
const WRITES: &[&str] = &[
    "fs::write(",
    "fs::File::create(",
    " File::create(",
    "(File::create(",
    "fs::rename(",
    "fs::copy(",
    "fs::hard_link(",
    "fs::symlink(",
    "OpenOptions::new(",
];

/// The one writer (docs/GUARANTEES.md, "One writer for every output").
const THE_WRITER: &str = "crates/fatkit-package/src/out.rs";

/// Lines of the library crates that write a file other than through [`THE_WRITER`].
fn write_violations(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for krate in BOUNDED_READERS.iter().chain(["fatkit-run"].iter()) {
        out.extend(
            word_violations(root, krate, WRITES)
                .into_iter()
                .filter(|v| !v.starts_with(&format!("{THE_WRITER}:")))
                // fatkit-read opens for reading; its OpenOptions is the one reader.
                .filter(|v| !v.starts_with("crates/fatkit-read/")),
        );
    }
    out
}

#[test]
fn every_file_is_written_through_the_one_writer() {
    let writes = write_violations(&root());
    assert!(
        writes.is_empty(),
        "a library crate writes, renames or copies a file itself; write it through fatkit_package::out (write_atomic, AtomicFile, write_replacing, inside, rename_into_place, lock_file), which writes only regular files and replaces nothing else:\n{}",
        writes.join("\n")
    );
}

#[test]
fn a_write_outside_the_writer_is_caught() {
    let dir = std::env::temp_dir().join(format!("fatkit-tidy-write-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let src = dir.join("crates/fatkit-build/src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "pub fn f() { let _ = std::fs::rename(\"a\", \"b\"); }\n#[cfg(test)]\nfn t() { let _ = std::fs::write(\"x\", \"\"); }\n",
    )
    .unwrap();
    let out = dir.join("crates/fatkit-package/src");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(
        out.join("out.rs"),
        "pub fn w() { let _ = std::fs::write(\"p\", \"\"); }\n",
    )
    .unwrap();
    assert_eq!(
        write_violations(&dir),
        ["crates/fatkit-build/src/lib.rs:1: fs::rename("]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
