//! The audit as SARIF 2.1.0, for code-scanning annotations (issue 57): one result per
//! distribution (or input, where it has none) and GPU whose answer is not a pass (NO: an
//! error; PARTLY: a warning; UNKNOWN: a note), at the input and, of a lock, at the line that
//! pins the distribution, worded with its answer and first fix. A rendering of the audit's
//! data: every verdict and fix is the answer's, none is decided here.

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
    (
        "runs-partly",
        "warning",
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
    uri: &str,
    line: Option<usize>,
    (who, whole): (&str, &Whole),
    rule: usize,
) -> Option<Value> {
    let (id, level, _) = RULES.get(rule)?;
    let mut text = format!(
        "{who}: {} on {} (CC {})",
        whole.verdict.word(),
        whole.gpu,
        whole.cc
    );
    if let Some(fix) = whole.fixes.first() {
        text.push_str(&format!("; {fix}"));
    }
    let mut location = json!({ "artifactLocation": { "uri": uri } });
    if let (Some(line), Some(obj)) = (line, location.as_object_mut()) {
        obj.insert("region".to_owned(), json!({ "startLine": line }));
    }
    Some(json!({
        "ruleId": id,
        "ruleIndex": rule,
        "level": level,
        "message": { "text": text },
        "locations": [{ "physicalLocation": location }],
        "partialFingerprints": { "fatkit/distribution-gpu": format!("{who}|{}", whole.gpu) },
        "properties": { "gpu": whole.gpu, "cc": whole.cc.to_string(), "verdict": whole.verdict.word() },
    }))
}

/// The audit as a SARIF 2.1.0 log.
pub fn sarif(audited: &Audited) -> Value {
    let mut results = Vec::new();
    for input in &audited.inputs {
        let uri = input.label.replace('\\', "/");
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
                    results.extend(result(&uri, line, (who, whole), rule));
                }
            }
        }
        // An input answered as a whole only (no distribution): its own results.
        if dists.is_empty() {
            for whole in &input.answer.on {
                if let Some(rule) = rule_of(whole.verdict) {
                    results.extend(result(&uri, None, (&input.label, whole), rule));
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
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": "fatkit",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules,
            }},
            "results": results,
        }],
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
    /// The audit as this document.
    pub fn of(self, audited: &Audited) -> Value {
        match self {
            Document::CycloneDx => crate::bom::bom(audited),
            Document::Sarif => sarif(audited),
        }
    }
}
