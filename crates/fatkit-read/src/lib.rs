//! The one way fatkit reads a file a user or a crate names, with bounded memory: only regular
//! files (a FIFO or a device is refused, never waited on), each opened once, read whole up to
//! a limit ([`read_limited`]; [`MAX_FILE`] for a binary to audit), and refused if it changes
//! while read. Profiles, sources and headers, cache records, a wheel's `RECORD` and every
//! binary `audit` and `package` read go through here (docs/GUARANTEES.md).

use std::fs;
use std::path::Path;

/// `path` opened for reading without blocking: a FIFO opens at once, to be refused by the
/// caller's check of the handle.
fn open_nonblocking(path: &Path) -> std::io::Result<fs::File> {
    let mut options = fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        const O_NONBLOCK: i32 = 0o4000;
        options.custom_flags(O_NONBLOCK);
    }
    options.open(path)
}

/// Opens `path` for reading if it is a regular file. Opened without blocking, then checked
/// on the open handle: a FIFO would block forever, a device (`/dev/zero`, `/dev/stdin`)
/// never end or wait on a terminal, and a check of the path before opening it could be
/// raced. Returns the file and its size.
///
/// A file of the kernel's pseudo file systems (`/proc`, `/sys`, `/dev`, wherever it was
/// reached from: the check is of the open handle's own path) is refused too: it calls itself
/// regular, but its size says nothing of what it yields (`/proc/self/pagemap` reads as
/// gigabytes from a size of 0).
pub fn open_regular(path: &Path) -> std::io::Result<(fs::File, u64)> {
    let file = open_nonblocking(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file or directory (a pipe or a device); only files are read",
        ));
    }
    if let Some(at) = pseudo_file(&file) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is a pseudo file of the kernel (under /proc, /sys or /dev), not a file's bytes; only files are read", at.display()),
        ));
    }
    Ok((file, meta.len()))
}

/// The path the kernel gives an open file, when it lies under `/proc`, `/sys` or `/dev`.
fn pseudo_file(file: &fs::File) -> Option<std::path::PathBuf> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let at = fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
        let pseudo = ["/proc", "/sys", "/dev"]
            .iter()
            .any(|root| at.starts_with(root))
            && !at.starts_with("/dev/shm");
        return pseudo.then_some(at);
    }
    #[allow(unreachable_code)]
    {
        let _ = file;
        None
    }
}

/// The largest source or header a build reads (generated tables run to megabytes): the
/// include scan and the build's snapshot read nothing larger.
pub const MAX_SOURCE: u64 = 256 << 20;

/// Opens the directory `path` (to lock it, say): a directory, or an error saying what is
/// there instead.
pub fn open_dir(path: &Path) -> std::io::Result<fs::File> {
    let file = open_nonblocking(path)?;
    if !file.metadata()?.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a directory",
        ));
    }
    Ok(file)
}

/// The largest file audit reads into memory (a wheel is read through, member by member,
/// whatever its size): bigger than any library NVIDIA or PyTorch ships (libtorch_cuda.so is
/// about 1.5 GB).
pub const MAX_FILE: u64 = 16 << 30;

/// Reads a regular file in full, up to [`MAX_FILE`]. Read, not memory-mapped: a mapped file
/// truncated by another process meanwhile kills the reader with SIGBUS. A file whose size
/// changes while it is read is an error, not a report of half of it.
pub fn read_file(path: &Path) -> std::io::Result<Vec<u8>> {
    let (file, len) = open_regular(path)?;
    read_whole(file, len)
}

/// [`read_file`] with a smaller limit, for a record whose size is known to be small (a cache
/// entry, a probe) or exact: a regular file of at most `limit` bytes, or an error saying why
/// not; never a device or a pipe, whatever a link in its place points to.
pub fn read_limited(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let (file, len) = open_regular(path)?;
    if len > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{len} bytes, over the {limit} expected"),
        ));
    }
    read_whole(file, len)
}

/// [`read_file`] of a file already opened (by [`open_regular`], at its start), `len` bytes
/// long when opened.
pub fn read_whole(file: std::fs::File, len: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    read_into(file, len, &mut bytes)?;
    Ok(bytes)
}

/// [`read_whole`] into `bytes`, replacing what it held: a reader of many files keeps one
/// buffer, whose pages the system then maps and clears once, not once per file.
pub fn read_into(file: std::fs::File, len: u64, bytes: &mut Vec<u8>) -> std::io::Result<()> {
    use std::io::Read;
    if len > MAX_FILE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{len} bytes, over the {MAX_FILE}-byte limit of what audit reads into memory"),
        ));
    }
    #[cfg(unix)]
    if len >= PARALLEL_FROM {
        return read_parallel(&file, len, bytes);
    }
    bytes.clear();
    bytes.reserve_exact(usize::try_from(len).unwrap_or(0));
    file.take(len.saturating_add(1)).read_to_end(bytes)?;
    if bytes.len() as u64 != len {
        return Err(changed(bytes.len() as u64, len));
    }
    Ok(())
}

fn changed(read: u64, len: u64) -> std::io::Error {
    std::io::Error::other(format!(
        "it changed while being read ({read} bytes read, {len} expected); audit it again once nothing writes it"
    ))
}

/// Files from this size on are read in parts on every core.
#[cfg(unix)]
const PARALLEL_FROM: u64 = 64 << 20;

/// [`read_into`] of a large file in parts, one per core, each read at its offset: copying a
/// file out of the page cache (and mapping the pages it lands in) runs at one core's memory
/// bandwidth, a fifth of a second for libtorch_cuda.so's 520 MB, before anything else can
/// start. The buffer is zeroed lazily where it is new (the system's zero pages), so each part
/// maps its own pages. A file shorter than its size when opened fails its part; one that grew
/// has a byte past it: both are "changed while read", as in the one-part read.
#[cfg(unix)]
fn read_parallel(file: &std::fs::File, len: u64, bytes: &mut Vec<u8>) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let size = usize::try_from(len).map_err(std::io::Error::other)?;
    if bytes.capacity() < size {
        *bytes = vec![0u8; size];
    } else {
        bytes.clear();
        bytes.resize(size, 0);
    }
    // Asked of the system once: the question reads the cgroup's files.
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let parts = (*CORES
        .get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get())))
    .clamp(1, 8);
    let part = size.div_ceil(parts).max(1);
    let results: Vec<std::io::Result<()>> = std::thread::scope(|scope| {
        let workers: Vec<_> = bytes
            .chunks_mut(part)
            .enumerate()
            .map(|(i, chunk)| scope.spawn(move || file.read_exact_at(chunk, (i * part) as u64)))
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    for result in results {
        match result {
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                let now = file.metadata().map_or(0, |m| m.len());
                return Err(changed(now.min(len), len));
            }
            other => other?,
        }
    }
    if file.read_at(&mut [0u8; 1], len)? != 0 {
        return Err(changed(len + 1, len));
    }
    Ok(())
}

/// A text file of at most `limit` bytes read a line at a time into `each`, each line cut at
/// `max_line` bytes (the rest of it skipped): memory is a line, whatever the file holds.
/// Refused like [`read_limited`] when it is not a regular file or is larger than `limit`.
pub fn for_each_line(
    path: &Path,
    limit: u64,
    max_line: usize,
    mut each: impl FnMut(&[u8]),
) -> std::io::Result<()> {
    use std::io::{BufRead, Read};
    let (file, len) = open_regular(path)?;
    if len > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{len} bytes, over the {limit} expected"),
        ));
    }
    let mut reader = std::io::BufReader::new(file.take(limit));
    let mut line = Vec::new();
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let (part, end) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (buf.get(..i).unwrap_or_default(), Some(i + 1)),
            None => (buf, None),
        };
        let room = max_line.saturating_sub(line.len());
        line.extend_from_slice(part.get(..room.min(part.len())).unwrap_or_default());
        let used = end.unwrap_or(buf.len());
        reader.consume(used);
        if end.is_some() {
            each(&line);
            line.clear();
        }
    }
    if !line.is_empty() {
        each(&line);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_within_their_limit_are_read() {
        for path in [
            "/dev/zero",
            "/dev/null",
            "/dev/stdin",
            "/proc/self/pagemap",
            "/proc/self/status",
        ] {
            assert!(read_limited(Path::new(path), 1 << 20).is_err(), "{path}");
            assert!(for_each_line(Path::new(path), 1 << 20, 64, |_| {}).is_err());
        }
        let dir = std::env::temp_dir().join(format!("fatkit-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("lines");
        std::fs::write(&file, b"a\nbbbbbbbb\n\nlast").unwrap();
        let mut lines = Vec::new();
        for_each_line(&file, 1 << 20, 4, |l| lines.push(l.to_vec())).unwrap();
        assert_eq!(lines, [&b"a"[..], b"bbbb", b"", b"last"]);
        assert!(read_limited(&file, 3).is_err());
        assert!(for_each_line(&file, 3, 4, |_| {}).is_err());
        assert_eq!(read_limited(&file, 100).unwrap().len(), 16);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file large enough to be read in parts reads as its bytes, in order, into a new
    /// buffer and into one reused from a larger file; one that changed size since it was
    /// opened is refused either way.
    #[cfg(unix)]
    #[test]
    fn a_large_file_read_in_parts_is_its_bytes_and_a_changed_one_is_refused() {
        let dir = std::env::temp_dir().join(format!("fatkit-read-parts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (big, small) = (dir.join("big"), dir.join("small"));
        let pattern = |n: usize, seed: u64| -> Vec<u8> {
            let mut x = seed;
            (0..n)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (x >> 56) as u8
                })
                .collect()
        };
        let sizes = [
            PARALLEL_FROM as usize + 13,
            PARALLEL_FROM as usize + 4096 * 3 + 1,
        ];
        std::fs::write(&big, pattern(sizes[1], 1)).unwrap();
        std::fs::write(&small, pattern(sizes[0], 2)).unwrap();
        let mut buf = Vec::new();
        for (path, seed, size) in [(&big, 1, sizes[1]), (&small, 2, sizes[0])] {
            let (file, len) = open_regular(path).unwrap();
            read_into(file, len, &mut buf).unwrap();
            assert_eq!(buf.len(), size);
            assert!(buf == pattern(size, seed), "{}", path.display());
        }
        for grow in [false, true] {
            let (file, len) = open_regular(&small).unwrap();
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&small)
                .unwrap();
            f.set_len(if grow { len + 100 } else { len - 100 }).unwrap();
            let err = read_whole(file, len).unwrap_err().to_string();
            assert!(err.contains("changed while being read"), "{err}");
            f.set_len(len).unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
