//! The driver floors (`fatkit_arch::floor::Floors`) as text: the one wording `package`'s
//! COVERAGE.md, `plan`, `profiles` and `doctor` print; their JSON is the same data.

use fatkit_arch::floor::{Basis, Floor, Floors};
use fatkit_arch::Cc;

fn ccs(list: &[Cc]) -> String {
    list.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The release's floor in one line: `580.65.06 (CUDA 13.0), set by CC 7.5 8.0 ...`.
pub fn release(floors: &Floors) -> String {
    match &floors.release {
        Some(r) => format!("{}, set by CC {}", r.floor, ccs(&r.set_by)),
        None => "none: no GPU of the tables loads an image".to_owned(),
    }
}

/// Every floor below the release's, with the GPUs it holds for, highest first:
/// `525.60.13 (CUDA 12.0) on CC 7.0 (sm_70 cubin from CUDA 12.9)`.
pub fn lower(floors: &Floors) -> Vec<String> {
    let top = floors.release.as_ref().map(|r| r.floor.cuda);
    let mut groups: Vec<(Floor, Vec<Cc>, Vec<Basis>)> = Vec::new();
    for g in floors.gpus.iter().filter(|g| Some(g.floor.cuda) != top) {
        let same = |f: &Floor| (f.cuda, f.release) == (g.floor.cuda, g.floor.release);
        match groups.iter_mut().find(|(f, ..)| same(f)) {
            Some((_, list, bases)) => {
                list.push(g.cc);
                bases.push(g.floor.basis);
            }
            None => groups.push((g.floor, vec![g.cc], vec![g.floor.basis])),
        }
    }
    groups.sort_by_key(|(f, ..)| std::cmp::Reverse(f.cuda));
    groups
        .iter_mut()
        .map(|(f, list, bases)| {
            bases.sort();
            bases.dedup();
            let bases: Vec<String> = bases.iter().map(|b| b.to_string()).collect();
            format!("{f} on CC {} ({})", ccs(list), bases.join(", "))
        })
        .collect()
}

/// What GPUs newer than the tables need: the PTX they JIT-compile.
pub fn newer(floors: &Floors) -> String {
    match &floors.newer_gpus {
        Some(f) => format!("{f}, for {}", f.basis),
        None => "nothing loads there (no PTX a later GPU JIT-compiles)".to_owned(),
    }
}

/// The floors as lines (no trailing newline), each after `indent`: the release's, the lower
/// ones, and GPUs newer than the tables.
pub fn lines(floors: &Floors, indent: &str) -> Vec<String> {
    let mut out = vec![format!("{indent}release:       {}", release(floors))];
    out.extend(
        lower(floors)
            .into_iter()
            .map(|l| format!("{indent}lower:         {l}")),
    );
    out.push(format!("{indent}newer GPUs:    {}", newer(floors)));
    out
}

/// One row per GPU: its compute capability, its floor, and the images it loads.
pub fn gpu_rows(floors: &Floors) -> Vec<(Cc, String, String)> {
    floors
        .gpus
        .iter()
        .map(|g| {
            let loads: Vec<String> = g.loads.iter().map(|b| b.to_string()).collect();
            let why = match g.floor.basis {
                Basis::Runtime { .. } => {
                    format!("{}; {}", loads.join(", "), g.floor.basis)
                }
                _ => loads.join(", "),
            };
            (g.cc, g.floor.to_string(), why)
        })
        .collect()
}
