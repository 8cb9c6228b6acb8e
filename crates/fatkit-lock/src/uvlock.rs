//! `uv.lock`: one resolution for every platform. What `uv sync` installs on the target is
//! walked from the workspace's members (packages whose source is `editable` or `virtual`; with
//! none, every package): their dependencies and the default group `dev`, then each
//! dependency's, following every edge whose marker holds on the target and the extras an edge
//! asks for. Where a name has several versions (a fork), the edge's version, else the one whose
//! `resolution-markers` hold.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

use serde::Deserialize;

use crate::markers::{self, normalize, Environment};
use crate::{best, no_wheel, pin, LockError, Locked, Skipped, Target};

#[derive(Debug, Deserialize)]
struct UvLock {
    version: u32,
    #[serde(default)]
    package: Vec<Package>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Package {
    name: String,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    source: BTreeMap<String, toml::Value>,
    #[serde(default)]
    resolution_markers: Vec<String>,
    #[serde(default)]
    dependencies: Vec<Dep>,
    #[serde(default)]
    optional_dependencies: BTreeMap<String, Vec<Dep>>,
    #[serde(default)]
    dev_dependencies: BTreeMap<String, Vec<Dep>>,
    #[serde(default)]
    sdist: Option<toml::Value>,
    #[serde(default)]
    wheels: Vec<Wheel>,
}

#[derive(Debug, Deserialize)]
struct Dep {
    name: String,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    marker: Option<String>,
    #[serde(default)]
    extra: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Wheel {
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    hash: Option<String>,
}

impl Wheel {
    fn file(&self) -> Option<&str> {
        crate::wheel_file(self.url.as_deref(), self.path.as_deref())
    }
}

struct Walk<'l> {
    lock: &'l Path,
    packages: &'l [Package],
    by_name: BTreeMap<String, Vec<usize>>,
    env: Environment,
}

impl Walk<'_> {
    fn holds(&self, package: &str, marker: Option<&str>) -> Result<bool, LockError> {
        markers::holds(marker.unwrap_or(""), &self.env).map_err(|source| LockError::Marker {
            shown: crate::shown(self.lock),
            package: package.to_owned(),
            source,
        })
    }

    /// The package an edge names: by name, then by the edge's version, then by the
    /// package's resolution markers.
    fn find(&self, dep: &Dep) -> Result<Option<usize>, LockError> {
        let Some(candidates) = self.by_name.get(&normalize(&dep.name)) else {
            return Ok(None);
        };
        let mut fitting = Vec::new();
        for &i in candidates {
            let Some(p) = self.packages.get(i) else {
                continue;
            };
            if dep.version.is_some() && dep.version != p.version {
                continue;
            }
            let mut holds = p.resolution_markers.is_empty();
            for m in &p.resolution_markers {
                holds = holds || self.holds(&p.name, Some(m))?;
            }
            if holds || candidates.len() == 1 || dep.version.is_some() {
                fitting.push(i);
            }
        }
        Ok(fitting.first().copied())
    }
}

pub(crate) fn resolve(
    lock: &Path,
    base: &Path,
    text: &str,
    target: &Target,
) -> Result<Locked, LockError> {
    let parsed: UvLock = toml::from_str(text)
        .map_err(|e| LockError::parse(lock, "uv.lock", crate::toml_error(text, &e)))?;
    if parsed.version != 1 {
        return Err(LockError::parse(
            lock,
            "uv.lock",
            format!(
                "version {} (fatkit reads version 1, which uv writes); export it as a pylock.toml (uv export --format pylock.toml) and audit that",
                parsed.version
            ),
        ));
    }
    let mut by_name: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, p) in parsed.package.iter().enumerate() {
        by_name.entry(normalize(&p.name)).or_default().push(i);
    }
    let walk = Walk {
        lock,
        packages: &parsed.package,
        by_name,
        env: target.environment(BTreeSet::new(), BTreeSet::new()),
    };
    let mut members: Vec<usize> = (0..parsed.package.len())
        .filter(|&i| parsed.package.get(i).is_some_and(Package::is_member))
        .collect();
    let whole = members.is_empty();
    if whole {
        members = (0..parsed.package.len()).collect();
    }
    let mut out = Locked::default();
    for i in walk.reached(&members)? {
        let Some(p) = parsed.package.get(i) else {
            continue;
        };
        // The project itself is not installed from the lock.
        if p.is_member() && !whole {
            continue;
        }
        match p.wheel(lock, base, target)? {
            Ok(pin) => out.pins.push(pin),
            Err(skipped) => out.skipped.push(skipped),
        }
    }
    Ok(out)
}

impl Package {
    fn is_member(&self) -> bool {
        self.source.contains_key("editable") || self.source.contains_key("virtual")
    }

    /// Its best wheel for `target`, or why it has none.
    fn wheel(
        &self,
        lock: &Path,
        base: &Path,
        target: &Target,
    ) -> Result<Result<crate::Pin, Skipped>, LockError> {
        let version = self.version.clone().unwrap_or_default();
        let Some(wheel) = best((lock, &self.name), target, &self.wheels, Wheel::file)? else {
            // Neither wheels nor an sdist: a member or a path source, built.
            let from_source = self.sdist.is_some() || self.wheels.is_empty();
            return Ok(Err(crate::skipped(
                &self.name,
                version,
                no_wheel(target, from_source),
            )));
        };
        let registry_dir = self
            .source
            .get("registry")
            .and_then(toml::Value::as_str)
            .filter(|r| !r.contains("://"))
            .map_or_else(|| base.to_path_buf(), |r| base.join(r));
        let at = crate::wheel_at(
            (lock, "uv.lock", &self.name),
            (wheel.url.as_deref(), wheel.path.as_deref()),
            &registry_dir,
        )?;
        let file = wheel.file().unwrap_or_default();
        let pin = pin(
            lock,
            (&self.name, &version),
            file,
            at,
            wheel.hash.as_deref(),
        )?;
        Ok(Ok(pin))
    }
}

impl Walk<'_> {
    /// The packages reached from `members`, in the order reached.
    fn reached(&self, members: &[usize]) -> Result<Vec<usize>, LockError> {
        // (package, extra asked of it) seen.
        let mut seen: BTreeSet<(usize, Option<String>)> = BTreeSet::new();
        let mut reached: Vec<usize> = Vec::new();
        let mut queue: VecDeque<(usize, Option<String>)> =
            members.iter().map(|&i| (i, None)).collect();
        while let Some((i, extra)) = queue.pop_front() {
            if !seen.insert((i, extra.clone())) {
                continue;
            }
            let Some(p) = self.packages.get(i) else {
                continue;
            };
            if !reached.contains(&i) {
                reached.push(i);
            }
            let edges: Vec<&Dep> = match &extra {
                Some(x) => p
                    .optional_dependencies
                    .get(x)
                    .into_iter()
                    .flatten()
                    .collect(),
                None if members.contains(&i) => p
                    .dependencies
                    .iter()
                    .chain(p.dev_dependencies.get("dev").into_iter().flatten())
                    .collect(),
                None => p.dependencies.iter().collect(),
            };
            for dep in edges {
                if !self.holds(&dep.name, dep.marker.as_deref())? {
                    continue;
                }
                let Some(j) = self.find(dep)? else {
                    return Err(LockError::parse(
                        self.lock,
                        "uv.lock",
                        format!(
                            "{} depends on {}, which the lock does not hold",
                            p.name, dep.name
                        ),
                    ));
                };
                queue.push_back((j, None));
                queue.extend(dep.extra.iter().map(|x| (j, Some(x.clone()))));
            }
        }
        Ok(reached)
    }
}
