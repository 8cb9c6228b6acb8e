//! The whole input's answer per GPU, before and after: what a library added that does not run
//! there changes, though no library's own answer does.

use super::{change, distribution_of, Change, Detail, Kind};
use crate::Audited;

/// Per GPU, the whole input's answer (the worst over its inputs) before and after, where one
/// passes and the other does not, or NO becomes PARTLY or the other way.
pub(super) fn answer_changes(old: &Audited, new: &Audited) -> Vec<Change> {
    use crate::answer::Verdict;
    let rank = |v: Verdict| match v {
        Verdict::No => 0,
        Verdict::Partly | Verdict::Unknown => 1,
        _ => 2,
    };
    let worst = |a: &Audited, gpu: &str| {
        a.inputs
            .iter()
            .flat_map(|i| &i.answer.on)
            .filter(|w| w.gpu == gpu)
            .map(|w| w.verdict)
            .min_by_key(|v| rank(*v))
    };
    let gpus: Vec<&str> = new
        .inputs
        .iter()
        .flat_map(|i| &i.answer.on)
        .map(|w| w.gpu.as_str())
        .fold(Vec::new(), |mut seen, g| {
            if !seen.contains(&g) {
                seen.push(g);
            }
            seen
        });
    let mut out = Vec::new();
    for gpu in gpus {
        let (Some(a), Some(b)) = (worst(old, gpu), worst(new, gpu)) else {
            continue;
        };
        let kind = match rank(b).cmp(&rank(a)) {
            std::cmp::Ordering::Less => Kind::AnswerWorse,
            std::cmp::Ordering::Greater => Kind::AnswerBetter,
            std::cmp::Ordering::Equal => continue,
        };
        let by = match kind {
            Kind::AnswerWorse => newly_failing(old, new, gpu),
            _ => Vec::new(),
        };
        out.push(change(
            kind,
            Some(gpu),
            Detail::Verdict { old: a, new: b, by },
        ));
    }
    out
}

/// The distributions of `new` whose answer on `gpu` does not pass, where in `old` it passed
/// or they were not there: a distribution known across its CUDA majors as libraries are
/// paired (`nvidia_cudnn_cu12` and `_cu13` are one, [`super::distribution_of`]).
fn newly_failing(old: &Audited, new: &Audited, gpu: &str) -> Vec<String> {
    let passed = |key: &str| -> Option<bool> {
        old.inputs
            .iter()
            .flat_map(|i| &i.answer.distributions)
            .filter(|d| d.name.as_deref().and_then(distribution_of).as_deref() == Some(key))
            .flat_map(|d| &d.on)
            .find(|w| w.gpu == gpu)
            .map(|w| w.verdict.passes())
    };
    let mut out: Vec<String> = Vec::new();
    for d in new.inputs.iter().flat_map(|i| &i.answer.distributions) {
        let (Some(name), Some(key)) = (&d.name, d.name.as_deref().and_then(distribution_of)) else {
            continue;
        };
        let fails_now = d.on.iter().any(|w| w.gpu == gpu && !w.verdict.passes());
        if fails_now && passed(&key).unwrap_or(true) && !out.contains(name) {
            out.push(name.clone());
        }
    }
    out
}
