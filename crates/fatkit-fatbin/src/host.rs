//! What a host ELF file says of where it runs and which kernels its code can launch: the
//! machine it is built for (an x86-64 library does not run on a GPU that lives in aarch64
//! machines), and the kernels its code names. The CUDA runtime launches a kernel only once the
//! host code has registered it by name (`__cudaRegisterFunction(handle, stub, "name", "name",
//! ...)`, the mangled name a string literal of the host file), and the driver API looks one up
//! by name (`cuModuleGetFunction`): a kernel whose name is in no host string is never launched
//! by that file (docs/ARCH_RULES.md section 11).

use std::collections::HashSet;

use object::read::elf::ElfFile64;
use object::{Object, ObjectSection, SectionKind};
use serde::Serialize;

/// The machine a host ELF file is built for (`e_machine`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Machine {
    X86_64,
    Aarch64,
    /// Another `e_machine` (POWER's 21, ...).
    Other(u16),
}

impl Machine {
    /// `x86-64`, `aarch64`, `e_machine 21`.
    pub fn name(self) -> String {
        match self {
            Machine::X86_64 => "x86-64".to_owned(),
            Machine::Aarch64 => "aarch64".to_owned(),
            Machine::Other(m) => format!("e_machine {m}"),
        }
    }
}

/// `EM_X86_64`, `EM_AARCH64`.
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;

/// The machine of a host ELF file (64-bit little-endian); `None` for anything else, and for
/// a device ELF (`EM_CUDA`).
pub fn machine(data: &[u8]) -> Option<Machine> {
    if !data.starts_with(b"\x7fELF\x02\x01") {
        return None;
    }
    match crate::bytes::u16_at(data, 18)? {
        EM_X86_64 => Some(Machine::X86_64),
        EM_AARCH64 => Some(Machine::Aarch64),
        crate::cubin::EM_CUDA => None,
        other => Some(Machine::Other(other)),
    }
}

/// The libraries a host ELF file names in its `DT_NEEDED` entries, in order; none for anything
/// unreadable.
pub(crate) fn needed(data: &[u8]) -> Vec<String> {
    use object::read::elf::Dyn;
    let Ok(file) = ElfFile64::<object::Endianness>::parse(data) else {
        return Vec::new();
    };
    let endian = file.endian();
    let table = file.elf_section_table();
    let Ok(Some((entries, link))) = table.dynamic(endian, data) else {
        return Vec::new();
    };
    let Ok(strings) = table.strings(endian, data, link) else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|d| d.tag32(endian) == Some(object::elf::DT_NEEDED))
        .filter_map(|d| d.string(endian, strings).ok())
        .map(|name| String::from_utf8_lossy(name).into_owned())
        .collect()
}

/// Whether a host ELF file links PyTorch (`DT_NEEDED` of `libc10.so` or a `libtorch*.so`): a
/// PyTorch extension, built with `TORCH_CUDA_ARCH_LIST`, which is then the notation to name.
pub fn links_torch(data: &[u8]) -> bool {
    needed(data)
        .iter()
        .any(|name| name.starts_with("libc10") || name.starts_with("libtorch"))
}

/// The fewest of a file's kernels its host strings must name for the file to count as one that
/// names its kernels (registers them by literal name): 1 in 2. A file that names fewer builds
/// its names some other way, and nothing is concluded from a name it lacks.
pub const NAMED_SHARE: (usize, usize) = (1, 2);

/// Of `kernels` (the kernels of the file's own device code), those no host string of `data`
/// names, when the file names at least [`NAMED_SHARE`] of them; `None` when it is not a host
/// ELF file or names too few to tell. Strings are read from the allocated read-only and data
/// sections, never from the device code's own (`.nv_fatbin`, `__nv_relfatbin`, `.nvFatBinSegment`),
/// whose cubins carry every kernel's name in their symbol tables. Work is linear in the
/// sections read; memory is the set of names given.
pub fn unnamed(data: &[u8], kernels: &HashSet<&str>) -> Option<Vec<String>> {
    machine(data)?;
    if kernels.is_empty() {
        return None;
    }
    let file = ElfFile64::<object::Endianness>::parse(data).ok()?;
    let mut named: HashSet<&str> = HashSet::new();
    for section in file.sections() {
        let name = section.name().unwrap_or_default();
        let device = matches!(name, ".nv_fatbin" | "__nv_relfatbin" | ".nvFatBinSegment");
        let kind = section.kind();
        let strings = matches!(
            kind,
            SectionKind::ReadOnlyData
                | SectionKind::ReadOnlyString
                | SectionKind::Data
                | SectionKind::ReadOnlyDataWithRel
        );
        if device || !strings {
            continue;
        }
        let Ok(bytes) = section.data() else { continue };
        for s in bytes.split(|&b| b == 0) {
            if let Ok(s) = std::str::from_utf8(s) {
                if let Some(k) = kernels.get(s) {
                    named.insert(k);
                }
            }
        }
    }
    let (num, den) = NAMED_SHARE;
    if named.len() * den < kernels.len() * num {
        return None;
    }
    let mut out: Vec<String> = kernels
        .iter()
        .filter(|k| !named.contains(*k))
        .map(|k| (*k).to_owned())
        .collect();
    out.sort();
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_machine_is_read_from_the_header_and_a_device_elf_has_none() {
        let mut elf = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x03\0".to_vec();
        elf.extend_from_slice(&62u16.to_le_bytes());
        assert_eq!(machine(&elf), Some(Machine::X86_64));
        elf[18..20].copy_from_slice(&183u16.to_le_bytes());
        assert_eq!(machine(&elf), Some(Machine::Aarch64));
        elf[18..20].copy_from_slice(&190u16.to_le_bytes());
        assert_eq!(machine(&elf), None);
        assert_eq!(machine(b"\x7fELF"), None);
        assert_eq!(machine(b"not an elf file at all"), None);
    }

    #[test]
    fn a_file_that_is_not_elf_names_nothing_to_conclude_from() {
        let kernels: HashSet<&str> = ["k"].into_iter().collect();
        assert_eq!(unnamed(b"k\0k\0", &kernels), None);
    }
}
