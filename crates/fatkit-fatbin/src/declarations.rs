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
    /// generated module's source. One pass: every magic and every end marker found once, each
    /// record the text between a magic and the first end after it with no other magic between
    /// (a record holds none), so that no byte is read for two records.
    pub fn scan(bytes: &[u8]) -> Declarations {
        let magics = crate::par::find_all(bytes, declared::MAGIC.as_bytes());
        let ends = crate::par::find_all(bytes, declared::END.as_bytes());
        let mut found = Declarations::default();
        let mut next_end = ends.iter().peekable();
        let mut magics = magics.iter().peekable();
        while let Some(&at) = magics.next() {
            while next_end.next_if(|&&e| e < at).is_some() {}
            let Some(&&end) = next_end.peek() else {
                break; // no end after this magic: none after the later ones either
            };
            if magics.peek().is_some_and(|&&m| m < end) {
                continue; // another magic first: this one is no record
            }
            let end = end + declared::END.len();
            if end - at > declared::MAX_LEN {
                continue;
            }
            if let Some(record) = bytes.get(at..end).and_then(declared::at) {
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
