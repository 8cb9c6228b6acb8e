//! The package's answer: will this input (a wheel, an environment, an image, a binary) run on
//! the GPU and driver asked about, and what to do if not. One typed value per input, per
//! distribution in it and per GPU, decided here once from the libraries' answers
//! ([`crate::summary`]); the status, the exit code, the text and the JSON all read it, and no
//! renderer decides (docs/ARCH_RULES.md section 11 states the rules).
//!
//! In order: a blocker decides first (host code for another machine than the GPU lives in, a
//! driver older than the package's floor); then each distribution by its libraries, with the
//! parts built for other GPUs set aside (kernels compiled out of an image built for this GPU,
//! kernels no host code names, families, and libraries built for other or newer GPUs beside a
//! core that runs), the core library deciding whether a narrow sibling is an extension; then
//! the input, by its distributions.

pub mod compilers;
mod distribution;
pub(crate) mod floor;
mod releases;

use fatkit_arch::driver::DriverVersion;
use fatkit_arch::rules::Device;
use fatkit_arch::Cc;
use fatkit_fatbin::host::Machine;
use serde::Serialize;

use crate::fix::Fix;
pub use crate::record::RunTime;
use crate::summary::{Answer, DriverNeed, Library, Narrow};
use crate::variants::Variants;

pub use distribution::Distribution;

/// What a whole (an input, a distribution) does on one GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// It holds device code but no kernel to launch (libcufftw, CUPTI's libnvperf), or none.
    NothingToLaunch,
    /// Its kernels are compiled on the user's machine at run time (it ships CUDA sources and
    /// no library with kernels): what it runs is not in it.
    CompilesAtRunTime,
    /// Nothing of it is for this GPU, by design: its libraries are extensions built for other
    /// GPUs, with no general build among them, which it loads only there.
    ExtensionsElsewhere,
    /// It runs: every kernel it launches here, from a cubin.
    Yes,
    /// It runs, some kernels by PTX the driver JIT-compiles at load.
    YesByPtx,
    /// Its core runs; some library or kernel it launches here does not.
    Partly,
    /// It does not run here: a blocker stops it, its core does not run, or nothing of it is
    /// built for this GPU.
    No,
    /// The rules cannot say, or part of it could not be read.
    Unknown,
}

impl Verdict {
    /// The word the headline says.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::NothingToLaunch => "no kernels",
            Verdict::CompilesAtRunTime => "compiles at run time",
            Verdict::ExtensionsElsewhere => "yes, nothing of it for this GPU",
            Verdict::Yes => "yes",
            Verdict::YesByPtx => "yes, by PTX JIT",
            Verdict::Partly => "PARTLY",
            Verdict::No => "NO",
            Verdict::Unknown => "UNKNOWN",
        }
    }

    /// Whether it passes (exit 0).
    pub fn passes(self) -> bool {
        !matches!(self, Verdict::Partly | Verdict::No | Verdict::Unknown)
    }
}

/// What stops a whole before any question of its images.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Blocker {
    /// Its host code is built for `machine`, and the GPU lives only in aarch64 machines.
    Platform { machine: Machine, gpu: String },
    /// The driver is older than the floor `need` (of the distributions `by`), the first thing
    /// to stop them: the runtime's first call fails, or the driver refuses the cubins; `most`:
    /// the most demanding floor, what an update must reach.
    Driver {
        driver: DriverVersion,
        need: DriverNeed,
        most: DriverNeed,
        by: Vec<String>,
    },
    /// The compiler it makes its kernels with on the user's machine cannot make them for this
    /// GPU and driver (Triton's chosen `ptxas`; docs/ARCH_RULES.md section 12).
    Compiler { compiler: compilers::CompilerOn },
}

/// What is set aside on a GPU, never a failure (`--strict` counts them): counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Aside {
    /// Kernels of families and kernels gated by architecture, built for other GPUs.
    pub other_gpus: usize,
    /// Kernels compiled out of the image built for this GPU that the driver loads, whose
    /// bodies other images hold.
    pub compiled_out: usize,
    /// Kernels that do not run here and that no host code names: never launched.
    pub unnamed: usize,
    /// Kernels a crate declared for fewer targets.
    pub declared: usize,
    /// The first of them by name (`Aside::NAMED` at most), for the summary to name.
    pub declared_names: Vec<String>,
    /// Whole libraries (indices into the input's) built for other or newer GPUs, beside a
    /// core that runs, or in a package of extensions only.
    pub libraries: Vec<(usize, Narrow)>,
}

impl Aside {
    fn add(&mut self, other: &Aside) {
        self.other_gpus += other.other_gpus;
        self.compiled_out += other.compiled_out;
        self.unnamed += other.unnamed;
        self.declared += other.declared;
        self.name_declared(other.declared_names.iter().cloned());
        self.libraries.extend(other.libraries.iter().cloned());
    }

    /// How many declared kernels the summary names.
    pub(crate) const NAMED: usize = 5;

    /// Keeps the first [`Aside::NAMED`] of `names` with those already kept, in name order.
    pub(crate) fn name_declared(&mut self, names: impl IntoIterator<Item = String>) {
        self.declared_names.extend(names);
        self.declared_names.sort();
        self.declared_names.dedup();
        self.declared_names.truncate(Self::NAMED);
    }

    /// Kernels set aside, whole libraries' included.
    pub fn kernels(&self, libs: &[Library]) -> usize {
        self.other_gpus
            + self.compiled_out
            + self.unnamed
            + self.declared
            + self.kernels_in_libraries(libs)
    }

    /// Kernels of the libraries set aside whole.
    pub(crate) fn kernels_in_libraries(&self, libs: &[Library]) -> usize {
        self.libraries
            .iter()
            .filter_map(|(i, _)| libs.get(*i))
            .map(|l| l.kernels)
            .sum()
    }
}

/// A whole's answer on one GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Whole {
    pub gpu: String,
    pub cc: Cc,
    pub driver: Option<DriverVersion>,
    pub verdict: Verdict,
    /// The first thing that stops it, when one does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocker: Option<Blocker>,
    /// Its kernels, and those that run (from a cubin or by PTX), of the libraries that speak.
    pub kernels: usize,
    pub run: usize,
    pub by_ptx: usize,
    /// Kernels that fail here, of libraries that speak.
    pub failing: usize,
    /// Of those, kernels the loaded image holds only as a stub, reached through a fallback.
    #[serde(skip_serializing_if = "is_zero")]
    pub compiled_out: usize,
    /// The libraries (indices into the input's) that fail here and count.
    pub failing_libraries: Vec<usize>,
    /// The library that decides for its siblings, where one does (a distribution's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub core: Option<usize>,
    pub aside: Aside,
    /// The driver the images that run need (the most demanding PTX), where PTX runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jit_needs: Option<DriverNeed>,
    /// Distributions (by name) that hold nothing for this GPU: every library of theirs is a
    /// file of a collection built per GPU for other GPUs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub holds_nothing: Vec<Option<String>>,
    /// Whether which variant of a library is loaded decides (and is not known).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub variant_unknown: bool,
    /// Whether part of it could not be read.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unread: bool,
    /// The compilers it makes device code with at run time, on this GPU (a distribution's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub compilers: Vec<compilers::CompilerOn>,
    /// Its programs that compile CUDA C++ they hold with NVRTC, on this GPU.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nvrtc_sources: Vec<compilers::SourceOn>,
    /// What to do, each once, the blocker's first.
    pub fixes: Vec<Fix>,
}

impl Whole {
    fn new(gpu: &crate::summary::OnGpu) -> Whole {
        Whole::blank(gpu.gpu.clone(), gpu.cc, gpu.driver)
    }

    /// Nothing known yet of a whole on the GPU named `gpu`.
    fn blank(gpu: String, cc: Cc, driver: Option<DriverVersion>) -> Whole {
        Whole {
            gpu,
            cc,
            driver,
            verdict: Verdict::NothingToLaunch,
            blocker: None,
            kernels: 0,
            run: 0,
            by_ptx: 0,
            failing: 0,
            compiled_out: 0,
            failing_libraries: Vec::new(),
            core: None,
            aside: Aside::default(),
            jit_needs: None,
            holds_nothing: Vec::new(),
            variant_unknown: false,
            unread: false,
            compilers: Vec::new(),
            nvrtc_sources: Vec::new(),
            fixes: Vec::new(),
        }
    }

    fn push_fix(&mut self, fix: Fix) {
        if !self.fixes.contains(&fix) {
            self.fixes.push(fix);
        }
    }
}

/// An input's answer: per distribution, and as a whole, one per GPU asked about.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct InputAnswer {
    pub distributions: Vec<Distribution>,
    /// One per GPU, in the order asked.
    pub on: Vec<Whole>,
}

/// The answer of an input's `libs` (with its variant sets) on each GPU they were judged on;
/// `sources`: per distribution, the CUDA sources it ships; `strict`: every kernel held to
/// every GPU, no blocker before the kernels' own answers (`--strict`); `unread`: part of the
/// input could not be read; `unbuilt`: of a lock, the distributions with no wheel to read.
pub fn of(
    libs: &mut [Library],
    sets: &[Variants],
    (sources, strict): (&std::collections::BTreeMap<Option<String>, usize>, bool),
    (found, devices, unread): (&RunTime<'_>, &[Device], bool),
    unbuilt: &[crate::record::Unbuilt],
) -> InputAnswer {
    let mut distributions = distribution::all(libs, sets, (sources, strict));
    with_compilers(&mut distributions, found, (devices, strict));
    // A distribution a lock would build from source at install: what it launches is not
    // known before (docs/ARCH_RULES.md section 11). One with neither a wheel for the target
    // nor a source to build cannot be installed there: the lock does not run there.
    distributions.extend(unbuilt.iter().map(|u| {
        Distribution {
            name: Some(u.package.clone()),
            libraries: Vec::new(),
            sources: 0,
            unbuilt: Some(u.why.clone()),
            on: devices
                .iter()
                .map(|d| Whole {
                    verdict: match u.built {
                        true => Verdict::Unknown,
                        false => Verdict::No,
                    },
                    ..Whole::blank(crate::summary::gpu_label(d), d.cc, d.driver)
                })
                .collect(),
        }
    }));
    let fixes = library_fixes(libs, &mut distributions);
    for (i, g, fix) in fixes {
        if let Some(on) = libs.get_mut(i).and_then(|l| l.on.get_mut(g)) {
            on.fix = fix;
        }
    }
    // No distribution (no device code, no compiler): nothing is answered per GPU.
    let asked = if distributions.is_empty() {
        &[][..]
    } else {
        devices
    };
    let on = asked
        .iter()
        .enumerate()
        .map(|(g, d)| {
            let proto = Whole::blank(crate::summary::gpu_label(d), d.cc, d.driver);
            combine(proto, &distributions, g, unread)
        })
        .collect();
    InputAnswer { distributions, on }
}

/// Each distribution's compilers and NVRTC programs on each GPU (a distribution of these only
/// is added): Triton's chosen `ptxas` that cannot compile for the GPU, or whose cubins its
/// driver refuses, stops it; a distribution with nothing else to launch compiles at run time.
fn with_compilers(
    distributions: &mut Vec<Distribution>,
    found: &RunTime<'_>,
    (devices, strict): (&[Device], bool),
) {
    let mut names: Vec<Option<&str>> = Vec::new();
    let owners = found.compilers.iter().map(|(n, _)| n);
    for name in owners.chain(found.sources.iter().map(|(n, _)| n)) {
        if !names.contains(&name.as_deref()) {
            names.push(name.as_deref());
        }
    }
    // PyTorch's own ptxas, which its inductor hands Triton.
    let torch = found
        .compilers
        .iter()
        .map(|(_, c)| *c)
        .find(|c| c.kind == fatkit_fatbin::compiler::Kind::TorchPtxas);
    for name in names {
        let mine: Vec<&fatkit_fatbin::compiler::Compiler> = found
            .compilers
            .iter()
            .filter(|(n, _)| n.as_deref() == name)
            .map(|(_, c)| *c)
            .collect();
        let programs: Vec<&fatkit_fatbin::nvrtc_source::NvrtcSource> = found
            .sources
            .iter()
            .filter(|(n, _)| n.as_deref() == name)
            .map(|(_, s)| *s)
            .collect();
        let at = match distributions.iter().position(|d| d.name.as_deref() == name) {
            Some(at) => at,
            None => {
                distributions.push(Distribution {
                    name: name.map(str::to_owned),
                    libraries: Vec::new(),
                    sources: 0,
                    unbuilt: None,
                    on: devices
                        .iter()
                        .map(|d| Whole::blank(crate::summary::gpu_label(d), d.cc, d.driver))
                        .collect(),
                });
                distributions.len() - 1
            }
        };
        let Some(d) = distributions.get_mut(at) else {
            continue;
        };
        let who = crate::fix::Who::of(name, false);
        for whole in &mut d.on {
            whole.compilers = compilers::on(name, (&mine, torch), (whole.cc, whole.driver));
            whole.nvrtc_sources = compilers::sources_on(&programs, whole.cc);
            let stop = whole
                .compilers
                .iter()
                .find(|c| compilers::blocks(c))
                .cloned();
            let unread = whole.compilers.iter().any(compilers::unread);
            match stop {
                // `--strict` holds kernels only: a compiler stops nothing there.
                Some(c) if whole.blocker.is_none() && !strict => {
                    whole.fixes.insert(0, compilers::fix(&c, who.clone()));
                    whole.blocker = Some(Blocker::Compiler { compiler: c });
                    whole.verdict = Verdict::No;
                }
                // Whether the compiler it runs can make its kernels here is not known.
                _ if unread && !strict && whole.blocker.is_none() && whole.verdict.passes() => {
                    whole.verdict = Verdict::Unknown;
                }
                _ if whole.verdict == Verdict::NothingToLaunch => {
                    whole.verdict = Verdict::CompilesAtRunTime;
                }
                _ => {}
            }
        }
    }
}

/// Each library's fix on each GPU, worded for who can act on its distribution, found once:
/// the library's own (`distribution::library_fix`), or under a blocker the blocker's. The
/// fixes of the libraries that fail and count are their distribution's too, said once; a
/// release built from a later CC than the GPU's names the earlier release, not a build made
/// for it. Returns (library, GPU, fix).
fn library_fixes(
    libs: &[Library],
    distributions: &mut [Distribution],
) -> Vec<(usize, usize, Option<Fix>)> {
    let mut out = Vec::new();
    for d in distributions {
        let who = distribution::who(libs, d.name.as_deref(), &d.libraries);
        for (g, whole) in d.on.iter_mut().enumerate() {
            for &i in &d.libraries {
                let Some((l, on)) = libs.get(i).and_then(|l| Some((l, l.on.get(g)?))) else {
                    continue;
                };
                if matches!(
                    on.answer,
                    Answer::Runs | Answer::RunsByPtx | Answer::NoKernels
                ) {
                    continue;
                }
                let own = distribution::library_fix(l, on, &who, whole.core == Some(i));
                if let (Some(f), true) = (&own, whole.failing_libraries.contains(&i)) {
                    whole.push_fix(f.clone());
                }
                let fix = match whole.blocker {
                    Some(_) => whole.fixes.first().cloned(),
                    None => own,
                };
                out.push((i, g, fix));
            }
            if whole.fixes.iter().any(|f| matches!(f, Fix::Older { .. })) {
                whole.fixes.retain(|f| !matches!(f, Fix::Build { .. }));
            }
        }
    }
    out
}

/// The input's answer on GPU `g`, from its distributions': the worst of those that speak (a
/// distribution with nothing to launch, or compiled at run time, speaks only when all are).
fn combine(mut whole: Whole, dists: &[Distribution], g: usize, unread: bool) -> Whole {
    let answers: Vec<&Whole> = dists.iter().filter_map(|d| d.on.get(g)).collect();
    for a in &answers {
        whole.kernels += a.kernels;
        whole.run += a.run;
        whole.by_ptx += a.by_ptx;
        whole.failing += a.failing;
        whole.compiled_out += a.compiled_out;
        whole.failing_libraries.extend(&a.failing_libraries);
        whole.aside.add(&a.aside);
        whole.holds_nothing.extend(a.holds_nothing.iter().cloned());
        whole.variant_unknown |= a.variant_unknown;
        if a.jit_needs.as_ref().map(|n| n.cuda) > whole.jit_needs.as_ref().map(|n| n.cuda) {
            whole.jit_needs = a.jit_needs.clone();
        }
        if dists.len() == 1 {
            whole.core = a.core;
        }
    }
    // The largest distribution first: of those a blocker stops, its fix is the one to say
    // (what to install for the largest brings the rest as its requirements); then the others'
    // fixes.
    let mut by_size = answers.clone();
    by_size.sort_by_key(|a| std::cmp::Reverse(a.kernels));
    // A compiler stops the input only where it is the input's one distribution; beside
    // others it is one part that does not run (PARTLY, below), its fix in size order.
    let alone = answers.len() == 1;
    let stops = |a: &&Whole| match a.blocker {
        Some(Blocker::Compiler { .. }) => alone,
        Some(_) => true,
        None => false,
    };
    let (blocked, rest): (Vec<&Whole>, Vec<&Whole>) = by_size.into_iter().partition(stops);
    whole.blocker = merged_blocker(&blocked).or_else(|| {
        blocked
            .iter()
            .find_map(|a| a.blocker.clone().filter(|_| alone))
    });
    let blockers_fix = blocked.first().and_then(|a| a.fixes.first());
    for f in blockers_fix
        .into_iter()
        .chain(rest.iter().flat_map(|a| &a.fixes))
    {
        whole.push_fix(f.clone());
    }
    let speaking: Vec<Verdict> = answers
        .iter()
        .map(|a| match a.blocker {
            Some(Blocker::Compiler { .. }) if !alone => Verdict::Partly,
            _ => a.verdict,
        })
        .filter(|v| {
            !matches!(
                v,
                Verdict::NothingToLaunch
                    | Verdict::CompilesAtRunTime
                    | Verdict::ExtensionsElsewhere
            )
        })
        .collect();
    whole.verdict = if unread {
        Verdict::Unknown
    } else if speaking.is_empty() {
        answers
            .iter()
            .map(|a| a.verdict)
            .max()
            .unwrap_or(Verdict::NothingToLaunch)
    } else if speaking.contains(&Verdict::No) {
        Verdict::No
    } else if speaking.contains(&Verdict::Unknown) {
        Verdict::Unknown
    } else {
        speaking.into_iter().max().unwrap_or(Verdict::Yes)
    };
    whole.unread = unread;
    whole
}

/// The blockers of several distributions as one: a driver floor, the most demanding, naming
/// every distribution below it; else the first platform blocker.
fn merged_blocker(answers: &[&Whole]) -> Option<Blocker> {
    let mut driver: Option<Blocker> = None;
    for a in answers {
        if let Some(Blocker::Driver {
            driver: d,
            need,
            most,
            by,
        }) = &a.blocker
        {
            match &mut driver {
                Some(Blocker::Driver {
                    most: have,
                    by: all,
                    ..
                }) => {
                    if most.cuda > have.cuda {
                        *have = most.clone();
                    }
                    all.extend(by.iter().cloned());
                }
                _ => {
                    driver = Some(Blocker::Driver {
                        driver: *d,
                        need: need.clone(),
                        most: most.clone(),
                        by: by.clone(),
                    })
                }
            }
        }
    }
    driver.or_else(|| {
        answers.iter().find_map(|a| {
            a.blocker
                .clone()
                .filter(|b| matches!(b, Blocker::Platform { .. }))
        })
    })
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests;
