//! The record of kernels a module builds for fewer targets than the rest by the source's own
//! design (a bf16 kernel under `#if __CUDA_ARCH__ >= 800`), as the crate author declared them.
//!
//! One line of text, written by the build into the generated module (so it stays in the final
//! binary) and read by the runtime check, `audit` and `package`:
//!
//! ```text
//! fatkit:declared:v1;module=NAME;KERNEL=T1,T2;KERNEL=T1;end;
//! ```
//!
//! Kernel names are as the images hold them (mangled or `extern "C"`); targets are
//! `sm_XY`/`compute_XY` names. A module with nothing declared writes `...;module=NAME;end;`.

use std::collections::BTreeMap;

use crate::{Target, TargetSet};

/// How every record starts.
pub const MAGIC: &str = "fatkit:declared:v1;";

/// How every record ends. A field always has a `=` and no `;`, so `;end;` ends a record
/// wherever it is found.
pub const END: &str = ";end;";

/// The longest record a reader accepts: a guard against a stray magic in unrelated bytes.
pub const MAX_LEN: usize = 1 << 20;

/// The record starting at `bytes[0]` (its magic), read up to its end marker within
/// [`MAX_LEN`]; `None` for a record cut short or not one of ours.
pub fn at(bytes: &[u8]) -> Option<Record> {
    let window = bytes.get(..bytes.len().min(MAX_LEN))?;
    let end = window
        .windows(END.len())
        .position(|w| w == END.as_bytes())?
        + END.len();
    Record::parse(std::str::from_utf8(window.get(..end)?).ok()?)
}

/// One module's record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub module: String,
    /// Each declared kernel with the targets it is built for.
    pub kernels: BTreeMap<String, TargetSet>,
}

impl Record {
    /// The record's text.
    pub fn write(&self) -> String {
        let mut out = format!("{MAGIC}module={};", self.module);
        for (kernel, targets) in &self.kernels {
            let names: Vec<String> = targets.iter().map(|t| t.to_string()).collect();
            out.push_str(&format!("{kernel}={};", names.join(",")));
        }
        out.push_str(&END[1..]);
        out
    }

    /// Parses a record's text, the magic included; `None` for anything else (a truncated or
    /// foreign record, an unknown target name).
    pub fn parse(text: &str) -> Option<Record> {
        let body = text.strip_prefix(MAGIC)?.strip_suffix(&END[1..])?;
        let mut fields = body.split(';').filter(|f| !f.is_empty());
        let module = fields.next()?.strip_prefix("module=")?.to_owned();
        let mut kernels = BTreeMap::new();
        for field in fields {
            let (kernel, targets) = field.split_once('=')?;
            if kernel.is_empty() {
                return None;
            }
            let set = targets
                .split(',')
                .filter(|t| !t.is_empty())
                .map(Target::parse_name)
                .collect::<Result<TargetSet, _>>()
                .ok()?;
            kernels.insert(kernel.to_owned(), set);
        }
        Some(Record { module, kernels })
    }

    /// The raw fields of a record, without parsing targets: `(kernel, "t1,t2")`. For the
    /// runtime, which keeps `'static` slices of its embedded record.
    pub fn fields(text: &str) -> Vec<(&str, &str)> {
        let Some(body) = text.strip_prefix(MAGIC) else {
            return Vec::new();
        };
        body.split(';')
            .filter_map(|f| f.split_once('='))
            .filter(|(k, _)| *k != "module")
            .collect()
    }
}

/// The declarations of every record found, by kernel: a kernel declared by several modules
/// gets the union of their sets.
pub fn merge(records: &[Record]) -> BTreeMap<String, TargetSet> {
    let mut out: BTreeMap<String, TargetSet> = BTreeMap::new();
    for r in records {
        for (kernel, targets) in &r.kernels {
            out.entry(kernel.clone())
                .or_default()
                .extend(targets.iter());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> TargetSet {
        names
            .iter()
            .map(|n| Target::parse_name(n).unwrap())
            .collect()
    }

    #[test]
    fn round_trips_and_is_found_in_bytes() {
        let record = Record {
            module: "norm".to_owned(),
            kernels: [(
                "rmsnorm_bf16".to_owned(),
                set(&["sm_80", "sm_90", "compute_90"]),
            )]
            .into_iter()
            .collect(),
        };
        let text = record.write();
        assert_eq!(
            text,
            "fatkit:declared:v1;module=norm;rmsnorm_bf16=sm_80,sm_90,compute_90;end;"
        );
        assert_eq!(Record::parse(&text), Some(record.clone()));
        let mut bytes = text.as_bytes().to_vec();
        bytes.extend_from_slice(b"endless rodata");
        assert_eq!(at(&bytes), Some(record.clone()));
        assert_eq!(at(b"fatkit:declared:v1;module=x;k=sm_99x;end;"), None);
        assert_eq!(at(b"fatkit:declared:v1;module=x;blend=sm_80;en"), None);
        assert_eq!(
            Record::fields(&text),
            vec![("rmsnorm_bf16", "sm_80,sm_90,compute_90")]
        );
    }

    #[test]
    fn merge_unions_a_kernel_declared_twice() {
        let a = Record::parse("fatkit:declared:v1;module=a;k=sm_80;end;").unwrap();
        let b = Record::parse("fatkit:declared:v1;module=b;k=sm_90;j=sm_90;end;").unwrap();
        let m = merge(&[a, b]);
        assert_eq!(m["k"], set(&["sm_80", "sm_90"]));
        assert_eq!(m["j"], set(&["sm_90"]));
        assert_eq!(
            Record::parse("fatkit:declared:v1;module=a;end;")
                .unwrap()
                .kernels
                .len(),
            0
        );
    }
}
