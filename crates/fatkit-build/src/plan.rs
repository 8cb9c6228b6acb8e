//! What each target adds to a package as it ships (issue 45), measured from modules already
//! built for the candidates (a `vendor` directory, or the output of `build-kernels`), for the
//! target planner (`fatkit_arch::plan`). Every image of every module is written again by
//! fatkit's own writer into a one-image fatbin under each compression (what a build with that
//! profile would write), and the images of one target together are compressed as the package
//! ships them: gzip at cargo's level for a `.crate`, deflate at the wheel tools' for a wheel,
//! nothing for bare fatbins. The package's other files are its base. Sizes add up: a `.crate`
//! is a tar compressed with a 32 KiB window, so what one target's images add barely depends on
//! the others (the bench tier measures the prediction against `cargo package`).

use std::io::Write;
use std::path::{Path, PathBuf};

use fatkit_arch::plan::Candidate;
use fatkit_arch::profile::Compression;
use fatkit_arch::{ImageKind, Target};
use fatkit_fatbin::inspect::extract_all;
use fatkit_fatbin::write::{write, Input};
use fatkit_fatbin::{EntryKind, Limits};

/// How the package ships.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shipped {
    /// A `.crate` (tar + gzip, cargo's best level).
    Crate,
    /// A wheel (zip, deflate at level 6, as the wheel tools write).
    Wheel,
    /// The fatbins themselves.
    Fatbin,
}

impl Shipped {
    pub fn parse(s: &str) -> Option<Shipped> {
        match s {
            "crate" => Some(Shipped::Crate),
            "wheel" => Some(Shipped::Wheel),
            "fatbin" => Some(Shipped::Fatbin),
            _ => None,
        }
    }

    /// Bytes as shipped of `data`.
    fn size(self, data: &[u8]) -> u64 {
        let level = match self {
            Shipped::Fatbin => return data.len() as u64,
            Shipped::Crate => flate2::Compression::best(),
            Shipped::Wheel => flate2::Compression::new(6),
        };
        let mut z = flate2::write::DeflateEncoder::new(Vec::new(), level);
        let _ = z.write_all(data);
        z.finish().map_or(data.len() as u64, |v| v.len() as u64)
    }
}

/// What was measured: the candidates and the base.
#[derive(Clone, Debug)]
pub struct Measured {
    pub candidates: Vec<Candidate>,
    /// The other files of the directory, as shipped.
    pub base: u64,
    /// The modules read.
    pub modules: usize,
}

/// Why a directory cannot be measured.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: no .fatbin in it; build the candidates first (cargo xtask build-kernels --profile full) and name their directory", .0.display())]
    NoModules(PathBuf),
    #[error("{}: {target}: cannot be written again: {reason}", path.display())]
    Rewrite {
        path: PathBuf,
        target: Target,
        reason: String,
    },
    #[error("{}: cannot write the profile: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

const ORDER: [Compression; 3] = [Compression::None, Compression::Lz4, Compression::Zstd];

/// Measures the modules (`*.fatbin`) of `dir` and its other files, as `shipped`.
pub fn measure(dir: &Path, shipped: Shipped) -> Result<Measured, MeasureError> {
    let read_err = |path: &Path| {
        let path = path.to_owned();
        move |source| MeasureError::Read { path, source }
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(read_err(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    // Per target: its images written under each compression, one after another.
    let mut images: std::collections::BTreeMap<Target, [Vec<u8>; 3]> = Default::default();
    let mut isa = std::collections::BTreeMap::new();
    let mut other = Vec::new();
    let mut modules = 0;
    for path in &files {
        let data = fatkit_read::read_file(path).map_err(read_err(path))?;
        if path.extension().is_none_or(|e| e != "fatbin") {
            other.extend_from_slice(&data);
            continue;
        }
        modules += 1;
        for image in extract_all("plan", &data, &Limits::default()) {
            let (Some(target), Ok(bytes)) = (image.target, image.bytes) else {
                continue;
            };
            if !matches!(image.kind, EntryKind::Cubin | EntryKind::Ptx) {
                continue;
            }
            if target.kind == ImageKind::Ptx {
                if let Some(v) = fatkit_fatbin::ptx::inspect(&bytes).version {
                    isa.insert(target, v);
                }
            }
            let slot = images.entry(target).or_default();
            for (i, compression) in ORDER.iter().enumerate() {
                let one = write(&[Input {
                    target,
                    data: &bytes,
                    identifier: None,
                    compression: *compression,
                }])
                .map_err(|e| MeasureError::Rewrite {
                    path: path.clone(),
                    target,
                    reason: e.reason,
                })?;
                if let Some(buf) = slot.get_mut(i) {
                    buf.extend_from_slice(&one);
                }
            }
        }
    }
    if modules == 0 {
        return Err(MeasureError::NoModules(dir.to_owned()));
    }
    let candidates = images
        .into_iter()
        .map(|(target, written)| Candidate {
            target,
            ptx_isa: isa.get(&target).copied(),
            bytes: written.map(|w| Some(shipped.size(&w))),
        })
        .collect();
    Ok(Measured {
        candidates,
        base: shipped.size(&other),
        modules,
    })
}

/// A size as people write it: bytes, or with `KiB`, `MiB`, `GiB` (powers of 1024) or `KB`,
/// `MB`, `GB` (of 1000); `10 MiB` is crates.io's limit.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
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

/// The chosen plan as a profile (`arch-profiles/NAME.toml`).
pub fn profile_toml(plan: &fatkit_arch::plan::Plan, budget: u64, shipped: Shipped) -> String {
    let list = |kind: ImageKind| -> String {
        plan.targets
            .iter()
            .filter(|t| t.kind == kind)
            .map(|t| format!("\"{t}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let what = match shipped {
        Shipped::Crate => "a .crate",
        Shipped::Wheel => "a wheel",
        Shipped::Fatbin => "the fatbins",
    };
    format!(
        "# Written by `fatkit plan`: the targets covering the most GPUs within {budget} bytes for {what}.\n\
         description = \"planned for {budget} bytes ({} bytes as measured)\"\n\
         targets = [{}]\n\
         ptx = [{}]\n\
         compress = \"{}\"\n",
        plan.bytes,
        list(ImageKind::Cubin),
        list(ImageKind::Ptx),
        plan.compress.name()
    )
}

/// Writes the chosen profile to `path` whole or not at all (a temporary renamed into place).
pub fn write_profile(path: &Path, toml: &str) -> Result<(), MeasureError> {
    crate::out::write_atomic(path, toml.as_bytes()).map_err(|source| MeasureError::Write {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(parse_size("10 MiB"), Ok(10 << 20));
        assert_eq!(parse_size("10485760"), Ok(10_485_760));
        assert_eq!(parse_size("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_size("250mb"), Ok(250_000_000));
        for bad in ["", "ten", "10 parsecs", "0", "-1 MiB", "1e400"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
