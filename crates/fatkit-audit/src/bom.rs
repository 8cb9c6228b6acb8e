//! A kernel bill of materials (issue 57): an audit as a CycloneDX 1.6 document. Its
//! components are the distributions (a PyPI package URL where the distribution is a wheel's)
//! and, inside each, the libraries that hold device code; a library's GPU targets, PTX, kernel
//! count, the CUDA releases that built it, the drivers its images need and its answer on each
//! GPU asked about are its properties, named `fatkit:...`. A rendering of the audit's data:
//! every value is the audit's, none is decided here.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::summary::Library;
use crate::Audited;

/// The CycloneDX specification version written.
const SPEC_VERSION: &str = "1.6";

fn property(name: &str, value: impl ToString) -> Value {
    json!({ "name": name, "value": value.to_string() })
}

/// A library's properties: its targets, kernels, toolkits, driver needs and per-GPU answers.
fn properties(l: &Library) -> Vec<Value> {
    let mut out = vec![
        property("fatkit:kernels", l.kernels),
        property("fatkit:targets:cubin", &l.cubins),
        property("fatkit:targets:ptx", &l.ptx),
    ];
    if !l.toolkits.is_empty() {
        out.push(property("fatkit:built-by:cuda", l.toolkits.join(" ")));
    }
    for need in l.drivers.iter().chain(&l.runtimes) {
        let release = need
            .release
            .map_or_else(|| format!("CUDA {}", need.cuda), |r| r.to_string());
        // Named by its targets, or, where none (a linked runtime), by what needs it.
        let by = match need.targets.is_empty() {
            true => need.what.to_string(),
            false => need.targets.to_string(),
        };
        out.push(property(
            &format!("fatkit:driver-needed:{by}"),
            format!("{release} (CUDA {})", need.cuda),
        ));
    }
    for on in &l.on {
        let gpu = match on.driver {
            Some(d) => format!("{} (CC {}, driver {d})", on.gpu, on.cc),
            None => format!("{} (CC {})", on.gpu, on.cc),
        };
        out.push(property(&format!("fatkit:on:{gpu}"), on.answer.word()));
        out.push(property(
            &format!("fatkit:on:{gpu}:kernels-run"),
            format!("{} of {}", on.run, on.kernels),
        ));
        if let Some(floor) = &on.floor {
            let release = floor
                .release
                .map_or_else(|| format!("CUDA {}", floor.cuda), |r| r.to_string());
            out.push(property(&format!("fatkit:on:{gpu}:driver-floor"), release));
        }
    }
    out
}

/// The audit as a CycloneDX document.
pub fn bom(audited: &Audited) -> Value {
    let mut distributions: BTreeMap<Option<&str>, Vec<Value>> = BTreeMap::new();
    let mut n = 0usize;
    for input in &audited.inputs {
        for l in &input.libraries {
            n += 1;
            distributions
                .entry(l.package.as_deref())
                .or_default()
                .push(json!({
                    "type": "library",
                    "bom-ref": format!("fatkit:library:{n}"),
                    "name": l.name,
                    "properties": properties(l),
                }));
        }
    }
    // Of a lock: the SHA-256 of the wheel each distribution is pinned to.
    let hashes: BTreeMap<&str, &str> = audited
        .inputs
        .iter()
        .flat_map(|i| &i.pinned)
        .filter_map(|(d, p)| Some((d.as_str(), p.sha256.as_deref()?)))
        .collect();
    let mut components = Vec::new();
    for (i, (package, libraries)) in distributions.into_iter().enumerate() {
        match package {
            Some(package) => {
                let (name, version) = crate::record::name_and_version(package);
                let version = Some(version).filter(|v| !v.is_empty());
                let mut c = json!({
                    "type": "library",
                    "bom-ref": format!("fatkit:distribution:{i}"),
                    "name": name,
                    "components": libraries,
                });
                if let (Some(sha256), Some(obj)) = (hashes.get(package), c.as_object_mut()) {
                    obj.insert(
                        "hashes".to_owned(),
                        json!([{ "alg": "SHA-256", "content": sha256 }]),
                    );
                }
                if let (Some(version), Some(obj)) = (version, c.as_object_mut()) {
                    obj.insert("version".to_owned(), json!(version));
                    obj.insert(
                        "purl".to_owned(),
                        json!(format!(
                            "pkg:pypi/{}@{version}",
                            name.to_lowercase().replace('_', "-")
                        )),
                    );
                }
                components.push(c);
            }
            None => components.extend(libraries),
        }
    }
    let subject: Vec<&str> = audited.inputs.iter().map(|i| i.label.as_str()).collect();
    json!({
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "version": 1,
        "metadata": {
            "tools": {
                "components": [{
                    "type": "application",
                    "name": "fatkit",
                    "version": env!("CARGO_PKG_VERSION"),
                }]
            },
            "component": {
                "type": "application",
                "bom-ref": "fatkit:subject",
                "name": subject.join(", "),
            },
        },
        "components": components,
    })
}
