//! From bytes to a report: every container, entry and kernel in a file, members of archives
//! included. Pure: the caller reads the file.

use fatkit_arch::{PtxIsa, Target};
use serde::Serialize;

use crate::container::{Compression, EntryKind};
use crate::find::{self, find_named_in, Format, Item, Origin};
use crate::{Budget, Limits};

/// How much to read of each entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depth {
    /// Headers only: kinds, targets, sizes. No decompression.
    Headers,
    /// Also decompress payloads and read kernel names and toolkit notes.
    Kernels,
}

/// One image: an entry of a container, or a bare cubin / PTX file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
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
    /// The kernels whose code here only returns or traps (`crate::body`), each a stub where
    /// another image of its module holds a body (`coverage`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub empty_bodies: Vec<(String, fatkit_arch::load::Stub)>,
    /// Whether its kernels' code was read for [`ImageReport::empty_bodies`] (PTX, and cubins
    /// of the instruction sets fatkit reads); `false` for a cubin of another, or unread.
    #[serde(skip)]
    pub code_read: bool,
    /// Why the payload could not be read.
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct BareImage {
    pub origin: Origin,
    #[serde(flatten)]
    pub image: ImageReport,
}

/// Everything in one file or archive member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct FileReport {
    pub name: String,
    pub format: Format,
    pub containers: Vec<ContainerReport>,
    /// Cubins and PTX found whole (a `.cubin` file, a cubin embedded in `.rodata`).
    pub images: Vec<BareImage>,
    pub members: Vec<FileReport>,
    /// Problems met while reading; the rest of the report still stands.
    pub errors: Vec<String>,
    /// Why the whole input was refused (reading it costs more than its budget: its zip members
    /// inflate past it, a crafted shape; [`Budget`]): then nothing in the report is an answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// The CUDA runtimes a host file (ELF, PE) links ([`crate::runtime`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtimes: Vec<crate::runtime::LinkedRuntime>,
    /// The machine a host file (ELF, PE) is built for ([`crate::host::machine`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<crate::host::Machine>,
    /// Of a host file's own kernels (ELF, PE), those no string of its host code names, where
    /// the file names its kernels ([`crate::host::unnamed`]): never launched by it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unnamed: Option<Vec<String>>,
    /// The CUDA sources among a zip's or directory's files (`.cu`, `.cuh`), by name: what a
    /// package that compiles its kernels at run time ships.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    /// The compilers among a zip's or directory's files, or the file itself
    /// ([`crate::compiler`]): what makes device code on the user's machine at run time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compilers: Vec<crate::compiler::Compiler>,
    /// The host programs among them, or the file itself, that compile CUDA C++ they hold with
    /// NVRTC ([`crate::nvrtc_source`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvrtc_sources: Vec<crate::nvrtc_source::NvrtcSource>,
    /// Whether a host file (ELF, PE) links PyTorch ([`crate::host::links_torch`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub torch: bool,
}

/// Whether a file named `name` is CUDA C++ source (`.cu`, `.cuh`).
pub fn is_cuda_source(name: &str) -> bool {
    name.ends_with(".cu") || name.ends_with(".cuh")
}

impl FileReport {
    /// The report of a file named `name` of `format`, before anything is found in it.
    pub fn empty(name: &str, format: Format) -> FileReport {
        FileReport {
            name: name.to_owned(),
            format,
            containers: Vec::new(),
            images: Vec::new(),
            members: Vec::new(),
            errors: Vec::new(),
            refused: None,
            runtimes: Vec::new(),
            machine: None,
            unnamed: None,
            sources: Vec::new(),
            compilers: Vec::new(),
            nvrtc_sources: Vec::new(),
            torch: false,
        }
    }

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
pub(crate) fn inspect_named(
    name: &str,
    leaf: &str,
    data: &[u8],
    depth: Depth,
    limits: &Limits,
) -> FileReport {
    let budget = Budget::for_input(limits, data.len() as u64);
    inspect_named_in(name, leaf, data, depth, limits, &budget)
}

/// `inspect_named`, charging `budget` (the budget of the input this file is part of: a
/// directory's files share one). Once it is spent the report is refused ([`FileReport::refused`]).
pub fn inspect_named_in(
    name: &str,
    leaf: &str,
    data: &[u8],
    depth: Depth,
    limits: &Limits,
    budget: &Budget,
) -> FileReport {
    let mut report = inspect_at(name, leaf, data, depth, limits, 0, budget);
    report.refused = budget.spent();
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
pub(crate) fn inspect_zip_with<R: std::io::Read + std::io::Seek>(
    name: &str,
    mut reader: R,
    depth: Depth,
    limits: &Limits,
    also: impl FnMut(&str, &[u8]),
) -> FileReport {
    let len = reader.seek(std::io::SeekFrom::End(0)).unwrap_or(0);
    let budget = Budget::for_input(limits, len);
    inspect_zip_in(name, reader, (depth, limits, &budget), also)
}

/// `inspect_zip_with`, charging `budget`.
pub fn inspect_zip_in<R: std::io::Read + std::io::Seek>(
    name: &str,
    reader: R,
    (depth, limits, budget): (Depth, &Limits, &Budget),
    also: impl FnMut(&str, &[u8]),
) -> FileReport {
    let mut report = zip_report(name, reader, depth, limits, 0, budget, also);
    report.refused = budget.spent();
    report
}

/// A zip file's report: its members read one at a time, at archive depth `level`.
fn zip_report<R: std::io::Read + std::io::Seek>(
    name: &str,
    reader: R,
    depth: Depth,
    limits: &Limits,
    level: usize,
    budget: &Budget,
    mut also: impl FnMut(&str, &[u8]),
) -> FileReport {
    let mut report = FileReport::empty(name, Format::Zip);
    let mut nested = Vec::new();
    let errors = find::zip_members_of(reader, limits, budget, |m| {
        if is_cuda_source(m.name) {
            report.sources.push(m.name.to_owned());
        }
        match member_report(name, m.name, m.data, depth, limits, level, budget) {
            Ok((sub, (compilers, sources))) => {
                report.compilers.extend(compilers);
                report.nvrtc_sources.extend(sources);
                if let Some(sub) = sub {
                    if sub.has_device_code() {
                        also(m.name, m.data);
                    }
                    report.members.push(sub);
                }
            }
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
    budget: &Budget,
) -> FileReport {
    let findings = find_named_in(leaf, data, budget);
    // A host file's libraries (`DT_NEEDED`, PE imports), read once for the runtime it links,
    // whether it links PyTorch and whether it loads NVRTC.
    let host = matches!(findings.format, Format::Elf | Format::Pe);
    let needed = match host {
        true => crate::host::needed(data),
        false => Vec::new(),
    };
    let mut report = FileReport {
        name: name.to_owned(),
        format: findings.format,
        containers: Vec::new(),
        images: Vec::new(),
        members: Vec::new(),
        errors: findings.errors.iter().map(|e| e.to_string()).collect(),
        refused: None,
        runtimes: match host {
            true => crate::runtime::linked(data, &needed),
            false => Vec::new(),
        },
        machine: crate::host::machine(data),
        unnamed: None,
        sources: Vec::new(),
        compilers: crate::compiler::read(leaf, data).into_iter().collect(),
        nvrtc_sources: match findings.format {
            Format::Elf => crate::nvrtc_source::read(leaf, data, &needed)
                .into_iter()
                .collect(),
            _ => Vec::new(),
        },
        torch: crate::host::links_torch(&needed),
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
        report.compilers.extend(zip.compilers);
        report.nvrtc_sources.extend(zip.nvrtc_sources);
        report.errors.extend(zip.errors);
        return report;
    }
    let mut containers = Vec::new();
    for hit in findings.hits {
        match hit.item {
            Item::Container(c) => containers.push((hit.offset, hit.origin, c)),
            Item::Cubin(bytes) => report.images.push(BareImage {
                origin: hit.origin,
                image: bare_cubin(bytes, hit.offset, depth, budget),
            }),
            Item::Ptx(bytes) => report.images.push(BareImage {
                origin: hit.origin,
                image: bare_ptx(bytes, hit.offset, budget),
            }),
            Item::Member { name: member, data } => {
                match member_report(name, &member, &data, depth, limits, level, budget) {
                    Ok((sub, (compilers, sources))) => {
                        report.compilers.extend(compilers);
                        report.nvrtc_sources.extend(sources);
                        report.members.extend(sub);
                    }
                    Err(e) => report.errors.push(e),
                }
            }
        }
    }
    report.containers = container_reports(containers, depth, limits, budget);
    if report.machine.is_some() && budget.work("the host strings", data.len() as u64) {
        let kernels = report
            .containers
            .iter()
            .flat_map(|c| &c.entries)
            .flat_map(|e| &e.kernels)
            .map(String::as_str);
        report.unnamed = crate::host::unnamed(data, kernels);
    }
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
    budget: &Budget,
) -> Result<(Option<FileReport>, Hoisted), String> {
    if level + 1 > limits.max_depth {
        return Err(format!(
            "{member}: archives nested deeper than {} levels; not read",
            limits.max_depth
        ));
    }
    let mut sub = inspect_at(
        &format!("{name}({member})"),
        member,
        data,
        depth,
        limits,
        level + 1,
        budget,
    );
    // A member's compilers and NVRTC programs are its archive's, whatever else it holds.
    let hoisted = (
        std::mem::take(&mut sub.compilers),
        std::mem::take(&mut sub.nvrtc_sources),
    );
    let kept = !sub.containers.is_empty()
        || !sub.images.is_empty()
        || !sub.members.is_empty()
        || !sub.errors.is_empty();
    Ok((kept.then_some(sub), hoisted))
}

/// What a member gives its archive whatever else it holds: its compilers and NVRTC programs.
type Hoisted = (
    Vec<crate::compiler::Compiler>,
    Vec<crate::nvrtc_source::NvrtcSource>,
);

mod extract;
mod images;

/// Every name a report holds that came from its input (the file's and its members' names,
/// kernel names, container identifiers, toolkit notes, errors quoting what was read, host
/// strings) made printable (`crate::printable`): what an input says reaches a report escaped, whatever reads
/// the report later. Idempotent: an escaped name has no control character left.
pub fn escape_report(report: &mut FileReport) {
    use crate::printable::escape;
    escape(&mut report.name);
    report.errors.iter_mut().for_each(escape);
    report.refused.iter_mut().for_each(escape);
    report.sources.iter_mut().for_each(escape);
    report
        .compilers
        .iter_mut()
        .for_each(|c| escape(&mut c.name));
    for s in &mut report.nvrtc_sources {
        escape(&mut s.name);
        escape(&mut s.nvrtc);
        s.kernels.iter_mut().for_each(escape);
    }
    report.unnamed.iter_mut().flatten().for_each(escape);
    report.runtimes.iter_mut().for_each(|r| escape(&mut r.from));
    let images = report
        .containers
        .iter_mut()
        .flat_map(|c| c.entries.iter_mut())
        .chain(report.images.iter_mut().map(|b| &mut b.image));
    for image in images {
        image.kernels.iter_mut().for_each(escape);
        image.empty_bodies.iter_mut().for_each(|(k, _)| escape(k));
        image.identifier.iter_mut().for_each(escape);
        image.toolkit.iter_mut().for_each(escape);
    }
    report.members.iter_mut().for_each(escape_report);
}

pub use extract::{extract_all, Extracted};
use images::{bare_cubin, bare_ptx, container_reports};
pub use images::{inflate_only, Inflated};
