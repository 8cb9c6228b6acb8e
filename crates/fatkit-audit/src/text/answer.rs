//! The package's answer in words ([`crate::answer`]): the headline, what stops it, what is
//! set aside and the fixes, each once. Everything here reads the answer; nothing decides it.

use super::*;
use crate::answer::{Blocker, Verdict, Whole};
use crate::summary::{Narrow, Needs};

/// The input's first line on one GPU: its verdict and how many kernels run.
pub(super) fn write_headline(
    out: &mut dyn Write,
    input: &AuditedInput,
    whole: &Whole,
) -> io::Result<()> {
    let package = input
        .package
        .as_ref()
        .map_or_else(String::new, |p| format!(" ({p})"));
    writeln!(
        out,
        "{}{package}: {}",
        input.label,
        answer_words(input, whole)
    )
}

/// The answer on one GPU in words: `NO on T4 (CC 7.5): none of its 706 kernels runs`.
pub(super) fn answer_words(input: &AuditedInput, whole: &Whole) -> String {
    let libs = &input.libraries;
    let (kernels, run) = (whole.kernels, whole.run);
    let where_ = match libs.len() {
        0 | 1 => String::new(),
        n => format!(" in {n} libraries"),
    };
    let everything: usize = libs.iter().map(|l| l.kernels).sum();
    let gpu = gpu_words(whole);
    let how = match (&whole.blocker, whole.verdict) {
        (Some(b), _) => blocker_words(b),
        (None, Verdict::NothingToLaunch) => {
            format!("it holds device code{where_} but no kernel to launch")
        }
        (None, Verdict::CompilesAtRunTime) if sources(input) == 0 => format!(
            "it compiles device code on this machine at run time, with {} (below)",
            chosen_compilers(input, whole).join(", ")
        ),
        (None, Verdict::CompilesAtRunTime) => {
            let sources = sources(input);
            format!(
                "it compiles its kernels at run time from the {sources} CUDA sources it ships, with the CUDA compiler it finds on the machine: what runs is not in it (its {everything} prebuilt kernels are data it does not launch as they are)"
            )
        }
        (None, Verdict::ExtensionsElsewhere) => format!(
            "nothing of it is built for this GPU, by design: its {} are extensions built for other GPUs only, which it loads there (below)",
            plural(whole.aside.libraries.len(), "library", "libraries")
        ),
        (None, Verdict::No) if !whole.holds_nothing.is_empty() && run == 0 => format!(
            "it holds nothing for this GPU: its {everything} kernels{where_} are all in files built for other GPUs ({})",
            built_for_words(libs)
        ),
        (None, Verdict::No) if run == 0 => format!("none of its {kernels} kernels{where_} runs"),
        // A distribution built at install is the reason, said after ([`with_unbuilt`]).
        (None, Verdict::Unknown) if unbuilt(input) => match kernels {
            0 => "no kernel of it can be read before it is installed".to_owned(),
            _ => format!("{run} of {kernels} kernels{where_} run"),
        },
        (None, Verdict::Unknown) if kernels == 0 => "it compiles device code on this machine at run time, and which targets its compiler knows could not be read from it (below)".to_owned(),
        (None, Verdict::Unknown) if libs.iter().any(|l| !l.tile_ir.is_empty()) => format!(
            "{run} of {kernels} kernels{where_} fatkit reads run; its Tile IR is not judged (below)"
        ),
        (None, Verdict::Unknown) if whole.unread => format!(
            "{run} of {kernels} kernels{where_} run; part of it could not be read (errors below)"
        ),
        (None, Verdict::Unknown) if whole.variant_unknown => format!(
            "{run} of {kernels} kernels{where_} run, and whether it does depends on which variant is loaded (below)"
        ),
        (None, Verdict::Unknown) => {
            format!("{run} of {kernels} kernels{where_} run, if the driver loads them (below)")
        }
        _ => format!("{run} of {kernels} kernels{where_} run"),
    };
    let how = match whole.compiled_out {
        0 => how,
        n => format!(
            "{how}; {n} compiled out for it (they load and launch, then do nothing or trap)"
        ),
    };
    let how = match (whole.verdict, whole.holds_nothing.as_slice()) {
        (_, []) => how,
        (Verdict::No, _) if run == 0 => how,
        (_, [one]) => format!(
            "{how}; {} holds nothing for it",
            one.as_deref().unwrap_or("(no distribution)")
        ),
        (_, many) => format!("{how}; {} distributions hold nothing for it", many.len()),
    };
    // Kernels no host code names are never launched, not built for other GPUs: said apart.
    let unnamed = whole.aside.unnamed;
    let elsewhere = whole.aside.kernels(libs) - unnamed;
    let how = match (elsewhere, unnamed) {
        _ if whole.verdict == Verdict::ExtensionsElsewhere || whole.blocker.is_some() => how,
        (0, 0) => how,
        (n, 0) => format!("{how}; {n} {} built for other GPUs only (below)", are(n)),
        (0, u) => format!(
            "{how}; {u} {} never launched: no host code names them (below)",
            are(u)
        ),
        (n, u) => {
            format!(
                "{how}; {n} {} built for other GPUs only and {u} never launched (below)",
                are(n)
            )
        }
    };
    let how = with_unbuilt(with_stopped(how, input, whole), input);
    let word = whole.verdict.word();
    format!("{word} on {gpu}: {how}")
}

/// The compilers the input's distributions run on the GPU of `whole`, described.
fn chosen_compilers(input: &AuditedInput, whole: &Whole) -> Vec<String> {
    input
        .answer
        .distributions
        .iter()
        .flat_map(|d| &d.on)
        .filter(|w| w.gpu == whole.gpu)
        .flat_map(|w| {
            let compilers = w
                .compilers
                .iter()
                .filter(|c| c.chosen)
                .map(|c| c.describe());
            let programs = w
                .nvrtc_sources
                .iter()
                .map(|s| format!("NVRTC ({}, {})", s.name, s.nvrtc));
            compilers.chain(programs)
        })
        .collect()
}

/// An NVRTC program's line under its distribution: its kernels, the NVRTC it uses, and the
/// first release of that NVRTC that compiles for the GPU.
pub(super) fn nvrtc_line(s: &crate::answer::compilers::SourceOn) -> String {
    let t = s.target;
    let which = match (s.major, s.from) {
        (_, Some(from)) => format!("an NVRTC of CUDA {from} or later compiles {t}"),
        (Some(m), None) => format!(
            "no CUDA {m} NVRTC compiles {t}: only PTX for an older target, which the driver JIT-compiles"
        ),
        (None, None) => format!("which NVRTC it finds decides whether {t} is compiled"),
    };
    format!(
        "NVRTC program: {} compiles {} at run time ({}): {which}",
        s.name,
        plural(s.kernels, "kernel's CUDA C++", "kernels' CUDA C++"),
        s.nvrtc
    )
}

/// `how`, naming the distributions their compiler stops beside others that run.
fn with_stopped(how: String, input: &AuditedInput, whole: &Whole) -> String {
    let stopped: Vec<&str> = input
        .answer
        .distributions
        .iter()
        .filter(|d| {
            d.on.iter()
                .any(|w| w.gpu == whole.gpu && matches!(w.blocker, Some(Blocker::Compiler { .. })))
        })
        .map(|d| d.name.as_deref().unwrap_or("(no distribution)"))
        .collect();
    match (&whole.blocker, stopped.as_slice()) {
        (None, [one]) => format!("{how}; {one} cannot compile its kernels for it (below)"),
        (None, [_, ..]) => format!(
            "{how}; {} cannot compile their kernels for it (below)",
            stopped.join(", ")
        ),
        _ => how,
    }
}

/// `how`, and the distributions of a lock with no wheel, built at install.
fn with_unbuilt(how: String, input: &AuditedInput) -> String {
    let dists = |verdict: Verdict| {
        input.answer.distributions.iter().filter(move |d| {
            d.unbuilt.is_some() && d.on.first().is_some_and(|w| w.verdict == verdict)
        })
    };
    let of = |verdict: Verdict| -> Vec<&str> {
        dists(verdict).filter_map(|d| d.name.as_deref()).collect()
    };
    // One distribution: its own why, which names the target (a Python version the lock was
    // not made for reads as that, not as a GPU's failure).
    let one_why = dists(Verdict::No)
        .next()
        .and_then(|d| d.unbuilt.as_deref())
        .unwrap_or_default();
    let how = match of(Verdict::No).as_slice() {
        [] => how,
        [one] => format!("{how}; {one}: {one_why} (--python-version, --platform: the target)"),
        many => format!(
            "{how}; {} distributions have no wheel for its platform and no source: the lock cannot be installed there (below)",
            many.len()
        ),
    };
    match of(Verdict::Unknown).as_slice() {
        [] => how,
        [one] => format!("{how}; {one} has no wheel for it and is built at install (below)"),
        many => format!(
            "{how}; {} distributions have no wheel for it and are built at install (below)",
            many.len()
        ),
    }
}

/// Whether a distribution of the input (a lock's) has no wheel and is built at install.
fn unbuilt(input: &AuditedInput) -> bool {
    input
        .answer
        .distributions
        .iter()
        .any(|d| d.unbuilt.is_some())
}

/// The CUDA sources the input's distributions ship.
fn sources(input: &AuditedInput) -> usize {
    input.answer.distributions.iter().map(|d| d.sources).sum()
}

/// The answer on several GPUs in words: the GPUs grouped by their answer, the worst answer
/// first (`NO on V100, T4; yes on A100, H100`), each GPU in the order asked.
pub(super) fn on_several(on: &[Whole]) -> String {
    let severity = |v: Verdict| match v {
        Verdict::No => 0,
        Verdict::Partly => 1,
        Verdict::Unknown => 2,
        Verdict::CompilesAtRunTime => 3,
        Verdict::YesByPtx => 4,
        Verdict::Yes => 5,
        Verdict::ExtensionsElsewhere => 6,
        Verdict::NothingToLaunch => 7,
    };
    let mut groups: std::collections::BTreeMap<u8, (Verdict, Vec<&str>)> = Default::default();
    for w in on {
        groups
            .entry(severity(w.verdict))
            .or_insert((w.verdict, Vec::new()))
            .1
            .push(&w.gpu);
    }
    let driver = on
        .first()
        .and_then(|w| w.driver)
        .filter(|d| on.iter().all(|w| w.driver == Some(*d)))
        .map_or_else(String::new, |d| format!(" (driver {})", d.describe()));
    // By PTX JIT, a pass only under a driver that knows the PTX: the most any GPU of the
    // group needs, said with it (the driver is not known unless given).
    let jit = on
        .iter()
        .filter(|w| w.verdict == Verdict::YesByPtx)
        .filter_map(|w| w.jit_needs.as_ref())
        .max_by_key(|n| n.cuda)
        .map_or_else(String::new, |n| format!(" (JIT needs {})", driver_words(n)));
    let said: Vec<String> = groups
        .values()
        .map(|(verdict, gpus)| {
            let (word, jit) = match verdict {
                Verdict::ExtensionsElsewhere => ("yes, nothing of it for them", ""),
                Verdict::YesByPtx => (verdict.word(), jit.as_str()),
                v => (v.word(), ""),
            };
            format!("{word} on {}{jit}", gpus.join(", "))
        })
        .collect();
    format!("{}{driver}", said.join("; "))
}

fn gpu_words(w: &Whole) -> String {
    // A GPU asked about by its capability is named `CC 8.7` already.
    let bare = w.gpu == format!("CC {}", w.cc);
    match (w.driver, bare) {
        (Some(d), true) => format!("{} (driver {})", w.gpu, d.describe()),
        (Some(d), false) => format!("{} (CC {}, driver {})", w.gpu, w.cc, d.describe()),
        (None, true) => w.gpu.clone(),
        (None, false) => format!("{} (CC {})", w.gpu, w.cc),
    }
}

/// What stops it, in words.
fn blocker_words(b: &Blocker) -> String {
    match b {
        Blocker::Compiler { compiler } => compiler_stop_words(compiler),
        Blocker::Platform { machine, gpu } => format!(
            "its host code is built for {} machines, and {gpu} lives only in aarch64 ones: it cannot be installed or loaded there",
            machine.name()
        ),
        Blocker::Driver {
            driver,
            need,
            most,
            by,
        } => {
            let whom = match by.as_slice() {
                [one] => one.clone(),
                [first, rest @ ..] => format!(
                    "{first} and {}",
                    plural(rest.len(), "more distribution", "more distributions")
                ),
                [] => "it".to_owned(),
            };
            let first = match need.what {
                Needs::Gpu(_) => "the driver predates the GPU and sees no device",
                Needs::Runtime(_) => "the CUDA runtime it links needs a newer driver",
                Needs::Named(_) => "it is built for a newer CUDA than the driver's",
                _ => "its cubins need a newer driver",
            };
            let more = match most.cuda > need.cuda {
                true => format!("; to run, it needs {} ({})", driver_words(most), most.what),
                false => String::new(),
            };
            format!(
                "nothing of it runs: {first}: {whom} need{} {} ({}), and driver {} is older{more}",
                if by.len() > 1 { "" } else { "s" },
                need_words(need),
                need.what,
                driver.describe()
            )
        }
    }
}

/// Why a run-time compiler stops its package, in words.
pub(super) fn compiler_stop_words(c: &crate::answer::compilers::CompilerOn) -> String {
    let what = c.describe();
    match (c.compiles, c.needs) {
        (Some(false), _) => format!(
            "it compiles its kernels on this machine at run time, and its {what} cannot compile {}, the target it asks for on this GPU",
            c.target
        ),
        (_, Some(need)) => {
            let release = c
                .needs_driver
                .map_or_else(String::new, |r| format!(" (>= {r})"));
            format!(
                "it compiles its kernels on this machine at run time, and the cubins its {what} makes need a driver of CUDA {need} or newer{release}: this one is older"
            )
        }
        _ => format!("its {what} cannot make kernels for this GPU"),
    }
}

/// A run-time compiler's line under its distribution: what it is asked for here, and whether
/// it compiles it.
pub(super) fn compiler_line(c: &crate::answer::compilers::CompilerOn) -> String {
    let t = c.target;
    let can = match c.compiles {
        Some(true) => format!("compiles {t}"),
        Some(false) => format!("cannot compile {t} (not among its targets)"),
        None => format!("asked for {t}; its targets could not be read"),
    };
    let needs = match (c.compiles, c.needs, c.needs_driver) {
        (Some(true), Some(n), Some(r)) => format!("; what it makes needs driver >= {r} (CUDA {n})"),
        (Some(true), Some(n), None) => format!("; what it makes needs a CUDA {n} driver"),
        _ => String::new(),
    };
    format!("run-time compiler: {}: {can}{needs}", c.describe())
}

/// The fixes, each once, the blocker's first; at most `shown` (all with `--all-kernels`).
pub(super) fn write_fixes(out: &mut dyn Write, whole: &Whole, shown: usize) -> io::Result<()> {
    for (i, fix) in whole.fixes.iter().take(shown).enumerate() {
        let label = if i == 0 { "fix:" } else { "    " };
        writeln!(out, "  {label} {fix}")?;
    }
    if whole.fixes.len() > shown {
        writeln!(
            out,
            "       ... and {} more (-v shows each library's)",
            whole.fixes.len() - shown
        )?;
    }
    Ok(())
}

/// The verb for `n` kernels.
fn are(n: usize) -> &'static str {
    if n == 1 {
        "is"
    } else {
        "are"
    }
}

/// What is set aside on the GPU, never a failure: counted and named, a line each.
pub(super) fn write_aside(
    out: &mut dyn Write,
    input: &AuditedInput,
    whole: &Whole,
) -> io::Result<()> {
    let a = &whole.aside;
    let libs = &input.libraries;
    let rows = input.answer.distributions.len() <= 1;
    if a.kernels(libs) == 0 || (rows && a.kernels(libs) == a.kernels_in_libraries(libs)) {
        return Ok(());
    }
    writeln!(
        out,
        "  set aside (not failures: the package launches them only on the GPUs they are built for; --strict counts them):"
    )?;
    let kinds = [
        (a.other_gpus, "in families and code gated for other GPUs"),
        (
            a.compiled_out,
            "compiled out of the image built for this GPU, with their bodies in images for others",
        ),
        (a.unnamed, "that no host code names: never launched"),
        (a.declared, "declared by their crate for other targets"),
    ];
    for (n, what) in kinds.into_iter().filter(|(n, _)| *n > 0) {
        writeln!(out, "    {} {what}", plural(n, "kernel", "kernels"))?;
    }
    if !a.declared_names.is_empty() {
        let more = a.declared.saturating_sub(a.declared_names.len());
        writeln!(
            out,
            "      declared: {}{}",
            a.declared_names.join(", "),
            match more {
                0 => String::new(),
                n => format!(" and {n} more (-v names each)"),
            }
        )?;
    }
    let core = whole
        .core
        .and_then(|c| libs.get(c))
        .map(|l| l.name.rsplit('/').next().unwrap_or(&l.name).to_owned());
    // One distribution: its rows above already say which libraries are aside, and why.
    for (i, narrow) in a.libraries.iter().filter(|_| !rows) {
        let Some(l) = libs.get(*i) else { continue };
        let why = match (narrow, &core) {
            (Narrow::OtherGpus { targets }, _) => format!("built only for {targets}"),
            (Narrow::NewerGpus { floor, .. }, Some(core)) => format!(
                "built for CC {floor} and later: an extension beside {core}, which runs here; it fails here only if called"
            ),
            (Narrow::NewerGpus { floor, .. }, None) => format!("built for CC {floor} and later"),
        };
        writeln!(out, "    {} ({} kernels): {why}", l.name, l.kernels)?;
    }
    Ok(())
}

/// Under a blocker: the distributions it stops, and how each other one fares.
pub(super) fn write_blocked(
    out: &mut dyn Write,
    input: &AuditedInput,
    whole: &Whole,
) -> io::Result<()> {
    let Some(Blocker::Driver { by, .. }) = &whole.blocker else {
        return Ok(());
    };
    let by: std::collections::BTreeSet<&str> = by.iter().map(String::as_str).collect();
    let mut stopped: Vec<&str> = Vec::new();
    for d in &input.answer.distributions {
        let name = d.name.as_deref().unwrap_or("(no distribution)");
        if by.contains(name) {
            stopped.push(name);
            continue;
        }
        if let Some(w) = d.on.first() {
            writeln!(out, "  {name}: {}", w.verdict.word())?;
        }
    }
    if input.answer.distributions.len() > 1 {
        const SHOWN: usize = 8;
        let more = stopped.len().saturating_sub(SHOWN);
        let mut names = stopped
            .iter()
            .take(SHOWN)
            .copied()
            .collect::<Vec<_>>()
            .join(", ");
        if more > 0 {
            names.push_str(&format!(" and {more} more"));
        }
        writeln!(out, "  stopped by the driver: {names}")?;
    }
    Ok(())
}
