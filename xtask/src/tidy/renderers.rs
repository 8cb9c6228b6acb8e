//! The answer is decided once (ARCHITECTURE.md, fatkit-audit): `fatkit_audit::answer` makes
//! each input's and distribution's verdict, blocker and fixes, and `status_of` the exit code
//! from them; the renderers (the audit's text, the command line) read that data and make
//! words, never an answer (twiggy's `emit`: one data type, two renderings).

use std::path::Path;

use super::{code_lines, library_sources, root};

/// How code makes an answer: builds a verdict or status, or calls what decides.
const DECIDING: &[&str] = &[
    "= Answer::",
    "=> Answer::",
    "= Verdict::",
    "=> Verdict::",
    "FileStatus::Gaps",
    "FileStatus::Unknown",
    "FileStatus::Ok",
    "answer::of(",
    "variants::decided(",
    "variants::speaking(",
    "collection::none_for(",
    "status_of(",
    "library_fix(",
    "fn combine(",
    "Fix::",
];

/// Whether `line` holds `pattern` as making a value: `= X` only as an assignment, never
/// inside a comparison (`== X`, `!= X`, `>= X`, `<= X`), which reads one.
fn makes(line: &str, pattern: &str) -> bool {
    line.match_indices(pattern)
        .any(|(at, _)| !pattern.starts_with("= ") || !line[..at].ends_with(['=', '!', '<', '>']))
}

/// Where answers are rendered: the audit's text and the command line's audit.
const RENDERERS: &[&str] = &[
    "crates/fatkit-audit/src/text",
    "crates/fatkit-cli/src/audit",
];

/// Lines of the renderers under `root` that decide, as `path:line: how`.
fn deciding_renderers(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (shown, code) in library_sources(root, &["fatkit-audit", "fatkit-cli"]) {
        if !RENDERERS.iter().any(|r| shown.starts_with(r)) {
            continue;
        }
        for (n, line) in code_lines(&code) {
            if let Some(how) = DECIDING.iter().find(|d| makes(line, d)) {
                out.push(format!("{shown}:{n}: {how}"));
            }
        }
    }
    out
}

#[test]
fn no_renderer_computes_an_answer() {
    let found = deciding_renderers(&root());
    assert!(
        found.is_empty(),
        "a renderer that decides an answer; decide it in fatkit_audit::answer (or status_of) and read it here:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_renderer_that_decides_is_caught() {
    let dir = std::env::temp_dir().join(format!("fatkit-tidy-renderers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("crates/fatkit-audit/src/text")).unwrap();
    std::fs::create_dir_all(dir.join("crates/fatkit-cli/src/audit")).unwrap();
    std::fs::write(
        dir.join("crates/fatkit-audit/src/text/mod.rs"),
        "fn w(a: &[A]) { let answer = if a.is_empty() { Verdict::Yes } else { x }; }\nfn h(l: &L) -> bool { let answer = Answer::No; true }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("crates/fatkit-cli/src/audit/mod.rs"),
        "fn run() { match s { FileStatus::Gaps => 1, _ => 0 }; }\n",
    )
    .unwrap();
    // The analysis itself may decide.
    std::fs::write(
        dir.join("crates/fatkit-audit/src/lib.rs"),
        "fn s() { status = FileStatus::Gaps; }\n",
    )
    .unwrap();
    assert_eq!(
        deciding_renderers(&dir),
        [
            "crates/fatkit-audit/src/text/mod.rs:2: = Answer::",
            "crates/fatkit-cli/src/audit/mod.rs:1: FileStatus::Gaps",
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// How code turns bytes or paths into text to print: what only the readers do, through the
/// one escaper (`fatkit_audit::inputs`, `Input::escaped`; docs/GUARANTEES.md, "One escaper").
const RAW_TEXT: &[&str] = &[
    ".display()",
    "to_string_lossy(",
    "from_utf8_lossy(",
    "String::from_utf8(",
    "str::from_utf8(",
    "fatkit_read::",
    "std::fs::",
];

/// Lines of the renderers under `root` that make text from bytes or paths themselves, as
/// `path:line: how`: a renderer prints the escaped data it is given and nothing else.
fn raw_text_in_renderers(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (shown, code) in library_sources(root, &["fatkit-audit"]) {
        if !shown.starts_with("crates/fatkit-audit/src/text") {
            continue;
        }
        for (n, line) in code_lines(&code) {
            if let Some(how) = RAW_TEXT.iter().find(|d| line.contains(**d)) {
                out.push(format!("{shown}:{n}: {how}"));
            }
        }
    }
    out
}

/// Lines of fatkit-audit that make an `Input` leave a reader other than through
/// `inputs::refused`, the one place every input is escaped: a public function returning
/// inputs anywhere but `inputs::read`.
fn inputs_around_the_escaper(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (shown, code) in library_sources(root, &["fatkit-audit"]) {
        for (n, line) in code_lines(&code) {
            let public = line.trim_start().starts_with("pub fn") || line.contains(" pub fn ");
            let returns_inputs = line.contains("Input>") || line.ends_with("-> Input {");
            if public && returns_inputs && shown != "crates/fatkit-audit/src/inputs.rs" {
                out.push(format!("{shown}:{n}: a public reader returning inputs"));
            }
        }
    }
    out
}

#[test]
fn every_name_printed_went_through_the_one_escaper() {
    let root = root();
    let raw = raw_text_in_renderers(&root);
    assert!(
        raw.is_empty(),
        "the audit's text makes text from bytes or paths itself; print the escaped data the readers made (fatkit_audit::inputs escapes every name an input holds):\n{}",
        raw.join("\n")
    );
    let around = inputs_around_the_escaper(&root);
    assert!(
        around.is_empty(),
        "inputs leave the readers without being escaped; return them through fatkit_audit::inputs::read, whose refused() escapes every name:\n{}",
        around.join("\n")
    );
    let inputs = std::fs::read_to_string(root.join("crates/fatkit-audit/src/inputs.rs")).unwrap();
    assert!(
        inputs.contains("let input = input.escaped();"),
        "fatkit_audit::inputs::refused no longer escapes the inputs it lets out"
    );
}

#[test]
fn raw_text_in_a_renderer_is_caught() {
    let dir = std::env::temp_dir().join(format!("fatkit-tidy-raw-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let text = dir.join("crates/fatkit-audit/src/text");
    std::fs::create_dir_all(&text).unwrap();
    std::fs::write(
        text.join("mod.rs"),
        "pub fn w(p: &std::path::Path) -> String { format!(\"{}\", p.display()) }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("crates/fatkit-audit/src/image.rs"),
        "pub fn read(p: &str) -> Vec<Input> { todo!() }\n",
    )
    .unwrap();
    assert_eq!(
        raw_text_in_renderers(&dir),
        ["crates/fatkit-audit/src/text/mod.rs:1: .display()"]
    );
    assert_eq!(
        inputs_around_the_escaper(&dir),
        ["crates/fatkit-audit/src/image.rs:1: a public reader returning inputs"]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
