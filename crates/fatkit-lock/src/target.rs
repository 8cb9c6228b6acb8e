//! The machine a lock is judged for: its platform (Linux, a CPU, a glibc) and its Python; the
//! wheels of a distribution it would install (wheel tags, PEP 425 and PEP 600), the best one
//! first, as pip and uv choose.

use std::collections::BTreeSet;

use crate::markers::Environment;

/// Where the locked packages would be installed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// `x86_64` or `aarch64`.
    pub machine: String,
    /// The glibc the machine has, (2, 28): a `manylinux_2_X` wheel is installable where X is
    /// at most its minor.
    pub glibc: (u32, u32),
    /// CPython's (3, 12).
    pub python: (u32, u32),
}

impl Default for Target {
    /// Linux on x86_64 with glibc 2.35 (Ubuntu 22.04, the oldest release CUDA 13 supports
    /// that such fleets run) and CPython 3.12.
    fn default() -> Target {
        Target {
            machine: "x86_64".to_owned(),
            glibc: (2, 35),
            python: (3, 12),
        }
    }
}

/// Why a `--platform` or `--python-version` was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("--platform {0}: not a Linux wheel platform fatkit judges; give linux_x86_64, linux_aarch64 or manylinux_2_X_<machine> (the glibc the machines have: manylinux_2_28_x86_64)")]
    Platform(String),
    #[error("--python-version {0}: fatkit judges wheels for CPython 3; give 3.X (3.12)")]
    Python(String),
}

impl Target {
    /// `linux_x86_64` (glibc 2.35), `manylinux_2_28_aarch64`, `manylinux2014_x86_64`.
    pub fn with_platform(self, platform: &str) -> Result<Target, TargetError> {
        let bad = || TargetError::Platform(platform.to_owned());
        let (glibc, machine) = match platform.strip_prefix("linux_") {
            Some(machine) => (self.glibc, machine),
            None => {
                let (glibc, machine) = manylinux(platform).ok_or_else(bad)?;
                (glibc, machine)
            }
        };
        if !matches!(machine, "x86_64" | "aarch64") {
            return Err(bad());
        }
        Ok(Target {
            machine: machine.to_owned(),
            glibc,
            ..self
        })
    }

    /// `3.12`.
    pub fn with_python(self, version: &str) -> Result<Target, TargetError> {
        let bad = || TargetError::Python(version.to_owned());
        let (major, minor) = version.split_once('.').ok_or_else(bad)?;
        let python = (
            major.parse().map_err(|_| bad())?,
            minor.parse().map_err(|_| bad())?,
        );
        if python.0 != 3 {
            return Err(bad());
        }
        Ok(Target { python, ..self })
    }

    /// `Linux x86_64 (glibc 2.35), CPython 3.12`, for messages and reports.
    pub fn words(&self) -> String {
        let (major, minor) = self.python;
        let (g, l) = self.glibc;
        format!(
            "Linux {} (glibc {g}.{l}), CPython {major}.{minor}",
            self.machine
        )
    }

    /// The platform tags pip is given, every one the target installs (pip expands none of
    /// `manylinux_2_X`): `manylinux_2_35_x86_64` down to `manylinux_2_5_x86_64`, the legacy
    /// aliases, and `linux_x86_64`.
    pub fn pip_platforms(&self) -> Vec<String> {
        let (g, l) = self.glibc;
        let m = &self.machine;
        let mut out: Vec<String> = (5..=l)
            .rev()
            .map(|n| format!("manylinux_{g}_{n}_{m}"))
            .collect();
        for (alias, minor) in [
            ("manylinux2014", 17),
            ("manylinux2010", 12),
            ("manylinux1", 5),
        ] {
            if minor <= l {
                out.push(format!("{alias}_{m}"));
            }
        }
        out.push(format!("linux_{m}"));
        out
    }

    /// The markers' environment of this target, with the extras and groups asked.
    pub fn environment(&self, extras: BTreeSet<String>, groups: BTreeSet<String>) -> Environment {
        let (major, minor) = self.python;
        Environment {
            python_version: format!("{major}.{minor}"),
            python_full_version: format!("{major}.{minor}.0"),
            sys_platform: "linux".to_owned(),
            platform_machine: self.machine.clone(),
            platform_system: "Linux".to_owned(),
            extras,
            groups,
        }
    }

    /// How well a wheel of this file name fits: `None` where it cannot be installed here,
    /// else a rank, higher the better (a CPython-specific build over the stable ABI over pure
    /// Python; the newest manylinux over an older one over a plain `any`).
    pub fn fit(&self, file_name: &str) -> Option<(u32, u32)> {
        let tags = WheelName::parse(file_name)?;
        let interpreter = tags
            .python
            .split('.')
            .flat_map(|p| tags.abi.split('.').map(move |a| (p, a)))
            .filter_map(|(p, a)| self.interpreter_rank(p, a))
            .max()?;
        let platform = tags
            .platform
            .split('.')
            .filter_map(|t| self.platform_rank(t))
            .max()?;
        Some((platform, interpreter))
    }

    /// A python tag and an ABI tag together, as CPython's list of supported tags has them:
    /// `cp312-cp312` (3), `cp3N-abi3` for N at most the minor (2), `cp312-none`, `py3-none`,
    /// `py31N-none` (1).
    fn interpreter_rank(&self, python: &str, abi: &str) -> Option<u32> {
        let (major, minor) = self.python;
        let version = |t: &str| -> Option<(u32, u32)> {
            let major = t.get(..1)?.parse().ok()?;
            let minor = t.get(1..)?;
            Some((
                major,
                if minor.is_empty() {
                    u32::MAX
                } else {
                    minor.parse().ok()?
                },
            ))
        };
        let cp = python.strip_prefix("cp").and_then(version);
        let py = python.strip_prefix("py").and_then(version);
        match abi {
            "abi3" => cp.filter(|&(m, n)| m == major && n <= minor).map(|_| 2),
            "none" => match (cp, py) {
                (Some(v), _) if v == (major, minor) => Some(1),
                (_, Some((m, n))) if m == major && (n == u32::MAX || n <= minor) => Some(1),
                _ => None,
            },
            a => (cp == Some((major, minor)) && a == format!("cp{major}{minor}")).then_some(3),
        }
    }

    fn platform_rank(&self, tag: &str) -> Option<u32> {
        if tag == "any" {
            return Some(1);
        }
        if tag == format!("linux_{}", self.machine) {
            return Some(2);
        }
        let ((major, minor), machine) = manylinux(tag)?;
        (machine == self.machine && (major, minor) <= self.glibc).then_some(10 + minor)
    }
}

/// `manylinux_2_28_x86_64` -> ((2, 28), "x86_64"); the legacy aliases too (`manylinux1`,
/// `manylinux2010`, `manylinux2014`, PEP 600's table).
fn manylinux(tag: &str) -> Option<((u32, u32), &str)> {
    for (alias, glibc) in [
        ("manylinux1_", (2, 5)),
        ("manylinux2010_", (2, 12)),
        ("manylinux2014_", (2, 17)),
    ] {
        if let Some(machine) = tag.strip_prefix(alias) {
            return Some((glibc, machine));
        }
    }
    let rest = tag.strip_prefix("manylinux_")?;
    let mut parts = rest.splitn(3, '_');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some(((major, minor), parts.next()?))
}

/// A wheel's file name, read: `{name}-{version}(-{build})?-{python}-{abi}-{platform}.whl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WheelName<'a> {
    pub name: &'a str,
    pub version: &'a str,
    pub python: &'a str,
    pub abi: &'a str,
    pub platform: &'a str,
}

impl<'a> WheelName<'a> {
    /// `None` where `file` is not a wheel's file name, or holds a character no wheel's does
    /// (a path separator, a space, a control character): such a name is never made a path.
    pub fn parse(file: &'a str) -> Option<WheelName<'a>> {
        let fine = |c: char| c.is_ascii_alphanumeric() || "._+!-".contains(c);
        if !file.chars().all(fine) || file.starts_with('.') {
            return None;
        }
        let stem = file.strip_suffix(".whl")?;
        let parts: Vec<&str> = stem.split('-').collect();
        let (name, version, python, abi, platform) = match parts.as_slice() {
            [n, v, p, a, pl] | [n, v, _, p, a, pl] => (*n, *v, *p, *a, *pl),
            _ => return None,
        };
        if [name, version, python, abi, platform]
            .iter()
            .any(|p| p.is_empty())
        {
            return None;
        }
        Some(WheelName {
            name,
            version,
            python,
            abi,
            platform,
        })
    }
}
