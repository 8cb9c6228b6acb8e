//! Will an image run on a device? The rules of docs/ARCH_RULES.md section 2, and the choice the
//! driver makes among the images of a fatbin.

use std::fmt;

use serde::Serialize;

use crate::driver::{DriverVersion, IsaSupport, PtxRequirement};
use crate::toolkit::{self, CudaVersion, PtxIsa};
use crate::{Cc, ImageKind, Suffix, Target};

/// Integrated GPUs (Tegra) whose minor PyTorch does not cover with a dGPU cubin of the same
/// major (docs/ARCH_RULES.md: Medium confidence). Only used under [`Policy::strict_igpu`].
pub(crate) const IGPU_CCS: &[Cc] = &[Cc::new(7, 2), Cc::new(8, 7), Cc::new(11, 0)];

/// Cubin compute capabilities the driver runs on another one: `sm_101` (Thor before CUDA 13
/// renamed it) runs on a device reporting 11.0 (docs/ARCH_RULES.md: Medium confidence).
pub(crate) const CUBIN_ALIASES: &[(Cc, Cc)] = &[(Cc::new(10, 1), Cc::new(11, 0))];

/// Choices where the rules are a matter of policy rather than fact.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Policy {
    /// Treat Tegra/iGPU minors (7.2, 8.7, 11.0) as covered only by their own cubin.
    pub strict_igpu: bool,
}

/// A GPU as the rules see it: compute capability and, when known, the driver; for messages,
/// its name, and for a real device its CUDA ordinal. The one device type of fatkit: the
/// runtime, `audit --gpu` and `profiles show --gpu` all check against it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    pub cc: Cc,
    /// `None` when unknown: PTX is then judged by architecture only.
    pub driver: Option<DriverVersion>,
    /// `NVIDIA H100`, `RTX 5090`; empty when only the compute capability is known.
    pub name: String,
    /// The CUDA ordinal, for a real device.
    pub ordinal: Option<usize>,
}

impl Device {
    pub fn new(cc: Cc, driver: Option<DriverVersion>) -> Device {
        Device {
            cc,
            driver,
            name: String::new(),
            ordinal: None,
        }
    }

    /// The same device, named for messages.
    pub fn named(mut self, name: impl Into<String>) -> Device {
        self.name = name.into();
        self
    }

    /// What the rules depend on: the compute capability and the driver.
    pub fn key(&self) -> (Cc, Option<DriverVersion>) {
        (self.cc, self.driver)
    }

    /// `NVIDIA H100 (compute capability 9.0, driver 580.65.06)`.
    pub fn describe(&self) -> String {
        let driver = self.driver.map_or_else(
            || "driver unknown".to_owned(),
            |d| format!("driver {}", d.describe()),
        );
        let name = if self.name.is_empty() {
            "a GPU"
        } else {
            &self.name
        };
        format!("{name} (compute capability {}, {driver})", self.cc)
    }
}

/// One image of a fatbin: its target and, for PTX, the ISA it was written in.
///
/// `target` is what the image itself says where it was read (a cubin's ELF header, the PTX
/// `.target`), else what its entry header says; docs/ARCH_RULES.md section 2, "Trust the image".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Image {
    pub target: Target,
    pub ptx_isa: Option<PtxIsa>,
    /// For a cubin: the CUDA release that built it (its note), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub toolkit: Option<CudaVersion>,
    /// The target the fatbin's entry header gives, when it disagrees with the image's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header: Option<Target>,
}

impl Image {
    pub fn cubin(target: Target) -> Image {
        Image {
            target: target.with_kind(ImageKind::Cubin),
            ptx_isa: None,
            toolkit: None,
            header: None,
        }
    }

    pub fn ptx(target: Target, isa: Option<PtxIsa>) -> Image {
        Image {
            target: target.with_kind(ImageKind::Ptx),
            ptx_isa: isa,
            toolkit: None,
            header: None,
        }
    }

    /// `target` as the image it names: a cubin, or PTX of `isa` (which a cubin ignores).
    pub fn of(target: Target, isa: Option<PtxIsa>) -> Image {
        match target.kind {
            ImageKind::Cubin => Image::cubin(target),
            ImageKind::Ptx => Image::ptx(target, isa),
        }
    }

    /// The same image, built by `toolkit` (a cubin's note).
    pub fn built_by(mut self, toolkit: Option<CudaVersion>) -> Image {
        self.toolkit = toolkit;
        self
    }

    /// The same image, whose entry header says `header`: kept only when it disagrees with the
    /// image's own target (a cubin's `f` suffix is not in its ELF header, so a family header
    /// around a plain cubin of the same compute capability agrees).
    pub fn headed(mut self, header: Option<Target>) -> Image {
        self.header = header.filter(|h| !header_agrees(*h, self.target));
        self
    }
}

/// Whether an entry header's target and an image's own agree.
pub fn header_agrees(header: Target, own: Target) -> bool {
    if header.kind != own.kind || header.cc != own.cc {
        return false;
    }
    match own.kind {
        // A cubin's ELF header has the `a` bit, not the `f` one.
        ImageKind::Cubin => (header.suffix == Suffix::Arch) == (own.suffix == Suffix::Arch),
        ImageKind::Ptx => header.suffix == own.suffix,
    }
}

/// Why an image's architecture does not fit a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Mismatch {
    /// A cubin (plain or `f`) for another major.
    OtherMajor,
    /// A cubin (plain or `f`) for a higher minor of the same major.
    NewerMinor,
    /// An `a` image for another compute capability.
    ArchSpecific,
    /// Strict iGPU policy: this Tegra minor needs its own cubin.
    StrictIgpu,
    /// Plain PTX for a newer compute capability than the device.
    PtxNewer,
    /// `f` PTX for another major or a higher minor.
    PtxFamily,
}

/// Whether a cubin of `target` runs on a device of compute capability `cc`.
pub(crate) fn cubin_fit(target: Target, cc: Cc, policy: Policy) -> Result<(), Mismatch> {
    let built = CUBIN_ALIASES
        .iter()
        .find(|(from, to)| *from == target.cc && *to == cc)
        .map_or(target.cc, |&(_, to)| to);
    if target.suffix == Suffix::Arch {
        return if built == cc {
            Ok(())
        } else {
            Err(Mismatch::ArchSpecific)
        };
    }
    if built.major != cc.major {
        return Err(Mismatch::OtherMajor);
    }
    if built.minor > cc.minor {
        return Err(Mismatch::NewerMinor);
    }
    if policy.strict_igpu && built != cc && IGPU_CCS.contains(&cc) {
        return Err(Mismatch::StrictIgpu);
    }
    Ok(())
}

/// Whether PTX of `target` JIT-compiles for a device of compute capability `cc`
/// (architecture only; [`select`] adds the driver).
pub fn ptx_arch_fit(target: Target, cc: Cc) -> Result<(), Mismatch> {
    match target.suffix {
        Suffix::Arch if target.cc != cc => Err(Mismatch::ArchSpecific),
        Suffix::Family if target.cc.major != cc.major || target.cc.minor > cc.minor => {
            Err(Mismatch::PtxFamily)
        }
        Suffix::None if target.cc > cc => Err(Mismatch::PtxNewer),
        _ => Ok(()),
    }
}

/// How the driver was judged for a PTX image that fits the architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverCheck {
    /// The driver loads this PTX ISA.
    Supported,
    /// No driver given: judged by architecture only.
    NotGiven,
    /// The image's ISA is not known (no PTX read yet), so the driver could not be judged.
    IsaUnknown,
    /// The tables have no minimum driver for this ISA.
    Unknown(PtxRequirement),
}

/// The outcome for one image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    Runs(Option<DriverCheck>),
    Arch(Mismatch),
    /// The PTX fits the architecture but the driver refuses its ISA (error 222).
    DriverTooOld(PtxRequirement),
}

/// Whether one image runs on a device.
pub fn image_fit(image: &Image, device: &Device, policy: Policy) -> Fit {
    match image.target.kind {
        ImageKind::Cubin => match cubin_fit(image.target, device.cc, policy) {
            Ok(()) => Fit::Runs(None),
            Err(m) => Fit::Arch(m),
        },
        ImageKind::Ptx => {
            if let Err(m) = ptx_arch_fit(image.target, device.cc) {
                return Fit::Arch(m);
            }
            let check = match (device.driver, image.ptx_isa) {
                // An ISA newer than every toolkit in the tables: no driver is known to load it.
                (None, Some(isa)) if toolkit::toolkit_for_isa(isa).is_none() => {
                    DriverCheck::Unknown(PtxRequirement::of(isa))
                }
                (None, _) => DriverCheck::NotGiven,
                (Some(_), None) => DriverCheck::IsaUnknown,
                (Some(driver), Some(isa)) => match driver.loads_ptx(isa) {
                    IsaSupport::Supported => DriverCheck::Supported,
                    IsaSupport::Unknown(need) => DriverCheck::Unknown(need),
                    IsaSupport::TooOld(need) => return Fit::DriverTooOld(need),
                },
            };
            Fit::Runs(Some(check))
        }
    }
}

/// The CUDA error a load fails with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum LoadError {
    /// 100: the driver predates the GPU (its CUDA level is below the first release that knows
    /// the compute capability), so it does not see the device at all.
    NoDevice,
    /// 209: no image fits the architecture.
    NoBinaryForGpu,
    /// 222: only PTX fits, and the driver is too old for its ISA.
    UnsupportedPtxVersion,
}

impl LoadError {
    pub fn code(self) -> u32 {
        match self {
            LoadError::NoDevice => 100,
            LoadError::NoBinaryForGpu => 209,
            LoadError::UnsupportedPtxVersion => 222,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            LoadError::NoDevice => "CUDA_ERROR_NO_DEVICE",
            LoadError::NoBinaryForGpu => "CUDA_ERROR_NO_BINARY_FOR_GPU",
            LoadError::UnsupportedPtxVersion => "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
        }
    }

    /// What `cudaGetErrorString` says.
    pub fn message(self) -> &'static str {
        match self {
            LoadError::NoDevice => "no CUDA-capable device is detected",
            LoadError::NoBinaryForGpu => "no kernel image is available for execution on the device",
            LoadError::UnsupportedPtxVersion => {
                "the provided PTX was compiled with an unsupported toolchain"
            }
        }
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.name(), self.code(), self.message())
    }
}

/// The image the driver picks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selection {
    /// A cubin; `exact` when it was built for exactly the device's compute capability.
    Cubin { image: usize, exact: bool },
    /// PTX, JIT-compiled by the driver.
    Ptx { image: usize, driver: DriverCheck },
}

impl Selection {
    pub fn image(&self) -> usize {
        match *self {
            Selection::Cubin { image, .. } | Selection::Ptx { image, .. } => image,
        }
    }
}

/// An image that does not run, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub image: usize,
    pub reason: Reason,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    Arch(Mismatch),
    DriverTooOld(PtxRequirement),
}

/// Whether a set of images loads on a device, all told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Runs,
    /// An image fits the architecture, but whether the driver accepts its PTX is unknown.
    Unknown,
    Fails,
}

/// Why a verdict cannot be trusted to be the driver's: the rules do not say what it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Doubt {
    /// A PTX entry header names `header`, the text itself another target, and the two
    /// readings give different answers: which the driver goes by is not established.
    HeaderDisagrees { image: usize, header: Target },
    /// The driver chooses this cubin by its entry header, `header`, and the cubin's own ELF
    /// says another target that does not fit the device: what its load does is not
    /// established.
    CubinHeaderDisagrees { image: usize, header: Target },
    /// The cubin the driver loads was built by a CUDA release newer than the tables know, and
    /// no driver was given.
    CubinToolkitUnknown { image: usize, toolkit: CudaVersion },
    /// The cubin the driver loads was built by a CUDA major newer than the driver's level
    /// (`None`: the driver is newer than the tables, which cannot place it).
    CubinNewerThanDriver {
        image: usize,
        toolkit: CudaVersion,
        level: Option<CudaVersion>,
    },
}

/// The driver's choice among `images` for `device`, with every image it passed over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub selection: Result<Selection, LoadError>,
    pub rejected: Vec<Rejection>,
    /// What makes the choice uncertain; any doubt makes the status [`Status::Unknown`].
    pub doubts: Vec<Doubt>,
}

impl Verdict {
    pub fn status(&self) -> Status {
        if !self.doubts.is_empty() {
            return Status::Unknown;
        }
        match self.selection {
            Err(_) => Status::Fails,
            Ok(Selection::Ptx {
                driver: DriverCheck::Unknown(_) | DriverCheck::IsaUnknown,
                ..
            }) => Status::Unknown,
            Ok(_) => Status::Runs,
        }
    }
}

fn suffix_rank(s: Suffix) -> u8 {
    match s {
        Suffix::None => 0,
        Suffix::Family => 1,
        Suffix::Arch => 2,
    }
}

/// What the driver does with `images` on `device` (docs/ARCH_RULES.md section 2, `select`):
/// a cubin that runs (exact match first, else the highest), else the highest PTX that runs,
/// else error 222 if some PTX was refused for its ISA, else error 209.
///
/// Where an entry header disagrees with its image: a cubin is chosen by its entry header (as
/// the driver does: an H100 returned 209 for an sm_80 header around an sm_90 cubin), and
/// where the cubin so chosen does not itself fit the device, what its load does is unknown.
/// PTX is judged both ways, header and image; where the two readings agree (the driver refuses
/// its ISA either way, say) that is the answer, else it is unknown.
pub fn select(images: &[Image], device: &Device, policy: Policy) -> Verdict {
    if driver_predates(device).is_some() {
        return Verdict {
            selection: Err(LoadError::NoDevice),
            rejected: Vec::new(),
            doubts: Vec::new(),
        };
    }
    let by_image = reading(images, false);
    let (selection, rejected) = choose(&by_image, device, policy);
    let mut doubts = Vec::new();
    if images
        .iter()
        .any(|i| i.header.is_some() && i.target.is_ptx())
    {
        let (by_header, _) = choose(&reading(images, true), device, policy);
        if by_header != selection {
            doubts.extend(images.iter().enumerate().filter_map(|(idx, i)| {
                let header = i.header.filter(|_| i.target.is_ptx())?;
                Some(Doubt::HeaderDisagrees { image: idx, header })
            }));
        }
    }
    if let Ok(Selection::Cubin { image, .. }) = selection {
        if let Some(chosen) = images.get(image) {
            // Chosen by a header its own ELF disagrees with: the load itself is not known.
            if let (Some(header), Err(_)) =
                (chosen.header, cubin_fit(chosen.target, device.cc, policy))
            {
                doubts.push(Doubt::CubinHeaderDisagrees { image, header });
            }
            if let Some(toolkit) = chosen.toolkit {
                doubts.extend(cubin_driver_doubt(image, toolkit, device.driver));
            }
        }
    }
    Verdict {
        selection,
        rejected,
        doubts,
    }
}

/// The images as the driver reads their targets: a cubin by its entry header (established);
/// PTX by its entry header with `ptx_by_header`, else by its own `.target`.
fn reading(images: &[Image], ptx_by_header: bool) -> Vec<Image> {
    images
        .iter()
        .map(|i| {
            let by_header = i.target.is_cubin() || ptx_by_header;
            match i.header {
                Some(header) if by_header => Image {
                    target: header,
                    ..*i
                },
                _ => *i,
            }
        })
        .collect()
}

/// The choice among `images` (each read as its target says) and every image passed over.
fn choose(
    images: &[Image],
    device: &Device,
    policy: Policy,
) -> (Result<Selection, LoadError>, Vec<Rejection>) {
    let mut rejected = Vec::new();
    let mut best_cubin: Option<(usize, (bool, Cc, u8))> = None;
    let mut best_ptx: Option<(usize, (Cc, u8), DriverCheck)> = None;
    let mut refused_for_isa = false;
    for (idx, image) in images.iter().enumerate() {
        let t = image.target;
        match image_fit(image, device, policy) {
            Fit::Runs(None) => {
                let key = (t.cc == device.cc, t.cc, suffix_rank(t.suffix));
                if best_cubin.is_none_or(|(_, best)| key > best) {
                    best_cubin = Some((idx, key));
                }
            }
            Fit::Runs(Some(check)) => {
                let key = (t.cc, suffix_rank(t.suffix));
                if best_ptx.is_none_or(|(_, best, _)| key > best) {
                    best_ptx = Some((idx, key, check));
                }
            }
            Fit::Arch(m) => rejected.push(Rejection {
                image: idx,
                reason: Reason::Arch(m),
            }),
            Fit::DriverTooOld(need) => {
                refused_for_isa = true;
                rejected.push(Rejection {
                    image: idx,
                    reason: Reason::DriverTooOld(need),
                });
            }
        }
    }
    let selection = match (best_cubin, best_ptx) {
        (Some((image, (exact, ..))), _) => Ok(Selection::Cubin { image, exact }),
        (None, Some((image, _, driver))) => Ok(Selection::Ptx { image, driver }),
        (None, None) if refused_for_isa => Err(LoadError::UnsupportedPtxVersion),
        (None, None) => Err(LoadError::NoBinaryForGpu),
    };
    (selection, rejected)
}

/// The first CUDA release that knows `device`'s compute capability, when the device's driver
/// is known to be older (its CUDA level below that release): such a driver does not see the
/// GPU (docs/ARCH_RULES.md section 3, Medium). `None` when the driver is new enough, unknown,
/// or the tables do not place it.
pub fn driver_predates(device: &Device) -> Option<CudaVersion> {
    let driver = device.driver?;
    let first = toolkit::first_cuda(device.cc)?;
    let level = driver.cuda_level()?;
    (level < first).then_some(first)
}

/// Whether the driver is known to load a cubin `toolkit` built: a driver of the same CUDA
/// major or later (minor-version compatibility, docs/ARCH_RULES.md section 3).
fn cubin_driver_doubt(
    image: usize,
    toolkit: CudaVersion,
    driver: Option<DriverVersion>,
) -> Option<Doubt> {
    let Some(driver) = driver else {
        let newest = toolkit::TOOLKITS.last().map(|t| t.version);
        return newest
            .is_some_and(|n| toolkit > n)
            .then_some(Doubt::CubinToolkitUnknown { image, toolkit });
    };
    let level = driver.cuda_level();
    // A release at or past the newest minimum in the tables may support more than they know.
    let newest_placed = toolkit::TOOLKITS
        .iter()
        .rev()
        .find(|t| t.min_driver.is_some())
        .map(|t| t.version);
    let beyond_tables = matches!(driver, DriverVersion::Release(_)) && level == newest_placed;
    match level {
        Some(l) if l.major >= toolkit.major => None,
        Some(_) if beyond_tables => Some(Doubt::CubinNewerThanDriver {
            image,
            toolkit,
            level: None,
        }),
        level => Some(Doubt::CubinNewerThanDriver {
            image,
            toolkit,
            level,
        }),
    }
}

#[cfg(test)]
mod tests;
