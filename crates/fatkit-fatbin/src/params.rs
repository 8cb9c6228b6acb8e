//! Kernel parameter layouts: each parameter's offset and size in the kernel's parameter buffer,
//! read from a cubin's `.nv.info.<kernel>` attributes or a PTX `.entry` signature
//! (docs/FATBIN_FORMAT.md section 8). `cuLaunchKernel` copies, for each parameter, `size` bytes
//! from the pointer it is handed: the count and the sizes are what a launch must match.

use std::collections::BTreeMap;

use object::elf;
use object::read::elf::{FileHeader, SectionHeader};
use object::LittleEndian as LE;
use serde::Serialize;

use crate::cubin::{self, CompatRecord};
use crate::error::{Error, ErrorKind, Result};

/// One kernel parameter.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
pub struct Param {
    /// Bytes from the start of the parameter buffer.
    pub offset: u32,
    pub size: u32,
}

/// Each kernel's parameters, in declaration order.
pub type Layouts = BTreeMap<String, Vec<Param>>;

/// `EIATTR_KPARAM_INFO`: one record per parameter.
pub const EIATTR_KPARAM_INFO: u8 = 0x17;

fn elf_err(detail: impl std::fmt::Display) -> Error {
    Error::new(0u64, ErrorKind::Elf(detail.to_string()))
}

/// The parameters of every kernel of a cubin, from the `EIATTR_KPARAM_INFO` records of its
/// `.nv.info.<kernel>` sections (`u32 index, u16 ordinal, u16 offset, u32 bits`, the size in
/// bytes in bits 18..32). A kernel without such a section is left out (its layout is unknown);
/// one with the section but no records takes no parameters.
pub fn cubin(data: &[u8]) -> Result<Layouts> {
    let kernels = cubin::inspect(data)?.kernels;
    let h = elf::FileHeader64::<LE>::parse(data).map_err(elf_err)?;
    let sections = h.sections(LE, data).map_err(elf_err)?;
    let mut out = Layouts::new();
    for s in sections.iter() {
        let Some(kernel) = sections
            .section_name(LE, s)
            .ok()
            .and_then(|n| n.strip_prefix(b".nv.info."))
        else {
            continue;
        };
        // As the kernel lists name it (crate::cubin).
        let kernel = crate::printable(&String::from_utf8_lossy(kernel)).into_owned();
        if !kernels.contains(&kernel) {
            continue;
        }
        let records = s
            .data(LE, data)
            .map(cubin::info_records)
            .unwrap_or_default();
        let params = kparams(&records).map_err(|e| elf_err(format!("kernel {kernel}: {e}")))?;
        out.insert(kernel, params);
    }
    Ok(out)
}

/// The parameters out of a kernel's attribute records, ordered by ordinal; every ordinal from 0
/// to the count must be there exactly once.
fn kparams(records: &[CompatRecord]) -> std::result::Result<Vec<Param>, String> {
    let mut by_ordinal: Vec<(u16, Param)> = Vec::new();
    for r in records
        .iter()
        .filter(|r| r.attr == EIATTR_KPARAM_INFO && r.format == 4)
    {
        let p = &r.payload;
        let (Some(ordinal), Some(offset), Some(bits)) = (
            crate::bytes::u16_at(p, 4),
            crate::bytes::u16_at(p, 6),
            crate::bytes::u32_at(p, 8),
        ) else {
            return Err(format!("a KPARAM_INFO record of {} bytes, not 12", p.len()));
        };
        by_ordinal.push((
            ordinal,
            Param {
                offset: u32::from(offset),
                size: bits >> 18,
            },
        ));
    }
    by_ordinal.sort();
    for (i, (ordinal, _)) in by_ordinal.iter().enumerate() {
        if usize::from(*ordinal) != i {
            return Err(format!(
                "KPARAM_INFO ordinals are not 0..{}: {ordinal} at position {i}",
                by_ordinal.len()
            ));
        }
    }
    Ok(by_ordinal.into_iter().map(|(_, p)| p).collect())
}

/// The parameters of every `.entry` of PTX text, laid out as the driver lays out the parameter
/// buffer: each at the next multiple of its alignment (`.align N`, else its element size).
/// A signature that does not parse is an error naming the kernel.
pub fn ptx(text: &[u8]) -> std::result::Result<Layouts, String> {
    let text = match memchr::memchr(0, text) {
        Some(nul) => text.get(..nul).unwrap_or(text),
        None => text,
    };
    let text = String::from_utf8_lossy(text);
    // Comments out, so that a `)` or `,` in one cannot end a signature.
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Layouts::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find(".entry") {
        let before_ok = rest
            .get(..at)
            .and_then(|b| b.chars().last())
            .is_none_or(char::is_whitespace);
        rest = rest.get(at + ".entry".len()..).unwrap_or_default();
        if !before_ok || !rest.starts_with(char::is_whitespace) {
            continue;
        }
        let after = rest.trim_start();
        let name: String = after
            .chars()
            .take_while(|&c| c != '(' && c != '{' && !c.is_whitespace())
            .collect();
        if name.is_empty() {
            continue;
        }
        let sig = after.get(name.len()..).unwrap_or_default().trim_start();
        let params = match sig.strip_prefix('(') {
            Some(list) => {
                let end = list
                    .find(')')
                    .ok_or_else(|| format!("kernel {name}: its parameter list has no ')'"))?;
                layout(list.get(..end).unwrap_or_default())
                    .map_err(|e| format!("kernel {name}: {e}"))?
            }
            None => Vec::new(),
        };
        out.insert(name, params);
    }
    Ok(out)
}

/// `.param .u32 a, .param .align 4 .b8 b[8], .param .u64 .ptr .global .align 8 c`.
fn layout(list: &str) -> std::result::Result<Vec<Param>, String> {
    let mut params = Vec::new();
    let mut end = 0u32;
    for decl in list.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let mut words = decl.split_whitespace().peekable();
        if words.next() != Some(".param") {
            return Err(format!("'{decl}' is not a .param"));
        }
        let (mut align, mut elem, mut vector, mut count) = (None, None, 1u32, 1u32);
        let mut pointer = false;
        while let Some(w) = words.next() {
            match w {
                ".align" => {
                    let n = words.next().and_then(|n| n.parse::<u32>().ok());
                    let n = n
                        .filter(|n| n.is_power_of_two())
                        .ok_or_else(|| format!("'{decl}': .align wants a power of two"))?;
                    // After `.ptr` it is the alignment of what the pointer points to.
                    if !pointer {
                        align = Some(n);
                    }
                }
                ".ptr" => pointer = true,
                ".global" | ".const" | ".local" | ".shared" => {}
                ".v2" => vector = 2,
                ".v4" => vector = 4,
                _ if w.starts_with('.') => {
                    elem = Some(type_size(w).ok_or_else(|| format!("'{decl}': unknown type {w}"))?);
                }
                name => {
                    if let Some(open) = name.find('[') {
                        let n = name
                            .get(open + 1..)
                            .and_then(|n| n.strip_suffix(']'))
                            .and_then(|n| n.trim().parse::<u32>().ok())
                            .ok_or_else(|| format!("'{decl}': array size of {name}"))?;
                        count = n;
                    }
                }
            }
        }
        let elem = elem.ok_or_else(|| format!("'{decl}' has no type"))?;
        let size = elem
            .checked_mul(vector)
            .and_then(|s| s.checked_mul(count))
            .ok_or_else(|| format!("'{decl}' is too large"))?;
        let align = align.unwrap_or(elem * vector).max(1);
        let offset = end
            .checked_next_multiple_of(align)
            .ok_or_else(|| format!("'{decl}' is too large"))?;
        end = offset
            .checked_add(size)
            .ok_or_else(|| format!("'{decl}' is too large"))?;
        params.push(Param { offset, size });
    }
    Ok(params)
}

/// The size of a PTX fundamental type.
fn type_size(ty: &str) -> Option<u32> {
    Some(match ty {
        ".b8" | ".u8" | ".s8" | ".pred" => 1,
        ".b16" | ".u16" | ".s16" | ".f16" | ".bf16" => 2,
        ".b32" | ".u32" | ".s32" | ".f32" | ".f16x2" | ".bf16x2" | ".tf32" => 4,
        ".b64" | ".u64" | ".s64" | ".f64" => 8,
        ".b128" => 16,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(params: &[Param]) -> Vec<(u32, u32)> {
        params.iter().map(|p| (p.offset, p.size)).collect()
    }

    #[test]
    fn ptx_signatures() {
        let text = b".version 9.2\n.target sm_90\n.address_size 64\n\
            .visible .entry saxpy(\n\t.param .u32 saxpy_param_0,\n\t.param .f32 saxpy_param_1, // a, comment)\n\t.param .u64 saxpy_param_2,\n\t.param .u64 saxpy_param_3\n)\n{\n}\n\
            .visible .entry saxpy_params(\n\t.param .align 4 .b8 saxpy_params_param_0[8],\n\t.param .u64 .ptr .global .align 1 saxpy_params_param_1,\n\t.param .u8 c,\n\t.param .v2 .f32 d\n)\n\
            .visible .entry bf16(\n\t.param .u32 p0,\n\t.param .align 2 .b8 p1[2],\n\t.param .u64 .ptr .align 1 p2,\n\t.param .u64 .ptr .align 1 p3\n)\n{\n}\n\
            .entry none\n{\n}\n.func (.param .b32 r) f(.param .b64 x)\n.visible .entry empty()\n{\n}\n";
        let l = ptx(text).unwrap();
        assert_eq!(sizes(&l["saxpy"]), [(0, 4), (4, 4), (8, 8), (16, 8)]);
        assert_eq!(
            sizes(&l["saxpy_params"]),
            [(0, 8), (8, 8), (16, 1), (24, 8)]
        );
        assert_eq!(l["none"], []);
        assert_eq!(l["empty"], []);
        // `.align 1` after `.ptr` is the pointee's: the pointer itself is 8-aligned.
        assert_eq!(sizes(&l["bf16"]), [(0, 4), (4, 2), (8, 8), (16, 8)]);
        assert_eq!(l.len(), 5, "{l:?}");
        let err = ptx(b".entry k(\n.param .q32 a\n)").unwrap_err();
        assert_eq!(err, "kernel k: '.param .q32 a': unknown type .q32");
        assert!(ptx(b".entry k(.param .u32 a")
            .unwrap_err()
            .contains("no ')'"));
        assert!(ptx(b".entry k(.param .align 3 .b8 a[4])").is_err());
        assert!(ptx(b".entry k(.param .b8 a[99999999999])").is_err());
    }

    #[test]
    fn kparam_records() {
        // .nv.info.saxpy of an sm_90 cubin from CUDA 13.2: saxpy(int, float, const float*, float*).
        let blob = [
            0x04, 0x66, 0x04, 0x00, 0x03, 0x00, 0x00, 0x00, 0x04, 0x37, 0x04, 0x00, 0x84, 0x00,
            0x00, 0x00, 0x04, 0x17, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x10, 0x00,
            0x00, 0xf0, 0x21, 0x00, 0x04, 0x17, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00,
            0x08, 0x00, 0x00, 0xf0, 0x21, 0x00, 0x04, 0x17, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x01, 0x00, 0x04, 0x00, 0x00, 0xf0, 0x11, 0x00, 0x04, 0x17, 0x0c, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf0, 0x11, 0x00, 0x03, 0x50, 0x00, 0x00,
        ];
        let records = cubin::info_records(&blob);
        assert_eq!(
            sizes(&kparams(&records).unwrap()),
            [(0, 4), (4, 4), (8, 8), (16, 8)]
        );
        // A gap in the ordinals is an error, not a shorter list.
        let mut gap = records.clone();
        gap.remove(3);
        assert!(kparams(&gap).unwrap_err().contains("ordinals"));
    }
}
