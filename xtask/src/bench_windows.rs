//! `cargo xtask bench windows`: NVIDIA's Windows wheels against their Linux twins, fetched
//! into the corpus once (`pip download --platform win_amd64`, and the manylinux wheel of the
//! same release). `fatkit audit --json` of each wheel, as a user runs it; per library pair
//! (`curand64_10.dll` and `libcurand.so.10`), what must be equal: the kernels, the cubin and
//! PTX targets, the toolkits, the containers in the fatbin section (`.nv_fatb`, `.nv_fatbin`)
//! and found by the scan, and per target the entries and the kernels they hold. What may
//! differ is printed beside: the format, the section's name, the runtime each links. Linux's
//! cuobjdump reads no PE image, so the twin is the oracle.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use fatkit_cli::{Error, Outcome, Result};
use fatkit_toolchain as toolchain;
use serde_json::Value;

use crate::harness::{failed, fatkit_binary};

/// A release whose Windows and Linux wheels ship the same library.
struct Pair {
    spec: &'static str,
    /// The file name of the distribution's wheels up to the platform tag.
    stem: &'static str,
    windows: &'static str,
    linux: &'static str,
}

const PAIRS: &[Pair] = &[Pair {
    spec: "nvidia-curand==10.4.5.25",
    stem: "nvidia_curand-10.4.5.25-",
    windows: "curand64_10.dll",
    linux: "libcurand.so.10",
}];

/// The wheel of `pair` for `platform` (`win_amd64`, or Linux's: any `manylinux` tag) in
/// `dir`, downloaded once.
fn wheel(pair: &Pair, windows: bool, dir: &Path) -> Result<PathBuf> {
    let tag = if windows { "win_amd64" } else { "manylinux" };
    let find = || -> Option<PathBuf> {
        std::fs::read_dir(dir)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                let name = p.file_name().unwrap_or_default().to_string_lossy();
                name.starts_with(pair.stem) && name.contains(tag) && name.ends_with(".whl")
            })
    };
    if let Some(found) = find() {
        return Ok(found);
    }
    eprintln!("bench windows: fetching {} ({tag}) from PyPI", pair.spec);
    let mut cmd = Command::new("python3");
    cmd.args([
        "-m",
        "pip",
        "download",
        "--quiet",
        "--disable-pip-version-check",
    ])
    .args(["--no-deps", "--only-binary", ":all:"]);
    let platforms = match windows {
        true => vec!["win_amd64".to_owned()],
        false => crate::bench_env::platforms("x86_64"),
    };
    for p in platforms {
        cmd.args(["--platform", &p]);
    }
    let ok = cmd.arg("-d").arg(dir).arg(pair.spec).status()?.success();
    match find().filter(|_| ok) {
        Some(found) => Ok(found),
        None => Err(failed(format!(
            "bench windows: pip could not download {} for {tag}; check the network and python3 -m pip",
            pair.spec
        ))),
    }
}

/// What `audit --json` says of one library of a wheel: each field that must equal its twin's,
/// and each that may differ.
#[derive(Debug, Default)]
struct Library {
    same: BTreeMap<&'static str, String>,
    differ: BTreeMap<&'static str, String>,
}

/// The member of `report` (a zip's) whose name ends with `(…/file)`.
fn member<'v>(report: &'v Value, file: &str) -> Option<&'v Value> {
    report["members"].as_array()?.iter().find(|m| {
        m["name"]
            .as_str()
            .is_some_and(|n| n.ends_with(&format!("/{file})")))
    })
}

/// `library`'s verdict fields and its report's device code, from the JSON of its wheel.
fn library(json: &Value, file: &str) -> Result<Library> {
    let whole = json["files"].get(0).unwrap_or(&Value::Null);
    let lib = whole["libraries"]
        .as_array()
        .and_then(|ls| {
            ls.iter()
                .find(|l| l["name"].as_str().is_some_and(|n| n.ends_with(file)))
        })
        .ok_or_else(|| failed(format!("bench windows: no library {file} in the audit")))?;
    let report = member(&whole["report"], file)
        .ok_or_else(|| failed(format!("bench windows: no member {file} in the report")))?;
    let mut out = Library::default();
    for key in [
        "kernels",
        "cubins",
        "ptx",
        "toolkits",
        "arch_list",
        "runs_on",
        "general",
        "drivers",
    ] {
        out.same.insert(key, lib[key].to_string());
    }
    // Containers by where they were found (any fatbin section counts as one place), and per
    // target its entries and the kernels they hold.
    let mut origins: BTreeMap<&str, usize> = BTreeMap::new();
    let mut targets: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut section = String::new();
    for c in report["containers"].as_array().into_iter().flatten() {
        let place = match &c["origin"] {
            Value::Object(o) if o.contains_key("section") => {
                section = o["section"].as_str().unwrap_or_default().to_owned();
                "section"
            }
            Value::String(s) if s == "scan" => "scan",
            _ => "other",
        };
        *origins.entry(place).or_default() += 1;
        for e in c["entries"].as_array().into_iter().flatten() {
            let target = e["target"].as_str().unwrap_or("none").to_owned();
            let t = targets.entry(target).or_default();
            t.0 += 1;
            t.1 += e["kernels"].as_array().map_or(0, Vec::len);
        }
    }
    let (entries, kernels) = targets
        .values()
        .fold((0, 0), |(e, k), (te, tk)| (e + te, k + tk));
    out.same.insert("containers", format!("{origins:?}"));
    out.same.insert(
        "entries",
        format!("{entries}, holding {kernels} kernels in all"),
    );
    out.same
        .insert("entries per target", format!("{targets:?}"));
    out.same.insert("errors", report["errors"].to_string());
    out.differ.insert("format", report["format"].to_string());
    out.differ.insert("section", section);
    out.differ.insert("machine", report["machine"].to_string());
    out.differ.insert("runtimes", lib["runtimes"].to_string());
    Ok(out)
}

/// `fatkit audit --json WHEEL`: its JSON and seconds.
fn audit(fatkit: &Path, wheel: &Path) -> Result<(Value, f64)> {
    let start = Instant::now();
    let out = Command::new(fatkit)
        .args(["audit", "--json"])
        .arg(wheel)
        .output()?;
    let took = start.elapsed().as_secs_f64();
    let json = serde_json::from_slice(&out.stdout).map_err(|e| {
        failed(format!(
            "bench windows: audit --json {} printed no JSON ({e}): {}",
            wheel.display(),
            String::from_utf8_lossy(&out.stderr)
        ))
    })?;
    Ok((json, took))
}

pub(crate) fn run() -> Result<Outcome> {
    let dir = toolchain::cache_dir().map_err(Error::from)?.join("corpus");
    std::fs::create_dir_all(&dir)?;
    let fatkit = fatkit_binary()?;
    let mut unequal = Vec::new();
    println!(
        "NVIDIA's Windows wheels against their Linux twins: `fatkit audit --json WHEEL` of each"
    );
    for pair in PAIRS {
        let (win, lin) = (wheel(pair, true, &dir)?, wheel(pair, false, &dir)?);
        let (win_json, win_s) = audit(&fatkit, &win)?;
        let (lin_json, lin_s) = audit(&fatkit, &lin)?;
        let (w, l) = (
            library(&win_json, pair.windows)?,
            library(&lin_json, pair.linux)?,
        );
        println!(
            "\n{} ({:.2} s) against {} ({:.2} s): {} against {}",
            file_name(&win),
            win_s,
            file_name(&lin),
            lin_s,
            pair.windows,
            pair.linux
        );
        for (key, value) in &w.same {
            let twin = l.same.get(key).map_or("", String::as_str);
            let verdict = if value == twin { "equal" } else { "DIFFERENT" };
            println!("  {key:<20} {verdict:<9} {}", short(value));
            if value != twin {
                println!("  {:<20} {:<9} {}", "", "(linux)", short(twin));
                unequal.push(format!("{} {key}", pair.windows));
            }
        }
        for (key, value) in &w.differ {
            let twin = l.differ.get(key).map_or("", String::as_str);
            println!("  {key:<20} {:<9} {value} | {twin}", "may differ");
        }
    }
    match unequal.is_empty() {
        true => {
            println!("\nevery library equals its Linux twin");
            Ok(Outcome::Ok)
        }
        false => Err(failed(format!(
            "bench windows: libraries differ from their Linux twins: {}",
            unequal.join(", ")
        ))),
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

/// A value cut to one line of a terminal.
fn short(value: &str) -> String {
    match value.char_indices().nth(100) {
        Some((at, _)) => format!("{}...", value.get(..at).unwrap_or(value)),
        None => value.to_owned(),
    }
}
