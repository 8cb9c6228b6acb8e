//! One GPU's changes of a library between two releases: whether it still runs there, and how
//! (from cubins or by PTX), which kernels stopped or started running, stubs, the driver floor.

use std::collections::BTreeSet;

use super::{change, Change, Detail, Kind};
use crate::summary::{Answer, OnGpu};

/// Whether every kernel runs.
fn runs(a: Answer) -> bool {
    matches!(a, Answer::Runs | Answer::RunsByPtx)
}

/// The kernels that do not run on a GPU, by name.
fn failing(on: &OnGpu) -> BTreeSet<&str> {
    on.failing
        .iter()
        .flat_map(|g| g.kernels.iter().map(String::as_str))
        .collect()
}

/// The kernels of a library set aside on a GPU: built for other GPUs.
fn aside(on: &OnGpu) -> BTreeSet<&str> {
    on.for_other_gpus
        .iter()
        .flat_map(|g| g.kernels.iter().map(String::as_str))
        .collect()
}

/// One GPU's changes of a library, `a` before and `b` after, each with the library's kernels
/// by name: a kernel no longer runs only where it was there before, and runs now only where it
/// is there now.
pub(super) fn gpu_changes(
    (a, in_a): (&OnGpu, &BTreeSet<String>),
    (b, in_b): (&OnGpu, &BTreeSet<String>),
    out: &mut Vec<Change>,
) {
    let gpu = Some(b.gpu.as_str());
    let answers = Detail::Answer {
        old: a.answer,
        new: b.answer,
    };
    match (runs(a.answer), runs(b.answer)) {
        (true, false) => out.push(change(Kind::GpuLost, gpu, answers.clone())),
        (false, true) => out.push(change(Kind::GpuGained, gpu, answers.clone())),
        _ => {}
    }
    // Running both times, the how: every kernel from a cubin, or some only by PTX.
    match (a.answer, b.answer) {
        (Answer::Runs, Answer::RunsByPtx) => out.push(change(Kind::NowByPtx, gpu, answers)),
        (Answer::RunsByPtx, Answer::Runs) => out.push(change(Kind::NowFromCubin, gpu, answers)),
        _ => {}
    }
    let (was, is) = (failing(a), failing(b));
    // A kernel set aside (built for other GPUs) neither ran nor runs: one that failed and is
    // now set aside does not run now, and one set aside that now fails did not run before.
    let (aside_a, aside_b) = (aside(a), aside(b));
    let names = |set: Vec<&&str>| set.into_iter().map(|k| (*k).to_owned()).collect();
    // Nothing ran before (a driver that predates the GPU, say): nothing can be lost; nothing
    // runs now: nothing gained.
    let lost: Vec<String> = match a.run {
        0 => Vec::new(),
        _ => names(
            is.difference(&was)
                .filter(|k| !aside_a.contains(*k) && in_a.contains(**k))
                .collect(),
        ),
    };
    let gained: Vec<String> = match b.run {
        0 => Vec::new(),
        _ => names(
            was.difference(&is)
                .filter(|k| !aside_b.contains(*k) && in_b.contains(**k))
                .collect(),
        ),
    };
    if !lost.is_empty() {
        out.push(change(
            Kind::KernelsLost,
            gpu,
            Detail::Kernels { kernels: lost },
        ));
    } else if b.run < a.run && b.kernels >= a.kernels && !runs(b.answer) {
        // Fewer of as many kernels run and not every one does, none named: some that ran no
        // longer do. (A library whose authors removed kernels is not counted, nor one whose
        // new kernels are for other GPUs: every kernel meant for this one still runs.)
        let count = Detail::Count {
            old: a.run,
            new: b.run,
        };
        out.push(change(Kind::KernelsLost, gpu, count));
    }
    if !gained.is_empty() {
        out.push(change(
            Kind::KernelsGained,
            gpu,
            Detail::Kernels { kernels: gained },
        ));
    }
    let count = Detail::Count {
        old: a.compiled_out,
        new: b.compiled_out,
    };
    match b.compiled_out.cmp(&a.compiled_out) {
        std::cmp::Ordering::Greater => out.push(change(Kind::StubsAdded, gpu, count)),
        std::cmp::Ordering::Less => out.push(change(Kind::StubsRemoved, gpu, count)),
        std::cmp::Ordering::Equal => {}
    }
    if let (Some(old), Some(new)) = (&a.floor, &b.floor) {
        let floor = || Detail::Floor {
            old: Box::new(old.clone()),
            new: Box::new(new.clone()),
        };
        match new.cuda.cmp(&old.cuda) {
            std::cmp::Ordering::Greater => out.push(change(Kind::FloorRaised, gpu, floor())),
            std::cmp::Ordering::Less => out.push(change(Kind::FloorLowered, gpu, floor())),
            std::cmp::Ordering::Equal => {}
        }
    }
}
