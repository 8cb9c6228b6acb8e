//! Which files of an output directory fatkit wrote: a module's `<m>.fatbin` and `<m>.rs` are
//! fatkit's when `<m>.manifest.json` (a fatkit manifest of module `m`) records their sha256.
//! Nothing else is replaced or removed, whatever the configuration: a hand-written
//! `src/lib.rs` under `vendor = "src"`, a `main.rs` beside a `main.cu`, a file edited since
//! fatkit wrote it.

use std::path::{Path, PathBuf};

use fatkit_package::module::{Manifest, Written};

/// The largest manifest read (a real one is kilobytes): a file in its place that is bigger
/// (or a link to a device) is not fatkit's.
const MAX_MANIFEST: u64 = 64 << 20;

/// The largest fatbin or `.rs` read to be hashed: far over any module fatkit writes.
const MAX_FILE: u64 = 4 << 30;

/// Why a file of a module is not fatkit's to replace or remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotOurs {
    /// The manifest's place holds something that is not fatkit's manifest of this module.
    ForeignManifest(PathBuf),
    /// The file exists and no manifest of the module records it.
    Unrecorded(PathBuf),
    /// The file's hash is not the one the manifest records: changed since fatkit wrote it.
    Changed(PathBuf),
    /// Not a regular file (a directory, a link, a device).
    NotAFile(PathBuf),
}

impl std::fmt::Display for NotOurs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keep = "fatkit never replaces or removes a file it did not write";
        match self {
            NotOurs::ForeignManifest(p) => write!(
                f,
                "{}: is not a fatkit manifest of this module; {keep}: move it away, or build into another directory",
                p.display()
            ),
            NotOurs::Unrecorded(p) => write!(
                f,
                "{}: exists and fatkit did not write it (no manifest beside it records it); {keep}: move it away, name the module otherwise (module = \"...\" in sources), or build into another directory",
                p.display()
            ),
            NotOurs::Changed(p) => write!(
                f,
                "{}: changed since fatkit wrote it (its hash is not the one its manifest records); {keep}: keep your changes elsewhere, delete it, and build again",
                p.display()
            ),
            NotOurs::NotAFile(p) => write!(
                f,
                "{}: is not a regular file; {keep}: move it away, or build into another directory",
                p.display()
            ),
        }
    }
}

impl std::error::Error for NotOurs {}

/// The files of module `module` in `dir`.
#[derive(Debug)]
pub struct ModuleFiles {
    pub fatbin: PathBuf,
    pub manifest: PathBuf,
    pub rust: PathBuf,
    /// While a build writes the module: the hashes of the files it is writing, so that a build
    /// killed between them (new files beside the old manifest) leaves files the next one knows.
    pending: PathBuf,
}

impl ModuleFiles {
    pub fn new(dir: &Path, module: &str) -> ModuleFiles {
        ModuleFiles {
            fatbin: dir.join(format!("{module}.fatbin")),
            manifest: dir.join(format!("{module}.manifest.json")),
            rust: dir.join(format!("{module}.rs")),
            pending: dir.join(format!(".{module}.fatkit-pending")),
        }
    }

    /// Records the hashes of the files about to be written; [`ModuleFiles::written`] once the
    /// manifest, which records them for good, is in place.
    pub fn writing(&self, files: &Written) -> std::io::Result<()> {
        let json = serde_json::to_vec(files).map_err(std::io::Error::other)?;
        fatkit_package::out::write_atomic(&self.pending, &json)
    }

    pub fn written(&self) -> std::io::Result<()> {
        match std::fs::remove_file(&self.pending) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// The hashes a build killed while writing the module recorded, if one was.
    fn pending(&self) -> Option<Written> {
        let bytes = read_regular(&self.pending, MAX_MANIFEST).ok()??;
        serde_json::from_slice(&bytes).ok()
    }
}

/// The bytes of a regular file at `path`, `None` when nothing is there.
fn read_regular(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, NotOurs> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(_) => return Err(NotOurs::NotAFile(path.to_owned())),
    };
    if !meta.is_file() || meta.len() > limit {
        return Err(NotOurs::NotAFile(path.to_owned()));
    }
    fatkit_read::read_limited(path, limit)
        .map(Some)
        .map_err(|_| NotOurs::NotAFile(path.to_owned()))
}

/// The manifest of `module` in its place, if fatkit's; an error if something else is there.
pub fn manifest(files: &ModuleFiles, module: &str) -> Result<Option<Manifest>, NotOurs> {
    let Some(bytes) = read_regular(&files.manifest, MAX_MANIFEST)? else {
        return Ok(None);
    };
    match serde_json::from_slice::<Manifest>(&bytes) {
        Ok(m) if m.module == module => Ok(Some(m)),
        _ => Err(NotOurs::ForeignManifest(files.manifest.clone())),
    }
}

/// How fatkit's own kind of file begins: a generated module's first line, a fatbin's magic.
const GENERATED_RUST: &[u8] = b"// @generated by `fatkit build-kernels` from ";
const FATBIN_MAGIC: &[u8] = &[0x50, 0xed, 0x55, 0xba];

/// Whether the file at `path` is fatkit's by `recorded` (the hash its manifest records), by
/// `pending` (the hash a build killed while writing it recorded), or already holds `new`.
/// With `kind` (only when a manifest of the module is beside it), a file that begins as
/// fatkit's files of that kind do is its too: a module's files from an earlier build, left
/// beside a newer manifest by a partial commit or a merge.
fn check(
    path: &Path,
    recorded: Option<&str>,
    pending: Option<&str>,
    new: Option<&[u8]>,
    kind: Option<&[u8]>,
) -> Result<(), NotOurs> {
    let Some(bytes) = read_regular(path, MAX_FILE)? else {
        return Ok(());
    };
    if new.is_some_and(|n| n == bytes.as_slice()) || kind.is_some_and(|k| bytes.starts_with(k)) {
        return Ok(());
    }
    let hash = fatkit_package::out::sha256_hex(&bytes);
    if recorded == Some(hash.as_str()) || pending == Some(hash.as_str()) {
        return Ok(());
    }
    match recorded.or(pending) {
        Some(_) => Err(NotOurs::Changed(path.to_owned())),
        None => Err(NotOurs::Unrecorded(path.to_owned())),
    }
}

/// Before writing module `module` (`fatbin` and `rust` its new bytes): every file already in
/// its places must be fatkit's.
pub fn may_replace(
    files: &ModuleFiles,
    module: &str,
    fatbin: &[u8],
    rust: &[u8],
) -> Result<(), NotOurs> {
    judge(files, module, Some((fatbin, rust)))
}

/// [`may_replace`] with the new bytes (`Some((fatbin, rust))`), or [`may_write`] before they
/// are known (`None`: a file that begins as fatkit's is then left to the later check).
fn judge(files: &ModuleFiles, module: &str, new: Option<(&[u8], &[u8])>) -> Result<(), NotOurs> {
    let old = manifest(files, module)?;
    let recorded = match &old {
        // A manifest from before fatkit recorded its files: it wrote them together.
        Some(m) if m.written.is_none() => return Ok(()),
        Some(m) => m.written.as_ref(),
        None => None,
    };
    let pending = files.pending();
    // Generated files are fatkit's to regenerate while their manifest is beside them.
    let kind = |k| (old.is_some() || new.is_none()).then_some(k);
    check(
        &files.fatbin,
        recorded.map(|w| w.fatbin_sha256.as_str()),
        pending.as_ref().map(|p| p.fatbin_sha256.as_str()),
        new.map(|(fatbin, _)| fatbin),
        kind(FATBIN_MAGIC),
    )?;
    check(
        &files.rust,
        recorded.map(|w| w.rust_sha256.as_str()),
        pending.as_ref().map(|p| p.rust_sha256.as_str()),
        new.map(|(_, rust)| rust),
        kind(GENERATED_RUST),
    )
}

/// Before compiling module `module`: what [`may_replace`] will refuse whatever the build
/// makes. A file that begins as fatkit's of its kind is left to that check, which knows the
/// new bytes.
pub(crate) fn may_write(files: &ModuleFiles, module: &str) -> Result<(), NotOurs> {
    judge(files, module, None)
}

/// Before removing module `module` (its source is gone): its manifest is fatkit's and records
/// both files as they are. `Ok(false)` when no fatkit manifest of it is there (a file of that
/// name that is not one is no module, and stays).
pub fn may_remove(files: &ModuleFiles, module: &str) -> Result<bool, NotOurs> {
    let Ok(Some(m)) = manifest(files, module) else {
        return Ok(false);
    };
    // Removing is stricter than replacing: an edit of a module whose source is gone has no
    // new version to land in, so only the files as recorded go.
    if let Some(w) = &m.written {
        check(&files.fatbin, Some(&w.fatbin_sha256), None, None, None)?;
        check(&files.rust, Some(&w.rust_sha256), None, None, None)?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = include_str!("../../../tests/snapshots/generated-manifest.json");

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fatkit-owned-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A manifest of `saxpy` recording `fatbin` and `rust`, written in `dir`.
    fn record(files: &ModuleFiles, fatbin: &[u8], rust: &[u8]) {
        let mut m: Manifest = serde_json::from_str(SAMPLE).unwrap();
        m.written = Some(Written::of(fatbin, rust));
        std::fs::write(&files.manifest, m.to_json()).unwrap();
    }

    #[test]
    fn only_what_the_manifest_records_is_replaced() {
        let d = dir("replace");
        let files = ModuleFiles::new(&d, "saxpy");
        assert_eq!(may_replace(&files, "saxpy", b"F1", b"R1"), Ok(()));
        std::fs::write(&files.rust, "// mine").unwrap();
        assert_eq!(
            may_replace(&files, "saxpy", b"F1", b"R1"),
            Err(NotOurs::Unrecorded(files.rust.clone()))
        );
        // Known before compiling; a generated module without its manifest is left to the
        // check that knows the new bytes.
        assert_eq!(
            may_write(&files, "saxpy"),
            Err(NotOurs::Unrecorded(files.rust.clone()))
        );
        std::fs::write(&files.rust, GENERATED_RUST).unwrap();
        assert_eq!(may_write(&files, "saxpy"), Ok(()));
        std::fs::write(&files.fatbin, "F0").unwrap();
        std::fs::write(&files.rust, "R0").unwrap();
        record(&files, b"F0", b"R0");
        assert_eq!(may_replace(&files, "saxpy", b"F1", b"R1"), Ok(()));
        std::fs::write(&files.rust, "R0 edited").unwrap();
        assert_eq!(
            may_replace(&files, "saxpy", b"F1", b"R1"),
            Err(NotOurs::Changed(files.rust.clone()))
        );
        // A generated module of an earlier build, beside a newer manifest (a partial commit).
        let earlier =
            fatkit_package::module::generate_rust(&serde_json::from_str(SAMPLE).unwrap(), b"F");
        assert!(earlier.as_bytes().starts_with(GENERATED_RUST));
        std::fs::write(&files.rust, &earlier).unwrap();
        assert_eq!(may_replace(&files, "saxpy", b"F1", b"R1"), Ok(()));
        assert_eq!(
            may_remove(&files, "saxpy"),
            Err(NotOurs::Changed(files.rust.clone()))
        );
        std::fs::write(&files.rust, "R0 edited").unwrap();
        assert_eq!(
            may_remove(&files, "saxpy"),
            Err(NotOurs::Changed(files.rust.clone()))
        );
        // A manifest from before the `.rs` was recorded vouches for the one beside it.
        let legacy: Manifest = serde_json::from_str(SAMPLE).unwrap();
        std::fs::write(&files.manifest, legacy.to_json()).unwrap();
        assert_eq!(may_replace(&files, "saxpy", b"F1", b"R1"), Ok(()));
        assert_eq!(may_remove(&files, "saxpy"), Ok(true));
        std::fs::write(&files.manifest, "{\"module\": \"saxpy\"}").unwrap();
        assert_eq!(
            may_replace(&files, "saxpy", b"F1", b"R1"),
            Err(NotOurs::ForeignManifest(files.manifest.clone()))
        );
        assert_eq!(may_remove(&files, "saxpy"), Ok(false));
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A build killed after writing the new fatbin, before the manifest: the next build, whose
    /// sources changed meanwhile, knows the fatbin by the pending record.
    #[test]
    fn a_build_killed_between_the_files_leaves_them_known() {
        let d = dir("killed");
        let files = ModuleFiles::new(&d, "saxpy");
        std::fs::write(&files.fatbin, "F0").unwrap();
        std::fs::write(&files.rust, "R0").unwrap();
        record(&files, b"F0", b"R0");
        files.writing(&Written::of(b"F1", b"R1")).unwrap();
        std::fs::write(&files.fatbin, "F1").unwrap();
        // killed here
        assert_eq!(may_replace(&files, "saxpy", b"F2", b"R2"), Ok(()));
        files.written().unwrap();
        assert_eq!(
            may_replace(&files, "saxpy", b"F2", b"R2"),
            Err(NotOurs::Changed(files.fatbin.clone()))
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_link_or_directory_in_a_modules_place_is_not_ours() {
        let d = dir("link");
        let files = ModuleFiles::new(&d, "saxpy");
        std::os::unix::fs::symlink("/dev/zero", &files.manifest).unwrap();
        assert_eq!(
            may_replace(&files, "saxpy", b"F", b"R"),
            Err(NotOurs::NotAFile(files.manifest.clone()))
        );
        std::fs::remove_file(&files.manifest).unwrap();
        std::fs::create_dir(&files.rust).unwrap();
        assert_eq!(
            may_replace(&files, "saxpy", b"F", b"R"),
            Err(NotOurs::NotAFile(files.rust.clone()))
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
