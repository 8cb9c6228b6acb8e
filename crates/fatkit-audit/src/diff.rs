//! What changed between two releases (issue 57): two audits of inputs of one kind, on the same
//! GPUs and driver, compared library by library. Per GPU, whether each library still runs
//! there, which kernels stopped running, whether the oldest driver that runs it rose, and
//! whether kernels became stubs in the image the driver loads; per library, the cubin and PTX
//! targets gone or added, and libraries gone or added. Each change is a [`Kind`], which says
//! whether it is a regression; the command line counts the kinds it is asked to.

use std::collections::BTreeSet;

use fatkit_arch::TargetSet;
use fatkit_fatbin::Format;
use serde::Serialize;

use crate::record::{cuda_suffix, name_and_version};
use crate::summary::{Answer, DriverNeed, Library};
use crate::{Audited, Options};

/// A kind of change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A library ran on a GPU (every kernel, from a cubin or by PTX) and no longer does.
    GpuLost,
    /// Kernels that ran on a GPU no longer run there.
    KernelsLost,
    /// Cubin targets the old library had and the new one lacks.
    TargetsDropped,
    /// PTX the old library had and the new one lacks: GPUs newer than its cubins lose their
    /// fallback.
    PtxRemoved,
    /// The oldest driver that runs the library on a GPU is newer.
    FloorRaised,
    /// Kernels the image the driver loads on a GPU holds only as a stub, which it did not.
    StubsAdded,
    /// Kernels that ran on a GPU from a cubin now run there only by PTX the driver compiles at
    /// load (each start compiles them, or reads the driver's JIT cache; the driver must know
    /// the PTX's ISA).
    NowByPtx,
    /// A library of the old input is not in the new one.
    LibraryGone,
    /// The answer for the whole input on a GPU is worse (yes -> PARTLY, NO or UNKNOWN;
    /// PARTLY -> NO): a library it added, or one it changed, no longer lets it run there.
    AnswerWorse,
    /// A library now runs on a GPU where it did not.
    GpuGained,
    /// Kernels now run on a GPU where they did not.
    KernelsGained,
    /// Cubin targets added.
    TargetsAdded,
    /// PTX added.
    PtxAdded,
    /// The oldest driver that runs the library on a GPU is older.
    FloorLowered,
    /// Fewer stubs in the image the driver loads.
    StubsRemoved,
    /// Kernels that ran on a GPU only by PTX now run there from a cubin.
    NowFromCubin,
    /// A library the old input did not have.
    LibraryAdded,
    /// The answer for the whole input on a GPU is better.
    AnswerBetter,
}

impl Kind {
    /// Every kind, regressions first.
    pub const ALL: [Kind; 18] = [
        Kind::AnswerWorse,
        Kind::GpuLost,
        Kind::KernelsLost,
        Kind::TargetsDropped,
        Kind::PtxRemoved,
        Kind::FloorRaised,
        Kind::StubsAdded,
        Kind::NowByPtx,
        Kind::LibraryGone,
        Kind::GpuGained,
        Kind::KernelsGained,
        Kind::TargetsAdded,
        Kind::PtxAdded,
        Kind::FloorLowered,
        Kind::StubsRemoved,
        Kind::NowFromCubin,
        Kind::LibraryAdded,
        Kind::AnswerBetter,
    ];

    /// Whether the change makes the new release run where the old one did less well.
    pub fn regression(self) -> bool {
        matches!(
            self,
            Kind::AnswerWorse
                | Kind::GpuLost
                | Kind::KernelsLost
                | Kind::TargetsDropped
                | Kind::PtxRemoved
                | Kind::FloorRaised
                | Kind::StubsAdded
                | Kind::NowByPtx
                | Kind::LibraryGone
        )
    }

    /// Its name on the command line and in JSON (`gpu-lost`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::AnswerWorse => "answer-worse",
            Kind::AnswerBetter => "answer-better",
            Kind::GpuLost => "gpu-lost",
            Kind::KernelsLost => "kernels-lost",
            Kind::TargetsDropped => "targets-dropped",
            Kind::PtxRemoved => "ptx-removed",
            Kind::FloorRaised => "floor-raised",
            Kind::StubsAdded => "stubs-added",
            Kind::NowByPtx => "now-by-ptx",
            Kind::LibraryGone => "library-gone",
            Kind::GpuGained => "gpu-gained",
            Kind::KernelsGained => "kernels-gained",
            Kind::TargetsAdded => "targets-added",
            Kind::PtxAdded => "ptx-added",
            Kind::FloorLowered => "floor-lowered",
            Kind::StubsRemoved => "stubs-removed",
            Kind::NowFromCubin => "now-from-cubin",
            Kind::LibraryAdded => "library-added",
        }
    }

    /// The kind a name (`gpu-lost`) names.
    pub fn named(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// What a change is about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "of")]
pub enum Detail {
    /// The library's answer on the GPU, before and after.
    Answer { old: Answer, new: Answer },
    /// Kernels, by name.
    Kernels { kernels: Vec<String> },
    /// Targets.
    Targets { targets: TargetSet },
    /// The oldest driver that runs what runs, before and after.
    Floor {
        old: Box<DriverNeed>,
        new: Box<DriverNeed>,
    },
    /// How many kernels, before and after.
    Count { old: usize, new: usize },
    /// Nothing more than the kind.
    Library,
    /// The whole input's answer, before and after, and the distributions whose own answer
    /// there does not pass now and did before (or that are new).
    Verdict {
        old: crate::answer::Verdict,
        new: crate::answer::Verdict,
        by: Vec<String>,
    },
}

/// One change of one library, on one GPU or on none (its targets, its presence).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Change {
    pub kind: Kind,
    pub regression: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    pub detail: Detail,
}

/// A library's changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LibraryDiff {
    /// As the new input shows it (the old one's, when it is gone).
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    pub changes: Vec<Change>,
}

/// What changed from `old` to `new`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Diff {
    pub old: String,
    pub new: String,
    /// The GPUs both were judged on.
    pub gpus: Vec<String>,
    /// Libraries in both, unchanged.
    pub unchanged: usize,
    /// Libraries with a change.
    pub libraries: Vec<LibraryDiff>,
    /// Per GPU, what no longer runs there: the answer first ([`Diff::lost_by_gpu`]).
    pub lost: Vec<Lost>,
    /// Per GPU, the whole input's answer where it changed for better or worse: a library
    /// added that does not run there changes no library's answer, only this one.
    pub answers: Vec<Change>,
}

/// A GPU the new release loses libraries on: the distributions they are of (a library of
/// none by its name), each once, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Lost {
    pub gpu: String,
    pub libraries: usize,
    pub distributions: Vec<String>,
}

impl Diff {
    /// Per GPU, what no longer runs there (`gpu-lost`), in the order of the GPUs.
    pub fn lost_by_gpu(&self) -> Vec<Lost> {
        let mut out: Vec<Lost> = Vec::new();
        for gpu in &self.gpus {
            let mut lost = Lost {
                gpu: gpu.clone(),
                libraries: 0,
                distributions: Vec::new(),
            };
            for l in &self.libraries {
                let here = l
                    .changes
                    .iter()
                    .any(|c| c.kind == Kind::GpuLost && c.gpu.as_deref() == Some(gpu));
                if !here {
                    continue;
                }
                lost.libraries += 1;
                let of = l
                    .package
                    .as_deref()
                    .map_or(l.name.as_str(), |p| name_and_version(p).0);
                if !lost.distributions.iter().any(|d| d == of) {
                    lost.distributions.push(of.to_owned());
                }
            }
            if lost.libraries > 0 {
                out.push(lost);
            }
        }
        out
    }

    /// The changes of the kinds in `counted` that are regressions.
    pub fn regressions(&self, counted: &[Kind]) -> usize {
        self.libraries
            .iter()
            .flat_map(|l| &l.changes)
            .chain(&self.answers)
            .filter(|c| c.regression && counted.contains(&c.kind))
            .count()
    }
}

/// The options both releases are audited with: on `gpus` (one of each generation, Volta to
/// Blackwell, when none is asked) and `driver`, every kernel named.
pub fn options(
    mut gpus: Vec<fatkit_arch::products::Gpu>,
    driver: Option<fatkit_arch::DriverVersion>,
    lock: fatkit_lock::Settings,
) -> Options {
    if gpus.is_empty() {
        gpus = fatkit_arch::products::set("generations").unwrap_or_default();
    }
    Options {
        policy: fatkit_arch::rules::Policy::default(),
        required: None,
        driver,
        matrix: true,
        gpus,
        here: false,
        verbose: false,
        all_kernels: true,
        strict: false,
        lock,
        kernel_table: false,
    }
}

/// The regressions `names` (`--fail-on`) count, every one when none is named; else the name
/// that is no kind of regression.
pub fn counted(names: &[String]) -> Result<Vec<Kind>, String> {
    if names.is_empty() {
        return Ok(Kind::ALL.into_iter().filter(|k| k.regression()).collect());
    }
    names
        .iter()
        .map(|name| {
            Kind::named(name.trim())
                .filter(|k| k.regression())
                .ok_or_else(|| name.clone())
        })
        .collect()
}

/// A distribution's name across releases: without its version and without the CUDA major
/// NVIDIA's wheels carry in their names (`nvidia_cublas_cu12 12.4.5.8` and `nvidia_cublas
/// 13.4.1.3` are one).
fn distribution(l: &Library) -> Option<String> {
    distribution_of(l.package.as_deref()?)
}

fn distribution_of(package: &str) -> Option<String> {
    let (name, _) = name_and_version(package);
    Some(cuda_suffix(name).map_or(name, |(base, _)| base).to_owned())
}

/// A library's file name across releases: its last path part with a shared object's version
/// left out (`nvidia/cublas/lib/libcublas.so.12` and `nvidia/cu13/lib/libcublas.so.13` are
/// `libcublas.so`).
fn file_key(l: &Library) -> String {
    file_key_of(&l.name)
}

fn file_key_of(name: &str) -> String {
    let name = name.strip_suffix(')').unwrap_or(name);
    let leaf = name.rsplit(['/', '(', ':']).next().unwrap_or(name);
    match leaf.find(".so.") {
        Some(at)
            if leaf[at + 4..]
                .bytes()
                .all(|b| b.is_ascii_digit() || b == b'.') =>
        {
            leaf[..at + 3].to_owned()
        }
        _ => leaf.to_owned(),
    }
}

/// Pairs of the old and the new libraries: the same name in the same distribution first, then
/// the same file in the same distribution (a new version, a new directory) where that pairs
/// one with one; the rest gone or added. Two single-library inputs are one library, whatever
/// their names (two builds of one binary).
fn pairs<'a>(
    olds: &[&'a Library],
    news: &[&'a Library],
) -> Vec<(Option<&'a Library>, Option<&'a Library>)> {
    if let ([o], [n]) = (olds, news) {
        return vec![(Some(*o), Some(*n))];
    }
    let mut taken: BTreeSet<usize> = BTreeSet::new();
    let mut out: Vec<(Option<&Library>, Option<&Library>)> = Vec::new();
    let mut unmatched = Vec::new();
    for o in olds {
        let exact = news.iter().enumerate().find(|(i, n)| {
            !taken.contains(i) && n.name == o.name && distribution(n) == distribution(o)
        });
        match exact {
            Some((i, n)) => {
                taken.insert(i);
                out.push((Some(*o), Some(*n)));
            }
            None => unmatched.push(*o),
        }
    }
    let key = |l: &Library| (distribution(l), file_key(l));
    let dir = |l: &Library| l.name.rsplit_once('/').map(|(d, _)| d.to_owned());
    for &o in &unmatched {
        let k = key(o);
        let mut candidates: Vec<(usize, &Library)> = news
            .iter()
            .enumerate()
            .filter(|(i, n)| !taken.contains(i) && key(n) == k)
            .map(|(i, n)| (i, *n))
            .collect();
        let mut olds_alike = unmatched.iter().filter(|x| key(x) == k).count();
        // Several of one file (a library's links, a copy per directory): the one of the same
        // directory.
        if candidates.len() > 1 || olds_alike > 1 {
            candidates.retain(|(_, n)| dir(n) == dir(o));
            olds_alike = unmatched
                .iter()
                .filter(|x| key(x) == k && dir(x) == dir(o))
                .count();
        }
        match candidates.as_slice() {
            [(i, n)] if olds_alike == 1 => {
                taken.insert(*i);
                out.push((Some(o), Some(*n)));
            }
            _ => out.push((Some(o), None)),
        }
    }
    out.extend(
        news.iter()
            .enumerate()
            .filter(|(i, _)| !taken.contains(i))
            .map(|(_, n)| (None, Some(*n))),
    );
    out
}

/// Every library of an audit.
fn libraries(audited: &Audited) -> Vec<&Library> {
    audited
        .inputs
        .iter()
        .flat_map(|i| i.libraries.iter())
        .collect()
}

/// What kind of input an audit read: `diff` compares an input only with one of its kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    Binary,
    Wheel,
    Directory,
    Image,
    /// A lock or requirements file: the wheels it pins, read as a directory of them is.
    Lock,
}

impl InputKind {
    fn of(audited: &Audited) -> Option<InputKind> {
        let first = audited.inputs.first()?;
        if !first.pinned.is_empty() {
            return Some(InputKind::Lock);
        }
        Some(match first.report.format {
            Format::Zip => InputKind::Wheel,
            Format::Directory => InputKind::Directory,
            Format::Image => InputKind::Image,
            _ => InputKind::Binary,
        })
    }

    pub fn words(self) -> &'static str {
        match self {
            InputKind::Binary => "a binary",
            InputKind::Wheel => "a wheel",
            InputKind::Directory => "a directory",
            InputKind::Image => "a container image",
            InputKind::Lock => "a lock",
        }
    }
}

/// Why two audits have no diff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unfit {
    /// Inputs of two kinds: what changed between them is no release's change.
    Kinds(InputKind, InputKind),
    /// An input unknown or corrupt: no change of it can be said.
    Invalid,
}

/// What changed from `old` to `new`, two audits made with the same options of inputs of one
/// kind, both read.
pub fn diff(old: &Audited, new: &Audited) -> Result<Diff, Unfit> {
    if [old, new].iter().any(|a| a.exit() == crate::Exit::Invalid) {
        return Err(Unfit::Invalid);
    }
    // A lock is the set of wheels it would install: compared with an environment (what was
    // installed) as with another lock.
    let set = |k: InputKind| matches!(k, InputKind::Lock | InputKind::Directory);
    match (InputKind::of(old), InputKind::of(new)) {
        (Some(a), Some(b)) if a != b && !(set(a) && set(b)) => Err(Unfit::Kinds(a, b)),
        _ => Ok(diff_of(old, new)),
    }
}

fn diff_of(old: &Audited, new: &Audited) -> Diff {
    let (olds, news) = (libraries(old), libraries(new));
    let label = |a: &Audited| {
        a.inputs
            .iter()
            .map(|i| i.label.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let gpus = news
        .first()
        .or(olds.first())
        .map(|l| l.on.iter().map(|o| o.gpu.clone()).collect())
        .unwrap_or_default();
    let pairs = pairs(&olds, &news);
    let mut out = Diff {
        old: label(old),
        new: label(new),
        gpus,
        unchanged: 0,
        libraries: Vec::new(),
        lost: Vec::new(),
        answers: answer_changes(old, new),
    };
    for (o, n) in pairs {
        let Some(shown) = n.or(o) else { continue };
        let changes = match (o, n) {
            (Some(o), Some(n)) => library_changes(o, n),
            (Some(_), None) => vec![change(Kind::LibraryGone, None, Detail::Library)],
            _ => vec![change(Kind::LibraryAdded, None, Detail::Library)],
        };
        if changes.is_empty() {
            out.unchanged += 1;
            continue;
        }
        out.libraries.push(LibraryDiff {
            name: shown.name.clone(),
            package: shown.package.clone(),
            changes,
        });
    }
    out.lost = out.lost_by_gpu();
    out
}

fn change(kind: Kind, gpu: Option<&str>, detail: Detail) -> Change {
    Change {
        kind,
        regression: kind.regression(),
        gpu: gpu.map(str::to_owned),
        detail,
    }
}

/// The targets of `a` that `b` lacks.
fn minus(a: &TargetSet, b: &TargetSet) -> TargetSet {
    a.iter().filter(|t| !b.contains(*t)).collect()
}

/// One library's changes: its targets, then per GPU.
fn library_changes(o: &Library, n: &Library) -> Vec<Change> {
    let mut out = Vec::new();
    let targets = [
        (minus(&o.cubins, &n.cubins), Kind::TargetsDropped),
        (minus(&o.ptx, &n.ptx), Kind::PtxRemoved),
        (minus(&n.cubins, &o.cubins), Kind::TargetsAdded),
        (minus(&n.ptx, &o.ptx), Kind::PtxAdded),
    ];
    for (targets, kind) in targets {
        if !targets.is_empty() {
            out.push(change(kind, None, Detail::Targets { targets }));
        }
    }
    for (a, b) in o.on.iter().zip(&n.on) {
        gpu_changes((a, &o.names), (b, &n.names), &mut out);
    }
    out
}

mod answers;
mod gpu;
use answers::answer_changes;
use gpu::gpu_changes;

#[cfg(test)]
mod tests;
