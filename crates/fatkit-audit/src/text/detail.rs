//! The GPU x library matrix, `--require` gaps, and the per-image detail of `--verbose`.

use super::*;

pub(super) fn write_matrix(
    out: &mut dyn Write,
    audited: &Audited,
    options: &Options,
) -> io::Result<()> {
    let libraries: Vec<&Library> = audited.inputs.iter().flat_map(|i| &i.libraries).collect();
    if libraries.is_empty() {
        return writeln!(out, "GPU x library: no device code found");
    }
    let short = |l: &Library| {
        l.name
            .rsplit(['/', '('])
            .next()
            .unwrap_or(&l.name)
            .trim_end_matches(')')
            .to_owned()
    };
    let shorts: Vec<String> = libraries.iter().map(|l| short(l)).collect();
    let distinct = |names: &[String]| {
        let set: std::collections::BTreeSet<&String> = names.iter().collect();
        set.len() == names.len()
    };
    let full: Vec<String> = libraries.iter().map(|l| l.name.clone()).collect();
    let columns: Vec<String> = if distinct(&shorts) {
        shorts
    } else if distinct(&full) {
        full
    } else {
        audited
            .inputs
            .iter()
            .enumerate()
            .flat_map(|(i, input)| {
                input
                    .libraries
                    .iter()
                    .map(move |l| format!("{}:{}", i + 1, short(l)))
            })
            .collect()
    };
    let driver = options.driver.map_or_else(
        || "driver not given".to_owned(),
        |d| format!("driver {}", d.describe()),
    );
    writeln!(
        out,
        "GPU x library ({driver}): cubin = every kernel runs from a cubin; PTX JIT = some only by PTX compiled at load, with that driver or newer; no (N) = N kernels do not run (parts built only for other GPUs aside; --strict counts them)"
    )?;
    let mut headers: Vec<&str> = vec!["GPU", "CC"];
    headers.extend(columns.iter().map(String::as_str));
    let cells = matrix_cells(audited);
    let rows: Vec<Vec<String>> = options
        .gpus
        .iter()
        .zip(&cells)
        .map(|(gpu, row)| {
            let mut r = vec![gpu.name.clone(), gpu.cc.to_string()];
            r.extend(row.iter().map(|c| c.text()));
            r
        })
        .collect();
    for line in table::render(&headers, &rows).lines() {
        writeln!(out, "  {line}")?;
    }
    Ok(())
}

pub(super) fn write_gaps(
    out: &mut dyn Write,
    required: &TargetSet,
    gaps: &[Gap],
    declared: &[Gap],
    no_kernels: bool,
    all_kernels: bool,
) -> io::Result<()> {
    if no_kernels {
        return writeln!(
            out,
            "  require {required}: FAILS: no kernels found to check"
        );
    }
    if gaps.is_empty() {
        writeln!(out, "  require {required}: every kernel covered")?;
    } else {
        writeln!(out, "  require {required}: {} gap(s):", gaps.len())?;
        let mut by: BTreeMap<(fatkit_arch::Target, GapCause), Vec<&str>> = BTreeMap::new();
        for g in gaps {
            by.entry((g.target, g.cause)).or_default().push(&g.kernel);
        }
        // By target, then by the words of the cause.
        let mut by: Vec<_> = by.into_iter().collect();
        by.sort_by_cached_key(|((target, cause), _)| (*target, cause.to_string()));
        for ((target, reason), kernels) in by {
            let shown: Vec<&str> = if all_kernels {
                kernels.clone()
            } else {
                kernels.iter().take(NAMES_SHOWN).copied().collect()
            };
            let more = kernels.len() - shown.len();
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            writeln!(
                out,
                "    {target}: {}: {reason}: {}{more}",
                plural(kernels.len(), "kernel", "kernels"),
                shown.join(", ")
            )?;
        }
    }
    let mut by_kernel: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for g in declared {
        by_kernel
            .entry(&g.kernel)
            .or_default()
            .push(g.target.to_string());
    }
    if !by_kernel.is_empty() {
        writeln!(
            out,
            "  declared by the crate, not gaps ({} kernel(s) built for fewer targets by design):",
            by_kernel.len()
        )?;
        for (kernel, targets) in by_kernel {
            writeln!(
                out,
                "    {}: not built for {}",
                crate::words::demangled(kernel),
                targets.join(" ")
            )?;
        }
    }
    Ok(())
}

pub(super) fn origin_name(origin: &Origin) -> String {
    match origin {
        Origin::File => "file".to_owned(),
        Origin::Section(name) => name.clone(),
        Origin::Scan => "embedded (scan)".to_owned(),
        Origin::Text(place) => format!("{place} (PTX text)"),
    }
}

pub(super) fn count_containers(report: &FileReport) -> usize {
    report.containers.len() + report.members.iter().map(count_containers).sum::<usize>()
}

/// One row per image of `report`: where, what, built by what, how stored, how many kernels.
fn write_images(
    out: &mut dyn Write,
    report: &FileReport,
    images: &[(&str, &Origin, &fatkit_fatbin::inspect::ImageReport)],
) -> io::Result<()> {
    let rows: Vec<Vec<String>> = images
        .iter()
        .map(|(member, origin, e)| {
            let target = e
                .target
                .map_or_else(|| format!("arch {}", e.arch), |t| t.to_string());
            let isa = e.ptx_isa.map_or_else(|| "-".to_owned(), |i| i.to_string());
            let toolkit = e.toolkit.clone().unwrap_or_else(|| "-".to_owned());
            let compression = format!("{:?}", e.compression).to_lowercase();
            let kernels = match &e.error {
                Some(err) => format!("unreadable: {err}"),
                None => e.kernels.len().to_string(),
            };
            let place = if *member == report.name {
                origin_name(origin)
            } else {
                format!(
                    "{} {}",
                    member.strip_prefix(report.name.as_str()).unwrap_or(member),
                    origin_name(origin)
                )
            };
            vec![
                place,
                format!("{:#x}", e.offset),
                e.kind.name(),
                target,
                isa,
                toolkit,
                compression,
                e.stored_size.to_string(),
                kernels,
            ]
        })
        .collect();
    for line in table::render(
        &[
            "WHERE",
            "OFFSET",
            "KIND",
            "TARGET",
            "PTX ISA",
            "TOOLKIT",
            "COMPRESSION",
            "BYTES",
            "KERNELS",
        ],
        &rows,
    )
    .lines()
    {
        writeln!(out, "  {line}")?;
    }
    Ok(())
}

/// `--verbose`: every image, then the kernel x compute capability table.
pub(super) fn write_detail(
    out: &mut dyn Write,
    report: &FileReport,
    kernels: &[KernelImages],
    columns: &[Cc],
    policy: Policy,
    all_kernels: bool,
) -> io::Result<()> {
    let images = report.all_images();
    writeln!(
        out,
        "  {:?}, {} container(s), {} image(s), {} kernel(s):",
        report.format,
        count_containers(report),
        images.len(),
        kernels.len()
    )?;
    if images.is_empty() {
        return Ok(());
    }
    write_images(out, report, &images)?;
    if kernels.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "  coverage by compute capability (cubin / ptx = JIT only / - = missing / ? = unknown):"
    )?;
    let mut headers: Vec<String> = vec!["KERNEL".to_owned()];
    headers.extend(columns.iter().map(|cc| cc.to_string()));
    let header_refs: Vec<&str> = headers.iter().map(String::as_str).collect();
    let limit = if all_kernels { usize::MAX } else { 40 };
    let rows: Vec<Vec<String>> = kernels
        .iter()
        .take(limit)
        .map(|k| {
            let mut row = vec![k.name.clone()];
            row.extend(columns.iter().map(|&cc| match k.cell(cc, policy) {
                Cell::Cubin(_) => "cubin".to_owned(),
                Cell::Ptx(_) => "ptx".to_owned(),
                Cell::Unknown => "?".to_owned(),
                Cell::CompiledOut(_) => "stub".to_owned(),
                Cell::Missing => "-".to_owned(),
            }));
            row
        })
        .collect();
    for line in table::render(&header_refs, &rows).lines() {
        writeln!(out, "  {line}")?;
    }
    if kernels.len() > limit {
        writeln!(
            out,
            "  ... and {} more kernels (--all-kernels lists them, --json has them all)",
            kernels.len() - limit
        )?;
    }
    Ok(())
}
