//! What was read of a wheel, kept by the wheel's SHA-256 so that a lock whose wheels were read
//! before is answered without reading them again: the readings cache. It holds readings, not
//! verdicts: each run judges the reading for the GPUs and driver it asks about, so one reading
//! answers every question, and a change of rules needs no new reading.
//!
//! A reading is keyed by the wheel's content (the hash the lock pinned and the store verified)
//! and by the fatkit that read it (a hash of its executable: a reader that changed reads
//! again), at `<dir>/<fatkit>/<sha256>.json`, written to a partial file and renamed, so that a
//! reader never sees half of one. The directory is fatkit's cache (`<cache>/readings`), or
//! `FATKIT_READINGS_DIR`, a directory a team shares (a network volume, a CI cache) so that a
//! wheel one of them read is read by none of the others. A reading that does not parse, or
//! whose wheel holds fatkit declaration records (kept by no reading), is read again.

use std::path::{Path, PathBuf};

use fatkit_fatbin::inspect::FileReport;
use serde::{Deserialize, Serialize};

/// The largest reading read back: a reading of the largest wheels (torch's CUDA libraries) is
/// tens of megabytes.
const MAX_READING: u64 = 1 << 30;

/// The readings cache of this fatkit.
#[derive(Debug, Clone)]
pub(crate) struct Readings {
    dir: PathBuf,
}

/// A reading as kept: the report, and the two fields its JSON leaves out (each container's
/// fingerprint, whether each image's code was read), in the report's order.
#[derive(Deserialize)]
struct Kept {
    report: FileReport,
    fingerprints: Vec<u64>,
    code_read: Vec<bool>,
}

/// [`Kept`], as written.
#[derive(Serialize)]
struct Keeping<'a> {
    report: &'a FileReport,
    fingerprints: Vec<u64>,
    code_read: Vec<bool>,
}

impl Readings {
    /// The cache under `dir`, for this fatkit; `None` where its executable cannot be read
    /// (nothing is then kept).
    pub(crate) fn open(dir: &Path) -> Option<Readings> {
        let exe = std::env::current_exe().ok()?;
        let bytes = fatkit_read::read_limited(&exe, 1 << 31).ok()?;
        let build = blake3::hash(&bytes).to_hex();
        let dir = dir.join(format!(
            "{}-{}",
            env!("CARGO_PKG_VERSION"),
            build.get(..16).unwrap_or_default()
        ));
        Some(Readings { dir })
    }

    /// The default directory: `FATKIT_READINGS_DIR`, else `readings` beside the wheel store.
    pub(crate) fn default_dir(store: &Path) -> PathBuf {
        match std::env::var_os("FATKIT_READINGS_DIR").filter(|d| !d.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => store
                .parent()
                .map_or_else(|| store.join("readings"), |c| c.join("readings")),
        }
    }

    /// Whether readings can be kept: its directory created and written; else why not.
    pub(crate) fn writable(&self) -> std::io::Result<()> {
        fatkit_package::out::check_writable(&self.dir)
    }

    fn path(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}.json"))
    }

    /// The reading of the wheel of `sha256`, where one is kept and whole.
    pub(crate) fn get(&self, sha256: &str) -> Option<FileReport> {
        let bytes = fatkit_read::read_limited(&self.path(sha256), MAX_READING).ok()?;
        let kept: Kept = serde_json::from_slice(&bytes).ok()?;
        let mut report = kept.report;
        let (mut f, mut c) = (kept.fingerprints.into_iter(), kept.code_read.into_iter());
        let whole = restore(&mut report, &mut f, &mut c);
        (whole && f.next().is_none() && c.next().is_none()).then_some(report)
    }

    /// Keeps `report`, the reading of the wheel of `sha256`; a failure to keep it is no
    /// failure of the audit (the wheel is read again next time).
    pub(crate) fn put(&self, sha256: &str, report: &FileReport) {
        let mut kept = Keeping {
            report,
            fingerprints: Vec::new(),
            code_read: Vec::new(),
        };
        hidden(report, &mut kept.fingerprints, &mut kept.code_read);
        let Ok(json) = serde_json::to_vec(&kept) else {
            return;
        };
        // Kept whole or not at all: the one writer writes a temporary and renames it.
        let _ = fatkit_package::out::write_atomic(&self.path(sha256), &json);
    }
}

/// The fields the report's JSON leaves out, in order: containers, then bare images, then
/// members.
fn hidden(report: &FileReport, fingerprints: &mut Vec<u64>, code_read: &mut Vec<bool>) {
    for c in &report.containers {
        fingerprints.push(c.fingerprint);
        code_read.extend(c.entries.iter().map(|e| e.code_read));
    }
    code_read.extend(report.images.iter().map(|i| i.image.code_read));
    for m in &report.members {
        hidden(m, fingerprints, code_read);
    }
}

/// Puts back what [`hidden`] took, in its order; `false` where they run out.
fn restore(
    report: &mut FileReport,
    fingerprints: &mut impl Iterator<Item = u64>,
    code_read: &mut impl Iterator<Item = bool>,
) -> bool {
    for c in &mut report.containers {
        let Some(f) = fingerprints.next() else {
            return false;
        };
        c.fingerprint = f;
        for e in &mut c.entries {
            let Some(read) = code_read.next() else {
                return false;
            };
            e.code_read = read;
        }
    }
    for i in &mut report.images {
        let Some(read) = code_read.next() else {
            return false;
        };
        i.image.code_read = read;
    }
    report
        .members
        .iter_mut()
        .all(|m| restore(m, fingerprints, code_read))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file under `dir`.
    fn files(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                files(&p, out);
            } else {
                out.push(p);
            }
        }
    }

    #[test]
    fn a_reading_kept_is_the_reading_read_back_whole() {
        // Every fixture of the repository (fatbins, cubins, PTX, host objects, Tile IR): the
        // shapes of report the readers make, none written for this test.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        let mut all = Vec::new();
        files(&root, &mut all);
        assert!(
            all.len() > 10,
            "the fixtures are missing under {}",
            root.display()
        );
        let dir = std::env::temp_dir().join(format!("fatkit-readings-{}", std::process::id()));
        let readings = Readings { dir: dir.clone() };
        assert_eq!(readings.get("ab"), None);
        let mut with_code = 0;
        for (n, path) in all.iter().enumerate() {
            let bytes = std::fs::read(path).unwrap_or_default();
            let report = fatkit_fatbin::inspect::inspect(
                &path.display().to_string(),
                &bytes,
                fatkit_fatbin::inspect::Depth::Kernels,
                &fatkit_fatbin::Limits::default(),
            );
            with_code += usize::from(report.has_device_code());
            let key = format!("{n:064x}");
            readings.put(&key, &report);
            assert_eq!(readings.get(&key), Some(report), "{}", path.display());
        }
        assert!(with_code > 5, "only {with_code} fixtures hold device code");
        // A torn or foreign reading is no reading.
        let torn = readings.path("cd");
        fatkit_package::out::write_atomic(&torn, b"{\"report\":").unwrap_or_default();
        assert_eq!(readings.get("cd"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
