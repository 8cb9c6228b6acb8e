//! A requirements file, resolved by pip's own resolver for the target: `pip install --dry-run
//! --report` with `--platform`, `--python-version` and `--only-binary=:all:` (pip takes a
//! platform only for wheels), into a directory nothing is installed to. The report names each
//! wheel's URL and SHA-256; the index, credentials and proxies are pip's, from its
//! configuration and the file's own options (`--index-url`). pip evaluates markers other than
//! the Python version for the machine it runs on (pip's documented limit of `--platform`).

use std::path::Path;

use serde::Deserialize;

use crate::{pin, Location, LockError, Locked, Settings};

#[derive(Debug, Deserialize)]
struct Report {
    #[serde(default)]
    install: Vec<Item>,
}

#[derive(Debug, Deserialize)]
struct Item {
    download_info: DownloadInfo,
    metadata: Metadata,
}

#[derive(Debug, Deserialize)]
struct DownloadInfo {
    url: String,
    #[serde(default)]
    archive_info: Option<ArchiveInfo>,
}

#[derive(Debug, Deserialize)]
struct ArchiveInfo {
    #[serde(default)]
    hashes: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    hash: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Metadata {
    name: String,
    version: String,
}

/// The largest report read: a resolution of thousands of packages is a few megabytes.
const MAX_REPORT: u64 = 256 << 20;

pub(crate) fn resolve(path: &Path, settings: &Settings) -> Result<Locked, LockError> {
    read_report(path, &report(path, settings)?)
}

/// pip's installation report (JSON) of the requirements file at `path`, resolved for the
/// settings' target: what a `pylock.toml` of it would pin (`cargo xtask bench lock` writes
/// one from it).
pub fn report(path: &Path, settings: &Settings) -> Result<Vec<u8>, LockError> {
    let scratch = std::env::temp_dir().join(format!("fatkit-pip-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).map_err(|source| LockError::Read {
        shown: scratch.display().to_string(),
        source,
    })?;
    let outcome = run_pip(path, settings, &scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    outcome
}

fn run_pip(path: &Path, settings: &Settings, scratch: &Path) -> Result<Vec<u8>, LockError> {
    let target = &settings.target;
    let report = scratch.join("report.json");
    let (major, minor) = target.python;
    let mut pip = std::process::Command::new(&settings.python);
    pip.args([
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--quiet",
        "--disable-pip-version-check",
        "--only-binary=:all:",
        "--implementation",
        "cp",
    ])
    .args(
        target
            .pip_platforms()
            .iter()
            .flat_map(|p| ["--platform", p]),
    )
    .arg("--python-version")
    .arg(format!("{major}.{minor}"))
    .arg("--target")
    .arg(scratch.join("nothing-is-installed-here"))
    .arg("--report")
    .arg(&report)
    .arg("-r")
    .arg(path);
    fatkit_run::run_with(
        &mut pip,
        fatkit_run::How::INSTALL,
        "a requirement with no wheel for the platform cannot be judged before it is built; pip's message above names it (give --platform and --python-version of the machines, or pin a version with wheels)",
    )
    .map_err(|e| LockError::Pip {
        shown: crate::shown(path),
        target: target.words(),
        said: pip_said(&e.output),
    })?;
    fatkit_read::read_limited(&report, MAX_REPORT).map_err(|source| LockError::Read {
        shown: report.display().to_string(),
        source,
    })
}

fn read_report(path: &Path, bytes: &[u8]) -> Result<Locked, LockError> {
    let report: Report = serde_json::from_slice(bytes)
        .map_err(|e| LockError::parse(path, "pip installation report", e))?;
    let mut out = Locked::default();
    for item in report.install {
        let Metadata { name, version } = item.metadata;
        let url = item.download_info.url;
        let file = crate::url_file(&url).to_owned();
        if !file.ends_with(".whl") {
            let why = format!(
                "pip would build it from {}, so what it compiles is known only then",
                fatkit_run_safe(&url)
            );
            out.skipped
                .push(crate::skipped(&name, version, (why, true)));
            continue;
        }
        let sha256 = item.download_info.archive_info.and_then(|a| {
            a.hashes.get("sha256").cloned().or_else(|| {
                a.hash
                    .and_then(|h| h.strip_prefix("sha256=").map(str::to_owned))
            })
        });
        out.pins.push(pin(
            path,
            (&name, &version),
            &file,
            Location::Url(url),
            sha256.as_deref(),
        )?);
    }
    Ok(out)
}

/// What pip said of its failure: its `ERROR:` lines, else the end of its output.
fn pip_said(output: &str) -> String {
    let errors: Vec<&str> = output
        .lines()
        .filter(|l| l.trim_start().starts_with("ERROR:"))
        .collect();
    let lines: Vec<&str> = match errors.is_empty() {
        true => output
            .lines()
            .rev()
            .take(8)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect(),
        false => errors,
    };
    lines
        .iter()
        .map(|l| format!("  {}", l.trim().escape_debug()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A URL as a message shows it: its control characters escaped.
fn fatkit_run_safe(url: &str) -> String {
    url.escape_debug().to_string()
}

#[cfg(test)]
pub(crate) fn report_for_tests(path: &Path, bytes: &[u8]) -> Result<Locked, LockError> {
    read_report(path, bytes)
}
