//! Every file fatkit writes goes through here: to a temporary name in the same directory
//! (`.<name>.<pid>.ThreadId<n>.fatkit-tmp`), flushed, then renamed into place, so that a
//! reader sees the previous version or the complete new one, never a part. Temporaries left
//! by a killed process are removed by the next run ([`remove_stale_temporaries`]), and only
//! those: a name of that form, never a user's `.report.2024.final.tmp`.
//!
//! The boundary every write crosses (docs/GUARANTEES.md, "One writer"): a destination that
//! exists must be a regular file ([`replaceable`]: a FIFO, a device, a directory or a link is
//! refused, never renamed over), a caller that names what it may replace says so
//! ([`write_replacing`]: a profile `fatkit plan` wrote, not a `Cargo.toml`), a name taken
//! from an input is joined below its directory without `..` or a link on the way
//! ([`inside`]), and a copy is made no more readable than its source ([`AtomicFile::with_mode`]).
//! The tidy test `every_file_is_written_through_the_one_writer` fails the build of any library
//! crate that writes, renames or copies a file another way.

mod stdout;
pub use stdout::ReaderMayLeave;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A file being written: bytes go to a temporary beside `path`; [`AtomicFile::commit`]
/// renames it into place, and dropping it uncommitted removes the temporary.
#[derive(Debug)]
pub struct AtomicFile {
    path: PathBuf,
    tmp: PathBuf,
    file: fs::File,
}

impl AtomicFile {
    /// Starts writing `path`, creating its directory; a `path` that is there and is not a
    /// regular file is refused ([`replaceable`]).
    pub fn create(path: &Path) -> std::io::Result<AtomicFile> {
        AtomicFile::with_mode(path, 0o666)
    }

    /// [`AtomicFile::create`] with permissions no wider than `mode` (the source's, for a copy;
    /// the umask narrows them further).
    pub fn with_mode(path: &Path, mode: u32) -> std::io::Result<AtomicFile> {
        replaceable(path)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir)?;
        let tmp = temporary_path(path);
        let _ = fs::remove_file(&tmp);
        let mut options = fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode & 0o777);
        let file = options.open(&tmp)?;
        #[cfg(unix)]
        {
            // The umask narrows what `open` sets; never widened past `mode`.
            use std::os::unix::fs::PermissionsExt;
            let now = file.metadata()?.permissions().mode();
            file.set_permissions(fs::Permissions::from_mode(now & mode & 0o777))?;
        }
        #[cfg(not(unix))]
        let _ = mode;
        Ok(AtomicFile {
            path: path.to_owned(),
            tmp,
            file,
        })
    }

    /// Flushes the data to disk and renames it into place, checking again that what is there
    /// may be replaced.
    pub fn commit(self) -> std::io::Result<()> {
        self.file.sync_all()?;
        replaceable(&self.path)?;
        fs::rename(&self.tmp, &self.path)
        // Drop then finds no temporary to remove.
    }
}

/// Whether `path` may be written: absent, or a regular file (not followed if it is a link).
/// A FIFO, a device, a socket, a directory or a symbolic link is refused, naming what it is:
/// renaming over it would replace it (as root, `/dev/null` itself).
pub fn replaceable(path: &Path) -> std::io::Result<()> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if meta.file_type().is_file() {
        return Ok(());
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!(
            "{} is {}, not a regular file; fatkit writes only regular files and replaces nothing else: remove it or name another file",
            path.display(),
            kind_of(&meta.file_type())
        ),
    ))
}

/// What a file that is not a regular one is, for messages.
fn kind_of(kind: &fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO";
        }
        if kind.is_char_device() || kind.is_block_device() {
            return "a device";
        }
        if kind.is_socket() {
            return "a socket";
        }
    }
    if kind.is_dir() {
        "a directory"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// Writes `bytes` to `path` atomically when `path` is absent or a regular file whose first
/// bytes `ours` recognises as fatkit's (a profile `fatkit plan` wrote); anything else there is
/// refused, naming `what` `ours` looks for.
pub fn write_replacing(
    path: &Path,
    bytes: &[u8],
    ours: &dyn Fn(&[u8]) -> bool,
    what: &str,
) -> std::io::Result<()> {
    replaceable(path)?;
    if fs::symlink_metadata(path).is_ok() {
        // Its head is what is judged, whatever its length.
        let (file, _) = fatkit_read::open_regular(path)?;
        let mut head = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(file, 4096), &mut head)?;
        if !ours(&head) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists and is not {what}; fatkit replaces only a file it wrote: name a new file, or remove it first",
                    path.display()
                ),
            ));
        }
    }
    write_atomic(path, bytes)
}

/// `dir` joined with `name`, a relative path taken from an input: refused when it is absolute,
/// climbs with `..`, or passes through a symbolic link below `dir`, so that what an input names
/// is written inside `dir` or not at all.
pub fn inside(dir: &Path, name: &Path) -> std::io::Result<PathBuf> {
    use std::path::Component;
    let refuse = |why: &str| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{}: {why}; fatkit writes only inside {}",
                name.display(),
                dir.display()
            ),
        )
    };
    let mut path = dir.to_owned();
    for part in name.components() {
        match part {
            Component::Normal(p) => {
                if fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink())
                    && path != dir
                {
                    return Err(refuse("passes through a symbolic link"));
                }
                path.push(p);
            }
            Component::CurDir => {}
            _ => return Err(refuse("not a plain relative name")),
        }
    }
    if fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(refuse("is a symbolic link"));
    }
    Ok(path)
}

/// Renames `from` (a directory or file fatkit made, such as a toolchain installed into a
/// temporary directory) to `to`, which must be absent, or for a file a regular file.
pub fn rename_into_place(from: &Path, to: &Path) -> std::io::Result<()> {
    if fs::symlink_metadata(from).is_ok_and(|m| m.is_dir()) {
        if fs::symlink_metadata(to).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} is already there; remove it first", to.display()),
            ));
        }
    } else {
        replaceable(to)?;
    }
    fs::rename(from, to)
}

/// Opens (creating) the lock file `path`, a regular file: a link or anything else in its place
/// is refused, before opening and on the open handle.
pub fn lock_file(path: &Path) -> std::io::Result<fs::File> {
    replaceable(path)?;
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Opened without blocking: a FIFO put there since the check opens at once, to be
        // refused below.
        const O_NONBLOCK: i32 = 0o4000;
        options.custom_flags(O_NONBLOCK);
    }
    let file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok(file)
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        // Uncommitted (an error, or a panic unwinding): the temporary goes.
        let _ = fs::remove_file(&self.tmp);
    }
}

/// Writes `bytes` to `path` atomically.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = AtomicFile::create(path)?;
    file.write_all(bytes)?;
    file.commit()
}

/// Writes `bytes` to `path`, a new file: a name already taken (a file, a link, a FIFO) is an
/// error, never followed or replaced. Its permissions are `mode`, set on the open file before
/// a byte is written (a copy of a private file is never readable by others, even for a moment).
pub fn write_new(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut file = fs::File::create_new(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(fs::Permissions::from_mode(mode))?;
    }
    #[cfg(not(unix))]
    let _ = mode;
    file.write_all(bytes)
}

/// Writes `path` atomically if its contents differ; returns whether it did.
pub fn write_if_changed(path: &Path, bytes: &[u8]) -> std::io::Result<bool> {
    // No more than the new bytes are read of what is there: longer is changed.
    if fatkit_read::read_limited(path, bytes.len() as u64).is_ok_and(|old| old == bytes) {
        return Ok(false);
    }
    write_atomic(path, bytes)?;
    Ok(true)
}

/// The lock of an output directory: `flock` on the directory itself, so that nothing is
/// added to it (a vendored directory is committed). A build holds it ([`DirLock::hold`])
/// while it writes its modules, so two builds into one directory write theirs one after the
/// other and every module's fatbin, manifest and `.rs` come from one build. The lock is
/// released when the `DirLock` is dropped (or the process dies).
#[derive(Debug)]
pub struct DirLock {
    file: fs::File,
}

impl DirLock {
    /// Creates `dir` and opens it for locking.
    pub fn open(dir: &Path) -> std::io::Result<DirLock> {
        fs::create_dir_all(dir)?;
        Ok(DirLock {
            file: fatkit_read::open_dir(dir)?,
        })
    }

    /// Waits for, then takes, the lock.
    pub fn hold(&self) -> std::io::Result<()> {
        self.file.lock()
    }
}

/// Checks that `dir`, or the nearest of its ancestors that exists, is a directory: a file in
/// the way is named ("out is a file, not a directory"), not left to `mkdir`'s "File exists".
pub fn no_file_in_the_way(dir: &Path) -> std::io::Result<()> {
    for p in dir.ancestors().filter(|p| !p.as_os_str().is_empty()) {
        match fs::metadata(p) {
            Ok(m) if m.is_dir() => return Ok(()),
            Ok(_) => {
                return Err(std::io::Error::other(format!(
                    "{} is a file, not a directory",
                    p.display()
                )))
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Checks that `dir` can be written: creates it and a file in it, then removes the file.
pub fn check_writable(dir: &Path) -> std::io::Result<()> {
    no_file_in_the_way(dir)?;
    fs::create_dir_all(dir)?;
    // Unique per call, not only per process: two builds in one process (threads of a test
    // run, a program calling the library twice) would remove each other's probe.
    static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let probe = dir.join(format!(".fatkit-probe.{}.{n}", std::process::id()));
    // Removed whether or not the write succeeded: on a full disk the file is created, then
    // the write fails, and the probe must not outlive the check.
    let written = fs::write(&probe, b"probe");
    let removed = fs::remove_file(&probe);
    written?;
    removed
}

/// The temporary `path` is written as by this thread before it is renamed into place, named
/// as [`AtomicFile`] names its own (so that an interrupted write is cleaned up later).
pub fn temporary_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(temporary_name(
        &name,
        std::process::id(),
        &format!("{:?}", std::thread::current().id()).replace(['(', ')'], ""),
    ))
}

/// What fatkit calls the temporary of `name` while process `pid`'s thread `thread`
/// (`ThreadId7`) writes it.
fn temporary_name(name: &str, pid: u32, thread: &str) -> String {
    format!(".{name}.{pid}.{thread}{TEMPORARY}")
}

const TEMPORARY: &str = ".fatkit-tmp";

/// The process that wrote `name`, if `name` is a temporary of [`AtomicFile`]: exactly
/// `.<name>.<pid>.ThreadId<n>.fatkit-tmp`, digits where digits are.
fn temporary_of(name: &str) -> Option<u32> {
    let rest = name.strip_prefix('.')?.strip_suffix(TEMPORARY)?;
    let (rest, thread) = rest.rsplit_once('.')?;
    let (stem, pid) = rest.rsplit_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if stem.is_empty() || !thread.strip_prefix("ThreadId").is_some_and(digits) || !digits(pid) {
        return None;
    }
    pid.parse().ok()
}

/// Removes the temporaries of [`AtomicFile`]s in `dir` whose process is gone (killed): files
/// named as `temporary_of` knows, nothing else.
pub fn remove_stale_temporaries(dir: &Path) {
    let Ok(read) = fs::read_dir(dir) else { return };
    for entry in read.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = temporary_of(&name) else {
            continue;
        };
        if entry.file_type().is_ok_and(|t| t.is_file()) && !process_alive(pid) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Whether process `pid` is this one or still running.
pub fn process_alive(pid: u32) -> bool {
    pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists()
}

/// [`sha256_hex`] of the regular file at `path`, read through a buffer: a header of any size
/// costs the buffer, not its size (a FIFO or a device is an error, never read).
pub(crate) fn sha256_file(path: &Path) -> std::io::Result<String> {
    use sha2::Digest;
    use std::io::Read;
    let mut hasher = sha2::Sha256::new();
    let (mut file, _) = fatkit_read::open_regular(path)?;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(buf.get(..n).unwrap_or_default());
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The sha256 of `bytes` in lowercase hex, as `sha256sum` prints it: `SHA256SUMS` in an
/// archive, the inputs a module records, the `.crate` files the bench fetches.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_renames_and_drop_cleans_up() {
        let dir = std::env::temp_dir().join(format!("fatkit-out-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let path = dir.join("a.bin");
        write_atomic(&path, b"one").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"one");
        assert!(!write_if_changed(&path, b"one").unwrap());
        assert!(write_if_changed(&path, b"two").unwrap());
        {
            let mut f = AtomicFile::create(&path).unwrap();
            f.write_all(b"half").unwrap();
            // dropped uncommitted: an interrupted write
        }
        assert_eq!(fs::read(&path).unwrap(), b"two");
        let left: Vec<_> = fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "{left:?}");
        // A temporary of a dead process is removed; the file stays, and so do a user's
        // files that only look like temporaries.
        let dead = temporary_name("a.bin", 4_194_304_999, "ThreadId1");
        fs::write(dir.join(&dead), b"x").unwrap();
        let users = [
            ".report.2024.final.tmp",
            ".a.bin.4194304999.ThreadId1.tmp",
            ".4194304999.ThreadId1.fatkit-tmp",
            ".a.4194304999.Thread1.fatkit-tmp",
            ".a.x4194304999.ThreadId1.fatkit-tmp",
        ];
        for name in users {
            fs::write(dir.join(name), b"mine").unwrap();
        }
        remove_stale_temporaries(&dir);
        assert!(!dir.join(&dead).exists(), "{dead} was left");
        for name in users {
            assert!(dir.join(name).is_file(), "{name} was deleted");
        }
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1 + users.len());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_hashes_as_its_bytes_do() {
        let dir = std::env::temp_dir().join(format!("fatkit-sha-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("h.cuh");
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        fs::write(&path, &bytes).unwrap();
        assert_eq!(sha256_file(&path).unwrap(), sha256_hex(&bytes));
        assert!(sha256_file(&dir).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Two `package` runs at once: each one's cleanup leaves the other's partial archive, whose
    /// process is alive, in place.
    #[test]
    fn a_live_process_keeps_its_temporaries() {
        let dir = std::env::temp_dir().join(format!("fatkit-out-live-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let theirs = dir.join(temporary_name(
            "x-0.1.0-host.tar.gz",
            other.id(),
            "ThreadId1",
        ));
        fs::write(&theirs, b"partial").unwrap();
        remove_stale_temporaries(&dir);
        assert!(
            theirs.is_file(),
            "another live run's partial archive was deleted"
        );
        other.kill().unwrap();
        other.wait().unwrap();
        remove_stale_temporaries(&dir);
        assert!(!theirs.exists(), "a dead run's temporary stays");
        fs::remove_dir_all(&dir).unwrap();
    }
}

#[cfg(test)]
mod writer_tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fatkit-writer-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_name_from_an_input_stays_inside_its_directory() {
        let dir = scratch("inside");
        fs::create_dir_all(dir.join("a")).unwrap();
        std::os::unix::fs::symlink("/tmp", dir.join("out")).unwrap();
        assert_eq!(
            inside(&dir, Path::new("a/./b.h")).unwrap(),
            dir.join("a/b.h")
        );
        for bad in ["../x", "a/../../x", "/etc/passwd", "out/x", "out"] {
            assert!(inside(&dir, Path::new(bad)).is_err(), "{bad}");
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_copy_is_no_more_readable_than_its_source_and_nothing_else_is_replaced() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("mode");
        let path = dir.join("key");
        let mut f = AtomicFile::with_mode(&path, 0o600).unwrap();
        f.write_all(b"secret").unwrap();
        f.commit().unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & !0o600, 0, "{mode:o}");
        let fifo = dir.join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let err = write_atomic(&fifo, b"x").unwrap_err();
        assert!(
            err.to_string().contains("is a FIFO, not a regular file"),
            "{err}"
        );
        let err = rename_into_place(&path, &fifo).unwrap_err();
        assert!(err.to_string().contains("a FIFO"), "{err}");
        assert!(lock_file(&fifo).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
