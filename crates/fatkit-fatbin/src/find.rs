//! Finding fatbin containers, cubins and PTX in any file (docs/FATBIN_FORMAT.md sections 1 and 4):
//! a standalone `.fatbin`, cubin or PTX; host ELF sections and Windows PE sections (`crate::pe`);
//! `ar` and zip members; and containers or cubins embedded anywhere else, by a validated scan of
//! every byte offset.

use std::borrow::Cow;
use std::ops::Range;

use memchr::memmem;
use object::read::archive::ArchiveFile;
use serde::Serialize;

use crate::container::{Container, Strictness, MAGIC_BYTES};
use crate::error::{Error, ErrorKind};
use crate::{cubin, ptx};
use crate::{Budget, Limits};

/// ELF sections nvcc puts containers in.
pub(crate) const FATBIN_SECTIONS: [&str; 2] = [".nv_fatbin", "__nv_relfatbin"];

/// Where a container or cubin was found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// The file is this container, cubin or PTX.
    File,
    /// In a section that holds device code (ELF: `.nv_fatbin`, `__nv_relfatbin`; PE:
    /// `.nv_fatb`); cuobjdump sees these.
    Section(String),
    /// Found by scanning bytes outside any such section; cuobjdump does not see these.
    Scan,
    /// PTX stored as text in a host file (a Rust `include_str!` constant, a C string), in this
    /// section (`.rodata`), or `bytes` where no section holds it: the program hands it to the
    /// driver, which JIT-compiles it; cuobjdump does not see it (`find/text.rs`).
    Text(String),
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    Fatbin,
    Cubin,
    Ptx,
    Elf,
    /// A Windows PE image (DLL, EXE, `.pyd`; `crate::pe`).
    Pe,
    Archive,
    Zip,
    /// Not a file: a directory whose files were read (by the caller; this crate does no I/O).
    Directory,
    /// A container image whose final filesystem's files were read (by the caller).
    Image,
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
pub(crate) fn may_hold_ptx(name: &str) -> bool {
    let file = name.rsplit(['/', '\\']).next().unwrap_or(name);
    match file.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => {
            !NOT_PTX.contains(&ext.to_ascii_lowercase().as_str())
        }
        _ => true,
    }
}

/// [`find`] for a file or member named `name`: text named as source or documentation
/// (`*.py`, `*.txt`, `may_hold_ptx`) is never taken for PTX.
pub fn find_named<'data>(name: &str, data: &'data [u8]) -> Findings<'data> {
    find_named_in(
        name,
        data,
        &Budget::for_input(&Limits::default(), data.len() as u64),
    )
}

/// The error that ends a search whose budget is spent.
fn over_budget(offset: usize, budget: &Budget) -> Error {
    Error::new(
        offset,
        ErrorKind::OverBudget(budget.spent().unwrap_or_default()),
    )
}

/// [`find_named`], every search charged to `budget` (the input's, [`Budget`]).
pub(crate) fn find_named_in<'data>(
    name: &str,
    data: &'data [u8],
    budget: &Budget,
) -> Findings<'data> {
    let mut f = Findings {
        format: Format::Other,
        hits: Vec::new(),
        errors: Vec::new(),
    };
    if data.starts_with(&MAGIC_BYTES) {
        f.format = Format::Fatbin;
        containers_in(data, 0..data.len(), Origin::File, &mut f, budget);
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
        archive_members(data, &mut f, budget);
        return f;
    }
    if data.starts_with(b"PK\x03\x04") {
        f.format = Format::Zip;
        return f;
    }
    let mut covered: Vec<Range<usize>> = Vec::new();
    let mut sections: Vec<(String, Range<usize>)> = Vec::new();
    let host = match data.starts_with(b"\x7fELF") {
        true => Some(HostFile::Elf),
        false => crate::pe::nt_headers_offset(data).map(|_| HostFile::Pe),
    };
    if let Some(host) = host {
        f.format = host.format();
        match object::File::parse(data) {
            Ok(file) => {
                let all = host.sections(&file);
                sections = section_ranges(&all);
                fatbin_sections(data, (&all, host), &mut covered, &mut f, budget)
            }
            Err(e) => f.errors.push(host.malformed(e)),
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
    // PTX text, in a file that may hold it: its `.version`s are found by the magic scan's own
    // pass, and read outside every container and cubin found.
    let text = may_hold_ptx(name);
    let versions = scan(data, &mut covered, text, &mut f, budget);
    if text {
        text::ptx_blocks(data, versions, &covered, &sections, &mut f, budget);
    }
    f
}

/// Containers back to back (on 8-byte boundaries, zero padding between) in `range`.
fn containers_in<'data>(
    data: &'data [u8],
    range: Range<usize>,
    origin: Origin,
    f: &mut Findings<'data>,
    budget: &Budget,
) {
    let Some(region) = data.get(range.clone()) else {
        return;
    };
    // Searched and walked once, from start to end.
    if !budget.work("the fatbin sections", region.len() as u64) {
        f.errors.push(over_budget(range.start, budget));
        return;
    }
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
/// container; `covered` ends holding both, sorted. With `text`, the first pass also finds every `.version` (returned, for
/// `text::ptx_blocks`): one pass over the bytes for both.
fn scan<'data>(
    data: &'data [u8],
    covered: &mut Vec<Range<usize>>,
    text: bool,
    f: &mut Findings<'data>,
    budget: &Budget,
) -> Vec<usize> {
    covered.sort_by_key(|r| r.start);
    let inside = |ranges: &[Range<usize>], pos: usize| {
        let idx = ranges.partition_point(|r| r.start <= pos);
        idx > 0 && ranges.get(idx - 1).is_some_and(|r| r.contains(&pos))
    };
    let mut found: Vec<Range<usize>> = Vec::new();
    let mut resume = 0;
    let needles: &[&[u8]] = match text {
        true => &[&MAGIC_BYTES, b".version"],
        false => &[&MAGIC_BYTES],
    };
    let Some(mut hits) = find_outside(data, covered, needles, budget) else {
        f.errors.push(over_budget(0, budget));
        return Vec::new();
    };
    let versions = hits.pop().filter(|_| text).unwrap_or_default();
    let magics = hits.into_iter().next().unwrap_or_default();
    for pos in magics {
        if pos < resume || inside(covered, pos) {
            continue;
        }
        let Some(rest) = data.get(pos..) else { break };
        let (walked, hit) = match Container::parse_walk(rest, Strictness::KnownKindsOnly) {
            Ok(c) => (c.len(), Some(c)),
            // Magics inside the entries a failed parse walked are not tried again.
            Err((_, walked)) => (walked, None),
        };
        if !budget.work("the magic scan", walked as u64 + crate::work_budget::ITEM) {
            f.errors.push(over_budget(pos, budget));
            return versions;
        }
        resume = pos + walked;
        if let Some(c) = hit {
            f.hits.push(Hit {
                offset: pos as u64,
                origin: Origin::Scan,
                item: Item::Container(c),
            });
            found.push(pos..pos + c.len());
        }
    }
    covered.extend(found);
    covered.sort_by_key(|r| r.start);
    let mut resume = 0;
    let Some(elves) =
        find_outside(data, covered, &[b"\x7fELF\x02\x01"], budget).and_then(|mut hits| hits.pop())
    else {
        f.errors.push(over_budget(0, budget));
        return versions;
    };
    let mut cubins: Vec<Range<usize>> = Vec::new();
    for pos in elves {
        if pos == 0 || pos < resume || inside(covered, pos) {
            continue;
        }
        let Some(rest) = data.get(pos..) else { break };
        if !cubin::is_cubin(rest) {
            continue;
        }
        // A candidate costs its section table, walked to find its size, and its own bytes.
        if !budget.items("the cubin candidates", 1 + cubin::section_count(rest)) {
            f.errors.push(over_budget(pos, budget));
            return versions;
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
            cubins.push(pos..pos + image.len());
            f.hits.push(Hit {
                offset: pos as u64,
                origin: Origin::Scan,
                item: Item::Cubin(image),
            });
        }
    }
    covered.extend(cubins);
    covered.sort_by_key(|r| r.start);
    versions
}

/// Every offset of each of `needles` that starts outside the sorted, disjoint-or-not `covered`
/// ranges, one list per needle: only the gaps are searched (in a large library the sections
/// cover most of the file), each gap charged to `budget` once for all the needles (one scan of
/// its bytes); `None` once it is spent.
fn find_outside(
    data: &[u8],
    covered: &[Range<usize>],
    needles: &[&[u8]],
    budget: &Budget,
) -> Option<Vec<Vec<usize>>> {
    let finders: Vec<memmem::Finder<'_>> = needles.iter().map(memmem::Finder::new).collect();
    let longest = needles.iter().map(|n| n.len()).max().unwrap_or(1);
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); needles.len()];
    let mut from = 0;
    let search = |start: usize, end: usize, out: &mut Vec<Vec<usize>>| {
        // A match may start in the gap and run into the covered range: search a little past.
        let end = (end + longest.saturating_sub(1)).min(data.len());
        let gap = data.get(start..end)?;
        budget
            .work("the magic scan", gap.len() as u64)
            .then_some(())?;
        for (finder, found) in finders.iter().zip(out.iter_mut()) {
            let before = found.len();
            found.extend(
                crate::par::find_all_with(gap, finder)
                    .into_iter()
                    .map(|at| start + at),
            );
            // Each hit is an item a reader looks at.
            budget
                .items("the magic scan", (found.len() - before) as u64)
                .then_some(())?;
        }
        Some(())
    };
    for r in covered {
        if r.start > from {
            search(from, r.start, &mut out)?;
        }
        from = from.max(r.end);
    }
    if from < data.len() {
        search(from, data.len(), &mut out)?;
    }
    Some(out)
}

fn archive_members<'data>(data: &'data [u8], f: &mut Findings<'data>, budget: &Budget) {
    let archive = match ArchiveFile::parse(data) {
        Ok(a) => a,
        Err(e) => {
            return f
                .errors
                .push(Error::new(0u64, ErrorKind::Archive(e.to_string())))
        }
    };
    for member in archive.members() {
        if !budget.items("the archive's members", 1) {
            f.errors.push(over_budget(0, budget));
            return;
        }
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

mod sections;
mod text;
mod zipped;
use sections::{fatbin_sections, section_ranges, HostFile};
pub(crate) use zipped::zip_members_of;
pub use zipped::{zip_members, ZipMember};
