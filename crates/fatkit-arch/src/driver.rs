//! Driver versions, in both spellings: the release nvidia-smi prints (`570.86.10`) and the
//! CUDA level `cuDriverGetVersion` returns (`12080` = CUDA 12.8).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::parse::ParseError;
use crate::toolkit::{toolkit_for_isa, CudaVersion, PtxIsa, TOOLKITS};

pub use crate::driver_release::DriverRelease;

impl Serialize for DriverRelease {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DriverRelease {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<DriverRelease, D::Error> {
        let s = String::deserialize(d)?;
        match s.parse::<DriverVersion>() {
            Ok(DriverVersion::Release(r)) => Ok(r),
            _ => Err(serde::de::Error::custom(format!(
                "'{s}': not a driver release; write it as nvidia-smi prints it (570.86.10)"
            ))),
        }
    }
}

/// A driver version as a user or an API gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DriverVersion {
    /// As nvidia-smi prints it: `570.86.10`.
    Release(DriverRelease),
    /// As `cuDriverGetVersion` returns it: the newest CUDA version the driver supports.
    Cuda(CudaVersion),
}

impl FromStr for DriverVersion {
    type Err = ParseError;

    /// `570.86.10`, `575.51`, `570` -> a release; `12080` -> CUDA 12.8; `12.8` -> CUDA 12.8.
    fn from_str(s: &str) -> Result<DriverVersion, ParseError> {
        let err = || {
            ParseError::new(
                s,
                "not a driver version; give the release nvidia-smi prints (570.86.10), \
                 the integer cuDriverGetVersion returns (12080) or a CUDA version (12.8)",
            )
        };
        // `575.64.03-open` (the open kernel modules, as packages and some tools name them) and
        // `570-server` (Ubuntu's server branch) are the same releases.
        let t = s.trim();
        let t = ["-open", "-server"]
            .iter()
            .find_map(|suffix| t.strip_suffix(suffix))
            .unwrap_or(t);
        let parts: Vec<&str> = t.split('.').collect();
        if parts.len() > 3
            || parts
                .iter()
                .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(err());
        }
        let nums: Vec<u32> = parts
            .iter()
            .map(|p| p.parse::<u32>())
            .collect::<Result<_, _>>()
            .map_err(|_| err())?;
        match nums.as_slice() {
            [n] if *n >= 1000 => CudaVersion::from_api(*n)
                .map(DriverVersion::Cuda)
                .ok_or_else(err),
            [major, ..] if *major < 100 => {
                if nums.len() != 2 {
                    return Err(err());
                }
                t.parse::<CudaVersion>()
                    .map(DriverVersion::Cuda)
                    .map_err(|_| err())
            }
            [major, rest @ ..] => {
                let narrow = |n: u32| u16::try_from(n).map_err(|_| err());
                let minor = rest.first().map(|&n| narrow(n)).transpose()?;
                let patch = rest.get(1).map(|&n| narrow(n)).transpose()?;
                Ok(DriverVersion::Release(DriverRelease::new(
                    narrow(*major)?,
                    minor,
                    patch,
                )))
            }
            [] => Err(err()),
        }
    }
}

impl fmt::Display for DriverVersion {
    /// Round-trips through `FromStr`: `570.86.10` or `12080`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverVersion::Release(r) => write!(f, "{r}"),
            DriverVersion::Cuda(v) => write!(f, "{}", v.to_api()),
        }
    }
}

impl DriverVersion {
    /// For people: `570.86.10` or `CUDA 12.8 level (12080)`.
    pub fn describe(&self) -> String {
        match self {
            DriverVersion::Release(r) => format!("{r}"),
            DriverVersion::Cuda(v) => format!("CUDA {v} level ({})", v.to_api()),
        }
    }

    /// The CUDA level it is at: given as one, or the newest whose driver minimum this
    /// release meets; `None` where the tables do not place the release.
    pub fn cuda_level(&self) -> Option<CudaVersion> {
        match self {
            DriverVersion::Cuda(v) => Some(*v),
            DriverVersion::Release(r) => r.cuda_level(),
        }
    }

    /// Whether this driver loads PTX of `isa` (docs/ARCH_RULES.md section 4).
    pub(crate) fn loads_ptx(&self, isa: PtxIsa) -> IsaSupport {
        let need = PtxRequirement::of(isa);
        match (self, need.toolkit) {
            (DriverVersion::Cuda(level), Some(toolkit)) => {
                IsaSupport::from_bool(*level >= toolkit, need)
            }
            (DriverVersion::Release(r), Some(_)) if need.min_driver.is_some() => {
                IsaSupport::from_bool(need.min_driver.is_some_and(|min| r.at_least(&min)), need)
            }
            // No published minimum for this ISA: only a driver too old for an older,
            // known toolkit is certainly refused.
            (driver, _) => {
                let floor = TOOLKITS.iter().rev().find(|t| {
                    t.ptx_isa.is_some_and(|known| known < isa)
                        && (matches!(driver, DriverVersion::Cuda(_)) || t.min_driver.is_some())
                });
                let too_old = floor.is_some_and(|t| match driver {
                    DriverVersion::Cuda(level) => *level <= t.version,
                    DriverVersion::Release(r) => t.min_driver.is_some_and(|min| !r.at_least(&min)),
                });
                if too_old {
                    IsaSupport::TooOld(need)
                } else {
                    IsaSupport::Unknown(need)
                }
            }
        }
    }
}

impl Serialize for DriverVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DriverVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<DriverVersion, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The oldest driver that loads a set of images, and the image that decides it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MinDriver {
    /// As nvidia-smi prints it; `None` where the tables have no number.
    pub release: Option<DriverRelease>,
    /// The CUDA level (`cuDriverGetVersion`).
    pub cuda: CudaVersion,
    pub why: String,
}

impl MinDriver {
    /// What one image needs: PTX the driver of its ISA's toolkit (else of `toolkit`, the one
    /// that wrote it, when the ISA is newer than the tables); a cubin the `.0` driver of its
    /// toolkit's major (minor version compatibility, Medium confidence), or the first driver
    /// that knows its GPUs where that is later (`toolkit::first_cuda`). `None` when a cubin's
    /// toolkit is unknown.
    pub fn need(
        target: crate::Target,
        ptx_isa: Option<PtxIsa>,
        toolkit: Option<CudaVersion>,
    ) -> Option<(CudaVersion, String)> {
        match (target.kind, ptx_isa) {
            (crate::ImageKind::Ptx, Some(isa)) => Some((
                PtxRequirement::of(isa).toolkit.or(toolkit)?,
                format!("{target} PTX (ISA {isa})"),
            )),
            (crate::ImageKind::Ptx, None) => None,
            // Never below the first driver that knows the cubin's GPUs: an sm_100 cubin from
            // CUDA 12.8 needs a CUDA 12.8 driver, which a 12.0 one is not, whatever minor
            // version compatibility says of the toolkit.
            (crate::ImageKind::Cubin, _) => {
                let v = toolkit?;
                let major = CudaVersion::new(v.major, 0);
                let gpus = crate::toolkit::first_cuda(target.cc).unwrap_or(major);
                Some((major.max(gpus), format!("{target} cubin from CUDA {v}")))
            }
        }
    }

    /// The most demanding of `needs`; `None` when there are none.
    pub fn of(needs: impl IntoIterator<Item = (CudaVersion, String)>) -> Option<MinDriver> {
        let (cuda, why) = needs.into_iter().max_by_key(|(v, _)| *v)?;
        Some(MinDriver {
            release: crate::toolkit::toolkit(cuda).and_then(|t| t.min_driver),
            cuda,
            why,
        })
    }
}

/// What a PTX ISA needs of the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PtxRequirement {
    pub isa: PtxIsa,
    /// The oldest toolkit writing this ISA; `None` when the ISA is newer than the tables.
    pub toolkit: Option<CudaVersion>,
    /// That toolkit's minimum Linux driver; `None` where unpublished.
    pub min_driver: Option<DriverRelease>,
}

impl PtxRequirement {
    pub fn of(isa: PtxIsa) -> PtxRequirement {
        let toolkit = toolkit_for_isa(isa);
        PtxRequirement {
            isa,
            toolkit: toolkit.map(|t| t.version),
            min_driver: toolkit.and_then(|t| t.min_driver),
        }
    }
}

impl fmt::Display for PtxRequirement {
    /// `PTX ISA 9.0 needs driver >= 580.65.06 (CUDA 13.0)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.min_driver, self.toolkit) {
            (Some(min), Some(toolkit)) => {
                write!(f, "PTX ISA {} needs driver >= {min} (CUDA {toolkit})", self.isa)
            }
            (None, Some(toolkit)) => write!(
                f,
                "PTX ISA {} needs a CUDA {toolkit} driver, whose minimum version is not in the tables",
                self.isa
            ),
            (_, None) => write!(f, "PTX ISA {} is newer than any toolkit in the tables", self.isa),
        }
    }
}

/// Whether a driver loads some PTX.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IsaSupport {
    Supported,
    /// The driver refuses it: CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222).
    TooOld(PtxRequirement),
    /// The tables cannot tell.
    Unknown(PtxRequirement),
}

impl IsaSupport {
    fn from_bool(ok: bool, need: PtxRequirement) -> IsaSupport {
        if ok {
            IsaSupport::Supported
        } else {
            IsaSupport::TooOld(need)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> DriverVersion {
        s.parse().unwrap()
    }

    #[test]
    fn parses_both_spellings() {
        assert_eq!(d("12080"), DriverVersion::Cuda(CudaVersion::new(12, 8)));
        assert_eq!(d("12.8"), DriverVersion::Cuda(CudaVersion::new(12, 8)));
        assert_eq!(
            d("570.86.10"),
            DriverVersion::Release(DriverRelease::new(570, Some(86), Some(10)))
        );
        for s in ["570.86.10", "580.65.06", "575.51", "570", "12080", "13000"] {
            assert_eq!(d(s).to_string(), s);
        }
        assert_eq!(d("575.64.03-open"), d("575.64.03"));
        assert_eq!(d("570-server"), d("570"));
        for bad in [
            "",
            "abc",
            "570..1",
            "5.7.0.1",
            "570.86.10.1",
            "12.8.1",
            "99999999999",
            "570.x",
            "-open",
            "570-closed",
            "570.86.10-open-open",
        ] {
            assert!(bad.parse::<DriverVersion>().is_err(), "{bad}");
        }
    }

    #[test]
    fn prefixes_stand_for_their_releases() {
        let min = DriverRelease::new(580, Some(65), Some(6));
        assert!(DriverRelease::new(580, Some(65), None).at_least(&min));
        assert!(DriverRelease::new(580, Some(65), Some(6)).at_least(&min));
        assert!(!DriverRelease::new(580, Some(65), Some(5)).at_least(&min));
        assert!(!DriverRelease::new(575, Some(51), None).at_least(&min));
        assert!(DriverRelease::new(581, None, None).at_least(&min));
    }

    #[test]
    fn cuda_level_of_releases() {
        let level = |s: &str| d(s).cuda_level();
        assert_eq!(level("570.86.10"), Some(CudaVersion::new(12, 8)));
        assert_eq!(level("575.51.03"), Some(CudaVersion::new(12, 9)));
        assert_eq!(level("580.65"), Some(CudaVersion::new(13, 0)));
        assert_eq!(level("400"), None);
    }

    #[test]
    fn ptx_isa_against_drivers() {
        let isa90 = PtxIsa::new(9, 0);
        assert!(matches!(
            d("575.51").loads_ptx(isa90),
            IsaSupport::TooOld(_)
        ));
        assert_eq!(d("580.65").loads_ptx(isa90), IsaSupport::Supported);
        assert_eq!(d("13000").loads_ptx(isa90), IsaSupport::Supported);
        assert!(matches!(d("12090").loads_ptx(isa90), IsaSupport::TooOld(_)));
        // 9.3 (CUDA 13.3) needs 610.43.02; 9.4 (CUDA 13.4) has no published minimum: a new
        // driver is unknown, an old one refused.
        let isa93 = PtxIsa::new(9, 3);
        assert!(matches!(
            d("600.10").loads_ptx(isa93),
            IsaSupport::TooOld(_)
        ));
        assert_eq!(d("610.43.02").loads_ptx(isa93), IsaSupport::Supported);
        assert!(matches!(d("13030").loads_ptx(isa93), IsaSupport::Supported));
        let isa94 = PtxIsa::new(9, 4);
        assert!(matches!(
            d("620.10").loads_ptx(isa94),
            IsaSupport::Unknown(_)
        ));
        assert!(matches!(
            d("595.45.04").loads_ptx(isa94),
            IsaSupport::TooOld(_)
        ));
        // An ISA newer than the tables.
        let isa99 = PtxIsa::new(9, 9);
        assert!(matches!(d("13040").loads_ptx(isa99), IsaSupport::TooOld(_)));
        assert!(matches!(
            d("13090").loads_ptx(isa99),
            IsaSupport::Unknown(_)
        ));
        assert!(matches!(
            d("999.1").loads_ptx(isa99),
            IsaSupport::Unknown(_)
        ));
    }

    #[test]
    fn requirement_reads_well() {
        assert_eq!(
            PtxRequirement::of(PtxIsa::new(9, 0)).to_string(),
            "PTX ISA 9.0 needs driver >= 580.65.06 (CUDA 13.0)"
        );
    }

    /// Every cubin target of the tables, built by every toolkit that builds it: its need is
    /// never below the first driver that knows its GPUs, nor below its toolkit's major.
    #[test]
    fn a_cubins_need_is_never_below_the_driver_that_knows_its_gpus() {
        let mut checked = 0;
        for t in crate::toolkit::TOOLKITS {
            for target in crate::toolkit::targets_of(t.version)
                .iter()
                .filter(|x| !x.is_ptx())
            {
                let (need, _) = MinDriver::need(target, None, Some(t.version)).unwrap();
                assert!(
                    need >= CudaVersion::new(t.version.major, 0),
                    "{target} from {}",
                    t.version
                );
                if let Some(first) = crate::toolkit::first_cuda(target.cc) {
                    assert!(
                        need >= first,
                        "{target} from CUDA {}: {need} < {first}",
                        t.version
                    );
                }
                checked += 1;
            }
        }
        assert!(checked > 100, "only {checked} cubins");
        let sm100 = "sm_100".parse().unwrap();
        let (need, _) = MinDriver::need(sm100, None, Some(CudaVersion::new(12, 9))).unwrap();
        assert_eq!(need, CudaVersion::new(12, 8));
        let sm80 = "sm_80".parse().unwrap();
        let (need, _) = MinDriver::need(sm80, None, Some(CudaVersion::new(12, 9))).unwrap();
        assert_eq!(need, CudaVersion::new(12, 0));
    }
}
