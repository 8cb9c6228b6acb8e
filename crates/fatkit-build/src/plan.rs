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

pub use fatkit_arch::plan::{parse_size, Shipped};

/// Bytes as `shipped` of `data`.
pub fn shipped_size(shipped: Shipped, data: &[u8]) -> u64 {
    let level = match shipped {
        Shipped::Fatbin => return data.len() as u64,
        Shipped::Crate => flate2::Compression::best(),
        Shipped::Wheel => flate2::Compression::new(6),
    };
    let mut z = flate2::write::DeflateEncoder::new(Vec::new(), level);
    let _ = z.write_all(data);
    z.finish().map_or(data.len() as u64, |v| v.len() as u64)
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
            bytes: written.map(|w| Some(shipped_size(shipped, &w))),
        })
        .collect();
    Ok(Measured {
        candidates,
        base: shipped_size(shipped, &other),
        modules,
    })
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

/// What a unit's build ships, measured as its budget says (a vendored package's `.crate` also
/// against crates.io's limit), and the refusal when it is over: the size, the budget, and the
/// plan that fits (`fatkit_arch::plan` over the modules just built).
pub(crate) fn check_budget(
    label: &str,
    profile: &fatkit_arch::profile::Profile,
    out_dir: &Path,
    vendored_in: Option<&Path>,
) -> Result<(), crate::BuildError> {
    use fatkit_arch::plan::{Budget, CRATES_IO_LIMIT};
    let mut budgets: Vec<(Budget, &'static str)> = Vec::new();
    if let Some(b) = profile.budget {
        budgets.push((b, "its budget"));
    }
    if vendored_in.is_some() {
        let limit = Budget {
            bytes: CRATES_IO_LIMIT,
            shipped: Shipped::Crate,
        };
        budgets.push((limit, "crates.io's limit"));
    }
    for (budget, whose) in budgets {
        let size = shipped_bytes(budget.shipped, out_dir, vendored_in)?;
        if size <= budget.bytes {
            continue;
        }
        let fits = fitting_plan(out_dir, budget, size);
        return Err(crate::refused::Refused::OverBudget {
            unit: label.to_owned(),
            shipped: budget.shipped.name(),
            size,
            budget: budget.bytes,
            whose,
            fits,
            dir: out_dir.to_owned(),
        }
        .into());
    }
    Ok(())
}

/// The largest file of a package read to weigh its `.crate`.
const MAX_PACKAGE_FILE: u64 = 4 << 30;

/// What the unit's result weighs as `shipped`: its fatbins; each file of its directory
/// deflated (a wheel); or its package as `cargo package` lists it, tarred and gzipped at
/// cargo's level (a `.crate`; where cargo cannot list it, the output directory alone).
fn shipped_bytes(
    shipped: Shipped,
    out_dir: &Path,
    package: Option<&Path>,
) -> Result<u64, crate::BuildError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |e: std::io::Error| {
            crate::BuildError::from(crate::refused::Refused::Unweighable { path, source: e })
        }
    };
    let files_of = |dir: &Path| -> Result<Vec<PathBuf>, crate::BuildError> {
        let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(io(dir))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        out.sort();
        Ok(out)
    };
    match shipped {
        Shipped::Fatbin => files_of(out_dir)?
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "fatbin"))
            .map(|p| std::fs::metadata(p).map(|m| m.len()).map_err(io(p)))
            .sum(),
        Shipped::Wheel => files_of(out_dir)?
            .iter()
            .map(|p| {
                let data = fatkit_read::read_limited(p, MAX_PACKAGE_FILE).map_err(io(p))?;
                Ok(shipped_size(Shipped::Wheel, &data))
            })
            .sum(),
        Shipped::Crate => {
            let files = match package.and_then(cargo_package_list) {
                Some(listed) => listed,
                None => files_of(out_dir)?,
            };
            // A tar: a 512-byte header per file, its data padded to 512.
            let mut tar = Vec::new();
            for p in &files {
                let data = fatkit_read::read_limited(p, MAX_PACKAGE_FILE).map_err(io(p))?;
                tar.extend_from_slice(&[0u8; 512]);
                tar.extend_from_slice(&data);
                tar.resize(tar.len().next_multiple_of(512), 0);
            }
            Ok(shipped_size(Shipped::Crate, &tar))
        }
    }
}

/// The files of the package at `dir` as `cargo package --list` names them (those on disk:
/// cargo also writes `Cargo.toml.orig` and its VCS record); `None` where cargo cannot list it.
fn cargo_package_list(dir: &Path) -> Option<Vec<PathBuf>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = crate::command::output_of(
        std::process::Command::new(cargo)
            .args(["package", "--list", "--allow-dirty", "--offline", "--quiet"])
            .current_dir(dir),
        crate::command::How::QUERY,
        "cargo package --list",
    )
    .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Some(
        text.lines()
            .map(|l| dir.join(l.trim()))
            .filter(|p| p.is_file())
            .collect(),
    )
}

/// The plan that fits `budget`, in words, over the modules in `out_dir` (their other files the
/// base, and whatever else ships beside them as measured now).
fn fitting_plan(out_dir: &Path, budget: fatkit_arch::plan::Budget, size: u64) -> String {
    let measured = match measure(out_dir, budget.shipped) {
        Ok(m) => m,
        Err(e) => return format!("no plan: {e}"),
    };
    // What ships besides the images: the size now, less what the images add uncompressed.
    let images: u64 = measured
        .candidates
        .iter()
        .filter_map(|c| c.bytes.first().copied().flatten())
        .sum();
    let goal = fatkit_arch::plan::Goal {
        budget: budget.bytes,
        base: size.saturating_sub(images).max(measured.base),
        native: Vec::new(),
        driver: None,
    };
    match fatkit_arch::plan::plan(&measured.candidates, &goal, Default::default()) {
        Ok(p) => format!(
            "targets {} with compress = \"{}\" fit ({} bytes)",
            p.best.targets,
            p.best.compress.name(),
            p.best.bytes
        ),
        Err(e) => e.to_string(),
    }
}
