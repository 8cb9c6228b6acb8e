//! Every image of a file as a tool would extract it ([`extract_all`]).

use fatkit_arch::Target;

use super::images::{bare_cubin, bare_ptx};
use super::Depth;
use crate::container::EntryKind;
use crate::find::{self, find_named_in, Format, Item, Origin};
use crate::{cubin, Budget, Limits};

/// One image as a tool would extract it.
#[derive(Debug)]
pub struct Extracted {
    /// The file or member (`lib.a(k.o)`) holding it.
    pub member: String,
    pub origin: Origin,
    pub kind: EntryKind,
    pub target: Option<Target>,
    /// The decompressed image, without padding (see [`Entry::image`](crate::Entry::image)).
    pub bytes: Result<Vec<u8>, crate::Error>,
}

/// Every image of `data`, in the order [`inspect`](crate::inspect::inspect) reports them, extracted.
pub fn extract_all(name: &str, data: &[u8], limits: &Limits) -> Vec<Extracted> {
    let mut out = Vec::new();
    let budget = Budget::for_input(limits, data.len() as u64);
    extract_at(name, name, data, limits, 0, &budget, &mut out);
    out
}

fn extract_at(
    name: &str,
    leaf: &str,
    data: &[u8],
    limits: &Limits,
    level: usize,
    budget: &Budget,
    out: &mut Vec<Extracted>,
) {
    let findings = find_named_in(leaf, data, budget);
    if findings.format == Format::Zip {
        if level < limits.max_depth {
            find::zip_members(data, limits, budget, |m| {
                extract_at(
                    &format!("{name}({})", m.name),
                    m.name,
                    m.data,
                    limits,
                    level + 1,
                    budget,
                    out,
                );
            });
        }
        return;
    }
    for hit in findings.hits {
        match hit.item {
            Item::Container(c) => out.extend(c.entries().map(|e| Extracted {
                member: name.to_owned(),
                origin: hit.origin.clone(),
                kind: e.kind(),
                target: e.target(),
                bytes: e.image(limits).map(|b| b.into_owned()),
            })),
            Item::Cubin(bytes) | Item::Ptx(bytes) => {
                let report = if cubin::is_cubin(bytes) {
                    bare_cubin(bytes, hit.offset, Depth::Headers, budget)
                } else {
                    bare_ptx(bytes, hit.offset, budget)
                };
                out.push(Extracted {
                    member: name.to_owned(),
                    origin: hit.origin,
                    kind: report.kind,
                    target: report.target,
                    bytes: Ok(bytes.to_vec()),
                });
            }
            Item::Member { name: member, data } if level < limits.max_depth => {
                extract_at(
                    &format!("{name}({member})"),
                    &member,
                    &data,
                    limits,
                    level + 1,
                    budget,
                    out,
                );
            }
            Item::Member { .. } => {}
        }
    }
}
