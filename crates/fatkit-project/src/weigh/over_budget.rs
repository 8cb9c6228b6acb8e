//! The budget a unit's build is held to after it builds: what it ships, weighed as its budget
//! says (a vendored package's `.crate` also against crates.io's limit), and the refusal naming
//! the plan that fits.

use std::path::Path;

use super::crate_file::{self, crate_bytes, Listed, MAX_PACKAGE_FILE};
use super::{files_of, is_module, measure, shipped_size, weigh, Shipped};

/// What a unit's build ships, measured as its budget says (a vendored package's `.crate` also
/// against crates.io's limit), and the refusal when it is over: the size, the budget, and the
/// plan that fits (`fatkit_arch::target_search` over the modules just built).
pub(crate) fn check_budget(
    label: &str,
    profile: &fatkit_arch::profile::Profile,
    out_dir: &Path,
    vendored_in: Option<&Path>,
) -> Result<(), fatkit_package::error::BuildError> {
    use fatkit_arch::target_search::{Budget, CRATES_IO_LIMIT};
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
        let Some(size) = shipped_bytes(budget.shipped, out_dir, vendored_in, budget.bytes)? else {
            continue;
        };
        if size <= budget.bytes {
            continue;
        }
        let fits = fitting_plan(out_dir, budget);
        return Err(fatkit_build::refused::Refused::OverBudget {
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

/// What the unit's result weighs as `shipped`: its fatbins; each file of its directory
/// deflated (a wheel); or its package as `cargo package` lists it, tarred and gzipped at
/// cargo's level (a `.crate`; where cargo cannot list it, the output directory alone). `None`
/// where the files are so small that, compressed, they cannot pass `within` (deflate adds at
/// most 5 bytes per 16 KiB block, a tar at most 1 KiB per file): nothing is compressed then,
/// so that a build that is far from its budget pays for no weighing.
fn shipped_bytes(
    shipped: Shipped,
    out_dir: &Path,
    package: Option<&Path>,
    within: u64,
) -> Result<Option<u64>, fatkit_package::error::BuildError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |e: std::io::Error| {
            fatkit_package::error::BuildError::from(fatkit_build::refused::Refused::Unweighable {
                path,
                source: e,
            })
        }
    };
    let files = || files_of(out_dir).map_err(io(out_dir));
    let at_most = |listed: &Listed| -> Result<u64, fatkit_package::error::BuildError> {
        let mut bound = 64u64;
        let made = listed
            .made
            .iter()
            .map(|m| Ok::<u64, fatkit_package::error::BuildError>(m.len() as u64));
        let files = listed
            .files
            .iter()
            .map(|p| Ok(std::fs::metadata(p).map_err(io(p))?.len()));
        for len in files.chain(made) {
            let len: u64 = len?;
            bound = bound.saturating_add(len + len / (16 << 10) * 5 + 1024);
        }
        Ok(bound)
    };
    if shipped == Shipped::Fatbin {
        let size: Result<u64, _> = files()?
            .iter()
            .filter(|p| is_module(p))
            .map(|p| std::fs::metadata(p).map(|m| m.len()).map_err(io(p)))
            .sum();
        return size.map(Some);
    }
    let listed = match (shipped, package.and_then(crate_file::list)) {
        (Shipped::Crate, Some(listed)) => listed,
        _ => Listed {
            files: files()?,
            made: Vec::new(),
        },
    };
    if at_most(&listed)? <= within {
        return Ok(None);
    }
    let size = match shipped {
        Shipped::Wheel => listed
            .files
            .iter()
            .map(|p| {
                let data = fatkit_read::read_limited(p, MAX_PACKAGE_FILE).map_err(io(p))?;
                Ok(shipped_size(Shipped::Wheel, &data))
            })
            .sum(),
        _ => crate_bytes(&listed.files, &listed.made).map_err(|(p, e)| io(&p)(e)),
    };
    size.map(Some)
}

/// The plan that fits `budget`, in words, over the modules in `out_dir` and what ships beside
/// them ([`measure`]), its size as written ([`weigh`]).
fn fitting_plan(out_dir: &Path, budget: fatkit_arch::target_search::Budget) -> String {
    let measured = match measure(out_dir, budget.shipped) {
        Ok(m) => m,
        Err(e) => return format!("no plan: {e}"),
    };
    let goal = fatkit_arch::target_search::Goal {
        budget: budget.bytes,
        base: measured.base,
        native: Vec::new(),
        driver: None,
    };
    match fatkit_arch::target_search::plan(&measured.candidates, &goal, Default::default()) {
        Ok(p) => {
            let written = weigh(out_dir, &p.best.targets, p.best.compress, budget.shipped)
                .unwrap_or(p.best.bytes);
            format!(
                "targets {} with compress = \"{}\" fit ({written} bytes as written)",
                p.best.targets,
                p.best.compress.name(),
            )
        }
        Err(e) => e.to_string(),
    }
}
