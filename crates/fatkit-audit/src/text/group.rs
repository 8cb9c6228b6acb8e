//! A group of libraries built alike: what they were built for and with, and per GPU which
//! kernels run, which do not and why, and the fix.

use super::*;

pub(super) fn write_group(
    out: &mut dyn Write,
    group: &[&Library],
    options: &Options,
    ind: &str,
) -> io::Result<()> {
    let Some(first) = group.first() else {
        return Ok(());
    };
    if first.cubins.is_empty() && first.ptx.is_empty() {
        return writeln!(out, "{ind}built for:  no readable image");
    }
    writeln!(
        out,
        "{ind}built for:  cubin {}; PTX {}",
        targets_or(&first.cubins, "none"),
        targets_or(&first.ptx, "none")
    )?;
    let by = if first.toolkits.is_empty() {
        "unknown (no cubin names its toolkit)".to_owned()
    } else {
        format!("CUDA {}", first.toolkits.join(", CUDA "))
    };
    writeln!(out, "{ind}built by:   {by}")?;
    if options.verbose {
        write_layers(out, group, ind)?;
    }
    let list = &first.arch_list;
    let pad = format!("{ind}            ");
    // TORCH_CUDA_ARCH_LIST only for what PyTorch's build takes it: torch and its extensions.
    match (&list.torch, &list.torch_note, first.torch) {
        (Some(t), _, true) => writeln!(out, "{ind}arch list:  TORCH_CUDA_ARCH_LIST=\"{t}\"")?,
        (None, Some(note), true) => {
            writeln!(out, "{ind}arch list:  TORCH_CUDA_ARCH_LIST: none ({note})")?
        }
        _ => {}
    }
    let label = if first.torch { pad.as_str() } else { "" };
    let label = match label {
        "" => format!("{ind}arch list:  "),
        pad => pad.to_owned(),
    };
    writeln!(out, "{label}CMAKE_CUDA_ARCHITECTURES=\"{}\"", list.cmake)?;
    writeln!(out, "{pad}nvcc {}", list.nvcc)?;
    let general = &first.general;
    if general.per_gpu {
        writeln!(
            out,
            "{pad}(a file of a collection built per GPU: a loader picks it for the GPUs it is built for)"
        )?;
    } else if general.families > 0 {
        writeln!(
            out,
            "{pad}(its general build: {} of {} containers; {} for fewer GPUs, chosen per GPU)",
            general.modules - general.families,
            general.modules,
            match general.families {
                1 => "1 is a family".to_owned(),
                n => format!("{n} are families"),
            }
        )?;
    }
    write_drivers(out, first, ind)?;
    for r in &first.runtimes {
        writeln!(out, "{ind}runtime:    {}: {}", r.what, need_words(r))?;
    }
    if options.gpus.is_empty() {
        write_runs_on(out, group, options.policy, ind)?;
    }
    if options.matrix {
        return Ok(());
    }
    for (g, on) in first.on.iter().enumerate() {
        let all: Vec<&OnGpu> = group.iter().filter_map(|l| l.on.get(g)).collect();
        write_on_gpu(out, on, &all, first, options, ind)?;
    }
    Ok(())
}

/// What driver each group of the library's images needs, a line each; a compression's floor
/// that a line for the same images already exceeds is left out.
fn write_drivers(out: &mut dyn Write, first: &Library, ind: &str) -> io::Result<()> {
    let exceeded = |d: &DriverNeed| {
        matches!(d.what, Needs::Compressed(_))
            && d.targets.iter().all(|t| {
                first
                    .drivers
                    .iter()
                    .any(|o| o.cuda > d.cuda && o.targets.contains(t))
            })
    };
    let shown: Vec<&DriverNeed> = first.drivers.iter().filter(|d| !exceeded(d)).collect();
    for (i, d) in shown.into_iter().enumerate() {
        let label = if i == 0 {
            "drivers:    "
        } else {
            "            "
        };
        let how = if matches!(d.what, Needs::Ptx(_)) {
            format!(
                "{} PTX ({}): JIT needs {}",
                d.targets,
                d.what,
                need_words(d)
            )
        } else if matches!(d.what, Needs::Compressed(_)) {
            format!(
                "{} {}: need {} (docs/ARCH_RULES.md section 3, Medium)",
                d.targets,
                d.what,
                need_words(d)
            )
        } else if d.cuda.minor != 0 {
            format!(
                "{} {}: {} (CUDA {}: older drivers do not know the GPUs they are for)",
                d.targets,
                d.what,
                driver_words(d),
                d.cuda
            )
        } else {
            format!(
                "{} {}: {} (CUDA {}.0; any CUDA {}.x driver loads them: minor version compatibility)",
                d.targets,
                d.what,
                driver_words(d),
                d.cuda.major,
                d.cuda.major
            )
        };
        writeln!(out, "{ind}{label}{how}")?;
    }
    Ok(())
}

/// The layers of a container image the group's libraries came from, each with how many.
fn write_layers(out: &mut dyn Write, group: &[&Library], ind: &str) -> io::Result<()> {
    let mut layers: Vec<(&str, usize)> = Vec::new();
    for layer in group.iter().filter_map(|l| l.layer.as_deref()) {
        match layers.iter_mut().find(|(l, _)| *l == layer) {
            Some((_, n)) => *n += 1,
            None => layers.push((layer, 1)),
        }
    }
    let words: Vec<String> = match layers.as_slice() {
        [] => return Ok(()),
        [(one, _)] => vec![(*one).to_owned()],
        many => many
            .iter()
            .map(|(l, n)| format!("{l}: {}", plural(*n, "library", "libraries")))
            .collect(),
    };
    writeln!(out, "{ind}from:       {}", words.join("; "))
}

/// Without a GPU: the product compute capabilities on which every kernel runs, and those on
/// which some do not.
pub(super) fn write_runs_on(
    out: &mut dyn Write,
    group: &[&Library],
    _policy: Policy,
    ind: &str,
) -> io::Result<()> {
    let Some(first) = group.first() else {
        return Ok(());
    };
    let mut yes = Vec::new();
    let mut no = Vec::new();
    let mut ccs = products::product_ccs();
    ccs.reverse();
    let min = first
        .cubins
        .iter()
        .chain(first.ptx.iter())
        .map(|t| t.cc)
        .min();
    for cc in ccs {
        if min.is_some_and(|m| cc < m) {
            continue;
        }
        if first.runs_on.contains(&cc) {
            yes.push(cc);
        } else {
            no.push(cc);
        }
    }
    let words = |v: &[Cc]| {
        if v.is_empty() {
            "none".to_owned()
        } else {
            v.iter().map(Cc::to_string).collect::<Vec<_>>().join(" ")
        }
    };
    // The first few by name, as the summary names them; the list below has every one.
    let declared = match first.general.declared.len() {
        0 => String::new(),
        n => {
            let named: Vec<String> = first
                .general
                .declared
                .iter()
                .take(crate::answer::Aside::NAMED)
                .map(|k| crate::words::demangled(k))
                .collect();
            let more = match n.saturating_sub(named.len()) {
                0 => String::new(),
                m => format!(" and {m} more"),
            };
            format!(
                " but {n} its crate declares for fewer GPUs: {}{more}",
                named.join(", ")
            )
        }
    };
    let (aside, some) = if first.general.aside {
        (
            ", parts built for other GPUs only aside",
            "some kernel of its general build",
        )
    } else {
        ("", "some kernel")
    };
    writeln!(
        out,
        "{ind}runs on:    CC {} (every kernel{declared}{aside})",
        words(&yes)
    )?;
    if !no.is_empty() {
        writeln!(
            out,
            "{ind}not on:     CC {} ({some} has no image for it; --gpu says which)",
            words(&no)
        )?;
    }
    Ok(())
}

pub(super) fn write_on_gpu(
    out: &mut dyn Write,
    on: &OnGpu,
    all: &[&OnGpu],
    first: &Library,
    options: &Options,
    ind: &str,
) -> io::Result<()> {
    let run: usize = all.iter().map(|o| o.run).sum();
    let label = format!("on {}:", on.gpu);
    let pad = " ".repeat(label.len() + 1);
    let unknown = all
        .iter()
        .flat_map(|o| &o.failing)
        .any(|f| f.why == Some(crate::coverage::Why::Unknown));
    if run == 0 && on.kernels > 0 {
        let words = if unknown {
            "no kernel is known to run"
        } else {
            "no kernel runs"
        };
        writeln!(out, "{ind}{label} {words}")?;
    }
    let kernels: usize = all.iter().map(|o| o.kernels).sum();
    let by_ptx: usize = all.iter().map(|o| o.by_ptx).sum();
    let declared: Vec<&(String, TargetSet)> = all.iter().flat_map(|o| &o.declared).collect();
    if run > 0 {
        let need = on
            .floor
            .as_ref()
            .map_or_else(String::new, |n| format!(": {}", need_words(n)));
        let ptx = if by_ptx > 0 {
            format!(
                ", {by_ptx} of them only by PTX JIT{}",
                if on.driver.is_none() {
                    " (give --driver to check it)"
                } else {
                    ""
                }
            )
        } else {
            String::new()
        };
        writeln!(
            out,
            "{ind}{label} {run} of {kernels} kernels run from {}{need}{ptx}",
            on.images
        )?;
    }
    write_other_gpus(out, all, first.general.per_gpu, (&pad, ind))?;
    if let Some(problem) = &on.driver_problem {
        writeln!(out, "{ind}{pad}UNKNOWN: {problem}")?;
    }
    if !declared.is_empty() {
        writeln!(
            out,
            "{ind}{pad}{} not built for it, by their crate's declaration (not failures):",
            plural(declared.len(), "kernel", "kernels")
        )?;
        for (kernel, targets) in &declared {
            writeln!(
                out,
                "{ind}{pad}  {}: declared for {targets}",
                crate::words::demangled(kernel)
            )?;
        }
    }
    if !write_failing(out, on, all, (kernels, options), ind)? {
        return Ok(());
    }
    if let Some(fix) = &on.fix {
        writeln!(out, "{ind}fix:        {fix}")?;
    }
    Ok(())
}

/// The kernels that do not run on `on`'s GPU, grouped by reason, the largest groups first (all
/// with `--all-kernels`), then apart the kernels whose fate the rules cannot say; whether
/// there are any.
fn write_failing(
    out: &mut dyn Write,
    on: &OnGpu,
    all: &[&OnGpu],
    (kernels, options): (usize, &Options),
    ind: &str,
) -> io::Result<bool> {
    let mut fails: BTreeMap<&Failing, Vec<&str>> = BTreeMap::new();
    let mut unknown: BTreeMap<&Failing, Vec<&str>> = BTreeMap::new();
    for o in all {
        for f in &o.failing {
            let groups = if f.why == Some(crate::coverage::Why::Unknown) {
                &mut unknown
            } else {
                &mut fails
            };
            groups
                .entry(&f.cause)
                .or_default()
                .extend(f.kernels.iter().map(String::as_str));
        }
    }
    let heads = [
        (fails, "do not run on", "by reason"),
        (unknown, "may or may not run on", "because"),
    ];
    let mut any = false;
    for (groups, verb, by) in heads {
        if groups.is_empty() {
            continue;
        }
        any = true;
        // The largest groups first; among equals, in the order of their words.
        let mut groups: Vec<(&Failing, Vec<&str>)> = groups.into_iter().collect();
        groups.sort_by_cached_key(|(cause, k)| (std::cmp::Reverse(k.len()), cause.to_string()));
        let count: usize = groups.iter().map(|(_, k)| k.len()).sum();
        writeln!(
            out,
            "{ind}{count} of {kernels} kernels {verb} {}, {by}:",
            on.gpu
        )?;
        write_groups(out, &groups, options, ind)?;
    }
    Ok(any)
}

/// Reasons and the kernels of each, as many as `--all-kernels` asks.
fn write_groups(
    out: &mut dyn Write,
    groups: &[(&Failing, Vec<&str>)],
    options: &Options,
    ind: &str,
) -> io::Result<()> {
    let shown = if options.all_kernels {
        groups.len()
    } else {
        GROUPS_SHOWN
    };
    for (reason, names) in groups.iter().take(shown) {
        writeln!(out, "{ind}  {:>6}  {reason}", names.len())?;
        // Without --all-kernels, kernels whose shortened names agree are one family (CUTLASS
        // instantiations of one template), named once with their count.
        let (listed, shown): (Vec<String>, usize) = if options.all_kernels {
            (names.iter().map(|n| (*n).to_owned()).collect(), names.len())
        } else {
            let mut families: Vec<(String, usize)> = Vec::new();
            let mut at: BTreeMap<String, usize> = BTreeMap::new();
            for n in names {
                let short = shorten(n);
                match at.get(&short) {
                    Some(&i) => {
                        if let Some(f) = families.get_mut(i) {
                            f.1 += 1;
                        }
                    }
                    None => {
                        at.insert(short.clone(), families.len());
                        families.push((short, 1));
                    }
                }
            }
            let taken: Vec<&(String, usize)> = families.iter().take(NAMES_SHOWN).collect();
            let shown = taken.iter().map(|(_, n)| n).sum();
            let listed = taken
                .into_iter()
                .map(|(name, n)| match n {
                    1 => name.clone(),
                    n => format!("{name} ({n} kernels)"),
                })
                .collect();
            (listed, shown)
        };
        let more = names.len() - shown;
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        writeln!(out, "{ind}          {}{more}", listed.join(", "))?;
    }
    if groups.len() > shown {
        writeln!(
            out,
            "{ind}  ... and {} more reasons (--all-kernels lists them)",
            groups.len() - shown
        )?;
    }
    Ok(())
}

/// Kernels built for other GPUs only, by the targets they are built for: counted and named
/// apart from failures.
pub(super) fn write_other_gpus(
    out: &mut dyn Write,
    all: &[&OnGpu],
    per_gpu: bool,
    (pad, ind): (&str, &str),
) -> io::Result<()> {
    let mut groups: BTreeMap<&TargetSet, (usize, usize)> = BTreeMap::new();
    for o in all {
        for g in &o.for_other_gpus {
            let slot = groups.entry(&g.targets).or_default();
            slot.0 += g.kernels.len();
            slot.1 += g.modules.len();
        }
    }
    if groups.is_empty() {
        return Ok(());
    }
    let kernels: usize = groups.values().map(|(k, _)| k).sum();
    let modules: usize = groups.values().map(|(_, m)| m).sum();
    let mut groups: Vec<(&TargetSet, (usize, usize))> = groups.into_iter().collect();
    groups.sort_by_key(|(_, (k, _))| std::cmp::Reverse(*k));
    let mut listed: Vec<String> = groups
        .iter()
        .take(GROUPS_SHOWN)
        .map(|(t, (k, _))| format!("{t} ({k})"))
        .collect();
    if groups.len() > GROUPS_SHOWN {
        listed.push(format!("{} more", groups.len() - GROUPS_SHOWN));
    }
    writeln!(
        out,
        "{ind}{pad}{} in {} built only for other GPUs: {}",
        plural(kernels, "kernel", "kernels"),
        plural(modules, "container", "containers"),
        listed.join(", ")
    )?;
    let why = match per_gpu {
        true => "a loader picks these files of a collection built per GPU on the GPUs they are built for",
        false => "the library launches them on the GPUs they are built for",
    };
    writeln!(
        out,
        "{ind}{pad}(not failures: {why}; here one would fail; --strict counts them)"
    )
}

/// A kernel name demangled and cut to fit a line (C++ template names run to hundreds of
/// characters).
pub(super) fn shorten(name: &str) -> String {
    const MAX: usize = 60;
    let name = crate::words::demangled(name);
    if name.chars().count() <= MAX {
        return name;
    }
    let cut: String = name.chars().take(MAX).collect();
    format!("{cut}...")
}
