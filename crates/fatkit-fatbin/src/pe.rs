//! Windows PE images (DLLs, EXEs, Python's `.pyd`): what fatkit reads of their headers. The
//! device code is in a section, as in an ELF file: nvcc on Windows puts each fatbin in
//! `.nv_fatb` (an image's section names are at most eight bytes; the ELF one is `.nv_fatbin`)
//! and its wrapper in `.nvFatBi` (ELF: `.nvFatBinSegment`), as `objdump -h` shows of NVIDIA's
//! own `curand64_10.dll` (wheel `nvidia-curand` 10.4.5.25, `win_amd64`). Here: whether a file
//! is a PE image, its machine (x64, ARM64, and the hybrid ARM64EC and ARM64X, told apart by
//! their CHPE metadata), and the DLLs it imports (`cudart64_12.dll`: `crate::runtime`).
//!
//! Reads go through object's PE reader, which checks every offset against the file; what this
//! module reads itself goes through `get`. Work is bounded whatever the file says: a section's
//! name is the eight bytes of its header, never looked up in a string table (an image has none;
//! a crafted one could send every section's name to the same unterminated string), and of the
//! imports at most `MAX_IMPORTS` descriptors are read, each name within [`MAX_NAME`] bytes.

use object::pe::{self, ImageLoadConfigDirectory32, ImageLoadConfigDirectory64};
use object::read::pe::{
    DelayLoadImportTable, ImageNtHeaders, ImageOptionalHeader, ImportTable, PeFile, SectionTable,
};
use object::LittleEndian as LE;

use crate::bytes::{u16_at, u32_at, u64_at};

/// The sections of a PE image that hold fatbin containers.
pub(crate) const FATBIN_SECTIONS: [&str; 1] = [".nv_fatb"];

/// The section of a PE image that holds the fatbin wrappers (magic, version, pointer), not
/// containers; the ELF one is `.nvFatBinSegment`.
pub(crate) const WRAPPER_SECTION: &str = ".nvFatBi";

/// The longest DLL name read (Windows' `MAX_PATH` is 260).
pub const MAX_NAME: usize = 260;

/// The most descriptors read of each import table: a DLL imports tens of DLLs
/// (`curand64_10.dll` one, `KERNEL32.dll`); a runtime named past this many is not reported.
pub(crate) const MAX_IMPORTS: usize = 1024;

/// The section table of a parsed PE image; `None` for any other file.
fn section_table<'data>(file: &object::File<'data>) -> Option<SectionTable<'data>> {
    match file {
        object::File::Pe32(f) => Some(f.section_table()),
        object::File::Pe64(f) => Some(f.section_table()),
        _ => None,
    }
}

/// Each section of a PE image, in order: its name as its header holds it (at most eight
/// bytes, made printable) and the file range of its bytes (offset, size: the smaller of its
/// virtual and raw sizes, as object reads a section), `None` where it has none.
pub(crate) fn sections(file: &object::File<'_>) -> Vec<(String, Option<(u64, u64)>)> {
    let Some(table) = section_table(file) else {
        return Vec::new();
    };
    table
        .iter()
        .map(|s| {
            let name = String::from_utf8_lossy(s.raw_name());
            let (offset, size) = s.pe_file_range();
            let range = (size > 0).then_some((u64::from(offset), u64::from(size)));
            (crate::printable(&name).into_owned(), range)
        })
        .collect()
}

/// The bytes of each section of a PE image that holds initialized data and no code (`.rdata`,
/// `.data`: where a host's strings are), but for the device code's own ([`FATBIN_SECTIONS`],
/// [`WRAPPER_SECTION`]).
pub(crate) fn data_sections<'data>(
    file: &object::File<'data>,
    data: &'data [u8],
) -> Vec<&'data [u8]> {
    let Some(table) = section_table(file) else {
        return Vec::new();
    };
    table
        .iter()
        .filter(|s| {
            let flags = s.characteristics.get(LE);
            let name = s.raw_name();
            flags & pe::IMAGE_SCN_CNT_INITIALIZED_DATA != 0
                && flags & (pe::IMAGE_SCN_CNT_CODE | pe::IMAGE_SCN_MEM_EXECUTE) == 0
                && !FATBIN_SECTIONS.iter().any(|n| n.as_bytes() == name)
                && name != WRAPPER_SECTION.as_bytes()
        })
        .filter_map(|s| s.pe_data(data).ok())
        .collect()
}

/// The offset of the NT headers (`PE\0\0`) when `data` is a PE image: an MS-DOS header whose
/// `e_lfanew` points at the PE signature. `None` for anything else (a bare MS-DOS program too).
pub(crate) fn nt_headers_offset(data: &[u8]) -> Option<usize> {
    if !data.starts_with(b"MZ") {
        return None;
    }
    let at = usize::try_from(u32_at(data, 0x3c)?).ok()?;
    (data.get(at..at.checked_add(4)?)? == b"PE\0\0").then_some(at)
}

/// A PE image's machine as its file header says it (`IMAGE_FILE_MACHINE_AMD64`, 0x8664;
/// `IMAGE_FILE_MACHINE_ARM64`, 0xAA64), and whether the image carries CHPE metadata (its load
/// configuration's `CHPEMetadataPointer` set), which makes an x64 header ARM64EC and an ARM64
/// one ARM64X, as LLVM's COFF reader tells them (`COFFObjectFile::getMachine`, review D149091;
/// `crate::host::machine` names them). The header's machine is read even where the rest of
/// the image does not parse.
pub fn machine(data: &[u8]) -> Option<(u16, bool)> {
    let at = nt_headers_offset(data)?;
    let raw = u16_at(data, at.checked_add(4)?)?;
    let hybrid = match object::File::parse(data) {
        Ok(object::File::Pe32(file)) => chpe::<pe::ImageNtHeaders32>(&file),
        Ok(object::File::Pe64(file)) => chpe::<pe::ImageNtHeaders64>(&file),
        _ => false,
    };
    Some((raw, hybrid))
}

/// Whether the image's load configuration holds a CHPE metadata pointer that lands in one of
/// its sections.
fn chpe<Pe: ImageNtHeaders>(file: &PeFile<'_, Pe>) -> bool {
    let Some(dir) = file.data_directory(pe::IMAGE_DIRECTORY_ENTRY_LOAD_CONFIG) else {
        return false;
    };
    let sections = file.section_table();
    let va = dir.virtual_address.get(LE);
    let Some(config) = sections.pe_data_at(file.data(), va).filter(|_| va != 0) else {
        return false;
    };
    // The structure's own first field says how much of it the image has.
    let declared = u32_at(config, 0).map_or(0, |n| n as usize);
    let pointer = if file.nt_headers().is_type_64() {
        let at = std::mem::offset_of!(ImageLoadConfigDirectory64, chpe_metadata_pointer);
        (declared >= at + 8).then(|| u64_at(config, at)).flatten()
    } else {
        let at = std::mem::offset_of!(ImageLoadConfigDirectory32, chpe_metadata_pointer);
        (declared >= at + 4)
            .then(|| u32_at(config, at).map(u64::from))
            .flatten()
    };
    let base = file.nt_headers().optional_header().image_base();
    pointer
        .filter(|&p| p != 0)
        .and_then(|p| p.checked_sub(base))
        .and_then(|rva| u32::try_from(rva).ok())
        .is_some_and(|rva| sections.pe_data_at(file.data(), rva).is_some())
}

/// One DLL a PE image imports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Import {
    /// As the image spells it (`cudart64_12.dll`, `KERNEL32.dll`).
    pub name: String,
    /// From the delay-load import table: loaded at its first call, not with the image.
    pub delayed: bool,
}

/// The DLLs a PE image imports, its import table's then its delay-load table's, in order;
/// none for anything unreadable.
pub fn imports(data: &[u8]) -> Vec<Import> {
    nt_headers_offset(data)
        .and_then(|_| match object::File::parse(data).ok()? {
            object::File::Pe32(file) => Some(imports_of::<pe::ImageNtHeaders32>(&file)),
            object::File::Pe64(file) => Some(imports_of::<pe::ImageNtHeaders64>(&file)),
            _ => None,
        })
        .unwrap_or_default()
}

fn imports_of<Pe: ImageNtHeaders>(file: &PeFile<'_, Pe>) -> Vec<Import> {
    let mut out = Vec::new();
    let data = file.data();
    let sections = file.section_table();
    let table = |entry: usize| {
        let va = file.data_directory(entry)?.virtual_address.get(LE);
        if va == 0 {
            return None;
        }
        let (section, section_va) = sections.pe_data_containing(data, va)?;
        Some((section, section_va, va))
    };
    if let Some((section, section_va, va)) = table(pe::IMAGE_DIRECTORY_ENTRY_IMPORT) {
        if let Ok(descriptors) = ImportTable::new(section, section_va, va).descriptors() {
            out.extend(
                descriptors
                    .take(MAX_IMPORTS)
                    .map_while(Result::ok)
                    .filter_map(|d| name_at(section, section_va, d.name.get(LE)))
                    .map(|name| Import {
                        name,
                        delayed: false,
                    }),
            );
        }
    }
    if let Some((section, section_va, va)) = table(pe::IMAGE_DIRECTORY_ENTRY_DELAY_IMPORT) {
        if let Ok(descriptors) = DelayLoadImportTable::new(section, section_va, va).descriptors() {
            out.extend(
                descriptors
                    .take(MAX_IMPORTS)
                    .map_while(Result::ok)
                    .filter_map(|d| name_at(section, section_va, d.dll_name_rva.get(LE)))
                    .map(|name| Import {
                        name,
                        delayed: true,
                    }),
            );
        }
    }
    out
}

/// The NUL-terminated name at `rva` in `section` (at `section_va`), within [`MAX_NAME`] bytes.
fn name_at(section: &[u8], section_va: u32, rva: u32) -> Option<String> {
    let start = usize::try_from(rva.checked_sub(section_va)?).ok()?;
    let rest = section.get(start..)?;
    let rest = rest.get(..MAX_NAME).unwrap_or(rest);
    let end = memchr::memchr(0, rest)?;
    let name = rest.get(..end).filter(|n| !n.is_empty())?;
    Some(crate::printable(&String::from_utf8_lossy(name)).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_ms_dos_header_pointing_at_a_pe_signature_is_a_pe_image() {
        let mut image = vec![0u8; 0x48];
        image[..2].copy_from_slice(b"MZ");
        image[0x3c..0x40].copy_from_slice(&0x40u32.to_le_bytes());
        image[0x40..0x44].copy_from_slice(b"PE\0\0");
        image[0x44..0x46].copy_from_slice(&0xAA64u16.to_le_bytes());
        assert_eq!(nt_headers_offset(&image), Some(0x40));
        // The rest does not parse: the header's machine is still read, and nothing imported.
        assert_eq!(machine(&image), Some((0xAA64, false)));
        assert!(imports(&image).is_empty());
        image[0x3c..0x40].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(nt_headers_offset(&image), None);
        assert_eq!(machine(&image), None);
        assert_eq!(nt_headers_offset(b"MZ"), None);
        assert_eq!(nt_headers_offset(b"\x7fELF\x02\x01"), None);
    }

    #[test]
    fn a_name_is_read_to_its_nul_within_the_limit() {
        let section = b"\0\0cudart64_12.dll\0rest";
        assert_eq!(
            name_at(section, 0x1000, 0x1002).as_deref(),
            Some("cudart64_12.dll")
        );
        assert_eq!(name_at(section, 0x1000, 0x0fff), None);
        assert_eq!(name_at(section, 0x1000, 0x2000), None);
        assert_eq!(name_at(section, 0x1000, 0x1000), None);
        let long = vec![b'a'; MAX_NAME + 1];
        assert_eq!(name_at(&long, 0, 0), None);
    }
}
