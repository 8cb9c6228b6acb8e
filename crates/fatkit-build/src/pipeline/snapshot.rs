//! What one build read of each of its input files, so that what is compiled is what was
//! hashed: the source and header bytes a cache key, a manifest's inputs and every compile of a
//! module stand for are the bytes of one reading ([`Snapshot`]).
//!
//! Each file is recorded the first time the build hashes it (planning hashes every source and
//! every header it knows of, before anything compiles) with its stamp: device, inode, size,
//! modification and change times. The change time (`ctime`) is the kernel's: any write,
//! rename or `touch` sets it to the time of the change, and no program can set it back. After
//! a compile that started at `start`, every file it read ([`Snapshot::verify`]) must still
//! carry the stamp it was recorded with, or, read for the first time by that compile, show no
//! change since before `start`. Otherwise the compile may have read other bytes than those
//! hashed: its output is neither stored nor used (docs/GUARANTEES.md).

use crate::pipeline::failure::Status;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use super::failure::Failure;

/// How far before a compile's start a change still counts as during it: file times come from
/// the kernel's coarse clock (a tick behind at most, milliseconds) or a file server's.
pub(crate) const MARGIN: Duration = Duration::from_secs(1);

/// The largest source or header a build reads (generated tables run to megabytes).
pub(crate) const MAX_INPUT: u64 = fatkit_read::MAX_SOURCE;

/// A file's identity and times, as `stat` gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Stamp {
    pub(super) fn of(meta: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
        }
    }

    /// Whether the file changed at or after `start` less [`MARGIN`].
    pub(super) fn changed_since(&self, start: SystemTime) -> bool {
        let since = start
            .checked_sub(MARGIN)
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as i128);
        self.ctime_ns >= since
    }

    /// When the change that set this stamp is past [`MARGIN`].
    pub(crate) fn settled_at(&self) -> SystemTime {
        let ns = u64::try_from(self.ctime_ns.max(0)).unwrap_or(u64::MAX);
        SystemTime::UNIX_EPOCH + Duration::from_nanos(ns) + MARGIN
    }
}

/// A file as the build read it: its stamp and the hashes of its bytes (BLAKE3 for the cache,
/// sha256 for a manifest's recorded inputs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    pub stamp: Stamp,
    pub blake3: blake3::Hash,
    pub sha256: String,
}

/// Why a file's bytes cannot be the ones the build hashed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Changed {
    /// Its bytes differ from those this build read before (for the plan's cache keys or
    /// another compile of the module): the build's view of it is two versions.
    SinceRead(PathBuf),
    /// It changed while the compile ran, or too shortly before it to tell: the compile may
    /// have read either version. Settled at the time given (a compile then can tell).
    During(PathBuf, SystemTime),
    /// It cannot be read as a regular file (gone, a FIFO, a device, over the size limit).
    Unreadable(PathBuf, String),
    /// It probes for a header by a name the include scan cannot read (the line given), so no
    /// key can cover what the probe found (`probes`).
    OpaqueProbe(PathBuf, String),
}

impl Changed {
    /// The words of a failure: what happened and what to do.
    pub(crate) fn message(&self) -> String {
        match self {
            Changed::SinceRead(p) => format!(
                "{} changed while the build ran, after the build had read it: its compiles would mix two versions of it; nothing was cached; run the build again once the edits are saved",
                p.display()
            ),
            Changed::During(p, _) => format!(
                "{} kept changing while it was compiled: the compiler may have read any version of it; nothing was cached; run the build again once the edits are saved",
                p.display()
            ),
            Changed::Unreadable(p, why) => format!(
                "{}: {why}; a source or header must be a regular file of at most {MAX_INPUT} bytes",
                p.display()
            ),
            Changed::OpaqueProbe(p, line) => crate::refused::Refused::OpaqueProbe {
                file: p.clone(),
                line: line.clone(),
            }
            .to_string(),
        }
    }
}

/// How many times one call waits for files that were still settling when it began (each
/// wait is for the latest of them, so one is the rule).
const MAX_SETTLES: usize = 3;

/// Runs `attempt` (one compiler call) and, when a file it read changed too recently to tell
/// which version it read ([`Changed::During`]), again once the change has settled. A change
/// made before the attempt began (a file still settling: saved, or written by a generator,
/// just before the build) is waited for, never a failure; one made while the attempt ran is
/// compiled again once. A second change during a compile, or any other
/// ([`Changed::SinceRead`]: the build's other compiles used other bytes), fails the call with
/// `fail`'s failure.
pub(crate) fn with_retry<T>(
    mut attempt: impl FnMut() -> Result<T, Attempt>,
    fail: &dyn Fn(Option<String>, String, Status) -> Box<Failure>,
) -> Result<T, Box<Failure>> {
    let (mut settles, mut changes) = (0, 0);
    loop {
        let began = SystemTime::now();
        let changed = match attempt() {
            Ok(t) => return Ok(t),
            Err(Attempt::Failed(f)) => return Err(f),
            Err(Attempt::Changed(c)) => c,
        };
        let Changed::During(_, settled) = &changed else {
            return Err(fail(None, changed.message(), Status::InputChanged));
        };
        // The change's own time is `settled` less the margin.
        let before = settled.checked_sub(MARGIN).is_some_and(|at| at < began);
        if before && settles < MAX_SETTLES {
            settles += 1;
        } else if !before && changes == 0 {
            changes += 1;
        } else {
            return Err(fail(None, changed.message(), Status::InputChanged));
        }
        if let Ok(wait) = settled.duration_since(SystemTime::now()) {
            std::thread::sleep(wait.min(MARGIN * 2));
        }
    }
}

/// Why one attempt at a call gave nothing: the compiler failed, or a file it read cannot be
/// the bytes the build hashed.
#[derive(Debug)]
pub(crate) enum Attempt {
    Failed(Box<Failure>),
    Changed(Changed),
}

impl From<Box<Failure>> for Attempt {
    fn from(f: Box<Failure>) -> Attempt {
        Attempt::Failed(f)
    }
}

/// The build's one reading of each input file.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    seen: Mutex<HashMap<PathBuf, Seen>>,
    /// The latest change time of a file read or of its directory, in nanoseconds since 1970.
    latest_change_ns: std::sync::atomic::AtomicU64,
}

/// A file's bytes, with the stamp they were read under: `stat`, read (a regular file, at most
/// [`MAX_INPUT`]), `stat` again; a change meanwhile is [`Changed::During`].
fn read_stable(path: &Path) -> Result<(Vec<u8>, Stamp), Changed> {
    let unreadable = |e: std::io::Error| Changed::Unreadable(path.to_owned(), e.to_string());
    let (file, len) = fatkit_read::open_regular(path).map_err(unreadable)?;
    let before = Stamp::of(&file.metadata().map_err(unreadable)?);
    if len > MAX_INPUT {
        return Err(Changed::Unreadable(
            path.to_owned(),
            format!("{len} bytes, over the {MAX_INPUT}-byte limit of a source or header"),
        ));
    }
    let bytes = fatkit_read::read_whole(file, len).map_err(unreadable)?;
    let after = std::fs::metadata(path)
        .map(|m| Stamp::of(&m))
        .map_err(unreadable)?;
    if before != after {
        return Err(Changed::During(path.to_owned(), after.settled_at()));
    }
    Ok((bytes, after))
}

fn seen_of(bytes: &[u8], stamp: Stamp) -> Seen {
    Seen {
        stamp,
        blake3: blake3::hash(bytes),
        sha256: fatkit_package::out::sha256_hex(bytes),
    }
}

impl Snapshot {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Seen>> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `path`'s bytes, as this build reads it: recorded the first time; read again, its bytes
    /// must hash as then ([`Changed::SinceRead`]).
    pub(crate) fn read(&self, path: &Path) -> Result<(Vec<u8>, Seen), Changed> {
        let (bytes, stamp) = read_stable(path)?;
        let seen = seen_of(&bytes, stamp);
        let mut table = self.table();
        match table.get(path) {
            Some(first) if first.blake3 != seen.blake3 => Err(Changed::SinceRead(path.to_owned())),
            Some(first) => Ok((bytes, first.clone())),
            None => {
                table.insert(path.to_owned(), seen.clone());
                drop(table);
                self.note_change(&stamp);
                if let Some(dir) = path.parent().and_then(|d| std::fs::metadata(d).ok()) {
                    self.note_change(&Stamp::of(&dir));
                }
                Ok((bytes, seen))
            }
        }
    }

    fn note_change(&self, stamp: &Stamp) {
        let ns = u64::try_from(stamp.ctime_ns.max(0)).unwrap_or(u64::MAX);
        self.latest_change_ns
            .fetch_max(ns, std::sync::atomic::Ordering::Relaxed);
    }

    /// Waits, before a compile, until the latest change to a file this build read (or to its
    /// directory) is past [`MARGIN`]: a file saved or generated just before the build is
    /// settled before it is compiled, so that its compile can tell it did not change during
    /// it (at most twice the margin: a change time in the future is a clock's, not a file's).
    pub(crate) fn wait_settled(&self) {
        let ns = self
            .latest_change_ns
            .load(std::sync::atomic::Ordering::Relaxed);
        let settled = SystemTime::UNIX_EPOCH + Duration::from_nanos(ns) + MARGIN;
        if let Ok(wait) = settled.duration_since(SystemTime::now()) {
            std::thread::sleep(wait.min(MARGIN * 2));
        }
    }

    /// `path` as this build knows it: as first read, if its stamp is unchanged since (no
    /// second reading), else read now ([`Snapshot::read`]).
    pub(crate) fn hash(&self, path: &Path) -> Result<Seen, Changed> {
        if let (Some(first), Ok(meta)) = (self.table().get(path).cloned(), std::fs::metadata(path))
        {
            if first.stamp == Stamp::of(&meta) {
                return Ok(first);
            }
        }
        self.read(path).map(|(_, seen)| seen)
    }

    /// After a compile that started at `start` and read `files`: each file as this build read
    /// it, when none can have changed since it was hashed; else the first that may have.
    ///
    /// A file recorded before is unchanged when its stamp is; with another stamp, it changed
    /// during the compile if its change time is after `start` (less [`MARGIN`]), else before
    /// it, and the compile read it as it is now (hashed again: other bytes than recorded are
    /// [`Changed::SinceRead`]). A file not recorded before is recorded now, when its change
    /// time is before `start`.
    pub(crate) fn verify(
        &self,
        files: &[PathBuf],
        start: SystemTime,
    ) -> Result<Vec<(PathBuf, Seen)>, Changed> {
        let mut out = Vec::new();
        // Of the files that may have changed during the compile, the one settled last: one
        // wait is then enough for all of them.
        let mut latest: Option<(PathBuf, SystemTime)> = None;
        let mut during = |path: &Path, settled: SystemTime| {
            if latest.as_ref().is_none_or(|(_, t)| settled > *t) {
                latest = Some((path.to_owned(), settled));
            }
        };
        for path in files {
            let meta = std::fs::metadata(path)
                .map_err(|e| Changed::Unreadable(path.clone(), e.to_string()))?;
            let stamp = Stamp::of(&meta);
            if let Some(first) = self.table().get(path).filter(|s| s.stamp == stamp) {
                out.push((path.clone(), first.clone()));
                continue;
            }
            if stamp.changed_since(start) {
                during(path, stamp.settled_at());
                continue;
            }
            let (_, seen) = match self.read(path) {
                Err(Changed::During(p, settled)) => {
                    during(&p, settled);
                    continue;
                }
                res => res?,
            };
            if seen.stamp != stamp {
                during(path, seen.stamp.settled_at());
                continue;
            }
            out.push((path.clone(), seen));
        }
        match latest {
            Some((path, settled)) => Err(Changed::During(path, settled)),
            None => Ok(out),
        }
    }

    /// Every file read, with its sha256, for a module's recorded inputs.
    pub(crate) fn sha256_of(&self, path: &Path) -> Option<String> {
        self.table().get(path).map(|s| s.sha256.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fatkit-snapshot-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_file_read_once_is_the_same_for_the_whole_build() {
        let d = dir("once");
        let h = d.join("h.cuh");
        std::fs::write(&h, "#define A 1\n").unwrap();
        let snap = Snapshot::default();
        let first = snap.hash(&h).unwrap();
        // Unchanged: verified, whenever the compile started.
        let later = SystemTime::now() + Duration::from_secs(10);
        assert_eq!(
            snap.verify(std::slice::from_ref(&h), later).unwrap()[0].1,
            first
        );
        // Changed since it was read: two versions in one build, whenever it happened.
        std::fs::write(&h, "#define A 2\n").unwrap();
        let past = SystemTime::now() - Duration::from_secs(3600);
        assert!(matches!(
            snap.verify(std::slice::from_ref(&h), past),
            Err(Changed::During(..))
        ));
        assert_eq!(
            snap.verify(std::slice::from_ref(&h), later + MARGIN),
            Err(Changed::SinceRead(h.clone()))
        );
        assert_eq!(snap.read(&h).unwrap_err(), Changed::SinceRead(h.clone()));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_file_first_read_by_a_compile_is_recorded_unless_it_changed_during_it() {
        let d = dir("first");
        let h = d.join("h.cuh");
        std::fs::write(&h, "x").unwrap();
        let snap = Snapshot::default();
        // Written after the compile started: the compile may have read either version.
        let started = SystemTime::now() - Duration::from_millis(10);
        assert!(matches!(
            snap.verify(std::slice::from_ref(&h), started),
            Err(Changed::During(..))
        ));
        // Written well before the compile started: recorded as it is.
        let started = SystemTime::now() + 2 * MARGIN;
        let seen = snap.verify(std::slice::from_ref(&h), started).unwrap();
        assert_eq!(seen[0].1.blake3, blake3::hash(b"x"));
        assert_eq!(snap.sha256_of(&h).unwrap().len(), 64);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn only_regular_files_are_read() {
        let snap = Snapshot::default();
        for path in ["/dev/zero", "/dev/null", "/nonexistent/x.cuh"] {
            let e = snap.read(Path::new(path)).unwrap_err();
            assert!(matches!(e, Changed::Unreadable(..)), "{path}: {e:?}");
        }
    }
}
