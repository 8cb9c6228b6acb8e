//! The checks of a host crate's build: the binary's own check before launch, `audit`, and
//! cuobjdump's listing of every object of its library.

use std::path::Path;
use std::process::Command;

use fatkit_cli::Result;

use super::{HostCrate, Row};

/// The binary runs its check for a simulated V100 and RTX 5090, passes `audit --require`,
/// and cuobjdump lists every target of the profile in every object of the library.
pub(super) fn check(
    ws: &Path,
    krate: &HostCrate,
    profile: &str,
    targets: &fatkit_arch::TargetSet,
    cuobjdump: &Path,
    row: &mut Row,
) -> Result<()> {
    let exe = ws.join(format!("target/release/host-{}", krate.name));
    let out = Command::new(&exe).output()?;
    if !out.status.success() {
        row.problems.push(format!(
            "the check before launch refused a V100 or an RTX 5090:\n{}",
            String::from_utf8_lossy(&out.stdout)
        ));
    }
    let audit = Command::new(std::env::current_exe()?)
        .arg("audit")
        .arg(&exe)
        .args(["--require", profile])
        .output()?;
    if !audit.status.success() {
        row.problems.push(format!(
            "audit --require {profile} exited {}:\n{}",
            audit.status,
            String::from_utf8_lossy(&audit.stdout)
        ));
    }
    audit_gpus(&exe, krate, row)?;
    let lib = std::fs::read_dir(ws.join("target/release/build"))?
        .flatten()
        .map(|e| e.path().join("out/libkernels.a"))
        .find(|p| p.is_file())
        .ok_or_else(|| crate::harness::failed(format!("{}: no libkernels.a", ws.display())))?;
    let listed = Command::new(cuobjdump)
        .args(["--list-elf", "--list-ptx"])
        .arg(&lib)
        .output()?;
    let text = String::from_utf8_lossy(&listed.stdout);
    // `member LIB:file.o:` starts each object; then `ELF file 3: file.sm_80.cubin` and
    // `PTX file 1: file.sm_120.ptx` per image.
    let mut per_object: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut member = String::new();
    for line in text.lines() {
        if let Some(m) = line.strip_prefix("member ") {
            member = m
                .trim_end_matches(':')
                .rsplit(':')
                .next()
                .unwrap_or(m)
                .to_owned();
            continue;
        }
        let Some(image) = line.split_whitespace().last() else {
            continue;
        };
        let ptx = line.starts_with("PTX file");
        if !ptx && !line.starts_with("ELF file") {
            continue;
        }
        let arch = image.rsplit('.').nth(1).unwrap_or_default();
        let target = if ptx {
            arch.replacen("sm_", "compute_", 1)
        } else {
            arch.to_owned()
        };
        per_object.entry(member.clone()).or_default().push(target);
    }
    if per_object.is_empty() {
        row.problems
            .push(format!("cuobjdump lists no image in {}", lib.display()));
    }
    let rules = file_rules(krate, targets)?;
    for (member, mut got) in per_object {
        // An object is its source's module: `<stem>.o` of `<stem>.cu`, built for the targets
        // its declaration names, else the profile's.
        let source = format!("{}.cu", member.trim_end_matches(".o"));
        let own = fatkit_package::kernel_sets::rule_for(&rules, Path::new(&source))
            .map_or_else(|| targets.clone(), |r| r.targets.clone());
        let mut want: Vec<String> = own.iter().map(|t| t.to_string()).collect();
        want.sort();
        got.sort();
        if got != want {
            row.problems.push(format!(
                "{member}: cuobjdump lists {}, its targets are {}",
                got.join(" "),
                want.join(" ")
            ));
        }
    }
    Ok(())
}

/// The crate's declarations of sources, read against the profile's targets.
pub(super) fn file_rules(
    krate: &HostCrate,
    targets: &fatkit_arch::TargetSet,
) -> Result<Vec<fatkit_package::kernel_sets::FileRule>> {
    krate
        .file_targets
        .iter()
        .map(|(pattern, spec)| {
            fatkit_package::kernel_sets::FileRule::targets(pattern, spec, targets)
                .map_err(|e| crate::harness::failed(format!("{}: {pattern}: {e}", krate.name)))
        })
        .collect()
}

/// `audit --gpu` of the binary on a T4, an A100 and an RTX 5090: each exits 0; on the T4, a
/// crate that declares sources or kernels for newer GPUs has them named (the records its
/// library's objects carry).
fn audit_gpus(exe: &Path, krate: &HostCrate, row: &mut Row) -> Result<()> {
    // On each GPU of a generation the profile covers: yes; on one older than a source's
    // declared targets, naming the kernels declared (the record in the library's objects).
    for gpu in ["T4", "A100", "RTX 5090"] {
        let out = Command::new(std::env::current_exe()?)
            .arg("audit")
            .arg(exe)
            .args(["--gpu", gpu])
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        eprintln!(
            "bench: {}: audit --gpu {gpu}: {}",
            row.krate,
            text.lines().next().unwrap_or_default()
        );
        if !out.status.success() {
            row.problems
                .push(format!("audit --gpu {gpu} exited {}:\n{text}", out.status));
        }
        let declares = !krate.file_targets.is_empty() || !krate.kernel_targets.is_empty();
        if gpu == "T4" && declares && !text.contains("declared by their crate for other targets") {
            row.problems.push(format!(
                "audit --gpu T4 names no kernel declared for newer GPUs:\n{text}"
            ));
        }
    }
    Ok(())
}
