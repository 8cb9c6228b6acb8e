//! The target planner (issue 45): of the targets a package could ship, each with what it adds
//! to the package as shipped, the set (cubins, one PTX, a compression) that covers the most GPUs
//! of the product tables natively, then by PTX JIT, then with a cubin built for exactly their
//! compute capability, then GPUs newer than the tables (any PTX: the driver JIT-compiles it for
//! a later architecture), within a budget; then the one that asks least of the driver (no
//! compression before LZ4 before ZSTD), then the smaller.
//! An exact search: every subset of the cubins, with each PTX and compression allowed, is
//! weighed (the candidates are a few dozen at most; coverage is a bit mask per target, so one
//! weighing is a few instructions). Coverage is the driver's rules (`rules::select`) on each
//! product compute capability, target by target: a GPU runs natively when some cubin of the set
//! loads on it, by JIT when no cubin does and the PTX does (with the driver floor, if given).

use std::fmt;

use crate::driver::DriverVersion;
use crate::products;
use crate::profile::Compression;
use crate::rules::{self, Device, Image, Policy, Selection};
use crate::toolkit::{CudaVersion, PtxIsa};
use crate::{Cc, ImageKind, Target, TargetSet};

pub use crate::size_budget::{parse_size, Budget, Shipped, CRATES_IO_LIMIT};

/// One target a package could ship, and what it adds to the package's size as shipped under
/// each compression (`None` where it was not measured, or cannot be).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub target: Target,
    /// A PTX target's ISA (what the driver must load).
    pub ptx_isa: Option<PtxIsa>,
    /// A cubin's newest toolkit (from its notes): a driver older than that CUDA major loads
    /// none of it (minor version compatibility, docs/ARCH_RULES.md section 3).
    pub toolkit: Option<CudaVersion>,
    /// Bytes added, by compression: `[none, lz4, zstd]`.
    pub bytes: [Option<u64>; 3],
}

/// What the plan must meet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Goal {
    /// The most the package may weigh, shipped.
    pub budget: u64,
    /// What the package weighs without any image (its sources, metadata, the rest), by
    /// compression `[none, lz4, zstd]`: with what the images share across targets, which no
    /// one target adds, where it was measured so.
    pub base: [u64; 3],
    /// GPUs (by compute capability) that must run from a cubin.
    pub native: Vec<Cc>,
    /// The oldest driver its users have: cubins from a newer CUDA major and PTX it cannot JIT
    /// do not count, and a compression it cannot load is not chosen.
    pub driver: Option<DriverVersion>,
}

/// One choice, weighed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub targets: TargetSet,
    pub compress: Compression,
    /// The package's size as shipped: the base and every chosen target's bytes.
    pub bytes: u64,
    /// Product compute capabilities (newest first) that run from a cubin.
    pub native: Vec<Cc>,
    /// Those of `native` with a cubin built for exactly their compute capability.
    pub exact: Vec<Cc>,
    /// Those that run only by the PTX, JIT-compiled.
    pub jit: Vec<Cc>,
    /// Those that run nothing of it.
    pub none: Vec<Cc>,
}

/// The best plan, and its neighbours: the best that costs less (covering fewer), and the
/// cheapest that covers more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    pub best: Plan,
    pub cheaper: Option<Plan>,
    pub dearer: Option<Plan>,
    /// Cubin candidates counted for no GPU the driver floor runs where they would load by
    /// architecture: the rules doubt that driver loads them (a cubin from a newer CUDA major).
    pub doubted: Vec<Target>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// No set meets the goal: the smallest that meets its required GPUs (with no target,
    /// the base) weighs this much.
    NothingFits { smallest: u64, budget: u64 },
    /// A required GPU no candidate cubin runs on.
    NoCubinFor(Cc),
    /// More cubin candidates than an exact search weighs.
    TooMany(usize),
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::NothingFits { smallest, budget } => write!(
                f,
                "no choice of targets fits {budget} bytes: the smallest that meets the goal is {smallest} bytes; raise the budget, or require fewer GPUs"
            ),
            PlanError::NoCubinFor(cc) => write!(
                f,
                "no candidate cubin runs on CC {cc}, which the goal requires; build a target for it (sm_{}{})",
                cc.major, cc.minor
            ),
            PlanError::TooMany(n) => write!(
                f,
                "{n} cubin candidates: more than the exact search weighs ({MAX_CUBINS}); plan for fewer targets"
            ),
        }
    }
}

impl std::error::Error for PlanError {}

/// The most cubin candidates weighed: 2^20 subsets.
pub(crate) const MAX_CUBINS: usize = 20;

const COMPRESSIONS: [Compression; 3] = [Compression::None, Compression::Lz4, Compression::Zstd];

/// What one candidate covers: a bit per product compute capability; for a cubin, also those
/// it is built for exactly.
struct Reach {
    candidate: usize,
    mask: u64,
    exact: u64,
    /// Where it is chosen, but the driver floor may not load it.
    doubted: u64,
}

/// The plan for `goal` among `candidates`, judged with `policy`.
pub fn plan(candidates: &[Candidate], goal: &Goal, policy: Policy) -> Result<Planned, PlanError> {
    let ccs = products::product_ccs();
    let all: u64 = match ccs.len() {
        n if n >= 64 => u64::MAX,
        n => (1u64 << n) - 1,
    };
    // Per product compute capability, whether the candidate alone loads there (as `want`),
    // and whether as a cubin built for exactly it.
    let reach_of = |i: usize, c: &Candidate, want: ImageKind| -> Reach {
        let image = Image::of(c.target, c.ptx_isa).built_by(c.toolkit);
        let (mut mask, mut exact, mut doubted) = (0u64, 0u64, 0u64);
        for (bit, &cc) in ccs.iter().enumerate() {
            // Judged with the driver floor, where that driver runs the GPU at all (a GPU
            // newer than it has a newer driver: by architecture, and the toolkit's floor).
            let device = match goal.driver.map(|d| Device::new(cc, Some(d))) {
                Some(with) if rules::driver_predates(&with).is_none() => with,
                _ => Device::new(cc, None),
            };
            let verdict = rules::select(std::slice::from_ref(&image), &device, policy);
            // Loaded for certain: a doubt (a driver that may not load it) is not coverage.
            let (chosen, is_exact) = match (verdict.selection, want) {
                (Ok(Selection::Cubin { exact, .. }), ImageKind::Cubin) => (true, exact),
                (Ok(Selection::Ptx { .. }), ImageKind::Ptx) => (true, false),
                _ => (false, false),
            };
            let loads = chosen && verdict.doubts.is_empty();
            mask |= u64::from(loads) << bit;
            exact |= u64::from(loads && is_exact) << bit;
            doubted |= u64::from(chosen && !loads) << bit;
        }
        Reach {
            candidate: i,
            mask,
            exact,
            doubted,
        }
    };
    let of_kind = |kind: ImageKind| -> Vec<Reach> {
        candidates
            .iter()
            .enumerate()
            .filter(|(_, c)| c.target.kind == kind)
            .map(|(i, c)| reach_of(i, c, kind))
            .collect()
    };
    let cubins = of_kind(ImageKind::Cubin);
    let ptx = of_kind(ImageKind::Ptx);
    if cubins.len() > MAX_CUBINS {
        return Err(PlanError::TooMany(cubins.len()));
    }
    let mut required = 0u64;
    for cc in &goal.native {
        let bit = ccs.iter().position(|c| c == cc).map(|i| 1u64 << i);
        let covered = bit.is_some_and(|b| cubins.iter().any(|r| r.mask & b != 0));
        match (bit, covered) {
            (Some(b), true) => required |= b,
            _ => return Err(PlanError::NoCubinFor(*cc)),
        }
    }
    let allowed: Vec<(usize, Compression)> = COMPRESSIONS
        .iter()
        .enumerate()
        .filter(|(_, c)| compression_loads(**c, goal.driver))
        .map(|(i, c)| (i, *c))
        .collect();
    let search = Search {
        candidates,
        cubins: &cubins,
        ptx: &ptx,
        allowed: &allowed,
        base: goal.base,
        required,
    };
    let best = search
        .best(|bytes, _| bytes <= goal.budget)
        .ok_or_else(|| PlanError::NothingFits {
            smallest: search
                .best(|_, _| true)
                .map_or(goal.base[0], |_| search.smallest()),
            budget: goal.budget,
        })?;
    let best_score = (best.native.count_ones(), best.jit.count_ones());
    let cheaper = search.best(|bytes, _| bytes < best.bytes);
    let dearer = search.cheapest_above(best_score);
    let to_plan = |w: Weighed| w.plan(&search, &ccs, all);
    let doubted = cubins
        .iter()
        .filter(|r| r.doubted != 0)
        .filter_map(|r| candidates.get(r.candidate).map(|c| c.target))
        .collect();
    Ok(Planned {
        best: to_plan(best),
        cheaper: cheaper.map(to_plan),
        dearer: dearer.map(to_plan),
        doubted,
    })
}

/// Whether a driver at `floor` loads entries compressed so (any does, when none is given:
/// the plan then says what the compression needs).
fn compression_loads(c: Compression, floor: Option<DriverVersion>) -> bool {
    let (Some(need), Some(driver)) = (c.min_driver_cuda(), floor) else {
        return true;
    };
    driver.cuda_level().is_some_and(|level| level >= need)
}

/// One weighed choice: the cubins (a bit per cubin of the search), the PTX (an index into the
/// search's PTX), the compression, its size and coverage.
#[derive(Clone, Debug)]
struct Weighed {
    subset: u64,
    ptx: Option<usize>,
    compress: Compression,
    bytes: u64,
    native: u64,
    jit: u64,
    exact: u64,
}

impl Weighed {
    fn plan(self, search: &Search<'_>, ccs: &[Cc], all: u64) -> Plan {
        let pick = |mask: u64| -> Vec<Cc> {
            ccs.iter()
                .enumerate()
                .filter(|(i, _)| mask & (1u64 << i) != 0)
                .map(|(_, cc)| *cc)
                .collect()
        };
        let cubins = search
            .cubins
            .iter()
            .enumerate()
            .filter(|(bit, _)| self.subset & (1u64 << bit) != 0)
            .map(|(_, r)| r.candidate);
        let ptx = self
            .ptx
            .and_then(|i| search.ptx.get(i))
            .map(|r| r.candidate);
        Plan {
            targets: cubins
                .chain(ptx)
                .filter_map(|i| search.candidates.get(i).map(|c| c.target))
                .collect(),
            compress: self.compress,
            bytes: self.bytes,
            native: pick(self.native),
            exact: pick(self.exact),
            jit: pick(self.jit),
            none: pick(all & !self.native & !self.jit),
        }
    }
}

struct Search<'a> {
    candidates: &'a [Candidate],
    cubins: &'a [Reach],
    ptx: &'a [Reach],
    allowed: &'a [(usize, Compression)],
    base: [u64; 3],
    required: u64,
}

impl Search<'_> {
    /// Every choice that meets the required GPUs, each weighed once.
    fn each(&self, mut f: impl FnMut(Weighed)) {
        let n = self.cubins.len();
        for &(ci, compress) in self.allowed {
            let size = |candidate: usize| {
                self.candidates
                    .get(candidate)
                    .and_then(|c| c.bytes.get(ci).copied().flatten())
            };
            for subset in 0u64..(1u64 << n) {
                let (mut native, mut exact) = (0u64, 0u64);
                let mut bytes = self.base.get(ci).copied();
                for (bit, r) in self.cubins.iter().enumerate() {
                    if subset & (1u64 << bit) != 0 {
                        native |= r.mask;
                        exact |= r.exact;
                        bytes = bytes
                            .zip(size(r.candidate))
                            .map(|(a, b)| a.saturating_add(b));
                    }
                }
                let Some(bytes) = bytes else { continue };
                if native & self.required != self.required {
                    continue;
                }
                f(Weighed {
                    subset,
                    ptx: None,
                    compress,
                    bytes,
                    native,
                    jit: 0,
                    exact,
                });
                for (pi, p) in self.ptx.iter().enumerate() {
                    let Some(extra) = size(p.candidate) else {
                        continue;
                    };
                    f(Weighed {
                        subset,
                        ptx: Some(pi),
                        compress,
                        bytes: bytes.saturating_add(extra),
                        native,
                        jit: p.mask & !native,
                        exact,
                    });
                }
            }
        }
    }

    /// The best choice that `fits`: most native, then most by JIT, then most built for
    /// exactly, then with PTX (GPUs newer than the tables), then the least compression, then
    /// the fewest bytes.
    fn best(&self, fits: impl Fn(u64, &Weighed) -> bool) -> Option<Weighed> {
        let mut best: Option<Weighed> = None;
        self.each(|w| {
            if !fits(w.bytes, &w) {
                return;
            }
            let key = |w: &Weighed| {
                (
                    w.native.count_ones(),
                    w.jit.count_ones(),
                    w.exact.count_ones(),
                    w.ptx.is_some(),
                    std::cmp::Reverse(w.compress as u8),
                    std::cmp::Reverse(w.bytes),
                )
            };
            if best.as_ref().is_none_or(|b| key(&w) > key(b)) {
                best = Some(w);
            }
        });
        best
    }

    /// The cheapest choice covering more than `score` (native, then JIT).
    fn cheapest_above(&self, score: (u32, u32)) -> Option<Weighed> {
        let mut best: Option<Weighed> = None;
        self.each(|w| {
            if (w.native.count_ones(), w.jit.count_ones()) <= score {
                return;
            }
            if best.as_ref().is_none_or(|b| w.bytes < b.bytes) {
                best = Some(w);
            }
        });
        best
    }

    /// The smallest choice that meets the required GPUs.
    fn smallest(&self) -> u64 {
        let mut min = u64::MAX;
        self.each(|w| min = min.min(w.bytes));
        min
    }
}

#[cfg(test)]
mod tests;
