//! Zip files (wheels), read member by member: only a zip whose end records were validated
//! is handed to the zip crate, and what it reads and inflates is charged to the input's
//! budget.

use std::io::Read;

use memchr::memmem;

use crate::error::{Error, ErrorKind};
use crate::{Budget, Limits};

/// One member of a zip file, inflated.
#[derive(Debug)]
pub struct ZipMember<'buf> {
    pub name: &'buf str,
    /// Offset of the member's local header in the zip file.
    pub offset: u64,
    pub data: &'buf [u8],
}

/// Calls `each` with every file member of the zip file `data`, inflated one at a time into
/// one buffer: memory is the largest member, not the sum. Problems with a member (too large,
/// corrupt) are returned with the others' results; a zip that cannot be opened is one error.
/// Everything read and inflated is charged to `budget`, nested zips' included.
pub fn zip_members(
    data: &[u8],
    limits: &Limits,
    budget: &Budget,
    each: impl FnMut(ZipMember<'_>),
) -> Vec<Error> {
    zip_members_of(std::io::Cursor::new(data), limits, budget, each)
}

/// The longest end-of-central-directory record: 22 bytes and a comment of at most 65,535.
const MAX_END_RECORD: u64 = 22 + 65_535;

/// Whether the zip file `reader` (of `len` bytes) ends as a zip file does: an end-of-central-
/// directory record within its last [`MAX_END_RECORD`] bytes whose comment runs exactly to the
/// end (no other record in it), naming a central directory that lies before it, or a ZIP64
/// locator just before it. Only such a file is handed to the zip crate, which otherwise tries
/// every earlier record it finds, each a search of the file.
fn end_records<R: Read + std::io::Seek>(reader: &mut R, len: u64) -> Result<(), String> {
    use std::io::SeekFrom;
    let tail_len = len.min(MAX_END_RECORD);
    let start = len - tail_len;
    let mut tail = vec![0u8; usize::try_from(tail_len).unwrap_or(0)];
    reader
        .seek(SeekFrom::Start(start))
        .and_then(|_| reader.read_exact(&mut tail))
        .map_err(|e| format!("cannot read its end: {e}"))?;
    reader
        .seek(SeekFrom::Start(0))
        .map_err(|e| format!("cannot read it: {e}"))?;
    let u16_at = |at: usize| crate::bytes::u16_at(&tail, at).map(u64::from);
    let u32_at = |at: usize| crate::bytes::u32_at(&tail, at).map(u64::from);
    let mut records = memmem::rfind_iter(&tail, b"PK\x05\x06");
    let Some(at) =
        records.find(|&at| u16_at(at + 20).is_some_and(|c| at as u64 + 22 + c == tail_len))
    else {
        return Err("no end-of-central-directory record ends it".to_owned());
    };
    if memmem::find(tail.get(at + 4..).unwrap_or_default(), b"PK\x05\x06").is_some() {
        return Err("its end record's comment holds another end record".to_owned());
    }
    let (Some(entries), Some(cd_size), Some(cd_offset)) =
        (u16_at(at + 10), u32_at(at + 12), u32_at(at + 16))
    else {
        return Err("its end record is cut short".to_owned());
    };
    let record_at = start + at as u64;
    if entries == 0xFFFF || cd_size == 0xFFFF_FFFF || cd_offset == 0xFFFF_FFFF {
        let locator = at.checked_sub(20).and_then(|l| tail.get(l..l + 4));
        return match locator {
            Some(sig) if sig == b"PK\x06\x07" => Ok(()),
            _ => Err("its ZIP64 end record has no locator before it".to_owned()),
        };
    }
    if cd_offset.saturating_add(cd_size) > record_at {
        return Err("its end record names a central directory past it".to_owned());
    }
    // The central directory ends where the end record starts, and opens with a header.
    if entries > 0 {
        let mut head = [0u8; 4];
        let opens = record_at
            .checked_sub(cd_size)
            .and_then(|cd| reader.seek(SeekFrom::Start(cd)).ok())
            .and_then(|_| reader.read_exact(&mut head).ok())
            .is_some_and(|()| head == *b"PK\x01\x02");
        reader
            .seek(SeekFrom::Start(0))
            .map_err(|e| format!("cannot read it: {e}"))?;
        if !opens {
            return Err(
                "its end record names a central directory that is not before it".to_owned(),
            );
        }
    }
    Ok(())
}

/// What the zip crate reads, charged to the input's budget: a byte read costs one, a seek an
/// item; once the budget is spent every read fails, so no shape of zip costs more. While it
/// looks for the central directory (`ZipArchive::new`), `opening` caps it besides: a real zip
/// is opened reading its end and its central directory, a few times at most.
struct Charged<'b, R> {
    inner: R,
    budget: &'b Budget,
    opening: &'b std::cell::Cell<Option<u64>>,
}

impl<R> Charged<'_, R> {
    fn charge(&self, units: u64) -> std::io::Result<()> {
        if let Some(left) = self.opening.get() {
            match left.checked_sub(units) {
                Some(left) => self.opening.set(Some(left)),
                None => {
                    return Err(std::io::Error::other(
                        "opening it reads more than a zip's end records and central directory take",
                    ))
                }
            }
        }
        if self.budget.work("the zip's records", units) {
            Ok(())
        } else {
            Err(std::io::Error::other(
                self.budget.spent().unwrap_or_default(),
            ))
        }
    }
}

impl<R: Read> Read for Charged<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.charge(n as u64).map(|()| n)
    }
}

impl<R: std::io::Seek> std::io::Seek for Charged<'_, R> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        self.charge(crate::work_budget::ITEM)?;
        self.inner.seek(to)
    }
}

/// The zip file `reader`, its end records validated ([`end_records`]), opened by the zip crate
/// through a [`Charged`] reader capped by `opening` while it looks for its central directory.
fn open<'b, R: std::io::Read + std::io::Seek>(
    mut reader: R,
    budget: &'b Budget,
    opening: &'b std::cell::Cell<Option<u64>>,
) -> Result<zip::ZipArchive<Charged<'b, R>>, Error> {
    let len = reader.seek(std::io::SeekFrom::End(0)).unwrap_or(0);
    if let Err(why) = end_records(&mut reader, len) {
        return Err(Error::new(
            0u64,
            ErrorKind::Archive(format!("zip: {why}; not read as a zip")),
        ));
    }
    // Its end, then its central directory, read a few times over at most.
    opening.set(Some(len.saturating_mul(4).saturating_add(1 << 20)));
    let charged = Charged {
        inner: reader,
        budget,
        opening,
    };
    let opened = zip::ZipArchive::new(charged);
    opening.set(None);
    opened.map_err(|e| match budget.spent() {
        Some(why) => Error::new(0u64, ErrorKind::OverBudget(why)),
        None => Error::new(0u64, ErrorKind::Archive(format!("zip: {e}"))),
    })
}

/// [`zip_members`] of a zip file read through `reader` (a `File`: the zip itself is then never
/// in memory, only the member being read).
pub(crate) fn zip_members_of<R: std::io::Read + std::io::Seek>(
    reader: R,
    limits: &Limits,
    budget: &Budget,
    mut each: impl FnMut(ZipMember<'_>),
) -> Vec<Error> {
    let opening = std::cell::Cell::new(None);
    let mut errors = Vec::new();
    let mut zip = match open(reader, budget, &opening) {
        Ok(z) => z,
        Err(e) => {
            errors.push(e);
            return errors;
        }
    };
    let mut buf = Vec::new();
    for idx in 0..zip.len() {
        if budget.is_spent() {
            // Spent here or in a nested zip: nothing more is read.
            errors.push(Error::new(
                0u64,
                ErrorKind::OverBudget(budget.spent().unwrap_or_default()),
            ));
            break;
        }
        let mut file = match zip.by_index(idx) {
            Ok(file) => file,
            Err(e) => {
                errors.push(Error::new(
                    0u64,
                    ErrorKind::Archive(format!("zip member {idx}: {e}")),
                ));
                continue;
            }
        };
        if file.is_dir() {
            continue;
        }
        let name = crate::printable(file.name()).into_owned();
        let offset = file.header_start();
        if file.size() > limits.max_member {
            errors.push(Error::new(
                offset,
                ErrorKind::TooLarge {
                    what: "zip member",
                    size: file.size(),
                    limit: limits.max_member,
                },
            ));
            continue;
        }
        // What it claims is charged before anything is allocated for it.
        if !budget.inflate("the zip's members", file.size()) {
            continue;
        }
        buf.clear();
        // Exactly the member: growing by doubling would hold twice the largest one.
        buf.reserve_exact(usize::try_from(file.size()).unwrap_or(0));
        // The declared size may lie: no more than it is read.
        let declared = file.size();
        let read = (&mut file)
            .take(declared.saturating_add(1))
            .read_to_end(&mut buf);
        match read {
            Ok(_) if buf.len() as u64 > file.size() => errors.push(Error::new(
                offset,
                ErrorKind::Archive(format!(
                    "zip member {name}: inflates past the {} bytes it declares",
                    file.size()
                )),
            )),
            Ok(_) => each(ZipMember {
                name: &name,
                offset,
                data: &buf,
            }),
            Err(e) => errors.push(Error::new(
                offset,
                ErrorKind::Archive(format!("zip member {name}: {e}")),
            )),
        }
    }
    errors
}
