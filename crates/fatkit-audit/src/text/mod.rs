//! The text rendering of an audit: the answer first (one line per input, one per library),
//! then what the libraries were built for and with, grouped when alike, the kernels that do
//! not run grouped by why, and the fix; every image and kernel only with `--verbose`.

use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::coverage::{Cell, FileStatus, Gap, GapCause, KernelImages};
use crate::summary::{Answer, DriverNeed, Failing, Library, Needs, OnGpu};
use fatkit_arch::products;
use fatkit_arch::rules::Policy;
use fatkit_arch::{Cc, TargetSet};
use fatkit_fatbin::inspect::FileReport;
use fatkit_fatbin::Origin;

use crate::{matrix_cells, variants, Audited, AuditedInput, Options};

mod answer;
mod detail;
mod diff;
pub use diff::write_diff;
pub mod floors;
mod group;
mod libraries;
pub mod table;

use detail::*;
use group::*;
use libraries::*;

/// Kernel names shown per group of failing kernels without `--all-kernels`.
const NAMES_SHOWN: usize = 3;
/// Groups of failing kernels shown without `--all-kernels`.
const GROUPS_SHOWN: usize = 6;

/// Writes `audited` as text for people to `out`: its one rendering beside `Audited::json`.
pub fn write(out: &mut dyn Write, audited: &Audited, options: &Options) -> io::Result<()> {
    if options.here {
        let gpus: Vec<String> = options
            .gpus
            .iter()
            .map(|g| format!("{} (CC {})", g.name, g.cc))
            .collect();
        let driver = options.driver.map_or_else(
            || "driver not read".to_owned(),
            |d| format!("driver {}", d.describe()),
        );
        writeln!(
            out,
            "this machine: {}, {driver} (from nvidia-smi; --gpu NAME asks about another GPU)\n",
            gpus.join(", ")
        )?;
    }
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

fn write_input(out: &mut dyn Write, input: &AuditedInput, options: &Options) -> io::Result<()> {
    let libs = &input.libraries;
    // Not read to the end (its budget spent): nothing of it is an answer, only why.
    if let Some(why) = &input.report.refused {
        let package = input
            .package
            .as_ref()
            .map_or_else(String::new, |p| format!(" ({p})"));
        return writeln!(out, "{}{package}: UNKNOWN: {why}", input.label);
    }
    write_headline(out, input, options)?;
    let whole = one_gpu(input, options).filter(|_| !options.matrix);
    // On one screen, what to do comes right after the answer; under a blocker, then only what
    // it stops (-v: everything).
    let shown = if options.all_kernels { usize::MAX } else { 3 };
    if let Some(w) = whole.filter(|_| brief(libs, options)) {
        answer::write_fixes(out, w, shown)?;
        if w.blocker.is_some() {
            answer::write_blocked(out, input, w)?;
            writeln!(
                out,
                "  (-v: every library, and what it would do with a newer driver)"
            )?;
            return Ok(());
        }
    }
    let many = libs.len() > 1 || input.report.members.len() > 1 || is_container(&input.report);
    if many {
        write_library_lines(out, input, options)?;
    } else {
        libraries::write_run_time(out, input, options)?;
    }
    // An environment on one GPU answers on one screen: the lines above say which libraries
    // run and how; what does not, why and what to install follow (every detail with -v).
    match whole {
        Some(w) if brief(libs, options) => {
            let failing: Vec<&Library> = w
                .failing_libraries
                .iter()
                .filter_map(|&i| libs.get(i))
                .collect();
            write_brief(out, &failing)?;
            answer::write_aside(out, input, w)?;
            writeln!(
                out,
                "  (-v: what each library was built for and with, and every reason)"
            )?;
        }
        _ => write_details(out, libs, many, options)?,
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
    for line in libs.iter().flat_map(|l| &l.tile_ir) {
        writeln!(out, "  not judged: {line}")?;
    }
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

/// The input's first line: on one GPU, its answer ([`answer::write_headline`]); else how many
/// kernels it holds.
fn write_headline(out: &mut dyn Write, input: &AuditedInput, options: &Options) -> io::Result<()> {
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
    if libs.is_empty() && input.answer.distributions.is_empty() {
        // A text file given is read for device code, not as a list of packages, unless its
        // name says it is one.
        let hint = match input.label.ends_with(".txt") || input.label.ends_with(".in") {
            true => " (read as a file: a requirements file is read as one when named requirements*.txt or requirements*.in, or in a requirements/ directory)",
            false => "",
        };
        return writeln!(out, "{}{package}: no device code found{hint}", input.label);
    }
    if let (Some(whole), false) = (one_gpu(input, options), options.matrix) {
        return answer::write_headline(out, input, whole);
    }
    let corrupt = if input.status == FileStatus::Invalid {
        "UNKNOWN (corrupt): "
    } else {
        ""
    };
    // Several GPUs asked about (`--gpu` twice, `--matrix`): the answer on each, grouped;
    // then, on each GPU it does not pass, why and the first fix.
    if input.answer.on.len() > 1 && corrupt.is_empty() {
        writeln!(
            out,
            "{}{package}: {} ({kernels} kernels{where_}; each GPU below)",
            input.label,
            answer::on_several(&input.answer.on)
        )?;
        for whole in input.answer.on.iter().filter(|w| !w.verdict.passes()) {
            writeln!(out, "  {}", answer::answer_words(input, whole))?;
            answer::write_fixes(out, whole, 1)?;
        }
        return Ok(());
    }
    // No GPU asked about and none on this machine: what it is built for, and no answer.
    let unasked = match input.answer.on.is_empty() && corrupt.is_empty() {
        true => {
            "; no GPU asked about, so no answer (--gpu NAME, repeated for several, or --matrix)"
        }
        false => "",
    };
    writeln!(
        out,
        "{}{package}: {corrupt}{} kernels{where_}{unasked}",
        input.label, kernels
    )
}

/// The input's answer on the one GPU asked about, if one was.
fn one_gpu<'a>(input: &'a AuditedInput, options: &Options) -> Option<&'a crate::answer::Whole> {
    match (options.gpus.len(), input.answer.on.as_slice()) {
        (1, [whole]) => Some(whole),
        _ => None,
    }
}

/// What libraries are built for, most first: `13706 for sm_100, 1952 for sm_103a`.
fn built_for_words(libs: &[Library]) -> String {
    let mut of: BTreeMap<String, usize> = BTreeMap::new();
    for l in libs {
        let targets: TargetSet = l.cubins.iter().chain(l.ptx.iter()).collect();
        *of.entry(targets_or(&targets, "nothing readable"))
            .or_default() += 1;
    }
    let mut of: Vec<(String, usize)> = of.into_iter().collect();
    of.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    let mut words: Vec<String> = of
        .iter()
        .take(GROUPS_SHOWN)
        .map(|(t, n)| format!("{n} for {t}"))
        .collect();
    if of.len() > GROUPS_SHOWN {
        words.push(format!("{} more", of.len() - GROUPS_SHOWN));
    }
    words.join(", ")
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

/// Whether an answer is a pass: the library runs, has nothing to launch, or is built for other
/// GPUs only (whether its distribution holds anything for this one is said of the
/// distribution: [`crate::collection::none_for`]).
fn runs(answer: Answer) -> bool {
    matches!(
        answer,
        Answer::Runs | Answer::RunsByPtx | Answer::NoKernels | Answer::OtherGpus
    )
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
        fatkit_fatbin::Format::Zip
            | fatkit_fatbin::Format::Directory
            | fatkit_fatbin::Format::Image
    )
}
