//! One line per library, its variants, and libraries built alike shown once.

use super::*;

/// One line per library; grouped under its distribution where an input holds several (a
/// Python environment, a directory of installed wheels).
pub(super) fn write_library_lines(
    out: &mut dyn Write,
    input: &AuditedInput,
    options: &Options,
) -> io::Result<()> {
    let libs = &input.libraries;
    let input_package = input.package.as_deref();
    let stands = Stands::of(input, options);
    let row = |l: &Library| stands.row(l, options);
    // A distribution's rows: one per library; past ROWS_SHOWN (without -v), one per set of
    // libraries built alike, with their count.
    // On one screen, a library with nothing to launch goes without a line.
    let shown = |l: &&Library| {
        !brief(libs, options) || l.on.first().is_none_or(|o| o.answer != Answer::NoKernels)
    };
    let rows_of = |mine: &[usize]| -> Vec<Vec<String>> {
        let many = mine.len() > ROWS_SHOWN && !options.verbose && !options.all_kernels;
        let mine = mine.iter().filter_map(|&i| libs.get(i)).filter(shown);
        if !many {
            return mine.map(row).collect();
        }
        alike_rows(mine, &row)
    };
    let dists = &input.answer.distributions;
    let by_package =
        dists.len() > 1 || dists.first().and_then(|d| d.name.as_deref()) != input_package;
    if !by_package {
        let all: Vec<usize> = (0..libs.len()).collect();
        let rows = rows_of(&all);
        for line in table::render(&["", "", ""], &rows).lines().skip(1) {
            writeln!(out, "  {line}")?;
        }
        write_compilers(
            out,
            dists.first().and_then(|d| d.on.first()),
            ("  ", options),
        )?;
        return write_variants(out, input, options);
    }
    // One table, so columns line up across distributions; each distribution's lines after.
    let row_sets: Vec<Vec<Vec<String>>> = dists.iter().map(|d| rows_of(&d.libraries)).collect();
    let rows: Vec<Vec<String>> = row_sets.iter().flatten().cloned().collect();
    let rendered = table::render(&["", "", ""], &rows);
    let mut lines = rendered.lines().skip(1);
    let brief = brief(libs, options);
    for (d, set) in dists.iter().zip(&row_sets) {
        let mine_lines: Vec<&str> = lines.by_ref().take(set.len()).collect();
        let package = d.name.as_deref().unwrap_or("(no distribution)");
        let answer = d.on.first();
        let verdict = match (options.matrix, answer) {
            (false, Some(w))
                if w.verdict == crate::answer::Verdict::No && !w.holds_nothing.is_empty() =>
            {
                " NO: it holds nothing for this GPU, every library is built for other GPUs only"
                    .to_owned()
            }
            (false, Some(w)) => format!(" {}", w.verdict.word()),
            _ => String::new(),
        };
        // Of a lock, a distribution with no wheel: why, on its line, under any view.
        let verdict = match &d.unbuilt {
            Some(why) if verdict.is_empty() => format!(" {why}"),
            Some(why) => format!("{verdict}: {why}"),
            None => verdict,
        };
        // On one screen, a distribution that passes is one line.
        let all_pass = answer.is_some_and(|w| w.verdict.passes() && w.failing_libraries.is_empty());
        if brief && all_pass && dists.len() > 1 {
            let jit = answer
                .and_then(|w| w.jit_needs.as_ref())
                .map_or_else(String::new, |n| format!("; JIT needs {}", driver_words(n)));
            match (d.libraries.len(), answer.map(run_time_lines)) {
                // Compilers alone: said on the distribution's line.
                (0, Some(lines)) if lines.len() == 1 => {
                    let line = lines.concat();
                    writeln!(out, "  {package}:{verdict}, {line}")?;
                    continue;
                }
                (0, _) => writeln!(out, "  {package}:{verdict}")?,
                (n, _) => writeln!(
                    out,
                    "  {package}:{verdict} ({}{jit})",
                    plural(n, "library", "libraries")
                )?,
            }
            write_compilers(out, answer, ("    ", options))?;
            continue;
        }
        writeln!(out, "  {package}:{verdict}")?;
        for line in mine_lines {
            writeln!(out, "    {line}")?;
        }
        write_compilers(out, answer, ("    ", options))?;
    }
    write_variants(out, input, options)
}

/// Every distribution's run-time compilers and NVRTC programs, where no library line is shown.
pub(super) fn write_run_time(
    out: &mut dyn Write,
    input: &AuditedInput,
    options: &Options,
) -> io::Result<()> {
    for d in &input.answer.distributions {
        write_compilers(out, d.on.first(), ("  ", options))?;
    }
    Ok(())
}

/// A distribution's run-time compilers on the GPU: the ones it runs there (`-v`: every one).
fn write_compilers(
    out: &mut dyn Write,
    answer: Option<&crate::answer::Whole>,
    (indent, options): (&str, &Options),
) -> io::Result<()> {
    let Some(w) = answer.filter(|_| !options.matrix) else {
        return Ok(());
    };
    let verbose = w
        .compilers
        .iter()
        .filter(|c| !c.chosen && options.verbose)
        .map(super::answer::compiler_line);
    for line in run_time_lines(w).into_iter().chain(verbose) {
        writeln!(out, "{indent}{line}")?;
    }
    Ok(())
}

/// The lines of a whole's compilers it runs and its NVRTC programs.
fn run_time_lines(w: &crate::answer::Whole) -> Vec<String> {
    let compilers = w.compilers.iter().filter(|c| c.chosen);
    compilers
        .map(super::answer::compiler_line)
        .chain(w.nvrtc_sources.iter().map(super::answer::nvrtc_line))
        .collect()
}

/// How each library stands in its package's answer on the GPU asked about: set aside whole
/// (for other or newer GPUs), or data of a package that compiles its kernels at run time.
struct Stands<'a> {
    aside: std::collections::HashMap<&'a str, &'a crate::summary::Narrow>,
    data: std::collections::HashSet<Option<&'a str>>,
}

impl<'a> Stands<'a> {
    fn of(input: &'a AuditedInput, options: &Options) -> Stands<'a> {
        let libs = &input.libraries;
        let aside = input
            .answer
            .on
            .first()
            .filter(|_| !options.matrix)
            .map(|w| {
                w.aside
                    .libraries
                    .iter()
                    .filter_map(|(i, n)| Some((libs.get(*i)?.name.as_str(), n)))
                    .collect()
            })
            .unwrap_or_default();
        let data = input
            .answer
            .distributions
            .iter()
            .filter(|d| {
                d.on.first()
                    .is_some_and(|w| w.verdict == crate::answer::Verdict::CompilesAtRunTime)
            })
            .filter(|_| !options.matrix)
            .map(|d| d.name.as_deref())
            .collect();
        Stands { aside, data }
    }

    /// Library `l`'s line.
    fn row(&self, l: &Library, options: &Options) -> Vec<String> {
        if self.data.contains(&l.package.as_deref()) {
            return vec![
                l.name.clone(),
                "data".to_owned(),
                format!(
                    "{}, not launched as built",
                    plural(l.kernels, "kernel", "kernels")
                ),
            ];
        }
        library_row(l, self.aside.get(l.name.as_str()).copied(), options)
    }
}

/// A library's line: its name, its answer on the GPU (or why its package sets it aside), and
/// how many of its kernels run.
fn library_row(
    l: &Library,
    aside: Option<&crate::summary::Narrow>,
    options: &Options,
) -> Vec<String> {
    let mut row = vec![l.name.clone()];
    match (options.matrix, l.on.first(), aside) {
        (false, Some(_), Some(narrow)) => {
            row.push("aside".to_owned());
            row.push(match narrow {
                crate::summary::Narrow::NewerGpus { floor, .. } => {
                    format!("{} kernels, for CC {floor} and later", l.kernels)
                }
                n => format!("{} kernels, for {} only", l.kernels, n.targets()),
            });
        }
        (false, Some(on), None) => {
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
}

/// Library lines shown per distribution before libraries built alike share one.
const ROWS_SHOWN: usize = 24;

/// One row per set of libraries built alike (the same answer, cubins and PTX), in the order
/// of their first; a set of several named by its count and its first library's file name.
fn alike_rows<'a>(
    libs: impl Iterator<Item = &'a Library>,
    row: &dyn Fn(&Library) -> Vec<String>,
) -> Vec<Vec<String>> {
    type Key<'a> = (Option<Answer>, &'a TargetSet, &'a TargetSet);
    let mut sets: Vec<(Key<'a>, Vec<&'a Library>)> = Vec::new();
    let mut index: BTreeMap<Key<'a>, usize> = BTreeMap::new();
    for l in libs {
        let key = (l.on.first().map(|o| o.answer), &l.cubins, &l.ptx);
        match index.get(&key) {
            Some(&i) => {
                if let Some((_, set)) = sets.get_mut(i) {
                    set.push(l);
                }
            }
            None => {
                index.insert(key, sets.len());
                sets.push((key, vec![l]));
            }
        }
    }
    sets.into_iter()
        .filter_map(|(_, set)| {
            let first = set.first()?;
            let mut r = row(first);
            if let [_, _, ..] = set.as_slice() {
                let leaf = first.name.rsplit('/').next().unwrap_or(&first.name);
                if let Some(name) = r.first_mut() {
                    *name = format!("{} libraries like .../{leaf}", set.len());
                }
                let on: Vec<&OnGpu> = set.iter().filter_map(|l| l.on.first()).collect();
                if let (Some(counts), Some(o)) = (r.get_mut(2), on.first()) {
                    let (run, kernels) = on
                        .iter()
                        .fold((0, 0), |(r, k), o| (r + o.run, k + o.kernels));
                    let elsewhere: usize = on.iter().map(|o| o.elsewhere()).sum();
                    *counts = match o.answer {
                        Answer::NoKernels => "nothing to launch".to_owned(),
                        _ if elsewhere > 0 => {
                            format!("{run} of {kernels} kernels run ({elsewhere} for other GPUs)")
                        }
                        _ => format!("{run} of {kernels} kernels run"),
                    };
                    if let (Some(n), true) = (&o.needs, o.by_ptx > 0) {
                        counts.push_str(&format!(", JIT needs {}", driver_words(n)));
                    }
                }
            }
            Some(r)
        })
        .collect()
}

/// Each set of variants: which run on the GPU, and which is loaded where that is known.
pub(super) fn write_variants(
    out: &mut dyn Write,
    input: &AuditedInput,
    options: &Options,
) -> io::Result<()> {
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

/// Whether an input answers on one screen: several libraries (a wheel, an environment) on one
/// GPU, without `--verbose`.
pub(super) fn brief(libs: &[Library], options: &Options) -> bool {
    // No library: compilers alone, answered by the package's answer.
    libs.len() != 1 && options.gpus.len() == 1 && !options.matrix && !options.verbose
}

/// On one screen, per distribution with libraries that do not pass: what they were built for,
/// the largest reason, and the fix.
pub(super) fn write_brief(out: &mut dyn Write, libs: &[&Library]) -> io::Result<()> {
    // Each distribution's libraries, found in one pass.
    let mut of: std::collections::HashMap<Option<&str>, Vec<&Library>> = Default::default();
    for l in libs {
        of.entry(l.package.as_deref()).or_default().push(l);
    }
    // On one screen, the largest distributions' blocks (-v: every one).
    let mut failing: Vec<(Option<&str>, Vec<&Library>)> = distributions_of(libs)
        .into_iter()
        .map(|p| (p, of.remove(&p).unwrap_or_default()))
        .filter(|(_, mine)| !mine.is_empty())
        .collect();
    failing
        .sort_by_key(|(_, mine)| std::cmp::Reverse(mine.iter().map(|l| l.kernels).sum::<usize>()));
    let left = failing.len().saturating_sub(BRIEF_BLOCKS);
    for (package, mine) in failing.into_iter().take(BRIEF_BLOCKS) {
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
        let mut reasons: BTreeMap<Failing, usize> = BTreeMap::new();
        for on in mine.iter().filter_map(|l| l.on.first()) {
            for g in &on.failing {
                *reasons.entry(g.cause.clone()).or_default() += g.kernels.len();
            }
            if let Some(p) = &on.driver_problem {
                *reasons.entry(Failing::Driver(p.clone())).or_default() += 0;
            }
        }
        // In the order of their words; of the largest, the last.
        let mut reasons: Vec<(String, usize)> = reasons
            .into_iter()
            .map(|(r, n)| (r.to_string(), n))
            .collect();
        reasons.sort();
        if let Some((reason, n)) = reasons.iter().max_by_key(|(_, n)| *n) {
            let more = match reasons.len() {
                1 => String::new(),
                k => format!(
                    " (and {}; -v lists them)",
                    plural(k - 1, "more reason", "more reasons")
                ),
            };
            writeln!(out, "    why:        {n} kernels: {reason}{more}")?;
        }
    }
    if left > 0 {
        writeln!(
            out,
            "  ... and {} that do not run here (-v shows each)",
            plural(left, "more distribution", "more distributions")
        )?;
    }
    Ok(())
}

/// How many distributions that do not run are explained on one screen, the largest first.
const BRIEF_BLOCKS: usize = 3;

/// The distributions of `libs`, in order of first appearance.
pub(super) fn distributions_of<'a>(libs: &[&'a Library]) -> Vec<Option<&'a str>> {
    let mut seen = std::collections::HashSet::new();
    libs.iter()
        .map(|l| l.package.as_deref())
        .filter(|p| seen.insert(*p))
        .collect()
}

/// Libraries that would print the same summary, in order of first appearance.
pub(super) fn alike(libs: &[Library]) -> Vec<Vec<&Library>> {
    // What the block prints; a library that could not be read is never grouped.
    type Key = (
        TargetSet,
        TargetSet,
        Vec<String>,
        Vec<DriverNeed>,
        Vec<(Answer, TargetSet, Vec<Failing>)>,
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
                        o.failing.iter().map(|f| f.cause.clone()).collect(),
                    )
                })
                .collect(),
        )
    };
    // A group by its key: one lookup per library, however many groups there are.
    let mut groups: Vec<Vec<&Library>> = Vec::new();
    let mut by_key: BTreeMap<Key, usize> = BTreeMap::new();
    for l in libs {
        if !l.corrupt.is_empty() {
            groups.push(vec![l]);
            continue;
        }
        let k = key(l);
        match by_key.get(&k).and_then(|&g| groups.get_mut(g)) {
            Some(g) => g.push(l),
            None => {
                by_key.insert(k, groups.len());
                groups.push(vec![l]);
            }
        }
    }
    groups
}

pub(super) fn targets_or(set: &TargetSet, none: &str) -> String {
    if set.is_empty() {
        none.to_owned()
    } else {
        set.to_string()
    }
}

/// `driver >= 580.65.06`, or `a CUDA 13.4 driver or newer` where the tables have no release.
pub(super) fn driver_words(n: &DriverNeed) -> String {
    match n.release {
        Some(r) => format!("driver >= {r}"),
        None => format!("a CUDA {} driver or newer", n.cuda),
    }
}

/// [`driver_words`], with the CUDA level after a release.
pub(super) fn need_words(n: &DriverNeed) -> String {
    match n.release {
        Some(_) => format!("{} (CUDA {})", driver_words(n), n.cuda),
        None => driver_words(n),
    }
}
