//! A Linux driver release as nvidia-smi prints it ([`DriverRelease`]): the record the toolkit
//! table (`toolkit`) and the driver versions (`driver`) both hold.

use std::fmt;

/// A Linux driver release, `major[.minor[.patch]]` (`570.86.10`, `575.51`).
///
/// A release given without a minor or patch stands for every release it prefixes:
/// `580.65` is taken to be at least `580.65.06`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DriverRelease {
    pub major: u16,
    pub minor: Option<u16>,
    pub patch: Option<u16>,
}

impl DriverRelease {
    pub const fn new(major: u16, minor: Option<u16>, patch: Option<u16>) -> DriverRelease {
        DriverRelease {
            major,
            minor,
            patch: if minor.is_some() { patch } else { None },
        }
    }

    /// Whether this driver is at least `min`, comparing only the components this one gives.
    pub fn at_least(&self, min: &DriverRelease) -> bool {
        if self.major != min.major {
            return self.major > min.major;
        }
        let (Some(minor), Some(min_minor)) = (self.minor, min.minor) else {
            return true;
        };
        if minor != min_minor {
            return minor > min_minor;
        }
        match (self.patch, min.patch) {
            (Some(patch), Some(min_patch)) => patch >= min_patch,
            _ => true,
        }
    }
}

impl fmt::Display for DriverRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.major)?;
        if let Some(minor) = self.minor {
            write!(f, ".{minor:02}")?;
            if let Some(patch) = self.patch {
                write!(f, ".{patch:02}")?;
            }
        }
        Ok(())
    }
}
