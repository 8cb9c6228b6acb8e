//! What a Python lock or requirements file would install, before it is installed: the wheels
//! a `pylock.toml` (PEP 751), a `uv.lock` or a `requirements.txt` (resolved by pip's own
//! resolver) names for one target machine ([`Target`]), each fetched by the URL and hash the
//! lock names into a content-addressed store ([`store`]). What is in them is `fatkit-audit`'s
//! to read; this crate only says which files those are.
//!
//! The install judged is the plain one: a lock's default dependency groups and no extras
//! (`uv sync`, `pip install -r`, an installer of a `pylock.toml` asked for nothing more).

pub mod markers;
pub mod pip;
mod pylock;
pub mod store;
pub mod target;
mod uvlock;

#[cfg(feature = "cli")]
mod args;
#[cfg(feature = "cli")]
pub use args::LockArgs;

use std::path::{Path, PathBuf};

pub use store::Fetched;
pub use target::Target;

/// The kinds of file this crate reads, told by the file's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `pylock.toml`, `pylock.NAME.toml` (PEP 751).
    Pylock,
    /// `uv.lock`.
    UvLock,
    /// `requirements.txt`, `requirements-gpu.txt`, `dev.requirements.txt`: resolved by pip.
    Requirements,
}

impl Kind {
    /// The kind of the file at `path`, by its name; `None`: not a lock.
    pub fn of(path: &Path) -> Option<Kind> {
        let name = path.file_name()?.to_str()?;
        if name == "pylock.toml" || name.starts_with("pylock.") && name.ends_with(".toml") {
            return Some(Kind::Pylock);
        }
        if name == "uv.lock" {
            return Some(Kind::UvLock);
        }
        // pip's names for them: `requirements*.txt`, pip-tools' `requirements*.in`, and any
        // `.txt` in a `requirements/` directory (`requirements/base.txt`).
        let text = name.ends_with(".txt") || name.ends_with(".in");
        let in_requirements = path
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|d| d == "requirements");
        (text && (name.contains("requirements") || in_requirements && name.ends_with(".txt")))
            .then_some(Kind::Requirements)
    }
}

/// Where a locked wheel is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// `https://files.pythonhosted.org/...`, `http://127.0.0.1:8000/...`, `file:///...`.
    Url(String),
    /// A file on this machine (a lock's `path`, relative ones taken from the lock's directory).
    Path(PathBuf),
}

/// One wheel the target would install.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    /// The distribution's name and version, as the lock names them.
    pub name: String,
    pub version: String,
    /// The wheel's file name, checked to be one ([`target::WheelName`]).
    pub file_name: String,
    pub at: Location,
    /// The SHA-256 the lock names (64 lowercase hex digits); `None` only for a local path.
    pub sha256: Option<String>,
    /// The line of the lock that pins it (1-based), where one names its wheel or its name:
    /// where a code-scanning annotation points.
    pub line: Option<usize>,
}

/// A distribution the target would install with no wheel to read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub name: String,
    pub version: String,
    pub why: String,
    /// Built from source at install (its device code unknown before); else it cannot be
    /// installed on the target at all.
    pub built: bool,
    /// The line of the lock that names it (1-based), where one does.
    pub line: Option<usize>,
}

/// What a lock would install on the target: the wheels, and what has none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Locked {
    pub pins: Vec<Pin>,
    pub skipped: Vec<Skipped>,
}

/// How a lock is judged: for which machine, and from which store.
#[derive(Clone, Debug)]
pub struct Settings {
    pub target: Target,
    /// The wheel store's directory (`<fatkit cache>/wheels`); `None` where there is no cache
    /// directory (no home, no `FATKIT_CACHE_DIR`), an error only when a wheel is wanted.
    pub store: Option<PathBuf>,
    /// Fetch nothing: every wheel must be in the store.
    pub offline: bool,
    /// The Python that runs pip (a requirements file) and fetches wheels: `FATKIT_PYTHON`,
    /// else `python3`.
    pub python: PathBuf,
}

impl Settings {
    /// The defaults: [`Target::default`], fetching, the Python of `FATKIT_PYTHON` or `python3`.
    pub fn new(store: Option<PathBuf>) -> Settings {
        Settings {
            target: Target::default(),
            store,
            offline: false,
            python: std::env::var_os("FATKIT_PYTHON")
                .map_or_else(|| PathBuf::from("python3"), PathBuf::from),
        }
    }
}

/// Why a lock could not be judged; each names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{shown}: cannot read: {source}")]
    Read {
        shown: String,
        source: std::io::Error,
    },
    #[error("{shown}: not a {kind} fatkit can read: {why}")]
    Parse {
        shown: String,
        kind: &'static str,
        why: String,
    },
    #[error("{shown}: {package}: {source}; fix the marker in the lock (or regenerate it)")]
    Marker {
        shown: String,
        package: String,
        source: markers::MarkerError,
    },
    #[error("{shown}: {package}: the wheel {file} has no SHA-256 in the lock, and a verdict on bytes nobody pinned is a verdict on something else; regenerate the lock with hashes")]
    NoHash {
        shown: String,
        package: String,
        file: String,
    },
    /// pip's resolver failed: its own words (`ERROR: ...` lines), not its command line.
    #[error("{shown}: pip could not resolve it for {target}:\n{said}\ncheck each requirement's name and version, and that the index has a wheel of it for the platform (--platform, --python-version): a package with only a source distribution cannot be judged before it is built")]
    Pip {
        shown: String,
        target: String,
        said: String,
    },
    #[error("{shown}: --offline, and a requirements file is resolved by pip against the index on every run; lock it once (pip lock, or uv pip compile --format pylock.toml) and audit the pylock.toml offline")]
    OfflineRequirements { shown: String },
    #[error("{shown}: {source}")]
    Store {
        shown: String,
        source: store::StoreError,
    },
    #[error(transparent)]
    Target(#[from] target::TargetError),
}

impl LockError {
    fn parse(path: &Path, kind: &'static str, why: impl std::fmt::Display) -> LockError {
        LockError::Parse {
            shown: shown(path),
            kind,
            why: why.to_string(),
        }
    }
}

/// A path as messages show it.
pub(crate) fn shown(path: &Path) -> String {
    path.display().to_string()
}

/// The largest lock or requirements file read: the largest real ones are a few megabytes.
const MAX_LOCK: u64 = 64 << 20;

/// What the lock at `path` would install on `settings.target`.
pub fn resolve(path: &Path, kind: Kind, settings: &Settings) -> Result<Locked, LockError> {
    let read = || {
        let bytes =
            fatkit_read::read_limited(path, MAX_LOCK).map_err(|source| LockError::Read {
                shown: shown(path),
                source,
            })?;
        String::from_utf8(bytes).map_err(|_| LockError::parse(path, kind.words(), "not UTF-8"))
    };
    if kind == Kind::Requirements && settings.offline {
        return Err(LockError::OfflineRequirements { shown: shown(path) });
    }
    let base = path.parent().unwrap_or(Path::new("."));
    let text = read()?;
    let mut locked = match kind {
        Kind::Pylock => pylock::resolve(path, base, &text, &settings.target),
        Kind::UvLock => uvlock::resolve(path, base, &text, &settings.target),
        Kind::Requirements => pip::resolve(path, settings),
    }?;
    for pin in &mut locked.pins {
        pin.line = line_of(&text, &pin.file_name).or_else(|| named_at(&text, &pin.name));
    }
    for s in &mut locked.skipped {
        s.line = named_at(&text, &s.name);
    }
    Ok(locked)
}

/// The first line (1-based) holding `needle`.
fn line_of(text: &str, needle: &str) -> Option<usize> {
    text.lines().position(|l| l.contains(needle)).map(|i| i + 1)
}

/// The first line (1-based) that names the distribution `name`: `name = "x"` in a lock, or a
/// requirement `x==1`, `x[extra]>=2`, `x ; marker` in a requirements file.
fn named_at(text: &str, name: &str) -> Option<usize> {
    let wanted = markers::normalize(name);
    text.lines()
        .position(|l| {
            let l = l.trim();
            let toml = l.strip_prefix("name").map(|r| {
                r.trim_start()
                    .trim_start_matches('=')
                    .trim()
                    .trim_matches('"')
            });
            let requirement = l
                .split(|c: char| !(c.is_ascii_alphanumeric() || "-_.".contains(c)))
                .next();
            [toml, requirement]
                .into_iter()
                .flatten()
                .any(|n| !n.is_empty() && markers::normalize(n) == wanted)
        })
        .map(|i| i + 1)
}

impl Kind {
    pub fn words(self) -> &'static str {
        match self {
            Kind::Pylock => "pylock.toml",
            Kind::UvLock => "uv.lock",
            Kind::Requirements => "requirements file",
        }
    }
}

/// `sha256:HEX` or `HEX` as 64 lowercase hex digits; `None` where it is not one.
pub(crate) fn sha256_hex(text: &str) -> Option<String> {
    let hex = text
        .strip_prefix("sha256:")
        .unwrap_or(text)
        .to_ascii_lowercase();
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then_some(hex)
}

/// The last path segment of a URL, without its query or fragment.
pub(crate) fn url_file(url: &str) -> &str {
    let end = url.find(['?', '#']).unwrap_or(url.len());
    let url = url.get(..end).unwrap_or(url);
    url.rsplit('/').next().unwrap_or(url)
}

/// The file name of a wheel a lock names by `url` or `path`: their last part.
pub(crate) fn wheel_file<'a>(url: Option<&'a str>, path: Option<&'a str>) -> Option<&'a str> {
    match (url, path) {
        (Some(u), _) => Some(url_file(u)),
        (None, Some(p)) => p.rsplit('/').next(),
        (None, None) => None,
    }
}

/// Where a lock of `kind` says the wheel of `package` is: its `url`, else its `path` from
/// `dir`; neither is an error of the lock.
pub(crate) fn wheel_at(
    (lock, kind, package): (&Path, &'static str, &str),
    (url, path): (Option<&str>, Option<&str>),
    dir: &Path,
) -> Result<Location, LockError> {
    match (url, path) {
        (Some(url), _) => Ok(Location::Url(url.to_owned())),
        (None, Some(path)) => Ok(Location::Path(dir.join(path))),
        (None, None) => Err(LockError::parse(
            lock,
            kind,
            format!("{package}: a wheel with neither url nor path"),
        )),
    }
}

/// A pin of `file` at `at` for the package `name`, checked: a wheel's file name, a URL of a
/// scheme fatkit fetches, a hash where the file is not local.
pub(crate) fn pin(
    lock: &Path,
    (name, version): (&str, &str),
    file: &str,
    at: Location,
    sha256: Option<&str>,
) -> Result<Pin, LockError> {
    if target::WheelName::parse(file).is_none() {
        return Err(LockError::parse(
            lock,
            "lock",
            format!(
                "{name}: `{}` is not a wheel's file name",
                file.escape_debug()
            ),
        ));
    }
    if let Location::Url(url) = &at {
        if !["https://", "http://", "file://"]
            .iter()
            .any(|s| url.starts_with(s))
        {
            return Err(LockError::parse(
                lock,
                "lock",
                format!(
                    "{name}: `{}` is not an https, http or file URL",
                    url.escape_debug()
                ),
            ));
        }
    }
    let sha256 = match sha256 {
        Some(h) => Some(sha256_hex(h).ok_or_else(|| {
            LockError::parse(
                lock,
                "lock",
                format!("{name}: `{}` is not a SHA-256", h.escape_debug()),
            )
        })?),
        None if matches!(at, Location::Url(_)) => {
            return Err(LockError::NoHash {
                shown: shown(lock),
                package: name.to_owned(),
                file: file.to_owned(),
            })
        }
        None => None,
    };
    Ok(Pin {
        name: name.to_owned(),
        version: version.to_owned(),
        file_name: file.to_owned(),
        at,
        sha256,
        line: None,
    })
}

/// The best wheel for `target` of the wheels of `package` in `lock`, by [`Target::fit`]; a
/// wheel whose file name is no wheel's (a path, `../`, a missing name) is an error of the
/// lock, not a wheel for another platform.
pub(crate) fn best<'a, T>(
    (lock, package): (&Path, &str),
    target: &Target,
    wheels: &'a [T],
    file: impl Fn(&T) -> Option<&str>,
) -> Result<Option<&'a T>, LockError> {
    for w in wheels {
        let name = file(w).unwrap_or_default();
        if target::WheelName::parse(name).is_none() {
            return Err(LockError::parse(
                lock,
                "lock",
                format!(
                    "{package}: `{}` is not a wheel's file name (name-version-python-abi-platform.whl, no path)",
                    name.escape_debug()
                ),
            ));
        }
    }
    Ok(wheels
        .iter()
        .filter_map(|w| Some((target.fit(file(w)?)?, w)))
        .max_by_key(|(fit, _)| *fit)
        .map(|(_, w)| w))
}

/// Why a locked distribution has no wheel for the target, and whether it can be installed
/// there at all (built from source) or not.
pub(crate) fn no_wheel(target: &Target, from_source: bool) -> (String, bool) {
    match from_source {
        true => (
            format!(
                "no wheel for {}: pip or uv would build it from source at install, so what it compiles is known only then",
                target.words()
            ),
            true,
        ),
        false => (
            format!(
                "no wheel for {} and no source to build one: installing the lock there fails",
                target.words()
            ),
            false,
        ),
    }
}

/// A [`Skipped`] of `name` `version` for `why` ([`no_wheel`]).
pub(crate) fn skipped(name: &str, version: String, (why, built): (String, bool)) -> Skipped {
    Skipped {
        name: name.to_owned(),
        version,
        why,
        built,
        line: None,
    }
}

#[cfg(test)]
mod tests;

/// A TOML error in words, with the line it is on.
pub(crate) fn toml_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let line = text
                .get(..span.start)
                .map_or(0, |t| t.matches('\n').count())
                + 1;
            format!("line {line}: {}", e.message())
        }
        None => e.message().to_owned(),
    }
}
