//! Targets: what nvcc is asked to produce, a cubin (`sm_XY`) or PTX (`compute_XY`).

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use crate::parse::ParseError;
use serde::{Deserialize, Serialize};

use crate::Cc;

/// What kind of image a target produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageKind {
    /// Machine code (SASS) in a device ELF: a "real" target, `sm_XY`.
    Cubin,
    /// PTX text the driver compiles at load time: a "virtual" target, `compute_XY`.
    Ptx,
}

impl ImageKind {
    pub fn prefix(self) -> &'static str {
        match self {
            ImageKind::Cubin => "sm_",
            ImageKind::Ptx => "compute_",
        }
    }
}

impl fmt::Display for ImageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ImageKind::Cubin => "cubin",
            ImageKind::Ptx => "PTX",
        })
    }
}

/// The architecture suffix of a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Suffix {
    /// Plain: a cubin runs on the same major with an equal or higher minor; PTX on any later GPU.
    None,
    /// `f`, family-specific (CUDA 12.9+, sm_100 and later): same major, minor >= this one.
    Family,
    /// `a`, architecture-specific (sm_90 and later): runs only on exactly this compute capability.
    Arch,
}

impl Suffix {
    pub fn as_str(self) -> &'static str {
        match self {
            Suffix::None => "",
            Suffix::Arch => "a",
            Suffix::Family => "f",
        }
    }
}

/// One target: kind, compute capability and suffix (`sm_90a`, `compute_120`, `sm_100f`).
///
/// Orders by compute capability, then suffix, then kind (cubin before PTX), which is the order
/// people expect in listings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target {
    pub cc: Cc,
    pub suffix: Suffix,
    pub kind: ImageKind,
}

impl Target {
    pub const fn new(kind: ImageKind, cc: Cc, suffix: Suffix) -> Target {
        Target { cc, suffix, kind }
    }

    pub const fn cubin(major: u8, minor: u8) -> Target {
        Target::new(ImageKind::Cubin, Cc::new(major, minor), Suffix::None)
    }

    pub const fn ptx(major: u8, minor: u8) -> Target {
        Target::new(ImageKind::Ptx, Cc::new(major, minor), Suffix::None)
    }

    pub const fn with_suffix(self, suffix: Suffix) -> Target {
        Target { suffix, ..self }
    }

    pub const fn with_kind(self, kind: ImageKind) -> Target {
        Target { kind, ..self }
    }

    pub fn is_cubin(self) -> bool {
        self.kind == ImageKind::Cubin
    }

    pub fn is_ptx(self) -> bool {
        self.kind == ImageKind::Ptx
    }

    /// Parses a name: `sm_90`, `sm_90a`, `compute_120f`. Case-insensitive.
    pub fn parse_name(s: &str) -> Result<Target, ParseError> {
        let lower = s.trim().to_ascii_lowercase();
        let (kind, rest) = if let Some(rest) = lower.strip_prefix("sm_") {
            (ImageKind::Cubin, rest)
        } else if let Some(rest) = lower.strip_prefix("compute_") {
            (ImageKind::Ptx, rest)
        } else {
            return Err(ParseError::new(s, "expected sm_XY or compute_XY"));
        };
        let (digits, suffix) = split_suffix(rest);
        let cc = Cc::from_digits(digits).ok_or_else(|| {
            ParseError::new(
                s,
                "expected two or three digits after the prefix, e.g. sm_90 or sm_120",
            )
        })?;
        Target::checked(kind, cc, suffix).map_err(|reason| ParseError::new(s, reason))
    }

    /// Builds a target, refusing suffixes that do not exist for that compute capability.
    pub fn checked(kind: ImageKind, cc: Cc, suffix: Suffix) -> Result<Target, &'static str> {
        match suffix {
            Suffix::Arch if cc < Cc::new(9, 0) => {
                Err("arch-specific ('a') targets exist only for sm_90 and later")
            }
            Suffix::Family if cc.major < 10 => {
                Err("family-specific ('f') targets exist only for sm_100 and later")
            }
            _ => Ok(Target::new(kind, cc, suffix)),
        }
    }
}

/// Splits a trailing `a` or `f` off the digits of a target.
pub(crate) fn split_suffix(s: &str) -> (&str, Suffix) {
    if let Some(digits) = s.strip_suffix('a') {
        (digits, Suffix::Arch)
    } else if let Some(digits) = s.strip_suffix('f') {
        (digits, Suffix::Family)
    } else {
        (s, Suffix::None)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}{}",
            self.kind.prefix(),
            self.cc.digits(),
            self.suffix.as_str()
        )
    }
}

impl FromStr for Target {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Target, ParseError> {
        Target::parse_name(s)
    }
}

impl Serialize for Target {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Target {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Target, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A sorted set of targets without duplicates.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TargetSet(BTreeSet<Target>);

impl TargetSet {
    pub fn new() -> TargetSet {
        TargetSet::default()
    }

    /// Adds a target; returns false when it was already there.
    pub fn insert(&mut self, target: Target) -> bool {
        self.0.insert(target)
    }

    /// Removes a target; returns whether it was there.
    pub fn remove(&mut self, target: Target) -> bool {
        self.0.remove(&target)
    }

    pub fn extend(&mut self, other: impl IntoIterator<Item = Target>) {
        self.0.extend(other);
    }

    pub fn contains(&self, target: Target) -> bool {
        self.0.contains(&target)
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Target> + '_ {
        self.0.iter().copied()
    }

    pub fn cubins(&self) -> impl DoubleEndedIterator<Item = Target> + '_ {
        self.iter().filter(|t| t.is_cubin())
    }

    pub fn ptx(&self) -> impl DoubleEndedIterator<Item = Target> + '_ {
        self.iter().filter(|t| t.is_ptx())
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<Target> for TargetSet {
    fn from_iter<I: IntoIterator<Item = Target>>(iter: I) -> TargetSet {
        TargetSet(iter.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a TargetSet {
    type Item = Target;
    type IntoIter = std::iter::Copied<std::collections::btree_set::Iter<'a, Target>>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().copied()
    }
}

/// Space-separated names: `sm_80 sm_90 compute_90`.
impl fmt::Display for TargetSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (idx, target) in self.iter().enumerate() {
            if idx > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{target}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in [
            "sm_70",
            "sm_90a",
            "sm_100f",
            "sm_121a",
            "compute_120",
            "compute_90a",
        ] {
            let target: Target = name.parse().unwrap();
            assert_eq!(target.to_string(), name);
        }
        assert_eq!(Target::parse_name("SM_90A").unwrap().to_string(), "sm_90a");
    }

    #[test]
    fn rejects_bad_names() {
        for bad in [
            "sm90",
            "sm_",
            "sm_9",
            "sm_1000",
            "sm_80a",
            "sm_90f",
            "compute_x",
            "gfx90a",
        ] {
            assert!(Target::parse_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn orders_by_cc_then_suffix_then_kind() {
        let set: TargetSet = ["compute_90", "sm_90a", "sm_90", "sm_80"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(set.to_string(), "sm_80 sm_90 compute_90 sm_90a");
    }
}
