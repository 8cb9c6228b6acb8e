//! The record of kernels a module builds for fewer targets than the rest by the source's own
//! design (a bf16 kernel under `#if __CUDA_ARCH__ >= 800`), as the crate author declared them.
//!
//! One line of text, written by the build into the generated module (so it stays in the final
//! binary) and read by the runtime check, `audit` and `package`:
//!
//! ```text
//! fatkit:declared:v2;module=NAME;fatbin=SIZE:FINGERPRINT;KERNEL=T1,T2;KERNEL=T1;end;
//! ```
//!
//! Kernel names are as the images hold them (mangled or `extern "C"`); targets are
//! `sm_XY`/`compute_XY` names. A module with nothing declared writes
//! `...;module=NAME;fatbin=...;end;`. `fatbin` binds the record to the one fatbin it describes:
//! its size and [`crate::fingerprint`] in hexadecimal. A record excuses only the kernels of
//! the container with that size and fingerprint, never same-named kernels of another module
//! in the same file. Records of v1 (no binding) are not read: they could excuse anything.

use std::collections::BTreeMap;

use crate::{Target, TargetSet};

/// How every record starts.
pub const MAGIC: &str = "fatkit:declared:v2;";

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
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Record {
    pub module: String,
    /// The fatbin it describes: its size in bytes and fingerprint.
    pub fatbin: (u64, u64),
    /// Each declared kernel with the targets it is built for.
    pub kernels: BTreeMap<String, TargetSet>,
}

impl Record {
    /// The record's text.
    pub fn write(&self) -> String {
        let mut out = format!(
            "{MAGIC}module={};fatbin={}:{:016x};",
            self.module, self.fatbin.0, self.fatbin.1
        );
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
        let (size, print) = fields.next()?.strip_prefix("fatbin=")?.split_once(':')?;
        let fatbin = (size.parse().ok()?, u64::from_str_radix(print, 16).ok()?);
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
        Some(Record {
            module,
            fatbin,
            kernels,
        })
    }

    /// The raw fields of a record, without parsing targets: `(kernel, "t1,t2")`. For the
    /// runtime, which keeps `'static` slices of its embedded record.
    pub fn fields(text: &str) -> Vec<(&str, &str)> {
        let Some(body) = text.strip_prefix(MAGIC) else {
            return Vec::new();
        };
        body.split(';')
            .filter_map(|f| f.split_once('='))
            .filter(|(k, _)| *k != "module" && *k != "fatbin")
            .collect()
    }
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
            fatbin: (4096, 0xfeed),
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
            "fatkit:declared:v2;module=norm;fatbin=4096:000000000000feed;rmsnorm_bf16=sm_80,sm_90,compute_90;end;"
        );
        assert_eq!(Record::parse(&text), Some(record.clone()));
        let mut bytes = text.as_bytes().to_vec();
        bytes.extend_from_slice(b"endless rodata");
        assert_eq!(at(&bytes), Some(record.clone()));
        assert_eq!(
            at(b"fatkit:declared:v2;module=x;fatbin=1:2;k=sm_99x;end;"),
            None
        );
        assert_eq!(
            at(b"fatkit:declared:v2;module=x;fatbin=1:2;blend=sm_80;en"),
            None
        );
        // Unbound (v1) or with a malformed binding: not a record.
        assert_eq!(at(b"fatkit:declared:v1;module=x;k=sm_80;end;"), None);
        assert_eq!(at(b"fatkit:declared:v2;module=x;k=sm_80;end;"), None);
        assert_eq!(
            at(b"fatkit:declared:v2;module=x;fatbin=z:2;k=sm_80;end;"),
            None
        );
        assert_eq!(
            Record::fields(&text),
            vec![("rmsnorm_bf16", "sm_80,sm_90,compute_90")]
        );
    }
}
