//! Tests that keep the repository's own rules true (rust-analyzer's `xtask/src/tidy.rs` is
//! the model): every document a comment or doc cites exists; `allow(unsafe_code)` appears only
//! in the files ARCHITECTURE.md lists; the audit JSON doc names every field the JSON has.

#![cfg(test)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

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

/// Files fatkit writes that are named like documents but are outputs, not citations.
const GENERATED: &[&str] = &["COVERAGE.md"];

/// Every `docs/*.md` or `SHOUTING.md` a file names that does not exist: a citation is looked
/// up from the repository root, then beside the citing file.
fn missing_citations(root: &Path) -> Vec<String> {
    let mut all = Vec::new();
    files(root, &mut all);
    let mut missing = Vec::new();
    // This file names example citations on purpose.
    for file in all.iter().filter(|f| !f.ends_with("xtask/src/tidy.rs")) {
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
    all.iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
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
    let mut out = BTreeSet::new();
    let mut inside = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == "[dependencies]";
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

/// Lines of `krate`'s sources that do I/O, as `path:line: word`; its unit tests (`tests.rs`,
/// `*_tests.rs`, what follows `#[cfg(test)]`) may read their fixtures.
fn io_violations(root: &Path, krate: &str) -> Vec<String> {
    let mut all = Vec::new();
    files(&root.join("crates").join(krate).join("src"), &mut all);
    let mut out = Vec::new();
    let is_test = |f: &Path| {
        f.file_name()
            .is_some_and(|n| n == "tests.rs" || n.to_string_lossy().ends_with("_tests.rs"))
    };
    for file in all
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs") && !is_test(f))
    {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let code = text.lines().take_while(|l| !l.starts_with("#[cfg(test)]"));
        for (n, line) in code.enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if let Some(word) = IO_WORDS.iter().find(|w| code.contains(**w)) {
                let rel = file.strip_prefix(root).unwrap_or(file);
                out.push(format!("{}:{}: {word}", rel.display(), n + 1));
            }
        }
    }
    out
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

/// The modules of the crate whose sources are in `src`, by path (`pipeline::compile`; the
/// crate root is `crate`), and their files.
fn crate_modules(src: &Path) -> Vec<(String, PathBuf)> {
    let mut all = Vec::new();
    files(src, &mut all);
    all.into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
        .filter_map(|f| {
            let rel = f.strip_prefix(src).ok()?.with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts
                .last()
                .is_some_and(|l| ["mod", "lib", "main"].contains(&l.as_str()))
            {
                parts.pop();
            }
            let name = if parts.is_empty() {
                "crate".to_owned()
            } else {
                parts.join("::")
            };
            Some((name, f))
        })
        .collect()
}

/// The modules `text` (module `me`'s source, its tests and comments left out) names through
/// `crate::` or `super::` paths, less its own ancestors and descendants.
fn module_refs(text: &str, me: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let path_after = |at: usize| -> Vec<&str> {
        let rest = code.get(at..).unwrap_or("");
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        rest.get(..end)
            .unwrap_or("")
            .split("::")
            .filter(|s| !s.is_empty())
            .collect()
    };
    let mut out = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let path = path_after(at + "crate::".len());
        if let Some(m) = (1..=path.len())
            .rev()
            .map(|k| path[..k].join("::"))
            .find(|m| modules.contains(m))
        {
            out.insert(m);
        }
    }
    let parent = me.rsplit_once("::").map_or("", |(p, _)| p);
    for (at, _) in code.match_indices("super::") {
        if let Some(first) = path_after(at + "super::".len()).first() {
            let m = if parent.is_empty() {
                (*first).to_owned()
            } else {
                format!("{parent}::{first}")
            };
            if modules.contains(&m) {
                out.insert(m);
            }
        }
    }
    out.retain(|m| {
        m != me && !m.starts_with(&format!("{me}::")) && !me.starts_with(&format!("{m}::"))
    });
    out
}

/// Every circle of imports among the modules of the crate in `src`, each as the modules on it.
fn import_circles(src: &Path) -> Vec<Vec<String>> {
    let modules = crate_modules(src);
    let names: BTreeSet<String> = modules.iter().map(|(m, _)| m.clone()).collect();
    let graph: std::collections::BTreeMap<String, BTreeSet<String>> = modules
        .iter()
        .map(|(m, f)| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            (m.clone(), module_refs(&text, m, &names))
        })
        .collect();
    // A module is on a circle when it reaches itself; each circle is reported once, as the set
    // of modules that reach one another.
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&String> = graph.get(from).into_iter().flatten().collect();
        while let Some(m) = stack.pop() {
            if seen.insert(m.clone()) {
                stack.extend(graph.get(m).into_iter().flatten());
            }
        }
        seen
    };
    let reaches: std::collections::BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|m| (m, reach(m))).collect();
    let mut circles: Vec<Vec<String>> = Vec::new();
    for (m, r) in &reaches {
        if !r.contains(*m) {
            continue;
        }
        let circle: Vec<String> = r
            .iter()
            .filter(|o| reaches.get(o).is_some_and(|back| back.contains(*m)))
            .cloned()
            .collect();
        if !circles.contains(&circle) {
            circles.push(circle);
        }
    }
    circles
}

#[test]
fn no_crate_has_a_circle_of_imports() {
    let root = root();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    dirs.push(root.join("xtask/src"));
    dirs.sort();
    let circles: Vec<String> = dirs
        .iter()
        .flat_map(|d| {
            let rel = d.strip_prefix(&root).unwrap_or(d).display().to_string();
            import_circles(d)
                .into_iter()
                .map(move |c| format!("{rel}: {}", c.join(" <-> ")))
        })
        .collect();
    assert!(
        circles.is_empty(),
        "modules that import one another in a circle; move the records they share into a leaf module:\n{}",
        circles.join("\n")
    );
}

#[test]
fn a_circle_of_imports_is_caught() {
    let dir = std::env::temp_dir().join(format!("fatkit-tidy-circle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src/pipeline")).unwrap();
    for (file, text) in [
        (
            "src/lib.rs",
            "pub mod a;\npub mod b;\npub mod leaf;\npub mod pipeline;\n",
        ),
        (
            "src/a.rs",
            "use crate::b::B;\n// crate::leaf only in a comment\n",
        ),
        (
            "src/b.rs",
            "pub struct B;\nfn f() { crate::a::g(); crate::leaf::L; }\n",
        ),
        (
            "src/leaf.rs",
            "pub struct L;\n#[cfg(test)]\nmod tests { use crate::a; }\n",
        ),
        ("src/pipeline/mod.rs", "mod compile;\nmod bundle;\n"),
        ("src/pipeline/compile.rs", "use super::bundle::X;\n"),
        ("src/pipeline/bundle.rs", "use crate::leaf::L;\n"),
    ] {
        std::fs::write(dir.join(file), text).unwrap();
    }
    assert_eq!(import_circles(&dir.join("src")), [["a", "b"]]);
    std::fs::remove_dir_all(&dir).unwrap();
}
