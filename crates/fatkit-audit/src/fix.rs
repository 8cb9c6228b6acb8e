//! What to do, as data: each fix names who can act on it ([`Who`]) and is worded for them by
//! its `Display`, once. A third-party package gets what to install; a library built with fatkit
//! gets how to build it; a file of no known distribution gets both. No fix names a build that
//! cannot exist (docs/ARCH_RULES.md section 11).

use fatkit_arch::driver::DriverRelease;
use fatkit_arch::toolkit::{self, CudaVersion};
use fatkit_arch::{Cc, ImageKind, Target, TargetSet};
use fatkit_fatbin::host::Machine;
use serde::Serialize;

/// Who can act on a fix: what the library is to the person asking.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "name")]
pub enum Who {
    /// A distribution someone else built (a wheel, an installed package), by its name
    /// (`torch`): what to install.
    Package(String),
    /// A library built with fatkit (its runtime record or declarations are in it): how to
    /// build it.
    Own,
    /// A file of no known distribution: what to install, and how to build it if you do.
    File,
}

impl Who {
    /// Of a distribution shown as `torch 2.7.0` (its name and version), else `own` or a file.
    pub fn of(package: Option<&str>, own: bool) -> Who {
        match (package, own) {
            (_, true) => Who::Own,
            (Some(p), false) => Who::Package(crate::record::name_and_version(p).0.to_owned()),
            (None, false) => Who::File,
        }
    }

    /// ` of torch`, or nothing.
    fn of_words(&self) -> String {
        match self {
            Who::Package(p) => format!(" of {p}"),
            _ => String::new(),
        }
    }
}

/// What to do about a package, library or file that does not run on a GPU and driver.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case", tag = "fix")]
pub enum Fix {
    /// The driver is older than the package needs (`need`, at CUDA level `cuda`); the driver
    /// given is at CUDA level `level`; `predates_gpu`: it does not know the GPU at all, so no
    /// build of any CUDA runs there and updating it is the one fix.
    Driver {
        who: Who,
        need: Option<DriverRelease>,
        cuda: CudaVersion,
        level: Option<CudaVersion>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        predates_gpu: bool,
    },
    /// A wheel built for `machine` on a GPU that lives only in `gpu_machine` machines.
    Platform {
        who: Who,
        machine: Machine,
        gpu: String,
    },
    /// The general build has no image for CC `cc`: a build made for it (a newer GPU than the
    /// build's, or one its list leaves out).
    Build { who: Who, cc: Cc },
    /// The package's build starts at CC `floor`, above this GPU's `cc`: an earlier release may
    /// have one (`last`, where the tables know it).
    Older {
        who: Who,
        cc: Cc,
        floor: Cc,
        last: Option<String>,
    },
    /// Kernels that are empty in the image a fallback reaches here (`loaded`): a build with an
    /// image for this GPU, or not calling them.
    Bodies { who: Who, loaded: TargetSet, cc: Cc },
    /// Kernels compiled out of the image built for this GPU by the library's own build (what
    /// `--strict` counts): their bodies are in images for other GPUs.
    CompiledOut { who: Who, loaded: TargetSet, cc: Cc },
    /// The library holds images built for CC `cc`, but `modules` of its modules have no image
    /// that loads there: a gap of its build.
    Incomplete { who: Who, cc: Cc, modules: usize },
    /// The image the driver loads lacks kernels other images hold.
    Complete { who: Who, images: TargetSet, cc: Cc },
    /// Its run-time compiler (`kind`, Triton's `ptxas`) cannot make `target`, or makes cubins
    /// the driver refuses (`driver`: the CUDA level and release they need): the oldest CUDA
    /// whose `ptxas` compiles the target, and the first Triton release that runs one.
    Compiler {
        who: Who,
        kind: fatkit_fatbin::compiler::Kind,
        target: Target,
        driver: Option<(CudaVersion, Option<DriverRelease>)>,
        cuda: Option<CudaVersion>,
        triton: Option<String>,
    },
}

impl Fix {
    /// Who can act on it.
    pub fn who(&self) -> &Who {
        match self {
            Fix::Driver { who, .. }
            | Fix::Platform { who, .. }
            | Fix::Build { who, .. }
            | Fix::Older { who, .. }
            | Fix::Bodies { who, .. }
            | Fix::CompiledOut { who, .. }
            | Fix::Incomplete { who, .. }
            | Fix::Complete { who, .. }
            | Fix::Compiler { who, .. } => who,
        }
    }
}

/// The index PyTorch publishes its builds for CUDA `cuda` at, for the distributions it
/// publishes (torch, torchvision, torchaudio): `cu128`.
fn pytorch_index(who: &Who, cuda: CudaVersion) -> Option<String> {
    let Who::Package(p) = who else { return None };
    matches!(p.as_str(), "torch" | "torchvision" | "torchaudio").then(|| {
        format!(
            "pip install {p} --index-url https://download.pytorch.org/whl/cu{}{}",
            cuda.major, cuda.minor
        )
    })
}

/// `nvidia-cudnn-cu13` -> `nvidia-cudnn-cu12` for a driver of CUDA 12: NVIDIA publishes each
/// library once per CUDA major, named for it. `None` where the package is already the one for
/// that major (a driver of CUDA 13.0 and a cu13 build of CUDA 13.4: no other package helps,
/// only an earlier release).
fn for_major(who: &Who, major: u8) -> Option<String> {
    let Who::Package(p) = who else { return None };
    let (stem, digits) = p.rsplit_once("cu")?;
    let separated = stem.ends_with('-') || stem.ends_with('_');
    let a_major = digits.len() == 2 && digits.chars().all(|c| c.is_ascii_digit());
    let own = digits.parse::<u8>().ok() == Some(major);
    (separated && a_major && !own).then(|| format!("{stem}cu{major}"))
}

/// `CUDA 12.8 or later builds it`, or `CUDA 11.0 to 12.9 build it`.
fn builders(cubin: Target) -> Option<String> {
    let builders = toolkit::toolkits_for(cubin);
    let newest = toolkit::TOOLKITS.last().map(|t| t.version);
    match (builders.first(), builders.last()) {
        (Some(first), Some(last)) if Some(*last) != newest => {
            Some(format!("CUDA {first} to {last} build it"))
        }
        (Some(first), _) => Some(format!("CUDA {first} or later builds it")),
        _ => None,
    }
}

impl std::fmt::Display for Fix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fix::Driver {
                need,
                cuda,
                predates_gpu: true,
                ..
            } => {
                let need = need.map_or_else(
                    || format!("a CUDA {cuda} driver or newer"),
                    |r| format!(">= {r}"),
                );
                write!(
                    f,
                    "update the NVIDIA driver to {need}: older ones do not know this GPU, and no build runs where the driver sees no device"
                )
            }
            Fix::Driver {
                who,
                need,
                cuda,
                level,
                ..
            } => driver_words(f, who, (*need, *cuda), *level),
            Fix::Platform { who, machine, gpu } => write!(
                f,
                "install the aarch64 build{}: this one is for {} machines, and {gpu} lives in aarch64 ones",
                who.of_words(),
                machine.name()
            ),
            Fix::Build { who, cc } => build_words(f, who, *cc),
            Fix::Older {
                who,
                cc,
                floor,
                last,
            } => {
                let name = match who {
                    Who::Package(p) => p.clone(),
                    _ => "it".to_owned(),
                };
                match last {
                    Some(spec) => write!(
                        f,
                        "this release of {name} is built for CC {floor} and later: install the last one built for CC {cc} ({spec})"
                    ),
                    None => write!(
                        f,
                        "this release of {name} is built for CC {floor} and later, not for CC {cc}: use a GPU of CC {floor} or later, or an earlier release of {name} built for CC {cc}, if one was"
                    ),
                }
            }
            Fix::Bodies { who, loaded, cc } => write!(
                f,
                "their bodies are compiled out of the {loaded} image, the only one that reaches CC {cc}: launched here they do nothing; install a build{} with an image for CC {cc}, or do not call them on this GPU",
                who.of_words()
            ),
            Fix::CompiledOut { who, loaded, cc } => {
                write!(
                    f,
                    "their bodies were compiled out of the {loaded} image by the build itself (launched on CC {cc} they do nothing or trap): the build means them for other GPUs; use one of those, or a build{} that compiles them for {loaded}",
                    who.of_words()
                )?;
                match who {
                    Who::Package(_) => Ok(()),
                    _ => f.write_str(" (to build it: build the bodies for it, or guard the whole kernel and declare it for the targets it supports)"),
                }
            }
            Fix::Incomplete { who, cc, modules } => {
                let cubin = Target::cubin(cc.major, cc.minor);
                write!(
                    f,
                    "its build has {cubin} images, but {} of its modules have none that loads on CC {cc}: a gap of the build; install a build{} whose every module has one",
                    modules,
                    who.of_words()
                )?;
                match who {
                    Who::Package(p) => write!(f, " (report it to {p})"),
                    _ => f.write_str(" (to build it: add the target to every module's build)"),
                }
            }
            Fix::Compiler { .. } => compiler_words(f, self),
            Fix::Complete { who, images, cc } => {
                write!(
                    f,
                    "install a build{} whose {images} image holds every kernel: the driver loads that one image of each module on CC {cc} and finds no kernel elsewhere",
                    who.of_words()
                )?;
                match who {
                    Who::Package(_) => Ok(()),
                    _ => f.write_str(
                        " (to build it: build every kernel for it too, or declare the missing ones for fewer targets)",
                    ),
                }
            }
        }
    }
}

/// The words of [`Fix::Compiler`].
fn compiler_words(f: &mut std::fmt::Formatter<'_>, fix: &Fix) -> std::fmt::Result {
    let Fix::Compiler {
        kind,
        target,
        driver,
        cuda,
        triton,
        ..
    } = fix
    else {
        return Ok(());
    };
    let (kind, target, cuda) = (*kind, *target, *cuda);
    let variable = match kind {
        fatkit_fatbin::compiler::Kind::TritonPtxasBlackwell => "TRITON_PTXAS_BLACKWELL_PATH",
        _ => "TRITON_PTXAS_PATH",
    };
    if let Some((need, release)) = *driver {
        let release = release.map_or_else(String::new, |r| format!(" (>= {r})"));
        return write!(
            f,
            "update the NVIDIA driver to one of CUDA {need} or newer{release}: the cubins its {} makes for {target} need it; or point {variable} at a ptxas of the driver's CUDA release",
            kind.words()
        );
    }
    let Some(cuda) = cuda else {
        return write!(f, "no CUDA release the tables know compiles {target}");
    };
    // Where each wheel puts its ptxas in site-packages (nvidia-cuda-nvcc-cu12 12.9.86,
    // nvidia-cuda-nvcc 13.2.86).
    let (wheel, path) = match cuda.major {
        12 => ("nvidia-cuda-nvcc-cu12", "nvidia/cuda_nvcc/bin/ptxas"),
        _ => ("nvidia-cuda-nvcc", "nvidia/cu13/bin/ptxas"),
    };
    write!(
        f,
        "point {variable} at a ptxas of CUDA {cuda} or newer, whose targets hold {target} (pip install '{wheel}>={cuda}' puts one at site-packages/{path})"
    )?;
    match triton {
        Some(t) => write!(f, ", or install triton {t} or newer"),
        None => Ok(()),
    }
}

/// The words of [`Fix::Driver`].
fn driver_words(
    f: &mut std::fmt::Formatter<'_>,
    who: &Who,
    (need, cuda): (Option<DriverRelease>, CudaVersion),
    level: Option<CudaVersion>,
) -> std::fmt::Result {
    let need = need.map_or_else(
        || format!("a CUDA {cuda} driver or newer"),
        |r| format!(">= {r}"),
    );
    write!(f, "update the NVIDIA driver to {need}")?;
    let Some(level) = level else {
        return match who {
            Who::Own => f.write_str(", or build with an older CUDA toolkit"),
            _ => f.write_str(", or install a build made with an older CUDA"),
        };
    };
    match who {
                    Who::Own => write!(
                        f,
                        ", or build with a CUDA {}.x toolkit (a [toolchain] pin in the profile, or FATKIT_NVCC naming that nvcc)",
                        level.major
                    ),
                    Who::File => write!(
                        f,
                        ", or use a build of it made with CUDA {level} or older (the driver's level)"
                    ),
                    Who::Package(p) => match (pytorch_index(who, level), for_major(who, level.major)) {
                        (Some(pip), _) => write!(
                            f,
                            ", or install {p} built for CUDA {level} or older (the driver's level): {pip}"
                        ),
                        (None, Some(name)) => write!(
                            f,
                            ", or install {name}, its build for CUDA {}.x (the driver's level is CUDA {level})",
                            level.major
                        ),
                        // A package that publishes no build per CUDA release (triton: one
                        // wheel per release) has at most an earlier release built with an
                        // older one: no build is named that may not exist.
                        (None, None) => write!(
                            f,
                            ", or install an earlier release of {p} built with CUDA {level} or older (the driver's level), if one was"
                        ),
                    },
                }
}

/// The words of [`Fix::Build`].
fn build_words(f: &mut std::fmt::Formatter<'_>, who: &Who, cc: Cc) -> std::fmt::Result {
    let cubin = Target::cubin(cc.major, cc.minor);
    let which = builders(cubin);
    let install = match &which {
                    Some(which) => format!(
                        "install a build{} made for {cubin} ({which})",
                        who.of_words()
                    ),
                    None => format!(
                        "install a build{} with PTX for {} or lower (no CUDA in the tables builds a cubin for CC {cc})",
                        who.of_words(),
                        cubin.with_kind(ImageKind::Ptx)
                    ),
                };
    f.write_str(&install)?;
    let first = toolkit::toolkits_for(cubin).first().copied();
    if let Some(pip) = first.and_then(|v| pytorch_index(who, v)) {
        write!(f, ": {pip}")?;
    }
    if matches!(who, Who::Package(_)) || which.is_none() {
        return Ok(());
    }
    write!(
        f,
        "; to build it: nvcc -gencode arch={},code={cubin} (CMAKE_CUDA_ARCHITECTURES={})",
        cubin.with_kind(ImageKind::Ptx),
        cc.digits()
    )?;
    if *who == Who::Own {
        f.write_str(", or add it to the profile's targets")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn driver(who: Who) -> String {
        Fix::Driver {
            who,
            need: Some(DriverRelease::new(580, Some(65), Some(6))),
            cuda: CudaVersion::new(13, 0),
            level: Some(CudaVersion::new(12, 8)),
            predates_gpu: false,
        }
        .to_string()
    }

    #[test]
    fn a_driver_fix_is_worded_for_who_can_act() {
        let torch = driver(Who::of(Some("torch 2.15.0"), false));
        assert!(torch.contains("download.pytorch.org/whl/cu128"), "{torch}");
        let cudnn = driver(Who::of(Some("nvidia_cudnn_cu13 9.28.1.4"), false));
        assert!(cudnn.contains("install nvidia_cudnn_cu12"), "{cudnn}");
        // The build for the driver's major is the one installed: only an earlier release of
        // it can help, never the same package.
        let same = Fix::Driver {
            who: Who::of(Some("nvidia_cudnn_cu13 9.26.0.51"), false),
            need: None,
            cuda: CudaVersion::new(13, 4),
            level: Some(CudaVersion::new(13, 0)),
            predates_gpu: false,
        }
        .to_string();
        assert!(!same.contains("install nvidia_cudnn_cu13,"), "{same}");
        assert!(
            same.contains("an earlier release of nvidia_cudnn_cu13 built with CUDA 13.0 or older"),
            "{same}"
        );
        let own = driver(Who::Own);
        assert!(own.contains("[toolchain] pin"), "{own}");
        let file = driver(Who::File);
        assert!(file.contains("CUDA 12.8 or older"), "{file}");
        // No rebuild recipe for a third party's package.
        let build = Fix::Build {
            who: Who::of(Some("vllm 0.33.0"), false),
            cc: Cc::new(12, 0),
        }
        .to_string();
        assert!(!build.contains("nvcc"), "{build}");
        assert!(build.starts_with("install a build of vllm made for sm_120"));
    }
}
