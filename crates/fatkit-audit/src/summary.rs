//! The audit's answer for people: per library, a verdict on each GPU asked about; what it was
//! built for, by image kind and in every arch-list notation; by which toolkits; the driver
//! each target needs; and the kernels that do not run, grouped by why. One data type, which
//! the command line renders as text, as JSON and as a GPU x library matrix.

use std::collections::{BTreeMap, BTreeSet};

use fatkit_arch::driver::{DriverRelease, DriverVersion, MinDriver};
use fatkit_arch::notation::{self, Notation};
use fatkit_arch::rules::{Device, Policy};
use fatkit_arch::toolkit::{self, CudaVersion};
use fatkit_arch::{Cc, ImageKind, TargetSet};
use serde::Serialize;

use crate::coverage::{self, Declarations};
use crate::general::Roles;
use fatkit_fatbin::inspect::FileReport;

/// One library: a file, or a member of a wheel, archive or directory, holding device code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Library {
    /// As shown: the path inside the wheel or directory, or the file.
    pub name: String,
    /// The Python distribution it belongs to (`torch 2.7.0`), when known.
    pub package: Option<String>,
    /// The layer of a container image it came from (`layer 2 of 3 (sha256:0123456789ab)`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer: Option<String>,
    pub kernels: usize,
    pub cubins: TargetSet,
    pub ptx: TargetSet,
    /// The CUDA releases that built the cubins, from their notes (`12.6`).
    pub toolkits: Vec<String>,
    /// The targets (cubins and PTX) of its general build, as a build would have asked for
    /// them: architecture-specific families are not part of it (`crate::general`).
    pub arch_list: ArchList,
    /// The product compute capabilities its general build reaches, and how many of its
    /// modules are architecture-specific families beside it.
    pub general: General,
    /// What driver each group of images needs.
    pub drivers: Vec<DriverNeed>,
    /// What driver the CUDA runtimes it links need ([`fatkit_fatbin::runtime`]; no targets): every
    /// runtime call fails on an older one, before any image is chosen.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runtimes: Vec<DriverNeed>,
    /// The compute capabilities of known products on which the library runs, judged by
    /// architecture (a cubin, or PTX the driver JIT-compiles): every kernel but those of
    /// parts built for other GPUs.
    pub runs_on: Vec<Cc>,
    /// What could not be read: the verdict is then `unknown`, never `runs`.
    pub corrupt: Vec<String>,
    /// Its Tile IR entries, whose kernels fatkit does not read and whose loading no rule of
    /// fatkit's decides (docs/ARCH_RULES.md section 13): the verdict is then `unknown` at best.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tile_ir: Vec<String>,
    /// Whether its plain targets span two or more GPU generations (`products::generation`):
    /// a general build, which a package's core is (docs/ARCH_RULES.md section 11); a library
    /// built for one generation, or for `a`/`f` targets only, is built for a feature of those
    /// GPUs.
    pub wide: bool,
    /// Whether it was built with fatkit (fatkit's runtime record, or a crate's declarations
    /// bound to its modules): its fixes say how to build it.
    #[serde(skip)]
    pub own: bool,
    /// Whether it is a PyTorch extension (it links libtorch or libc10), or of PyTorch: then
    /// `TORCH_CUDA_ARCH_LIST` is the notation its build was asked in.
    #[serde(skip)]
    pub torch: bool,
    /// Whether it is a PTX text file of its own (a `.ptx` data file), not device code inside a
    /// host library or a fatbin.
    #[serde(skip)]
    pub ptx_file: bool,
    /// The machine its host code is built for (none for bare device code).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<fatkit_fatbin::host::Machine>,
    /// Which of its modules are families (what `general` counts).
    #[serde(skip)]
    pub roles: Roles,
    /// Its kernels by name: what `diff` asks whether a kernel is in a release at all.
    #[serde(skip)]
    pub names: std::collections::BTreeSet<String>,
    /// One per GPU asked about, in the order asked.
    pub on: Vec<OnGpu>,
}

/// A library's general build (`crate::general`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct General {
    /// The product compute capabilities on which its general modules load.
    pub reach: Vec<Cc>,
    /// Its targets (cubins and PTX).
    pub targets: TargetSet,
    /// How many modules (containers, with kernels) the library has.
    pub modules: usize,
    /// How many of them are architecture-specific families (none with `--strict`).
    pub families: usize,
    /// Whether every module was held to every kernel (`--strict`).
    pub strict: bool,
    /// Whether the library is one file of a collection built per GPU ([`Held::PerGpu`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub per_gpu: bool,
    /// Whether `runs_on` counts a compute capability on which parts built for other GPUs
    /// only do not load.
    pub aside: bool,
    /// Kernels its crate declares for fewer targets that `runs_on` excuses on one of its
    /// compute capabilities (`declared for sm_80` on CC 7.5): not every kernel runs there.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub declared: Vec<String>,
}

/// A target list in the notations builds use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ArchList {
    /// `TORCH_CUDA_ARCH_LIST`; `None` when the list has PTX without its cubin, which that
    /// notation cannot say (`torch_note` says why).
    pub torch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torch_note: Option<String>,
    /// `CMAKE_CUDA_ARCHITECTURES`.
    pub cmake: String,
    /// nvcc's `-gencode` flags.
    pub nvcc: String,
}

/// The oldest driver that loads some images, and why.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct DriverNeed {
    pub targets: TargetSet,
    /// What needs it: PTX of an ISA, cubins from a CUDA release, a linked runtime.
    pub what: Needs,
    /// The CUDA level of the driver needed.
    pub cuda: CudaVersion,
    /// As nvidia-smi prints it; `None` where the tables have no number.
    pub release: Option<DriverRelease>,
}

/// How a library fares on one GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// The library holds device code but no kernel (libcufftw, CUPTI's libnvperf): nothing
    /// to launch, so nothing fails.
    NoKernels,
    /// Every kernel is in parts built for other GPUs only (a file of a collection built per
    /// GPU, for another GPU): nothing of it is meant for this one. Beside libraries that run,
    /// not a failure; a distribution of nothing else holds nothing for this GPU.
    OtherGpus,
    /// Every kernel runs from a cubin.
    Runs,
    /// Every kernel runs, some only by PTX the driver JIT-compiles at load.
    RunsByPtx,
    /// Some kernels run, some do not.
    Partly,
    /// No kernel runs.
    No,
    /// Part of the library could not be read, or the driver could not be judged.
    Unknown,
}

impl Answer {
    pub fn word(self) -> &'static str {
        match self {
            Answer::NoKernels => "no kernels",
            Answer::OtherGpus => "for other GPUs",
            Answer::Runs => "yes",
            Answer::RunsByPtx => "yes, by PTX JIT",
            Answer::Partly => "PARTLY",
            Answer::No => "NO",
            Answer::Unknown => "UNKNOWN",
        }
    }
}

/// A library on one GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OnGpu {
    pub gpu: String,
    pub cc: Cc,
    pub driver: Option<DriverVersion>,
    pub answer: Answer,
    pub kernels: usize,
    /// Kernels that run (from a cubin or by PTX).
    pub run: usize,
    /// Of those, the kernels only PTX serves.
    pub by_ptx: usize,
    /// Kernels that do not run because the image the driver loads holds them only as a stub
    /// (their body compiled out for it): counted among the failing too.
    #[serde(skip_serializing_if = "is_zero")]
    pub compiled_out: usize,
    /// Kernels that do not run by their crate's declaration (built for fewer targets by
    /// design), with the targets declared: not failures.
    pub declared: Vec<(String, TargetSet)>,
    /// The images the driver picks, over all kernels that run.
    pub images: TargetSet,
    /// The driver those images need (the PTX's, when any kernel runs by PTX).
    pub needs: Option<DriverNeed>,
    /// The oldest driver that runs what runs here, the one floor of docs/ARCH_RULES.md section
    /// 3 (`fatkit_arch::floor`'s rule): the most demanding of `needs` and the CUDA runtimes the
    /// library links; `None` when nothing runs or nothing says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor: Option<DriverNeed>,
    pub failing: Vec<FailGroup>,
    /// Kernels of architecture-specific parts built for other GPUs, by the targets they are
    /// built for: launching one here would fail, but the library selects them on other GPUs
    /// only. Not failures (`--strict` counts them).
    pub for_other_gpus: Vec<OtherGpus>,
    /// Kernels that do not run here and that no string of the library's host code names: it
    /// never launches them (`fatkit_fatbin::host::unnamed`). Not failures (`--strict` counts
    /// them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unnamed: Vec<String>,
    /// Nothing of the library loads here, by design of its targets: every one is for other
    /// GPUs (`a`/`f`) or for newer ones. Whether that fails its package is the package's
    /// answer's to say ([`crate::answer`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub narrow: Option<Narrow>,
    /// Whether the library holds images built for this GPU (a cubin of its architecture or
    /// family; `general::built_for`).
    #[serde(skip)]
    pub own_images: bool,
    /// Part of the library could not be read: the answer is `unknown`.
    pub corrupt: bool,
    /// The driver given is older than the chosen cubins' toolkit needs: they may not load.
    /// The answer is then `unknown`.
    #[serde(serialize_with = "crate::words::as_words")]
    pub driver_problem: Option<DriverProblem>,
    /// The driver given is older than a CUDA runtime the library links needs: nothing runs.
    /// The answer is then `no`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::words::as_words"
    )]
    pub runtime_problem: Option<DriverProblem>,
    /// What to do, where the library does not run here and something can be done; set by the
    /// package's answer, which knows who can act ([`crate::answer`]).
    #[serde(serialize_with = "crate::words::as_words")]
    pub fix: Option<crate::fix::Fix>,
}

/// Kernels that do not run for the same reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FailGroup {
    /// Why, as data: the group's key; serialised as its words.
    #[serde(rename = "reason")]
    pub cause: Failing,
    /// The reason as data (the first kernel's; a group shares its words, hence its kind).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<coverage::Why>,
    pub kernels: Vec<String>,
    /// The modules (containers) they are in.
    pub modules: Vec<String>,
}

/// Why nothing of a library loads on a GPU, by design of its targets.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Narrow {
    /// Every target is architecture- or family-specific (`a`, `f`) for other GPUs.
    OtherGpus { targets: TargetSet },
    /// Every target is for newer GPUs than this one (or `a`/`f` for others): built from CC
    /// `floor` on.
    NewerGpus { targets: TargetSet, floor: Cc },
}

impl Narrow {
    pub fn targets(&self) -> &TargetSet {
        match self {
            Narrow::OtherGpus { targets } | Narrow::NewerGpus { targets, .. } => targets,
        }
    }
}

/// Kernels built only for `targets`, none of which loads on the GPU asked about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OtherGpus {
    pub targets: TargetSet,
    /// They are in the image the driver loads here, built for this GPU, with their bodies
    /// compiled out of it (`targets` hold the bodies): the build meant them for those GPUs.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub compiled_out: bool,
    pub kernels: Vec<String>,
    /// The modules (containers) they are in.
    pub modules: Vec<String>,
}

/// A GPU asked about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GpuAsked {
    pub name: String,
    pub cc: Cc,
}

/// How a library is held to its kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// By its general build: families built for other GPUs are aside (`crate::general`).
    General,
    /// To every kernel (`--strict`).
    Strict,
    /// As one file of a collection built per GPU (standalone cubins a loader picks by GPU,
    /// `crate::collection`): built for other GPUs, it is aside, as a family is.
    PerGpu,
}

/// Summarises one library's report for `devices`.
pub fn library(
    name: String,
    package: Option<String>,
    report: &FileReport,
    declarations: &Declarations,
    devices: &[Device],
    policy: Policy,
    held: Held,
) -> Library {
    let kernels = coverage::kernels_declared(report, declarations);
    let roles = match held {
        Held::Strict => Roles::strict(),
        Held::General => Roles::of(&kernels, policy),
        Held::PerGpu => Roles::per_gpu(&kernels),
    };
    let strict = held == Held::Strict;
    let Built {
        cubins,
        ptx,
        toolkits,
        mut corrupt,
        built_by,
    } = Built::of(report);
    // The general build's targets: every image of a module that is not a family.
    let general_targets: TargetSet = kernels
        .iter()
        .filter(|k| held == Held::PerGpu || !roles.is_family(&k.module))
        .flat_map(|k| k.module_images.iter().map(|i| i.target))
        .collect();
    corrupt.extend(report.all_errors());
    let runs = runs_on(&kernels, declarations, &roles, policy);
    let drivers = driver_needs(report);
    let runtimes: Vec<DriverNeed> = report
        .all_runtimes()
        .iter()
        .map(|r| DriverNeed::new(TargetSet::new(), Needs::Runtime(r.clone()), r.needs()))
        .collect();
    let wide = wide(&general_targets);
    let torch = links_torch(report) || of_torch(&name, package.as_deref());
    let unnamed = match held {
        Held::Strict => Default::default(),
        _ => unnamed_of(report),
    };
    let shape = on_gpu::Shape::of(&kernels, wide);
    let tile_ir = tile_ir_of(report);
    let on = devices
        .iter()
        .map(|d| {
            let mut on = on_gpu(
                &kernels,
                (declarations, &roles, &unnamed),
                d,
                (policy, strict, &shape),
                (&built_by, &runtimes, &drivers),
                !corrupt.is_empty(),
            );
            // Kernels in Tile IR may or may not run here: what passes is not known.
            if !tile_ir.is_empty() && on.answer <= Answer::RunsByPtx {
                on.answer = Answer::Unknown;
            }
            on
        })
        .collect();
    Library {
        name,
        package,
        layer: None,
        kernels: kernels.len(),
        cubins,
        ptx,
        toolkits: by_release(toolkits),
        arch_list: arch_list(&general_targets),
        drivers,
        runtimes,
        runs_on: runs.ccs,
        general: General {
            reach: roles.reach.clone(),
            targets: general_targets,
            modules: roles.modules(),
            families: roles.families(),
            strict,
            per_gpu: held == Held::PerGpu,
            aside: runs.aside,
            declared: runs.declared,
        },
        roles,
        corrupt,
        tile_ir,
        wide,
        own: report.all_runtimes().iter().any(|r| r.by_fatkit())
            || kernels
                .iter()
                .any(|k| k.fatbin.is_some_and(|f| declarations.binds(f))),
        machine: machine_of(report),
        ptx_file: report.format == fatkit_fatbin::Format::Ptx,
        torch,
        names: kernels.iter().map(|k| k.name.clone()).collect(),
        on,
    }
}

fn arch_list(set: &TargetSet) -> ArchList {
    let (torch, torch_note) = match notation::render(set, Notation::Torch) {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(e.to_string())),
    };
    ArchList {
        torch,
        torch_note,
        cmake: notation::render(set, Notation::Cmake).unwrap_or_default(),
        nvcc: notation::render(set, Notation::Nvcc).unwrap_or_default(),
    }
}

/// What each image needs of the driver, grouped: cubins by the toolkit that built them (any
/// driver of that CUDA major: minor version compatibility), PTX by ISA.
fn driver_needs(report: &FileReport) -> Vec<DriverNeed> {
    let mut groups: BTreeMap<(CudaVersion, Needs), TargetSet> = BTreeMap::new();
    for (_, _, image) in report.loaded_images() {
        let Some(target) = image.target else { continue };
        let toolkit = image.toolkit.as_deref().and_then(|t| t.parse().ok());
        let needs = match (target.kind, image.ptx_isa, toolkit) {
            (ImageKind::Ptx, Some(isa), _) => Needs::Ptx(isa),
            (ImageKind::Cubin, _, Some(v)) => Needs::Cubins(v),
            _ => continue,
        };
        let Some((cuda, _)) = MinDriver::need(target, image.ptx_isa, toolkit) else {
            continue;
        };
        groups.entry((cuda, needs)).or_default().insert(target);
    }
    // Compressed entries the driver must be able to read, by compression.
    for (_, _, image) in report.loaded_images() {
        let (Some(target), Some(cuda)) = (image.target, image.compression.min_driver_cuda()) else {
            continue;
        };
        groups
            .entry((cuda, Needs::Compressed(image.compression)))
            .or_default()
            .insert(target);
    }
    groups
        .into_iter()
        .map(|((cuda, needs), targets)| DriverNeed::new(targets, needs, cuda))
        .collect()
}

/// Whether `driver` is at least what `need` asks; `None` when the tables cannot say.
pub(crate) fn driver_meets(driver: DriverVersion, need: &DriverNeed) -> Option<bool> {
    match driver {
        DriverVersion::Cuda(v) => Some(v >= need.cuda),
        DriverVersion::Release(r) => need.release.map(|min| r.at_least(&min)),
    }
}

/// CUDA releases in release order (7.5 before 10.1), any that does not parse last.
fn by_release(toolkits: BTreeSet<String>) -> Vec<String> {
    let mut out: Vec<String> = toolkits.into_iter().collect();
    out.sort_by_key(|t| {
        (
            t.parse::<CudaVersion>().ok().is_none(),
            t.parse::<CudaVersion>().ok(),
        )
    });
    out
}

/// One cell of the GPU x library matrix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "by")]
pub enum Cell {
    /// The library has no kernel.
    NoKernels,
    /// Every kernel is built for other GPUs only.
    OtherGpus,
    /// Every kernel runs from a cubin.
    Cubin,
    /// Every kernel runs, some by PTX JIT, which needs this driver: a release number
    /// (`numbered`), else a CUDA level's driver where the tables have no number.
    Ptx {
        driver: Option<String>,
        #[serde(skip)]
        numbered: bool,
    },
    /// `failing` of `kernels` do not run.
    No { failing: usize, kernels: usize },
    /// Part of the library could not be read.
    Corrupt,
    /// Whether the driver loads the images could not be judged.
    Unknown,
}

impl Cell {
    pub fn of(on: &OnGpu) -> Cell {
        match on.answer {
            Answer::NoKernels => Cell::NoKernels,
            Answer::OtherGpus => Cell::OtherGpus,
            Answer::Runs => Cell::Cubin,
            Answer::RunsByPtx => Cell::Ptx {
                driver: on.needs.as_ref().map(|n| n.release_or_cuda()),
                numbered: on.needs.as_ref().is_some_and(|n| n.release.is_some()),
            },
            Answer::Partly | Answer::No => Cell::No {
                failing: on
                    .kernels
                    .saturating_sub(on.run + on.declared.len() + on.elsewhere()),
                kernels: on.kernels,
            },
            Answer::Unknown if on.corrupt => Cell::Corrupt,
            Answer::Unknown => Cell::Unknown,
        }
    }

    pub fn text(&self) -> String {
        match self {
            Cell::NoKernels => "no kernels".to_owned(),
            Cell::OtherGpus => "other GPUs".to_owned(),
            Cell::Cubin => "cubin".to_owned(),
            Cell::Ptx {
                driver: Some(d),
                numbered: true,
            } => format!("PTX JIT (driver >= {d})"),
            // A driver by its CUDA level alone where the tables have no release number.
            Cell::Ptx {
                driver: Some(d),
                numbered: false,
            } => format!("PTX JIT ({d} or newer)"),
            Cell::Ptx { driver: None, .. } => "PTX JIT".to_owned(),
            Cell::No { failing, kernels } if failing == kernels => format!("no ({failing})"),
            Cell::No { failing, kernels } => format!("no ({failing} of {kernels})"),
            Cell::Corrupt => "unknown/corrupt".to_owned(),
            Cell::Unknown => "unknown (driver)".to_owned(),
        }
    }
}

impl DriverNeed {
    /// What `targets` need of a driver of CUDA level `cuda`, with that level's release.
    pub fn new(targets: TargetSet, what: Needs, cuda: CudaVersion) -> DriverNeed {
        DriverNeed {
            targets,
            what,
            cuda,
            release: toolkit::toolkit(cuda).and_then(|t| t.min_driver),
        }
    }

    /// `570.86.10`, else `a CUDA 12.8 driver` (the tables have no release for it).
    pub(crate) fn release_or_cuda(&self) -> String {
        self.release
            .map_or_else(|| format!("a CUDA {} driver", self.cuda), |r| r.to_string())
    }
}

mod built;
mod causes;
mod on_gpu;
mod runs_on;
use built::{links_torch, machine_of, of_torch, unnamed_of, wide, Built};
pub use causes::{DriverProblem, Failing, Needs};
pub use on_gpu::gpu_label;
pub(crate) use on_gpu::gpu_need;
use on_gpu::on_gpu;
use runs_on::runs_on;

#[cfg(test)]
mod tests;

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The Tile IR entries of `report`, each said once: where, for which SM, and the bytecode's
/// version.
fn tile_ir_of(report: &FileReport) -> Vec<String> {
    report
        .all_images()
        .iter()
        .filter(|(_, _, i)| i.kind == fatkit_fatbin::EntryKind::TileIr)
        .map(|(member, _, i)| {
            let version = i.toolkit.as_deref().unwrap_or("unread");
            format!(
                "{member}: Tile IR for sm_{} at {:#x} (bytecode {version}): its kernels are not read, and no rule says which GPUs and drivers run it",
                i.arch, i.offset
            )
        })
        .collect()
}
