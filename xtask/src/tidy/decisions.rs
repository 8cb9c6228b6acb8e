//! A rule of ARCHITECTURE.md that holds for every library crate: a library decides by data,
//! never by reading a message (words are made once, at the edge: `explain` and the
//! renderers).

use std::path::Path;

use super::{code_lines, library_sources, root};

/// Fields and names that hold words for people: a message, a reason, a status in words.
const WORDS: &[&str] = &[
    "status", "what", "why", "reason", "reasons", "message", "msg", "hint", "error", "err",
    "stale", "problem", "fix", "words",
];

/// How a string is tested for its content.
const TESTS: &[&str] = &[
    ".contains(",
    ".starts_with(",
    ".ends_with(",
    ".strip_prefix(",
    ".strip_suffix(",
    ".split_once(",
    ".find(",
    ".eq_ignore_ascii_case(",
];

/// Where library code reads text it did not write, each with what it reads: another tool's
/// output or another library's message, which offers no data to decide by. A new entry needs
/// the same reason.
const FOREIGN_TEXT: &[(&str, &str, &str)] = &[
    (
        "crates/fatkit-audit/src/answer/compilers.rs",
        "name?.strip_prefix(\"triton \")",
        "a distribution's name and version, as its `NAME-VERSION.dist-info` directory gives them",
    ),
    (
        "crates/fatkit-audit/src/environment.rs",
        "line.starts_with(\"import",
        "a `.pth` file's lines, as CPython's site.addpackage reads them",
    ),
    (
        "crates/fatkit-build/src/layout.rs",
        "label.strip_prefix(\"",
        "bindgen's layout assertions, as it writes them",
    ),
    (
        "crates/fatkit-build/src/pipeline/diagnostic.rs",
        "",
        "compilers' diagnostics (nvcc, EDG, gcc, ptxas, NVRTC), whose severity and location are only in words: the first error is found there, nothing else is decided",
    ),
    (
        "crates/fatkit-build/src/pipeline/nvrtc_call.rs",
        "\"): catastrophic error: \"",
        "NVRTC's log, which names a missing header only in words",
    ),
    (
        "crates/fatkit-build/src/pipeline/nvrtc_call.rs",
        "open source file \\\"\"",
        "NVRTC's log, which names a missing header only in words",
    ),
    (
        "crates/fatkit-project/src/archive.rs",
        "l.strip_prefix(\"host: \")",
        "`rustc -vV`, whose host line is its only way to say the host triple",
    ),
    (
        "crates/fatkit-toolchain/src/probe.rs",
        "l.starts_with(\"Build \")",
        "`nvcc --version`, whose build line is its only way to say its build",
    ),
    (
        "crates/fatkit-package/src/profile.rs",
        "message.contains(\"",
        "the toml crate's error, which has no kind to match (a hint is added, nothing decided)",
    ),
    (
        "crates/fatkit-fuzz/src/sass.rs",
        "",
        "cuobjdump's disassembly, read as the stub rule's oracle",
    ),
];

/// The identifier (or field) a method at byte `at` of `code` is called on, past calls that
/// keep a string a string (`.as_str()`, `.trim()`, ...), and whether one of those calls made
/// it a string (`.to_string()`: a typed value read as words).
fn receiver(code: &str, at: usize) -> (&str, bool) {
    const KEEP: &[&str] = &[
        ".to_string",
        ".as_str",
        ".trim",
        ".to_lowercase",
        ".to_owned",
    ];
    let mut before = code.get(..at).unwrap_or("");
    let mut stringified = false;
    while let Some(call) = before.strip_suffix("()") {
        let Some(kept) = KEEP.iter().find(|k| call.ends_with(**k)) else {
            break;
        };
        stringified |= *kept == ".to_string";
        before = call.strip_suffix(kept).unwrap_or(call);
    }
    // `format!(..)` of a value is its words too.
    if let Some(at) = before.rfind("format!(") {
        let call = before.get(at..).unwrap_or("");
        let balanced = call.matches('(').count() == call.matches(')').count();
        if balanced && call.ends_with(')') {
            return ("format!", true);
        }
    }
    let start = before
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |i| i + 1);
    (before.get(start..).unwrap_or(""), stringified)
}

/// Whether the string literal opening at byte `at` of `code` (at its `"`) is words: it holds
/// a space.
fn phrase_at(code: &str, at: usize) -> bool {
    let rest = code.get(at + 1..).unwrap_or("");
    rest.find('"')
        .and_then(|end| rest.get(..end))
        .is_some_and(|lit| lit.contains(' '))
}

/// The text decisions in one line of library code: a message-like name or field compared
/// with, or searched for, a literal; any phrase searched for in a string; a map keyed by
/// words.
fn decisions_in(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for op in ["==", "!="] {
        for (at, _) in code.match_indices(op) {
            let left = code.get(..at).unwrap_or("").trim_end();
            let right = code.get(at + 2..).unwrap_or("").trim_start();
            let left_at = left.len();
            let (name, stringified) = receiver(left, left_at);
            if right.starts_with('"') && (stringified || WORDS.contains(&name)) {
                out.push(format!("`{name} {op} \"...\"`"));
            }
        }
    }
    for test in TESTS {
        for (at, _) in code.match_indices(test) {
            let (name, stringified) = receiver(code, at);
            let arg_at = at + test.len();
            let literal = code.get(arg_at..).is_some_and(|r| r.starts_with('"'));
            let words = stringified || WORDS.contains(&name) || phrase_at(code, arg_at);
            if literal && words {
                out.push(format!("`{name}{test}\"...\")`"));
            }
        }
    }
    for (at, _) in code.match_indices(".entry(") {
        let arg = code.get(at + ".entry(".len()..).unwrap_or("");
        let arg = arg.split(')').next().unwrap_or("");
        let keyed_by_words = arg
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|w| WORDS.contains(&w));
        if keyed_by_words {
            out.push(format!("a map keyed by words: `.entry({arg})`"));
        }
    }
    out
}

/// Every text decision in the library code of the crates under `root`, as `path:line: what`,
/// less [`FOREIGN_TEXT`].
fn text_decisions(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (shown, code) in library_sources(root, &[]) {
        for (n, line) in code_lines(&code) {
            let foreign = FOREIGN_TEXT
                .iter()
                .any(|(f, fragment, _)| *f == shown && line.contains(fragment));
            if foreign {
                continue;
            }
            out.extend(
                decisions_in(line)
                    .into_iter()
                    .map(|d| format!("{shown}:{n}: {d}")),
            );
        }
    }
    out
}

#[test]
fn no_library_decides_by_reading_a_message() {
    let found = text_decisions(&root());
    assert!(
        found.is_empty(),
        "library code that decides by reading words; decide by the data the words were made from (an enum, a typed key), and make the words once, where they are shown:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_text_decision_is_caught() {
    // The forms issue 43 found, and others of their class.
    for (line, caught) in [
        ("Err(f) if f.status == \"timed out\" => call", true),
        ("Err(e) if e.status != \"could not start\" => x,", true),
        (
            "if stale.iter().all(|s| s.contains(\" is stale: \")) {",
            true,
        ),
        ("let how = if d.what.starts_with(\"PTX\") {", true),
        ("if e.to_string().contains(\"x\") {", true),
        ("if err.message.trim().ends_with(\"again\") {", true),
        ("format!(\"{e}\").trim().eq_ignore_ascii_case(\"x\")", true),
        ("if format!(\"{}\", s.kind) == \"x\" {", true),
        (".entry(v.reason.clone().unwrap_or_default())", true),
        ("*reasons.entry(g.reason.as_str()).or_default() += 1;", true),
        // Data, and text fatkit reads as data (a target name, a file's bytes), pass.
        ("Err(f) if f.status == Status::TimedOut => call", false),
        ("if name.starts_with(\"sm_\") {", false),
        ("groups.entry((cuda, what.clone()))", true),
        ("groups.entry((cuda, needs))", false),
    ] {
        assert_eq!(!decisions_in(line).is_empty(), caught, "{line}");
    }
}
