//! The fatbin container and its entries (docs/FATBIN_FORMAT.md section 2).
//!
//! [`Container::parse`] validates the header and every entry up front; after that, iterating
//! entries cannot fail.

use fatkit_arch::{Cc, ImageKind, Suffix, Target};
use serde::Serialize;

use crate::bytes::{slice, u16_at, u32_at, u64_at};
use crate::error::{Error, ErrorKind, Result};

/// `50 ed 55 ba`.
pub const MAGIC: u32 = 0xBA55_ED50;
pub(crate) const MAGIC_BYTES: [u8; 4] = MAGIC.to_le_bytes();
pub(crate) const HEADER_SIZE: usize = 16;
pub(crate) const ENTRY_HEADER_SIZE: usize = 64;
pub const ENTRY_VERSION: u16 = 0x0101;

/// What an entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    Ptx,
    Cubin,
    /// NVVM IR / LTO-IR.
    LtoIr,
    /// The pre-ELF cubin format.
    OldCubin,
    RelocatablePtx,
    /// CUDA Tile IR bytecode (0x80, `nvFatbinAddTileIR`, nvcc 13.3+ `-enable-tile`): JIT-compiled
    /// by the driver; its kernels are not read (docs/FATBIN_FORMAT.md section 2).
    TileIr,
    /// A kind this reader does not know.
    Unknown(u16),
}

impl EntryKind {
    pub(crate) fn from_raw(raw: u16) -> EntryKind {
        match raw {
            1 => EntryKind::Ptx,
            2 => EntryKind::Cubin,
            4 => EntryKind::OldCubin,
            8 => EntryKind::LtoIr,
            0x40 => EntryKind::RelocatablePtx,
            0x80 => EntryKind::TileIr,
            other => EntryKind::Unknown(other),
        }
    }

    pub fn raw(self) -> u16 {
        match self {
            EntryKind::Ptx => 1,
            EntryKind::Cubin => 2,
            EntryKind::OldCubin => 4,
            EntryKind::LtoIr => 8,
            EntryKind::RelocatablePtx => 0x40,
            EntryKind::TileIr => 0x80,
            EntryKind::Unknown(raw) => raw,
        }
    }

    /// Kinds seen in real files (0x10 in one report, docs/FATBIN_FORMAT.md).
    fn is_known_raw(raw: u16) -> bool {
        matches!(raw, 1 | 2 | 4 | 8 | 0x10 | 0x40 | 0x80)
    }

    pub fn name(self) -> String {
        match self {
            EntryKind::Ptx => "ptx".into(),
            EntryKind::Cubin => "cubin".into(),
            EntryKind::LtoIr => "lto-ir".into(),
            EntryKind::OldCubin => "old-cubin".into(),
            EntryKind::RelocatablePtx => "relocatable-ptx".into(),
            EntryKind::TileIr => "tile-ir".into(),
            EntryKind::Unknown(raw) => format!("unknown-{raw:#x}"),
        }
    }
}

/// Entry flags (offset 0x28).
pub mod flags {
    pub(crate) const BIT64: u64 = 0x1;
    pub const DEBUG: u64 = 0x2;
    pub const PRODUCER_CUDA: u64 = 0x4;
    pub const PRODUCER_OPENCL: u64 = 0x8;
    pub(crate) const HOST_LINUX: u64 = 0x10;
    pub const HOST_MAC: u64 = 0x20;
    pub const HOST_WINDOWS: u64 = 0x40;
    pub const LZ4: u64 = 0x2000;
    pub const ZSTD: u64 = 0x8000;
    pub const LTO: u64 = 0x1_0000;
    pub(crate) const ARCH_SPECIFIC: u64 = 0x10_0000;
    pub(crate) const FAMILY_SPECIFIC: u64 = 0x20_0000;
    pub(crate) const NEW_ABI: u64 = 0x100_0000;
}

/// How an entry's payload is stored: the one `Compression` of fatkit, also a profile's.
pub use fatkit_arch::Compression;

/// Strictness of validation: scanning arbitrary bytes for the magic refuses unknown kinds
/// (docs/FATBIN_FORMAT.md section 4); a container found where one must be (a section, a `.fatbin`
/// file) reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strictness {
    KnownKindsOnly,
    AnyKind,
}

/// The fixed 64-byte header of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct EntryHeader {
    pub kind: u16,
    pub version: u16,
    pub header_size: u32,
    pub padded_size: u64,
    pub compressed_size: u32,
    pub options_offset: u32,
    pub minor: u16,
    pub major: u16,
    pub arch: u32,
    pub identifier_offset: u32,
    pub identifier_len: u32,
    pub flags: u64,
    pub reserved: u64,
    pub uncompressed_size: u64,
}

impl EntryHeader {
    /// Reads the fixed part; `None` when fewer than 64 bytes remain.
    fn read(data: &[u8], at: usize) -> Option<EntryHeader> {
        Some(EntryHeader {
            kind: u16_at(data, at)?,
            version: u16_at(data, at + 0x02)?,
            header_size: u32_at(data, at + 0x04)?,
            padded_size: u64_at(data, at + 0x08)?,
            compressed_size: u32_at(data, at + 0x10)?,
            options_offset: u32_at(data, at + 0x14)?,
            minor: u16_at(data, at + 0x18)?,
            major: u16_at(data, at + 0x1A)?,
            arch: u32_at(data, at + 0x1C)?,
            identifier_offset: u32_at(data, at + 0x20)?,
            identifier_len: u32_at(data, at + 0x24)?,
            flags: u64_at(data, at + 0x28)?,
            reserved: u64_at(data, at + 0x30)?,
            uncompressed_size: u64_at(data, at + 0x38)?,
        })
    }
}

/// One validated container over the bytes it occupies (header and entries, nothing more).
#[derive(Clone, Copy, Debug)]
pub struct Container<'data> {
    data: &'data [u8],
}

impl<'data> Container<'data> {
    /// Validates the container at the start of `data` (which may continue past it).
    /// Errors carry offsets relative to the start of `data`.
    pub fn parse(data: &'data [u8], strictness: Strictness) -> Result<Container<'data>> {
        Container::parse_walk(data, strictness).map_err(|(e, _)| e)
    }

    /// [`Container::parse`], and on failure also how far the entry walk got: the offset of
    /// the entry that failed (0 if the header did). Every entry before it was valid, so a scan
    /// resumes there (a container starting inside a valid entry's payload is not looked for):
    /// each byte is then walked once, and a scan of any file stays linear in its size.
    pub fn parse_walk(
        data: &'data [u8],
        strictness: Strictness,
    ) -> std::result::Result<Container<'data>, (Error, usize)> {
        let at_header = |e: Error| (e, 0);
        let have = data.len();
        let magic = u32_at(data, 0).ok_or_else(|| {
            at_header(Error::truncated(
                0,
                "fatbin header",
                HEADER_SIZE as u64,
                have,
            ))
        })?;
        if magic != MAGIC {
            return Err(at_header(Error::invalid(
                0,
                "fatbin magic",
                u64::from(magic),
            )));
        }
        let (Some(version), Some(header_size), Some(fat_size)) =
            (u16_at(data, 4), u16_at(data, 6), u64_at(data, 8))
        else {
            return Err(at_header(Error::truncated(
                0,
                "fatbin header",
                HEADER_SIZE as u64,
                have,
            )));
        };
        if version != 1 {
            return Err(at_header(Error::invalid(
                4,
                "fatbin version",
                u64::from(version),
            )));
        }
        if usize::from(header_size) != HEADER_SIZE {
            return Err(at_header(Error::invalid(
                6,
                "fatbin header size",
                u64::from(header_size),
            )));
        }
        if !fat_size.is_multiple_of(8) {
            return Err(at_header(Error::invalid(
                8,
                "fatbin size (not a multiple of 8)",
                fat_size,
            )));
        }
        let total = (HEADER_SIZE as u64)
            .checked_add(fat_size)
            .ok_or_else(|| at_header(Error::invalid(8, "fatbin size", fat_size)))?;
        let data = slice(data, 0, total)
            .ok_or_else(|| at_header(Error::truncated(0, "fatbin container", total, have)))?;
        let mut at = HEADER_SIZE;
        while at < data.len() {
            // Nothing walked when the first entry fails: resuming one byte on costs no more.
            let walked = if at > HEADER_SIZE { at } else { 0 };
            at = validate_entry(data, at, strictness).map_err(|e| (e, walked))?;
        }
        if at != data.len() {
            return Err((
                Error::new(
                    8,
                    ErrorKind::SizeMismatch {
                        declared: fat_size,
                        found: (at - HEADER_SIZE) as u64,
                    },
                ),
                at,
            ));
        }
        Ok(Container { data })
    }

    /// The container's bytes, header included.
    pub fn bytes(&self) -> &'data [u8] {
        self.data
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.len() <= HEADER_SIZE
    }

    pub fn entries(&self) -> Entries<'data> {
        Entries {
            data: self.data,
            at: HEADER_SIZE,
        }
    }
}

/// Checks the entry at `at`; returns where the next one starts.
fn validate_entry(data: &[u8], at: usize, strictness: Strictness) -> Result<usize> {
    let left = data.len().saturating_sub(at);
    let h = EntryHeader::read(data, at)
        .ok_or_else(|| Error::truncated(at, "entry header", ENTRY_HEADER_SIZE as u64, left))?;
    if h.version != ENTRY_VERSION {
        return Err(Error::invalid(
            at + 2,
            "entry version",
            u64::from(h.version),
        ));
    }
    if strictness == Strictness::KnownKindsOnly && !EntryKind::is_known_raw(h.kind) {
        return Err(Error::invalid(at, "entry kind", u64::from(h.kind)));
    }
    let hs = h.header_size as usize;
    if hs < ENTRY_HEADER_SIZE || !hs.is_multiple_of(8) {
        return Err(Error::invalid(
            at + 4,
            "entry header size",
            u64::from(h.header_size),
        ));
    }
    if !h.padded_size.is_multiple_of(8) {
        return Err(Error::invalid(
            at + 8,
            "entry payload size (not a multiple of 8)",
            h.padded_size,
        ));
    }
    if u64::from(h.compressed_size) > h.padded_size {
        return Err(Error::invalid(
            at + 0x10,
            "compressed size (larger than the payload)",
            u64::from(h.compressed_size),
        ));
    }
    let end = (hs as u64)
        .checked_add(h.padded_size)
        .and_then(|n| n.checked_add(at as u64))
        .filter(|&end| end <= data.len() as u64)
        .ok_or_else(|| {
            Error::truncated(at, "entry", (hs as u64).saturating_add(h.padded_size), left)
        })?;
    // Identifier and options must lie inside the entry header.
    for (what, off, len) in [
        (
            "identifier",
            h.identifier_offset,
            u64::from(h.identifier_len),
        ),
        (
            "options record",
            h.options_offset,
            if h.options_offset == 0 { 0 } else { 8 },
        ),
    ] {
        if off != 0 && u64::from(off).saturating_add(len) > hs as u64 {
            return Err(Error::invalid(at, what, u64::from(off)));
        }
    }
    usize::try_from(end).map_err(|_| Error::invalid(at, "entry end", end))
}

/// The entries of a validated container.
#[derive(Clone, Debug)]
pub struct Entries<'data> {
    data: &'data [u8],
    at: usize,
}

impl<'data> Iterator for Entries<'data> {
    type Item = Entry<'data>;

    fn next(&mut self) -> Option<Entry<'data>> {
        let header = EntryHeader::read(self.data, self.at)?;
        let hs = header.header_size as usize;
        let raw = slice(
            self.data,
            self.at as u64,
            (hs as u64).checked_add(header.padded_size)?,
        )?;
        let entry = Entry {
            offset: self.at,
            header,
            header_bytes: raw.get(..hs)?,
            payload: raw.get(hs..)?,
        };
        self.at = self.at.checked_add(raw.len())?;
        Some(entry)
    }
}

/// One entry: its header, its tail (identifier, options, unknown bytes) and its payload.
#[derive(Clone, Copy, Debug)]
pub struct Entry<'data> {
    /// Offset from the start of the container.
    pub offset: usize,
    pub header: EntryHeader,
    /// The whole entry header, tail included.
    header_bytes: &'data [u8],
    /// `padded_size` bytes.
    payload: &'data [u8],
}

impl<'data> Entry<'data> {
    pub fn kind(&self) -> EntryKind {
        EntryKind::from_raw(self.header.kind)
    }

    pub fn flags(&self) -> u64 {
        self.header.flags
    }

    /// The suffix the flags give, where it exists (docs/ARCH_RULES.md section 1): `a` from
    /// sm_90 on, `f` from sm_100 on. The same bits in an older entry mean something else.
    pub fn suffix(&self) -> Suffix {
        let cc = self.cc();
        let from = |major: u8| cc.is_some_and(|cc| cc >= Cc::new(major, 0));
        if self.header.flags & flags::ARCH_SPECIFIC != 0 && from(9) {
            Suffix::Arch
        } else if self.header.flags & flags::FAMILY_SPECIFIC != 0 && from(10) {
            Suffix::Family
        } else {
            Suffix::None
        }
    }

    /// The compute capability of `arch` (80 -> 8.0, 120 -> 12.0), if it is one.
    pub fn cc(&self) -> Option<Cc> {
        Cc::from_number(self.header.arch)
    }

    /// `sm_90a` for a cubin, `compute_90a` for PTX; `None` for other kinds or odd arch values.
    pub fn target(&self) -> Option<Target> {
        let kind = match self.kind() {
            EntryKind::Cubin | EntryKind::OldCubin => ImageKind::Cubin,
            EntryKind::Ptx | EntryKind::RelocatablePtx => ImageKind::Ptx,
            _ => return None,
        };
        Some(Target::new(kind, self.cc()?, self.suffix()))
    }

    /// `(major, minor)` as cuobjdump prints `code version`: the PTX ISA for PTX.
    pub fn code_version(&self) -> (u16, u16) {
        (self.header.major, self.header.minor)
    }

    pub fn compression(&self) -> Compression {
        if self.header.flags & flags::ZSTD != 0 {
            Compression::Zstd
        } else if self.header.flags & flags::LZ4 != 0 {
            Compression::Lz4
        } else {
            Compression::None
        }
    }

    /// The header's tail: everything after the fixed 64 bytes.
    pub fn tail(&self) -> &'data [u8] {
        self.header_bytes
            .get(ENTRY_HEADER_SIZE..)
            .unwrap_or_default()
    }

    fn header_field(&self, off: u32, len: u64) -> Option<&'data [u8]> {
        if off == 0 {
            return None;
        }
        slice(self.header_bytes, u64::from(off), len)
    }

    /// The identifier string (often the source file name), if any.
    pub fn identifier(&self) -> Option<&'data [u8]> {
        self.header_field(
            self.header.identifier_offset,
            u64::from(self.header.identifier_len),
        )
    }

    /// The options record's `(offset, length)`, if the entry has one.
    fn options_record(&self) -> Option<(u32, u32)> {
        let rec = self.header_field(self.header.options_offset, 8)?;
        Some((u32_at(rec, 0)?, u32_at(rec, 4)?))
    }

    /// The options string (`ptxasOptions` for PTX), if the entry has an options record.
    /// On sm_100+ cubins the string is empty and a compatibility blob follows it (see
    /// [`Entry::compat`]).
    pub fn options(&self) -> Option<&'data [u8]> {
        let (off, len) = self.options_record()?;
        if slice(self.header_bytes, u64::from(off), 1)? == [0] {
            return Some(&[]);
        }
        slice(self.header_bytes, u64::from(off), u64::from(len))
    }

    /// The cubin's `.nv.compat` records as `fatbinary` stores them: after an empty options
    /// string, `length` bytes.
    pub fn compat(&self) -> Option<&'data [u8]> {
        let (off, len) = self.options_record()?;
        if len == 0 || slice(self.header_bytes, u64::from(off), 1)? != [0] {
            return None;
        }
        slice(self.header_bytes, u64::from(off) + 1, u64::from(len))
    }

    /// The stored payload: exactly `compressed_size` bytes when compressed, else the padded payload.
    pub fn stored(&self) -> &'data [u8] {
        match self.compression() {
            Compression::None => self.payload,
            _ => self
                .payload
                .get(..self.header.compressed_size as usize)
                .unwrap_or(self.payload),
        }
    }
}

mod payload;
pub use payload::Scratch;
