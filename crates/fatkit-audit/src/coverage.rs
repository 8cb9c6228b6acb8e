//! Kernel-level coverage: which images each kernel has, and what runs where.
//!
//! A kernel is known by its module: (file, container, name). The driver loads one image of a
//! module and finds a kernel only in that image (docs/ARCH_RULES.md section 2), so every
//! verdict here is [`fatkit_arch::load`]'s over the kernel's own container.

use std::collections::BTreeMap;
use std::sync::Arc;

use fatkit_arch::explain::{self, Cause};
use fatkit_arch::load::{self, Fate};
use fatkit_arch::rules::{self, Device, DriverCheck, Image, Policy, Status};
use fatkit_arch::{products, Cc, ImageKind, Target, TargetSet};
use serde::Serialize;

use crate::general::Roles;
pub use crate::kernel::KernelImages;
use fatkit_fatbin::inspect::{FileReport, ImageReport};

mod declarations;
pub use declarations::{Declarations, Excuses};

/// One module as the driver sees it: a container's images (or a bare image alone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleImages {
    /// `lib.so@0x1f00`: the file or member holding it and the container's offset.
    pub name: String,
    pub images: Vec<Image>,
    /// Each kernel with the indices of the images holding it.
    pub kernels: Vec<(String, Vec<usize>)>,
    /// The kernels some image holds only as a stub, with those images (indices).
    pub stubs: BTreeMap<String, Vec<(usize, load::Stub)>>,
    /// The container's size and fingerprint, which a declaration record binds to; `None` for
    /// a bare image.
    pub fatbin: Option<(u64, u64)>,
}

impl KernelImages {
    /// How a GPU of compute capability `cc` is served, judged by architecture alone.
    pub fn cell(&self, cc: Cc, policy: Policy) -> Cell {
        let (_, fate, status) = self.fate(&Device::new(cc, None), policy);
        let image = fate.image().and_then(|i| self.module_images.get(i));
        if let Fate::Stub { image, .. } = fate {
            if let (Status::Fails, Some(i)) = (status, self.module_images.get(image)) {
                return Cell::CompiledOut(i.target);
            }
        }
        match (status, image) {
            (Status::Unknown, _) => Cell::Unknown,
            (_, Some(i)) if i.target.is_cubin() => Cell::Cubin(i.target),
            (_, Some(i)) => Cell::Ptx(i.target),
            (_, None) => Cell::Missing,
        }
    }
}

impl KernelImages {
    /// How a profile target is served: a cubin target `sm_XY` as a GPU of CC X.Y is (a cubin,
    /// or PTX the driver JIT-compiles); a PTX target `compute_XY` by PTX of the kernel that
    /// JIT-compiles for X.Y, or not at all.
    pub(crate) fn target_cell(&self, target: Target, policy: Policy) -> Cell {
        match target.kind {
            ImageKind::Cubin => self.cell(target.cc, policy),
            ImageKind::Ptx => self
                .images
                .iter()
                .find(|i| i.target.is_ptx() && rules::ptx_arch_fit(i.target, target.cc).is_ok())
                .map_or(Cell::Missing, |i| Cell::Ptx(i.target)),
        }
    }
}

/// One cell of the coverage matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case", tag = "by", content = "image")]
pub enum Cell {
    Cubin(Target),
    /// Only PTX serves it (JIT at load time).
    Ptx(Target),
    /// The rules cannot say (an entry header that disagrees with its image, a toolkit newer
    /// than the tables).
    Unknown,
    /// The image the driver loads holds the kernel only as a stub: it does nothing there.
    CompiledOut(Target),
    Missing,
}

/// The image as the rules see it: the image's own target over its entry header's, and the
/// toolkit that built a cubin.
fn rule_image(entry: &ImageReport) -> Option<Image> {
    let header = entry.target?;
    let own = entry.image_target.unwrap_or(header);
    let image = Image::of(own, entry.ptx_isa);
    let toolkit = entry.toolkit.as_deref().and_then(|t| t.parse().ok());
    Some(image.built_by(toolkit).headed(Some(header)))
}

/// Every module of a report (its containers and bare images, members included) with the
/// kernels of each. Identical modules (a library embeds a container many times) are one.
/// Entries the driver never loads as an image (not a cubin or PTX), unreadable ones, those
/// without a target, and a relocatable fatbin's beside an executable one are left out.
pub fn modules(report: &FileReport) -> Vec<ModuleImages> {
    modules_declared(report, &Declarations::default())
}

/// [`modules`], where a container `declarations` bind to is never one with another: a
/// record speaks for its own container only, so identical images are one module only when
/// no record tells them apart.
pub fn modules_declared(report: &FileReport, declarations: &Declarations) -> Vec<ModuleImages> {
    let mut out: Vec<ModuleImages> = Vec::new();
    // Each module kept, by a hash of it and its binding: a module is compared with those of
    // its hash only, and never copied to be compared.
    let mut seen: std::collections::HashMap<u64, Vec<usize>> = Default::default();
    let state = std::collections::hash_map::RandomState::new();
    let mut add = |name: String, fatbin: Option<(u64, u64)>, entries: Vec<&ImageReport>| {
        let usable: Vec<(Image, &ImageReport)> = entries
            .into_iter()
            .filter(|e| e.error.is_none())
            .filter_map(|e| Some((rule_image(e)?, e)))
            .collect();
        if usable.is_empty() {
            return;
        }
        let read: Vec<(usize, &[(String, load::Stub)])> = usable
            .iter()
            .enumerate()
            .filter(|(_, (_, e))| e.code_read)
            .map(|(idx, (_, e))| (idx, e.empty_bodies.as_slice()))
            .collect();
        let module: load::Module<String> =
            load::Module::of(usable.iter().map(|(i, e)| (*i, e.kernels.iter()))).with_stubs(&read);
        let binding = fatbin.filter(|f| declarations.binds(*f));
        let key = {
            use std::hash::BuildHasher;
            state.hash_one((&module, binding))
        };
        let same = |m: &ModuleImages| {
            m.images == module.images
                && m.kernels == module.kernels
                && m.stubs == module.stubs
                && m.fatbin.filter(|f| declarations.binds(*f)) == binding
        };
        let kept = seen.entry(key).or_default();
        if kept.iter().any(|&i| out.get(i).is_some_and(same)) {
            return;
        }
        kept.push(out.len());
        out.push(ModuleImages {
            name,
            images: module.images,
            kernels: module.kernels,
            stubs: module.stubs,
            fatbin,
        });
    };
    let mut stack = vec![report];
    while let Some(r) = stack.pop() {
        // Beside an executable fatbin, the relocatable one holds the device link's inputs:
        // the runtime registers the linked module, never these (docs/ARCH_RULES.md section 2).
        for c in r.loaded_containers() {
            add(
                format!("{}@{:#x}", r.name, c.offset),
                Some((c.size, c.fingerprint)),
                c.entries.iter().collect(),
            );
        }
        for b in &r.images {
            add(
                format!("{}@{:#x}", r.name, b.image.offset),
                None,
                vec![&b.image],
            );
        }
        stack.extend(r.members.iter().rev());
    }
    out
}

/// Every kernel of a report, one per (module, name), sorted by name then module.
pub fn kernels(report: &FileReport) -> Vec<KernelImages> {
    kernels_declared(report, &Declarations::default())
}

/// [`kernels`] of [`modules_declared`].
pub fn kernels_declared(report: &FileReport, declarations: &Declarations) -> Vec<KernelImages> {
    let mut out = Vec::new();
    for module in modules_declared(report, declarations) {
        let images: Arc<[Image]> = module.images.into();
        let mut stubs = module.stubs;
        for (name, mut holders) in module.kernels {
            let mut stubbed = stubs.remove(&name).unwrap_or_default();
            // A declaration is the kernel's author saying where it is built: an image outside
            // it may still hold the kernel (its stores alone compiled out), and counts as one
            // without it, as the runtime check counts it.
            if let Some(set) = declarations.get(module.fatbin, &name) {
                let inside = |i: &usize| images.get(*i).is_some_and(|im| set.contains(im.target));
                holders.retain(inside);
                stubbed.retain(|(i, _)| inside(i));
            }
            let mut own: Vec<Image> = holders
                .iter()
                .filter_map(|&i| images.get(i).copied())
                .collect();
            own.sort_by_key(|i| (i.target, i.ptx_isa));
            out.push(KernelImages {
                name,
                module: module.name.clone(),
                images: own,
                module_images: images.clone(),
                holders,
                fatbin: module.fatbin,
                stubs: stubbed,
            });
        }
    }
    out.sort_by(|a, b| (&a.name, &a.module).cmp(&(&b.name, &b.module)));
    out
}

/// A (kernel, target) pair with no runnable image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Gap {
    pub kernel: String,
    /// The kernel's module (see [`ModuleImages::name`]).
    pub module: String,
    pub target: Target,
    /// Why, as data; serialised as its words.
    #[serde(rename = "reason")]
    pub cause: GapCause,
    /// The module's fatbin binding, for the declarations.
    #[serde(skip)]
    pub fatbin: Option<(u64, u64)>,
}

/// The images a kernel's declared targets would be, as a module of their own.
pub(crate) fn as_images(kernel: &str, set: &TargetSet) -> KernelImages {
    let images: Vec<Image> = set.iter().map(|t| Image::of(t, None)).collect();
    KernelImages {
        name: kernel.to_owned(),
        module: String::new(),
        holders: (0..images.len()).collect(),
        module_images: images.clone().into(),
        images,
        fatbin: None,
        stubs: Vec::new(),
    }
}

/// Checks every kernel against every required target: a cubin target `sm_XY` needs an image
/// that runs on CC X.Y (a cubin, or PTX the driver can JIT); a PTX target `compute_XY` needs
/// PTX that JIT-compiles for X.Y.
pub fn require(kernels: &[KernelImages], required: &TargetSet, policy: Policy) -> Vec<Gap> {
    gaps(kernels, required, |k, target| {
        let cc = target.cc;
        match k.target_cell(target, policy) {
            Cell::Cubin(_) | Cell::Ptx(_) => None,
            Cell::Unknown => Some(GapCause::Unknown { cc }),
            Cell::CompiledOut(loaded) => Some(GapCause::CompiledOut { loaded, cc }),
            Cell::Missing => Some(GapCause::NothingRuns { target }),
        }
    })
}

/// Every (kernel, target) pair for which `reason` gives a reason, as a gap.
fn gaps(
    kernels: &[KernelImages],
    targets: &TargetSet,
    cause: impl Fn(&KernelImages, Target) -> Option<GapCause>,
) -> Vec<Gap> {
    kernels
        .iter()
        .flat_map(|k| targets.iter().map(move |target| (k, target)))
        .filter_map(|(k, target)| {
            Some(Gap {
                kernel: k.name.clone(),
                module: k.module.clone(),
                target,
                cause: cause(k, target)?,
                fatbin: k.fatbin,
            })
        })
        .collect()
}

/// Why a kernel does not (certainly) run, in kind: what the driver does with its module
/// ([`KernelVerdict::cause`] is the whole cause, its words its `Display`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Why {
    /// The module loads, but the image the driver loads (`loaded`) does not hold the kernel:
    /// `CUDA_ERROR_NOT_FOUND` (500).
    NotInLoadedImage { loaded: Target },
    /// The module does not load: no image fits (209) or the PTX is too new for the driver
    /// (222).
    ModuleFails { code: u32 },
    /// The module loads and the image the driver loads holds the kernel, but only as a stub:
    /// its body is compiled out for `loaded`; a launch returns at once (or traps).
    CompiledOut { loaded: Target, stub: load::Stub },
    /// The rules cannot say.
    Unknown,
}

/// One kernel's fate on one GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KernelVerdict {
    pub kernel: String,
    /// The kernel's module (see [`ModuleImages::name`]).
    pub module: String,
    pub status: Status,
    pub image: Option<Target>,
    /// For a failure or an unknown: why, naming the images; serialised as its words.
    #[serde(rename = "reason", serialize_with = "crate::words::as_words")]
    pub cause: Option<Cause>,
    /// The same, as data: what the driver does with the kernel's module.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<Why>,
    /// For a failure its crate declared (the kernel is built for fewer targets, none of which
    /// runs here): the declared targets. Such a failure does not fail the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub declared: Option<TargetSet>,
    /// For a failure of an architecture-specific part built for other GPUs (a family the
    /// library selects per GPU, a kernel gated by architecture; `crate::general`): the targets of
    /// the images that hold the kernel. Such a failure does not fail the library.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub for_other_gpus: Option<TargetSet>,
}

impl KernelVerdict {
    /// A failure that counts: not declared by its crate, not a part for other GPUs.
    pub fn fails(&self) -> bool {
        self.status == Status::Fails && self.declared.is_none() && self.for_other_gpus.is_none()
    }
}

/// What every kernel does on `device`: found in the one image its module loads, or not; a
/// failure `declarations` excuse carries its declared targets, one `roles` places on other
/// GPUs the targets it is built for.
pub(crate) fn on_device(
    kernels: &[KernelImages],
    declarations: &Declarations,
    roles: &Roles,
    device: &Device,
    policy: Policy,
) -> Vec<KernelVerdict> {
    let mut chooser = crate::kernel::Chooser::new(device, policy);
    kernels
        .iter()
        .map(|k| {
            let (verdict, fate, status) = chooser.fate(k);
            let chosen = explain::chosen(&k.module_images, &verdict);
            let image = fate
                .image()
                .and_then(|i| k.module_images.get(i))
                .map(|i| i.target);
            let images = &k.module_images;
            let cause = match (&fate, chosen.map(|c| (c.target, c.ptx_driver))) {
                (Fate::Absent { .. } | Fate::Stub { .. }, _) => {
                    Cause::of_fate(images, &fate, device.cc)
                }
                _ if !verdict.doubts.is_empty() => Cause::doubted(images, &verdict, device),
                (_, Some((target, Some(DriverCheck::Unknown(need))))) => {
                    Some(Cause::PtxUnverified { target, need })
                }
                (_, Some((_, Some(DriverCheck::IsaUnknown)))) => Some(Cause::PtxIsaUnknown),
                (_, Some(_)) => None,
                (_, None) => Cause::none_runs(images, &verdict, device),
            };
            let declared = (status == Status::Fails
                && declarations.excuses_device(k, device, policy))
            .then(|| declarations.get(k.fatbin, &k.name).cloned())
            .flatten();
            let for_other_gpus = (status == Status::Fails && declared.is_none())
                .then(|| roles.for_other_gpus(k, device, policy))
                .flatten();
            let why = match (status, &fate) {
                (Status::Runs, _) => None,
                (Status::Unknown, _) => Some(Why::Unknown),
                (Status::Fails, Fate::Absent { loaded, .. }) => k
                    .module_images
                    .get(*loaded)
                    .map(|i| Why::NotInLoadedImage { loaded: i.target }),
                (Status::Fails, Fate::NoLoad(e)) => Some(Why::ModuleFails { code: e.code() }),
                (Status::Fails, Fate::Stub { image, kind }) => {
                    k.module_images.get(*image).map(|i| Why::CompiledOut {
                        loaded: i.target,
                        stub: *kind,
                    })
                }
                (Status::Fails, Fate::Loaded { .. }) => Some(Why::Unknown),
            };
            KernelVerdict {
                kernel: k.name.clone(),
                module: k.module.clone(),
                status,
                image,
                cause,
                why,
                declared,
                for_other_gpus,
            }
        })
        .collect()
}

/// A release promises what its profile lists: every kernel has an image of every target of
/// the profile, so that a GPU is never served by JIT or an older cubin where the profile says
/// it gets its own (`require` is the looser check: something runs). What `package` gates on.
pub(crate) fn exact_gaps(
    kernels: &[KernelImages],
    targets: &TargetSet,
    policy: Policy,
) -> Vec<Gap> {
    gaps(kernels, targets, |k, target| {
        // Its own image of the target, and the driver loads that image there: a PTX target
        // is JIT-compiled only where no cubin loads, so having it is enough.
        let own = k.images.iter().any(|i| i.target == target);
        if own
            && (target.is_ptx()
                || matches!(k.target_cell(target, policy), Cell::Cubin(t) if t == target))
        {
            return None;
        }
        let cc = target.cc;
        let cell = k.target_cell(target, policy);
        if let (true, Cell::CompiledOut(loaded)) = (own, cell) {
            return Some(GapCause::CompiledOut { loaded, cc });
        }
        if own {
            return Some(GapCause::NotTheOneLoaded { target, cell });
        }
        Some(match (target.kind, cell) {
            (ImageKind::Cubin, Cell::Cubin(other)) => GapCause::OtherCubin { target, other },
            (ImageKind::Cubin, Cell::Ptx(ptx)) => GapCause::PtxJit { target, ptx },
            (ImageKind::Ptx, Cell::Ptx(other)) => GapCause::OtherPtx { target, other },
            (_, Cell::Unknown) => GapCause::Unknown { cc },
            (_, Cell::CompiledOut(loaded)) => GapCause::CompiledOut { loaded, cc },
            (_, _) => GapCause::NoneHolds { cc },
        })
    })
}

/// A compute capability every kernel runs on (but those declared for other GPUs), with the
/// products that have it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GpuRow {
    pub cc: Cc,
    pub products: Vec<&'static str>,
    /// The kernels that do not run here by their crate's declaration (built for other GPUs):
    /// not failures, named.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub declared: Vec<String>,
}

/// The compute capabilities (with their products) on which every kernel runs, judged by
/// architecture, a kernel its crate declared for other GPUs excused (`declarations`), and
/// without the GPUs that live only in aarch64 machines where no binary is built for 64-bit
/// Arm (`arm64`: `Some(false)`; `None` when no binary says).
pub(crate) fn gpus_covered(
    kernels: &[KernelImages],
    declarations: &Declarations,
    arm64: Option<bool>,
    policy: Policy,
) -> Vec<GpuRow> {
    let mut by_cc: BTreeMap<Cc, Vec<&'static str>> = BTreeMap::new();
    for p in products::PRODUCTS {
        if arm64 == Some(false) && products::aarch64_only(p.name) {
            continue;
        }
        by_cc.entry(p.cc).or_default().push(p.name);
    }
    by_cc
        .into_iter()
        .filter_map(|(cc, products)| {
            let device = fatkit_arch::rules::Device::new(cc, None);
            let mut declared = Vec::new();
            for k in kernels {
                if !matches!(k.cell(cc, policy), Cell::Missing | Cell::CompiledOut(_)) {
                    continue;
                }
                if !declarations.excuses_device(k, &device, policy) {
                    return None;
                }
                declared.push(crate::words::demangled(&k.name));
            }
            declared.sort();
            declared.dedup();
            let runs_some = kernels.len() > declared.len();
            runs_some.then_some(GpuRow {
                cc,
                products,
                declared,
            })
        })
        .collect()
}

/// A file's verdict, all told; files combine to the worst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileStatus {
    /// Every check asked for passes.
    Ok,
    /// No check fails for certain, but the rules cannot say whether some kernel runs.
    Unknown,
    /// A requirement gap, a kernel that does not run on the GPU, or no kernel to check.
    Gaps,
    /// Part of the file could not be read.
    Invalid,
}

/// One file checked against what was asked: `--require` targets and a device.
#[derive(Clone, Debug, Serialize)]
pub struct FileAudit {
    pub status: FileStatus,
    pub kernels: Vec<KernelImages>,
    /// The compute capabilities shown as matrix columns: every one the file has an image
    /// for, plus the required ones and the device's.
    pub columns: Vec<Cc>,
    /// `None` unless targets were required. Gaps the file's declarations excuse are in
    /// `declared`, not here.
    pub gaps: Option<Vec<Gap>>,
    /// Required (kernel, target) pairs missing by the crate's declaration.
    pub declared: Vec<Gap>,
    /// `None` unless a device was given.
    pub verdicts: Option<Vec<KernelVerdict>>,
    /// What could not be read.
    pub errors: Vec<String>,
}

/// Checks a report against `required` targets and a `device`; what `declarations` excuse is
/// reported apart and does not fail the file, and what `roles` places on other GPUs (its
/// libraries' families, `crate::general`) does not either.
pub fn audit(
    report: &FileReport,
    declarations: &Declarations,
    required: Option<&TargetSet>,
    device: Option<&Device>,
    (policy, table): (Policy, bool),
    roles: &Roles,
) -> FileAudit {
    // The table of every kernel, where it is asked for or the answer needs it.
    let kernels = match table || required.is_some() || device.is_some() {
        true => kernels_declared(report, declarations),
        false => Vec::new(),
    };
    let mut ccs: std::collections::BTreeSet<Cc> = kernels
        .iter()
        .flat_map(|k| k.images.iter().map(|i| i.target.cc))
        .collect();
    ccs.extend(required.into_iter().flat_map(|r| r.iter().map(|t| t.cc)));
    ccs.extend(device.map(|d| d.cc));
    let (gaps, declared) = match required {
        Some(r) => {
            let (gaps, declared) = declarations.split_require(require(&kernels, r, policy), policy);
            (Some(gaps), declared)
        }
        None => (None, Vec::new()),
    };
    let verdicts = device.map(|d| on_device(&kernels, declarations, roles, d, policy));
    let errors = report.all_errors();
    let failed = gaps.as_ref().is_some_and(|g| !g.is_empty())
        || verdicts
            .as_ref()
            .is_some_and(|v| v.iter().any(KernelVerdict::fails))
        // Asked about a GPU or targets, a file with no device code at all has nothing to
        // check (a wrong file); device code without a kernel has nothing to fail.
        || ((required.is_some() || device.is_some()) && !report.has_device_code());
    let unknown = verdicts
        .as_ref()
        .is_some_and(|v| v.iter().any(|k| k.status == Status::Unknown));
    let status = if !errors.is_empty() {
        FileStatus::Invalid
    } else if failed {
        FileStatus::Gaps
    } else if unknown {
        FileStatus::Unknown
    } else {
        FileStatus::Ok
    };
    FileAudit {
        status,
        kernels,
        columns: ccs.into_iter().collect(),
        gaps,
        declared,
        verdicts,
        errors,
    }
}

mod gap;
pub use gap::GapCause;

#[cfg(test)]
mod tests;
