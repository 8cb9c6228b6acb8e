//! Device ELF (cubin) inspection (docs/FATBIN_FORMAT.md section 5).

use std::collections::BTreeMap;

use fatkit_arch::Cc;
use object::elf;
use object::read::elf::{FileHeader, SectionHeader, Sym};
use object::LittleEndian as LE;
use serde::Serialize;

use crate::error::{Error, ErrorKind, Result};

/// `EM_CUDA`.
pub const EM_CUDA: u16 = 190;

/// What a cubin says about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CubinInfo {
    pub osabi: u8,
    pub abi_version: u8,
    pub e_flags: u32,
    /// The SM it was built for, from `e_flags`.
    pub cc: Option<Cc>,
    /// The `a` bit of `e_flags` (the `f` suffix is invisible in a cubin).
    pub arch_specific: bool,
    /// `13.2` from the `.note.nv.tkinfo` note ("Cuda compilation tools, release 13.2, ...").
    pub toolkit: Option<String>,
    /// Kernel entry points: functions with `st_other == 0x10` (`STO_CUDA_ENTRY`), local
    /// (`static __global__`) ones included.
    pub kernels: Vec<String>,
    /// The kernels whose code only returns or traps (crate::body): stubs, where another image
    /// holds a body. Empty, with `code_read` false, where the instruction set is not read.
    pub empty: Vec<(String, fatkit_arch::load::Stub)>,
    /// Whether the kernels' code was read (`body::reads_cubins_of`).
    pub code_read: bool,
}

fn elf_err(detail: impl std::fmt::Display) -> Error {
    Error::new(0u64, ErrorKind::Elf(detail.to_string()))
}

fn header(data: &[u8]) -> Result<&elf::FileHeader64<LE>> {
    let h = elf::FileHeader64::<LE>::parse(data).map_err(elf_err)?;
    if h.e_machine(LE) != EM_CUDA {
        return Err(elf_err(format!(
            "e_machine {} is not EM_CUDA ({EM_CUDA})",
            h.e_machine(LE)
        )));
    }
    Ok(h)
}

/// Whether `data` starts with a 64-bit little-endian ELF header for `EM_CUDA`.
pub fn is_cubin(data: &[u8]) -> bool {
    data.starts_with(b"\x7fELF\x02\x01") && crate::bytes::u16_at(data, 18) == Some(EM_CUDA)
}

/// The end of the ELF header and of those of its program and section header tables that lie
/// within `data`, read from the header alone: bytes a reader of the sections walks through
/// before anything else. A table past the end (a crafted one) does not hide one that is in.
pub(crate) fn tables_end(data: &[u8]) -> Option<usize> {
    let h = header(data).ok()?;
    let len = data.len() as u64;
    let table = |off: u64, n: u64, size: u64| {
        n.checked_mul(size)
            .and_then(|bytes| off.checked_add(bytes))
            .filter(|&end| end <= len)
            .unwrap_or(0)
    };
    let end = u64::from(h.e_ehsize(LE))
        .max(table(
            h.e_phoff(LE),
            u64::from(h.e_phnum(LE)),
            u64::from(h.e_phentsize(LE)),
        ))
        .max(table(
            h.e_shoff(LE),
            u64::from(h.e_shnum(LE)),
            u64::from(h.e_shentsize(LE)),
        ));
    usize::try_from(end).ok()
}

/// The number of sections the header declares (what a reader of them walks), 0 for no cubin.
pub(crate) fn section_count(data: &[u8]) -> u64 {
    header(data).map_or(0, |h| u64::from(h.e_shnum(LE)))
}

/// The number of bytes the ELF occupies: the furthest of its headers, tables and sections.
pub fn elf_size(data: &[u8]) -> Option<usize> {
    let h = header(data).ok()?;
    let mut end = u64::from(h.e_ehsize(LE));
    let table =
        |off: u64, n: u64, size: u64| n.checked_mul(size).and_then(|len| off.checked_add(len));
    end = end.max(table(
        h.e_phoff(LE),
        u64::from(h.e_phnum(LE)),
        u64::from(h.e_phentsize(LE)),
    )?);
    end = end.max(table(
        h.e_shoff(LE),
        u64::from(h.e_shnum(LE)),
        u64::from(h.e_shentsize(LE)),
    )?);
    if let Ok(sections) = h.sections(LE, data) {
        for s in sections.iter() {
            if s.sh_type(LE) != elf::SHT_NOBITS {
                end = end.max(s.sh_offset(LE).checked_add(s.sh_size(LE))?);
            }
        }
    }
    usize::try_from(end).ok()
}

/// The two ELF ABIs of cubins (docs/FATBIN_FORMAT.md section 5), as `(OS ABI, ABI version)`.
const OLD_ABI: (u8, u8) = (0x33, 7);
const NEW_ABI: (u8, u8) = (0x41, 8);

/// The `e_flags` bits each ABI is known to use, as measured on every cubin of the torch 2.6
/// and 2.15 and JAX 0.10 environments (docs/FATBIN_FORMAT.md section 5): the old ABI keeps the
/// SM in the low byte, 0x100, 0x400 and 0x800 (`a`) in the second and the virtual SM in the
/// third; the new one flags in the low nibble and the SM in the second byte, and its top byte
/// varies between NVIDIA's own cubins (0x06, 0xaa, 0xb8), so it is not judged.
const OLD_ABI_FLAGS: u32 = 0x00ff_0dff;
const NEW_ABI_FLAGS: u32 = 0xff00_ff0f;

/// The SM and `a` bit of a cubin's header, or why fatkit cannot read it: an ABI or a flag bit
/// it does not know, or an SM no GPU has. Such an image decides nothing (UNKNOWN): the driver
/// may load it, refuse it, or crash on it, and fatkit cannot say which.
fn sm_of(os_abi: u8, abi_version: u8, e_flags: u32) -> Result<(Cc, bool, bool)> {
    let (sm, arch_specific, known, new_abi) = match (os_abi, abi_version) {
        OLD_ABI => (e_flags & 0xff, e_flags & 0x800 != 0, OLD_ABI_FLAGS, false),
        NEW_ABI => ((e_flags >> 8) & 0xff, e_flags & 0x8 != 0, NEW_ABI_FLAGS, true),
        _ => {
            return Err(elf_err(format!(
                "an ELF ABI fatkit does not know (OS ABI {os_abi:#04x}, ABI version {abi_version}; cubins use 0x33 version 7 or 0x41 version 8)"
            )))
        }
    };
    if e_flags & !known != 0 {
        return Err(elf_err(format!(
            "e_flags {e_flags:#010x} set bits fatkit does not know ({:#010x})",
            e_flags & !known
        )));
    }
    let cc = Cc::from_number(sm).ok_or_else(|| {
        elf_err(format!(
            "e_flags name SM {sm}, which is no compute capability"
        ))
    })?;
    Ok((cc, arch_specific, new_abi))
}

/// Reads the header, the SM, the toolkit note and the kernel names of a cubin.
pub fn inspect(data: &[u8]) -> Result<CubinInfo> {
    let h = header(data)?;
    let ident = &h.e_ident;
    let e_flags = h.e_flags(LE);
    let (cc, arch_specific, new_abi) = sm_of(ident.os_abi, ident.abi_version, e_flags)?;
    let cc = Some(cc);
    let sections = h.sections(LE, data).map_err(elf_err)?;
    let section_names = h
        .shstrndx(LE, data)
        .ok()
        .and_then(|i| sections.section(object::SectionIndex(i as usize)).ok())
        .and_then(|s| s.data(LE, data).ok())
        .unwrap_or_default();
    let mut toolkit = None;
    let mut arch_specific = arch_specific;
    // The first section of each name only: a crafted file naming thousands of sections
    // `.nv.compat`, all over the same bytes, costs no more than one.
    let (mut seen_note, mut seen_compat) = (false, false);
    for s in sections.iter() {
        let named = |name: &[u8]| name_is(section_names, s.sh_name(LE), name);
        match () {
            () if !seen_note && named(b".note.nv.tkinfo") => {
                seen_note = true;
                toolkit = s.data(LE, data).ok().and_then(toolkit_release);
            }
            // CUDA 13 keeps the `a` of sm_90a here rather than in e_flags.
            () if !seen_compat && named(b".nv.compat") => {
                seen_compat = true;
                let records = s.data(LE, data).map(info_records).unwrap_or_default();
                arch_specific |= records
                    .iter()
                    .any(|r| r.attr == COMPAT_ARCH_SPECIFIC && r.value != 0);
            }
            _ => {}
        }
    }
    let mut kernels = Vec::new();
    let (mut empty, mut code_read) = (Vec::new(), false);
    if let Ok(symbols) = sections.symbols(LE, data, elf::SHT_SYMTAB) {
        let names = sections
            .section(symbols.string_section())
            .ok()
            .and_then(|s| s.data(LE, data).ok())
            .unwrap_or_default();
        // `static __global__` kernels are local symbols, as they are `.entry` without
        // `.visible` in PTX: entries all the same.
        let entries: Vec<&elf::Sym64<LE>> = symbols
            .iter()
            .filter(|sym| {
                sym.st_type() == elf::STT_FUNC
                    && matches!(
                        sym.st_bind(),
                        elf::STB_GLOBAL | elf::STB_LOCAL | elf::STB_WEAK
                    )
                    && sym.st_other() == 0x10
            })
            .collect();
        kernels = names_at(names, entries.iter().map(|s| s.st_name(LE)).collect())?;
        if let Some(cc) = cc.filter(|cc| crate::body::reads_cubins_of(*cc)) {
            code_read = true;
            let externs = externs_of(&sections, data);
            let calls = Calls {
                module: calls_of(symbols.iter(), names),
                externs: &externs,
                symbols: &symbols,
                names,
            };
            empty = empty_bodies(data, &sections, names, &entries, (cc, &calls))?;
        }
    }
    kernels.sort();
    // Without the note (CUDA 12 and older, NVRTC), the old ABI's e_version holds the release
    // as cuobjdump prints it: 118 is 11.8, 129 is 12.9.
    if toolkit.is_none() && !new_abi {
        toolkit = toolkit_from_version(h.e_version(LE));
    }
    // `a` targets exist from sm_90 on (docs/ARCH_RULES.md section 1): the same bit of an older
    // cubin (CUDA 9.0 sets 0x800 on sm_60) means something else.
    let arch_specific = arch_specific && cc.is_some_and(|cc| cc >= Cc::new(9, 0));
    Ok(CubinInfo {
        osabi: ident.os_abi,
        abi_version: ident.abi_version,
        e_flags,
        cc,
        arch_specific,
        toolkit,
        kernels,
        empty,
        code_read,
    })
}

/// The kernels among `entries` whose code, at each symbol's value in its section, only returns
/// or traps (`crate::body`): a few instructions read per kernel.
fn empty_bodies(
    data: &[u8],
    sections: &object::read::elf::SectionTable<'_, elf::FileHeader64<LE>>,
    names: &[u8],
    entries: &[&elf::Sym64<LE>],
    (cc, calls): (Cc, &Calls<'_>),
) -> Result<Vec<(String, fatkit_arch::load::Stub)>> {
    // As many bytes as the instructions read: 16 each.
    let most = crate::body::MAX_INSTRUCTIONS * 16;
    let mut stubbed = Vec::new();
    for sym in entries {
        let code = sections
            .section(object::SectionIndex(usize::from(sym.st_shndx(LE))))
            .ok()
            .and_then(|sec| sec.data(LE, data).ok())
            .and_then(|d| {
                let start = usize::try_from(sym.st_value(LE)).ok()?;
                let len = usize::try_from(sym.st_size(LE)).ok()?;
                d.get(start..start.checked_add(len.min(most))?)
            });
        let body = code.and_then(|c| crate::body::cubin(c, cc, calls.of(sym)));
        if let Some(crate::body::Body::Empty(kind)) = body {
            stubbed.push((sym.st_name(LE), kind));
        }
    }
    stubbed.sort_by_key(|(n, _)| *n);
    stubbed.dedup_by_key(|(n, _)| *n);
    let names_of = names_at(names, stubbed.iter().map(|(n, _)| *n).collect())?;
    let mut empty: Vec<_> = names_of
        .into_iter()
        .zip(stubbed.into_iter().map(|(_, k)| k))
        .collect();
    empty.sort();
    Ok(empty)
}

/// Each kernel's `EIATTR_EXTERNS` (the symbols it calls), by the index of its code's section,
/// from its own `.nv.info.NAME` (`sh_info`: that section; 0 is the module's `.nv.info`): the
/// first such section and record of each.
fn externs_of(
    sections: &object::read::elf::SectionTable<'_, elf::FileHeader64<LE>>,
    data: &[u8],
) -> BTreeMap<u32, Vec<u32>> {
    let mut externs: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for s in sections.iter() {
        if s.sh_type(LE) != SHT_CUDA_INFO || s.sh_info(LE) == 0 {
            continue;
        }
        if let std::collections::btree_map::Entry::Vacant(slot) = externs.entry(s.sh_info(LE)) {
            let records = s.data(LE, data).map(info_records).unwrap_or_default();
            if let Some(r) = records.iter().find(|r| r.attr == EIATTR_EXTERNS) {
                slot.insert(
                    r.payload
                        .chunks_exact(4)
                        .filter_map(|c| Some(u32::from_le_bytes(c.try_into().ok()?)))
                        .collect(),
                );
            }
        }
    }
    externs
}

/// `SHT_CUDA_INFO`, the type of `.nv.info` sections.
const SHT_CUDA_INFO: u32 = 0x7000_0000;
/// The `.nv.info` attribute listing the symbols (indices) a kernel calls outside the module.
const EIATTR_EXTERNS: u8 = 0x0f;

/// What the kernels of a module may call: each kernel's own externs where its `.nv.info`
/// lists them, else the module's undefined functions.
struct Calls<'a> {
    module: crate::body::Calls,
    externs: &'a BTreeMap<u32, Vec<u32>>,
    symbols: &'a object::read::elf::SymbolTable<'a, elf::FileHeader64<LE>>,
    names: &'a [u8],
}

impl Calls<'_> {
    /// What the kernel `sym` may call.
    fn of(&self, sym: &elf::Sym64<LE>) -> crate::body::Calls {
        let Some(list) = self.externs.get(&u32::from(sym.st_shndx(LE))) else {
            return self.module;
        };
        let called = list.iter().map(|&i| {
            self.symbols
                .symbol(object::SymbolIndex(i as usize))
                .ok()
                .map(|s| s.st_name(LE))
        });
        let (_, assert, other) = kinds(called.map(|n| n.map(|n| (self.names, n))));
        crate::body::Calls {
            only_print_or_assert: !other,
            // No branch in a stub: every call in it is made, an assert's too.
            call_traps: assert,
        }
    }
}

/// Whether names (a string table and an offset each; `None`: unreadable) hold `vprintf`,
/// `__assertfail`, and anything else.
fn kinds<'a>(names: impl Iterator<Item = Option<(&'a [u8], u32)>>) -> (bool, bool, bool) {
    let (mut print, mut assert, mut other) = (false, false, false);
    for n in names {
        match n {
            Some((t, o)) if name_is(t, o, b"vprintf") => print = true,
            Some((t, o)) if name_is(t, o, b"__assertfail") => assert = true,
            _ => other = true,
        }
    }
    (print, assert, other)
}

/// What the module's code may call: its undefined functions (a kernel calls `vprintf` and
/// `__assertfail` through addresses the driver fills in), read from the symbol table once.
fn calls_of<'a>(
    symbols: impl Iterator<Item = &'a elf::Sym64<LE>>,
    names: &[u8],
) -> crate::body::Calls {
    let undefined = symbols.filter(|s| s.st_type() == elf::STT_FUNC && s.st_shndx(LE) == 0);
    let (print, assert, other) = kinds(undefined.map(|s| Some((names, s.st_name(LE)))));
    crate::body::Calls {
        only_print_or_assert: !other,
        // Which call a kernel makes is not known here: a module that prints too may return.
        call_traps: assert && !print,
    }
}

/// `129` -> `12.9`; values outside the releases CUDA has had are not a version.
/// Whether the string at `offset` of a string table is `name`: a comparison of
/// `name.len() + 1` bytes, whatever the table holds.
fn name_is(table: &[u8], offset: u32, name: &[u8]) -> bool {
    let Ok(start) = usize::try_from(offset) else {
        return false;
    };
    table
        .get(start..start.saturating_add(name.len() + 1))
        .is_some_and(|s| s.strip_suffix(b"\0") == Some(name))
}

/// The NUL-terminated strings at `offsets` of a string table, each once, sorted by offset.
/// Read in one sweep (a name starting inside the previous one ends at the same NUL), and
/// refused when the names add up to more than the table: a crafted table of overlapping
/// names can then cost neither quadratic time nor memory.
fn names_at(table: &[u8], mut offsets: Vec<u32>) -> Result<Vec<String>> {
    offsets.sort_unstable();
    offsets.dedup();
    let mut out = Vec::with_capacity(offsets.len());
    let (mut nul, mut total) = (None, 0usize);
    for offset in offsets {
        let bad = |why: &str| {
            elf_err(format!(
                "kernel name at {offset:#x} of the string table: {why}"
            ))
        };
        let start = usize::try_from(offset).map_err(|_| bad("out of range"))?;
        let end = match nul {
            Some(z) if start <= z => z,
            _ => {
                let rest = table.get(start..).ok_or_else(|| bad("past its end"))?;
                start + memchr::memchr(0, rest).ok_or_else(|| bad("not NUL-terminated"))?
            }
        };
        nul = Some(end);
        total = total.saturating_add(end - start);
        if total > table.len() {
            return Err(bad(
                "the names overlap (they add up to more than twice the table)",
            ));
        }
        let name = table.get(start..end).ok_or_else(|| bad("past its end"))?;
        out.push(crate::printable(&String::from_utf8_lossy(name)).into_owned());
    }
    Ok(out)
}

fn toolkit_from_version(v: u32) -> Option<String> {
    (70..=999)
        .contains(&v)
        .then(|| format!("{}.{}", v / 10, v % 10))
}

/// The `.nv.compat` attribute that marks an arch-specific (`a`) cubin (seen on CUDA 13's
/// sm_90a; Medium confidence).
pub(crate) const COMPAT_ARCH_SPECIFIC: u8 = 9;

/// One `.nv.compat` record: `{u8 format, u8 attribute, u16 value-or-size}`, then `size` bytes
/// for format 4, as in `.nv.info`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompatRecord {
    pub format: u8,
    pub attr: u8,
    /// The inline value (formats 2 and 3); the payload's size for format 4.
    pub value: u16,
    pub payload: Vec<u8>,
}

/// Parses the attribute records of a `.nv.compat` or `.nv.info*` section, stopping at the first
/// malformed one.
pub fn info_records(data: &[u8]) -> Vec<CompatRecord> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while let (Some(&format), Some(&attr), Some(value)) = (
        data.get(at),
        data.get(at + 1),
        crate::bytes::u16_at(data, at + 2),
    ) {
        at += 4;
        let mut payload = Vec::new();
        if format == 4 {
            let Some(bytes) = data.get(at..at + usize::from(value)) else {
                break;
            };
            payload = bytes.to_vec();
            at += usize::from(value);
        }
        out.push(CompatRecord {
            format,
            attr,
            value,
            payload,
        });
    }
    out
}

/// `13.2` out of a note holding "Cuda compilation tools, release 13.2, V13.2.86".
fn toolkit_release(note: &[u8]) -> Option<String> {
    let at = memchr::memmem::find(note, b"release ")? + b"release ".len();
    let rest = note.get(at..)?;
    let end = rest
        .iter()
        .position(|&b| !(b.is_ascii_digit() || b == b'.'))?;
    let version = std::str::from_utf8(rest.get(..end)?).ok()?;
    (!version.is_empty()).then(|| version.to_owned())
}

#[cfg(test)]
mod tests {
    #[test]
    fn release_from_note() {
        let note = b"\x02\0\0\0ptxas\0Cuda compilation tools, release 13.2, V13.2.86\0Build";
        assert_eq!(super::toolkit_release(note).as_deref(), Some("13.2"));
        assert_eq!(super::toolkit_release(b"release "), None);
        assert_eq!(super::toolkit_release(b"nothing"), None);
        assert_eq!(super::toolkit_from_version(129).as_deref(), Some("12.9"));
        assert_eq!(super::toolkit_from_version(118).as_deref(), Some("11.8"));
        assert_eq!(super::toolkit_from_version(1), None);
    }

    #[test]
    fn info_records_of_sm_90a() {
        // .nv.compat of an sm_90a cubin from CUDA 13.2.
        let blob = [
            2, 9, 1, 0, 2, 2, 1, 0, 3, 7, 1, 1, 2, 3, 0, 0, 4, 11, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let records = super::info_records(&blob);
        assert_eq!(records.len(), 5);
        assert_eq!(
            (records[0].attr, records[0].value),
            (super::COMPAT_ARCH_SPECIFIC, 1)
        );
        assert_eq!(records[4].payload.len(), 8);
        assert_eq!(super::info_records(&blob[..18]).len(), 4);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for data in [
            &b""[..],
            b"\x7fELF",
            b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x02\0\xbe\0",
        ] {
            assert!(super::inspect(data).is_err());
            assert_eq!(super::elf_size(data), None);
        }
    }
}
