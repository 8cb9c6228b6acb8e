//! The sections of a host file that hold device code: an ELF file's (`.nv_fatbin`,
//! `__nv_relfatbin`) and a Windows PE image's (`.nv_fatb`, `crate::pe`), each searched once.

use std::ops::Range;

use object::{Object, ObjectSection};

use super::{containers_in, over_budget, Findings, Format, Origin, FATBIN_SECTIONS};
use crate::error::{Error, ErrorKind};
use crate::Budget;

/// A section of a host file: its name (`None` where it cannot be read) and the file range of
/// its bytes (offset, size), if it has any.
pub(super) struct HostSection {
    name: Option<String>,
    range: Option<(u64, u64)>,
}

/// A host file whose sections are read: an ELF file or a PE image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum HostFile {
    Elf,
    Pe,
}

impl HostFile {
    pub(super) fn format(self) -> Format {
        match self {
            HostFile::Elf => Format::Elf,
            HostFile::Pe => Format::Pe,
        }
    }

    /// The sections nvcc puts containers in.
    fn fatbin_sections(self) -> &'static [&'static str] {
        match self {
            HostFile::Elf => &FATBIN_SECTIONS,
            HostFile::Pe => &crate::pe::FATBIN_SECTIONS,
        }
    }

    /// `ELF section`, `PE section`.
    fn section(self) -> &'static str {
        match self {
            HostFile::Elf => "ELF section",
            HostFile::Pe => "PE section",
        }
    }

    fn overlap(self) -> &'static str {
        match self {
            HostFile::Elf => "ELF section over the bytes of another (not searched twice)",
            HostFile::Pe => "PE section over the bytes of another (not searched twice)",
        }
    }

    /// Each section, in order. A PE image's names are its headers' own
    /// ([`crate::pe::sections`]).
    pub(super) fn sections(self, file: &object::File<'_>) -> Vec<HostSection> {
        match self {
            HostFile::Elf => file
                .sections()
                .map(|s| HostSection {
                    name: s.name().ok().map(|n| crate::printable(n).into_owned()),
                    range: s.file_range(),
                })
                .collect(),
            HostFile::Pe => crate::pe::sections(file)
                .into_iter()
                .map(|(name, range)| HostSection {
                    name: Some(name),
                    range,
                })
                .collect(),
        }
    }

    /// The error of headers that do not parse: the scan reads the file instead.
    pub(super) fn malformed(self, e: object::read::Error) -> Error {
        match self {
            HostFile::Elf => Error::new(0u64, ErrorKind::Elf(format!("host ELF: {e}"))),
            HostFile::Pe => {
                let e = e.to_string();
                let mut chars = e.chars();
                let detail = match chars.next() {
                    Some(first) => first.to_lowercase().chain(chars).collect(),
                    None => e,
                };
                Error::new(0u64, ErrorKind::Pe(detail))
            }
        }
    }
}

/// The name and file range of every section of a host ELF file or PE image that has bytes in
/// the file.
pub(super) fn section_ranges(all: &[HostSection]) -> Vec<(String, Range<usize>)> {
    all.iter()
        .filter_map(|s| {
            let (start, size) = s.range?;
            let start = usize::try_from(start).ok()?;
            let end = start.checked_add(usize::try_from(size).ok()?)?;
            Some((s.name.clone()?, start..end))
        })
        .collect()
}

/// The containers of a host file's sections that hold device code, each section's bytes
/// searched once: a section over bytes another already covered (no linker writes one) is an
/// error, not a second search of them. Whether one does is looked up among the sections
/// searched, by start, in logarithmic time: tens of thousands of sections side by side cost
/// no more than their headers.
pub(super) fn fatbin_sections<'data>(
    data: &'data [u8],
    (all, host): (&[HostSection], HostFile),
    covered: &mut Vec<Range<usize>>,
    f: &mut Findings<'data>,
    budget: &Budget,
) {
    // The ranges searched, start to end: disjoint.
    let mut searched: std::collections::BTreeMap<usize, usize> = Default::default();
    for section in all {
        if !budget.items("the sections", 1) {
            f.errors.push(over_budget(0, budget));
            return;
        }
        let Some(name) = section.name.as_deref() else {
            continue;
        };
        if !host.fatbin_sections().contains(&name) {
            continue;
        }
        let Some((start, size)) = section.range else {
            continue;
        };
        let (Ok(start), Ok(size)) = (usize::try_from(start), usize::try_from(size)) else {
            continue;
        };
        let Some(end) = start.checked_add(size).filter(|&e| e <= data.len()) else {
            f.errors.push(Error::new(
                start,
                ErrorKind::Truncated {
                    what: host.section(),
                    needed: size as u64,
                    available: data.len().saturating_sub(start) as u64,
                },
            ));
            continue;
        };
        // Of disjoint ranges, only the last to start before `end` can reach past `start`.
        if searched
            .range(..end)
            .next_back()
            .is_some_and(|(_, &last)| last > start)
        {
            f.errors
                .push(Error::invalid(start, host.overlap(), size as u64));
            continue;
        }
        containers_in(
            data,
            start..end,
            Origin::Section(name.to_owned()),
            f,
            budget,
        );
        covered.push(start..end);
        if start < end {
            searched.insert(start, end);
        }
    }
}
