//! `pylock.toml` (PEP 751): the packages whose marker holds on the target, each with its best
//! wheel; a package with none (an sdist, a VCS checkout, a directory) is skipped, with why.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Deserialize;

use crate::{best, markers, no_wheel, pin, LockError, Locked, Target};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Pylock {
    lock_version: String,
    #[serde(default)]
    default_groups: Vec<String>,
    #[serde(default)]
    packages: Vec<Package>,
}

#[derive(Debug, Deserialize)]
struct Package {
    name: String,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    marker: Option<String>,
    #[serde(default)]
    wheels: Vec<Wheel>,
    #[serde(default)]
    sdist: Option<toml::Value>,
    #[serde(default)]
    vcs: Option<toml::Value>,
    #[serde(default)]
    directory: Option<toml::Value>,
    /// A file by URL or path (`pip lock` writes a wheel given by path so): a wheel where its
    /// file name is one, else a source to build.
    #[serde(default)]
    archive: Option<Wheel>,
}

#[derive(Debug, Deserialize)]
struct Wheel {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    hashes: BTreeMap<String, String>,
}

impl Wheel {
    /// Its file name: `name`, else the last part of its URL or path.
    fn file(&self) -> Option<&str> {
        if let Some(n) = &self.name {
            return Some(n);
        }
        crate::wheel_file(self.url.as_deref(), self.path.as_deref())
    }
}

pub(crate) fn resolve(
    lock: &Path,
    base: &Path,
    text: &str,
    target: &Target,
) -> Result<Locked, LockError> {
    let parsed: Pylock = toml::from_str(text)
        .map_err(|e| LockError::parse(lock, "pylock.toml", crate::toml_error(text, &e)))?;
    if !parsed.lock_version.starts_with("1.") {
        return Err(LockError::parse(
            lock,
            "pylock.toml",
            format!(
                "lock-version {} (fatkit reads 1.x)",
                parsed.lock_version.escape_debug()
            ),
        ));
    }
    let groups: BTreeSet<String> = parsed.default_groups.iter().cloned().collect();
    let env = target.environment(BTreeSet::new(), groups);
    let mut out = Locked::default();
    for p in &parsed.packages {
        let version = p.version.clone().unwrap_or_default();
        let holds = markers::holds(p.marker.as_deref().unwrap_or(""), &env).map_err(|source| {
            LockError::Marker {
                shown: crate::shown(lock),
                package: p.name.clone(),
                source,
            }
        })?;
        if !holds {
            continue;
        }
        // An archive is a candidate wheel where its file name ends `.whl` (and must then be
        // a wheel's name, as any wheel's is); any other archive is a source to build.
        let archive_wheel = p
            .archive
            .as_ref()
            .filter(|a| a.file().is_some_and(|f| f.ends_with(".whl")));
        let candidates: Vec<&Wheel> = p.wheels.iter().chain(archive_wheel).collect();
        let Some(wheel) = best((lock, &p.name), target, &candidates, |w| w.file())?.copied() else {
            let other_archive = p.archive.is_some() && archive_wheel.is_none();
            let from_source =
                [&p.sdist, &p.vcs, &p.directory].iter().any(|s| s.is_some()) || other_archive;
            out.skipped.push(crate::skipped(
                &p.name,
                version,
                no_wheel(target, from_source),
            ));
            continue;
        };
        let at = crate::wheel_at(
            (lock, "pylock.toml", &p.name),
            (wheel.url.as_deref(), wheel.path.as_deref()),
            base,
        )?;
        let file = wheel.file().unwrap_or_default();
        let sha256 = wheel.hashes.get("sha256").map(String::as_str);
        // A package of no version (an archive's, say): the wheel's file name says it.
        let version = match version.is_empty() {
            true => crate::target::WheelName::parse(file)
                .map_or_else(String::new, |w| w.version.to_owned()),
            false => version,
        };
        out.pins
            .push(pin(lock, (&p.name, &version), file, at, sha256)?);
    }
    Ok(out)
}
