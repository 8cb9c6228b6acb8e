//! `profiles show PROFILE --gpu G` as text: which image of the profile the driver loads on one
//! GPU, and why every other is passed over (fatkit-audit's `GpuReport`).

use std::io::Write;

use fatkit_arch::ImageKind;
use fatkit_audit::profiles::GpuReport;

use super::describe_ptx;

pub(super) fn write_text(report: &GpuReport, out: &mut (dyn Write + Send)) -> std::io::Result<()> {
    let family = if report.gpu.products.len() > 1 {
        format!(
            "; also {}",
            report
                .gpu
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
        report.gpu.name, report.gpu.cc
    )?;
    match report.driver {
        Some(d) => writeln!(out, "driver    {}", d.describe())?,
        None => writeln!(out, "driver    not given: PTX judged by architecture only")?,
    }
    writeln!(out, "profile   {}: {}", report.profile, report.images)?;
    if report.ptx.isa.is_some() || report.ptx.toolkit.is_some() {
        writeln!(out, "PTX       {}", describe_ptx(&report.ptx))?;
    }
    match (&report.selected, &report.error) {
        (Some(sel), _) => {
            let what = match (sel.kind, sel.exact) {
                (ImageKind::Cubin, true) => {
                    format!("the {} cubin, built for exactly this GPU", sel.target)
                }
                (ImageKind::Cubin, false) => format!(
                    "the {} cubin (same major, lower minor: runs, but is not tuned for {})",
                    sel.target, report.gpu.cc
                ),
                (ImageKind::Ptx, _) => format!(
                    "the {} PTX, JIT-compiled by the driver at first load",
                    sel.target
                ),
            };
            match &report.uncertain {
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
    if report.selected.is_none() {
        for (idx, r) in report.rejected.iter().enumerate() {
            let label = if idx == 0 { "why" } else { "" };
            writeln!(out, "{label:<10}{}", r.reason)?;
        }
    }
    if let Some(fix) = &report.fix {
        writeln!(out, "fix       {fix}")?;
    }
    if !report.covering_profiles.is_empty() {
        writeln!(out, "covered by {}", report.covering_profiles.join(", "))?;
    }
    Ok(())
}
