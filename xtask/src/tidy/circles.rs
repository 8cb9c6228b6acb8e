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

/// The paths a `use` tree or a path names, starting at `rest` (just after `crate::` or
/// `super::`): `a::b` is one, `a::{b, c::{d, e as f}, self}` is `a::b`, `a::c::d`, `a::c::e`
/// and `a`. Each path is its segments; a glob or an alias ends it.
fn tree_paths(rest: &str) -> Vec<Vec<String>> {
    fn tree(
        chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
        prefix: &[String],
    ) -> Vec<Vec<String>> {
        let mut path = prefix.to_vec();
        let mut segment = String::new();
        loop {
            match chars.peek().copied() {
                Some(c) if c.is_ascii_alphanumeric() || c == '_' => {
                    segment.push(c);
                    chars.next();
                }
                Some(':') => {
                    chars.next();
                    if !segment.is_empty() {
                        path.push(std::mem::take(&mut segment));
                    }
                }
                Some('{') => {
                    chars.next();
                    let mut out = Vec::new();
                    loop {
                        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
                            chars.next();
                        }
                        match chars.peek() {
                            None => return out,
                            Some('}') => {
                                chars.next();
                                return out;
                            }
                            _ => {}
                        }
                        let before = out.len();
                        out.extend(tree(chars, &path));
                        // Skip to the item's end: an alias (`as x`) or a glob.
                        while chars.peek().is_some_and(|c| *c != ',' && *c != '}') {
                            chars.next();
                        }
                        if out.len() == before && chars.peek().is_none() {
                            return out;
                        }
                    }
                }
                _ => {
                    if segment != "self" && !segment.is_empty() {
                        path.push(segment);
                    }
                    return vec![path];
                }
            }
        }
    }
    tree(&mut rest.chars().peekable(), &[])
}

/// The modules `text` (module `me`'s source, its tests and comments left out) names through
/// `crate::` or `super::` paths and `use` trees (grouped and nested), less its own ancestors
/// and descendants.
fn module_refs(text: &str, me: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    // The longest leading part of `path` that is a module.
    let module_of = |path: &[String]| {
        (1..=path.len())
            .rev()
            .map(|k| path.get(..k).unwrap_or_default().join("::"))
            .find(|m| modules.contains(m))
    };
    let mut out = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = code.get(at + "crate::".len()..).unwrap_or("");
        out.extend(tree_paths(rest).iter().filter_map(|p| module_of(p)));
    }
    let parent: Vec<String> = me.rsplit_once("::").map_or_else(Vec::new, |(p, _)| {
        p.split("::").map(str::to_owned).collect()
    });
    for (at, _) in code.match_indices("super::") {
        let rest = code.get(at + "super::".len()..).unwrap_or("");
        for p in tree_paths(rest) {
            let full: Vec<String> = parent.iter().cloned().chain(p).collect();
            out.extend(module_of(&full));
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
        (
            "src/pipeline/mod.rs",
            "mod compile;\nmod bundle;\nmod plan;\nmod call;\n",
        ),
        ("src/pipeline/compile.rs", "use super::bundle::X;\n"),
        ("src/pipeline/bundle.rs", "use crate::leaf::L;\n"),
        // Grouped and nested `use` trees, as provision.rs and debian.rs had them (issue 43).
        (
            "src/pipeline/plan.rs",
            "use super::{\n    compile, io_err,\n    call::Y as Z,\n};\n",
        ),
        (
            "src/pipeline/call.rs",
            "use crate::{leaf, pipeline::{plan::P}};\n",
        ),
    ] {
        std::fs::write(dir.join(file), text).unwrap();
    }
    assert_eq!(
        import_circles(&dir.join("src")),
        [vec!["a", "b"], vec!["pipeline::call", "pipeline::plan"]]
    );
    assert_eq!(
        tree_paths("a::{b, c::{d, e as f}, self, g::*};"),
        [
            vec!["a", "b"],
            vec!["a", "c", "d"],
            vec!["a", "c", "e"],
            vec!["a"],
            vec!["a", "g"]
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
