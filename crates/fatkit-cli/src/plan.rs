//! `plan [DIR] --budget SIZE`: of the targets built in DIR (without DIR: the workspace's
//! units, built now for `--profile` or each unit's own, from the cache where it can), the set
//! covering the most GPUs within a budget as the package ships
//! (`fatkit_project::weigh::measure`, then `fatkit_arch::target_search::plan`), with every GPU's answer
//! and the neighbouring choices; `--write` writes it as a profile (issue 45).

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use fatkit_arch::products;
use fatkit_arch::target_search::{Goal, Plan as Chosen, Planned};
use fatkit_arch::Cc;
use fatkit_project::weigh::{measure, parse_size, profile_toml, Shipped};

use crate::{Error, Outcome, Result};

#[derive(Debug, Args)]
pub struct Plan {
    /// The modules built for every candidate target: a vendor directory, or the output of
    /// build-kernels for a wide profile (every *.fatbin in it; its other files are the base)
    /// [default: every unit of the workspace, built now as build-kernels builds it]
    #[arg(value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Without DIR: how the candidates are built (`--profile full` for every target of full)
    #[command(flatten)]
    build: fatkit_project::units::Options,
    /// The most the package may weigh as shipped: bytes, or with KiB, MiB, GiB ("10 MiB" is
    /// crates.io's limit)
    #[arg(long, value_name = "SIZE")]
    budget: String,
    /// How it ships: crate (.crate, gzip), wheel (deflate) or fatbin [default: crate for a
    /// vendored package's modules, fatbin for any others (built into target/fatkit)]
    #[arg(long = "for", value_name = "WHAT")]
    shipped: Option<String>,
    /// A GPU that must run from a cubin (product name or compute capability; repeat for more)
    #[arg(long, value_name = "NAME")]
    gpu: Vec<String>,
    /// The oldest driver the package's users have: PTX it cannot JIT does not count, and a
    /// compression it cannot load is not chosen
    #[arg(long, value_name = "VERSION")]
    driver: Option<String>,
    /// Write the chosen targets as a profile to this file
    #[arg(long, value_name = "FILE.toml")]
    write: Option<PathBuf>,
}

impl Plan {
    pub fn run(self, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        let budget = parse_size(&self.budget).map_err(Error::Budget)?;
        let chosen = match &self.shipped {
            Some(s) => Some(Shipped::parse(s).ok_or_else(|| Error::Shipped(s.clone()))?),
            None => None,
        };
        let native = self
            .gpu
            .iter()
            .map(|g| products::lookup(g).map(|g| g.cc))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let driver = self
            .driver
            .as_deref()
            .map(|d| {
                d.parse().map_err(|error| Error::Parse {
                    option: "--driver",
                    error,
                })
            })
            .transpose()?;
        let goal = Goal {
            budget,
            base: [0; 3],
            native,
            driver,
        };
        let dirs = match &self.dir {
            Some(dir) => vec![(
                dir.display().to_string(),
                dir.clone(),
                fatkit_project::weigh::is_vendored(dir),
            )],
            None => {
                let built = self.build_candidates()?;
                if built.is_empty() {
                    return Err(Error::PlanNotBuilt);
                }
                built
            }
        };
        if self.write.is_some() && dirs.len() > 1 {
            return Err(Error::PlanWhich(dirs.len()));
        }
        for (label, dir, vendored) in dirs {
            let shipped = match (chosen, vendored) {
                // DIR named with --for crate: weighed as asked (its package is not ours to know).
                (Some(Shipped::Crate), false) if self.dir.is_none() => {
                    return Err(Error::PlanNotVendored(label))
                }
                (Some(s), _) => s,
                (None, true) => Shipped::Crate,
                (None, false) => Shipped::Fatbin,
            };
            let measured = measure(&dir, shipped)?;
            let goal = Goal {
                base: measured.base,
                ..goal.clone()
            };
            let planned =
                fatkit_arch::target_search::plan(&measured.candidates, &goal, Default::default())?;
            writeln!(
                out,
                "{label}: {} modules, {} targets measured; within {} as {}:",
                measured.modules,
                measured.candidates.len(),
                bytes(budget),
                shipped.name()
            )?;
            let written = fatkit_project::weigh::weigh(
                &dir,
                &planned.best.targets,
                planned.best.compress,
                shipped,
            )?;
            for file in &measured.set_aside {
                writeln!(
                    out,
                    "  not weighed: {} (cargo package --list names it, as no ignore file keeps it out, but it is a build output or fatkit's release archive; exclude it in Cargo.toml or .gitignore)",
                    file.display()
                )?;
            }
            let floors =
                fatkit_project::weigh::driver_floors(&planned.best.targets, &measured.candidates);
            write_plan(out, &planned, written, &floors)?;
            write_doubted(out, &planned, &measured.candidates, goal.driver)?;
            let toml = profile_toml(&planned.best, budget, shipped);
            match &self.write {
                Some(path) => {
                    fatkit_project::weigh::write_profile(path, &toml)?;
                    writeln!(out, "\nwrote {}", path.display())?;
                }
                None => writeln!(out, "\nas a profile (--write FILE.toml writes it):\n{toml}")?,
            }
        }
        Ok(Outcome::Ok)
    }
}

impl Plan {
    /// Builds the workspace's units (progress on stderr; the cache serves what it holds) and
    /// names each unit's modules: `(label, directory, vendored)`. Empty when the build failed.
    fn build_candidates(&self) -> Result<Vec<(String, PathBuf, bool)>> {
        let mut options = self.build.absolute()?;
        options.unweighed = true;
        let start = options.start_dir()?;
        let units = fatkit_project::units::units(&options, &start, None)?;
        let dirs = units
            .iter()
            .map(|u| {
                let vendored = u.ask.stamp.as_ref().is_some_and(|s| s.vendored);
                (u.label.clone(), u.ask.out_dir.clone(), vendored)
            })
            .collect();
        let built = crate::build_kernels::BuildKernels::with(options)
            .run_in(&start, &mut std::io::stderr())?;
        Ok(match built {
            Outcome::Ok => dirs,
            _ => Vec::new(),
        })
    }
}

/// A size in the unit that reads best, with its bytes.
fn bytes(n: u64) -> String {
    let n_f = n as f64;
    match n {
        0..1024 => format!("{n} bytes"),
        1024..1_048_576 => format!("{:.1} KiB ({n} bytes)", n_f / 1024.0),
        _ => format!("{:.1} MiB ({n} bytes)", n_f / 1_048_576.0),
    }
}

fn ccs(list: &[Cc]) -> String {
    match list {
        [] => "none".to_owned(),
        l => l
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// The chosen plan: its targets, compression, size, what its PTX needs of the driver, and
/// every product compute capability's answer, then its neighbours.
fn write_plan(
    out: &mut dyn Write,
    planned: &Planned,
    written: u64,
    floors: &fatkit_arch::floor::Floors,
) -> std::io::Result<()> {
    let best = &planned.best;
    match best.targets.iter().next() {
        Some(_) => writeln!(out, "  targets:  {}", best.targets)?,
        None => writeln!(
            out,
            "  targets:  none (no target runs any GPU of the tables)"
        )?,
    }
    writeln!(
        out,
        "  compress: {}{}",
        best.compress.name(),
        best.compress
            .min_driver_cuda()
            .map_or_else(String::new, |v| format!(" (needs a CUDA {v}-level driver)"))
    )?;
    writeln!(
        out,
        "  size:     {} as written (the search's estimate: {})",
        bytes(written),
        bytes(best.bytes)
    )?;
    writeln!(out, "  driver:")?;
    for line in fatkit_audit::text::floors::lines(floors, "    ") {
        writeln!(out, "{line}")?;
    }
    writeln!(out, "  every GPU of the product tables:")?;
    for (how, list) in [
        ("from a cubin", &best.native),
        ("by PTX JIT", &best.jit),
        ("nothing runs", &best.none),
    ] {
        for cc in list.iter() {
            let names: Vec<&str> = products::products_of(*cc).map(|p| p.name).take(3).collect();
            let cc = cc.to_string();
            writeln!(out, "    CC {cc:<5} {how:<13} {}", names.join(", "))?;
        }
    }
    for (word, other) in [("cheaper", &planned.cheaper), ("dearer", &planned.dearer)] {
        if let Some(other) = other {
            write_neighbour(out, word, best, other)?;
        }
    }
    Ok(())
}

/// The cubins the planner did not count for the GPUs the driver floor runs (the rules doubt
/// that driver loads them; with no floor, a toolkit newer than the tables), by the CUDA
/// release that built them (a driver loads cubins of its own CUDA major and older), and how
/// to ship them for it or what to give.
fn write_doubted(
    out: &mut dyn Write,
    planned: &Planned,
    candidates: &[fatkit_arch::target_search::Candidate],
    driver: Option<fatkit_arch::driver::DriverVersion>,
) -> std::io::Result<()> {
    let mut by_toolkit: std::collections::BTreeMap<_, Vec<String>> = Default::default();
    for c in candidates
        .iter()
        .filter(|c| planned.doubted.contains(&c.target))
    {
        if let Some(v) = c.toolkit {
            by_toolkit.entry(v).or_default().push(c.target.to_string());
        }
    }
    for (toolkit, targets) in by_toolkit {
        let targets = targets.join(" ");
        match driver.map(|d| (d, d.cuda_level())) {
            Some((driver, Some(level))) => writeln!(
                out,
                "  not counted: {targets} (cubins from CUDA {toolkit}, which need a CUDA {}.x driver; driver {} is at the CUDA {level} level): to count them, build them with a CUDA {}.x nvcc (a [toolchain] pin in the profile)",
                toolkit.major,
                driver.describe(),
                level.major,
            )?,
            Some((driver, None)) => writeln!(
                out,
                "  not counted: {targets} (cubins from CUDA {toolkit}: the tables cannot place driver {}, so whether it loads them is unknown); give a driver the tables know (nvidia-smi's version)",
                driver.describe(),
            )?,
            // No driver floor: the rules doubt a toolkit newer than the tables.
            None => writeln!(
                out,
                "  not counted: {targets} (cubins from CUDA {toolkit}, newer than the tables: which driver loads them is unknown); pass --driver with the oldest driver your users have",
            )?,
        }
    }
    Ok(())
}

/// What a neighbouring choice changes: its targets, size, and the GPUs it gains or loses.
fn write_neighbour(
    out: &mut dyn Write,
    word: &str,
    best: &Chosen,
    other: &Chosen,
) -> std::io::Result<()> {
    // What `from` has that none of `than` has.
    let minus = |from: &[Cc], than: &[&[Cc]]| -> Vec<Cc> {
        from.iter()
            .filter(|c| than.iter().all(|list| !list.contains(c)))
            .copied()
            .collect()
    };
    let lost = minus(&best.native, &[&other.native]);
    let gained = minus(&other.native, &[&best.native]);
    let jit_lost = minus(&best.jit, &[&other.jit, &other.native]);
    let jit_gained = minus(&other.jit, &[&best.jit, &best.native]);
    let exact_lost = minus(&best.exact, &[&other.exact]);
    let exact_gained = minus(&other.exact, &[&best.exact]);
    let has_ptx = |p: &Chosen| p.targets.iter().any(|t| t.is_ptx());
    let ptx = match (has_ptx(best), has_ptx(other)) {
        (true, false) => ", no PTX for GPUs newer than the tables",
        (false, true) => ", PTX for GPUs newer than the tables",
        _ => "",
    };
    writeln!(
        out,
        "  {word}:  {} compress {}, {}: from a cubin +[{}] -[{}], by JIT +[{}] -[{}], its own cubin +[{}] -[{}]{ptx}",
        other.targets,
        other.compress.name(),
        bytes(other.bytes),
        ccs(&gained),
        ccs(&lost),
        ccs(&jit_gained),
        ccs(&jit_lost),
        ccs(&exact_gained),
        ccs(&exact_lost),
    )
}
