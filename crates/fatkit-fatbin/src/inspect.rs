//! From bytes to a report: every container, entry and kernel in a file, members of archives
//! included. Pure: the caller reads the file.

use fatkit_arch::{PtxIsa, Target};
use serde::Serialize;

use crate::container::{Compression, Container, Entry, EntryKind, Scratch};
use crate::find::{self, find_named, Format, Inflated, Item, Origin};
use crate::{cubin, par, ptx, Error, Limits};

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
    /// What the image itself says it is (a cubin's ELF header, PTX's `.target`), when read
    /// and when it differs from `target`, the entry header's: the image is what the driver
    /// gets (docs/ARCH_RULES.md section 2, "Trust the image").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_target: Option<Target>,
    pub kernels: Vec<String>,
    /// Why the payload could not be read.
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ContainerReport {
    pub offset: u64,
    pub origin: Origin,
    pub size: u64,
    /// [`fatkit_arch::fingerprint`] of the container's bytes: what a fatkit declaration
    /// record names the module it describes by.
    #[serde(skip)]
    pub fingerprint: u64,
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
    /// Why the whole input was refused (its zip members inflate past the budget,
    /// [`find::Inflated`]): then nothing in the report is an answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// The CUDA runtimes a host ELF file links ([`crate::runtime`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runtimes: Vec<crate::runtime::LinkedRuntime>,
}

impl FileReport {
    /// Every image in this file and its members, with the name of the member holding it.
    pub fn all_images(&self) -> Vec<(&str, &Origin, &ImageReport)> {
        let mut out = Vec::new();
        self.collect(&mut out, false);
        out
    }

    /// Every image into `out`; with `loaded`, only those the driver may load (see
    /// [`FileReport::loaded_images`]).
    fn collect<'a>(&'a self, out: &mut Vec<(&'a str, &'a Origin, &'a ImageReport)>, loaded: bool) {
        let containers: Vec<&ContainerReport> = match loaded {
            true => self.loaded_containers().collect(),
            false => self.containers.iter().collect(),
        };
        for c in containers {
            out.extend(c.entries.iter().map(|e| (self.name.as_str(), &c.origin, e)));
        }
        out.extend(
            self.images
                .iter()
                .map(|b| (self.name.as_str(), &b.origin, &b.image)),
        );
        for m in &self.members {
            m.collect(out, loaded);
        }
    }

    /// [`FileReport::all_images`] but those the driver never loads from a file: a relocatable
    /// fatbin's (`__nv_relfatbin`, the device link's inputs) beside an executable one
    /// (`.nv_fatbin`, what the runtime registers; docs/ARCH_RULES.md section 2).
    pub fn loaded_images(&self) -> Vec<(&str, &Origin, &ImageReport)> {
        let mut out = Vec::new();
        self.collect(&mut out, true);
        out
    }

    /// This file's own containers but a relocatable fatbin's beside an executable one.
    pub fn loaded_containers(&self) -> impl Iterator<Item = &ContainerReport> {
        let section =
            |c: &ContainerReport, name: &str| matches!(&c.origin, Origin::Section(s) if s == name);
        let linked = self.containers.iter().any(|c| section(c, ".nv_fatbin"));
        self.containers
            .iter()
            .filter(move |c| !(linked && section(c, "__nv_relfatbin")))
    }

    /// Whether this file or a member holds a container, cubin or PTX.
    pub fn has_device_code(&self) -> bool {
        !self.containers.is_empty()
            || !self.images.is_empty()
            || self.members.iter().any(FileReport::has_device_code)
    }

    /// The CUDA runtimes this file and its members link, sorted, each once.
    pub fn all_runtimes(&self) -> Vec<crate::runtime::LinkedRuntime> {
        let mut out = self.runtimes.clone();
        for m in &self.members {
            out.extend(m.all_runtimes());
        }
        out.sort();
        out.dedup();
        out
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

/// Reads everything in `data`, following archive members up to `limits.max_depth`. Entries
/// are decompressed and read on every core; identical payloads (libraries embed the same
/// container many times) are read once; zip members are inflated one at a time.
pub fn inspect(name: &str, data: &[u8], depth: Depth, limits: &Limits) -> FileReport {
    inspect_named(name, name, data, depth, limits)
}

/// [`inspect`] of a file whose own name is `leaf` (a path in a directory or archive): text
/// named as source or documentation (`*.py`) is never taken for PTX.
pub fn inspect_named(
    name: &str,
    leaf: &str,
    data: &[u8],
    depth: Depth,
    limits: &Limits,
) -> FileReport {
    let budget = Inflated::for_input(limits, data.len() as u64);
    let mut report = inspect_at(name, leaf, data, depth, limits, 0, &budget);
    report.refused = budget.refusal();
    report
}

/// [`inspect`] of a zip file read through `reader`, for zip files too large to hold in memory
/// beside their largest member (a wheel with a 1 GB library).
pub fn inspect_zip<R: std::io::Read + std::io::Seek>(
    name: &str,
    reader: R,
    depth: Depth,
    limits: &Limits,
) -> FileReport {
    inspect_zip_with(name, reader, depth, limits, |_, _| {})
}

/// [`inspect_zip`], handing `also` each member that holds device code while it is in memory
/// (its name and bytes), for what the caller reads beside the report.
pub fn inspect_zip_with<R: std::io::Read + std::io::Seek>(
    name: &str,
    mut reader: R,
    depth: Depth,
    limits: &Limits,
    also: impl FnMut(&str, &[u8]),
) -> FileReport {
    let len = reader.seek(std::io::SeekFrom::End(0)).unwrap_or(0);
    let budget = Inflated::for_input(limits, len);
    let mut report = zip_report(name, reader, depth, limits, 0, &budget, also);
    report.refused = budget.refusal();
    report
}

/// A zip file's report: its members read one at a time, at archive depth `level`.
fn zip_report<R: std::io::Read + std::io::Seek>(
    name: &str,
    reader: R,
    depth: Depth,
    limits: &Limits,
    level: usize,
    budget: &Inflated,
    mut also: impl FnMut(&str, &[u8]),
) -> FileReport {
    let mut report = FileReport {
        name: name.to_owned(),
        format: Format::Zip,
        containers: Vec::new(),
        images: Vec::new(),
        members: Vec::new(),
        errors: Vec::new(),
        refused: None,
        runtimes: Vec::new(),
    };
    let mut nested = Vec::new();
    let errors = find::zip_members_of(reader, limits, budget, |m| {
        match member_report(name, m.name, m.data, depth, limits, level, budget) {
            Ok(Some(sub)) => {
                if sub.has_device_code() {
                    also(m.name, m.data);
                }
                report.members.push(sub);
            }
            Ok(None) => {}
            Err(e) => nested.push(e),
        }
    });
    report.errors.extend(nested);
    report.errors.extend(errors.iter().map(|e| e.to_string()));
    report
}

/// `leaf` is the file's or member's own name (`torch/lib/x.so`), `name` the path shown.
fn inspect_at(
    name: &str,
    leaf: &str,
    data: &[u8],
    depth: Depth,
    limits: &Limits,
    level: usize,
    budget: &Inflated,
) -> FileReport {
    let findings = find_named(leaf, data);
    let mut report = FileReport {
        name: name.to_owned(),
        format: findings.format,
        containers: Vec::new(),
        images: Vec::new(),
        members: Vec::new(),
        errors: findings.errors.iter().map(|e| e.to_string()).collect(),
        refused: None,
        runtimes: match findings.format {
            Format::Elf => crate::runtime::linked(data),
            _ => Vec::new(),
        },
    };
    if findings.format == Format::Zip {
        let zip = zip_report(
            name,
            std::io::Cursor::new(data),
            depth,
            limits,
            level,
            budget,
            |_, _| {},
        );
        report.members = zip.members;
        report.errors.extend(zip.errors);
        return report;
    }
    let mut containers = Vec::new();
    for hit in findings.hits {
        match hit.item {
            Item::Container(c) => containers.push((hit.offset, hit.origin, c)),
            Item::Cubin(bytes) => report.images.push(BareImage {
                origin: hit.origin,
                image: bare_cubin(bytes, hit.offset, depth),
            }),
            Item::Ptx(bytes) => report.images.push(BareImage {
                origin: hit.origin,
                image: bare_ptx(bytes, hit.offset),
            }),
            Item::Member { name: member, data } => {
                match member_report(name, &member, &data, depth, limits, level, budget) {
                    Ok(Some(sub)) => report.members.push(sub),
                    Ok(None) => {}
                    Err(e) => report.errors.push(e),
                }
            }
        }
    }
    report.containers = container_reports(containers, depth, limits);
    report
}

/// The report of an archive member, `None` when it holds no device code (left out to keep
/// reports small); an error when archives nest deeper than the limit.
fn member_report(
    name: &str,
    member: &str,
    data: &[u8],
    depth: Depth,
    limits: &Limits,
    level: usize,
    budget: &Inflated,
) -> Result<Option<FileReport>, String> {
    if level + 1 > limits.max_depth {
        return Err(format!(
            "{member}: archives nested deeper than {} levels; not read",
            limits.max_depth
        ));
    }
    let sub = inspect_at(
        &format!("{name}({member})"),
        member,
        data,
        depth,
        limits,
        level + 1,
        budget,
    );
    Ok((!sub.containers.is_empty()
        || !sub.images.is_empty()
        || !sub.members.is_empty()
        || !sub.errors.is_empty())
    .then_some(sub))
}

/// What an entry's payload says, read once per distinct payload.
#[derive(Clone, Debug, Default)]
struct Payload {
    image_size: u64,
    toolkit: Option<String>,
    /// The target the image says it is.
    own: Option<Target>,
    kernels: Vec<String>,
    ptx_version: Option<PtxIsa>,
    /// The image could be extracted, but not read.
    unreadable: Option<String>,
}

fn payload(e: &Entry<'_>, limits: &Limits, scratch: &mut Scratch) -> Result<Payload, Error> {
    let kind = e.kind();
    let image = e.image_in(limits, scratch)?;
    let mut p = Payload {
        image_size: image.len() as u64,
        ..Payload::default()
    };
    match kind {
        EntryKind::Cubin => match cubin::inspect(image) {
            Ok(info) => {
                p.own = cubin_target(&info);
                p.toolkit = info.toolkit;
                p.kernels = info.kernels;
            }
            Err(err) => p.unreadable = Some(err.to_string()),
        },
        EntryKind::Ptx | EntryKind::RelocatablePtx => {
            // `image_in` cut the text at its NUL already.
            let info = ptx::inspect_text(image);
            p.own = info.target.as_deref().and_then(ptx_target);
            p.ptx_version = info.version;
            p.kernels = info.kernels;
        }
        _ => {}
    }
    Ok(p)
}

/// For each entry, the index of the first entry with the same kind and stored bytes.
fn first_copies(entries: &[(usize, u64, Entry<'_>)]) -> Vec<usize> {
    type Key = (u32, u32, usize, u64, [u8; 16], [u8; 16]);
    let edge = |b: &[u8], from_end: bool| -> [u8; 16] {
        let mut out = [0u8; 16];
        let part = if from_end {
            b.get(b.len().saturating_sub(16)..).unwrap_or(b)
        } else {
            b.get(..16).unwrap_or(b)
        };
        for (o, x) in out.iter_mut().zip(part) {
            *o = *x;
        }
        out
    };
    let mut seen: std::collections::HashMap<Key, Vec<usize>> = Default::default();
    let mut first = Vec::with_capacity(entries.len());
    for (i, (_, _, e)) in entries.iter().enumerate() {
        let stored = e.stored();
        let key = (
            e.header.kind as u32,
            e.header.flags as u32,
            stored.len(),
            e.header.uncompressed_size,
            edge(stored, false),
            edge(stored, true),
        );
        let bucket = seen.entry(key).or_default();
        let same = bucket.iter().copied().find(|&j| {
            entries
                .get(j)
                .is_some_and(|(_, _, other)| other.stored() == stored)
        });
        first.push(same.unwrap_or_else(|| {
            bucket.push(i);
            i
        }));
    }
    first
}

/// Every container's report; at `Depth::Kernels` every distinct payload decompressed and read,
/// spread over the cores.
fn container_reports(
    found: Vec<(u64, Origin, Container<'_>)>,
    depth: Depth,
    limits: &Limits,
) -> Vec<ContainerReport> {
    let entries: Vec<(usize, u64, Entry<'_>)> = found
        .iter()
        .enumerate()
        .flat_map(|(ci, (offset, _, c))| c.entries().map(move |e| (ci, *offset, e)))
        .collect();
    let mut images: Vec<ImageReport> = entries
        .iter()
        .map(|(_, offset, e)| entry_header(e, *offset))
        .collect();
    if depth == Depth::Kernels {
        let first = first_copies(&entries);
        // Entries the driver never loads as an image (link-time IR, kinds this reader does
        // not know) are reported by their headers alone: their payloads decide nothing, and
        // their encodings are not the images' (cuFFT's LTO IR is no LZ4 a reader can take).
        let loadable = |i: usize| {
            entries.get(i).is_some_and(|(_, _, e)| {
                !matches!(e.kind(), EntryKind::LtoIr | EntryKind::Unknown(_))
            })
        };
        let distinct: Vec<usize> = first
            .iter()
            .enumerate()
            .filter(|(i, f)| i == *f && loadable(*i))
            .map(|(i, _)| i)
            .collect();
        let read = par::map(&distinct, Scratch::default, |scratch, &i| {
            entries.get(i).map(|(_, _, e)| payload(e, limits, scratch))
        });
        let by_entry: std::collections::HashMap<usize, &Option<Result<Payload, Error>>> =
            distinct.iter().copied().zip(read.iter()).collect();
        for (i, image) in images.iter_mut().enumerate() {
            let (Some(&rep), Some((_, offset, e))) = (first.get(i), entries.get(i)) else {
                continue;
            };
            if !loadable(i) {
                continue;
            }
            match by_entry.get(&rep) {
                Some(Some(Ok(p))) => apply(image, p),
                // An error names offsets: the entry's own, not its first copy's.
                _ => match payload(e, limits, &mut Scratch::default()) {
                    Ok(p) => apply(image, &p),
                    Err(err) => image.error = Some(err.shifted(*offset).to_string()),
                },
            }
        }
    }
    // Every container's bytes hashed once, on every core: a GB of libtorch_cuda.so's takes
    // a core a fifth of a second.
    let fingerprints = par::map(
        &found,
        || (),
        |_, (_, _, c)| fatkit_arch::fingerprint::fingerprint(c.bytes()),
    );
    let mut reports: Vec<ContainerReport> = found
        .into_iter()
        .zip(fingerprints)
        .map(|((offset, origin, c), fingerprint)| ContainerReport {
            offset,
            origin,
            size: c.len() as u64,
            fingerprint,
            entries: Vec::new(),
        })
        .collect();
    for ((ci, _, _), image) in entries.iter().zip(images) {
        if let Some(r) = reports.get_mut(*ci) {
            r.entries.push(image);
        }
    }
    reports
}

/// A cubin's own target: its ELF header's architecture and `a` bit.
fn cubin_target(info: &cubin::CubinInfo) -> Option<Target> {
    let suffix = if info.arch_specific {
        fatkit_arch::Suffix::Arch
    } else {
        fatkit_arch::Suffix::None
    };
    Some(Target::new(fatkit_arch::ImageKind::Cubin, info.cc?, suffix))
}

/// PTX's own target from its `.target` word: `sm_90a` is `compute_90a`.
fn ptx_target(word: &str) -> Option<Target> {
    word.replace("sm_", "compute_").parse::<Target>().ok()
}

fn apply(image: &mut ImageReport, p: &Payload) {
    image.image_target = p.own.filter(|own| {
        image
            .target
            .is_none_or(|header| !fatkit_arch::rules::header_agrees(header, *own))
    });
    image.image_size = Some(p.image_size);
    image.toolkit.clone_from(&p.toolkit);
    image.kernels.clone_from(&p.kernels);
    image.ptx_isa = image.ptx_isa.or(p.ptx_version);
    image.error.clone_from(&p.unreadable);
}

/// What an entry's header says.
fn entry_header(e: &Entry<'_>, container_offset: u64) -> ImageReport {
    let (major, minor) = e.code_version();
    ImageReport {
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
        identifier: e.identifier().map(|b| {
            crate::printable(String::from_utf8_lossy(b).trim_end_matches('\0')).into_owned()
        }),
        toolkit: None,
        image_target: None,
        kernels: Vec::new(),
        error: None,
    }
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
        image_target: None,
        kernels,
        error,
    }
}

fn bare_ptx(bytes: &[u8], offset: u64) -> ImageReport {
    let info = ptx::inspect(bytes);
    let target = info.target.as_deref().and_then(ptx_target);
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
        image_target: None,
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
    let budget = Inflated::for_input(limits, data.len() as u64);
    extract_at(name, name, data, limits, 0, &budget, &mut out);
    out
}

fn extract_at(
    name: &str,
    leaf: &str,
    data: &[u8],
    limits: &Limits,
    level: usize,
    budget: &Inflated,
    out: &mut Vec<Extracted>,
) {
    let findings = find_named(leaf, data);
    if findings.format == Format::Zip {
        if level < limits.max_depth {
            find::zip_members(data, limits, budget, |m| {
                extract_at(
                    &format!("{name}({})", m.name),
                    m.name,
                    m.data,
                    limits,
                    level + 1,
                    budget,
                    out,
                );
            });
        }
        return;
    }
    for hit in findings.hits {
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
                extract_at(
                    &format!("{name}({member})"),
                    &member,
                    &data,
                    limits,
                    level + 1,
                    budget,
                    out,
                );
            }
            Item::Member { .. } => {}
        }
    }
}
