//! Size budgets (issue 45): how a package ships and the most it may weigh, as profiles and
//! `fatkit plan` write them. A leaf: the records the planner (`crate::target_search`) and profiles
//! (`crate::profile`) share.

/// How a package ships.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shipped {
    /// A `.crate` (tar + gzip at cargo's best level).
    Crate,
    /// A wheel (zip, deflate at level 6, as the wheel tools write).
    Wheel,
    /// The fatbins themselves.
    Fatbin,
}

impl Shipped {
    pub const NAMES: [&'static str; 3] = ["crate", "wheel", "fatbin"];

    pub fn parse(s: &str) -> Option<Shipped> {
        match s {
            "crate" => Some(Shipped::Crate),
            "wheel" => Some(Shipped::Wheel),
            "fatbin" => Some(Shipped::Fatbin),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Shipped::Crate => "crate",
            Shipped::Wheel => "wheel",
            Shipped::Fatbin => "fatbin",
        }
    }
}

/// The most a build may ship (`budget = "10 MiB"`, `for = "crate"` in a profile).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Budget {
    pub bytes: u64,
    pub shipped: Shipped,
}

/// crates.io's upload limit: a `.crate` larger is refused by `cargo publish`.
pub const CRATES_IO_LIMIT: u64 = 10 << 20;

/// A size as people write it: bytes, or with `KiB`, `MiB`, `GiB` (powers of 1024) or `KB`,
/// `MB`, `GB` (of 1000); `10 MiB` is crates.io's limit.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    if number.is_empty() {
        return Err(format!(
            "'{s}' is not a size; write bytes, or a number with KiB, MiB, GiB (e.g. \"10 MiB\")"
        ));
    }
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => {
            return Err(format!(
                "'{s}': unknown unit '{other}'; write bytes, or KiB, MiB, GiB (e.g. \"10 MiB\")"
            ))
        }
    };
    let value: f64 = number.parse().map_err(|_| {
        format!(
            "'{s}' is not a size; write bytes, or a number with KiB, MiB, GiB (e.g. \"10 MiB\")"
        )
    })?;
    let bytes = value * scale as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(format!("'{s}' is not a size a package can have"));
    }
    Ok(bytes as u64)
}

/// Why `budget` and `for`, as written, are no budget; which field is wrong is the variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BudgetError {
    /// `budget` is not a size: why ([`parse_size`]'s words).
    Size(String),
    /// `for` names no way a build ships.
    For(String),
    /// `for` without `budget`.
    ForWithoutBudget,
}

impl std::fmt::Display for BudgetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BudgetError::Size(why) => f.write_str(why),
            BudgetError::For(s) => write!(
                f,
                "for = '{s}' is not a way a build ships; use one of {}",
                Shipped::NAMES.join(", ")
            ),
            BudgetError::ForWithoutBudget => f.write_str(
                "for = ... without a budget; add budget = \"10 MiB\" beside it, or leave for out",
            ),
        }
    }
}

impl std::error::Error for BudgetError {}

/// The budget `budget = SIZE` and `for = WHAT` say, as a profile or a package's metadata
/// writes them: none without either; `for` is `fatbin` when not said.
pub fn from_fields(
    budget: Option<&str>,
    shipped: Option<&str>,
) -> Result<Option<Budget>, BudgetError> {
    let shipped_as = match shipped {
        None => Shipped::Fatbin,
        Some(s) => Shipped::parse(s).ok_or_else(|| BudgetError::For(s.to_owned()))?,
    };
    match (budget, shipped) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(BudgetError::ForWithoutBudget),
        (Some(b), _) => {
            let bytes = parse_size(b).map_err(BudgetError::Size)?;
            Ok(Some(Budget {
                bytes,
                shipped: shipped_as,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One reading of the two fields for profiles and package metadata alike.
    #[test]
    fn budget_fields_read_one_way() {
        assert_eq!(from_fields(None, None), Ok(None));
        assert_eq!(
            from_fields(Some("10 MiB"), None),
            Ok(Some(Budget {
                bytes: CRATES_IO_LIMIT,
                shipped: Shipped::Fatbin
            }))
        );
        assert_eq!(
            from_fields(Some("2 KB"), Some("crate")),
            Ok(Some(Budget {
                bytes: 2000,
                shipped: Shipped::Crate
            }))
        );
        assert_eq!(
            from_fields(None, Some("fatbin")),
            Err(BudgetError::ForWithoutBudget)
        );
        assert_eq!(
            from_fields(Some("1 MiB"), Some("tarball")),
            Err(BudgetError::For("tarball".into()))
        );
        assert!(matches!(
            from_fields(Some("ten"), None),
            Err(BudgetError::Size(_))
        ));
    }
}
