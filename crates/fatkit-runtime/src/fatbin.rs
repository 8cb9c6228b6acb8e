//! The validation an embedded fatbin passes before any pointer to it reaches the driver
//! (docs/FATBIN_FORMAT.md sections 2 and 4): `cuModuleLoadData` takes a bare pointer and reads
//! the sizes it finds there, so bytes that are short, garbage or from another build must be
//! refused here, in safe code, with a message. These few lines, not fatkit-fatbin's full
//! reader: a binary that embeds kernels should not link zstd, lz4, object and zip to check a
//! header.

use fatkit_arch::Target;

const MAGIC: u32 = 0xBA55_ED50;
const HEADER: usize = 16;
const ENTRY_HEADER: usize = 64;
const ENTRY_VERSION: u16 = 0x0101;
const KIND_PTX: u16 = 1;
const KIND_CUBIN: u16 = 2;
const KIND_LTO_IR: u16 = 8;
const FLAG_SUFFIX_A: u64 = 0x10_0000;
const FLAG_SUFFIX_F: u64 = 0x20_0000;
const FLAG_COMPRESSED: u64 = 0x2000 | 0x8000;

/// The SM an uncompressed cubin's own ELF header names (docs/FATBIN_FORMAT.md section 5: two
/// `e_flags` layouts); `None` when the payload is not an ELF64 cubin.
fn elf_sm(cubin: &[u8]) -> Option<u32> {
    if cubin.get(..4)? != b"\x7fELF" || u16_at(cubin, 18)? != 190 {
        return None;
    }
    let (os_abi, abi_version) = (*cubin.get(7)?, *cubin.get(8)?);
    let e_flags = u32_at(cubin, 48)?;
    let new_abi = abi_version >= 8 || os_abi == 0x41 || os_abi == 0x29;
    Some(if new_abi {
        (e_flags >> 8) & 0xff
    } else {
        e_flags & 0xff
    })
}

fn le<const N: usize>(data: &[u8], at: usize) -> Option<[u8; N]> {
    data.get(at..at.checked_add(N)?)?.try_into().ok()
}
fn u16_at(data: &[u8], at: usize) -> Option<u16> {
    le(data, at).map(u16::from_le_bytes)
}
fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    le(data, at).map(u32::from_le_bytes)
}
fn u64_at(data: &[u8], at: usize) -> Option<u64> {
    le(data, at).map(u64::from_le_bytes)
}

/// The targets of a fatbin's cubin and PTX entries, in order, after checking that its header
/// and every entry lie within `data`: magic, version 1, a 16-byte header, entries whose header
/// and payload sizes are multiples of 8 and add up exactly to the size the header declares.
pub fn targets(data: &[u8]) -> Result<Vec<Target>, String> {
    if data.len() < HEADER {
        return Err(format!(
            "{} bytes, shorter than a fatbin header",
            data.len()
        ));
    }
    if u32_at(data, 0) != Some(MAGIC) {
        return Err("no fatbin magic (0xBA55ED50) at the start".to_owned());
    }
    if u16_at(data, 4) != Some(1) || u16_at(data, 6) != Some(HEADER as u16) {
        return Err("fatbin header version or size is not 1 and 16".to_owned());
    }
    let declared = u64_at(data, 8).unwrap_or(u64::MAX);
    let end = usize::try_from(declared)
        .ok()
        .and_then(|n| n.checked_add(HEADER))
        .filter(|&end| end <= data.len() && declared.is_multiple_of(8))
        .ok_or_else(|| {
            format!(
                "the header declares {declared} bytes of entries, the slice holds {}",
                data.len() - HEADER
            )
        })?;
    let mut out = Vec::new();
    let mut at = HEADER;
    while at < end {
        let bad = |what: &str| format!("entry at byte {at}: {what}");
        let (Some(kind), Some(version), Some(header), Some(payload), Some(sm), Some(flags)) = (
            u16_at(data, at),
            u16_at(data, at + 2),
            u32_at(data, at + 4),
            u64_at(data, at + 8),
            u32_at(data, at + 0x1c),
            u64_at(data, at + 0x28),
        ) else {
            return Err(bad("its header runs past the declared size"));
        };
        if version != ENTRY_VERSION {
            return Err(bad(&format!("version {version:#06x}, not 0x0101")));
        }
        let header = usize::try_from(header).unwrap_or(usize::MAX);
        if header < ENTRY_HEADER || !header.is_multiple_of(8) || !payload.is_multiple_of(8) {
            return Err(bad("header or payload size is not a multiple of 8"));
        }
        let next = usize::try_from(payload)
            .ok()
            .and_then(|p| at.checked_add(header)?.checked_add(p))
            .filter(|&next| next <= end)
            .ok_or_else(|| bad("its payload runs past the declared size"))?;
        // The image, not its entry header, is what the driver gets: an uncompressed cubin
        // whose ELF names another SM is refused (docs/ARCH_RULES.md section 2).
        if kind == KIND_CUBIN && flags & FLAG_COMPRESSED == 0 {
            let own = data.get(at + header..next).and_then(elf_sm);
            if let Some(own) = own.filter(|&own| own != sm) {
                return Err(bad(&format!(
                    "its header says sm_{sm}, its cubin is sm_{own}"
                )));
            }
        }
        let suffix = if flags & FLAG_SUFFIX_A != 0 {
            "a"
        } else if flags & FLAG_SUFFIX_F != 0 {
            "f"
        } else {
            ""
        };
        let prefix = match kind {
            KIND_CUBIN => Some("sm"),
            KIND_PTX => Some("compute"),
            KIND_LTO_IR => None,
            other => return Err(bad(&format!("unknown kind {other}"))),
        };
        if let Some(prefix) = prefix {
            let name = format!("{prefix}_{sm}{suffix}");
            out.push(
                name.parse()
                    .map_err(|_| bad(&format!("'{name}' is not a target")))?,
            );
        }
        at = next;
    }
    Ok(out)
}

/// A fatbin whose entries are `targets`, each an 8-byte payload of zeros, laid out as
/// docs/FATBIN_FORMAT.md section 2 says: what [`targets`] accepts, for tests and benchmarks of
/// modules made from image lists. Nothing a driver could load.
pub fn placeholder(targets: &[Target]) -> Vec<u8> {
    let mut entries = Vec::new();
    for t in targets {
        let mut h = [0u8; ENTRY_HEADER];
        let kind = if t.is_ptx() { KIND_PTX } else { KIND_CUBIN };
        let sm: u32 = t.cc.digits().parse().unwrap_or(0);
        let name = t.to_string();
        let flags: u64 =
            0x11 | if name.ends_with('a') {
                FLAG_SUFFIX_A
            } else {
                0
            } | if name.ends_with('f') {
                FLAG_SUFFIX_F
            } else {
                0
            };
        for (at, bytes) in [
            (0, &kind.to_le_bytes()[..]),
            (2, &ENTRY_VERSION.to_le_bytes()[..]),
            (4, &(ENTRY_HEADER as u32).to_le_bytes()[..]),
            (8, &8u64.to_le_bytes()[..]),
            (0x1c, &sm.to_le_bytes()[..]),
            (0x28, &flags.to_le_bytes()[..]),
        ] {
            if let Some(dst) = h.get_mut(at..at + bytes.len()) {
                dst.copy_from_slice(bytes);
            }
        }
        entries.extend_from_slice(&h);
        entries.extend_from_slice(&[0u8; 8]);
    }
    let mut out = MAGIC.to_le_bytes().to_vec();
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&(HEADER as u16).to_le_bytes());
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    out.extend_from_slice(&entries);
    out
}
