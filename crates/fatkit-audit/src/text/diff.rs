//! `fatkit diff`'s text: the answer to "does the new release still run where the old one
//! did?" first, then each library's regressions, then what improved; the words of
//! [`crate::diff::Diff`], which decides every change and whether it is a regression.

use std::io::{self, Write};

use crate::diff::{Change, Detail, Diff, Kind, LibraryDiff};

use super::libraries::need_words;

/// At most this many kernel names a line: the JSON has them all.
const NAMES: usize = 5;

/// Writes `diff`; `counted`: the kinds of regression that fail the run.
pub fn write_diff(out: &mut dyn Write, diff: &Diff, counted: &[Kind]) -> io::Result<()> {
    write_head(out, diff, counted)?;
    write_changes(out, diff, counted)
}

/// The answer to "does it still run where the last one did?", and per GPU what does not.
fn write_head(out: &mut dyn Write, diff: &Diff, counted: &[Kind]) -> io::Result<()> {
    let regressions = diff.regressions(counted);
    let on = match diff.gpus.len() {
        0 => "no GPU".to_owned(),
        1 => format!("the GPU asked about ({})", diff.gpus.join(", ")),
        n => format!("the {n} GPUs asked about ({})", diff.gpus.join(", ")),
    };
    let changes = |n: usize| match n {
        1 => "1 change that counts".to_owned(),
        n => format!("{n} changes that count"),
    };
    let worse: Vec<&Change> = diff
        .answers
        .iter()
        .filter(|c| c.kind == Kind::AnswerWorse)
        .collect();
    match (regressions, diff.lost.is_empty() && worse.is_empty()) {
        (0, _) => writeln!(out, "{} runs wherever {} ran, on {on}", diff.new, diff.old)?,
        // No library is lost on a GPU asked about: what counts is in what it is built for
        // (PTX for newer GPUs, cubins of GPUs not asked about) or what it needs (a driver).
        (n, true) => writeln!(
            out,
            "{} REGRESSES from {}: {}, none of them a library lost on {on} (below)",
            diff.new,
            diff.old,
            changes(n)
        )?,
        (n, false) => writeln!(
            out,
            "{} REGRESSES from {}: {}, judged on {on}",
            diff.new,
            diff.old,
            changes(n)
        )?,
    }
    // Where a library is lost on the GPU, its line below says more than the answer's.
    let explained = |c: &Change| {
        diff.lost
            .iter()
            .any(|l| Some(l.gpu.as_str()) == c.gpu.as_deref())
    };
    for c in worse.iter().filter(|c| !explained(c)) {
        if let Detail::Verdict { old, new, by } = &c.detail {
            let by = match by.is_empty() {
                true => String::new(),
                false => format!(": {} does not run there", first(by.clone())),
            };
            writeln!(
                out,
                "  {}: {} where it was {}{by}",
                c.gpu.as_deref().unwrap_or_default(),
                new.word(),
                old.word()
            )?;
        }
    }
    for lost in &diff.lost {
        let of = match lost.distributions.len() {
            1 => String::new(),
            n => format!(" of {n} distributions"),
        };
        writeln!(
            out,
            "  {}: {} librar{}{of} no longer run{}: {}",
            lost.gpu,
            lost.libraries,
            if lost.libraries == 1 { "y" } else { "ies" },
            if lost.libraries == 1 { "s" } else { "" },
            first(lost.distributions.clone())
        )?;
    }
    Ok(())
}

/// Each library's regressions, then what improved, then how many are unchanged.
fn write_changes(out: &mut dyn Write, diff: &Diff, counted: &[Kind]) -> io::Result<()> {
    let part = |regression: bool| -> Vec<(&LibraryDiff, &Change)> {
        diff.libraries
            .iter()
            .flat_map(|l| l.changes.iter().map(move |c| (l, c)))
            .filter(|(_, c)| c.regression == regression)
            .collect()
    };
    for (title, regression) in [("regressions", true), ("improved", false)] {
        let changes = part(regression);
        let better: Vec<&Change> = diff
            .answers
            .iter()
            .filter(|c| !regression && c.kind == Kind::AnswerBetter)
            .collect();
        if changes.is_empty() && better.is_empty() {
            continue;
        }
        writeln!(out, "\n{title}:")?;
        for c in better {
            writeln!(out, "  {}: {}", diff.new, change_words(c))?;
        }
        for (l, c) in changes {
            let ignored = regression && !counted.contains(&c.kind);
            writeln!(
                out,
                "  {}: {}{}",
                library_words(l),
                change_words(c),
                if ignored { " (not counted)" } else { "" }
            )?;
        }
    }
    writeln!(
        out,
        "\nunchanged: {} librar{}",
        diff.unchanged,
        if diff.unchanged == 1 { "y" } else { "ies" }
    )
}

fn library_words(l: &LibraryDiff) -> String {
    match &l.package {
        Some(p) => format!("{} ({p})", l.name),
        None => l.name.clone(),
    }
}

/// Kernels as people read them: `a, b, c and 2 more`.
fn names(kernels: &[String]) -> String {
    first(
        kernels
            .iter()
            .map(|k| fatkit_fatbin::names::demangled(k))
            .collect(),
    )
}

/// The first [`NAMES`] of `items`: `a, b, c and 2 more`.
fn first(items: Vec<String>) -> String {
    let more = items.len().saturating_sub(NAMES);
    let shown: Vec<String> = items.into_iter().take(NAMES).collect();
    match more {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

fn change_words(c: &Change) -> String {
    let gpu = c.gpu.as_deref().unwrap_or("");
    match (&c.kind, &c.detail) {
        (Kind::GpuLost, Detail::Answer { old, new }) => {
            format!("no longer runs on {gpu} ({} -> {})", old.word(), new.word())
        }
        (Kind::GpuGained, Detail::Answer { old, new }) => {
            format!("now runs on {gpu} ({} -> {})", old.word(), new.word())
        }
        (Kind::KernelsLost, Detail::Kernels { kernels }) => format!(
            "on {gpu}, {} kernel{} no longer run{}: {}",
            kernels.len(),
            if kernels.len() == 1 { "" } else { "s" },
            if kernels.len() == 1 { "s" } else { "" },
            names(kernels)
        ),
        (Kind::KernelsLost, Detail::Count { old, new }) => {
            format!("on {gpu}, {new} kernels run where {old} did")
        }
        (Kind::KernelsGained, Detail::Kernels { kernels }) => format!(
            "on {gpu}, {} kernel{} run now that did not: {}",
            kernels.len(),
            if kernels.len() == 1 { "" } else { "s" },
            names(kernels)
        ),
        (Kind::TargetsDropped, Detail::Targets { targets }) => format!("cubins dropped: {targets}"),
        (Kind::PtxRemoved, Detail::Targets { targets }) => format!("PTX removed: {targets}"),
        (Kind::TargetsAdded, Detail::Targets { targets }) => format!("cubins added: {targets}"),
        (Kind::PtxAdded, Detail::Targets { targets }) => format!("PTX added: {targets}"),
        (Kind::FloorRaised | Kind::FloorLowered, Detail::Floor { old, new }) => format!(
            "on {gpu}, needs {} where it needed {}",
            need_words(new),
            need_words(old)
        ),
        (Kind::StubsAdded | Kind::StubsRemoved, Detail::Count { old, new }) => format!(
            "on {gpu}, {new} kernels are stubs in the image the driver loads, where {old} were"
        ),
        (Kind::NowByPtx, _) => format!(
            "on {gpu}, kernels that ran from a cubin now run only by PTX the driver compiles at load"
        ),
        (Kind::NowFromCubin, _) => {
            format!("on {gpu}, kernels that ran only by PTX now run from a cubin")
        }
        (Kind::AnswerWorse | Kind::AnswerBetter, Detail::Verdict { old, new, .. }) => {
            format!("on {gpu}, {} where it was {}", new.word(), old.word())
        }
        (Kind::LibraryGone, _) => "gone: the new release has no such library".to_owned(),
        (Kind::LibraryAdded, _) => "new: the old release had no such library".to_owned(),
        (kind, _) => kind.name().to_owned(),
    }
}
