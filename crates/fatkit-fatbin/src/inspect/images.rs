//! Reading images: every entry of the containers found (decompressed on every core, each
//! distinct payload once) and the bare cubins and PTX, into [`ImageReport`]s.

use fatkit_arch::{PtxIsa, Target};

use super::{ContainerReport, Depth, ImageReport};
use crate::container::{Compression, Container, Entry, EntryKind, Scratch};
use crate::error::ErrorKind;
use crate::find::Origin;
use crate::{cubin, par, ptx, Budget, Error, Limits};

/// What an entry's payload says, read once per distinct payload.
#[derive(Clone, Debug, Default)]
struct Payload {
    image_size: u64,
    toolkit: Option<String>,
    /// The target the image says it is.
    own: Option<Target>,
    kernels: Vec<String>,
    empty: Vec<(String, fatkit_arch::load::Stub)>,
    code_read: bool,
    ptx_version: Option<PtxIsa>,
    /// The image could be extracted, but not read.
    unreadable: Option<String>,
}

fn payload(
    e: &Entry<'_>,
    limits: &Limits,
    scratch: &mut Scratch,
    budget: &Budget,
) -> Result<Payload, Error> {
    let kind = e.kind();
    let image = e.image_in(limits, scratch, budget)?;
    // Reading an image costs its bytes: one pass over a cubin's tables or a PTX text.
    if !budget.work("the images", image.len() as u64) {
        return Err(Error::new(
            e.offset,
            ErrorKind::OverBudget(budget.spent().unwrap_or_default()),
        ));
    }
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
                p.empty = info.empty;
                p.code_read = info.code_read;
            }
            Err(err) => p.unreadable = Some(err.to_string()),
        },
        EntryKind::Ptx | EntryKind::RelocatablePtx => {
            // `image_in` cut the text at its NUL already.
            let info = ptx::inspect_text(image);
            p.own = info.target.as_deref().and_then(ptx_target);
            p.ptx_version = info.version;
            p.kernels = info.kernels;
            p.empty = info.empty;
            p.code_read = true;
            p.unreadable = info.unreadable;
        }
        // The bytecode's own version, in its header: what a driver must accept.
        EntryKind::TileIr => p.toolkit = tile_ir_version(image),
        _ => {}
    }
    Ok(p)
}

/// Tile IR bytecode's magic, then its version: major, minor (a byte each) and a 16-bit tag.
const TILE_IR_MAGIC: &[u8; 8] = b"\x7fTileIR\0";

/// `13.5` of Tile IR bytecode written by CUDA 13.5; `None` where the bytes are no bytecode.
pub(crate) fn tile_ir_version(image: &[u8]) -> Option<String> {
    let rest = image.strip_prefix(TILE_IR_MAGIC.as_slice())?;
    let (&major, &minor) = (rest.first()?, rest.get(1)?);
    Some(format!("{major}.{minor}"))
}

/// For each entry, the index of the first entry with the same kind and stored bytes: entries
/// keyed by kind, flags, sizes and a hash of the stored bytes, each hashed once (a bucket of
/// alike entries is never compared pairwise), the bytes compared once per copy found.
fn first_copies(entries: &[(usize, u64, Entry<'_>)]) -> Vec<usize> {
    type Key = (u32, u32, usize, u64, u64);
    let mut seen: std::collections::HashMap<Key, usize> = Default::default();
    // A collision only costs a copy read again: each entry is compared with one other.
    let hashes = par::map(
        entries,
        || (),
        |_, (_, _, e)| fatkit_arch::fingerprint::fingerprint(e.stored()),
    );
    let mut first = Vec::with_capacity(entries.len());
    for (i, ((_, _, e), hash)) in entries.iter().zip(hashes).enumerate() {
        let stored = e.stored();
        let key = (
            e.header.kind as u32,
            e.header.flags as u32,
            stored.len(),
            e.header.uncompressed_size,
            hash,
        );
        let rep = *seen.entry(key).or_insert(i);
        let same = entries
            .get(rep)
            .is_some_and(|(_, _, other)| other.stored() == stored);
        first.push(if same { rep } else { i });
    }
    first
}

/// Whether the driver may load `e` as an image. Entries it never loads (link-time IR, kinds
/// this reader does not know) are reported by their headers alone: their payloads decide
/// nothing, and their encodings are not the images' (cuFFT's LTO IR is no LZ4 a reader can
/// take).
fn loadable(e: &Entry<'_>) -> bool {
    !matches!(e.kind(), EntryKind::LtoIr | EntryKind::Unknown(_))
}

/// The entries read: each the first of its copies (`first`), and loadable.
fn distinct(entries: &[(usize, u64, Entry<'_>)], first: &[usize]) -> Vec<usize> {
    first
        .iter()
        .enumerate()
        .filter(|(i, f)| i == *f && entries.get(*i).is_some_and(|(_, _, e)| loadable(e)))
        .map(|(i, _)| i)
        .collect()
}

/// What inflating alone costs, and yields: of the containers [`crate::find()`] finds in a file,
/// the entries, those read (each distinct loadable payload once), and their bytes as stored
/// and as decompressed. See [`inflate_only`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inflated {
    pub entries: usize,
    pub distinct: usize,
    pub stored: u64,
    pub images: u64,
}

/// Every payload `inspect` decompresses in `data`, decompressed as it does (each distinct one
/// once, on every core) and nothing else read: no names, no bodies, no report. What this
/// takes is the floor under any reading that knows each image's kernels, whose names a
/// cubin keeps in tables only its section headers, at its end, locate (`cargo xtask bench`
/// sets it beside `audit` and cuobjdump).
pub fn inflate_only(data: &[u8], limits: &Limits) -> Inflated {
    let found = crate::find(data);
    let entries: Vec<(usize, u64, Entry<'_>)> = found
        .hits
        .iter()
        .filter_map(|h| match &h.item {
            crate::Item::Container(c) => Some(c),
            _ => None,
        })
        .flat_map(|c| c.entries().map(|e| (0, 0, e)))
        .collect();
    let first = first_copies(&entries);
    let distinct = distinct(&entries, &first);
    let budget = Budget::for_input(limits, data.len() as u64);
    let read = par::map(&distinct, Scratch::default, |scratch, &i| {
        let (_, _, e) = entries.get(i)?;
        let image = e.image_in(limits, scratch, &budget).ok()?;
        Some((e.stored().len() as u64, image.len() as u64))
    });
    let (stored, images) = read
        .iter()
        .flatten()
        .fold((0, 0), |(s, i), (a, b)| (s + a, i + b));
    Inflated {
        entries: entries.len(),
        distinct: distinct.len(),
        stored,
        images,
    }
}

/// Every container's report; at `Depth::Kernels` every distinct payload decompressed and read,
/// spread over the cores.
pub(super) fn container_reports(
    found: Vec<(u64, Origin, Container<'_>)>,
    depth: Depth,
    limits: &Limits,
    budget: &Budget,
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
        let loadable = |i: usize| entries.get(i).is_some_and(|(_, _, e)| loadable(e));
        let distinct = distinct(&entries, &first);
        let read = par::map(&distinct, Scratch::default, |scratch, &i| {
            entries
                .get(i)
                .map(|(_, _, e)| payload(e, limits, scratch, budget))
        });
        // Each entry's payload, by the index of its first copy; the last copy to use one
        // takes its names instead of copying them.
        let mut by_entry: Vec<Option<Result<Payload, Error>>> =
            (0..entries.len()).map(|_| None).collect();
        for (&i, p) in distinct.iter().zip(read) {
            if let Some(slot) = by_entry.get_mut(i) {
                *slot = p;
            }
        }
        let mut last_user = vec![0usize; entries.len()];
        for (i, &rep) in first.iter().enumerate() {
            if let Some(last) = last_user.get_mut(rep) {
                *last = i;
            }
        }
        for (i, image) in images.iter_mut().enumerate() {
            let (Some(&rep), Some((_, offset, e))) = (first.get(i), entries.get(i)) else {
                continue;
            };
            if !loadable(i) {
                continue;
            }
            let last = last_user.get(rep) == Some(&i);
            match (by_entry.get_mut(rep), entries.get(rep)) {
                (Some(Some(Ok(p))), _) if last => apply(image, std::mem::take(p)),
                (Some(Some(Ok(p))), _) => apply(image, p.clone()),
                // A copy fails as its first did (never inflated again), at its own offset.
                (Some(Some(Err(err))), Some((_, _, first))) => {
                    let mut err = err.clone();
                    err.offset = err
                        .offset
                        .saturating_sub(first.offset as u64)
                        .saturating_add(e.offset as u64);
                    image.error = Some(err.shifted(*offset).to_string());
                }
                _ => {}
            }
        }
    }
    // Every container's bytes hashed once, on every core: a GB of libtorch_cuda.so's takes
    // a core a fifth of a second.
    let fingerprints = par::map(
        &found,
        || (),
        |_, (_, _, c)| {
            budget.work("the containers", c.len() as u64);
            fatkit_arch::fingerprint::fingerprint(c.bytes())
        },
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

fn apply(image: &mut ImageReport, p: Payload) {
    image.image_target = p.own.filter(|own| {
        image
            .target
            .is_none_or(|header| !fatkit_arch::rules::header_agrees(header, *own))
    });
    image.image_size = Some(p.image_size);
    image.toolkit = p.toolkit;
    image.kernels = p.kernels;
    image.empty_bodies = p.empty;
    image.code_read = p.code_read;
    image.ptx_isa = image.ptx_isa.or(p.ptx_version);
    image.error = p.unreadable;
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
        empty_bodies: Vec::new(),
        code_read: false,
        error: None,
    }
}

pub(super) fn bare_cubin(bytes: &[u8], offset: u64, depth: Depth, budget: &Budget) -> ImageReport {
    let info = match budget.work("the images", bytes.len() as u64) {
        true => cubin::inspect(bytes),
        false => Err(Error::new(
            offset,
            ErrorKind::OverBudget(budget.spent().unwrap_or_default()),
        )),
    };
    let (target, arch, toolkit, (kernels, empty_bodies, code_read), error) = match info {
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
                    (i.kernels, i.empty, i.code_read)
                } else {
                    (Vec::new(), Vec::new(), false)
                },
                None,
            )
        }
        Err(e) => (
            None,
            0,
            None,
            (Vec::new(), Vec::new(), false),
            Some(e.to_string()),
        ),
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
        empty_bodies,
        code_read,
        error,
    }
}

pub(super) fn bare_ptx(bytes: &[u8], offset: u64, budget: &Budget) -> ImageReport {
    let mut info = ptx::inspect(bytes);
    if !budget.work("the images", bytes.len() as u64) {
        info.unreadable = budget.spent();
    }
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
        empty_bodies: info.empty,
        code_read: true,
        error: info.unreadable,
    }
}
