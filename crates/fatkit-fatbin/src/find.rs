//! Finding fatbin containers, cubins and PTX in any file (docs/FATBIN_FORMAT.md sections 1 and 4):
//! a standalone `.fatbin`, cubin or PTX; host ELF sections; `ar` and zip members; and containers
//! or cubins embedded anywhere else, by a validated scan of every byte offset.

use std::borrow::Cow;
use std::io::Read;
use std::ops::Range;

use memchr::memmem;
use object::read::archive::ArchiveFile;
use object::{Object, ObjectSection};
use serde::Serialize;

use crate::container::{Container, Strictness, MAGIC_BYTES};
use crate::cubin;
use crate::error::{Error, ErrorKind};
use crate::Limits;

/// ELF sections nvcc puts containers in.
pub const FATBIN_SECTIONS: [&str; 2] = [".nv_fatbin", "__nv_relfatbin"];

/// Where a container or cubin was found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// The file is this container, cubin or PTX.
    File,
    /// In an ELF section that holds device code (`.nv_fatbin`, `__nv_relfatbin`); cuobjdump sees these.
    Section(String),
    /// Found by scanning bytes outside any such section; cuobjdump does not see these.
    Scan,
}

/// Something found in a buffer.
#[derive(Debug)]
pub enum Item<'data> {
    Container(Container<'data>),
    /// A device ELF, whole.
    Cubin(&'data [u8]),
    /// PTX text, whole.
    Ptx(&'data [u8]),
    /// A member of an `ar` archive or a zip file, to be looked into in turn.
    Member {
        name: String,
        data: Cow<'data, [u8]>,
    },
}

#[derive(Debug)]
pub struct Hit<'data> {
    /// Byte offset in the buffer searched (for members: of the member's header or local entry).
    pub offset: u64,
    pub origin: Origin,
    pub item: Item<'data>,
}

/// What kind of file a buffer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    Fatbin,
    Cubin,
    Ptx,
    Elf,
    Archive,
    Zip,
    Other,
}

/// Everything found in one buffer, and what could not be read.
#[derive(Debug)]
pub struct Findings<'data> {
    pub format: Format,
    pub hits: Vec<Hit<'data>>,
    /// Problems that did not stop the search (a malformed section, a bad member).
    pub errors: Vec<Error>,
}

/// Searches one buffer. Never panics; problems land in `errors`.
pub fn find<'data>(data: &'data [u8], limits: &Limits) -> Findings<'data> {
    let mut f = Findings {
        format: Format::Other,
        hits: Vec::new(),
        errors: Vec::new(),
    };
    if data.starts_with(&MAGIC_BYTES) {
        f.format = Format::Fatbin;
        containers_in(data, 0..data.len(), Origin::File, &mut f);
        return f;
    }
    if cubin::is_cubin(data) {
        f.format = Format::Cubin;
        f.hits.push(Hit {
            offset: 0,
            origin: Origin::File,
            item: Item::Cubin(data),
        });
        return f;
    }
    if data.starts_with(b"!<arch>\n") || data.starts_with(b"!<thin>\n") {
        f.format = Format::Archive;
        archive_members(data, &mut f);
        return f;
    }
    if data.starts_with(b"PK\x03\x04") {
        f.format = Format::Zip;
        zip_members(data, limits, &mut f);
        return f;
    }
    let mut covered: Vec<Range<usize>> = Vec::new();
    if data.starts_with(b"\x7fELF") {
        f.format = Format::Elf;
        match object::File::parse(data) {
            Ok(file) => {
                for section in file.sections() {
                    let Ok(name) = section.name() else { continue };
                    if !FATBIN_SECTIONS.contains(&name) {
                        continue;
                    }
                    let Some((start, size)) = section.file_range() else {
                        continue;
                    };
                    let (Ok(start), Ok(size)) = (usize::try_from(start), usize::try_from(size))
                    else {
                        continue;
                    };
                    let Some(end) = start.checked_add(size).filter(|&e| e <= data.len()) else {
                        f.errors.push(Error::new(
                            start,
                            ErrorKind::Truncated {
                                what: "ELF section",
                                needed: size as u64,
                                available: data.len().saturating_sub(start) as u64,
                            },
                        ));
                        continue;
                    };
                    containers_in(data, start..end, Origin::Section(name.to_owned()), &mut f);
                    covered.push(start..end);
                }
            }
            Err(e) => f
                .errors
                .push(Error::new(0u64, ErrorKind::Elf(format!("host ELF: {e}")))),
        }
    } else if looks_like_ptx(data) {
        f.format = Format::Ptx;
        f.hits.push(Hit {
            offset: 0,
            origin: Origin::File,
            item: Item::Ptx(data),
        });
        return f;
    }
    scan(data, &mut covered, &mut f);
    f
}

fn looks_like_ptx(data: &[u8]) -> bool {
    let head = data.get(..4096).unwrap_or(data);
    memmem::find(head, b".version").is_some() && memmem::find(head, b".target").is_some()
}

/// Containers back to back (on 8-byte boundaries, zero padding between) in `range`.
fn containers_in<'data>(
    data: &'data [u8],
    range: Range<usize>,
    origin: Origin,
    f: &mut Findings<'data>,
) {
    let Some(region) = data.get(range.clone()) else {
        return;
    };
    let mut at = 0;
    while at < region.len() {
        let Some(next) =
            memmem::find(region.get(at..).unwrap_or_default(), &MAGIC_BYTES).map(|n| n + at)
        else {
            if region
                .get(at..)
                .is_some_and(|rest| rest.iter().any(|&b| b != 0))
            {
                f.errors.push(Error::invalid(
                    range.start + at,
                    "bytes after the last container",
                    0,
                ));
            }
            return;
        };
        if region
            .get(at..next)
            .is_some_and(|gap| gap.iter().any(|&b| b != 0))
        {
            f.errors.push(Error::invalid(
                range.start + at,
                "bytes between containers",
                (next - at) as u64,
            ));
        }
        let Some(rest) = region.get(next..) else {
            return;
        };
        match Container::parse(rest, Strictness::AnyKind) {
            Ok(c) => {
                f.hits.push(Hit {
                    offset: (range.start + next) as u64,
                    origin: origin.clone(),
                    item: Item::Container(c),
                });
                at = next + c.len().max(1);
            }
            Err(e) => {
                f.errors.push(e.shifted((range.start + next) as u64));
                at = next + 1;
            }
        }
        at = at.next_multiple_of(8);
    }
}

/// The validated scan: containers anywhere outside `covered`, then bare cubins outside every
/// container.
fn scan<'data>(data: &'data [u8], covered: &mut Vec<Range<usize>>, f: &mut Findings<'data>) {
    covered.sort_by_key(|r| r.start);
    let inside = |ranges: &[Range<usize>], pos: usize| {
        let idx = ranges.partition_point(|r| r.start <= pos);
        idx > 0 && ranges.get(idx - 1).is_some_and(|r| r.contains(&pos))
    };
    let mut found: Vec<Range<usize>> = Vec::new();
    let mut resume = 0;
    for pos in memmem::find_iter(data, &MAGIC_BYTES) {
        if pos < resume || inside(covered, pos) {
            continue;
        }
        let Some(rest) = data.get(pos..) else { break };
        if let Ok(c) = Container::parse(rest, Strictness::KnownKindsOnly) {
            f.hits.push(Hit {
                offset: pos as u64,
                origin: Origin::Scan,
                item: Item::Container(c),
            });
            found.push(pos..pos + c.len());
            resume = pos + c.len();
        }
    }
    covered.extend(found);
    covered.sort_by_key(|r| r.start);
    let mut resume = 0;
    for pos in memmem::find_iter(data, b"\x7fELF\x02\x01") {
        if pos == 0 || pos < resume || inside(covered, pos) {
            continue;
        }
        let Some(rest) = data.get(pos..) else { break };
        if !cubin::is_cubin(rest) {
            continue;
        }
        if let Some(size) = cubin::elf_size(rest).filter(|&n| n <= rest.len()) {
            if let (Some(image), Ok(_)) = (rest.get(..size), cubin::inspect(rest)) {
                f.hits.push(Hit {
                    offset: pos as u64,
                    origin: Origin::Scan,
                    item: Item::Cubin(image),
                });
                resume = pos + size;
            }
        }
    }
}

fn archive_members<'data>(data: &'data [u8], f: &mut Findings<'data>) {
    let archive = match ArchiveFile::parse(data) {
        Ok(a) => a,
        Err(e) => {
            return f
                .errors
                .push(Error::new(0u64, ErrorKind::Archive(e.to_string())))
        }
    };
    for member in archive.members() {
        match member.and_then(|m| Ok((m.name().to_vec(), m.file_range(), m.data(data)?))) {
            Ok((name, (offset, _), bytes)) => f.hits.push(Hit {
                offset,
                origin: Origin::File,
                item: Item::Member {
                    name: String::from_utf8_lossy(&name).into_owned(),
                    data: Cow::Borrowed(bytes),
                },
            }),
            Err(e) => f
                .errors
                .push(Error::new(0u64, ErrorKind::Archive(e.to_string()))),
        }
    }
}

fn zip_members<'data>(data: &'data [u8], limits: &Limits, f: &mut Findings<'data>) {
    let mut zip = match zip::ZipArchive::new(std::io::Cursor::new(data)) {
        Ok(z) => z,
        Err(e) => {
            return f
                .errors
                .push(Error::new(0u64, ErrorKind::Archive(format!("zip: {e}"))))
        }
    };
    for idx in 0..zip.len() {
        let mut file = match zip.by_index(idx) {
            Ok(file) => file,
            Err(e) => {
                f.errors.push(Error::new(
                    0u64,
                    ErrorKind::Archive(format!("zip member {idx}: {e}")),
                ));
                continue;
            }
        };
        if file.is_dir() {
            continue;
        }
        let name = file.name().to_owned();
        let offset = file.header_start();
        if file.size() > limits.max_member {
            f.errors.push(Error::new(
                offset,
                ErrorKind::TooLarge {
                    what: "zip member",
                    size: file.size(),
                    limit: limits.max_member,
                },
            ));
            continue;
        }
        let mut bytes = Vec::new();
        match (&mut file)
            .take(limits.max_member.saturating_add(1))
            .read_to_end(&mut bytes)
        {
            Ok(_) if bytes.len() as u64 > limits.max_member => f.errors.push(Error::new(
                offset,
                ErrorKind::TooLarge {
                    what: "zip member",
                    size: bytes.len() as u64,
                    limit: limits.max_member,
                },
            )),
            Ok(_) => f.hits.push(Hit {
                offset,
                origin: Origin::File,
                item: Item::Member {
                    name,
                    data: Cow::Owned(bytes),
                },
            }),
            Err(e) => f.errors.push(Error::new(
                offset,
                ErrorKind::Archive(format!("zip member {name}: {e}")),
            )),
        }
    }
}
