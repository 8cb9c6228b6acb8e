//! What a reader takes in at once: no source module over [`MAX_MODULE_LINES`] lines, and no
//! function outside tests over [`MAX_FUNCTION_LINES`] (issue 31's limits). A module that
//! outgrows them is split along its seams, not granted an exception.

use std::path::{Path, PathBuf};

use super::{files, library_code, root};

/// The most lines of one `.rs` file, tests included.
const MAX_MODULE_LINES: usize = 600;

/// The most lines of one function (its signature to its closing brace), outside tests.
const MAX_FUNCTION_LINES: usize = 100;

/// The most lines of the command-line crate, all its sources: a command parses its arguments,
/// calls one library function and renders; what it grows by belongs in a library (issue 43).
const MAX_CLI_LINES: usize = 2000;

/// Where the sources are: the crates, xtask and the integration tests.
const SOURCE_DIRS: &[&str] = &["crates", "xtask/src", "tests"];

/// Every `.rs` file of the repository's sources, as paths under `root`.
fn sources(root: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    for dir in SOURCE_DIRS {
        files(&root.join(dir), &mut all);
    }
    all.retain(|f| f.extension().is_some_and(|e| e == "rs"));
    all.sort();
    all
}

/// `path: N lines` for every source file over [`MAX_MODULE_LINES`].
fn long_modules(root: &Path) -> Vec<String> {
    sources(root)
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).ok()?.lines().count();
            let rel = f.strip_prefix(root).unwrap_or(f);
            (n > MAX_MODULE_LINES).then(|| format!("{}: {n} lines", rel.display()))
        })
        .collect()
}

/// `path:line: fn NAME: N lines` for every function outside tests over [`MAX_FUNCTION_LINES`].
fn long_functions(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for file in sources(root) {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let rel = file.strip_prefix(root).unwrap_or(&file);
        // Tests, where a long table of cases is the clearest form, are left out.
        let Some(library) = library_code(rel, &text) else {
            continue;
        };
        let code = code_only(library);
        for (name, first, last) in functions(&code) {
            let n = last - first + 1;
            if n > MAX_FUNCTION_LINES {
                out.push(format!("{}:{first}: fn {name}: {n} lines", rel.display()));
            }
        }
    }
    out
}

/// `text` with every comment, string and character literal blanked (newlines kept), so that
/// only the code's own braces and keywords are left.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        let next = chars.get(i + 1).copied();
        // A literal or comment starts here: where it ends (exclusive).
        let end = match (c, next) {
            ('/', Some('/')) => (i..chars.len())
                .find(|&j| chars.get(j) == Some(&'\n'))
                .unwrap_or(chars.len()),
            ('/', Some('*')) => block_comment_end(&chars, i),
            ('"', _) => string_end(&chars, i + 1),
            ('r', Some('"' | '#')) if is_raw_string(&chars, i) => raw_string_end(&chars, i + 1),
            ('\'', _) => char_literal_end(&chars, i).unwrap_or(i + 1),
            _ => i + 1,
        };
        if end == i + 1 && c != '"' {
            out.push(c);
        } else {
            out.extend(
                chars
                    .get(i..end)
                    .unwrap_or_default()
                    .iter()
                    .map(|&c| blank(c)),
            );
        }
        i = end.max(i + 1);
    }
    out
}

fn block_comment_end(chars: &[char], start: usize) -> usize {
    let mut depth = 0usize;
    let mut j = start;
    while j + 1 < chars.len() {
        match (chars.get(j), chars.get(j + 1)) {
            (Some('/'), Some('*')) => {
                depth += 1;
                j += 2;
            }
            (Some('*'), Some('/')) => {
                depth -= 1;
                j += 2;
                if depth == 0 {
                    return j;
                }
            }
            _ => j += 1,
        }
    }
    chars.len()
}

/// The end of a string whose text starts at `from` (after its opening quote).
fn string_end(chars: &[char], from: usize) -> usize {
    let mut j = from;
    while let Some(&c) = chars.get(j) {
        match c {
            '\\' => j += 2,
            '"' => return j + 1,
            _ => j += 1,
        }
    }
    chars.len()
}

/// `r"`, `r#"`: a raw string, not an identifier ending in `r` (`for"` cannot occur in Rust).
fn is_raw_string(chars: &[char], at: usize) -> bool {
    let before = at.checked_sub(1).and_then(|b| chars.get(b)).copied();
    let ident_before =
        before.is_some_and(|b| b.is_alphanumeric() || b == '_') && before != Some('b');
    let mut j = at + 1;
    while chars.get(j) == Some(&'#') {
        j += 1;
    }
    !ident_before && chars.get(j) == Some(&'"')
}

/// The end of a raw string whose hashes start at `from` (after its `r`).
fn raw_string_end(chars: &[char], from: usize) -> usize {
    let mut hashes = 0;
    let mut j = from;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    j += 1; // the opening quote
    while j < chars.len() {
        if chars.get(j) == Some(&'"') && (1..=hashes).all(|h| chars.get(j + h) == Some(&'#')) {
            return j + 1 + hashes;
        }
        j += 1;
    }
    chars.len()
}

/// The end of a character literal at `at` (`'x'`, `'\n'`, `'\u{7f}'`), or `None` for a
/// lifetime (`'a`).
fn char_literal_end(chars: &[char], at: usize) -> Option<usize> {
    match chars.get(at + 1)? {
        '\\' => (at + 2..chars.len().min(at + 12))
            .find(|&j| chars.get(j) == Some(&'\''))
            .map(|j| j + 1),
        _ if chars.get(at + 2) == Some(&'\'') => Some(at + 3),
        _ => None,
    }
}

/// Every function of `code` (as [`code_only`] leaves it) with a body: its name, and the lines
/// (from 1) of its `fn` and of its closing brace.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let bytes = code.as_bytes();
    let line_of = |at: usize| code.get(..at).map_or(0, |t| t.matches('\n').count()) + 1;
    let mut out = Vec::new();
    for (at, _) in code.match_indices("fn ") {
        let word_start = at == 0
            || bytes
                .get(at - 1)
                .is_some_and(|b| !(b.is_ascii_alphanumeric() || *b == b'_'));
        let rest = code.get(at + 3..).unwrap_or_default();
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !word_start || name.is_empty() {
            continue;
        }
        // The body: the first `{` before any `;` (a declaration without one has no body).
        let Some(open) = rest
            .find(['{', ';'])
            .filter(|&o| rest.get(o..=o) == Some("{"))
        else {
            continue;
        };
        let mut depth = 0usize;
        for (k, c) in rest.get(open..).unwrap_or_default().char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        out.push((name, line_of(at), line_of(at + 3 + open + k)));
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// Lines of every `.rs` file under `dir`.
fn lines_under(dir: &Path) -> usize {
    let mut all = Vec::new();
    files(dir, &mut all);
    all.iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .map(|t| t.lines().count())
        .sum()
}

#[test]
fn the_command_line_stays_thin() {
    let n = lines_under(&root().join("crates/fatkit-cli/src"));
    assert!(
        n <= MAX_CLI_LINES,
        "crates/fatkit-cli/src holds {n} lines, over {MAX_CLI_LINES}: move what is not parsing arguments, calling one library function and rendering into the library crate it belongs to"
    );
    assert!(
        n > 0,
        "crates/fatkit-cli/src has no sources: the test reads the wrong place"
    );
}

#[test]
fn no_module_or_function_outgrows_a_reader() {
    let root = root();
    assert!(
        sources(&root).len() > 100,
        "no sources found under {root:?}"
    );
    let modules = long_modules(&root);
    assert!(
        modules.is_empty(),
        "source modules over {MAX_MODULE_LINES} lines; split them along their seams:\n{}",
        modules.join("\n")
    );
    let functions = long_functions(&root);
    assert!(
        functions.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines outside tests; split them into named steps:\n{}",
        functions.join("\n")
    );
}

#[test]
fn a_long_function_is_caught_and_literals_do_not_count() {
    let body = "    let x = 1;\n".repeat(MAX_FUNCTION_LINES);
    let code = format!(
        "// fn not_code() {{\nfn short() {{ let s = \"}}\"; let c = '{{'; let r = r#\"{{\"#; }}\n\
         pub(crate) fn long<'a>(x: &'a str) -> &'a str {{\n{body}    x\n}}\n\
         fn declared();\n"
    );
    let found = functions(&code_only(&code));
    let names: Vec<(&str, usize)> = found
        .iter()
        .map(|(n, first, last)| (n.as_str(), last - first + 1))
        .collect();
    assert_eq!(names, [("short", 1), ("long", MAX_FUNCTION_LINES + 3)]);
}
