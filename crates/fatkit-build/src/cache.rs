//! The content-addressed compile cache.
//!
//! A job's key has two halves. The *source key* hashes the toolchain's identity, the target,
//! the compiler arguments (never `--jobs` or output paths), the source's path and its
//! contents. Under it the cache remembers the headers the last compile read (nvcc's
//! dependency output, toolkit headers left out: the toolchain identity covers them). The
//! *object key* adds the current contents of those headers; under it lies the output. So an
//! unchanged source with unchanged headers is found without running anything, and editing a
//! header misses only for the sources that include it.
//!
//! Every file is written to a temporary name and renamed into place; an object is stored with
//! its BLAKE3 hash and verified when read, so a torn or corrupted entry is a miss, never a
//! wrong answer.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

// v4: entries record include-path misses (`absent`), keys the compile environment.
// v5: jobs run in the project root and give the compilers the source relative to it.
// v6: nvcc is given `./name`; NVRTC compiles staged copies and its dependencies are what it read.
const VERSION: &str = "fatkit-cache-v6";

/// A cache directory.
#[derive(Clone, Debug)]
pub struct Cache {
    root: PathBuf,
}

/// What the cache remembers about a source key.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SourceEntry {
    /// Headers the compile read, outside the toolkit.
    pub deps: Vec<PathBuf>,
    /// How long the last compile took, for scheduling the longest jobs first.
    pub seconds: f64,
    /// Include-path misses: files that did not exist when the compile ran and would have been
    /// read instead of one of its headers had they existed (the same name in a directory
    /// searched earlier, [`shadowing`]). If one appears, the object is stale.
    #[serde(default)]
    pub absent: Vec<PathBuf>,
}

/// The environment variables that change what nvcc builds: its own flag variables and the
/// host preprocessor's include paths. Their values are part of every nvcc job's source key.
pub const NVCC_ENV: &[&str] = &[
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
    "NVCC_CCBIN",
    "CPATH",
    "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH",
];

/// `NAME=value` of each of `names` that is set, for a source key.
pub(crate) fn env_of(names: &[&str]) -> Vec<String> {
    names
        .iter()
        .filter_map(|n| {
            let v = std::env::var_os(n)?;
            Some(format!("env:{n}={}", v.to_string_lossy()))
        })
        .collect()
}

/// The include-path misses of a compile that read `headers`, searching `search` in order
/// (the source's directory, then the include directories; the project's own, where a new
/// file can appear). A header at `dir/rel` implies that `earlier/rel` was missing for every
/// directory searched before `dir`; a header in none of them (the toolkit's, the system's)
/// is named by what follows its last `include/`, missing from all of them. Only candidates
/// that do not exist now are kept: one that exists was not what the compile looked for.
pub fn shadowing(headers: &[PathBuf], search: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = std::collections::BTreeSet::new();
    for h in headers {
        // Every search directory holding the header gives a spelling it may have been
        // included by (`params.h` from `src/include`, `include/params.h` from `src`).
        let spellings: Vec<(usize, PathBuf)> = search
            .iter()
            .enumerate()
            .filter_map(|(k, dir)| Some((k, h.strip_prefix(dir).ok()?.to_path_buf())))
            .collect();
        let mut tries: Vec<(&[PathBuf], PathBuf)> = spellings
            .into_iter()
            .map(|(k, rel)| (search.get(..k).unwrap_or_default(), rel))
            .collect();
        if tries.is_empty() {
            let text = h.to_string_lossy();
            if let Some((_, rel)) = text.rsplit_once("/include/") {
                tries.push((search, PathBuf::from(rel)));
            }
        }
        for (before, rel) in tries {
            for dir in before {
                let candidate = dir.join(&rel);
                if candidate != *h && !candidate.exists() {
                    out.insert(candidate);
                }
            }
        }
    }
    out.into_iter().collect()
}

/// Whether any of an entry's include-path misses now exists; `exists` may remember answers
/// across the jobs of one build.
pub fn shadowed(entry: &SourceEntry, exists: &mut dyn FnMut(&Path) -> bool) -> bool {
    entry.absent.iter().any(|p| exists(p))
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct ObjectMeta {
    blake3: String,
    size: u64,
}

pub use fatkit_package::out::{remove_stale_temporaries, write_atomic};

/// Removes the per-job scratch directories (`tmp/<pid>-<key>`) of builds whose process is
/// gone (killed, or interrupted).
pub(crate) fn remove_stale_scratch(cache_root: &Path) {
    let Ok(read) = fs::read_dir(cache_root.join("tmp")) else {
        return;
    };
    for entry in read.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !fatkit_package::out::process_alive(pid) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

impl Cache {
    pub fn new(root: impl Into<PathBuf>) -> Cache {
        Cache { root: root.into() }
    }

    /// A scratch directory for one compiler call, `tmp/<pid>-<n>-<label>`: the process (for
    /// [`remove_stale_scratch`]) and a number no other call of the process is given, so that
    /// two builds in one process (threads, tests) compiling the same source never share one.
    pub(crate) fn scratch(&self, label: &str) -> PathBuf {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.root
            .join("tmp")
            .join(format!("{}-{n}-{label}", std::process::id()))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The source key of a job.
    pub(crate) fn source_key(
        toolchain_identity: &str,
        target: &str,
        args: &[String],
        source: &Path,
        source_hash: &blake3::Hash,
    ) -> String {
        let mut h = blake3::Hasher::new();
        for part in [VERSION, toolchain_identity, target] {
            h.update(part.as_bytes());
            h.update(b"\0");
        }
        for arg in args {
            h.update(arg.as_bytes());
            h.update(b"\0");
        }
        h.update(source.to_string_lossy().as_bytes());
        h.update(b"\0");
        h.update(source_hash.as_bytes());
        h.finalize().to_hex().to_string()
    }

    /// The object key: the source key plus the contents of `deps`, each hashed by the build
    /// that reads it (`pipeline::snapshot`: the bytes the compile read are the bytes hashed).
    pub fn object_key(source_key: &str, deps: &[(PathBuf, blake3::Hash)]) -> String {
        let mut h = blake3::Hasher::new();
        h.update(source_key.as_bytes());
        for (dep, hash) in deps {
            h.update(dep.to_string_lossy().as_bytes());
            h.update(b"\0");
            h.update(hash.as_bytes());
        }
        h.finalize().to_hex().to_string()
    }

    fn source_path(&self, key: &str) -> PathBuf {
        self.root
            .join("sources")
            .join(key.get(..2).unwrap_or("00"))
            .join(format!("{key}.json"))
    }

    fn object_path(&self, key: &str) -> PathBuf {
        self.root
            .join("objects")
            .join(key.get(..2).unwrap_or("00"))
            .join(key)
    }

    pub(crate) fn source_entry(&self, key: &str) -> Option<SourceEntry> {
        serde_json::from_slice(&read_record(&self.source_path(key))?).ok()
    }

    pub(crate) fn put_source_entry(&self, key: &str, entry: &SourceEntry) -> std::io::Result<()> {
        write_atomic(
            &self.source_path(key),
            &serde_json::to_vec(entry).map_err(std::io::Error::other)?,
        )
    }

    /// The object under `key`, if present and intact.
    pub fn object(&self, key: &str) -> Option<Vec<u8>> {
        let path = self.object_path(key);
        let meta: ObjectMeta =
            serde_json::from_slice(&read_record(&path.with_extension("json"))?).ok()?;
        // No more than the record says: a link to a device, or a file grown since, is no hit.
        let bytes = fatkit_read::read_limited(&path, meta.size).ok()?;
        if bytes.len() as u64 != meta.size || blake3::hash(&bytes).to_hex().as_str() != meta.blake3
        {
            // Corrupted: forget it, the job runs again.
            let _ = fs::remove_file(path.with_extension("json"));
            return None;
        }
        Some(bytes)
    }

    /// Stores an object: the bytes first, then the record that makes them visible.
    pub(crate) fn put_object(&self, key: &str, bytes: &[u8]) -> std::io::Result<()> {
        let path = self.object_path(key);
        write_atomic(&path, bytes)?;
        let meta = ObjectMeta {
            blake3: blake3::hash(bytes).to_hex().to_string(),
            size: bytes.len() as u64,
        };
        write_atomic(
            &path.with_extension("json"),
            &serde_json::to_vec(&meta).map_err(std::io::Error::other)?,
        )
    }
}

/// The largest cache record read (a source entry lists headers; kilobytes in practice).
const MAX_RECORD: u64 = 64 << 20;

/// A cache record's bytes, if a regular file of at most [`MAX_RECORD`] is there: every read of
/// the cache goes through here or [`fatkit_read::read_limited`], so an entry replaced
/// by a link to `/dev/zero` or a FIFO is a miss, not an endless read.
pub(crate) fn read_record(path: &Path) -> Option<Vec<u8>> {
    fatkit_read::read_limited(path, MAX_RECORD).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_scratch_of_dead_processes_is_removed() {
        let dir = std::env::temp_dir().join(format!("fatkit-scratch-{}", std::process::id()));
        let dead = dir.join("tmp").join("4194304999-abcdef");
        let mine = dir
            .join("tmp")
            .join(format!("{}-abcdef", std::process::id()));
        fs::create_dir_all(&dead).unwrap();
        fs::create_dir_all(&mine).unwrap();
        remove_stale_scratch(&dir);
        assert!(!dead.exists() && mine.exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn objects_are_verified_when_read() {
        let dir = std::env::temp_dir().join(format!("fatkit-cache-{}", std::process::id()));
        let cache = Cache::new(&dir);
        cache.put_object("abcdef", b"cubin bytes").unwrap();
        assert_eq!(cache.object("abcdef").as_deref(), Some(&b"cubin bytes"[..]));
        fs::write(cache.object_path("abcdef"), b"cubin bytez").unwrap();
        assert_eq!(cache.object("abcdef"), None);
        assert_eq!(cache.object("missing"), None);
        let entry = SourceEntry {
            deps: vec![PathBuf::from("/x.cuh")],
            seconds: 1.5,
            absent: Vec::new(),
        };
        cache.put_source_entry("k1", &entry).unwrap();
        assert_eq!(cache.source_entry("k1").unwrap().deps, entry.deps);

        // Issue 29: records and objects replaced by links to an endless device, or a FIFO, are
        // misses (these would read forever, or block, if read whole).
        for (i, target) in ["/dev/zero", "/dev/urandom"].iter().enumerate() {
            let key = format!("k{}", i + 2);
            cache.put_source_entry(&key, &entry).unwrap();
            fs::remove_file(cache.source_path(&key)).unwrap();
            std::os::unix::fs::symlink(target, cache.source_path(&key)).unwrap();
            assert!(cache.source_entry(&key).is_none());
        }
        cache.put_object("fedcba", b"cubin bytes").unwrap();
        let object = cache.object_path("fedcba");
        fs::remove_file(&object).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &object).unwrap();
        assert_eq!(cache.object("fedcba"), None);
        fs::remove_file(&object).unwrap();
        let fifo = std::process::Command::new("mkfifo").arg(&object).status();
        if fifo.is_ok_and(|s| s.success()) {
            assert_eq!(cache.object("fedcba"), None);
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn object_key_follows_header_contents() {
        let header = PathBuf::from("/p/h.cuh");
        let k1 = Cache::object_key("src", &[(header.clone(), blake3::hash(b"#define A 1"))]);
        assert_eq!(
            Cache::object_key("src", &[(header.clone(), blake3::hash(b"#define A 1"))]),
            k1
        );
        assert_ne!(
            Cache::object_key("src", &[(header.clone(), blake3::hash(b"#define A 2"))]),
            k1
        );
        assert_ne!(Cache::object_key("src", &[]), k1);
        assert_ne!(
            Cache::object_key("src2", &[(header, blake3::hash(b"#define A 1"))]),
            k1
        );
    }

    #[test]
    fn a_header_found_late_in_the_search_records_the_earlier_misses() {
        let dir = std::env::temp_dir().join(format!("fatkit-shadow-{}", std::process::id()));
        let (src, inc) = (dir.join("src"), dir.join("inc"));
        fs::create_dir_all(&src).unwrap();
        fs::create_dir_all(inc.join("sub")).unwrap();
        fs::write(inc.join("sub/params.h"), "").unwrap();
        let search = vec![src.clone(), inc.clone()];
        let headers = vec![
            inc.join("sub/params.h"),
            PathBuf::from("/opt/cuda/targets/x86_64-linux/include/cuda_runtime.h"),
        ];
        let absent = shadowing(&headers, &search);
        assert_eq!(
            absent,
            vec![
                inc.join("cuda_runtime.h"),
                src.join("cuda_runtime.h"),
                src.join("sub/params.h"),
            ]
        );
        let mut entry = SourceEntry {
            absent,
            ..SourceEntry::default()
        };
        let mut exists = |p: &Path| p.exists();
        assert!(!shadowed(&entry, &mut exists));
        fs::create_dir_all(src.join("sub")).unwrap();
        fs::write(src.join("sub/params.h"), "").unwrap();
        assert!(shadowed(&entry, &mut exists));
        entry.absent.clear();
        assert!(!shadowed(&entry, &mut exists));
        let _ = fs::remove_dir_all(&dir);
    }
}
