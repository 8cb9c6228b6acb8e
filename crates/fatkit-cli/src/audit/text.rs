//! The text rendering of an audit: the answer first (one line per input, one per library),
//! then what the libraries were built for and with, grouped when alike, the kernels that do
//! not run grouped by why, and the fix; every image and kernel only with `--verbose`.

use std::collections::BTreeMap;
use std::io::{self, Write};

use fatkit_arch::products;
use fatkit_arch::rules::Policy;
use fatkit_arch::{Cc, TargetSet};
use fatkit_fatbin::coverage::{Cell, FileStatus, Gap, KernelImages};
use fatkit_fatbin::inspect::FileReport;
use fatkit_fatbin::summary::{Answer, DriverNeed, Library, OnGpu};
use fatkit_fatbin::Origin;

use crate::table;
use fatkit_audit::{matrix_cells, variants, Audited, AuditedInput, Options};

/// Kernel names shown per group of failing kernels without `--all-kernels`.
const NAMES_SHOWN: usize = 3;
/// Groups of failing kernels shown without `--all-kernels`.
const GROUPS_SHOWN: usize = 6;

pub fn write(out: &mut dyn Write, audited: &Audited, options: &Options) -> io::Result<()> {
    for input in &audited.inputs {
        write_input(out, input, options)?;
        writeln!(out)?;
    }
    if options.matrix {
        write_matrix(out, audited, options)?;
    }
    Ok(())
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The answer for several libraries together.
fn combine(answers: impl Iterator<Item = Answer>) -> Option<Answer> {
    let all: Vec<Answer> = answers.collect();
    // A library without kernels speaks only when every library is one.
    let answers: Vec<Answer> = all
        .iter()
        .copied()
        .filter(|a| *a != Answer::NoKernels)
        .collect();
    if answers.is_empty() {
        return all.first().copied();
    }
    Some(if answers.contains(&Answer::Unknown) {
        Answer::Unknown
    } else if answers.iter().all(|a| *a == Answer::No) {
        Answer::No
    } else if answers
        .iter()
        .any(|a| matches!(a, Answer::No | Answer::Partly))
    {
        Answer::Partly
    } else {
        answers.into_iter().max().unwrap_or(Answer::Runs)
    })
}

fn gpu_words(on: &OnGpu) -> String {
    let driver = on
        .driver
        .map_or_else(String::new, |d| format!(", driver {}", d.describe()));
    format!("{} (CC {}{driver})", on.gpu, on.cc)
}

fn write_input(out: &mut dyn Write, input: &AuditedInput, options: &Options) -> io::Result<()> {
    let libs = &input.libraries;
    let package = input
        .package
        .as_ref()
        .map_or_else(String::new, |p| format!(" ({p})"));
    let kernels: usize = libs.iter().map(|l| l.kernels).sum();
    let where_ = if libs.len() > 1 {
        format!(" in {} libraries", libs.len())
    } else {
        String::new()
    };
    if libs.is_empty() {
        writeln!(out, "{}{package}: no device code found", input.label)?;
    } else if options.gpus.len() == 1 && !options.matrix {
        let on: Vec<&OnGpu> = libs.iter().filter_map(|l| l.on.first()).collect();
        // One answer per set of variants: the loaded one's (fatkit_audit::variants).
        let answer = combine(input.deciding(0).into_iter()).unwrap_or(Answer::No);
        let run: usize = on.iter().map(|o| o.run).sum();
        let gpu = on.first().map(|o| gpu_words(o)).unwrap_or_default();
        let how = match answer {
            Answer::NoKernels => format!("it holds device code{where_} but no kernel to launch"),
            Answer::No if run == 0 && on.iter().any(|o| o.runtime_problem.is_some()) => format!(
                "none of its {kernels} kernels{where_} runs: the CUDA runtime it links needs a newer driver (below)"
            ),
            Answer::No if run == 0 => format!("none of its {kernels} kernels{where_} runs"),
            Answer::Unknown if input.status == FileStatus::Invalid => format!(
                "{run} of {kernels} kernels{where_} run; part of it could not be read (errors below)"
            ),
            Answer::Unknown
                if on.iter().all(|o| o.answer != Answer::Unknown) && !input.variants.is_empty() =>
            {
                format!(
                    "{run} of {kernels} kernels{where_} run, and whether it does depends on which variant is loaded (below)"
                )
            }
            Answer::Unknown => format!(
                "{run} of {kernels} kernels{where_} run, if the driver loads them (below)"
            ),
            _ => format!("{run} of {kernels} kernels{where_} run"),
        };
        let elsewhere: usize = on.iter().map(|o| o.elsewhere()).sum();
        let how = match elsewhere {
            0 => how,
            n => format!("{how}; {n} are built for other GPUs only (below)"),
        };
        writeln!(
            out,
            "{}{package}: {} on {gpu}: {how}",
            input.label,
            answer.word()
        )?;
    } else {
        let corrupt = if input.status == FileStatus::Invalid {
            "UNKNOWN (corrupt): "
        } else {
            ""
        };
        writeln!(
            out,
            "{}{package}: {corrupt}{} kernels{where_}",
            input.label, kernels
        )?;
    }
    let many = libs.len() > 1 || input.report.members.len() > 1 || is_container(&input.report);
    if many {
        write_library_lines(out, input, options)?;
    }
    // An environment on one GPU answers on one screen: the lines above say which libraries
    // run and how; what does not, why and what to install follow (every detail with -v).
    if brief(libs, options) {
        // Variants speak in their own block; of a set, only the one known to be loaded here.
        let unloaded = |i: usize| {
            input
                .variants
                .iter()
                .any(|s| s.loaded != Some(i) && s.members.contains(&i))
        };
        let failing: Vec<&Library> = libs
            .iter()
            .enumerate()
            .filter(|(i, l)| !unloaded(*i) && l.on.first().is_some_and(|o| !runs(o.answer)))
            .map(|(_, l)| l)
            .collect();
        write_brief(out, &failing)?;
        writeln!(
            out,
            "  (-v: what each library was built for and with, and every reason)"
        )?;
    } else {
        write_details(out, libs, many, options)?;
    }
    if let (Some(required), Some(gaps)) = (&options.required, &input.audit.gaps) {
        write_gaps(
            out,
            required,
            gaps,
            &input.audit.declared,
            input.audit.kernels.is_empty(),
            options.all_kernels,
        )?;
    }
    write_errors(out, &input.audit.errors)?;
    if input.status == FileStatus::Invalid && input.audit.errors.is_empty() {
        let corrupt: Vec<String> = libs.iter().flat_map(|l| l.corrupt.clone()).collect();
        write_errors(out, &corrupt)?;
    }
    if options.verbose || options.all_kernels {
        write_detail(
            out,
            &input.report,
            &input.audit.kernels,
            &input.audit.columns,
            options.policy,
            options.all_kernels,
        )?;
    }
    Ok(())
}

/// Errors, each kind once: those that differ only in their offsets (a library with thousands
/// of entries corrupt alike) are one line with a count; `--json` keeps every one.
fn write_errors(out: &mut dyn Write, errors: &[String]) -> io::Result<()> {
    let mut kinds: Vec<(String, &String, usize)> = Vec::new();
    for e in errors {
        let kind = without_offsets(e);
        match kinds.iter_mut().find(|(k, _, _)| *k == kind) {
            Some((_, _, n)) => *n += 1,
            None => kinds.push((kind, e, 1)),
        }
    }
    for (_, first, n) in kinds {
        match n {
            1 => writeln!(out, "  error: {first}")?,
            n => writeln!(
                out,
                "  error: {first} (and {} alike at other offsets; --json lists each)",
                n - 1
            )?,
        }
    }
    Ok(())
}

/// `lib.so: image at 0x1f00: bad` -> `lib.so: image at 0x_: bad`.
fn without_offsets(e: &str) -> String {
    let mut out = String::with_capacity(e.len());
    let mut rest = e;
    while let Some(at) = rest.find("0x") {
        out.push_str(&rest[..at + 2]);
        rest = &rest[at + 2..];
        let digits = rest.chars().take_while(char::is_ascii_hexdigit).count();
        if digits > 0 {
            out.push('_');
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

/// Whether an answer is a pass: the library runs, or has nothing to launch.
fn runs(answer: Answer) -> bool {
    matches!(answer, Answer::Runs | Answer::RunsByPtx | Answer::NoKernels)
}

/// The distributions of `libs`, in order of first appearance.
fn distributions(libs: &[Library]) -> Vec<Option<&str>> {
    let mut out: Vec<Option<&str>> = Vec::new();
    for l in libs {
        if !out.contains(&l.package.as_deref()) {
            out.push(l.package.as_deref());
        }
    }
    out
}

/// Every library's block (libraries that would print the same share one).
fn write_details(
    out: &mut dyn Write,
    libs: &[Library],
    many: bool,
    options: &Options,
) -> io::Result<()> {
    for group in alike(libs) {
        let indent = if many { "    " } else { "  " };
        if many {
            match group.as_slice() {
                [one] => writeln!(out, "  {}:", one.name)?,
                [first, ..] => writeln!(
                    out,
                    "  {} libraries built alike ({}, ...):",
                    group.len(),
                    first.name
                )?,
                [] => {}
            }
        }
        write_group(out, &group, options, indent)?;
    }
    Ok(())
}

fn is_container(report: &FileReport) -> bool {
    matches!(
        report.format,
        fatkit_fatbin::Format::Zip | fatkit_fatbin::Format::Directory
    )
}

/// One line per library; grouped under its distribution where an input holds several (a
/// Python environment, a directory of installed wheels).
fn write_library_lines(
    out: &mut dyn Write,
    input: &AuditedInput,
    options: &Options,
) -> io::Result<()> {
    let libs = &input.libraries;
    let input_package = input.package.as_deref();
    let row = |l: &Library| {
        let mut row = vec![l.name.clone()];
        match (options.matrix, l.on.first()) {
            (false, Some(on)) => {
                row.push(on.answer.word().to_owned());
                row.push(match on.answer {
                    Answer::NoKernels => "nothing to launch".to_owned(),
                    _ if on.elsewhere() > 0 => format!(
                        "{} of {} kernels run ({} for other GPUs)",
                        on.run,
                        on.kernels,
                        on.elsewhere()
                    ),
                    _ => format!("{} of {} kernels run", on.run, on.kernels),
                });
                // How: a PTX JIT needs a driver; name it.
                if let (Some(n), true) = (&on.needs, on.by_ptx > 0) {
                    if let Some(last) = row.last_mut() {
                        last.push_str(&format!(", JIT needs {}", driver_words(n)));
                    }
                }
            }
            _ => {
                row.push(plural(l.kernels, "kernel", "kernels"));
                row.push(String::new());
            }
        }
        row
    };
    let packages = distributions(libs);
    let by_package = packages.len() > 1 || packages.first().copied().flatten() != input_package;
    if !by_package {
        let rows: Vec<Vec<String>> = libs.iter().map(row).collect();
        for line in table::render(&["", "", ""], &rows).lines().skip(1) {
            writeln!(out, "  {line}")?;
        }
        return write_variants(out, input, options);
    }
    // One table, so columns line up across distributions.
    let rows: Vec<Vec<String>> = libs.iter().map(row).collect();
    let rendered = table::render(&["", "", ""], &rows);
    let lines: Vec<&str> = rendered.lines().skip(1).collect();
    for package in packages {
        let mine: Vec<usize> = (0..libs.len())
            .filter(|&i| libs.get(i).is_some_and(|l| l.package.as_deref() == package))
            .collect();
        let answer = combine(package_answers(input, &mine).into_iter());
        let verdict = match (options.matrix, answer) {
            (false, Some(a)) => format!(" {}", a.word()),
            _ => String::new(),
        };
        // On one screen, a distribution whose every library passes is one line.
        let all_pass = package_answers(input, &mine).into_iter().all(runs);
        if brief(libs, options) && all_pass {
            let needs: Vec<&DriverNeed> = mine
                .iter()
                .filter_map(|&i| libs.get(i)?.on.first())
                .filter(|o| o.by_ptx > 0)
                .filter_map(|o| o.needs.as_ref())
                .collect();
            let jit = needs
                .iter()
                .max_by_key(|n| n.cuda)
                .map_or_else(String::new, |n| format!("; JIT needs {}", driver_words(n)));
            writeln!(
                out,
                "  {}:{verdict} ({}{jit})",
                package.unwrap_or("(no distribution)"),
                plural(mine.len(), "library", "libraries")
            )?;
            continue;
        }
        writeln!(
            out,
            "  {}:{verdict}",
            package.unwrap_or("(no distribution)")
        )?;
        for i in mine {
            if let Some(line) = lines.get(i) {
                writeln!(out, "    {line}")?;
            }
        }
    }
    write_variants(out, input, options)
}

/// The answers that decide the libraries `mine` (indices) of an input: one per set of
/// variants.
fn package_answers(input: &AuditedInput, mine: &[usize]) -> Vec<Answer> {
    let libs = &input.libraries;
    let in_set = |i: &usize| input.variants.iter().any(|s| s.members.contains(i));
    let mut out: Vec<Answer> = mine
        .iter()
        .filter(|i| !in_set(i))
        .filter_map(|&i| libs.get(i)?.on.first().map(|o| o.answer))
        .collect();
    out.extend(
        input
            .variants
            .iter()
            .filter(|s| s.members.iter().any(|i| mine.contains(i)))
            .filter_map(|s| variants::decided(libs, s, 0)),
    );
    out
}

/// Each set of variants: which run on the GPU, and which is loaded where that is known.
fn write_variants(out: &mut dyn Write, input: &AuditedInput, options: &Options) -> io::Result<()> {
    let libs = &input.libraries;
    for set in &input.variants {
        writeln!(
            out,
            "  {}: {} variants, of which one is loaded",
            set.pattern,
            set.members.len()
        )?;
        if options.gpus.len() == 1 && !options.matrix {
            let mut yes: Vec<String> = Vec::new();
            let mut no: Vec<String> = Vec::new();
            let mut unknown: Vec<String> = Vec::new();
            for (i, cuda) in set.members.iter().zip(&set.cuda) {
                let answer = libs.get(*i).and_then(|l| l.on.first()).map(|o| o.answer);
                match answer {
                    Some(a) if runs(a) => yes.push(format!("CUDA {cuda}")),
                    Some(Answer::Unknown) | None => unknown.push(format!("CUDA {cuda}")),
                    Some(_) => no.push(format!("CUDA {cuda}")),
                }
            }
            let list = |v: &[String]| match v {
                [] => "none".to_owned(),
                _ => v.join(", "),
            };
            let gpu = libs
                .first()
                .and_then(|l| l.on.first())
                .map_or_else(String::new, |o| o.gpu.clone());
            let unknown = match unknown.as_slice() {
                [] => String::new(),
                u => format!("; unknown: {}", list(u)),
            };
            writeln!(
                out,
                "    on {gpu}: run: {}; do not: {}{unknown}",
                list(&yes),
                list(&no)
            )?;
        }
        let loaded = set
            .loaded
            .and_then(|i| libs.get(i))
            .map_or_else(|| "not known".to_owned(), |l| l.name.clone());
        writeln!(out, "    loaded: {loaded} ({})", set.because)?;
        if options.gpus.len() == 1 && !options.matrix {
            if let Some(fix) = variants::fix(libs, set) {
                writeln!(out, "    fix:    {fix}")?;
            }
        }
    }
    Ok(())
}

/// Whether an input answers on one screen: an environment (several distributions) on one GPU,
/// without `--verbose`.
fn brief(libs: &[Library], options: &Options) -> bool {
    distributions(libs).len() > 1 && options.gpus.len() == 1 && !options.matrix && !options.verbose
}

/// On one screen, per distribution with libraries that do not pass: what they were built for,
/// the largest reason, and the fix.
fn write_brief(out: &mut dyn Write, libs: &[&Library]) -> io::Result<()> {
    for package in distributions_of(libs) {
        let mine: Vec<&Library> = libs
            .iter()
            .copied()
            .filter(|l| l.package.as_deref() == package)
            .collect();
        let Some(first) = mine.first() else { continue };
        let names: Vec<&str> = mine.iter().map(|l| l.name.as_str()).collect();
        let names = match names.as_slice() {
            [_] | [_, _] => names.join(", "),
            _ => format!("{} libraries", names.len()),
        };
        writeln!(
            out,
            "  {} ({names}):",
            package.unwrap_or("(no distribution)")
        )?;
        let cubins: TargetSet = mine.iter().flat_map(|l| l.cubins.iter()).collect();
        let ptx: TargetSet = mine.iter().flat_map(|l| l.ptx.iter()).collect();
        writeln!(
            out,
            "    built for:  cubin {}; PTX {}",
            targets_or(&cubins, "none"),
            targets_or(&ptx, "none")
        )?;
        // The largest reason over its libraries, with how many kernels it holds.
        let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
        for on in mine.iter().filter_map(|l| l.on.first()) {
            for g in &on.failing {
                *reasons.entry(g.reason.as_str()).or_default() += g.kernels.len();
            }
            if let Some(p) = &on.driver_problem {
                *reasons.entry(p.as_str()).or_default() += 0;
            }
        }
        if let Some((reason, n)) = reasons.iter().max_by_key(|(_, n)| **n) {
            let more = match reasons.len() {
                1 => String::new(),
                k => format!(
                    " (and {}; -v lists them)",
                    plural(k - 1, "more reason", "more reasons")
                ),
            };
            writeln!(out, "    why:        {n} kernels: {reason}{more}")?;
        }
        if let Some(fix) = mine
            .iter()
            .filter_map(|l| l.on.first()?.fix.as_ref())
            .next()
        {
            writeln!(
                out,
                "    fix:        {}",
                named_fix(fix, first.package.as_deref())
            )?;
        }
    }
    Ok(())
}

/// The distributions of `libs`, in order of first appearance.
fn distributions_of<'a>(libs: &[&'a Library]) -> Vec<Option<&'a str>> {
    let mut out: Vec<Option<&str>> = Vec::new();
    for l in libs {
        if !out.contains(&l.package.as_deref()) {
            out.push(l.package.as_deref());
        }
    }
    out
}

/// A fix naming what to install: the distribution, where the library belongs to one.
fn named_fix(fix: &str, package: Option<&str>) -> String {
    match package {
        Some(p) => fix.replace(
            "install a build made for",
            &format!(
                "install a build of {} made for",
                p.split(' ').next().unwrap_or(p)
            ),
        ),
        None => fix.to_owned(),
    }
}

/// Libraries that would print the same summary, in order of first appearance.
fn alike(libs: &[Library]) -> Vec<Vec<&Library>> {
    // What the block prints; a library that could not be read is never grouped.
    type Key = (
        TargetSet,
        TargetSet,
        Vec<String>,
        Vec<DriverNeed>,
        Vec<(Answer, TargetSet, Vec<String>)>,
    );
    let key = |x: &Library| -> Key {
        (
            x.cubins.clone(),
            x.ptx.clone(),
            x.toolkits.clone(),
            x.drivers.clone(),
            x.on.iter()
                .map(|o| {
                    (
                        o.answer,
                        o.images.clone(),
                        o.failing.iter().map(|f| f.reason.clone()).collect(),
                    )
                })
                .collect(),
        )
    };
    let mut groups: Vec<(Key, Vec<&Library>)> = Vec::new();
    for l in libs {
        let k = key(l);
        match groups.iter_mut().find(|(gk, g)| {
            l.corrupt.is_empty() && g.iter().all(|f| f.corrupt.is_empty()) && *gk == k
        }) {
            Some((_, g)) => g.push(l),
            None => groups.push((k, vec![l])),
        }
    }
    groups.into_iter().map(|(_, g)| g).collect()
}

fn targets_or(set: &TargetSet, none: &str) -> String {
    if set.is_empty() {
        none.to_owned()
    } else {
        set.to_string()
    }
}

/// `driver >= 580.65.06`, or `a CUDA 13.4 driver or newer` where the tables have no release.
fn driver_words(n: &DriverNeed) -> String {
    match n.release {
        Some(r) => format!("driver >= {r}"),
        None => format!("a CUDA {} driver or newer", n.cuda),
    }
}

/// [`driver_words`], with the CUDA level after a release.
fn need_words(n: &DriverNeed) -> String {
    match n.release {
        Some(_) => format!("{} (CUDA {})", driver_words(n), n.cuda),
        None => driver_words(n),
    }
}

fn write_group(
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
    let list = &first.arch_list;
    let pad = format!("{ind}            ");
    match (&list.torch, &list.torch_note) {
        (Some(t), _) => writeln!(out, "{ind}arch list:  TORCH_CUDA_ARCH_LIST=\"{t}\"")?,
        (None, Some(note)) => {
            writeln!(out, "{ind}arch list:  TORCH_CUDA_ARCH_LIST: none ({note})")?
        }
        (None, None) => {}
    }
    writeln!(out, "{pad}CMAKE_CUDA_ARCHITECTURES=\"{}\"", list.cmake)?;
    writeln!(out, "{pad}nvcc {}", list.nvcc)?;
    let general = &first.general;
    if general.families > 0 {
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
    for (i, d) in first.drivers.iter().enumerate() {
        let label = if i == 0 {
            "drivers:    "
        } else {
            "            "
        };
        let how = if d.what.starts_with("PTX") {
            format!(
                "{} PTX ({}): JIT needs {}",
                d.targets,
                d.what,
                need_words(d)
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
        write_on_gpu(out, on, &all, first.package.as_deref(), options, ind)?;
    }
    Ok(())
}

/// Without a GPU: the product compute capabilities on which every kernel runs, and those on
/// which some do not.
fn write_runs_on(
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
    let (every, some) = if first.general.aside {
        (
            "every kernel, parts built for other GPUs only aside",
            "some kernel of its general build",
        )
    } else {
        ("every kernel", "some kernel")
    };
    writeln!(out, "{ind}runs on:    CC {} ({every})", words(&yes))?;
    if !no.is_empty() {
        writeln!(
            out,
            "{ind}not on:     CC {} ({some} has no image for it; --gpu says which)",
            words(&no)
        )?;
    }
    Ok(())
}

fn write_on_gpu(
    out: &mut dyn Write,
    on: &OnGpu,
    all: &[&OnGpu],
    package: Option<&str>,
    options: &Options,
    ind: &str,
) -> io::Result<()> {
    let run: usize = all.iter().map(|o| o.run).sum();
    let label = format!("on {}:", on.gpu);
    let pad = " ".repeat(label.len() + 1);
    if run == 0 && on.kernels > 0 {
        writeln!(out, "{ind}{label} no kernel runs")?;
    }
    let kernels: usize = all.iter().map(|o| o.kernels).sum();
    let by_ptx: usize = all.iter().map(|o| o.by_ptx).sum();
    let declared: Vec<&(String, TargetSet)> = all.iter().flat_map(|o| &o.declared).collect();
    if run > 0 {
        let need = on
            .needs
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
    write_other_gpus(out, all, &pad, ind)?;
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
            writeln!(out, "{ind}{pad}  {kernel}: declared for {targets}")?;
        }
    }
    let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for o in all {
        for f in &o.failing {
            groups
                .entry(f.reason.as_str())
                .or_default()
                .extend(f.kernels.iter().map(String::as_str));
        }
    }
    if groups.is_empty() {
        return Ok(());
    }
    let mut groups: Vec<(&str, Vec<&str>)> = groups.into_iter().collect();
    groups.sort_by_key(|(_, k)| std::cmp::Reverse(k.len()));
    let failing: usize = groups.iter().map(|(_, k)| k.len()).sum();
    writeln!(
        out,
        "{ind}{failing} of {kernels} kernels do not run on {}, by reason:",
        on.gpu
    )?;
    let shown = if options.all_kernels {
        groups.len()
    } else {
        GROUPS_SHOWN
    };
    for (reason, names) in groups.iter().take(shown) {
        writeln!(out, "{ind}  {:>6}  {reason}", names.len())?;
        let listed: Vec<String> = if options.all_kernels {
            names.iter().map(|n| (*n).to_owned()).collect()
        } else {
            names.iter().take(NAMES_SHOWN).map(|n| shorten(n)).collect()
        };
        let more = names.len() - listed.len();
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
    if let Some(fix) = &on.fix {
        writeln!(out, "{ind}fix:        {}", named_fix(fix, package))?;
    }
    Ok(())
}

/// Kernels built for other GPUs only, by the targets they are built for: counted and named
/// apart from failures.
fn write_other_gpus(out: &mut dyn Write, all: &[&OnGpu], pad: &str, ind: &str) -> io::Result<()> {
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
    writeln!(
        out,
        "{ind}{pad}(not failures: the library launches them on the GPUs they are built for; here one would fail; --strict counts them)"
    )
}

/// A kernel name cut to fit a line (C++ template names run to hundreds of characters).
fn shorten(name: &str) -> String {
    const MAX: usize = 60;
    if name.chars().count() <= MAX {
        return name.to_owned();
    }
    let cut: String = name.chars().take(MAX).collect();
    format!("{cut}...")
}

fn write_matrix(out: &mut dyn Write, audited: &Audited, options: &Options) -> io::Result<()> {
    let libraries: Vec<&Library> = audited.inputs.iter().flat_map(|i| &i.libraries).collect();
    if libraries.is_empty() {
        return writeln!(out, "GPU x library: no device code found");
    }
    let short = |l: &Library| {
        l.name
            .rsplit(['/', '('])
            .next()
            .unwrap_or(&l.name)
            .trim_end_matches(')')
            .to_owned()
    };
    let shorts: Vec<String> = libraries.iter().map(|l| short(l)).collect();
    let distinct = |names: &[String]| {
        let set: std::collections::BTreeSet<&String> = names.iter().collect();
        set.len() == names.len()
    };
    let full: Vec<String> = libraries.iter().map(|l| l.name.clone()).collect();
    let columns: Vec<String> = if distinct(&shorts) {
        shorts
    } else if distinct(&full) {
        full
    } else {
        audited
            .inputs
            .iter()
            .enumerate()
            .flat_map(|(i, input)| {
                input
                    .libraries
                    .iter()
                    .map(move |l| format!("{}:{}", i + 1, short(l)))
            })
            .collect()
    };
    let driver = options.driver.map_or_else(
        || "driver not given".to_owned(),
        |d| format!("driver {}", d.describe()),
    );
    writeln!(
        out,
        "GPU x library ({driver}): cubin = every kernel runs from a cubin; PTX JIT = some only by PTX compiled at load, with that driver or newer; no (N) = N kernels do not run (parts built only for other GPUs aside; --strict counts them)"
    )?;
    let mut headers: Vec<&str> = vec!["GPU", "CC"];
    headers.extend(columns.iter().map(String::as_str));
    let cells = matrix_cells(audited);
    let rows: Vec<Vec<String>> = options
        .gpus
        .iter()
        .zip(&cells)
        .map(|(gpu, row)| {
            let mut r = vec![gpu.name.clone(), gpu.cc.to_string()];
            r.extend(row.iter().map(|c| c.text()));
            r
        })
        .collect();
    for line in table::render(&headers, &rows).lines() {
        writeln!(out, "  {line}")?;
    }
    Ok(())
}

fn write_gaps(
    out: &mut dyn Write,
    required: &TargetSet,
    gaps: &[Gap],
    declared: &[Gap],
    no_kernels: bool,
    all_kernels: bool,
) -> io::Result<()> {
    if no_kernels {
        return writeln!(
            out,
            "  require {required}: FAILS: no kernels found to check"
        );
    }
    if gaps.is_empty() {
        writeln!(out, "  require {required}: every kernel covered")?;
    } else {
        writeln!(out, "  require {required}: {} gap(s):", gaps.len())?;
        let mut by: BTreeMap<(fatkit_arch::Target, &str), Vec<&str>> = BTreeMap::new();
        for g in gaps {
            by.entry((g.target, g.reason.as_str()))
                .or_default()
                .push(&g.kernel);
        }
        for ((target, reason), kernels) in by {
            let shown: Vec<&str> = if all_kernels {
                kernels.clone()
            } else {
                kernels.iter().take(NAMES_SHOWN).copied().collect()
            };
            let more = kernels.len() - shown.len();
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            writeln!(
                out,
                "    {target}: {}: {reason}: {}{more}",
                plural(kernels.len(), "kernel", "kernels"),
                shown.join(", ")
            )?;
        }
    }
    let mut by_kernel: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for g in declared {
        by_kernel
            .entry(&g.kernel)
            .or_default()
            .push(g.target.to_string());
    }
    if !by_kernel.is_empty() {
        writeln!(
            out,
            "  declared by the crate, not gaps ({} kernel(s) built for fewer targets by design):",
            by_kernel.len()
        )?;
        for (kernel, targets) in by_kernel {
            writeln!(out, "    {kernel}: not built for {}", targets.join(" "))?;
        }
    }
    Ok(())
}

fn origin_name(origin: &Origin) -> String {
    match origin {
        Origin::File => "file".to_owned(),
        Origin::Section(name) => name.clone(),
        Origin::Scan => "embedded (scan)".to_owned(),
    }
}

fn count_containers(report: &FileReport) -> usize {
    report.containers.len() + report.members.iter().map(count_containers).sum::<usize>()
}

/// `--verbose`: every image, then the kernel x compute capability table.
fn write_detail(
    out: &mut dyn Write,
    report: &FileReport,
    kernels: &[KernelImages],
    columns: &[Cc],
    policy: Policy,
    all_kernels: bool,
) -> io::Result<()> {
    let images = report.all_images();
    writeln!(
        out,
        "  {:?}, {} container(s), {} image(s), {} kernel(s):",
        report.format,
        count_containers(report),
        images.len(),
        kernels.len()
    )?;
    if images.is_empty() {
        return Ok(());
    }
    let rows: Vec<Vec<String>> = images
        .iter()
        .map(|(member, origin, e)| {
            let target = e
                .target
                .map_or_else(|| format!("arch {}", e.arch), |t| t.to_string());
            let isa = e.ptx_isa.map_or_else(|| "-".to_owned(), |i| i.to_string());
            let toolkit = e.toolkit.clone().unwrap_or_else(|| "-".to_owned());
            let compression = format!("{:?}", e.compression).to_lowercase();
            let kernels = match &e.error {
                Some(err) => format!("unreadable: {err}"),
                None => e.kernels.len().to_string(),
            };
            let place = if *member == report.name {
                origin_name(origin)
            } else {
                format!(
                    "{} {}",
                    member.strip_prefix(report.name.as_str()).unwrap_or(member),
                    origin_name(origin)
                )
            };
            vec![
                place,
                format!("{:#x}", e.offset),
                e.kind.name(),
                target,
                isa,
                toolkit,
                compression,
                e.stored_size.to_string(),
                kernels,
            ]
        })
        .collect();
    for line in table::render(
        &[
            "WHERE",
            "OFFSET",
            "KIND",
            "TARGET",
            "PTX ISA",
            "TOOLKIT",
            "COMPRESSION",
            "BYTES",
            "KERNELS",
        ],
        &rows,
    )
    .lines()
    {
        writeln!(out, "  {line}")?;
    }
    if kernels.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "  coverage by compute capability (cubin / ptx = JIT only / - = missing / ? = unknown):"
    )?;
    let mut headers: Vec<String> = vec!["KERNEL".to_owned()];
    headers.extend(columns.iter().map(|cc| cc.to_string()));
    let header_refs: Vec<&str> = headers.iter().map(String::as_str).collect();
    let limit = if all_kernels { usize::MAX } else { 40 };
    let rows: Vec<Vec<String>> = kernels
        .iter()
        .take(limit)
        .map(|k| {
            let mut row = vec![k.name.clone()];
            row.extend(columns.iter().map(|&cc| match k.cell(cc, policy) {
                Cell::Cubin(_) => "cubin".to_owned(),
                Cell::Ptx(_) => "ptx".to_owned(),
                Cell::Unknown => "?".to_owned(),
                Cell::Missing => "-".to_owned(),
            }));
            row
        })
        .collect();
    for line in table::render(&header_refs, &rows).lines() {
        writeln!(out, "  {line}")?;
    }
    if kernels.len() > limit {
        writeln!(
            out,
            "  ... and {} more kernels (--all-kernels lists them, --json has them all)",
            kernels.len() - limit
        )?;
    }
    Ok(())
}
