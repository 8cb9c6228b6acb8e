//! Compute capability: the `(major, minor)` pair a GPU reports.

use std::fmt;

use crate::parse::ParseError;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A compute capability, `major.minor` (`12.0` for an RTX 5090, `9.0` for an H100).
///
/// Orders by major, then minor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cc {
    pub major: u8,
    pub minor: u8,
}

impl Cc {
    pub const fn new(major: u8, minor: u8) -> Cc {
        Cc { major, minor }
    }

    /// Parses the digits of a target name: the last digit is the minor, the rest the major
    /// (`"90"` -> 9.0, `"100"` -> 10.0, `"121"` -> 12.1). Accepts two or three digits.
    pub(crate) fn from_digits(digits: &str) -> Option<Cc> {
        if !(2..=3).contains(&digits.len()) || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let (major, minor) = digits.split_at(digits.len() - 1);
        let major: u8 = major.parse().ok()?;
        let minor: u8 = minor.parse().ok()?;
        if major == 0 || (digits.len() == 3 && digits.starts_with('0')) {
            return None;
        }
        Some(Cc { major, minor })
    }

    /// `Cc::from_digits` of a number's decimal digits (an ELF or fatbin arch field: `90`
    /// is 9.0, `120` is 12.0), without formatting it: readers call it for every image.
    pub fn from_number(n: u32) -> Option<Cc> {
        if !(10..=999).contains(&n) {
            return None;
        }
        Some(Cc {
            major: u8::try_from(n / 10).ok()?,
            minor: u8::try_from(n % 10).ok()?,
        })
    }

    /// The digits used in target names: `9.0` -> `"90"`, `12.1` -> `"121"`.
    pub fn digits(self) -> String {
        format!("{}{}", self.major, self.minor)
    }
}

impl fmt::Display for Cc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl FromStr for Cc {
    type Err = ParseError;

    /// Parses `X.Y` (`8.6`, `12.0`). The minor is a single digit, as in every real GPU.
    fn from_str(s: &str) -> Result<Cc, ParseError> {
        let err = || {
            ParseError::new(
                s,
                "not a compute capability; write it as MAJOR.MINOR, e.g. 8.6 or 12.0",
            )
        };
        let (major, minor) = s.trim().split_once('.').ok_or_else(err)?;
        let all_digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
        if !all_digits(major) || minor.len() != 1 || !all_digits(minor) || major.len() > 2 {
            return Err(err());
        }
        let major: u8 = major.parse().map_err(|_| err())?;
        let minor: u8 = minor.parse().map_err(|_| err())?;
        if major == 0 {
            return Err(err());
        }
        Ok(Cc { major, minor })
    }
}

impl Serialize for Cc {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cc {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Cc, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_round_trip() {
        for (digits, cc) in [
            ("70", Cc::new(7, 0)),
            ("90", Cc::new(9, 0)),
            ("121", Cc::new(12, 1)),
        ] {
            assert_eq!(Cc::from_digits(digits), Some(cc));
            assert_eq!(cc.digits(), digits);
            assert_eq!(cc.to_string().parse::<Cc>(), Ok(cc));
        }
    }

    #[test]
    fn from_number_is_from_digits_of_its_decimal() {
        for n in 0..=1200u32 {
            assert_eq!(Cc::from_number(n), Cc::from_digits(&n.to_string()), "{n}");
        }
        assert_eq!(Cc::from_number(u32::MAX), None);
    }

    #[test]
    fn rejects_malformed() {
        for bad in ["", "9", "1234", "9a", "09", "012"] {
            assert_eq!(Cc::from_digits(bad), None, "{bad}");
        }
        for bad in ["", "9", "9.", ".0", "9.10", "x.y", "0.5", "123.4", "9.0.1"] {
            assert!(bad.parse::<Cc>().is_err(), "{bad}");
        }
    }
}
