//! The wheel store: each wheel a lock names, by its SHA-256, at `<store>/sha256/<hex>.whl`, a
//! name fatkit makes (nothing of the lock's becomes a path). A wheel enters only whole and
//! verified: fetched (or copied, for a local path) into `<store>/partial/`, hashed as it is
//! read back, and renamed into place only when the hash is the lock's; a partial file is never
//! read as a wheel, and one whose hash differs is deleted and refused. A wheel in the store is
//! not fetched again, so with the wheels stored no network is used.
//!
//! Wheels are fetched whole, never by byte ranges: the lock's hash covers the whole file, and
//! a verdict on members nobody verified is a verdict on something else. Fetching is Python's
//! (`urllib`, the proxies of the environment), in one process for all the wheels missing,
//! eight at a time, through fatkit's one runner (`fatkit_run`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::{Location, Locked, Pin, Settings};

/// A wheel of the lock, in the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    /// The wheel's file name, as the lock names it (checked to be a wheel's).
    pub file_name: String,
    /// The distribution and version the lock names.
    pub name: String,
    pub version: String,
    /// Its path in the store.
    pub path: PathBuf,
    pub sha256: String,
}

/// Why wheels could not be had, each naming the wheel and what to do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the wheel store {}: {source}; make it writable, or give another with FATKIT_CACHE_DIR", dir.display())]
    Dir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("{file} ({url}): its SHA-256 is {found}, not the lock's {expected}: the file is not the one locked (a changed index, a proxy, a corrupted download); it was deleted and nothing of it is judged. Find out why before trusting either: fetch it again, or regenerate the lock from an index you trust")]
    Mismatch {
        file: String,
        url: String,
        expected: String,
        found: String,
    },
    #[error("--offline, and {} wheel(s) the lock names are not in the store {}: {}; run once without --offline to fetch them", missing.len(), store.display(), missing.join(", "))]
    Offline {
        store: PathBuf,
        missing: Vec<String>,
    },
    #[error("cannot fetch {} wheel(s):\n{}\ncheck the network and the index (fatkit fetches with {}'s urllib, with the environment's proxies), or fetch them elsewhere and use --offline", failed.len(), failed.join("\n"), python.display())]
    Fetch {
        python: PathBuf,
        failed: Vec<String>,
    },
    #[error("{file}: cannot read {}: {source}", path.display())]
    Local {
        file: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no directory for the wheel store: no home directory and no FATKIT_CACHE_DIR; set FATKIT_CACHE_DIR to one")]
    NoStore,
    #[error("fetching wheels with {}: {source}", python.display())]
    Fetcher {
        python: PathBuf,
        source: Box<fatkit_run::ToolError>,
    },
}

/// Every wheel of `locked` in the store, fetching (or copying) those missing.
pub fn fetch(locked: &Locked, settings: &Settings) -> Result<Vec<Fetched>, StoreError> {
    let store = settings.store.as_ref().ok_or(StoreError::NoStore)?;
    let dir_error = |source| StoreError::Dir {
        dir: store.clone(),
        source,
    };
    std::fs::create_dir_all(store.join("sha256")).map_err(dir_error)?;
    let mut out = Vec::new();
    let mut missing: Vec<&Pin> = Vec::new();
    for pin in &locked.pins {
        match &pin.sha256 {
            Some(hex) if stored(store, hex).is_file() => out.push(fetched(pin, store, hex)),
            _ => missing.push(pin),
        }
    }
    let remote: Vec<&Pin> = missing
        .iter()
        .copied()
        .filter(|p| matches!(p.at, Location::Url(_)))
        .collect();
    if settings.offline && !remote.is_empty() {
        return Err(StoreError::Offline {
            store: store.clone(),
            missing: remote.iter().map(|p| p.file_name.clone()).collect(),
        });
    }
    std::fs::create_dir_all(store.join("partial")).map_err(dir_error)?;
    for pin in &missing {
        if let Location::Path(from) = &pin.at {
            out.push(copy_local(pin, from, store)?);
        }
    }
    out.extend(download(&remote, store, settings)?);
    // In the lock's order.
    out.sort_by_key(|f| {
        locked
            .pins
            .iter()
            .position(|p| p.file_name == f.file_name && p.name == f.name)
    });
    Ok(out)
}

/// Where the wheel of SHA-256 `hex` is stored.
fn stored(store: &Path, hex: &str) -> PathBuf {
    store.join("sha256").join(format!("{hex}.whl"))
}

fn fetched(pin: &Pin, store: &Path, hex: &str) -> Fetched {
    Fetched {
        file_name: pin.file_name.clone(),
        name: pin.name.clone(),
        version: pin.version.clone(),
        path: stored(store, hex),
        sha256: hex.to_owned(),
    }
}

/// A partial file of this process, for the `n`th wheel.
fn partial(store: &Path, n: usize) -> PathBuf {
    store
        .join("partial")
        .join(format!("{}-{n}.part", std::process::id()))
}

/// Hashes `part` and moves it into the store where its hash is `expected` (or, with no
/// hash locked, whatever it is); else deletes it.
fn admit(pin: &Pin, part: &Path, store: &Path, shown: &str) -> Result<Fetched, StoreError> {
    let found = hash_file(part).map_err(|source| StoreError::Local {
        file: pin.file_name.clone(),
        path: part.to_path_buf(),
        source,
    })?;
    if let Err(e) = matches(pin, &found, shown) {
        let _ = std::fs::remove_file(part);
        return Err(e);
    }
    fatkit_package::out::rename_into_place(part, &stored(store, &found)).map_err(|source| {
        StoreError::Dir {
            dir: store.to_path_buf(),
            source,
        }
    })?;
    Ok(fetched(pin, store, &found))
}

/// Whether `found` is the hash the lock names for `pin` (any, where it names none).
fn matches(pin: &Pin, found: &str, shown: &str) -> Result<(), StoreError> {
    match &pin.sha256 {
        Some(expected) if expected != found => Err(StoreError::Mismatch {
            file: pin.file_name.clone(),
            url: shown.to_owned(),
            expected: expected.clone(),
            found: found.to_owned(),
        }),
        _ => Ok(()),
    }
}

/// The SHA-256 of what `read` yields, each chunk also handed to `each`.
fn hash_reader(
    mut read: impl Read,
    mut each: impl FnMut(&[u8]) -> std::io::Result<()>,
) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = read.read(&mut buf)?;
        if n == 0 {
            break;
        }
        let chunk = buf.get(..n).unwrap_or_default();
        hasher.update(chunk);
        each(chunk)?;
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

fn hash_file(path: &Path) -> std::io::Result<String> {
    let (file, _) = fatkit_read::open_regular(path)?;
    hash_reader(file, |_| Ok(()))
}

/// A wheel on this machine into the store: hashed, then copied through fatkit's one writer
/// while hashed again, and kept only where both are the lock's (the file did not change).
fn copy_local(pin: &Pin, from: &Path, store: &Path) -> Result<Fetched, StoreError> {
    let local = |source| StoreError::Local {
        file: pin.file_name.clone(),
        path: from.to_path_buf(),
        source,
    };
    let shown = from.display().to_string();
    let found = hash_file(from).map_err(local)?;
    matches(pin, &found, &shown)?;
    let into = stored(store, &found);
    let dir_error = |source| StoreError::Dir {
        dir: store.to_path_buf(),
        source,
    };
    let mut out = fatkit_package::out::AtomicFile::create(&into).map_err(dir_error)?;
    let (file, _) = fatkit_read::open_regular(from).map_err(local)?;
    let again = hash_reader(file, |chunk| out.write_all(chunk)).map_err(local)?;
    matches(pin, &again, &shown)?;
    if again != found {
        return Err(local(std::io::Error::other(
            "it changed while it was copied",
        )));
    }
    out.commit().map_err(dir_error)?;
    Ok(fetched(pin, store, &found))
}

/// The fetcher: `argv[1]` a JSON list of [url, partial path]; one JSON line per wheel on
/// stdout, `{"i": n}` or `{"i": n, "error": "..."}`.
const FETCHER: &str = r#"
import concurrent.futures, json, shutil, sys, urllib.request
jobs = json.load(open(sys.argv[1]))
def get(i):
    url, part = jobs[i]
    try:
        req = urllib.request.Request(url, headers={"User-Agent": "fatkit"})
        with urllib.request.urlopen(req, timeout=120) as r, open(part, "wb") as f:
            shutil.copyfileobj(r, f, 1 << 20)
        return {"i": i}
    except Exception as e:
        return {"i": i, "error": f"{type(e).__name__}: {e}"}
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    for done in pool.map(get, range(len(jobs))):
        print(json.dumps(done), flush=True)
"#;

#[derive(Debug, serde::Deserialize)]
struct Done {
    i: usize,
    #[serde(default)]
    error: Option<String>,
}

fn download(pins: &[&Pin], store: &Path, settings: &Settings) -> Result<Vec<Fetched>, StoreError> {
    if pins.is_empty() {
        return Ok(Vec::new());
    }
    let url = |p: &Pin| match &p.at {
        Location::Url(u) => u.clone(),
        Location::Path(p) => p.display().to_string(),
    };
    let jobs: Vec<(String, PathBuf)> = pins
        .iter()
        .enumerate()
        .map(|(n, p)| (url(p), partial(store, n + 1)))
        .collect();
    let list = store
        .join("partial")
        .join(format!("{}.json", std::process::id()));
    let dir_error = |source| StoreError::Dir {
        dir: store.to_path_buf(),
        source,
    };
    let json = serde_json::to_vec(&jobs).map_err(|e| dir_error(std::io::Error::other(e)))?;
    fatkit_package::out::write_atomic(&list, &json).map_err(dir_error)?;
    let mut python = std::process::Command::new(&settings.python);
    python.arg("-c").arg(FETCHER).arg(&list);
    let ran = fatkit_run::run_with(
        &mut python,
        fatkit_run::How::INSTALL,
        "set FATKIT_PYTHON to a Python 3",
    );
    let _ = std::fs::remove_file(&list);
    let output = ran.map_err(|e| StoreError::Fetcher {
        python: settings.python.clone(),
        source: Box::new(e),
    })?;
    let mut failed = Vec::new();
    let mut out = Vec::new();
    let mut mismatch = None;
    for line in output
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
    {
        let Ok(done) = serde_json::from_slice::<Done>(line) else {
            continue;
        };
        let (Some(pin), Some((shown, part))) = (pins.get(done.i), jobs.get(done.i)) else {
            continue;
        };
        if let Some(e) = done.error {
            let _ = std::fs::remove_file(part);
            failed.push(format!(
                "  {} ({shown}): {}",
                pin.file_name,
                e.escape_debug()
            ));
            continue;
        }
        match admit(pin, part, store, shown) {
            Ok(f) => out.push(f),
            Err(e) => mismatch = mismatch.or(Some(e)),
        }
    }
    if let Some(e) = mismatch {
        return Err(e);
    }
    if !failed.is_empty() || out.len() < pins.len() {
        if failed.is_empty() {
            failed.push("  the fetcher stopped before every wheel was fetched".to_owned());
        }
        return Err(StoreError::Fetch {
            python: settings.python.clone(),
            failed,
        });
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) fn hash_for_tests(path: &Path) -> std::io::Result<String> {
    hash_file(path)
}
