//! Kernels a module's images name differently by the toolkit that built them: CUDA's own
//! headers (CUB, Thrust and libcu++: CCCL) differ between releases and put their kernels in
//! namespaces named after their version, so a source using them, built for sm_70 by CUDA 12
//! and for the rest by CUDA 13, holds two sets of kernels, each in the images of one toolkit.
//! No declaration of kernels fits that; building the source with one toolkit does, and that
//! is the finding's fix (docs/BUILDS.md, "One architecture list per module").

use std::collections::BTreeMap;

use fatkit_arch::{Target, TargetSet};
use fatkit_fatbin::names;

use super::Image;
use crate::pipeline::failure::{Failure, FailureKind, Status};
use crate::pipeline::schedule::Module;
use fatkit_package::kernel_sets::Mismatch;

/// Each toolkit's (by its short name) targets among the module's images, and its release.
type ByToolkit = BTreeMap<String, (TargetSet, Option<fatkit_arch::toolkit::CudaVersion>)>;

/// The kernels of `mismatches` (undeclared ones) each held by exactly the images of some
/// toolkits and by no image of the others, as one failure for the module; and the rest, for
/// the usual findings. `None` where the module's images come from one toolkit, or no kernel
/// splits so.
pub(super) fn split(
    m: &Module,
    images: &[Image<'_>],
    mismatches: Vec<Mismatch>,
) -> (Option<Failure>, Vec<Mismatch>) {
    let toolkit_of = |t: Target| {
        images
            .iter()
            .find(|i| i.target == t)
            .map(|i| i.toolchain.0.short(&i.toolchain.1))
    };
    // Each toolkit's targets, and its release (to keep the newest of equals).
    let mut by_toolkit: ByToolkit = BTreeMap::new();
    for i in images {
        let entry = by_toolkit
            .entry(i.toolchain.0.short(&i.toolchain.1))
            .or_default();
        entry.0.insert(i.target);
        entry.1 = Some(i.toolchain.1.version);
    }
    if by_toolkit.len() < 2 {
        return (None, mismatches);
    }
    let splits = |mm: &Mismatch| {
        mm.rule.is_none()
            && !mm.missing().is_empty()
            && images
                .iter()
                .all(|i| mm.built.contains(i.target) == holds_all(&by_toolkit, &mm.built, i))
    };
    let (split, rest): (Vec<Mismatch>, Vec<Mismatch>) = mismatches.into_iter().partition(splits);
    let Some(first) = split.first() else {
        return (None, rest);
    };
    // Names that differ both ways: each of two toolkits' images holds kernels the other's
    // lack. One-sided, it is a kernel one compiler dropped (NVRTC and a host-side template
    // launch), which the usual findings say better.
    let sides: std::collections::BTreeSet<String> = split
        .iter()
        .filter_map(|mm| mm.built.iter().next().and_then(toolkit_of))
        .collect();
    if sides.len() < 2 {
        return (None, split.into_iter().chain(rest).collect());
    }
    // The kernels only in each toolkit's images.
    let mut only: BTreeMap<String, Vec<&Mismatch>> = BTreeMap::new();
    for mm in &split {
        if let Some(tk) = mm.built.iter().next().and_then(toolkit_of) {
            only.entry(tk).or_default().push(mm);
        }
    }
    let Some((keep, (keep_targets, _))) = by_toolkit
        .iter()
        .max_by_key(|(_, (targets, version))| (targets.len(), *version))
    else {
        return (None, split.into_iter().chain(rest).collect());
    };
    let all: TargetSet = images.iter().map(|i| i.target).collect();
    let suggestion = fatkit_package::kernel_sets::suggest(keep_targets, &all);
    let left_out: TargetSet = all.iter().filter(|t| !keep_targets.contains(*t)).collect();
    let name = m
        .path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let mut lines = vec![format!(
        "its images name their kernels differently by the toolkit that built them: {}",
        only.iter()
            .map(|(tk, kernels)| held_only(tk, &by_toolkit, kernels))
            .collect::<Vec<_>>()
            .join("; ")
    )];
    lines.push(
        "CUDA's own headers (CUB, Thrust and libcu++: CCCL) differ between releases and name their kernels after their version (as does code that tests __CUDACC_VER_MAJOR__), so the host code, compiled by one toolkit, registers that toolkit's names, and a launch on the GPUs the other's images serve would fail (CUDA_ERROR_NOT_FOUND)".to_owned(),
    );
    let fix = format!(
        "fix: build {name} with one toolkit, {keep}: declare it for the targets {keep} builds, {}; its kernels are then declared for those targets, and the GPUs only {left_out} would serve ({keep} does not build it) are not gaps; kernels of {name} that use no CCCL keep every target if they move to a source of their own",
        crate::pipeline::failure::declare_source(&name, &suggestion),
    );
    lines.push(fix.clone());
    let Some(target) = first
        .missing()
        .first()
        .copied()
        .or_else(|| left_out.iter().next())
    else {
        return (None, split.into_iter().chain(rest).collect());
    };
    let failure = Failure {
        source: m.path.clone(),
        target,
        kind: FailureKind::KernelListsDisagree,
        toolchain: None,
        location: None,
        message: lines.join("\n"),
        command: String::new(),
        status: Status::KernelListsDisagree,
        fix: Some(fix),
    };
    (Some(failure), rest)
}

/// Whether image `i`'s toolkit is one all of whose images are among `built`: the kernel is
/// then expected in `i` exactly when it is in every image of that toolkit.
fn holds_all(by_toolkit: &ByToolkit, built: &TargetSet, i: &Image<'_>) -> bool {
    by_toolkit
        .get(&i.toolchain.0.short(&i.toolchain.1))
        .is_some_and(|(targets, _)| targets.iter().all(|t| built.contains(t)))
}

/// `3 kernels only in the images of nvcc 13.2 (sm_75 sm_80), such as cub::...::EmptyKernel`.
fn held_only(toolkit: &str, by_toolkit: &ByToolkit, kernels: &[&Mismatch]) -> String {
    const SHOWN: usize = 2;
    let targets = by_toolkit
        .get(toolkit)
        .map_or_else(String::new, |(t, _)| t.to_string());
    let mut shown: Vec<String> = kernels
        .iter()
        .map(|mm| names::template_of(&mm.shown).to_owned())
        .collect();
    shown.dedup();
    shown.truncate(SHOWN);
    format!(
        "{} only in the images of {toolkit} ({targets}), such as {}",
        match kernels.len() {
            1 => "1 kernel".to_owned(),
            n => format!("{n} kernels"),
        },
        shown.join(" and ")
    )
}
