//! What reading one input may cost, by construction: one [`Budget`] per audit input (a file, a
//! wheel, a directory, an environment's site-packages), proportional to its size with one
//! floor per input, charged by every reader as it works: bytes searched or parsed, bytes
//! inflated (zip members, compressed entries), and items walked (entries, sections, cubin
//! candidates, archive members, declaration records, kernels looked up). Once any part is spent
//! every reader stops, and the input's answer is unknown, naming what was too large
//! ([`Budget::spent`]): a crafted file costs its budget at most, never a hang.
//!
//! A real library costs a few times its size: its sections searched once, its entries
//! inflated once (one to five times the stored size) and read once. The ratios leave an order
//! of magnitude above that; a quadratic shape spends them within a few megabytes.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

use crate::Limits;

/// The work one item costs (an entry, a section, a candidate, a record): about the bytes of
/// its header a reader walks.
pub(crate) const ITEM: u64 = 64;

/// The budget of one input.
#[derive(Debug)]
pub struct Budget {
    work: Part,
    inflate: Part,
    /// What spent a part first: the reader's words.
    spent: OnceLock<String>,
}

/// One part of a budget: what is left of its limit.
#[derive(Debug)]
struct Part {
    limit: u64,
    left: AtomicU64,
    /// How the limit was set, for the message: `32 times its size, at least 1073741824`.
    rule: String,
}

impl Part {
    fn new(limit: u64, rule: String) -> Part {
        Part {
            limit,
            left: AtomicU64::new(limit),
            rule,
        }
    }

    fn take(&self, n: u64) -> bool {
        self.left
            .fetch_update(Relaxed, Relaxed, |left| left.checked_sub(n))
            .is_ok()
    }
}

impl Budget {
    /// The budget of an input of `input_len` bytes under `limits`.
    pub fn for_input(limits: &Limits, input_len: u64) -> Budget {
        let part = |ratio: u64, floor: u64| {
            Part::new(
                input_len.saturating_mul(ratio).max(floor),
                format!("{ratio} times its size, at least {floor}"),
            )
        };
        Budget {
            work: part(limits.work_ratio, limits.work_floor),
            inflate: part(limits.inflate_ratio, limits.inflate_floor),
            spent: OnceLock::new(),
        }
    }

    /// No limit but the readers' own (the tests' reference).
    #[cfg(test)]
    pub(crate) fn unlimited() -> Budget {
        Budget {
            work: Part::new(u64::MAX, "none".to_owned()),
            inflate: Part::new(u64::MAX, "none".to_owned()),
            spent: OnceLock::new(),
        }
    }

    /// Charges `units` of work (bytes searched or parsed; `ITEM` an item) done by `reader`
    /// (`"the magic scan"`, `"PTX"`, ...); false, for good, once the work is spent.
    pub fn work(&self, reader: &str, units: u64) -> bool {
        self.charge(&self.work, reader, units, "work")
    }

    /// [`Budget::work`] of `n` items.
    pub fn items(&self, reader: &str, n: u64) -> bool {
        self.work(reader, n.saturating_mul(ITEM))
    }

    /// Charges `bytes` inflated by `reader` (before they are allocated); false, for good,
    /// once the inflation is spent. (Reading what was inflated is work, charged by its reader.)
    pub fn inflate(&self, reader: &str, bytes: u64) -> bool {
        self.charge(&self.inflate, reader, bytes, "inflation")
    }

    fn charge(&self, part: &Part, reader: &str, n: u64, what: &str) -> bool {
        if self.spent.get().is_some() {
            return false;
        }
        if part.take(n) {
            return true;
        }
        let why = match what {
            "inflation" => {
                "a zip bomb or a crafted entry; if it is genuine, unzip it and audit the directory"
            }
            _ => "a crafted shape (docs/GUARANTEES.md, \"Work is bounded by the input\")",
        };
        let _ = self.spent.set(format!(
            "{reader} need more {what} than the input's budget allows ({} bytes: {}): {why}",
            part.limit, part.rule
        ));
        false
    }

    /// Whether a part is spent: then nothing read of the input is an answer.
    pub(crate) fn is_spent(&self) -> bool {
        self.spent.get().is_some()
    }

    /// Why the input is unknown, once a part is spent.
    pub fn spent(&self) -> Option<String> {
        self.spent
            .get()
            .map(|what| format!("not read to the end: {what}; the answer for it is unknown"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_is_spent_for_good_and_says_by_what() {
        let limits = Limits {
            work_ratio: 4,
            work_floor: 100,
            inflate_ratio: 2,
            inflate_floor: 50,
            ..Limits::default()
        };
        let b = Budget::for_input(&limits, 10);
        assert!(b.work("the magic scan", 60));
        assert!(b.inflate("an entry", 40));
        assert!(!b.is_spent());
        assert!(!b.inflate("an entry", 11));
        assert!(b.is_spent());
        // Spent: nothing else may work, whatever is left of the other part.
        assert!(!b.work("PTX", 1));
        let why = b.spent().unwrap();
        assert!(why.contains("an entry need more inflation"), "{why}");
        assert!(why.contains("2 times its size, at least 50"), "{why}");
        let big = Budget::for_input(&limits, 1000);
        assert!(big.work("x", 4000) && !big.work("x", 1));
        assert!(Budget::unlimited().work("x", u64::MAX / 2));
    }
}
