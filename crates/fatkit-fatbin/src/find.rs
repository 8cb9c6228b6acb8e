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
use crate::error::{Error, ErrorKind};
use crate::Limits;
use crate::{cubin, ptx};

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
    /// Not a file: a directory whose files were read (by the caller; this crate does no I/O).
    Directory,
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

/// Searches one buffer. Never panics; problems land in `errors`. A zip file's members are not
/// read here: [`zip_members`] reads them one at a time.
pub fn find(data: &[u8]) -> Findings<'_> {
    find_named("", data)
}

/// Extensions of files that hold source, documentation or data, never PTX: such a file is
/// device code only when a container or cubin is found in it.
const NOT_PTX: &[&str] = &[
    "py", "pyi", "pyx", "pxd", "pyc", "txt", "md", "rst", "json", "yaml", "yml", "toml", "cfg",
    "ini", "h", "hh", "hpp", "hxx", "cuh", "cu", "c", "cc", "cpp", "cxx", "inl", "inc", "html",
    "htm", "js", "css", "xml", "csv", "sh", "bat", "cmake", "in", "pc", "typed", "tex", "license",
];

/// Whether a file named `name` (a path; only its extension counts) may be PTX text.
pub fn may_hold_ptx(name: &str) -> bool {
    let file = name.rsplit(['/', '\\']).next().unwrap_or(name);
    match file.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => {
            !NOT_PTX.contains(&ext.to_ascii_lowercase().as_str())
        }
        _ => true,
    }
}

/// [`find`] for a file or member named `name`: text named as source or documentation
/// (`*.py`, `*.txt`, [`may_hold_ptx`]) is never taken for PTX.
pub fn find_named<'data>(name: &str, data: &'data [u8]) -> Findings<'data> {
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
    } else if may_hold_ptx(name) && ptx::is_ptx(data) {
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
        match Container::parse_walk(rest, Strictness::AnyKind) {
            Ok(c) => {
                f.hits.push(Hit {
                    offset: (range.start + next) as u64,
                    origin: origin.clone(),
                    item: Item::Container(c),
                });
                at = next + c.len().max(1);
            }
            Err((e, walked)) => {
                f.errors.push(e.shifted((range.start + next) as u64));
                // Past the entries the failed parse found valid: linear, not quadratic.
                at = next + walked.max(1);
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
    for pos in find_outside(data, covered, &MAGIC_BYTES) {
        if pos < resume || inside(covered, pos) {
            continue;
        }
        let Some(rest) = data.get(pos..) else { break };
        match Container::parse_walk(rest, Strictness::KnownKindsOnly) {
            Ok(c) => {
                f.hits.push(Hit {
                    offset: pos as u64,
                    origin: Origin::Scan,
                    item: Item::Container(c),
                });
                found.push(pos..pos + c.len());
                resume = pos + c.len();
            }
            // Magics inside the entries a failed parse walked are not tried again.
            Err((_, walked)) => resume = pos + walked,
        }
    }
    covered.extend(found);
    covered.sort_by_key(|r| r.start);
    let mut resume = 0;
    for pos in find_outside(data, covered, b"\x7fELF\x02\x01") {
        if pos == 0 || pos < resume || inside(covered, pos) {
            continue;
        }
        let Some(rest) = data.get(pos..) else { break };
        if !cubin::is_cubin(rest) {
            continue;
        }
        // A candidate whose tables lie in the file is skipped past them whatever it turns out
        // to be: candidates whose section tables overlap (each other, or the next header)
        // would otherwise each walk the same table, quadratic in the file's size.
        if let Some(end) = cubin::tables_end(rest).filter(|&end| end <= rest.len()) {
            resume = resume.max(pos + end.max(1));
        }
        let Some(image) = cubin::elf_size(rest).and_then(|n| rest.get(..n)) else {
            continue;
        };
        // Read within its own extent, and skipped whole whether it is a cubin or not: what
        // a candidate costs is bounded by the bytes it claims, each claimed once.
        resume = resume.max(pos + image.len().max(1));
        if cubin::inspect(image).is_ok() {
            f.hits.push(Hit {
                offset: pos as u64,
                origin: Origin::Scan,
                item: Item::Cubin(image),
            });
        }
    }
}

/// Every offset of `needle` that starts outside the sorted, disjoint-or-not `covered` ranges:
/// only the gaps are searched (in a large library the sections cover most of the file).
fn find_outside(data: &[u8], covered: &[Range<usize>], needle: &[u8]) -> Vec<usize> {
    let finder = memmem::Finder::new(needle);
    let mut out = Vec::new();
    let mut from = 0;
    let search = |start: usize, end: usize, out: &mut Vec<usize>| {
        // A match may start in the gap and run into the covered range: search a little past.
        let end = (end + needle.len().saturating_sub(1)).min(data.len());
        if let Some(gap) = data.get(start..end) {
            out.extend(
                crate::par::find_all_with(gap, &finder)
                    .into_iter()
                    .map(|at| start + at),
            );
        }
    };
    for r in covered {
        if r.start > from {
            search(from, r.start, &mut out);
        }
        from = from.max(r.end);
    }
    if from < data.len() {
        search(from, data.len(), &mut out);
    }
    out
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
                    name: crate::printable(&String::from_utf8_lossy(&name)).into_owned(),
                    data: Cow::Borrowed(bytes),
                },
            }),
            Err(e) => f
                .errors
                .push(Error::new(0u64, ErrorKind::Archive(e.to_string()))),
        }
    }
}

/// What the zip members of one input may still inflate to, shared by every level of nested
/// zips ([`Limits::inflate_ratio`]): once spent, no further member is read and the input is
/// refused ([`Inflated::refusal`]), so a zip bomb costs seconds, not its terabytes.
#[derive(Debug)]
pub struct Inflated {
    limit: u64,
    ratio: u64,
    floor: u64,
    left: std::sync::atomic::AtomicU64,
    spent: std::sync::atomic::AtomicBool,
}

impl Inflated {
    /// The budget of an input of `input_len` bytes.
    pub fn for_input(limits: &Limits, input_len: u64) -> Inflated {
        let limit = input_len
            .saturating_mul(limits.inflate_ratio)
            .max(limits.inflate_floor);
        Inflated {
            limit,
            ratio: limits.inflate_ratio,
            floor: limits.inflate_floor,
            left: std::sync::atomic::AtomicU64::new(limit),
            spent: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn left(&self) -> u64 {
        self.left.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Takes `n` bytes; false (and spent for good) when fewer are left.
    fn take(&self, n: u64) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let ok = self
            .left
            .fetch_update(Relaxed, Relaxed, |left| left.checked_sub(n))
            .is_ok();
        if !ok {
            self.spent.store(true, Relaxed);
        }
        ok
    }

    /// Why the input is refused, once the budget is spent.
    pub fn refusal(&self) -> Option<String> {
        self.spent
            .load(std::sync::atomic::Ordering::Relaxed)
            .then(|| {
                format!(
                    "its zip members inflate to more than {} bytes in all, nested zips included ({}x its size, at least {}); refused as a zip bomb; if it is genuine, unzip it and audit the directory",
                    self.limit, self.ratio, self.floor
                )
            })
    }
}

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
pub fn zip_members(
    data: &[u8],
    limits: &Limits,
    budget: &Inflated,
    each: impl FnMut(ZipMember<'_>),
) -> Vec<Error> {
    zip_members_of(std::io::Cursor::new(data), limits, budget, each)
}

/// [`zip_members`] of a zip file read through `reader` (a `File`: the zip itself is then never
/// in memory, only the member being read).
pub fn zip_members_of<R: std::io::Read + std::io::Seek>(
    reader: R,
    limits: &Limits,
    budget: &Inflated,
    mut each: impl FnMut(ZipMember<'_>),
) -> Vec<Error> {
    let mut errors = Vec::new();
    let mut zip = match zip::ZipArchive::new(reader) {
        Ok(z) => z,
        Err(e) => {
            errors.push(Error::new(0u64, ErrorKind::Archive(format!("zip: {e}"))));
            return errors;
        }
    };
    let mut buf = Vec::new();
    for idx in 0..zip.len() {
        if budget.refusal().is_some() {
            // Spent here or in a nested zip: nothing more is inflated.
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
        if file.size() > budget.left() {
            budget.take(file.size());
            break;
        }
        buf.clear();
        // Exactly the member: growing by doubling would hold twice the largest one.
        buf.reserve_exact(usize::try_from(file.size()).unwrap_or(0));
        // The declared size may lie: what is read is capped by the member limit and what is
        // left of the budget.
        let cap = limits.max_member.min(budget.left());
        let read = (&mut file)
            .take(cap.saturating_add(1))
            .read_to_end(&mut buf);
        if !budget.take(buf.len() as u64) {
            break;
        }
        match read {
            Ok(_) if buf.len() as u64 > limits.max_member => errors.push(Error::new(
                offset,
                ErrorKind::TooLarge {
                    what: "zip member",
                    size: buf.len() as u64,
                    limit: limits.max_member,
                },
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
