//! One distribution's answer on a GPU (docs/ARCH_RULES.md section 11): its blocker, its core
//! library, which libraries speak and which are set aside, the verdict, and the fixes.

use std::collections::BTreeMap;

use fatkit_arch::TargetSet;
use serde::Serialize;

use super::{floor, releases, Blocker, Verdict, Whole};
use crate::coverage::Why;
use crate::fix::{Fix, Who};
use crate::summary::{Answer, Library, Narrow, OnGpu};
use crate::variants::{self, Variants};

/// A distribution of an input (or the libraries of none), answered on each GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Distribution {
    /// `torch 2.15.0`; `None` for libraries of no distribution.
    pub name: Option<String>,
    /// Its libraries: indices into the input's.
    pub libraries: Vec<usize>,
    /// The CUDA sources it ships (`.cu`, `.cuh`): what a package compiled at run time holds.
    #[serde(skip_serializing_if = "is_zero")]
    pub sources: usize,
    /// Of a lock: why it has no wheel to read (built from source at install), so that what
    /// it launches is unknown before the install.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unbuilt: Option<String>,
    /// One per GPU asked about.
    pub on: Vec<Whole>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Every distribution of `libs`, in order of first appearance, answered.
pub(super) fn all(
    libs: &[Library],
    sets: &[Variants],
    (sources, strict): (&BTreeMap<Option<String>, usize>, bool),
) -> Vec<Distribution> {
    let mut order: Vec<Option<&str>> = Vec::new();
    let mut of: BTreeMap<Option<&str>, Vec<usize>> = BTreeMap::new();
    for (i, l) in libs.iter().enumerate() {
        let key = l.package.as_deref();
        if !of.contains_key(&key) {
            order.push(key);
        }
        of.entry(key).or_default().push(i);
    }
    let gpus = libs.first().map_or(0, |l| l.on.len());
    order
        .into_iter()
        .map(|name| {
            let mine = of.remove(&name).unwrap_or_default();
            let sources = sources.get(&name.map(str::to_owned)).copied().unwrap_or(0);
            let on = (0..gpus)
                .filter_map(|g| answer(libs, sets, (&mine, name, sources), (g, strict)))
                .collect();
            Distribution {
                name: name.map(str::to_owned),
                libraries: mine,
                sources,
                unbuilt: None,
                on,
            }
        })
        .collect()
}

/// How one library stands in its distribution on one GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stand {
    /// Its answer counts.
    Speaks(Answer),
    /// Set aside whole: built for other or newer GPUs beside a core that runs.
    Aside,
    /// Nothing to launch, or a file of a collection built per GPU for other GPUs.
    Silent,
}

/// The distribution of `mine` (named `name`, shipping `sources` CUDA sources) on GPU `g`.
fn answer(
    libs: &[Library],
    sets: &[Variants],
    (mine, name, sources): (&[usize], Option<&str>, usize),
    (g, strict): (usize, bool),
) -> Option<Whole> {
    let first = libs.get(*mine.first()?)?.on.get(g)?;
    let mut whole = Whole::new(first);
    let all: Vec<&Library> = mine.iter().filter_map(|&i| libs.get(i)).collect();
    let who = who(libs, name, mine);
    // A blocker first: host code for another machine, a driver below the floor.
    if !strict {
        blocker(&mut whole, &all, name, &who);
    }
    // Kernels compiled at run time: sources and no library with kernels of its own.
    let bare = all.iter().all(|l| l.ptx_file);
    if sources > 0 && bare && !strict {
        whole.verdict = Verdict::CompilesAtRunTime;
        return Some(whole);
    }
    let speaking = variants::speaking(libs, sets);
    let in_mine = |i: &usize| mine.contains(i);
    let speak: Vec<usize> = speaking.into_iter().filter(in_mine).collect();
    let core = core(libs, &speak);
    whole.core = core;
    let core_runs = core
        .and_then(|c| libs.get(c)?.on.get(g))
        .is_some_and(|o| matches!(o.answer, Answer::Runs | Answer::RunsByPtx));
    let with_kernels = speak
        .iter()
        .filter(|&&i| libs.get(i).is_some_and(|l| l.kernels > 0))
        .count();
    let mut answers: Vec<Answer> = Vec::new();
    for &i in &speak {
        let (Some(l), Some(on)) = (libs.get(i), libs.get(i).and_then(|l| l.on.get(g))) else {
            continue;
        };
        // Libraries of no known distribution are not siblings: each speaks for itself.
        let with_kernels = if name.is_some() { with_kernels } else { 1 };
        let stand = stand(
            on,
            Some(i) == core,
            (core.is_some() && name.is_some(), core_runs, with_kernels),
        );
        tally(&mut whole, l, on, i, stand);
        if let Stand::Speaks(a) = stand {
            answers.push(a);
            if !matches!(a, Answer::Runs | Answer::RunsByPtx | Answer::NoKernels) {
                whole.failing_libraries.push(i);
            }
        }
    }
    // A set of variants whose loaded member is not known speaks as its members agree.
    for set in sets.iter().filter(|s| s.loaded.is_none()) {
        if set.members.iter().any(|i| mine.contains(i)) {
            if let Some(a) = variants::decided(libs, set, g) {
                whole.variant_unknown |= a == Answer::Unknown;
                answers.push(a);
            }
            for (l, on) in set
                .members
                .iter()
                .filter_map(|&i| Some((libs.get(i)?, libs.get(i)?.on.get(g)?)))
            {
                whole.kernels += l.kernels;
                whole.run += on.run;
            }
        }
    }
    whole.holds_nothing = crate::collection::none_for(all.iter().copied(), g)
        .into_iter()
        .map(|p| p.map(str::to_owned))
        .collect();
    whole.verdict = verdict(&whole, &answers, core, libs, g);
    Some(whole)
}

/// Who can act on the fixes of the distribution named `name` of the libraries `mine`: its
/// users, or its builders where one of its libraries was built with fatkit.
pub(super) fn who(libs: &[Library], name: Option<&str>, mine: &[usize]) -> Who {
    let own = mine.iter().filter_map(|&i| libs.get(i)).any(|l| l.own);
    Who::of(name, own)
}

/// What stops the distribution of `all` (named `name`) before its images: host code for
/// another machine than the GPU lives in, else a driver below its floor; with its fix.
fn blocker(whole: &mut Whole, all: &[&Library], name: Option<&str>, who: &Who) {
    if let Some(machine) = floor::wrong_machine(all, &whole.gpu) {
        whole.blocker = Some(Blocker::Platform {
            machine,
            gpu: whole.gpu.clone(),
        });
        whole.push_fix(Fix::Platform {
            who: who.clone(),
            machine,
            gpu: whole.gpu.clone(),
        });
        return;
    }
    let Some(driver) = whole.driver else { return };
    let floors = floor::below_floors(all, name, (whole.driver, whole.cc));
    let (Some(need), Some(most)) = (floors.first(), floors.iter().max_by_key(|n| n.cuda)) else {
        return;
    };
    // A driver that predates the GPU is the fix itself: no build of any CUDA runs there.
    let predates = floors
        .iter()
        .any(|n| matches!(n.what, crate::summary::Needs::Gpu(_)));
    whole.push_fix(Fix::Driver {
        who: who.clone(),
        need: most.release,
        cuda: most.cuda,
        level: driver.cuda_level(),
        predates_gpu: predates,
    });
    whole.blocker = Some(Blocker::Driver {
        driver,
        need: need.clone(),
        most: most.clone(),
        by: name.into_iter().map(str::to_owned).collect(),
    });
}

/// The core of a distribution: of the libraries that speak, the one with the most kernels
/// among those of a general build (plain targets over two generations or more); `None` when
/// no library is one.
fn core(libs: &[Library], speak: &[usize]) -> Option<usize> {
    speak
        .iter()
        .copied()
        .filter(|&i| libs.get(i).is_some_and(|l| l.wide && l.kernels > 0))
        .max_by_key(|&i| libs.get(i).map_or(0, |l| l.kernels))
}

/// How a library whose answer is `on` stands: a narrow library is aside beside a core that
/// runs, or among several libraries of which none is general; it speaks as the core, or as
/// the one library of its distribution.
fn stand(
    on: &OnGpu,
    is_core: bool,
    (has_core, core_runs, with_kernels): (bool, bool, usize),
) -> Stand {
    match on.answer {
        Answer::NoKernels | Answer::OtherGpus => Stand::Silent,
        _ if on.narrow.is_none() || is_core => Stand::Speaks(on.answer),
        _ if has_core && core_runs => Stand::Aside,
        _ if !has_core && with_kernels > 1 => Stand::Aside,
        a => Stand::Speaks(a),
    }
}

/// Counts library `l` (index `i`) into `whole` as it stands.
fn tally(whole: &mut Whole, l: &Library, on: &OnGpu, i: usize, stand: Stand) {
    match stand {
        Stand::Aside => {
            if let Some(n) = &on.narrow {
                whole.aside.libraries.push((i, n.clone()));
            }
            return;
        }
        Stand::Silent if on.answer == Answer::NoKernels => return,
        _ => {}
    }
    whole.kernels += l.kernels;
    whole.run += on.run;
    whole.by_ptx += on.by_ptx;
    whole.failing += on.failing.iter().map(|f| f.kernels.len()).sum::<usize>();
    for g in &on.for_other_gpus {
        match g.compiled_out {
            true => whole.aside.compiled_out += g.kernels.len(),
            false => whole.aside.other_gpus += g.kernels.len(),
        }
    }
    whole.aside.unnamed += on.unnamed.len();
    whole.compiled_out += on.compiled_out;
    whole.aside.declared += on.declared.len();
    whole
        .aside
        .name_declared(on.declared.iter().map(|(k, _)| k.clone()));
    if on.by_ptx > 0 {
        if let Some(n) = &on.needs {
            if whole.jit_needs.as_ref().is_none_or(|w| w.cuda < n.cuda) {
                whole.jit_needs = Some(n.clone());
            }
        }
    }
}

/// The verdict from the blocker, the core and the answers of the libraries that speak.
fn verdict(
    whole: &Whole,
    answers: &[Answer],
    core: Option<usize>,
    libs: &[Library],
    g: usize,
) -> Verdict {
    if whole.blocker.is_some() {
        return Verdict::No;
    }
    let speaking: Vec<Answer> = answers
        .iter()
        .copied()
        .filter(|a| *a != Answer::NoKernels)
        .collect();
    // Nothing of it runs here, every kernel declared by its crate for other GPUs: a
    // declaration excuses a kernel beside others that run, never the whole.
    if speaking.is_empty() && whole.run == 0 && whole.aside.declared > 0 {
        return Verdict::No;
    }
    if speaking.is_empty() {
        return match (
            whole.aside.libraries.is_empty(),
            whole.holds_nothing.is_empty(),
        ) {
            (_, false) => Verdict::No,
            (false, true) => Verdict::ExtensionsElsewhere,
            (true, true) => Verdict::NothingToLaunch,
        };
    }
    let core_answer = core.and_then(|c| libs.get(c)?.on.get(g)).map(|o| o.answer);
    if speaking.contains(&Answer::Unknown) {
        return Verdict::Unknown;
    }
    // Its core does not run, or most of its libraries run nothing here.
    let none_run = speaking.iter().filter(|a| **a == Answer::No).count();
    if core_answer == Some(Answer::No) || none_run * 2 > speaking.len() {
        return Verdict::No;
    }
    if speaking
        .iter()
        .any(|a| matches!(a, Answer::No | Answer::Partly))
    {
        return Verdict::Partly;
    }
    if !whole.holds_nothing.is_empty() {
        return Verdict::Partly;
    }
    match speaking.contains(&Answer::RunsByPtx) {
        true => Verdict::YesByPtx,
        false => Verdict::Yes,
    }
}

/// What to do about library `l` that does not run on `on`'s GPU, for `who`.
pub(crate) fn library_fix(l: &Library, on: &OnGpu, who: &Who, is_core: bool) -> Option<Fix> {
    let cc = on.cc;
    let driver_fix = |need: &crate::summary::DriverNeed| Fix::Driver {
        who: who.clone(),
        need: need.release,
        cuda: need.cuda,
        level: on.driver.and_then(|d| d.cuda_level()),
        predates_gpu: false,
    };
    let problem = on.runtime_problem.as_ref().or(on.driver_problem.as_ref());
    if let Some(p) = problem {
        return Some(driver_fix(p.need()));
    }
    // PTX of an ISA newer than the driver (222): the PTX this GPU would JIT, most demanding.
    if on
        .failing
        .iter()
        .any(|f| f.why == Some(Why::ModuleFails { code: 222 }))
    {
        let ptx = l
            .drivers
            .iter()
            .filter(|d| matches!(d.what, crate::summary::Needs::Ptx(_)))
            .filter(|d| d.targets.iter().any(|t| t.cc <= cc))
            .max_by_key(|d| d.cuda);
        if let Some(need) = ptx {
            return Some(driver_fix(need));
        }
    }
    if let Some(narrow) = &on.narrow {
        return Some(match narrow {
            Narrow::NewerGpus { floor, .. }
                if matches!(who, Who::Package(_)) && (is_core || floor > &cc) =>
            {
                Fix::Older {
                    who: who.clone(),
                    cc,
                    floor: *floor,
                    last: releases::last_for(who, cc),
                }
            }
            _ => Fix::Build {
                who: who.clone(),
                cc,
            },
        });
    }
    let whys: Vec<Option<Why>> = on.failing.iter().map(|f| f.why).collect();
    if whys.is_empty() {
        return None;
    }
    if let Some(fix) = of_whys(&whys, who, cc) {
        return Some(match fix {
            Fix::Bodies { who, loaded, cc } if on.own_images => {
                Fix::CompiledOut { who, loaded, cc }
            }
            fix => fix,
        });
    }
    // A library that holds images built for this GPU, of which some modules have none.
    if on.own_images {
        let modules: std::collections::BTreeSet<&String> = on
            .failing
            .iter()
            .filter(|f| f.why == Some(Why::ModuleFails { code: 209 }))
            .flat_map(|f| &f.modules)
            .collect();
        return Some(Fix::Incomplete {
            who: who.clone(),
            cc,
            modules: modules.len(),
        });
    }
    Some(Fix::Build {
        who: who.clone(),
        cc,
    })
}

/// A fix when every failing kernel fails alike: compiled out of a fallback, or absent from the
/// image loaded.
fn of_whys(whys: &[Option<Why>], who: &Who, cc: fatkit_arch::Cc) -> Option<Fix> {
    let stubs: TargetSet = whys
        .iter()
        .filter_map(|w| match w {
            Some(Why::CompiledOut { loaded, .. }) => Some(*loaded),
            _ => None,
        })
        .collect();
    if !stubs.is_empty()
        && whys
            .iter()
            .all(|w| matches!(w, Some(Why::CompiledOut { .. })))
    {
        return Some(Fix::Bodies {
            who: who.clone(),
            loaded: stubs,
            cc,
        });
    }
    let loaded: TargetSet = whys
        .iter()
        .filter_map(|w| match w {
            Some(Why::NotInLoadedImage { loaded }) => Some(*loaded),
            _ => None,
        })
        .collect();
    (!loaded.is_empty()
        && whys
            .iter()
            .all(|w| matches!(w, Some(Why::NotInLoadedImage { .. }))))
    .then(|| Fix::Complete {
        who: who.clone(),
        images: loaded,
        cc,
    })
}
