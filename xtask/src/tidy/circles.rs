//! No circle of imports among the modules of any crate: records live in leaf modules.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::{files, root};

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
