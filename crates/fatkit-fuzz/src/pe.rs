//! Windows DLLs as nvcc and the MSVC linker lay them out, written here where no Windows
//! toolchain is: a PE32+ image whose `.nv_fatb` section holds a fatbin and `.nvFatBi` its
//! wrapper, an import directory naming the DLLs it links (`cudart64_12.dll`), optionally a
//! delay-load one, strings in `.rdata` (the kernel names a host registers), and for the hybrid
//! ARM64 kinds a load configuration whose CHPE metadata pointer is set (ARM64EC: an x64 header,
//! ARM64X: an ARM64 one). The headers are object's `pe` structures, written whole.
//!
//! A writer in two phases, as object's are: every section's address and file offset is laid
//! out first (`.rdata`'s contents are laid out at its known address), then the bytes written.
//! A generator, not a reader: it lays out buffers it sized itself.
#![allow(clippy::indexing_slicing)]

use object::endian::{LittleEndian as LE, U32Bytes, U16, U32, U64};
use object::pe;
use object::pod::Pod;

/// What the DLL holds.
#[derive(Clone, Copy, Debug)]
pub struct Dll<'a> {
    /// [`X64`] or [`ARM64`].
    pub machine: u16,
    /// CHPE metadata in its load configuration: ARM64EC on an x64 header, ARM64X on an ARM64 one.
    pub hybrid: bool,
    /// The fatbin, in `.nv_fatb`.
    pub fatbin: &'a [u8],
    /// The DLLs it imports, one function each.
    pub imports: &'a [&'a str],
    /// The DLLs it delay-loads.
    pub delayed: &'a [&'a str],
    /// NUL-terminated strings in `.rdata`.
    pub strings: &'a [&'a str],
}

impl Dll<'_> {
    /// An x64 DLL of `fatbin` importing `imports`.
    pub fn x64<'a>(fatbin: &'a [u8], imports: &'a [&'a str]) -> Dll<'a> {
        Dll {
            machine: X64,
            hybrid: false,
            fatbin,
            imports,
            delayed: &[],
            strings: &[],
        }
    }
}

/// `IMAGE_FILE_MACHINE_AMD64`: an x64 image (ARM64EC with CHPE metadata).
pub const X64: u16 = pe::IMAGE_FILE_MACHINE_AMD64;
/// `IMAGE_FILE_MACHINE_ARM64`: an ARM64 image (ARM64X with CHPE metadata).
pub const ARM64: u16 = pe::IMAGE_FILE_MACHINE_ARM64;

/// Where the image is based, as the MSVC linker bases a 64-bit DLL.
pub const IMAGE_BASE: u64 = 0x1_8000_0000;
const SECTION_ALIGNMENT: u32 = 0x1000;
const FILE_ALIGNMENT: u32 = 0x200;
/// The fatbin wrapper's magic (`__fatBinC_Wrapper_t`), the `.nvFatBi` section's first word.
const WRAPPER_MAGIC: u32 = 0x466243b1;

/// The bytes of a header structure `T`, zeroed, then filled field by field by `fill`.
fn record<T: Pod>(fill: impl FnOnce(&mut T)) -> Vec<u8> {
    let mut bytes = vec![0u8; std::mem::size_of::<T>()];
    // object's PE structures are unaligned plain data: this holds for every size.
    if let Ok((t, _)) = object::pod::from_bytes_mut::<T>(&mut bytes) {
        fill(t);
    }
    bytes
}

fn u16(v: u16) -> U16<LE> {
    U16::new(LE, v)
}

fn u32(v: u32) -> U32<LE> {
    U32::new(LE, v)
}

fn u64(v: u64) -> U64<LE> {
    U64::new(LE, v)
}

/// `.rdata` laid out at its address: what the directories point at.
struct Rdata {
    rva: u32,
    bytes: Vec<u8>,
    /// (rva, size) of the import, delay-load import and load configuration directories.
    import: (u32, u32),
    delayed: (u32, u32),
    load_config: (u32, u32),
}

impl Rdata {
    fn at(&self) -> u32 {
        self.rva + self.bytes.len() as u32
    }

    fn align(&mut self, to: usize) {
        self.bytes.resize(self.bytes.len().next_multiple_of(to), 0);
    }

    /// A NUL-terminated string; its rva.
    fn string(&mut self, s: &str) -> u32 {
        let at = self.at();
        self.bytes.extend_from_slice(s.as_bytes());
        self.bytes.push(0);
        at
    }

    /// A hint/name entry and a thunk table naming it, NUL-terminated; the table's rva.
    fn thunks(&mut self, function: &str) -> u32 {
        self.align(2);
        let hint = self.at();
        self.bytes.extend_from_slice(&[0, 0]);
        self.string(function);
        self.align(8);
        let table = self.at();
        self.bytes.extend_from_slice(&u64::from(hint).to_le_bytes());
        self.bytes.extend_from_slice(&[0; 8]);
        table
    }

    fn lay_out(dll: &Dll<'_>, rva: u32) -> Rdata {
        let mut r = Rdata {
            rva,
            bytes: Vec::new(),
            import: (0, 0),
            delayed: (0, 0),
            load_config: (0, 0),
        };
        for s in dll.strings {
            r.string(s);
        }
        // Import descriptors, a null one last, then what each points at.
        r.align(8);
        let size = std::mem::size_of::<pe::ImageImportDescriptor>();
        let first = r.bytes.len();
        r.import = (r.at(), ((dll.imports.len() + 1) * size) as u32);
        r.bytes.resize(first + (dll.imports.len() + 1) * size, 0);
        for (i, name) in dll.imports.iter().enumerate() {
            let (name, lookup, address) =
                (r.string(name), r.thunks("cudaFree"), r.thunks("cudaFree"));
            let d = record(|d: &mut pe::ImageImportDescriptor| {
                d.name = U32Bytes::new(LE, name);
                d.original_first_thunk = U32Bytes::new(LE, lookup);
                d.first_thunk = U32Bytes::new(LE, address);
            });
            let at = first + i * size;
            r.bytes[at..at + size].copy_from_slice(&d);
        }
        if !dll.delayed.is_empty() {
            r.align(8);
            let size = std::mem::size_of::<pe::ImageDelayloadDescriptor>();
            let first = r.bytes.len();
            r.delayed = (r.at(), ((dll.delayed.len() + 1) * size) as u32);
            r.bytes.resize(first + (dll.delayed.len() + 1) * size, 0);
            for (i, name) in dll.delayed.iter().enumerate() {
                let name = r.string(name);
                r.align(8);
                let handle = r.at();
                r.bytes.extend_from_slice(&[0; 8]);
                let (names, addresses) = (r.thunks("cudaFree"), r.thunks("cudaFree"));
                let d = record(|d: &mut pe::ImageDelayloadDescriptor| {
                    d.attributes = u32(1); // its fields are RVAs
                    d.dll_name_rva = u32(name);
                    d.module_handle_rva = u32(handle);
                    d.import_name_table_rva = u32(names);
                    d.import_address_table_rva = u32(addresses);
                });
                let at = first + i * size;
                r.bytes[at..at + size].copy_from_slice(&d);
            }
        }
        if dll.hybrid {
            // What the pointer points at is not read: its being set makes the image hybrid.
            r.align(8);
            let metadata = r.at();
            r.bytes.extend_from_slice(&1u32.to_le_bytes());
            r.bytes.extend_from_slice(&[0; 12]);
            r.align(8);
            let size = std::mem::size_of::<pe::ImageLoadConfigDirectory64>() as u32;
            let config = record(|c: &mut pe::ImageLoadConfigDirectory64| {
                c.size = u32(size);
                c.chpe_metadata_pointer = u64(IMAGE_BASE + u64::from(metadata));
            });
            r.load_config = (r.at(), size);
            r.bytes.extend_from_slice(&config);
        }
        r
    }
}

/// One section: its name, contents and characteristics, and where it lands.
struct Section {
    name: [u8; 8],
    bytes: Vec<u8>,
    characteristics: u32,
    rva: u32,
    offset: u32,
}

impl Dll<'_> {
    /// The image's bytes.
    pub fn write(&self) -> Vec<u8> {
        const READ_DATA: u32 = pe::IMAGE_SCN_CNT_INITIALIZED_DATA | pe::IMAGE_SCN_MEM_READ;
        let nt_at = std::mem::size_of::<pe::ImageDosHeader>();
        let n_sections = 4;
        let headers_end = nt_at
            + std::mem::size_of::<pe::ImageNtHeaders64>()
            + pe::IMAGE_NUMBEROF_DIRECTORY_ENTRIES * std::mem::size_of::<pe::ImageDataDirectory>()
            + n_sections * std::mem::size_of::<pe::ImageSectionHeader>();
        let size_of_headers = (headers_end as u32).next_multiple_of(FILE_ALIGNMENT);
        // Phase one: every section's address and offset.
        let ret: &[u8] = match self.machine {
            pe::IMAGE_FILE_MACHINE_ARM64 => &[0xc0, 0x03, 0x5f, 0xd6],
            _ => &[0xc3],
        };
        let text_rva = SECTION_ALIGNMENT;
        let rdata = Rdata::lay_out(self, text_rva + SECTION_ALIGNMENT);
        let mut sections = vec![
            (
                *b".text\0\0\0",
                ret.to_vec(),
                pe::IMAGE_SCN_CNT_CODE | pe::IMAGE_SCN_MEM_EXECUTE | pe::IMAGE_SCN_MEM_READ,
            ),
            (*b".rdata\0\0", rdata.bytes.clone(), READ_DATA),
            (*b".nv_fatb", self.fatbin.to_vec(), READ_DATA),
            (*b".nvFatBi", Vec::new(), READ_DATA),
        ]
        .into_iter()
        .map(|(name, bytes, characteristics)| Section {
            name,
            bytes,
            characteristics,
            rva: 0,
            offset: 0,
        })
        .collect::<Vec<_>>();
        let (mut rva, mut offset, mut fatbin_rva) = (text_rva, size_of_headers, 0);
        for s in &mut sections {
            match &s.name {
                b".nv_fatb" => fatbin_rva = rva,
                // The wrapper: magic, version 1, the fatbin's address, no file name.
                b".nvFatBi" => {
                    s.bytes.extend_from_slice(&WRAPPER_MAGIC.to_le_bytes());
                    s.bytes.extend_from_slice(&1u32.to_le_bytes());
                    s.bytes
                        .extend_from_slice(&(IMAGE_BASE + u64::from(fatbin_rva)).to_le_bytes());
                    s.bytes.extend_from_slice(&[0; 8]);
                }
                _ => {}
            }
            (s.rva, s.offset) = (rva, offset);
            let len = (s.bytes.len() as u32).max(1);
            rva += len.next_multiple_of(SECTION_ALIGNMENT);
            offset += len.next_multiple_of(FILE_ALIGNMENT);
        }
        // Phase two: the headers, then each section at its offset.
        let mut out = record(|dos: &mut pe::ImageDosHeader| {
            dos.e_magic = u16(pe::IMAGE_DOS_SIGNATURE);
            dos.e_lfanew = u32(nt_at as u32);
        });
        out.extend(self.nt_headers(&sections, (rva, size_of_headers)));
        let mut dirs = [(0u32, 0u32); pe::IMAGE_NUMBEROF_DIRECTORY_ENTRIES];
        dirs[pe::IMAGE_DIRECTORY_ENTRY_IMPORT] = rdata.import;
        dirs[pe::IMAGE_DIRECTORY_ENTRY_DELAY_IMPORT] = rdata.delayed;
        dirs[pe::IMAGE_DIRECTORY_ENTRY_LOAD_CONFIG] = rdata.load_config;
        for (va, size) in dirs {
            out.extend(record(|d: &mut pe::ImageDataDirectory| {
                d.virtual_address = u32(va);
                d.size = u32(size);
            }));
        }
        for s in &sections {
            out.extend(record(|h: &mut pe::ImageSectionHeader| {
                h.name = s.name;
                h.virtual_size = u32(s.bytes.len() as u32);
                h.virtual_address = u32(s.rva);
                h.size_of_raw_data = u32((s.bytes.len() as u32).next_multiple_of(FILE_ALIGNMENT));
                h.pointer_to_raw_data = u32(s.offset);
                h.characteristics = u32(s.characteristics);
            }));
        }
        out.resize(offset as usize, 0);
        for s in &sections {
            let start = s.offset as usize;
            out[start..start + s.bytes.len()].copy_from_slice(&s.bytes);
        }
        out
    }

    /// The NT headers of an image of `sections`, `size_of_image` and `size_of_headers`.
    fn nt_headers(
        &self,
        sections: &[Section],
        (size_of_image, size_of_headers): (u32, u32),
    ) -> Vec<u8> {
        record(|nt: &mut pe::ImageNtHeaders64| {
            self.fill_nt_headers(nt, sections, (size_of_image, size_of_headers))
        })
    }

    fn fill_nt_headers(
        &self,
        nt: &mut pe::ImageNtHeaders64,
        sections: &[Section],
        (size_of_image, size_of_headers): (u32, u32),
    ) {
        nt.signature = u32(pe::IMAGE_NT_SIGNATURE);
        let f = &mut nt.file_header;
        f.machine = u16(self.machine);
        f.number_of_sections = u16(sections.len() as u16);
        f.size_of_optional_header = u16((std::mem::size_of::<pe::ImageOptionalHeader64>()
            + pe::IMAGE_NUMBEROF_DIRECTORY_ENTRIES * std::mem::size_of::<pe::ImageDataDirectory>())
            as u16);
        f.characteristics = u16(pe::IMAGE_FILE_EXECUTABLE_IMAGE
            | pe::IMAGE_FILE_LARGE_ADDRESS_AWARE
            | pe::IMAGE_FILE_DLL);
        let o = &mut nt.optional_header;
        o.magic = u16(pe::IMAGE_NT_OPTIONAL_HDR64_MAGIC);
        o.major_linker_version = 14;
        let code = sections.first().map_or(0, |s| s.bytes.len() as u32);
        o.size_of_code = u32(code.next_multiple_of(FILE_ALIGNMENT));
        o.size_of_initialized_data = u32(sections
            .iter()
            .skip(1)
            .map(|s| (s.bytes.len() as u32).next_multiple_of(FILE_ALIGNMENT))
            .sum());
        o.base_of_code = u32(SECTION_ALIGNMENT);
        o.image_base = u64(IMAGE_BASE);
        o.section_alignment = u32(SECTION_ALIGNMENT);
        o.file_alignment = u32(FILE_ALIGNMENT);
        o.major_operating_system_version = u16(6);
        o.major_subsystem_version = u16(6);
        o.size_of_image = u32(size_of_image);
        o.size_of_headers = u32(size_of_headers);
        o.subsystem = u16(pe::IMAGE_SUBSYSTEM_WINDOWS_CUI);
        o.dll_characteristics = u16(pe::IMAGE_DLLCHARACTERISTICS_HIGH_ENTROPY_VA
            | pe::IMAGE_DLLCHARACTERISTICS_DYNAMIC_BASE
            | pe::IMAGE_DLLCHARACTERISTICS_NX_COMPAT);
        o.size_of_stack_reserve = u64(0x10_0000);
        o.size_of_stack_commit = u64(0x1000);
        o.size_of_heap_reserve = u64(0x10_0000);
        o.size_of_heap_commit = u64(0x1000);
        o.number_of_rva_and_sizes = u32(pe::IMAGE_NUMBEROF_DIRECTORY_ENTRIES as u32);
    }
}

/// A hostile shape (`crate::hostile`): an x64 image of `n` `.nv_fatb` sections side by side
/// (at most 65,535, the count's 16 bits), each over 8 zero bytes of its own, as no linker lays
/// one out: each section is checked against the sections searched before it.
pub fn sections_side_by_side(n: usize) -> Vec<u8> {
    let n = n.min(usize::from(u16::MAX));
    let nt_at = std::mem::size_of::<pe::ImageDosHeader>();
    let headers_end = nt_at
        + std::mem::size_of::<pe::ImageNtHeaders64>()
        + pe::IMAGE_NUMBEROF_DIRECTORY_ENTRIES * std::mem::size_of::<pe::ImageDataDirectory>()
        + n * std::mem::size_of::<pe::ImageSectionHeader>();
    let data_at = (headers_end as u32).next_multiple_of(FILE_ALIGNMENT);
    let sections: Vec<Section> = (0..n as u32)
        .map(|i| Section {
            name: *b".nv_fatb",
            bytes: vec![0; 8],
            characteristics: pe::IMAGE_SCN_CNT_INITIALIZED_DATA | pe::IMAGE_SCN_MEM_READ,
            rva: (i + 1) * SECTION_ALIGNMENT,
            offset: data_at + 8 * i,
        })
        .collect();
    let dll = Dll::x64(&[], &[]);
    let mut out = record(|dos: &mut pe::ImageDosHeader| {
        dos.e_magic = u16(pe::IMAGE_DOS_SIGNATURE);
        dos.e_lfanew = u32(nt_at as u32);
    });
    let size_of_image = (n as u32 + 1) * SECTION_ALIGNMENT;
    out.extend(dll.nt_headers(&sections, (size_of_image, data_at)));
    out.resize(out.len() + pe::IMAGE_NUMBEROF_DIRECTORY_ENTRIES * 8, 0);
    for s in &sections {
        out.extend(record(|h: &mut pe::ImageSectionHeader| {
            h.name = s.name;
            h.virtual_size = u32(8);
            h.virtual_address = u32(s.rva);
            h.size_of_raw_data = u32(8);
            h.pointer_to_raw_data = u32(s.offset);
            h.characteristics = u32(s.characteristics);
        }));
    }
    out.resize(data_at as usize + 8 * n, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::read::pe::PeFile64;
    use object::{Object, ObjectSection};

    /// Write, then parse with object's reader: the sections, machine, imports and load
    /// configuration are what was asked for.
    #[test]
    fn a_written_dll_reads_back() {
        let fatbin = [
            0x50, 0xed, 0x55, 0xba, 1, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        for (machine, hybrid) in [
            (pe::IMAGE_FILE_MACHINE_AMD64, false),
            (pe::IMAGE_FILE_MACHINE_ARM64, false),
            (pe::IMAGE_FILE_MACHINE_AMD64, true),
            (pe::IMAGE_FILE_MACHINE_ARM64, true),
        ] {
            let dll = Dll {
                machine,
                hybrid,
                fatbin: &fatbin,
                imports: &["KERNEL32.dll", "cudart64_12.dll"],
                delayed: &["cudart64_110.dll"],
                strings: &["_Z6kernelPf"],
            }
            .write();
            let file = PeFile64::parse(&*dll).unwrap();
            assert_eq!(file.nt_headers().file_header.machine.get(LE), machine);
            let names: Vec<&str> = file.sections().map(|s| s.name().unwrap()).collect();
            assert_eq!(names, [".text", ".rdata", ".nv_fatb", ".nvFatBi"]);
            let section = file.section_by_name(".nv_fatb").unwrap();
            assert_eq!(section.data().unwrap(), fatbin);
            let table = file.import_table().unwrap().unwrap();
            let imports: Vec<&[u8]> = table
                .descriptors()
                .unwrap()
                .map(|d| table.name(d.unwrap().name.get(LE)).unwrap())
                .collect();
            assert_eq!(imports, [&b"KERNEL32.dll"[..], b"cudart64_12.dll"]);
            let dirs = file.data_directories();
            let delayed = dirs
                .delay_load_import_table(&*dll, &file.section_table())
                .unwrap()
                .unwrap();
            let d = delayed.descriptors().unwrap().next().unwrap().unwrap();
            assert_eq!(
                delayed.name(d.dll_name_rva.get(LE)).unwrap(),
                b"cudart64_110.dll"
            );
            // object reads a directory of address 0 as none.
            let config = dirs.get(pe::IMAGE_DIRECTORY_ENTRY_LOAD_CONFIG);
            assert_eq!(config.is_some(), hybrid);
        }
    }

    #[test]
    fn the_hostile_shape_is_an_image_of_n_sections() {
        let image = sections_side_by_side(1000);
        let file = PeFile64::parse(&*image).unwrap();
        assert_eq!(file.sections().count(), 1000);
        assert!(file
            .sections()
            .all(|s| s.name() == Ok(".nv_fatb") && s.data().is_ok_and(|d| d == [0; 8])));
    }
}
