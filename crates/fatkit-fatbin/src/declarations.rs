//! The declaration records of a binary ([`fatkit_arch::declared`]: what a fatkit-generated
//! module records of the kernels its crate declared for fewer targets), found in its bytes and
//! indexed by the container each binds to. A record read from a binary, as the containers
//! are: what it excuses on a device is fatkit-audit's to say.

use fatkit_arch::declared;
use fatkit_arch::TargetSet;
use serde::Serialize;

/// Kernels built for fewer targets than the rest by their source's design, as their crate
/// declared them ([`fatkit_arch::declared`]): each record binds to the fatbin it describes
/// and speaks for that container's kernels only. Records are indexed by that binding, so a
/// kernel's declaration is one lookup, however many records a file holds.
#[derive(Clone, Debug, Default)]
pub struct Declarations {
    records: Vec<declared::Record>,
    /// Each binding's first record (its module's name), and per kernel the first record of
    /// that binding to declare it.
    by_fatbin: std::collections::HashMap<(u64, u64), Bound>,
    /// Every record's text, so that one found twice is kept once.
    texts: std::collections::HashSet<String>,
}

/// The records of one binding, indexed.
#[derive(Clone, Debug, Default)]
struct Bound {
    first: usize,
    kernels: std::collections::HashMap<String, usize>,
}

impl PartialEq for Declarations {
    fn eq(&self, other: &Declarations) -> bool {
        self.records == other.records
    }
}

impl Eq for Declarations {}

impl Serialize for Declarations {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.records.serialize(s)
    }
}

impl Declarations {
    /// Every declaration record in `bytes`: a binary linking fatkit-generated modules, or a
    /// generated module's source. Each record is the text between a magic and the first end
    /// after it with no other magic between (a record holds none): one pass finds every
    /// magic, and the end of each is looked for only up to the next magic, so that no byte is
    /// read for two records.
    pub fn scan(bytes: &[u8]) -> Declarations {
        let mut found = Declarations::default();
        for span in record_spans(bytes) {
            if let Some(record) = bytes.get(span).and_then(declared::at) {
                found.push(record);
            }
        }
        found
    }

    /// Adds a record (once: the same record found twice, or in two binaries, is one).
    pub fn push(&mut self, record: declared::Record) {
        if !self.texts.insert(record.write()) {
            return;
        }
        let at = self.records.len();
        let bound = self.by_fatbin.entry(record.fatbin).or_insert(Bound {
            first: at,
            kernels: Default::default(),
        });
        for kernel in record.kernels.keys() {
            bound.kernels.entry(kernel.clone()).or_insert(at);
        }
        self.records.push(record);
    }

    /// Adds every record of `other`.
    pub fn extend(&mut self, other: Declarations) {
        for record in other.records {
            self.push(record);
        }
    }

    pub fn records(&self) -> &[declared::Record] {
        &self.records
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Whether a record binds to `fatbin`.
    pub fn binds(&self, fatbin: (u64, u64)) -> bool {
        self.by_fatbin.contains_key(&fatbin)
    }

    /// The name of the fatkit module whose record binds to `fatbin`, if one does.
    pub fn module_name(&self, fatbin: Option<(u64, u64)>) -> Option<&str> {
        let bound = self.by_fatbin.get(&fatbin?)?;
        self.records.get(bound.first).map(|r| r.module.as_str())
    }

    /// The targets `kernel` of the module bound to `fatbin` is declared for, if it is.
    pub fn get(&self, fatbin: Option<(u64, u64)>, kernel: &str) -> Option<&TargetSet> {
        let at = *self.by_fatbin.get(&fatbin?)?.kernels.get(kernel)?;
        self.records.get(at)?.kernels.get(kernel)
    }
}

/// Where [`Declarations::scan`] reads a record: from each magic to the end of the first end
/// marker after it, where that marker starts before the next magic and ends within
/// [`declared::MAX_LEN`] of the magic.
fn record_spans(bytes: &[u8]) -> Vec<std::ops::Range<usize>> {
    let (magic, end) = (declared::MAGIC.as_bytes(), declared::END.as_bytes());
    let magics = crate::par::find_all(bytes, magic);
    let end_finder = memchr::memmem::Finder::new(end);
    let mut spans = Vec::new();
    for (k, &at) in magics.iter().enumerate() {
        // The end marker must start before the next magic (at most `end.len() - 1` bytes of
        // it past that magic's start) and end within MAX_LEN of this one.
        let next = magics.get(k + 1).copied().unwrap_or(usize::MAX);
        let limit = at
            .saturating_add(declared::MAX_LEN)
            .min(next.saturating_add(end.len() - 1))
            .min(bytes.len());
        let Some(window) = bytes.get(at..limit) else {
            continue;
        };
        if let Some(e) = end_finder.find(window) {
            spans.push(at..at + e + end.len());
        }
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spans of the first version, which found every end marker in a second pass.
    fn two_pass(bytes: &[u8]) -> Vec<std::ops::Range<usize>> {
        let magics = crate::par::find_all(bytes, declared::MAGIC.as_bytes());
        let ends = crate::par::find_all(bytes, declared::END.as_bytes());
        let mut spans = Vec::new();
        let mut next_end = ends.iter().peekable();
        let mut magics = magics.iter().peekable();
        while let Some(&at) = magics.next() {
            while next_end.next_if(|&&e| e < at).is_some() {}
            let Some(&&end) = next_end.peek() else { break };
            if magics.peek().is_some_and(|&&m| m < end) {
                continue;
            }
            let end = end + declared::END.len();
            if end - at > declared::MAX_LEN {
                continue;
            }
            spans.push(at..end);
        }
        spans
    }

    /// Byte strings made of magics, end markers, their pieces and filler, in random orders
    /// and runs long enough to cross MAX_LEN: the one pass reads the spans the two did.
    #[test]
    fn one_pass_finds_the_records_two_passes_found() {
        let (magic, end) = (declared::MAGIC.as_bytes(), declared::END.as_bytes());
        let pieces: [&[u8]; 8] = [
            magic,
            end,
            &magic[..5],
            &end[1..],
            b";",
            b"x",
            b"fatkit:declared:v2",
            b";end",
        ];
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut found = 0;
        for case in 0..3000 {
            let mut bytes = Vec::new();
            for _ in 0..(next() % 24) {
                match next() % 10 {
                    9 if case % 50 == 0 => {
                        bytes.extend(std::iter::repeat_n(b'.', declared::MAX_LEN / 3))
                    }
                    n => bytes.extend_from_slice(pieces[(n % 8) as usize]),
                }
            }
            let spans = record_spans(&bytes);
            assert_eq!(spans, two_pass(&bytes), "case {case}");
            found += spans.len();
        }
        assert!(found > 1000, "the cases hold records: {found}");
    }
}
