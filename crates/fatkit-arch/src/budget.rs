//! Size budgets (issue 45): how a package ships and the most it may weigh, as profiles and
//! `fatkit plan` write them. A leaf: the records the planner (`crate::plan`) and profiles
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
