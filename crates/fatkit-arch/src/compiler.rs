//! Device compilers, and a profile's pin of a target to one of them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::parse::ParseError;
use crate::toolkit::CudaVersion;

/// Which program turns CUDA C++ into device images.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compiler {
    /// The CUDA compiler driver (`nvcc`): host and device code.
    Nvcc,
    /// NVIDIA's runtime compilation library (`libnvrtc`): device code only.
    Nvrtc,
}

impl Compiler {
    pub fn name(self) -> &'static str {
        match self {
            Compiler::Nvcc => "nvcc",
            Compiler::Nvrtc => "nvrtc",
        }
    }
}

impl fmt::Display for Compiler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A profile's choice of toolchain for one target: `"nvcc 11.8"`, `"nvrtc"`, `"nvcc 13"`,
/// `"12.9"`. A version with no minor matches every minor of that major.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Pin {
    pub compiler: Option<Compiler>,
    pub version: Option<CudaVersion>,
    /// `"nvcc 13"`: any 13.x.
    pub major_only: bool,
}

impl FromStr for Pin {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Pin, ParseError> {
        let err = || {
            ParseError::new(
                s,
                "not a toolchain; write a compiler, a CUDA version or both: \"nvcc 11.8\", \"nvrtc 12.9\", \"nvcc\", \"13\"",
            )
        };
        let mut pin = Pin {
            compiler: None,
            version: None,
            major_only: false,
        };
        let words: Vec<&str> = s.split_whitespace().collect();
        if words.is_empty() || words.len() > 2 {
            return Err(err());
        }
        for word in words {
            match word.to_ascii_lowercase().as_str() {
                "nvcc" if pin.compiler.is_none() && pin.version.is_none() => {
                    pin.compiler = Some(Compiler::Nvcc);
                }
                "nvrtc" if pin.compiler.is_none() && pin.version.is_none() => {
                    pin.compiler = Some(Compiler::Nvrtc);
                }
                v if pin.version.is_none() => {
                    if let Ok(version) = v.parse::<CudaVersion>() {
                        pin.version = Some(version);
                    } else {
                        let major: u8 = v.parse().map_err(|_| err())?;
                        pin.version = Some(CudaVersion::new(major, 0));
                        pin.major_only = true;
                    }
                }
                _ => return Err(err()),
            }
        }
        Ok(pin)
    }
}

impl Pin {
    /// Whether a toolchain of `compiler` at `version` satisfies the pin.
    pub fn matches(&self, compiler: Compiler, version: CudaVersion) -> bool {
        self.compiler.is_none_or(|c| c == compiler)
            && self.version.is_none_or(|v| {
                if self.major_only {
                    v.major == version.major
                } else {
                    v == version
                }
            })
    }

    /// Whether some toolkit the pin allows could build `target` (by the tables).
    pub fn can_build(&self, target: crate::Target) -> bool {
        crate::toolkit::TOOLKITS.iter().any(|t| {
            [Compiler::Nvcc, Compiler::Nvrtc]
                .iter()
                .any(|&c| self.matches(c, t.version))
                && crate::toolkit::can_build(t.version, target)
        })
    }
}

impl fmt::Display for Pin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.compiler, self.version) {
            (Some(c), Some(v)) if self.major_only => write!(f, "{c} {}", v.major),
            (Some(c), Some(v)) => write!(f, "{c} {v}"),
            (Some(c), None) => write!(f, "{c}"),
            (None, Some(v)) if self.major_only => write!(f, "CUDA {}", v.major),
            (None, Some(v)) => write!(f, "CUDA {v}"),
            (None, None) => f.write_str("any toolchain"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins() {
        let p: Pin = "nvcc 11.8".parse().unwrap();
        assert!(p.matches(Compiler::Nvcc, CudaVersion::new(11, 8)));
        assert!(!p.matches(Compiler::Nvrtc, CudaVersion::new(11, 8)));
        assert!(!p.matches(Compiler::Nvcc, CudaVersion::new(13, 2)));
        assert_eq!(p.to_string(), "nvcc 11.8");
        let p: Pin = "NVRTC".parse().unwrap();
        assert!(p.matches(Compiler::Nvrtc, CudaVersion::new(12, 9)));
        let p: Pin = "nvcc 13".parse().unwrap();
        assert!(p.matches(Compiler::Nvcc, CudaVersion::new(13, 2)));
        assert!(!p.matches(Compiler::Nvcc, CudaVersion::new(12, 9)));
        assert_eq!(p.to_string(), "nvcc 13");
        let p: Pin = "12.9".parse().unwrap();
        assert!(p.matches(Compiler::Nvrtc, CudaVersion::new(12, 9)));
        assert_eq!(p.to_string(), "CUDA 12.9");
        for bad in [
            "",
            "gcc",
            "nvcc nvrtc",
            "11.8 nvcc",
            "nvcc 11.8 x",
            "nvcc x",
        ] {
            assert!(bad.parse::<Pin>().is_err(), "{bad}");
        }
        let sm70 = "sm_70".parse().unwrap();
        assert!("nvcc 11.8".parse::<Pin>().unwrap().can_build(sm70));
        assert!(!"nvcc 13".parse::<Pin>().unwrap().can_build(sm70));
    }
}
