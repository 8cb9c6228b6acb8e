//! From bytes to a report: every container, entry and kernel in a file, members of archives
//! included. Pure: the caller reads the file.

use fatkit_arch::{PtxIsa, Target};
use serde::Serialize;

use crate::container::{Compression, Container, Entry, EntryKind};
use crate::find::{find, Format, Item, Origin};
use crate::{cubin, ptx, Limits};

/// How much to read of each entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depth {
    /// Headers only: kinds, targets, sizes. No decompression.
    Headers,
    /// Also decompress payloads and read kernel names and toolkit notes.
    Kernels,
}

/// One image: an entry of a container, or a bare cubin / PTX file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ImageReport {
    /// Offset of the entry (or bare image) in the file or member it was found in.
    pub offset: u64,
    pub kind: EntryKind,
    /// `None` when the arch field is not a compute capability.
    pub target: Option<Target>,
    /// The raw arch field.
    pub arch: u32,
    /// `[major, minor]` as cuobjdump prints "code version".
    pub code_version: [u16; 2],
    /// For PTX: the ISA (from the entry header, else the `.version` line).
    pub ptx_isa: Option<PtxIsa>,
    pub compression: Compression,
    pub flags: u64,
    pub stored_size: u64,
    /// Bytes of the extracted image (decompressed, without padding); `None` at `Depth::Headers`.
    pub image_size: Option<u64>,
    pub identifier: Option<String>,
    /// The CUDA toolkit release that made a cubin, from its note.
    pub toolkit: Option<String>,
    pub kernels: Vec<String>,
    /// Why the payload could not be read.
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ContainerReport {
    pub offset: u64,
    pub origin: Origin,
    pub size: u64,
    pub entries: Vec<ImageReport>,
}

/// A cubin or PTX found whole, outside any container.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BareImage {
    pub origin: Origin,
    #[serde(flatten)]
    pub image: ImageReport,
}

/// Everything in one file or archive member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FileReport {
    pub name: String,
    pub format: Format,
    pub containers: Vec<ContainerReport>,
    /// Cubins and PTX found whole (a `.cubin` file, a cubin embedded in `.rodata`).
    pub images: Vec<BareImage>,
    pub members: Vec<FileReport>,
    /// Problems met while reading; the rest of the report still stands.
    pub errors: Vec<String>,
}

impl FileReport {
    /// Every image in this file and its members, with the name of the member holding it.
    pub fn all_images(&self) -> Vec<(&str, &Origin, &ImageReport)> {
        let mut out = Vec::new();
        self.collect(&mut out);
        out
    }

    fn collect<'a>(&'a self, out: &mut Vec<(&'a str, &'a Origin, &'a ImageReport)>) {
        for c in &self.containers {
            out.extend(c.entries.iter().map(|e| (self.name.as_str(), &c.origin, e)));
        }
        out.extend(
            self.images
                .iter()
                .map(|b| (self.name.as_str(), &b.origin, &b.image)),
        );
        for m in &self.members {
            m.collect(out);
        }
    }

    /// Every error in this file and its members.
    pub fn all_errors(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .errors
            .iter()
            .map(|e| format!("{}: {e}", self.name))
            .collect();
        for m in &self.members {
            out.extend(m.all_errors());
        }
        out
    }
}

/// Reads everything in `data`, following archive members up to `limits.max_depth`.
pub fn inspect(name: &str, data: &[u8], depth: Depth, limits: &Limits) -> FileReport {
    inspect_at(name, data, depth, limits, 0)
}

fn inspect_at(name: &str, data: &[u8], depth: Depth, limits: &Limits, level: usize) -> FileReport {
    let findings = find(data, limits);
    let mut report = FileReport {
        name: name.to_owned(),
        format: findings.format,
        containers: Vec::new(),
        images: Vec::new(),
        members: Vec::new(),
        errors: findings.errors.iter().map(|e| e.to_string()).collect(),
    };
    for hit in findings.hits {
        match hit.item {
            Item::Container(c) => report
                .containers
                .push(container_report(&c, hit.offset, hit.origin, depth, limits)),
            Item::Cubin(bytes) => report.images.push(BareImage {
                origin: hit.origin,
                image: bare_cubin(bytes, hit.offset, depth),
            }),
            Item::Ptx(bytes) => report.images.push(BareImage {
                origin: hit.origin,
                image: bare_ptx(bytes, hit.offset),
            }),
            Item::Member { name: member, data } => {
                if level + 1 > limits.max_depth {
                    report.errors.push(format!(
                        "{member}: archives nested deeper than {} levels; not read",
                        limits.max_depth
                    ));
                    continue;
                }
                let sub = inspect_at(
                    &format!("{name}({member})"),
                    &data,
                    depth,
                    limits,
                    level + 1,
                );
                // Members without device code are left out to keep reports small.
                if !sub.containers.is_empty()
                    || !sub.images.is_empty()
                    || !sub.members.is_empty()
                    || !sub.errors.is_empty()
                {
                    report.members.push(sub);
                }
            }
        }
    }
    report
}

fn container_report(
    c: &Container<'_>,
    offset: u64,
    origin: Origin,
    depth: Depth,
    limits: &Limits,
) -> ContainerReport {
    ContainerReport {
        offset,
        origin,
        size: c.len() as u64,
        entries: c
            .entries()
            .map(|e| entry_report(&e, offset, depth, limits))
            .collect(),
    }
}

fn entry_report(
    e: &Entry<'_>,
    container_offset: u64,
    depth: Depth,
    limits: &Limits,
) -> ImageReport {
    let (major, minor) = e.code_version();
    let mut report = ImageReport {
        offset: container_offset + e.offset as u64,
        kind: e.kind(),
        target: e.target(),
        arch: e.header.arch,
        code_version: [major, minor],
        ptx_isa: match e.kind() {
            EntryKind::Ptx | EntryKind::RelocatablePtx => u8::try_from(major)
                .ok()
                .zip(u8::try_from(minor).ok())
                .map(|(a, b)| PtxIsa::new(a, b)),
            _ => None,
        },
        compression: e.compression(),
        flags: e.flags(),
        stored_size: e.stored().len() as u64,
        image_size: None,
        identifier: e
            .identifier()
            .map(|b| String::from_utf8_lossy(b).trim_end_matches('\0').to_owned()),
        toolkit: None,
        kernels: Vec::new(),
        error: None,
    };
    if depth == Depth::Headers {
        return report;
    }
    match e.image(limits) {
        Ok(image) => {
            report.image_size = Some(image.len() as u64);
            match e.kind() {
                EntryKind::Cubin => match cubin::inspect(&image) {
                    Ok(info) => {
                        report.toolkit = info.toolkit;
                        report.kernels = info.kernels;
                    }
                    Err(err) => report.error = Some(err.to_string()),
                },
                EntryKind::Ptx | EntryKind::RelocatablePtx => {
                    let info = ptx::inspect(&image);
                    report.ptx_isa = report.ptx_isa.or(info.version);
                    report.kernels = info.kernels;
                }
                _ => {}
            }
        }
        Err(err) => report.error = Some(err.shifted(container_offset).to_string()),
    }
    report
}

fn bare_cubin(bytes: &[u8], offset: u64, depth: Depth) -> ImageReport {
    let info = cubin::inspect(bytes);
    let (target, arch, toolkit, kernels, error) = match info {
        Ok(i) => {
            let suffix = if i.arch_specific {
                fatkit_arch::Suffix::Arch
            } else {
                fatkit_arch::Suffix::None
            };
            let target =
                i.cc.map(|cc| Target::new(fatkit_arch::ImageKind::Cubin, cc, suffix));
            let arch =
                i.cc.map_or(0, |cc| u32::from(cc.major) * 10 + u32::from(cc.minor));
            (
                target,
                arch,
                i.toolkit,
                if depth == Depth::Kernels {
                    i.kernels
                } else {
                    Vec::new()
                },
                None,
            )
        }
        Err(e) => (None, 0, None, Vec::new(), Some(e.to_string())),
    };
    ImageReport {
        offset,
        kind: EntryKind::Cubin,
        target,
        arch,
        code_version: [0, 0],
        ptx_isa: None,
        compression: Compression::None,
        flags: 0,
        stored_size: bytes.len() as u64,
        image_size: Some(bytes.len() as u64),
        identifier: None,
        toolkit,
        kernels,
        error,
    }
}

fn bare_ptx(bytes: &[u8], offset: u64) -> ImageReport {
    let info = ptx::inspect(bytes);
    let target = info.target.as_deref().and_then(|t| {
        let t = t.replace("sm_", "compute_");
        t.parse::<Target>().ok()
    });
    ImageReport {
        offset,
        kind: EntryKind::Ptx,
        target,
        arch: target.map_or(0, |t| u32::from(t.cc.major) * 10 + u32::from(t.cc.minor)),
        code_version: info
            .version
            .map_or([0, 0], |v| [u16::from(v.major), u16::from(v.minor)]),
        ptx_isa: info.version,
        compression: Compression::None,
        flags: 0,
        stored_size: bytes.len() as u64,
        image_size: Some(bytes.len() as u64),
        identifier: None,
        toolkit: None,
        kernels: info.kernels,
        error: None,
    }
}

/// One image as a tool would extract it.
#[derive(Debug)]
pub struct Extracted {
    /// The file or member (`lib.a(k.o)`) holding it.
    pub member: String,
    pub origin: Origin,
    pub kind: EntryKind,
    pub target: Option<Target>,
    /// The decompressed image, without padding (see [`Entry::image`]).
    pub bytes: Result<Vec<u8>, crate::Error>,
}

/// Every image of `data`, in the order [`inspect`] reports them, extracted.
pub fn extract_all(name: &str, data: &[u8], limits: &Limits) -> Vec<Extracted> {
    let mut out = Vec::new();
    extract_at(name, data, limits, 0, &mut out);
    out
}

fn extract_at(name: &str, data: &[u8], limits: &Limits, level: usize, out: &mut Vec<Extracted>) {
    for hit in find(data, limits).hits {
        match hit.item {
            Item::Container(c) => out.extend(c.entries().map(|e| Extracted {
                member: name.to_owned(),
                origin: hit.origin.clone(),
                kind: e.kind(),
                target: e.target(),
                bytes: e.image(limits).map(|b| b.into_owned()),
            })),
            Item::Cubin(bytes) | Item::Ptx(bytes) => {
                let report = if cubin::is_cubin(bytes) {
                    bare_cubin(bytes, hit.offset, Depth::Headers)
                } else {
                    bare_ptx(bytes, hit.offset)
                };
                out.push(Extracted {
                    member: name.to_owned(),
                    origin: hit.origin,
                    kind: report.kind,
                    target: report.target,
                    bytes: Ok(bytes.to_vec()),
                });
            }
            Item::Member { name: member, data } if level < limits.max_depth => {
                extract_at(&format!("{name}({member})"), &data, limits, level + 1, out);
            }
            Item::Member { .. } => {}
        }
    }
}
