//! `profiles show PROFILE --gpu G`: which image of the profile the driver loads on one GPU, and
//! why every other is passed over.

use std::io::Write;

use fatkit_arch::driver::DriverVersion;
use fatkit_arch::explain;
use fatkit_arch::products::Gpu;
use fatkit_arch::profile::Profile;
use fatkit_arch::rules::{Device, Policy, Status};
use fatkit_arch::{ImageKind, Target};
use fatkit_build::profile::ProfileSet;
use serde::Serialize;

use super::PtxAssumption;

#[derive(Serialize)]
struct Selected {
    target: Target,
    kind: ImageKind,
    /// For a cubin: built for exactly this compute capability.
    exact: bool,
}

#[derive(Serialize)]
struct LoadErrorJson {
    code: u32,
    name: &'static str,
    message: &'static str,
}

#[derive(Serialize)]
struct RejectedJson {
    target: Target,
    reason: String,
}

#[derive(Serialize)]
pub(super) struct GpuReport {
    profile: String,
    gpu: Gpu,
    driver: Option<DriverVersion>,
    ptx: PtxAssumption,
    policy: Policy,
    pub(super) status: Status,
    selected: Option<Selected>,
    /// Why the verdict is not certain, when it is `unknown`.
    uncertain: Option<String>,
    error: Option<LoadErrorJson>,
    rejected: Vec<RejectedJson>,
    fix: Option<String>,
    /// Other profiles of the directory that cover this GPU.
    covering_profiles: Vec<String>,
    #[serde(skip)]
    images: String,
}

impl GpuReport {
    pub(super) fn new(
        profile: &Profile,
        set: Option<&ProfileSet>,
        gpu: &Gpu,
        driver: Option<DriverVersion>,
        ptx: PtxAssumption,
        policy: Policy,
    ) -> GpuReport {
        let device = Device::new(gpu.cc, driver);
        let why = explain::explain(&profile.images(ptx.isa), &device, policy);
        let selected = why.chosen.map(|c| Selected {
            target: c.target,
            kind: c.target.kind,
            exact: c.exact,
        });
        let rejected = why
            .rejected
            .iter()
            .map(|r| RejectedJson {
                target: r.target,
                reason: r.reason.clone(),
            })
            .collect();
        let uncertain = why.uncertain.clone();
        let fix = why.fix.clone();
        let covering_profiles = match (why.status, set) {
            (Status::Runs, _) | (_, None) => Vec::new(),
            (_, Some(set)) => set
                .entries
                .iter()
                .filter(|(name, _)| *name != profile.name)
                .filter_map(|(name, origin)| {
                    let other = origin.load().ok()?;
                    let isa = PtxAssumption::new(&other, None).isa;
                    (other.check(&device, isa, policy).status() == Status::Runs)
                        .then(|| name.clone())
                })
                .collect(),
        };
        GpuReport {
            profile: profile.name.clone(),
            gpu: gpu.clone(),
            driver,
            ptx,
            policy,
            status: why.status,
            selected,
            uncertain,
            error: why.error.map(|e| LoadErrorJson {
                code: e.code(),
                name: e.name(),
                message: e.message(),
            }),
            rejected,
            fix,
            covering_profiles,
            images: profile.targets.to_string(),
        }
    }

    pub(super) fn write_text(&self, out: &mut (dyn Write + Send)) -> std::io::Result<()> {
        let family = if self.gpu.products.len() > 1 {
            format!(
                "; also {}",
                self.gpu
                    .products
                    .iter()
                    .skip(1)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            String::new()
        };
        writeln!(
            out,
            "GPU       {} (compute capability {}{family})",
            self.gpu.name, self.gpu.cc
        )?;
        match self.driver {
            Some(d) => writeln!(out, "driver    {}", d.describe())?,
            None => writeln!(out, "driver    not given: PTX judged by architecture only")?,
        }
        writeln!(out, "profile   {}: {}", self.profile, self.images)?;
        if self.ptx.isa.is_some() || self.ptx.toolkit.is_some() {
            writeln!(out, "PTX       {}", self.ptx.describe())?;
        }
        match (&self.selected, &self.error) {
            (Some(sel), _) => {
                let what = match (sel.kind, sel.exact) {
                    (ImageKind::Cubin, true) => {
                        format!("the {} cubin, built for exactly this GPU", sel.target)
                    }
                    (ImageKind::Cubin, false) => format!(
                        "the {} cubin (same major, lower minor: runs, but is not tuned for {})",
                        sel.target, self.gpu.cc
                    ),
                    (ImageKind::Ptx, _) => format!(
                        "the {} PTX, JIT-compiled by the driver at first load",
                        sel.target
                    ),
                };
                match &self.uncertain {
                    None => writeln!(out, "verdict   runs: the driver selects {what}")?,
                    Some(why) => writeln!(
                        out,
                        "verdict   unknown: the driver would select {what}, but {why}"
                    )?,
                }
            }
            (None, Some(e)) => writeln!(
                out,
                "verdict   does not run: {} ({}): {}",
                e.name, e.code, e.message
            )?,
            (None, None) => {}
        }
        if self.selected.is_none() {
            for (idx, r) in self.rejected.iter().enumerate() {
                let label = if idx == 0 { "why" } else { "" };
                writeln!(out, "{label:<10}{}", r.reason)?;
            }
        }
        if let Some(fix) = &self.fix {
            writeln!(out, "fix       {fix}")?;
        }
        if !self.covering_profiles.is_empty() {
            writeln!(out, "covered by {}", self.covering_profiles.join(", "))?;
        }
        Ok(())
    }
}
