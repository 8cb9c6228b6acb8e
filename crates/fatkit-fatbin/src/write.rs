//! Writing fatbin containers from cubins and PTX, laid out as NVIDIA's `fatbinary` lays them
//! out (docs/FATBIN_FORMAT.md section 2): for uncompressed cubins the output is byte-identical to
//! `fatbinary -64 --compress-mode=none`, which the toolchain tests check.
//!
//! Two phases, as object's ELF writer does: every entry is prepared (validated, compressed,
//! its header laid out) first; only then are bytes written.

use fatkit_arch::{ImageKind, Suffix, Target};
use object::read::elf::{FileHeader, SectionHeader};
use object::{elf, LittleEndian as LE};

use crate::container::{flags, Compression, ENTRY_HEADER_SIZE, ENTRY_VERSION, HEADER_SIZE, MAGIC};
use crate::{cubin, ptx};

/// One image to put in a container.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    /// `sm_XY[a|f]` for a cubin, `compute_XY[a|f]` for PTX.
    pub target: Target,
    /// The cubin (device ELF) or the PTX text (without a terminating NUL).
    pub data: &'a [u8],
    /// Written into the entry as NVIDIA's `--ident` does (usually the source file name).
    pub identifier: Option<&'a str>,
    pub compression: Compression,
}

/// Why an image cannot be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteError {
    pub target: Target,
    pub reason: String,
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.target, self.reason)
    }
}

impl std::error::Error for WriteError {}

/// An entry with its header values decided and its payload ready.
struct Prepared {
    kind: u16,
    header_size: usize,
    payload: Vec<u8>,
    compressed: bool,
    uncompressed_size: u64,
    minor: u16,
    major: u16,
    arch: u32,
    flags: u64,
    identifier: Option<Vec<u8>>,
    /// What follows the options record, if one is written: the ptxas options string for PTX,
    /// or an empty string and the `.nv.compat` blob for new cubins (as `fatbinary` does).
    options: Option<Vec<u8>>,
    /// The length the options record states: the string's for PTX, the blob's for cubins.
    options_len: u32,
}

fn pad8(n: usize) -> usize {
    n.next_multiple_of(8)
}

/// The `.nv.compat` section of a cubin, which `fatbinary` copies into the options string.
fn nv_compat(data: &[u8]) -> Option<Vec<u8>> {
    let h = elf::FileHeader64::<LE>::parse(data).ok()?;
    let sections = h.sections(LE, data).ok()?;
    sections.iter().find_map(|s| {
        (sections.section_name(LE, s).ok()? == b".nv.compat")
            .then(|| s.data(LE, data).ok().map(<[u8]>::to_vec))?
    })
}

/// What an entry is made of: kind, minor and major version, the bytes stored, its options and
/// their length.
type EntryParts = (u16, u16, u16, Vec<u8>, Option<Vec<u8>>, u32);

/// A cubin entry, its image checked against the target (`entry_flags` gains the new-ABI flag
/// where fatbinary sets it).
fn cubin_entry(input: &Input<'_>, entry_flags: &mut u64) -> Result<EntryParts, String> {
    let t = input.target;
    let info = cubin::inspect(input.data).map_err(|e| e.to_string())?;
    if info.cc != Some(t.cc) {
        return Err(format!(
            "the cubin was built for {}, not {}",
            info.cc.map_or_else(
                || "an unknown SM".to_owned(),
                |cc| format!("sm_{}", cc.digits())
            ),
            t.cc
        ));
    }
    if info.arch_specific != (t.suffix == Suffix::Arch) {
        return Err("the cubin's arch-specific bit does not match the target's suffix".to_owned());
    }
    // fatbinary copies `.nv.compat` (and sets the new-ABI flag) for sm_100 and later
    // only: sm_90a cubins from CUDA 13 have the section, and fatbinary leaves it out.
    let compat = nv_compat(input.data).filter(|_| t.cc.major >= 10);
    if compat.is_some() {
        *entry_flags |= flags::NEW_ABI;
    }
    let len = compat.as_ref().map_or(0, |c| c.len() as u32);
    let options = compat.map(|c| std::iter::once(0u8).chain(c).collect::<Vec<u8>>());
    Ok((
        2u16,
        u16::from(info.abi_version),
        1u16,
        input.data.to_vec(),
        options,
        len,
    ))
}

/// A PTX entry: the text, checked to have a `.version` and no NUL, NUL-terminated.
fn ptx_entry(input: &Input<'_>) -> Result<EntryParts, String> {
    let isa = ptx::inspect(input.data)
        .version
        .ok_or_else(|| "the PTX has no .version line".to_owned())?;
    if memchr::memchr(0, input.data).is_some() {
        return Err("the PTX text contains a NUL byte".to_owned());
    }
    let mut raw = input.data.to_vec();
    raw.push(0);
    Ok((
        1u16,
        u16::from(isa.minor),
        u16::from(isa.major),
        raw,
        Some(Vec::new()),
        0,
    ))
}

fn prepare(input: &Input<'_>) -> Result<Prepared, WriteError> {
    let t = input.target;
    let err = |reason: String| WriteError { target: t, reason };
    let mut entry_flags = flags::BIT64 | flags::HOST_LINUX;
    match t.suffix {
        Suffix::Arch => entry_flags |= flags::ARCH_SPECIFIC,
        Suffix::Family => entry_flags |= flags::FAMILY_SPECIFIC,
        Suffix::None => {}
    }
    let arch = u32::from(t.cc.major) * 10 + u32::from(t.cc.minor);
    let (kind, minor, major, raw, options, options_len) = match t.kind {
        ImageKind::Cubin => cubin_entry(input, &mut entry_flags).map_err(err)?,
        ImageKind::Ptx => ptx_entry(input).map_err(err)?,
    };
    let uncompressed_size = raw.len() as u64;
    let (payload, compressed) = match input.compression {
        Compression::None => (raw, false),
        Compression::Lz4 => {
            entry_flags |= flags::LZ4;
            (lz4_flex::block::compress(&raw), true)
        }
        Compression::Zstd => {
            entry_flags |= flags::ZSTD;
            (
                zstd::bulk::compress(&raw, 19).map_err(|e| err(format!("ZSTD: {e}")))?,
                true,
            )
        }
    };
    if payload.len() > u32::MAX as usize {
        return Err(err(format!(
            "{} bytes is too large for a fatbin entry",
            payload.len()
        )));
    }
    let identifier = input.identifier.map(|s| s.as_bytes().to_vec());
    let mut header_size = ENTRY_HEADER_SIZE;
    if let Some(id) = &identifier {
        header_size += pad8(id.len() + 1);
    }
    if let Some(opts) = &options {
        header_size += 8 + pad8(opts.len() + 1);
    }
    Ok(Prepared {
        kind,
        header_size,
        payload,
        compressed,
        uncompressed_size,
        minor,
        major,
        arch,
        flags: entry_flags,
        identifier,
        options,
        options_len,
    })
}

/// Writes one container holding `inputs`, in order.
pub fn write(inputs: &[Input<'_>]) -> Result<Vec<u8>, WriteError> {
    let prepared: Vec<Prepared> = inputs.iter().map(prepare).collect::<Result<_, _>>()?;
    let fat_size: usize = prepared
        .iter()
        .map(|p| p.header_size + pad8(p.payload.len()))
        .sum();
    let mut out = Vec::with_capacity(HEADER_SIZE + fat_size);
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&(HEADER_SIZE as u16).to_le_bytes());
    out.extend_from_slice(&(fat_size as u64).to_le_bytes());
    for p in &prepared {
        let start = out.len();
        let mut tail_at = ENTRY_HEADER_SIZE;
        let (id_off, id_len) = match &p.identifier {
            Some(id) => {
                let at = tail_at;
                tail_at += pad8(id.len() + 1);
                (at, id.len())
            }
            None => (0, 0),
        };
        let opt_off = if p.options.is_some() { tail_at } else { 0 };
        out.extend_from_slice(&p.kind.to_le_bytes());
        out.extend_from_slice(&ENTRY_VERSION.to_le_bytes());
        out.extend_from_slice(&(p.header_size as u32).to_le_bytes());
        out.extend_from_slice(&(pad8(p.payload.len()) as u64).to_le_bytes());
        let compressed_size = if p.compressed {
            p.payload.len() as u32
        } else {
            0
        };
        out.extend_from_slice(&compressed_size.to_le_bytes());
        out.extend_from_slice(&(opt_off as u32).to_le_bytes());
        out.extend_from_slice(&p.minor.to_le_bytes());
        out.extend_from_slice(&p.major.to_le_bytes());
        out.extend_from_slice(&p.arch.to_le_bytes());
        out.extend_from_slice(&(id_off as u32).to_le_bytes());
        out.extend_from_slice(&(id_len as u32).to_le_bytes());
        out.extend_from_slice(&p.flags.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        let uncompressed = if p.compressed { p.uncompressed_size } else { 0 };
        out.extend_from_slice(&uncompressed.to_le_bytes());
        if let Some(id) = &p.identifier {
            out.extend_from_slice(id);
            out.resize(
                start + opt_off.max(ENTRY_HEADER_SIZE + pad8(id.len() + 1)),
                0,
            );
        }
        if let Some(opts) = &p.options {
            let str_off = opt_off + 8;
            out.extend_from_slice(&(str_off as u32).to_le_bytes());
            out.extend_from_slice(&p.options_len.to_le_bytes());
            out.extend_from_slice(opts);
        }
        out.resize(start + p.header_size, 0);
        out.extend_from_slice(&p.payload);
        out.resize(start + p.header_size + pad8(p.payload.len()), 0);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
