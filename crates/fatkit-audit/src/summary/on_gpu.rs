//! A library's answer on one GPU ([`OnGpu`]): its kernels' verdicts counted, the driver the
//! images that run need, and the fix.

use std::collections::{BTreeMap, BTreeSet};

use fatkit_arch::driver::MinDriver;
use fatkit_arch::rules::{Device, Policy, Status};
use fatkit_arch::toolkit::{self, CudaVersion, PtxIsa};
use fatkit_arch::{ImageKind, Target, TargetSet};

use super::{
    driver_meets, Answer, DriverNeed, DriverProblem, FailGroup, Failing, Needs, OnGpu, OtherGpus,
};
use crate::coverage::{self, Declarations, KernelImages};
use crate::general::Roles;

/// The kernels' verdicts on one GPU, counted: what [`on_gpu`] builds its answer from.
#[derive(Default)]
struct Tally {
    run: usize,
    by_ptx: usize,
    declared: Vec<(String, TargetSet)>,
    uncertain: usize,
    /// Failing kernels whose loaded image holds them only as a stub.
    compiled_out: usize,
    images: TargetSet,
    /// The PTX that runs, by the CUDA level of driver it needs: (ISA, targets).
    ptx_needs: BTreeMap<CudaVersion, (PtxIsa, TargetSet)>,
    /// By cause: why as data, the kernels, their modules.
    failing: BTreeMap<Failing, FailingKernels>,
    /// Parts for other GPUs, by the targets they are built for: the kernels, their modules.
    elsewhere: BTreeMap<TargetSet, (Vec<String>, BTreeSet<String>)>,
}

/// Why as data, the kernels, their modules.
type FailingKernels = (Option<coverage::Why>, Vec<String>, BTreeSet<String>);

impl Tally {
    fn of(kernels: &[KernelImages], verdicts: &[coverage::KernelVerdict]) -> Tally {
        let mut t = Tally::default();
        for (k, v) in kernels.iter().zip(verdicts) {
            match (v.status, &v.declared) {
                (Status::Runs, _) => t.runs(k, v.image),
                (Status::Fails, Some(targets)) => {
                    t.declared.push((k.name.clone(), targets.clone()))
                }
                (Status::Fails, None) if v.for_other_gpus.is_some() => {
                    let targets = v.for_other_gpus.clone().unwrap_or_default();
                    let (names, modules) = t.elsewhere.entry(targets).or_default();
                    names.push(k.name.clone());
                    modules.insert(k.module.clone());
                }
                (status, _) => {
                    if status == Status::Unknown {
                        t.uncertain += 1;
                    }
                    if matches!(v.why, Some(coverage::Why::CompiledOut { .. })) {
                        t.compiled_out += 1;
                    }
                    let (_, names, modules) = t
                        .failing
                        .entry(Failing::Kernel(v.cause.clone()))
                        .or_insert_with(|| (v.why, Vec::new(), BTreeSet::new()));
                    names.push(k.name.clone());
                    modules.insert(k.module.clone());
                }
            }
        }
        t
    }

    /// Kernel `k` runs from `image`.
    fn runs(&mut self, k: &KernelImages, image: Option<Target>) {
        self.run += 1;
        let Some(t) = image else { return };
        self.images.insert(t);
        if !t.is_ptx() {
            return;
        }
        self.by_ptx += 1;
        let isa = k
            .images
            .iter()
            .find(|i| i.target == t)
            .and_then(|i| i.ptx_isa);
        if let (Some((cuda, _)), Some(isa)) = (MinDriver::need(t, isa, None), isa) {
            let (first, set) = self
                .ptx_needs
                .entry(cuda)
                .or_insert_with(|| (isa, TargetSet::new()));
            // One ISA per CUDA level: the release that introduced it.
            set.insert(t);
            debug_assert_eq!(*first, isa);
        }
    }

    /// Every kernel fails for `problem`, whatever the images would do.
    fn all_fail(&mut self, problem: &DriverProblem, kernels: &[KernelImages]) {
        *self = Tally::default();
        self.failing.insert(
            Failing::Driver(problem.clone()),
            (
                None,
                kernels.iter().map(|k| k.name.clone()).collect(),
                kernels.iter().map(|k| k.module.clone()).collect(),
            ),
        );
    }

    fn n_failing(&self) -> usize {
        self.failing.values().map(|(_, k, _)| k.len()).sum()
    }
}

/// A CUDA runtime the library links refuses an older driver before any image is chosen
/// (docs/ARCH_RULES.md section 3), when `device`'s driver is older than one of `runtimes`
/// needs.
fn runtime_problem(device: &Device, runtimes: &[DriverNeed]) -> Option<DriverProblem> {
    let driver = device.driver?;
    let need = runtimes
        .iter()
        .filter(|n| driver_meets(driver, n) == Some(false))
        .max_by_key(|n| n.cuda)?;
    Some(DriverProblem::Runtime {
        driver,
        need: need.clone(),
    })
}

pub(super) fn on_gpu(
    kernels: &[KernelImages],
    (declarations, roles): (&Declarations, &Roles),
    device: &Device,
    policy: Policy,
    (built_by, runtimes, drivers): (&BTreeMap<Target, CudaVersion>, &[DriverNeed], &[DriverNeed]),
    corrupt: bool,
) -> OnGpu {
    let verdicts = coverage::on_device(kernels, declarations, roles, device, policy);
    let mut t = Tally::of(kernels, &verdicts);
    let runtime_problem = runtime_problem(device, runtimes);
    if let Some(problem) = &runtime_problem {
        t.all_fail(problem, kernels);
    }
    let n_failing = t.n_failing();
    let cubins_need = cubin_need(&t.images, built_by);
    // The most demanding PTX decides; without PTX, the cubins' toolkit.
    let needs = match t.ptx_needs.pop_last() {
        Some((cuda, (isa, targets))) => Some(DriverNeed::new(targets, Needs::Ptx(isa), cuda)),
        None => cubins_need.clone(),
    };
    let driver_problem = driver_problem(device, cubins_need, drivers, &t.images);
    let answer = if runtime_problem.is_some() {
        Answer::No
    } else if corrupt || t.uncertain > 0 || driver_problem.is_some() {
        Answer::Unknown
    } else if kernels.is_empty() {
        Answer::NoKernels
    } else if t.run == 0 && n_failing == 0 && !t.elsewhere.is_empty() {
        // Nothing runs, and nothing of it is meant to: every kernel is built for other GPUs.
        Answer::OtherGpus
    } else if t.run == 0 && n_failing > 0 {
        Answer::No
    } else if n_failing > 0 {
        Answer::Partly
    } else if t.by_ptx > 0 {
        Answer::RunsByPtx
    } else {
        Answer::Runs
    };
    let mut failing: Vec<FailGroup> = t
        .failing
        .into_iter()
        .map(|(cause, (why, kernels, modules))| FailGroup {
            cause,
            why,
            kernels,
            modules: modules.into_iter().collect(),
        })
        .collect();
    // The largest groups first; among equals, in the order of their words.
    failing.sort_by_cached_key(|g| (std::cmp::Reverse(g.kernels.len()), g.cause.to_string()));
    let mut for_other_gpus: Vec<OtherGpus> = t
        .elsewhere
        .into_iter()
        .map(|(targets, (kernels, modules))| OtherGpus {
            targets,
            kernels,
            modules: modules.into_iter().collect(),
        })
        .collect();
    for_other_gpus.sort_by_key(|g| std::cmp::Reverse(g.kernels.len()));
    let fix = match &runtime_problem {
        Some(_) => Some(
            "update the driver, or rebuild the library linking an older CUDA runtime (compile_library: FATKIT_NVCC naming a CUDA 12 nvcc, or Build::cudart(Cudart::Shared) to use the system's)"
                .to_owned(),
        ),
        None => (n_failing > 0).then(|| fix(device, &failing)),
    };
    OnGpu {
        gpu: if device.name.is_empty() {
            format!("CC {}", device.cc)
        } else {
            device.name.clone()
        },
        cc: device.cc,
        driver: device.driver,
        answer,
        kernels: kernels.len(),
        run: t.run,
        by_ptx: t.by_ptx,
        compiled_out: t.compiled_out,
        declared: t.declared,
        images: t.images,
        needs,
        failing,
        for_other_gpus,
        corrupt,
        driver_problem,
        runtime_problem,
        fix,
    }
}

impl OnGpu {
    /// How many kernels are built for other GPUs only ([`OnGpu::for_other_gpus`]).
    pub fn elsewhere(&self) -> usize {
        self.for_other_gpus.iter().map(|g| g.kernels.len()).sum()
    }
}

/// A driver given that may refuse what it would load: cubins from a newer CUDA major than it,
/// else images compressed in a way it may not read.
fn driver_problem(
    device: &Device,
    cubins_need: Option<DriverNeed>,
    drivers: &[DriverNeed],
    images: &TargetSet,
) -> Option<DriverProblem> {
    let driver = device.driver?;
    if let Some(need) = cubins_need.filter(|n| driver_meets(driver, n) == Some(false)) {
        return Some(DriverProblem::Cubins { driver, need });
    }
    drivers
        .iter()
        .filter(|n| matches!(n.what, Needs::Compressed(_)))
        .filter(|n| n.targets.iter().any(|target| images.contains(target)))
        .find(|n| driver_meets(driver, n) == Some(false))
        .map(|need| DriverProblem::Compressed {
            driver,
            need: need.clone(),
        })
}

/// The driver the chosen cubins need: the first release of the CUDA major of the newest
/// toolkit that built one of them (minor version compatibility); `None` when no note says.
fn cubin_need(images: &TargetSet, built_by: &BTreeMap<Target, CudaVersion>) -> Option<DriverNeed> {
    let newest = images
        .cubins()
        .filter_map(|t| built_by.get(&t))
        .max()
        .copied()?;
    let (cuda, _) = MinDriver::need(images.cubins().next()?, None, Some(newest))?;
    Some(DriverNeed::new(
        images.cubins().collect(),
        Needs::Cubins(newest),
        cuda,
    ))
}

fn fix(device: &Device, failing: &[FailGroup]) -> String {
    let cc = device.cc;
    let cubin = Target::cubin(cc.major, cc.minor);
    let driver = failing
        .iter()
        .any(|g| g.why == Some(coverage::Why::ModuleFails { code: 222 }));
    // Only kernels the loaded image lacks: the build has the device's image, not the kernels.
    let loaded: Vec<Target> = failing
        .iter()
        .filter_map(|g| match g.why {
            Some(coverage::Why::NotInLoadedImage { loaded }) => Some(loaded),
            _ => None,
        })
        .collect();
    let stubs: TargetSet = failing
        .iter()
        .filter_map(|g| match g.why {
            Some(coverage::Why::CompiledOut { loaded, .. }) => Some(loaded),
            _ => None,
        })
        .collect();
    let stubbed = failing
        .iter()
        .filter(|g| matches!(g.why, Some(coverage::Why::CompiledOut { .. })))
        .count();
    if stubbed > 0 && stubbed == failing.len() {
        return format!(
            "these kernels' bodies were compiled out of the {stubs} image by the library's own build (they load and do nothing on CC {cc}): use a GPU its build gives their bodies, or a build that compiles them for {stubs} (if you build it: build the bodies for {stubs}, or guard the whole kernel and declare it for the targets it supports)"
        );
    }
    if !loaded.is_empty() && loaded.len() == failing.len() {
        let images: TargetSet = loaded.into_iter().collect();
        return format!(
            "install a build whose {images} image holds every kernel: the driver loads that one image of each module on CC {cc} and finds no kernel elsewhere (if you build it: build every kernel for {images} too, or declare the missing ones for fewer targets)"
        );
    }
    let builders = toolkit::toolkits_for(cubin);
    let newest = toolkit::TOOLKITS.last().map(|t| t.version);
    let which = match (builders.first(), builders.last()) {
        (Some(first), Some(last)) if Some(*last) != newest => {
            Some(format!("CUDA {first} to {last} build it"))
        }
        (Some(first), _) => Some(format!("CUDA {first} or later builds it")),
        _ => None,
    };
    let build = match which {
        Some(which) => format!(
            "install a build made for {cubin} ({which}; TORCH_CUDA_ARCH_LIST={cc}, CMAKE_CUDA_ARCHITECTURES={}, -gencode arch={},code={cubin})",
            cc.digits(),
            cubin.with_kind(ImageKind::Ptx)
        ),
        None => format!(
            "install a build with PTX for {} or lower (no toolkit in the tables builds a cubin for CC {cc})",
            cubin.with_kind(ImageKind::Ptx)
        ),
    };
    if driver {
        format!("update the NVIDIA driver (see the driver lines above), or {build}")
    } else {
        build
    }
}
