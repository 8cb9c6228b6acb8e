//! `profiles`: list the arch profiles; `profiles show NAME [--gpu G] [--driver V]` explains one.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use fatkit_arch::driver::{DriverVersion, PtxRequirement};
use fatkit_arch::products;
use fatkit_arch::rules::{Policy, Status};
use fatkit_arch::toolkit::{self, CudaVersion};
use fatkit_arch::Target;
use fatkit_audit::profiles::{self, GpuReport, PtxAssumption, Shown};
use fatkit_package::profile::ProfileError;
use fatkit_package::profile::ProfileSet;

use fatkit_audit::text::table;

use crate::{Outcome, Result};

#[derive(Debug, Args)]
pub struct Profiles {
    #[command(subcommand)]
    action: Option<Action>,
    /// Local profiles that add to or override the built-ins [default: arch-profiles/ here or in a parent]
    #[arg(long, global = true, env = "FATKIT_PROFILES_DIR", value_name = "DIR")]
    profiles_dir: Option<PathBuf>,
    /// Print JSON for machines instead of text
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Explain one profile: targets, toolkits able to build it, GPUs it covers
    Show(Show),
}

#[derive(Debug, Args)]
struct Show {
    /// A profile name (`full`) or the path of a .toml file
    profile: String,
    /// Answer for one GPU: a product name ("RTX 5090", "H100") or a compute capability ("8.6")
    #[arg(long, value_name = "NAME|X.Y")]
    gpu: Option<String>,
    /// The driver: as nvidia-smi prints it (570.86.10) or as cuDriverGetVersion returns it (12080)
    #[arg(long, value_name = "VER")]
    driver: Option<String>,
    /// Assume the PTX is written by this CUDA version [default: the oldest that builds the profile]
    #[arg(long, value_name = "X.Y")]
    cuda: Option<String>,
    /// Count Jetson minors (7.2, 8.7, 11.0) as covered only by their own cubin, as PyTorch does
    #[arg(long)]
    strict_igpu: bool,
}

impl Profiles {
    pub fn run(self, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        let set = match &self.profiles_dir {
            Some(dir) => ProfileSet::open(dir)?,
            None => ProfileSet::discover(&std::env::current_dir()?)?,
        };
        match self.action {
            None => list(&set, self.json, out),
            Some(Action::Show(show)) => show.run(&set, self.json, out),
        }
    }
}

/// `CUDA 12.8-12.9`, `CUDA 12.8+`, `CUDA 11.0-12.9, 13.4+`: runs of consecutive known versions.
fn version_ranges(versions: &[CudaVersion]) -> String {
    let known: Vec<CudaVersion> = toolkit::TOOLKITS.iter().map(|t| t.version).collect();
    let idx: Vec<usize> = versions
        .iter()
        .filter_map(|v| known.iter().position(|k| k == v))
        .collect();
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for i in idx {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == i => *end = i,
            _ => runs.push((i, i)),
        }
    }
    let name = |i: usize| known.get(i).map_or_else(String::new, |v| v.to_string());
    let parts: Vec<String> = runs
        .iter()
        .map(|&(a, b)| match (a == b, b + 1 == known.len()) {
            (_, true) => format!("{}+", name(a)),
            (true, false) => name(a),
            (false, false) => format!("{}-{}", name(a), name(b)),
        })
        .collect();
    if parts.is_empty() {
        "no known toolkit".to_owned()
    } else {
        format!("CUDA {}", parts.join(", "))
    }
}

/// The toolkits that build a profile today, newest first: `nvcc 13.2 + nvrtc 12.9`.
fn builds_with(today: Option<&fatkit_project::floor::Today>) -> String {
    match today {
        Some(t) => t
            .toolkits()
            .iter()
            .map(|(c, v)| format!("{c} {v}"))
            .collect::<Vec<_>>()
            .join(" + "),
        None => "nothing fatkit provisions".to_owned(),
    }
}

/// The release's driver floor in a table cell.
fn driver_cell(today: Option<&fatkit_project::floor::Today>) -> String {
    today
        .and_then(|t| t.floors.release.as_ref())
        .and_then(|r| r.floor.release)
        .map_or_else(|| "-".to_owned(), |r| r.to_string())
}

fn list(set: &ProfileSet, json: bool, out: &mut (dyn Write + Send)) -> Result<Outcome> {
    let listed = fatkit_project::floor::listed(set);
    if json {
        serde_json::to_writer_pretty(&mut *out, &listed).map_err(std::io::Error::from)?;
        writeln!(out)?;
        return Ok(if listed.listing.errors.is_empty() {
            Outcome::Ok
        } else {
            Outcome::Finding
        });
    }
    let (entries, errors) = (&listed.listing.profiles, &listed.listing.errors);
    let join = |ts: &[Target]| {
        ts.iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            let today = listed.builds.get(&e.name).and_then(Option::as_ref);
            vec![
                e.name.clone(),
                join(&e.cubins),
                if e.ptx.is_empty() {
                    "-".into()
                } else {
                    join(&e.ptx)
                },
                builds_with(today),
                driver_cell(today),
                e.description.clone(),
            ]
        })
        .collect();
    write!(
        out,
        "{}",
        table::render(
            &[
                "NAME",
                "CUBINS",
                "PTX",
                "BUILDS WITH",
                "DRIVER",
                "DESCRIPTION"
            ],
            &rows
        )
    )?;
    for e in errors {
        writeln!(out, "{}: invalid: {}", e.name, e.error)?;
    }
    if !errors.is_empty() {
        return Err(ProfileError::Read {
            path: set.dir.clone().unwrap_or_default(),
            source: std::io::Error::other(format!(
                "{} invalid profile(s), shown above",
                errors.len()
            )),
        }
        .into());
    }
    Ok(Outcome::Ok)
}

/// The PTX assumption a report rests on, in words.
fn describe_ptx(ptx: &PtxAssumption) -> String {
    match (ptx.toolkit, ptx.isa) {
        (Some(v), Some(isa)) => {
            let need = PtxRequirement::of(isa);
            format!("ISA {isa} if written by CUDA {v}; {need} (--cuda to assume another toolkit)")
        }
        (Some(v), None) => format!("written by CUDA {v}, whose PTX ISA is not in the tables"),
        (None, _) => "no known toolkit builds this profile".to_owned(),
    }
}

impl Show {
    fn run(self, set: &ProfileSet, json: bool, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        let origin = set.resolve(&self.profile)?;
        let profile = origin.load()?;
        // Show paths as the user would type them: relative to the current directory.
        let cwd = std::env::current_dir().unwrap_or_default();
        let path = match origin.path() {
            Some(path) => path
                .strip_prefix(&cwd)
                .map_or_else(|_| path.to_path_buf(), Path::to_path_buf),
            None => PathBuf::from("built-in"),
        };
        let driver: Option<DriverVersion> =
            crate::parse_option("--driver", self.driver.as_deref())?;
        let cuda: Option<CudaVersion> = crate::parse_option("--cuda", self.cuda.as_deref())?;
        let policy = Policy {
            strict_igpu: self.strict_igpu,
        };
        // The PTX as fatkit would write it today, unless --cuda names another toolkit.
        let today = fatkit_project::floor::today(&profile);
        let ptx = PtxAssumption::new(&profile, cuda.or_else(|| today.as_ref()?.ptx_toolkit()));
        match &self.gpu {
            Some(query) => {
                let gpu = products::lookup(query)?;
                // The set's other profiles, read only if this one does not run.
                let others = set
                    .entries
                    .iter()
                    .filter_map(|(name, origin)| Some((name.clone(), origin.load().ok()?)));
                let report = GpuReport::new(&profile, others, &gpu, (driver, ptx), policy);
                if json {
                    serde_json::to_writer_pretty(&mut *out, &report)
                        .map_err(std::io::Error::from)?;
                    writeln!(out)?;
                } else {
                    gpu::write_text(&report, out)?;
                }
                Ok(if report.status == Status::Runs {
                    Outcome::Ok
                } else {
                    Outcome::Finding
                })
            }
            None => {
                let shown = profiles::shown(&profile, &path, driver, ptx, policy);
                let shown = fatkit_project::floor::WithToday { shown, today };
                if json {
                    serde_json::to_writer_pretty(&mut *out, &shown)
                        .map_err(std::io::Error::from)?;
                    writeln!(out)?;
                } else {
                    write_shown(&shown.shown, out)?;
                    write_today(shown.today.as_ref(), out)?;
                }
                Ok(Outcome::Ok)
            }
        }
    }
}

/// How fatkit would build the profile today, and the driver that build needs on each GPU.
fn write_today(
    today: Option<&fatkit_project::floor::Today>,
    out: &mut (dyn Write + Send),
) -> Result<()> {
    let Some(t) = today else {
        writeln!(
            out,
            "\ndriver    no toolchain fatkit has or provisions builds it"
        )?;
        return Ok(());
    };
    let note = match t.toolchains {
        fatkit_project::floor::Toolchains::Installed => "",
        fatkit_project::floor::Toolchains::Provisioned => {
            " (not installed: as fatkit provisions it)"
        }
    };
    writeln!(out, "\nbuilt today by:")?;
    for (compiler, cuda) in t.toolkits() {
        let targets: Vec<String> = t
            .built
            .iter()
            .filter(|b| (b.compiler, b.cuda) == (compiler, cuda))
            .map(|b| b.target.to_string())
            .collect();
        writeln!(out, "  {compiler} {cuda}: {}{note}", targets.join(" "))?;
    }
    writeln!(out, "driver it needs:")?;
    for line in fatkit_audit::text::floors::lines(&t.floors, "  ") {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// A profile as text: what it builds, with what, and the GPUs it covers.
fn write_shown(shown: &Shown<'_>, out: &mut (dyn Write + Send)) -> Result<()> {
    let profile = shown.profile;
    let names = |ts: Vec<Target>| {
        if ts.is_empty() {
            "-".to_owned()
        } else {
            ts.iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        }
    };
    writeln!(out, "profile   {} ({})", profile.name, shown.path.display())?;
    if !profile.description.is_empty() {
        writeln!(out, "          {}", profile.description)?;
    }
    writeln!(
        out,
        "cubins    {}",
        names(profile.targets.cubins().collect())
    )?;
    writeln!(out, "ptx       {}", names(profile.targets.ptx().collect()))?;
    if !profile.extra.is_empty() {
        writeln!(
            out,
            "extra     {} (for the kernels that need them)",
            names(profile.extra.iter().collect())
        )?;
    }
    let compress = match profile.compress.min_driver_cuda() {
        Some(v) => format!(
            "{} (needs a CUDA {v}-level driver)",
            profile.compress.name()
        ),
        None => profile.compress.name().to_owned(),
    };
    writeln!(out, "compress  {compress}")?;
    if let Some(min) = profile.min_cuda {
        writeln!(out, "min_cuda  {min}")?;
    }
    write_toolkits(shown, out)?;
    writeln!(out, "PTX       {}", describe_ptx(&shown.ptx))?;
    write_coverage(shown, out)
}

fn write_toolkits(shown: &Shown<'_>, out: &mut (dyn Write + Send)) -> Result<()> {
    if shown.single_toolkits.is_empty() {
        writeln!(
            out,
            "toolkits  no single toolkit builds all of it; merge these:"
        )?;
        for route in &shown.routes {
            writeln!(
                out,
                "            {:<12} {}",
                route.target.to_string(),
                version_ranges(&route.toolkits)
            )?;
        }
    } else {
        writeln!(
            out,
            "toolkits  {} (any one builds all of it)",
            version_ranges(&shown.single_toolkits)
        )?;
    }
    Ok(())
}

fn write_coverage(shown: &Shown<'_>, out: &mut (dyn Write + Send)) -> Result<()> {
    let driver_note = match shown.driver {
        Some(d) => format!("driver {}", d.describe()),
        None => "no driver given: PTX judged by architecture only".to_owned(),
    };
    let policy_note = if shown.policy.strict_igpu {
        "strict iGPU policy"
    } else {
        "standard policy"
    };
    writeln!(out, "\nGPUs covered ({driver_note}; {policy_note}):")?;
    let rows: Vec<Vec<String>> = shown
        .coverage
        .iter()
        .map(|row| {
            let mark = match row.status {
                Status::Runs => "yes",
                Status::Unknown => "unknown",
                Status::Fails => "NO",
            };
            vec![
                row.cc.to_string(),
                mark.to_owned(),
                row.how.clone(),
                row.products.join(", "),
            ]
        })
        .collect();
    write!(
        out,
        "{}",
        table::render(&["CC", "RUNS", "IMAGE", "PRODUCTS"], &rows)
    )?;
    Ok(())
}

mod gpu;

#[cfg(test)]
mod tests;
