//! A library's answer on one GPU ([`OnGpu`]): its kernels' verdicts counted, the driver the
//! images that run need, and the fix.

use std::collections::{BTreeMap, BTreeSet};

use fatkit_arch::driver::MinDriver;
use fatkit_arch::rules::{Device, Policy, Status};
use fatkit_arch::toolkit::{CudaVersion, PtxIsa};
use fatkit_arch::{Target, TargetSet};

use super::{
    driver_meets, Answer, DriverNeed, DriverProblem, FailGroup, Failing, Narrow, Needs, OnGpu,
    OtherGpus,
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
    /// Parts for other GPUs, by the targets they are built for and whether they are compiled
    /// out of this GPU's own image: the kernels, their modules.
    elsewhere: BTreeMap<(TargetSet, bool), (Vec<String>, BTreeSet<String>)>,
    /// Kernels that do not run here and that no host code names.
    unnamed: Vec<String>,
}

/// Why as data, the kernels, their modules.
type FailingKernels = (Option<coverage::Why>, Vec<String>, BTreeSet<String>);

impl Tally {
    fn of(
        kernels: &[KernelImages],
        verdicts: &[coverage::KernelVerdict],
        unnamed: &BTreeSet<String>,
    ) -> Tally {
        let mut t = Tally::default();
        for (k, v) in kernels.iter().zip(verdicts) {
            match (v.status, &v.declared) {
                (Status::Runs, _) => t.runs(k, v.image),
                (Status::Fails, Some(targets)) => {
                    t.declared.push((k.name.clone(), targets.clone()))
                }
                (Status::Fails, None) if v.for_other_gpus.is_some() => {
                    let targets = v.for_other_gpus.clone().unwrap_or_default();
                    let stub = matches!(v.why, Some(coverage::Why::CompiledOut { .. }));
                    let (names, modules) = t.elsewhere.entry((targets, stub)).or_default();
                    names.push(k.name.clone());
                    modules.insert(k.module.clone());
                }
                (Status::Fails, None) if unnamed.contains(&k.name) => {
                    t.unnamed.push(k.name.clone());
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

/// What a library's build is, read once for every GPU asked about.
pub(super) struct Shape {
    /// The targets of every image of its modules with kernels.
    pub(super) images: TargetSet,
    /// The targets of the images that hold its kernels' bodies.
    pub(super) bodies: TargetSet,
    /// Whether its plain targets span two generations or more.
    pub(super) wide: bool,
}

impl Shape {
    pub(super) fn of(kernels: &[KernelImages], wide: bool) -> Shape {
        // The targets whose images hold kernels' bodies: a library whose other images hold
        // only stubs is built for these.
        let mut bodies = TargetSet::new();
        for k in kernels {
            bodies.extend(&crate::general::bodies(k));
        }
        Shape {
            images: crate::general::targets_of(kernels),
            bodies,
            wide,
        }
    }
}

pub(super) fn on_gpu(
    kernels: &[KernelImages],
    (declarations, roles, unnamed): (&Declarations, &Roles, &BTreeSet<String>),
    device: &Device,
    (policy, strict, shape): (Policy, bool, &Shape),
    (built_by, runtimes, drivers): (&BTreeMap<Target, CudaVersion>, &[DriverNeed], &[DriverNeed]),
    corrupt: bool,
) -> OnGpu {
    let verdicts = coverage::on_device(kernels, declarations, roles, device, policy);
    let mut t = Tally::of(kernels, &verdicts, unnamed);
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
    // No image runs on a driver that does not know the GPU: its floor is the GPU's first.
    let needs = needs.map(|n| match gpu_need(device.cc) {
        Some(gpu) if gpu.cuda > n.cuda => gpu,
        _ => n,
    });
    let driver_problem = driver_problem(device, cubins_need, drivers, &t.images);
    let floor = floor(needs.as_ref(), runtimes, t.run);
    let answer = answer_of(
        &t,
        kernels.is_empty(),
        (runtime_problem.is_some(), driver_problem.is_some(), corrupt),
        n_failing,
    );
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
        .map(|((targets, compiled_out), (kernels, modules))| OtherGpus {
            targets,
            compiled_out,
            kernels,
            modules: modules.into_iter().collect(),
        })
        .collect();
    for_other_gpus.sort_by_key(|g| std::cmp::Reverse(g.kernels.len()));
    let own_images = shape
        .images
        .iter()
        .any(|t| crate::general::built_for(t, device.cc));
    let narrow = match (strict, t.run, &runtime_problem) {
        (false, 0, None) if n_failing > 0 && !own_images && no_image_loads(&failing) => {
            narrow(&shape.bodies, device, shape.wide)
        }
        _ => None,
    };
    OnGpu {
        gpu: gpu_label(device),
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
        floor,
        failing,
        for_other_gpus,
        unnamed: t.unnamed,
        narrow,
        own_images,
        corrupt,
        driver_problem,
        runtime_problem,
        fix: None,
    }
}

/// What a driver needs to see a GPU of `cc` at all ([`fatkit_arch::toolkit::first_cuda`]).
pub(crate) fn gpu_need(cc: fatkit_arch::Cc) -> Option<DriverNeed> {
    let first = fatkit_arch::toolkit::first_cuda(cc)?;
    Some(DriverNeed::new(
        fatkit_arch::TargetSet::new(),
        Needs::Gpu(cc),
        first,
    ))
}

/// The one driver floor where `run` kernels run from images that need `needs` (docs/ARCH_RULES.md
/// section 3, as `fatkit_arch::floor::floors` states it): the most demanding of the images'
/// need and the CUDA runtimes linked, the images' on a tie; none where nothing runs.
fn floor(needs: Option<&DriverNeed>, runtimes: &[DriverNeed], run: usize) -> Option<DriverNeed> {
    if run == 0 {
        return None;
    }
    let runtime = runtimes.iter().max_by_key(|n| n.cuda);
    match (needs, runtime) {
        (Some(n), Some(r)) if r.cuda > n.cuda => Some(r.clone()),
        (Some(n), _) => Some(n.clone()),
        (None, r) => r.cloned(),
    }
}

/// Whether every failing kernel fails because no image of its module loads (209).
fn no_image_loads(failing: &[FailGroup]) -> bool {
    failing
        .iter()
        .all(|g| g.why == Some(coverage::Why::ModuleFails { code: 209 }))
}

/// Whether a library whose kernels' bodies are in images of `targets` loads nothing on
/// `device` by design: every such target is for other GPUs (`a`, `f`) or for newer ones, or
/// the library is built for one generation of GPUs (not `wide`), a feature of those.
fn narrow(targets: &TargetSet, device: &Device, wide: bool) -> Option<Narrow> {
    let specific = |t: &Target| t.suffix != fatkit_arch::Suffix::None;
    let above = targets.iter().all(|t| specific(&t) || t.cc > device.cc);
    if targets.is_empty() || (wide && !above) {
        return None;
    }
    if !above {
        return Some(Narrow::OtherGpus {
            targets: targets.clone(),
        });
    }
    let floor = targets.iter().filter(|t| !specific(t)).map(|t| t.cc).min();
    Some(match floor {
        None => Narrow::OtherGpus {
            targets: targets.clone(),
        },
        Some(floor) => Narrow::NewerGpus {
            targets: targets.clone(),
            floor,
        },
    })
}

/// A library's answer on a GPU from its tally: what stops it (the runtime, the driver, a
/// corrupt file), then what runs and what fails.
fn answer_of(
    t: &Tally,
    no_kernels: bool,
    (runtime_problem, driver_problem, corrupt): (bool, bool, bool),
    n_failing: usize,
) -> Answer {
    if runtime_problem {
        Answer::No
    } else if corrupt || t.uncertain > 0 || driver_problem {
        Answer::Unknown
    } else if no_kernels {
        Answer::NoKernels
    } else if t.run == 0 && n_failing == 0 && (!t.elsewhere.is_empty() || !t.unnamed.is_empty()) {
        // Nothing runs, and nothing of it is meant to: every kernel is built for other GPUs.
        Answer::OtherGpus
    } else if t.run == 0 && n_failing == 0 && !t.declared.is_empty() {
        // Nothing runs, by its crate's declaration: a part for other GPUs, which its whole
        // answers for (a whole where nothing at all runs says NO).
        Answer::OtherGpus
    } else if t.run == 0 && n_failing > 0 {
        Answer::No
    } else if n_failing > 0 {
        Answer::Partly
    } else if t.by_ptx > 0 {
        Answer::RunsByPtx
    } else {
        Answer::Runs
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

/// How a GPU asked about is named: its name, or `CC 9.0` when only that is known.
pub fn gpu_label(device: &Device) -> String {
    if device.name.is_empty() {
        format!("CC {}", device.cc)
    } else {
        device.name.clone()
    }
}

#[cfg(test)]
mod tests {
    use fatkit_fatbin::runtime::{LinkedRuntime, Linking, RECORD};

    use super::*;

    fn cuda(s: &str) -> CudaVersion {
        s.parse().expect("a CUDA version")
    }

    #[test]
    fn a_linked_runtime_raises_the_floor_of_the_images_that_run() {
        let cubins = DriverNeed::new(TargetSet::new(), Needs::Cubins(cuda("12.8")), cuda("12.0"));
        let runtime = LinkedRuntime {
            linking: Linking::Static,
            cuda: cuda("13.2"),
            from: RECORD.to_owned(),
        };
        let rt = DriverNeed::new(TargetSet::new(), Needs::Runtime(runtime), cuda("13.0"));
        let both = floor(Some(&cubins), std::slice::from_ref(&rt), 3);
        assert_eq!(both.as_ref().map(|n| n.cuda), Some(cuda("13.0")));
        assert!(matches!(both.map(|n| n.what), Some(Needs::Runtime(_))));
        // The images' need stands where the runtime asks no more; nothing runs, no floor.
        let alone = floor(Some(&cubins), &[], 3);
        assert_eq!(alone.map(|n| n.cuda), Some(cuda("12.0")));
        assert_eq!(floor(Some(&cubins), &[rt], 0), None);
    }
}
