//! The audit as SARIF 2.1.0, for code-scanning annotations (issue 57): one result per
//! distribution (or input, where it has none) and GPU whose answer is not a pass (NO and
//! PARTLY, which fail the run: errors; UNKNOWN: a note), at the input and, of a lock, at the line that
//! pins the distribution, worded with its answer and first fix. A rendering of the audit's
//! data: every verdict and fix is the answer's, none is decided here.

use std::path::Path;

use serde_json::{json, Value};

use crate::answer::{Verdict, Whole};
use crate::Audited;

/// The rules, one per answer that is not a pass: (id, level, short description).
const RULES: [(&str, &str, &str); 3] = [
    (
        "does-not-run",
        "error",
        "does not run on the GPU and driver asked about",
    ),
    // An error as NO is: PARTLY fails the run (exit 1) as NO does, and code scanning fails
    // a check on errors by default, so the annotation and the job agree.
    (
        "runs-partly",
        "error",
        "runs only in part on the GPU and driver asked about",
    ),
    (
        "unknown",
        "note",
        "whether it runs on the GPU and driver asked about cannot be said",
    ),
];

fn rule_of(verdict: Verdict) -> Option<usize> {
    match verdict {
        Verdict::No => Some(0),
        Verdict::Partly => Some(1),
        Verdict::Unknown => Some(2),
        _ => None,
    }
}

fn result(
    uri: &Value,
    line: Option<usize>,
    (who, whole, why): (&str, &Whole, Option<&str>),
    rule: usize,
) -> Option<Value> {
    let (id, level, _) = RULES.get(rule)?;
    let mut text = format!(
        "{who}: {} on {} (CC {})",
        whole.verdict.word(),
        whole.gpu,
        whole.cc
    );
    // Why, where the answer has no fix to give (a lock's distribution with no wheel).
    match (whole.fixes.first(), why) {
        (Some(fix), _) => text.push_str(&format!("; {fix}")),
        (None, Some(why)) => text.push_str(&format!(": {why}")),
        (None, None) => {}
    }
    // The same distribution in two inputs is two results: the file is part of the key.
    let at = uri.get("uri").and_then(Value::as_str).unwrap_or_default();
    let mut location = json!({ "artifactLocation": uri });
    if let (Some(line), Some(obj)) = (line, location.as_object_mut()) {
        obj.insert("region".to_owned(), json!({ "startLine": line }));
    }
    Some(json!({
        "ruleId": id,
        "ruleIndex": rule,
        "level": level,
        "message": { "text": text },
        "locations": [{ "physicalLocation": location }],
        "partialFingerprints": { "fatkit/distribution-gpu": format!("{at}|{who}|{}", whole.gpu) },
        "properties": { "gpu": whole.gpu, "cc": whole.cc.to_string(), "verdict": whole.verdict.word() },
    }))
}

/// Where a result is, as SARIF names an artifact: an input given relative to `base` (the
/// directory fatkit ran in: in CI, the repository's root), or absolute but under it, by a
/// reference relative to `%SRCROOT%`, which is how code scanning finds the file in the
/// repository; one outside it by an absolute `file:` URI (resolving it against the root would
/// name another file). Either percent-encoded: an artifact location is a URI, not a path.
fn artifact(label: &str, base: Option<&Path>) -> Value {
    let path = Path::new(label);
    let Some(base) = base else {
        return match path.is_absolute() {
            true => json!({ "uri": file_uri(label) }),
            false => json!({ "uri": encode(label), "uriBaseId": "%SRCROOT%" }),
        };
    };
    // `..` resolved by name (`../x` from the root is outside it), links left as they are.
    let whole = lexical(&base.join(path));
    match whole.strip_prefix(lexical(base)) {
        Ok(rel) => json!({ "uri": encode(&rel.to_string_lossy()), "uriBaseId": "%SRCROOT%" }),
        Err(_) => json!({ "uri": file_uri(&whole.to_string_lossy()) }),
    }
}

/// `path` with its `.` and `..` components resolved by name.
fn lexical(path: &Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut out = std::path::PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// `file:` URI of an absolute path (`/a b` -> `file:///a%20b`; `C:\x` -> `file:///C:/x`).
fn file_uri(path: &str) -> String {
    let path = path.replace('\\', "/");
    match path.starts_with('/') {
        true => format!("file://{}", encode(&path)),
        false => format!("file:///{}", encode(&path)),
    }
}

/// A path's bytes as a URI path: the unreserved characters, `/` and a drive's `:` kept, every
/// other byte of its UTF-8 `%XX`.
fn encode(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.replace('\\', "/").bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' | b':' => {
                out.push(char::from(b))
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The audit as a SARIF 2.1.0 log; inputs under `base` (the directory fatkit ran in) are named
/// relative to it (`%SRCROOT%`), the rest by absolute `file:` URIs.
pub fn sarif(audited: &Audited, base: Option<&Path>) -> Value {
    let mut results = Vec::new();
    for input in &audited.inputs {
        let uri = artifact(&input.label, base);
        let dists = &input.answer.distributions;
        for d in dists {
            let who = d.name.as_deref().unwrap_or(&input.label);
            let line = d
                .name
                .as_ref()
                .and_then(|n| input.pinned.get(n))
                .and_then(|p| p.line);
            for whole in &d.on {
                if let Some(rule) = rule_of(whole.verdict) {
                    let why = d.unbuilt.as_deref();
                    results.extend(result(&uri, line, (who, whole, why), rule));
                }
            }
        }
        // An input answered as a whole only (no distribution): its own results.
        if dists.is_empty() {
            for whole in &input.answer.on {
                if let Some(rule) = rule_of(whole.verdict) {
                    results.extend(result(&uri, None, (&input.label, whole, None), rule));
                }
            }
        }
    }
    let rules: Vec<Value> = RULES
        .iter()
        .map(|(id, level, text)| {
            json!({
                "id": id,
                "shortDescription": { "text": format!("A kernel package {text}") },
                "fullDescription": { "text": "Judged as the driver loads each module: the rules and their sources are fatkit's docs/ARCH_RULES.md" },
                "defaultConfiguration": { "level": level },
            })
        })
        .collect();
    let mut run = json!({
        "tool": { "driver": {
            "name": "fatkit",
            "version": env!("CARGO_PKG_VERSION"),
            "rules": rules,
        }},
        "results": results,
    });
    if let (Some(base), Some(obj)) = (base, run.as_object_mut()) {
        let root = format!(
            "{}/",
            file_uri(&base.to_string_lossy()).trim_end_matches('/')
        );
        obj.insert(
            "originalUriBaseIds".to_owned(),
            json!({ "%SRCROOT%": { "uri": root } }),
        );
    }
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [run],
    })
}

/// The documents `audit --format` writes instead of its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Document {
    /// A kernel bill of materials ([`crate::bom`]).
    CycloneDx,
    /// Code-scanning results ([`sarif`]).
    Sarif,
}

impl std::str::FromStr for Document {
    type Err = String;

    fn from_str(s: &str) -> Result<Document, String> {
        match s {
            "cyclonedx" => Ok(Document::CycloneDx),
            "sarif" => Ok(Document::Sarif),
            _ => Err(format!(
                "'{s}' is no document fatkit writes; use cyclonedx or sarif"
            )),
        }
    }
}

impl Document {
    /// The audit as this document; `base` is the directory fatkit ran in, which SARIF names
    /// inputs under relative to.
    pub fn of(self, audited: &Audited, base: Option<&Path>) -> Value {
        match self {
            Document::CycloneDx => crate::bom::bom(audited),
            Document::Sarif => sarif(audited, base),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_is_named_relative_to_the_root_it_lies_under_and_by_a_file_uri_elsewhere() {
        let base = Path::new("/work/repo");
        let at = |label: &str| artifact(label, Some(base));
        assert_eq!(
            at("locks/pylock.toml"),
            json!({ "uri": "locks/pylock.toml", "uriBaseId": "%SRCROOT%" })
        );
        assert_eq!(
            at("/work/repo/locks/py lock#1.toml"),
            json!({ "uri": "locks/py%20lock%231.toml", "uriBaseId": "%SRCROOT%" })
        );
        assert_eq!(
            at("/tmp/x/\u{e9}t\u{e9}.toml"),
            json!({ "uri": "file:///tmp/x/%C3%A9t%C3%A9.toml" })
        );
        // A sibling whose name starts like the root is not under it.
        assert_eq!(
            at("/work/repository/a.toml"),
            json!({ "uri": "file:///work/repository/a.toml" })
        );
        assert_eq!(
            at("../other/./a.toml"),
            json!({ "uri": "file:///work/other/a.toml" })
        );
        assert_eq!(
            at("./x/../locks/a.toml"),
            json!({ "uri": "locks/a.toml", "uriBaseId": "%SRCROOT%" })
        );
        assert_eq!(artifact("/a/b", None), json!({ "uri": "file:///a/b" }));
        assert_eq!(file_uri("C:\\x\\y z"), "file:///C:/x/y%20z");
    }
}
