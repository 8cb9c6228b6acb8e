//! What a host file (an ELF file, or a Windows PE image: `crate::pe`) says of where it runs and
//! which kernels its code can launch: the machine it is built for (an x86-64 library does not
//! run on a GPU that lives in aarch64 machines), and the kernels its code names. The CUDA
//! runtime launches a kernel only once the host code has registered it by name
//! (`__cudaRegisterFunction(handle, stub, "name", "name", ...)`, the mangled name a string
//! literal of the host file), and the driver API looks one up by name (`cuModuleGetFunction`):
//! a kernel whose name is in no host string is never launched by that file (docs/ARCH_RULES.md
//! section 11).

use std::collections::HashSet;

use object::read::elf::ElfFile64;
use object::{Object, ObjectSection, SectionKind};

use crate::pe;
use serde::Serialize;

/// The machine a host file is built for (an ELF file's `e_machine`, a PE image's machine).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Machine {
    X86_64,
    Aarch64,
    /// Another `e_machine` (POWER's 21, ...).
    Other(u16),
    /// A Windows image of ARM64 code that keeps the x64 calling convention, so that it mixes
    /// with x64 code under emulation (an x64 header with CHPE metadata: `crate::pe::machine`).
    Arm64ec,
    /// A Windows image holding both ARM64 and ARM64EC code (an ARM64 header with CHPE
    /// metadata).
    Arm64x,
    /// Another PE machine (x86's 0x14c, ...).
    Pe(u16),
}

impl Machine {
    /// `x86-64`, `aarch64`, `e_machine 21`, `ARM64EC`, `ARM64X`, `PE machine 0x14c`.
    pub fn name(self) -> String {
        match self {
            Machine::X86_64 => "x86-64".to_owned(),
            Machine::Aarch64 => "aarch64".to_owned(),
            Machine::Other(m) => format!("e_machine {m}"),
            Machine::Arm64ec => "ARM64EC".to_owned(),
            Machine::Arm64x => "ARM64X".to_owned(),
            Machine::Pe(m) => format!("PE machine {m:#x}"),
        }
    }

    /// Whether its code is 64-bit Arm: aarch64, and the ARM64 code of ARM64EC and ARM64X.
    pub fn is_arm64(self) -> bool {
        matches!(self, Machine::Aarch64 | Machine::Arm64ec | Machine::Arm64x)
    }
}

/// `EM_X86_64`, `EM_AARCH64`.
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;

/// The machine of a host ELF file (64-bit little-endian) or of a PE image
/// (`crate::pe::machine`); `None` for anything else, and for a device ELF (`EM_CUDA`).
pub fn machine(data: &[u8]) -> Option<Machine> {
    use object::pe::{
        IMAGE_FILE_MACHINE_AMD64 as AMD64, IMAGE_FILE_MACHINE_ARM64 as ARM64,
        IMAGE_FILE_MACHINE_ARM64EC as ARM64EC, IMAGE_FILE_MACHINE_ARM64X as ARM64X,
    };
    if !data.starts_with(b"\x7fELF\x02\x01") {
        return Some(match pe::machine(data)? {
            (AMD64, false) => Machine::X86_64,
            (ARM64, false) => Machine::Aarch64,
            (AMD64 | ARM64EC, _) => Machine::Arm64ec,
            (ARM64 | ARM64X, _) => Machine::Arm64x,
            (other, _) => Machine::Pe(other),
        });
    }
    match crate::bytes::u16_at(data, 18)? {
        EM_X86_64 => Some(Machine::X86_64),
        EM_AARCH64 => Some(Machine::Aarch64),
        crate::cubin::EM_CUDA => None,
        other => Some(Machine::Other(other)),
    }
}

/// The libraries a host ELF file names in its `DT_NEEDED` entries, or the DLLs a PE image
/// imports (delay-loaded ones too), in order; none for anything unreadable.
pub(crate) fn needed(data: &[u8]) -> Vec<String> {
    use object::read::elf::Dyn;
    if pe::nt_headers_offset(data).is_some() {
        return pe::imports(data).into_iter().map(|i| i.name).collect();
    }
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

/// Whether a host file whose libraries are `needed` (`needed` above) links PyTorch (`DT_NEEDED` of `libc10.so` or a `libtorch*.so`; on
/// Windows an import of `c10.dll` or a `torch*.dll`, the DLLs of a wheel's `torch/lib`): a
/// PyTorch extension, built with `TORCH_CUDA_ARCH_LIST`, which is then the notation to name.
pub fn links_torch(needed: &[String]) -> bool {
    needed.iter().any(|name| {
        let dll = name.to_ascii_lowercase();
        name.starts_with("libc10")
            || name.starts_with("libtorch")
            || (dll.ends_with(".dll") && (dll.starts_with("c10") || dll.starts_with("torch")))
    })
}

/// The fewest of a file's kernels its host strings must name for the file to count as one that
/// names its kernels (registers them by literal name): 1 in 2. A file that names fewer builds
/// its names some other way, and nothing is concluded from a name it lacks.
pub(crate) const NAMED_SHARE: (usize, usize) = (1, 2);

/// Of `kernels` (the kernels of the file's own device code), those no host string of `data`
/// names, when the file names at least `NAMED_SHARE` of them; `None` when it is not a host
/// file (ELF or PE) or names too few to tell. Strings are read from the allocated read-only and
/// data sections, never from the device code's own (`.nv_fatbin`, `__nv_relfatbin`,
/// `.nvFatBinSegment`; in a PE image `.nv_fatb`, `.nvFatBi`), whose cubins carry every kernel's
/// name in their symbol tables. Work is linear in the sections read; memory is the set of
/// names given.
pub fn unnamed<'k>(data: &[u8], kernels: impl IntoIterator<Item = &'k str>) -> Option<Vec<String>> {
    machine(data)?;
    let kernels = KernelNames::of(kernels);
    if kernels.set.is_empty() {
        return None;
    }
    let file = object::File::parse(data).ok()?;
    let sections = match &file {
        object::File::Pe32(_) | object::File::Pe64(_) => pe::data_sections(&file, data),
        _ => elf_data_sections(&file),
    };
    // Each section's strings looked up on every core: a string whose length no kernel name
    // has is passed over without hashing (most of a library's strings are short).
    let named_per_section = crate::par::map(
        &sections,
        || (),
        |_, bytes| {
            let mut named: Vec<&[u8]> = Vec::new();
            let mut from = 0;
            for end in memchr::memchr_iter(0, bytes).chain([bytes.len()]) {
                let s = bytes.get(from..end).unwrap_or_default();
                from = end + 1;
                if kernels.may_hold(s.len()) {
                    if let Some(&k) = kernels.set.get(s) {
                        named.push(k);
                    }
                }
            }
            named
        },
    );
    let named: HashSet<&[u8], Fnv> = named_per_section.into_iter().flatten().collect();
    let (num, den) = NAMED_SHARE;
    if named.len() * den < kernels.set.len() * num {
        return None;
    }
    let mut out: Vec<String> = kernels
        .set
        .iter()
        .filter(|k| !named.contains(*k))
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    out.sort();
    Some(out)
}

/// The kernel names `unnamed` looks for, each once, and the lengths they have.
struct KernelNames<'k> {
    set: HashSet<&'k [u8], Fnv>,
    /// Bit `n` set where some name is `n` bytes long (names longer than the bitmap are
    /// looked up whatever their length).
    lengths: Vec<u64>,
}

impl<'k> KernelNames<'k> {
    const TRACKED: usize = 1 << 14;

    fn of(kernels: impl IntoIterator<Item = &'k str>) -> KernelNames<'k> {
        let mut lengths = vec![0u64; Self::TRACKED / 64];
        let set: HashSet<&[u8], Fnv> = kernels
            .into_iter()
            .map(|k| {
                if let Some(word) = lengths.get_mut(k.len() / 64) {
                    *word |= 1 << (k.len() % 64);
                }
                k.as_bytes()
            })
            .collect();
        KernelNames { set, lengths }
    }

    fn may_hold(&self, len: usize) -> bool {
        len >= Self::TRACKED
            || self
                .lengths
                .get(len / 64)
                .is_some_and(|word| word & (1 << (len % 64)) != 0)
    }
}

/// FNV-1a (by words) for the names `unnamed` hashes: a few times SipHash's speed on short keys, and no
/// key of these comes from someone choosing collisions to slow a reader down more than its
/// own size does (each lookup still compares the bytes).
#[derive(Clone, Copy, Default)]
struct Fnv;

impl std::hash::BuildHasher for Fnv {
    type Hasher = FnvHasher;
    fn build_hasher(&self) -> FnvHasher {
        FnvHasher(0xCBF2_9CE4_8422_2325)
    }
}

struct FnvHasher(u64);

impl std::hash::Hasher for FnvHasher {
    fn write(&mut self, bytes: &[u8]) {
        // A word at a time (`fatkit_arch::fingerprint`): names run to hundreds of bytes.
        self.0 = (self.0 ^ fatkit_arch::fingerprint::fingerprint(bytes))
            .wrapping_mul(0x0000_0100_0000_01B3);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// The bytes of each allocated read-only or data section of a host ELF file, but for the
/// device code's own.
fn elf_data_sections<'data>(file: &object::File<'data>) -> Vec<&'data [u8]> {
    file.sections()
        .filter(|section| {
            let name = section.name().unwrap_or_default();
            let device = matches!(name, ".nv_fatbin" | "__nv_relfatbin" | ".nvFatBinSegment");
            let strings = matches!(
                section.kind(),
                SectionKind::ReadOnlyData
                    | SectionKind::ReadOnlyString
                    | SectionKind::Data
                    | SectionKind::ReadOnlyDataWithRel
            );
            strings && !device
        })
        .filter_map(|section| section.data().ok())
        .collect()
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
        // A PE image: its header's machine, the hybrid kinds by their CHPE metadata
        // (`tests/tests/it/audit/windows.rs` writes those whole).
        let mut pe = vec![0u8; 0x48];
        pe[..2].copy_from_slice(b"MZ");
        pe[0x3c..0x40].copy_from_slice(&0x40u32.to_le_bytes());
        pe[0x40..0x44].copy_from_slice(b"PE\0\0");
        for (raw, m) in [
            (0x8664u16, Machine::X86_64),
            (0xAA64, Machine::Aarch64),
            (0xA641, Machine::Arm64ec),
            (0xA64E, Machine::Arm64x),
            (0x14c, Machine::Pe(0x14c)),
        ] {
            pe[0x44..0x46].copy_from_slice(&raw.to_le_bytes());
            assert_eq!(machine(&pe), Some(m), "{raw:#x}");
        }
        assert_eq!(Machine::Pe(0x14c).name(), "PE machine 0x14c");
        assert!(Machine::Arm64x.is_arm64() && !Machine::X86_64.is_arm64());
        assert_eq!(machine(b"not an elf file at all"), None);
    }

    #[test]
    fn a_file_that_is_not_elf_names_nothing_to_conclude_from() {
        assert_eq!(unnamed(b"k\0k\0", ["k"]), None);
    }
}
