//! A tar reader for container images: ustar, GNU and PAX headers, one entry at a time from any
//! stream, each header checked by its checksum. Only the 512-byte header blocks and the long
//! names (at most [`MAX_NAME`] bytes, a PAX record block as well) are read by it; an entry's
//! data is the caller's to read ([`Reader::read_data`]) or skip, by seeking where the source
//! is a file. The layout is docs/CONTAINER_IMAGES.md's.

use std::io::{self, Read, Seek, SeekFrom};

/// The tar block: every header and every entry's data padded to it.
pub(crate) const BLOCK: u64 = 512;
/// The longest name (a GNU long name, a PAX record block) read: paths are at most 4096
/// bytes on Linux, so a longer one is a crafted header.
const MAX_NAME: u64 = 64 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    HardLink,
    SymLink,
    Directory,
    /// Devices, FIFOs, sparse files: nothing a loader reads as a library.
    Other,
}

/// One entry's header, its long names and PAX records applied.
#[derive(Debug)]
pub(crate) struct Entry {
    /// As written (UTF-8, invalid bytes replaced); not normalised.
    pub path: String,
    pub kind: Kind,
    /// The bytes of data that follow the header.
    pub size: u64,
    /// A link's target, as written.
    pub link: String,
    /// Where its data starts, counted from the start of the stream.
    pub data_at: u64,
}

/// A stream entries are read from: skipping data reads it, or seeks where the source can.
pub(crate) trait Source: Read {
    fn skip(&mut self, n: u64) -> io::Result<()>;
}

/// Any stream (a decompressed layer): skipping reads through.
pub(crate) struct Stream<R>(pub R);

impl<R: Read> Read for Stream<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl<R: Read> Source for Stream<R> {
    fn skip(&mut self, n: u64) -> io::Result<()> {
        let skipped = io::copy(&mut (&mut self.0).take(n), &mut io::sink())?;
        match skipped == n {
            true => Ok(()),
            false => Err(truncated()),
        }
    }
}

/// A file (an image's outer tar): skipping seeks, so that indexing it reads its headers only.
impl Source for std::fs::File {
    fn skip(&mut self, n: u64) -> io::Result<()> {
        let n = i64::try_from(n).map_err(|_| truncated())?;
        self.seek(SeekFrom::Current(n)).map(drop)
    }
}

fn truncated() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "the tar ends inside an entry")
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// What the extension headers before an entry say of it: GNU long names, PAX records.
#[derive(Default)]
struct Extended {
    long_name: Option<String>,
    long_link: Option<String>,
    pax_path: Option<String>,
    pax_link: Option<String>,
    pax_size: Option<u64>,
}

impl Extended {
    /// The data of an extension header of type `flag` (`L`, `K`, `x`) at byte `at`.
    fn add(&mut self, flag: u8, data: &[u8], at: u64) -> io::Result<()> {
        match flag {
            b'L' => self.long_name = Some(text(until_nul(data))),
            b'K' => self.long_link = Some(text(until_nul(data))),
            _ => {
                for (key, value) in pax_records(data, at)? {
                    match key {
                        "path" => self.pax_path = Some(value.to_owned()),
                        "linkpath" => self.pax_link = Some(value.to_owned()),
                        "size" => {
                            self.pax_size = Some(value.parse().map_err(|_| {
                                invalid(format!(
                                    "the tar entry at byte {at}: PAX size {value:?} is not a number"
                                ))
                            })?)
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }
}

/// Reads the entries of a tar one at a time.
pub(crate) struct Reader<S> {
    src: S,
    /// Bytes read or skipped from the start.
    pos: u64,
    /// The current entry's data and padding not yet read or skipped.
    pending: u64,
    done: bool,
}

impl<S: Source> Reader<S> {
    pub(crate) fn new(src: S) -> Reader<S> {
        Reader {
            src,
            pos: 0,
            pending: 0,
            done: false,
        }
    }

    /// The next entry, or `None` at the end (two zero blocks, or the end of the stream at a
    /// block boundary: some writers leave the zero blocks out).
    pub(crate) fn next(&mut self) -> io::Result<Option<Entry>> {
        if self.done {
            return Ok(None);
        }
        self.skip_pending()?;
        let mut ext = Extended::default();
        loop {
            let at = self.pos;
            let mut block = [0u8; BLOCK as usize];
            if !self.read_block(&mut block)? {
                self.done = true;
                return Ok(None);
            }
            if block.iter().all(|&b| b == 0) {
                self.done = true;
                return Ok(None);
            }
            check_sum(&block, at)?;
            let size = number(field(&block, 124, 12), "size", at)?;
            let padded = size.checked_next_multiple_of(BLOCK).ok_or_else(|| {
                invalid(format!(
                    "the tar entry at byte {at} has a size past any file"
                ))
            })?;
            let flag = block[156];
            match flag {
                b'L' | b'K' | b'x' => {
                    let data = self.read_name(size, padded, at)?;
                    ext.add(flag, &data, at)?;
                    continue;
                }
                // A global PAX header: nothing a path or size depends on here.
                b'g' => {
                    self.pending = padded;
                    self.skip_pending()?;
                    continue;
                }
                _ => {}
            }
            let Extended {
                long_name,
                long_link,
                pax_path,
                pax_link,
                pax_size,
            } = ext;
            let name = until_nul(field(&block, 0, 100));
            let posix = field(&block, 257, 6) == b"ustar\0";
            let prefix = until_nul(field(&block, 345, 155));
            let written = if posix && !prefix.is_empty() {
                format!("{}/{}", text(prefix), text(name))
            } else {
                text(name)
            };
            let path = pax_path.or(long_name).unwrap_or(written);
            let link = pax_link
                .or(long_link)
                .unwrap_or_else(|| text(until_nul(field(&block, 157, 100))));
            let mut kind = match flag {
                b'0' | 0 | b'7' => Kind::File,
                b'1' => Kind::HardLink,
                b'2' => Kind::SymLink,
                b'5' => Kind::Directory,
                _ => Kind::Other,
            };
            // Old tars mark a directory by its name alone.
            if kind == Kind::File && flag == 0 && path.ends_with('/') {
                kind = Kind::Directory;
            }
            let size = pax_size.unwrap_or(size);
            // A link's size is not followed by data (POSIX: it is ignored).
            let size = match kind {
                Kind::HardLink | Kind::SymLink => 0,
                _ => size,
            };
            self.pending = size.checked_next_multiple_of(BLOCK).ok_or_else(|| {
                invalid(format!(
                    "the tar entry at byte {at} has a size past any file"
                ))
            })?;
            return Ok(Some(Entry {
                path,
                kind,
                size,
                link,
                data_at: self.pos,
            }));
        }
    }

    /// The current entry's data, `size` bytes of it (the caller checked them against its
    /// limits), into `buf`.
    pub(crate) fn read_data(&mut self, size: u64, buf: &mut Vec<u8>) -> io::Result<()> {
        if size > self.pending {
            return Err(truncated());
        }
        buf.clear();
        let got = (&mut self.src).take(size).read_to_end(buf)? as u64;
        self.pos += got;
        self.pending -= got;
        match got == size {
            true => Ok(()),
            false => Err(truncated()),
        }
    }

    fn skip_pending(&mut self) -> io::Result<()> {
        if self.pending > 0 {
            self.src.skip(self.pending)?;
            self.pos = self.pos.saturating_add(self.pending);
            self.pending = 0;
        }
        Ok(())
    }

    /// One block, or false at the end of the stream; a partial block is a truncated tar.
    fn read_block(&mut self, block: &mut [u8; BLOCK as usize]) -> io::Result<bool> {
        let mut got = 0;
        while got < block.len() {
            let Some(rest) = block.get_mut(got..) else {
                break;
            };
            match self.src.read(rest) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.pos += got as u64;
        match got {
            0 => Ok(false),
            n if n == block.len() => Ok(true),
            _ => Err(truncated()),
        }
    }

    fn read_name(&mut self, size: u64, padded: u64, at: u64) -> io::Result<Vec<u8>> {
        if size > MAX_NAME {
            return Err(invalid(format!(
                "the tar entry at byte {at}: a long name or PAX header of {size} bytes (at most {MAX_NAME})"
            )));
        }
        self.pending = padded;
        let mut data = Vec::new();
        self.read_data(size, &mut data)?;
        self.skip_pending()?;
        Ok(data)
    }
}

fn field(block: &[u8; BLOCK as usize], at: usize, len: usize) -> &[u8] {
    block.get(at..at + len).unwrap_or_default()
}

fn until_nul(bytes: &[u8]) -> &[u8] {
    split_at_byte(bytes, 0).map_or(bytes, |(left, _)| left)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The header's checksum: the sum of its bytes with the checksum field read as spaces
/// (unsigned, as POSIX; some old writers summed signed bytes, also accepted).
fn check_sum(block: &[u8; BLOCK as usize], at: u64) -> io::Result<()> {
    let want = number(field(block, 148, 8), "checksum", at)?;
    let (mut unsigned, mut signed) = (0u64, 0i64);
    for (i, &b) in block.iter().enumerate() {
        let b = if (148..156).contains(&i) { b' ' } else { b };
        unsigned += u64::from(b);
        signed += i64::from(b as i8);
    }
    if want == unsigned || i64::try_from(want).is_ok_and(|w| w == signed) {
        return Ok(());
    }
    Err(invalid(format!(
        "no tar header at byte {at} (its checksum does not match)"
    )))
}

/// A numeric field: octal digits (space or NUL padded), or base-256 when its first byte has
/// the high bit (GNU, for sizes past 8 GiB).
fn number(bytes: &[u8], what: &str, at: u64) -> io::Result<u64> {
    let bad = || {
        invalid(format!(
            "the tar header at byte {at}: its {what} is not a number"
        ))
    };
    if let Some((&first, rest)) = bytes.split_first() {
        if first & 0x80 != 0 {
            if first & 0x40 != 0 {
                return Err(bad());
            }
            let mut n = u64::from(first & 0x3f);
            for &b in rest {
                n = n
                    .checked_mul(256)
                    .and_then(|n| n.checked_add(u64::from(b)))
                    .ok_or_else(bad)?;
            }
            return Ok(n);
        }
    }
    let digits: &[u8] = {
        let t = until_nul(bytes).trim_ascii_start();
        split_at_byte(t, b' ').map_or(t, |(left, _)| left)
    };
    if digits.is_empty() {
        return Ok(0);
    }
    let mut n = 0u64;
    for &d in digits {
        if !(b'0'..=b'7').contains(&d) {
            return Err(bad());
        }
        n = n
            .checked_mul(8)
            .and_then(|n| n.checked_add(u64::from(d - b'0')))
            .ok_or_else(bad)?;
    }
    Ok(n)
}

/// `bytes` split around the first `byte` (left out), if there is one.
fn split_at_byte(bytes: &[u8], byte: u8) -> Option<(&[u8], &[u8])> {
    let at = bytes.iter().position(|&b| b == byte)?;
    let (left, right) = bytes.split_at_checked(at)?;
    Some((left, right.get(1..)?))
}

/// PAX records: `LEN KEY=VALUE\n`, LEN counting the whole record.
fn pax_records(data: &[u8], at: u64) -> io::Result<Vec<(&str, &str)>> {
    let bad = || {
        invalid(format!(
            "the tar entry at byte {at}: a malformed PAX record"
        ))
    };
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let (len, _) = split_at_byte(rest, b' ').ok_or_else(bad)?;
        let len: usize = std::str::from_utf8(len)
            .ok()
            .and_then(|l| l.parse().ok())
            .ok_or_else(bad)?;
        let (whole, after) = rest.split_at_checked(len).ok_or_else(bad)?;
        let (_, record) = split_at_byte(whole, b' ').ok_or_else(bad)?;
        let record = record.strip_suffix(b"\n").ok_or_else(bad)?;
        let (key, value) = split_at_byte(record, b'=').ok_or_else(bad)?;
        let key = std::str::from_utf8(key).map_err(|_| bad())?;
        let value = std::str::from_utf8(value).map_err(|_| bad())?;
        out.push((key, value));
        rest = after;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(bytes: &[u8]) -> io::Result<Vec<(String, Kind, u64, String)>> {
        let mut r = Reader::new(Stream(bytes));
        let mut out = Vec::new();
        while let Some(e) = r.next()? {
            out.push((e.path, e.kind, e.size, e.link));
        }
        Ok(out)
    }

    /// Tars written by the tar crate (ustar, GNU long names, PAX) read back as written.
    #[test]
    fn reads_what_a_tar_writer_writes() {
        let mut b = ::tar::Builder::new(Vec::new());
        let long = format!("usr/lib/{}/libx.so", "d".repeat(200));
        let mut h = ::tar::Header::new_gnu();
        h.set_size(5);
        h.set_mode(0o644);
        b.append_data(&mut h, &long, &b"hello"[..]).unwrap();
        let mut h = ::tar::Header::new_ustar();
        h.set_entry_type(::tar::EntryType::Symlink);
        h.set_size(0);
        b.append_link(&mut h, "usr/lib/liby.so", "libx.so").unwrap();
        let mut h = ::tar::Header::new_ustar();
        h.set_entry_type(::tar::EntryType::Directory);
        h.set_size(0);
        b.append_data(&mut h, "opt/", io::empty()).unwrap();
        let bytes = b.into_inner().unwrap();
        let got = entries(&bytes).unwrap();
        assert_eq!(
            got,
            vec![
                (long, Kind::File, 5, String::new()),
                ("usr/lib/liby.so".into(), Kind::SymLink, 0, "libx.so".into()),
                ("opt/".into(), Kind::Directory, 0, String::new()),
            ]
        );
    }

    #[test]
    fn a_bad_header_is_an_error_not_an_entry() {
        let mut b = ::tar::Builder::new(Vec::new());
        let mut h = ::tar::Header::new_ustar();
        h.set_size(3);
        b.append_data(&mut h, "a", &b"abc"[..]).unwrap();
        let mut bytes = b.into_inner().unwrap();
        bytes[10] ^= 1;
        let e = entries(&bytes).unwrap_err();
        assert!(e.to_string().contains("checksum"), "{e}");
        // Cut inside the data: truncated.
        let mut b = ::tar::Builder::new(Vec::new());
        let mut h = ::tar::Header::new_ustar();
        h.set_size(3000);
        b.append_data(&mut h, "a", &vec![7u8; 3000][..]).unwrap();
        let bytes = b.into_inner().unwrap();
        let mut r = Reader::new(Stream(&bytes[..1024]));
        let first = r.next().unwrap().unwrap();
        let mut buf = Vec::new();
        assert!(r.read_data(first.size, &mut buf).is_err());
    }

    /// Every cut and every flipped byte of a small tar is an entry list or an error: never a
    /// panic, and never more work than the bytes given.
    #[test]
    fn any_damage_is_an_error_or_entries() {
        let mut b = ::tar::Builder::new(Vec::new());
        for (i, name) in ["a", &"n".repeat(150), "c/d"].iter().enumerate() {
            let mut h = ::tar::Header::new_gnu();
            h.set_size(i as u64 * 700);
            b.append_data(&mut h, name, &vec![1u8; i * 700][..])
                .unwrap();
        }
        let bytes = b.into_inner().unwrap();
        for cut in (0..bytes.len()).step_by(97) {
            let _ = entries(&bytes[..cut]);
        }
        for at in (0..bytes.len()).step_by(13) {
            for v in [0u8, 0x80, 0xff, b'7', b'L', b'x'] {
                let mut damaged = bytes.clone();
                damaged[at] = v;
                let _ = entries(&damaged);
            }
        }
    }

    #[test]
    fn numbers_read_octal_and_base_256() {
        assert_eq!(number(b"0000644\0", "mode", 0).unwrap(), 0o644);
        assert_eq!(number(b"  17 \0", "size", 0).unwrap(), 0o17);
        let mut big = [0u8; 12];
        big[0] = 0x80;
        big[11] = 1;
        big[10] = 2;
        assert_eq!(number(&big, "size", 0).unwrap(), 0x201);
        assert!(number(b"9", "size", 0).is_err());
        assert!(number(&[0xff; 12], "size", 0).is_err());
    }
}
