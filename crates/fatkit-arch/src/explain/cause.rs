//! Why a kernel does not (certainly) run on a device, as data ([`Cause`]): exactly what its
//! words say, images named by their targets rather than their places in a module, so that two
//! causes are equal when their words are and grouping by cause needs no text. The words are
//! its `Display`, made here once (docs/ARCH_RULES.md gives the rule behind each sentence).

use std::fmt;

use crate::driver::{DriverVersion, PtxRequirement};
use crate::load::{Fate, Stub};
use crate::rules::{
    Device, Doubt, DriverCheck, Image, LoadError, Mismatch, Reason, Selection, Verdict,
};
use crate::toolkit::CudaVersion;
use crate::{Cc, Target};

/// Why a kernel does not run, or may not, on one device.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    /// The module loads, but the image the driver loads (`loaded`) does not hold the kernel:
    /// `cuModuleGetFunction` returns `CUDA_ERROR_NOT_FOUND` (500). `elsewhere`: the images of
    /// the module that do.
    NotInLoadedImage {
        loaded: Option<Target>,
        elsewhere: Vec<Option<Target>>,
        cc: Cc,
    },
    /// The image the driver loads holds the kernel only as a stub.
    CompiledOut {
        image: Option<Target>,
        stub: Stub,
        cc: Cc,
    },
    /// The rules cannot say: each doubt, in order.
    Doubted(Vec<Doubted>),
    /// Only PTX runs, and the tables do not say which driver loads its ISA.
    PtxUnverified {
        target: Target,
        need: PtxRequirement,
    },
    /// Only PTX runs, and its ISA is not known.
    PtxIsaUnknown,
    /// The module does not load: `error`, the module's targets (none: no readable image), and
    /// the images passed over whose reason the targets do not already say.
    NoneRuns {
        error: LoadError,
        targets: Vec<Target>,
        cc: Cc,
        driver: Option<DriverVersion>,
        notes: Vec<(Target, Reason)>,
    },
}

/// One reason a verdict is in doubt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Doubted {
    /// The PTX the driver would JIT needs this, and the tables do not say which driver has it.
    PtxNeed(PtxRequirement),
    /// A driver is given, but the PTX's ISA is not known.
    PtxIsaUnknown,
    /// [`Doubt::HeaderDisagrees`], with the image's target.
    HeaderDisagrees {
        image: Option<Target>,
        header: Target,
    },
    /// [`Doubt::CubinHeaderDisagrees`], with the image's target.
    CubinHeaderDisagrees {
        image: Option<Target>,
        header: Target,
    },
    /// [`Doubt::CubinToolkitUnknown`], with the image's target.
    CubinToolkitUnknown {
        image: Option<Target>,
        toolkit: CudaVersion,
    },
    /// [`Doubt::CubinNewerThanDriver`], with the image's target and the device's driver.
    CubinNewerThanDriver {
        image: Option<Target>,
        toolkit: CudaVersion,
        level: Option<CudaVersion>,
        driver: Option<DriverVersion>,
    },
}

impl Doubted {
    /// `d`, its image named by its target among `images`, on `device`.
    pub fn of(images: &[Image], d: Doubt, device: &Device) -> Doubted {
        let target = |i: usize| images.get(i).map(|i| i.target);
        match d {
            Doubt::HeaderDisagrees { image, header } => Doubted::HeaderDisagrees {
                image: target(image),
                header,
            },
            Doubt::CubinHeaderDisagrees { image, header } => Doubted::CubinHeaderDisagrees {
                image: target(image),
                header,
            },
            Doubt::CubinToolkitUnknown { image, toolkit } => Doubted::CubinToolkitUnknown {
                image: target(image),
                toolkit,
            },
            Doubt::CubinNewerThanDriver {
                image,
                toolkit,
                level,
            } => Doubted::CubinNewerThanDriver {
                image: target(image),
                toolkit,
                level,
                driver: device.driver,
            },
        }
    }
}

impl Cause {
    /// A kernel's `fate` among `images` on a GPU of `cc`, when it is absent from the loaded
    /// image or only a stub there.
    pub fn of_fate(images: &[Image], fate: &Fate, cc: Cc) -> Option<Cause> {
        let target = |i: &usize| images.get(*i).map(|i| i.target);
        match fate {
            Fate::Stub { image, kind } => Some(Cause::CompiledOut {
                image: target(image),
                stub: *kind,
                cc,
            }),
            Fate::Absent { loaded, elsewhere } => Some(Cause::NotInLoadedImage {
                loaded: target(loaded),
                elsewhere: elsewhere.iter().map(target).collect(),
                cc,
            }),
            Fate::Loaded { .. } | Fate::NoLoad(_) => None,
        }
    }

    /// What makes `verdict` on `images` uncertain on `device`: the driver of the PTX it would
    /// JIT, and each [`Doubt`]; `None` when nothing does.
    pub fn doubted(images: &[Image], verdict: &Verdict, device: &Device) -> Option<Cause> {
        let ptx = match verdict.selection {
            Ok(Selection::Ptx {
                driver: DriverCheck::Unknown(need),
                ..
            }) => Some(Doubted::PtxNeed(need)),
            Ok(Selection::Ptx {
                driver: DriverCheck::IsaUnknown,
                ..
            }) => Some(Doubted::PtxIsaUnknown),
            _ => None,
        };
        let all: Vec<Doubted> = ptx
            .into_iter()
            .chain(
                verdict
                    .doubts
                    .iter()
                    .map(|d| Doubted::of(images, *d, device)),
            )
            .collect();
        (!all.is_empty()).then_some(Cause::Doubted(all))
    }

    /// Why no image of `images` loads on `device`, when none does: the error, the module's
    /// targets and the images passed over for a reason their targets do not say.
    pub fn none_runs(images: &[Image], verdict: &Verdict, device: &Device) -> Option<Cause> {
        let error = verdict.selection.err()?;
        let mut targets: Vec<Target> = images.iter().map(|i| i.target).collect();
        targets.sort();
        targets.dedup();
        let notes = verdict
            .rejected
            .iter()
            .filter(|r| notable(r.reason))
            .filter_map(|r| Some((images.get(r.image)?.target, r.reason)))
            .collect();
        Some(Cause::NoneRuns {
            error,
            targets,
            cc: device.cc,
            driver: device.driver,
            notes,
        })
    }
}

/// Whether a reason an image is passed over is worth saying where the list of images already
/// implies it: not for a cubin of another major or a newer minor, which the list says itself.
pub(crate) fn notable(reason: Reason) -> bool {
    !matches!(
        reason,
        Reason::Arch(Mismatch::OtherMajor | Mismatch::NewerMinor)
    )
}

impl fmt::Display for Doubted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |t: &Option<Target>| t.map_or_else(|| "?".to_owned(), |t| t.to_string());
        let driver = |d: &Option<DriverVersion>| d.map_or_else(|| "?".to_owned(), |d| d.describe());
        match self {
            Doubted::PtxNeed(need) => write!(f, "{need}"),
            Doubted::PtxIsaUnknown => {
                f.write_str("the PTX ISA is not known for the assumed toolkit; pass --cuda")
            }
            Doubted::HeaderDisagrees { image, header } => write!(
                f,
                "the fatbin entry says {header} but holds {} PTX: which one the driver goes by is not established, and the two give different answers here",
                name(image),
            ),
            Doubted::CubinHeaderDisagrees { image, header } => write!(
                f,
                "the driver chooses the cubin by its entry, which says {header}, but the cubin itself is {}, which does not run here: one driver refused its load (300, CUDA_ERROR_INVALID_SOURCE), what others do is not established",
                name(image),
            ),
            Doubted::CubinToolkitUnknown { image, toolkit } => write!(
                f,
                "the {} cubin is from CUDA {toolkit}, newer than the tables: which driver loads it is unknown; pass --driver",
                name(image)
            ),
            Doubted::CubinNewerThanDriver {
                image,
                toolkit,
                level: Some(level),
                driver: d,
            } => write!(
                f,
                "the {} cubin is from CUDA {toolkit}, which needs a CUDA {}.x driver; driver {} is at the CUDA {level} level",
                name(image),
                toolkit.major,
                driver(d)
            ),
            Doubted::CubinNewerThanDriver {
                image,
                toolkit,
                level: None,
                driver: d,
            } => write!(
                f,
                "the {} cubin is from CUDA {toolkit}, which needs a CUDA {}.x driver; the tables cannot place driver {}",
                name(image),
                toolkit.major,
                driver(d)
            ),
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |t: &Option<Target>| t.map_or_else(|| "?".to_owned(), |t| t.to_string());
        match self {
            Cause::CompiledOut { image, stub, cc } => {
                let traps = *stub == Stub::Traps;
                let (what, code) = match image.is_some_and(|t| t.is_ptx()) {
                    true => (
                        "PTX",
                        if traps {
                            "a trap (trap;, brkpt; or a call of __assertfail)"
                        } else {
                            "ret;"
                        },
                    ),
                    false => (
                        "cubin",
                        if traps {
                            "a trap (BPT.TRAP or a call of __assertfail)"
                        } else {
                            "EXIT"
                        },
                    ),
                };
                write!(
                    f,
                    "compiled out for {}: {} (the driver loads the {} {what} on CC {cc}, whose code of it does no work before {code}; another image holds its body)",
                    name(image),
                    stub.words(),
                    name(image),
                )
            }
            Cause::NotInLoadedImage {
                loaded,
                elsewhere,
                cc,
            } => {
                let what = loaded.map_or("image", |t| if t.is_ptx() { "PTX" } else { "cubin" });
                let others = match elsewhere.len() {
                    0 => "no image of the module holds it".to_owned(),
                    1 => format!("{} does", elsewhere.iter().map(name).collect::<String>()),
                    _ => format!(
                        "{} do",
                        elsewhere.iter().map(name).collect::<Vec<_>>().join(" ")
                    ),
                };
                let (code, error, _) = crate::load::NOT_FOUND;
                write!(
                    f,
                    "the driver loads the {} {what} of the module on CC {cc}, which does not hold it ({others}): cuModuleGetFunction returns {error} ({code})",
                    name(loaded)
                )
            }
            Cause::Doubted(doubts) => {
                let words: Vec<String> = doubts.iter().map(Doubted::to_string).collect();
                f.write_str(&words.join("; "))
            }
            Cause::PtxUnverified { target, need } => {
                write!(f, "only PTX runs ({target}), and {need}")
            }
            Cause::PtxIsaUnknown => f.write_str("only PTX runs, and its ISA is unknown"),
            Cause::NoneRuns { error, targets, .. } if targets.is_empty() => write!(
                f,
                "{} ({}): the kernel has no readable image",
                error.name(),
                error.code()
            ),
            Cause::NoneRuns {
                error,
                targets,
                cc,
                driver,
                notes,
            } => {
                let device = Device::new(*cc, *driver);
                let targets: Vec<String> = targets.iter().map(Target::to_string).collect();
                let notes: Vec<String> = notes
                    .iter()
                    .map(|(t, r)| super::rejection(*t, &device, *r))
                    .collect();
                let notes = if notes.is_empty() {
                    String::new()
                } else {
                    format!("; {}", notes.join("; "))
                };
                write!(
                    f,
                    "{} ({}): has {}, none runs on CC {cc}{notes}",
                    error.name(),
                    error.code(),
                    targets.join(" ")
                )
            }
        }
    }
}
