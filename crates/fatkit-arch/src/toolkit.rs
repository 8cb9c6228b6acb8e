//! CUDA toolkit tables: which targets each version can compile, the PTX ISA it writes and
//! the oldest driver that accepts that PTX (docs/ARCH_RULES.md sections 3 and 4).
//!
//! These are fallbacks: a toolkit found on a machine is probed (`nvcc --list-gpu-code`) and the
//! probe wins. Rows marked `Confidence::Medium` rest on a single source.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::driver_release::DriverRelease;
use crate::parse::ParseError;
use crate::target::split_suffix;
use crate::{Cc, ImageKind, Suffix, Target, TargetSet};

/// How sure the tables are of a fact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// Several sources agree, or it was checked by compiling.
    High,
    /// One good source.
    Medium,
}

/// A CUDA toolkit version, `major.minor` (`12.8`, `13.0`). Patch levels are ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CudaVersion {
    pub major: u8,
    pub minor: u8,
}

impl CudaVersion {
    pub const fn new(major: u8, minor: u8) -> CudaVersion {
        CudaVersion { major, minor }
    }

    /// The integer `cuDriverGetVersion` and `CUDA_VERSION` use: 12.8 -> 12080.
    pub(crate) fn to_api(self) -> u32 {
        u32::from(self.major) * 1000 + u32::from(self.minor) * 10
    }

    /// From the integer form: 12080 -> 12.8. `None` when it is out of range.
    pub fn from_api(n: u32) -> Option<CudaVersion> {
        let major = u8::try_from(n / 1000).ok()?;
        let minor = u8::try_from((n % 1000) / 10).ok()?;
        (major > 0).then_some(CudaVersion { major, minor })
    }
}

impl fmt::Display for CudaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl FromStr for CudaVersion {
    type Err = ParseError;

    /// Parses `12.8`, `12.8.93` (patch ignored) and `V12.8.93` as nvcc prints it.
    fn from_str(s: &str) -> Result<CudaVersion, ParseError> {
        let err = || ParseError::new(s, "not a CUDA version; write it as MAJOR.MINOR, e.g. 12.8");
        let t = s.trim();
        let t = t.strip_prefix(['V', 'v']).unwrap_or(t);
        let mut parts = t.split('.');
        let major = parts.next().and_then(parse_small).ok_or_else(err)?;
        let minor = parts.next().and_then(parse_small).ok_or_else(err)?;
        if let Some(patch) = parts.next() {
            if patch.is_empty() || !patch.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err());
            }
        }
        if parts.next().is_some() || major == 0 || minor > 9 {
            return Err(err());
        }
        Ok(CudaVersion { major, minor })
    }
}

fn parse_small(s: &str) -> Option<u8> {
    if s.is_empty() || s.len() > 3 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl Serialize for CudaVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for CudaVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<CudaVersion, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A PTX ISA version, the `.version X.Y` line of a PTX file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PtxIsa {
    pub major: u8,
    pub minor: u8,
}

impl PtxIsa {
    pub const fn new(major: u8, minor: u8) -> PtxIsa {
        PtxIsa { major, minor }
    }
}

impl fmt::Display for PtxIsa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl FromStr for PtxIsa {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<PtxIsa, ParseError> {
        let err = || {
            ParseError::new(
                s,
                "not a PTX ISA version; write it as MAJOR.MINOR, e.g. 8.7",
            )
        };
        let (major, minor) = s.trim().split_once('.').ok_or_else(err)?;
        Ok(PtxIsa {
            major: parse_small(major).ok_or_else(err)?,
            minor: parse_small(minor).ok_or_else(err)?,
        })
    }
}

impl Serialize for PtxIsa {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PtxIsa {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<PtxIsa, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One CUDA release: the PTX ISA it writes and the oldest Linux driver that loads that PTX.
#[derive(Clone, Copy, Debug)]
pub struct Toolkit {
    pub version: CudaVersion,
    /// `None` where no source gives it.
    pub ptx_isa: Option<PtxIsa>,
    /// The Linux driver of the GA release; `None` where no source gives it.
    pub min_driver: Option<DriverRelease>,
    pub confidence: Confidence,
}

const fn row(
    major: u8,
    minor: u8,
    isa: Option<(u8, u8)>,
    driver: Option<DriverRelease>,
    confidence: Confidence,
) -> Toolkit {
    Toolkit {
        version: CudaVersion::new(major, minor),
        ptx_isa: match isa {
            Some((a, b)) => Some(PtxIsa::new(a, b)),
            None => None,
        },
        min_driver: driver,
        confidence,
    }
}

const fn drv(major: u16, minor: u16, patch: Option<u16>) -> Option<DriverRelease> {
    Some(DriverRelease::new(major, Some(minor), patch))
}

use Confidence::{High, Medium};

/// Every CUDA release the tables know, oldest first. The 11.x rows come from the CUDA release
/// notes' driver table (Medium here: not in docs/ARCH_RULES.md); 13.4+ have no published minimum.
pub const TOOLKITS: &[Toolkit] = &[
    row(11, 0, Some((7, 0)), drv(450, 36, Some(6)), Medium),
    row(11, 1, Some((7, 1)), drv(455, 23, None), Medium),
    row(11, 2, Some((7, 2)), drv(460, 27, Some(3)), Medium),
    row(11, 3, Some((7, 3)), drv(465, 19, Some(1)), Medium),
    row(11, 4, Some((7, 4)), drv(470, 42, Some(1)), Medium),
    row(11, 5, Some((7, 5)), drv(495, 29, Some(5)), Medium),
    row(11, 6, Some((7, 6)), drv(510, 39, Some(1)), Medium),
    row(11, 7, Some((7, 7)), drv(515, 43, Some(4)), Medium),
    row(11, 8, Some((7, 8)), drv(520, 61, Some(5)), High),
    row(12, 0, Some((8, 0)), drv(525, 60, Some(13)), High),
    row(12, 1, Some((8, 1)), drv(530, 30, Some(2)), High),
    row(12, 2, Some((8, 2)), drv(535, 54, Some(3)), High),
    row(12, 3, Some((8, 3)), drv(545, 23, Some(6)), High),
    row(12, 4, Some((8, 4)), drv(550, 54, Some(14)), High),
    row(12, 5, Some((8, 5)), drv(555, 42, Some(2)), High),
    row(12, 6, Some((8, 5)), drv(560, 28, Some(3)), High),
    row(12, 8, Some((8, 7)), drv(570, 26, None), High),
    row(12, 9, Some((8, 8)), drv(575, 51, Some(3)), High),
    row(13, 0, Some((9, 0)), drv(580, 65, Some(6)), High),
    row(13, 1, Some((9, 1)), drv(590, 44, Some(1)), High),
    row(13, 2, Some((9, 2)), drv(595, 45, Some(4)), High),
    // The 13.3 release notes' driver table (read in copies: Medium). From 13.4 on the notes
    // name a driver branch per release (13.4: R615), not a minimum (docs/ARCH_RULES.md section 4).
    row(13, 3, Some((9, 3)), drv(610, 43, Some(2)), Medium),
    row(13, 4, Some((9, 4)), None, Medium),
    row(13, 5, Some((9, 5)), None, Medium),
];

/// The table row of a version, if known.
/// The newest GCC an nvcc release accepts as its host compiler, from the release it applies
/// to onwards: one row per change, from NVIDIA's installation guides (docs/ARCH_RULES.md section 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostCompilerLimit {
    /// The first release of this row.
    pub from: CudaVersion,
    /// The newest GCC major it accepts.
    pub max_gcc: u32,
    pub confidence: Confidence,
}

const fn host(major: u8, minor: u8, max_gcc: u32) -> HostCompilerLimit {
    HostCompilerLimit {
        from: CudaVersion::new(major, minor),
        max_gcc,
        confidence: Medium,
    }
}

/// Host-compiler limits, oldest release first. Before the first row: GCC 8.
pub const HOST_COMPILER_LIMITS: &[HostCompilerLimit] = &[
    host(11, 0, 9),
    host(11, 1, 10),
    host(11, 4, 11),
    host(12, 0, 12),
    host(12, 4, 13),
    host(12, 8, 14),
    host(13, 0, 15),
];

/// The newest GCC major an nvcc of `cuda` accepts as its host compiler.
pub fn max_gcc(cuda: CudaVersion) -> u32 {
    HOST_COMPILER_LIMITS
        .iter()
        .rev()
        .find(|row| row.from <= cuda)
        .map_or(8, |row| row.max_gcc)
}

pub fn toolkit(version: CudaVersion) -> Option<&'static Toolkit> {
    TOOLKITS.iter().find(|t| t.version == version)
}

/// The oldest toolkit that writes PTX of at least this ISA: the driver of that toolkit is the
/// minimum for the PTX. `None` when the ISA is newer than any the table knows.
pub(crate) fn toolkit_for_isa(isa: PtxIsa) -> Option<&'static Toolkit> {
    TOOLKITS
        .iter()
        .find(|t| t.ptx_isa.is_some_and(|known| known >= isa))
}

/// The targets each release adds and removes (real names; each has its `compute_` twin).
struct Change {
    version: CudaVersion,
    adds: &'static [&'static str],
    removes: &'static [&'static str],
    confidence: Confidence,
}

/// What CUDA 10.2 could build, the base the changes apply to.
const BASE: &[&str] = &[
    "30", "32", "35", "37", "50", "52", "53", "60", "61", "62", "70", "72", "75",
];

const CHANGES: &[Change] = &[
    Change {
        version: CudaVersion::new(11, 0),
        adds: &["80"],
        removes: &["30", "32"],
        confidence: High,
    },
    Change {
        version: CudaVersion::new(11, 1),
        adds: &["86"],
        removes: &[],
        confidence: High,
    },
    Change {
        version: CudaVersion::new(11, 4),
        adds: &["87"],
        removes: &[],
        confidence: High,
    },
    Change {
        version: CudaVersion::new(11, 8),
        adds: &["89", "90"],
        removes: &[],
        confidence: High,
    },
    Change {
        version: CudaVersion::new(12, 0),
        adds: &["90a"],
        removes: &["35", "37"],
        confidence: High,
    },
    Change {
        version: CudaVersion::new(12, 8),
        adds: &["100", "100a", "101", "101a", "120", "120a"],
        removes: &[],
        confidence: High,
    },
    Change {
        version: CudaVersion::new(12, 9),
        adds: &[
            "103", "103a", "121", "121a", "100f", "101f", "103f", "120f", "121f",
        ],
        removes: &[],
        confidence: High,
    },
    Change {
        version: CudaVersion::new(13, 0),
        adds: &["88", "110", "110a", "110f"],
        removes: &[
            "50", "52", "53", "60", "61", "62", "70", "72", "101", "101a", "101f",
        ],
        confidence: High,
    },
    // sm_107 (Rubin): in ptxas 13.4.59's target list and not in 13.3.33's (triton 3.9.0's and
    // 3.8.0's ptxas-blackwell; docs/ARCH_RULES.md section 12).
    Change {
        version: CudaVersion::new(13, 4),
        adds: &["107", "107a", "107f"],
        removes: &[],
        confidence: High,
    },
];

fn parse_table_target(s: &str) -> Option<(Cc, Suffix)> {
    let (digits, suffix) = split_suffix(s);
    Some((Cc::from_digits(digits)?, suffix))
}

/// Every target (cubin and PTX) the table says `version` can compile.
pub fn targets_of(version: CudaVersion) -> TargetSet {
    match known_builds(version) {
        Some(set) => set.clone(),
        None => compute_targets_of(version),
    }
}

/// [`targets_of`] from the tables, read once: the rules ask it for every kernel of a library.
fn compute_targets_of(version: CudaVersion) -> TargetSet {
    let mut real: Vec<(Cc, Suffix)> = BASE.iter().filter_map(|s| parse_table_target(s)).collect();
    for change in CHANGES.iter().filter(|c| c.version <= version) {
        let removed: Vec<_> = change
            .removes
            .iter()
            .filter_map(|s| parse_table_target(s))
            .collect();
        real.retain(|t| !removed.contains(t));
        real.extend(change.adds.iter().filter_map(|s| parse_table_target(s)));
    }
    real.iter()
        .flat_map(|&(cc, suffix)| {
            [ImageKind::Cubin, ImageKind::Ptx].map(|kind| Target::new(kind, cc, suffix))
        })
        .collect()
}

/// What each release of [`TOOLKITS`] builds, computed on first use.
fn builds() -> &'static [(CudaVersion, TargetSet)] {
    static BUILDS: std::sync::OnceLock<Vec<(CudaVersion, TargetSet)>> = std::sync::OnceLock::new();
    BUILDS.get_or_init(|| {
        TOOLKITS
            .iter()
            .map(|t| (t.version, compute_targets_of(t.version)))
            .collect()
    })
}

fn known_builds(version: CudaVersion) -> Option<&'static TargetSet> {
    builds()
        .iter()
        .find(|(v, _)| *v == version)
        .map(|(_, set)| set)
}

/// Whether the table says `version` compiles `target`.
pub fn can_build(version: CudaVersion, target: Target) -> bool {
    match known_builds(version) {
        Some(set) => set.contains(target),
        None => compute_targets_of(version).contains(target),
    }
}

/// The first CUDA release whose drivers know compute capability `cc` (the first toolkit that
/// builds for it): a driver of an older release sees no such device. `None` where the tables
/// do not say: they start at CUDA 11.0, and an architecture older than that is known to
/// drivers older than the tables.
pub fn first_cuda(cc: Cc) -> Option<CudaVersion> {
    let first = toolkits_for(Target::cubin(cc.major, cc.minor))
        .first()
        .copied()?;
    let before_tables = TOOLKITS.first().is_some_and(|t| t.version == first);
    (!before_tables).then_some(first)
}

/// The known toolkit versions that can compile `target`, oldest first.
pub fn toolkits_for(target: Target) -> Vec<CudaVersion> {
    builds()
        .iter()
        .filter(|(_, set)| set.contains(target))
        .map(|(v, _)| *v)
        .collect()
}

/// How sure the table is that `target` appeared when it says.
pub fn target_confidence(target: Target) -> Confidence {
    let name = format!("{}{}", target.cc.digits(), target.suffix.as_str());
    CHANGES
        .iter()
        .find(|c| c.adds.contains(&name.as_str()))
        .map_or(Confidence::High, |c| c.confidence)
}

/// Every target some known toolkit can compile.
pub(crate) fn known_targets() -> TargetSet {
    builds().iter().flat_map(|(_, set)| set.iter()).collect()
}

/// Whether any known toolkit can compile `target`.
pub(crate) fn is_known(target: Target) -> bool {
    builds().iter().any(|(_, set)| set.contains(target))
}

/// Known targets of the same kind closest to an unknown one, best first (at most three):
/// `sm_91` -> `sm_90`, `sm_90a`.
pub fn suggest(target: Target) -> Vec<Target> {
    let mut known: Vec<Target> = known_targets()
        .iter()
        .filter(|t| t.kind == target.kind)
        .collect();
    let distance = |t: &Target| {
        let major = u32::from(t.cc.major.abs_diff(target.cc.major)) * 100;
        let minor = u32::from(t.cc.minor.abs_diff(target.cc.minor)) * 10;
        let suffix = if t.suffix == target.suffix { 0 } else { 15 };
        major + minor + suffix
    };
    known.sort_by_key(|t| (distance(t), *t));
    let best = known.first().map(distance);
    known
        .into_iter()
        .take_while(|t| Some(distance(t)) <= best.map(|d| d + 15))
        .take(3)
        .collect()
}

/// The cubins of a CMake / nvcc `all` list for `version`: every plain target it builds,
/// plus PTX for the last one.
pub fn all_targets(version: CudaVersion) -> TargetSet {
    with_last_ptx(
        targets_of(version)
            .cubins()
            .filter(|t| t.suffix == Suffix::None)
            .collect(),
    )
}

/// `all-major`: the lowest plain target of each major the toolkit builds, plus PTX for the last.
pub(crate) fn all_major_targets(version: CudaVersion) -> TargetSet {
    let mut out: Vec<Target> = Vec::new();
    for t in targets_of(version)
        .cubins()
        .filter(|t| t.suffix == Suffix::None)
    {
        if out
            .last()
            .is_none_or(|last: &Target| last.cc.major != t.cc.major)
        {
            out.push(t);
        }
    }
    with_last_ptx(out)
}

fn with_last_ptx(cubins: Vec<Target>) -> TargetSet {
    let mut set: TargetSet = cubins.iter().copied().collect();
    if let Some(last) = cubins.last() {
        set.insert(last.with_kind(ImageKind::Ptx));
    }
    set
}

impl DriverRelease {
    /// The newest CUDA version whose driver minimum this release meets, if any.
    pub fn cuda_level(&self) -> Option<CudaVersion> {
        TOOLKITS
            .iter()
            .filter(|t| t.min_driver.is_some_and(|min| self.at_least(&min)))
            .map(|t| t.version)
            .next_back()
    }
}

#[cfg(test)]
mod tests;
