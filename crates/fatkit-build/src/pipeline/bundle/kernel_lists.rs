//! The kernel-list check across a module's images: every image holds every kernel unless a
//! declaration says otherwise, and what disagrees in words a person reads once: kernels by
//! their demangled names, the findings alike for several instantiations of one template said
//! once with a count, and the declaration to add keyed by a name people can write.

use std::collections::BTreeMap;

use fatkit_arch::load::Stub;
use fatkit_arch::{Compiler, Target, TargetSet};
use fatkit_fatbin::names;

use super::Image;
use crate::pipeline::failure::{Failure, FailureKind, Status};
use crate::pipeline::schedule::Module;
use crate::pipeline::Request;
use fatkit_package::kernel_sets::{Declared, Mismatch};

/// The names a declaration may give `kernel` besides its symbol: its demangled name and that
/// name without template arguments (none for a name that is no C++ symbol).
pub fn forms(kernel: &str) -> Vec<String> {
    let shown = names::demangled(kernel);
    if shown == kernel {
        return Vec::new();
    }
    let template = names::template_of(&shown).to_owned();
    match template == shown {
        true => vec![shown],
        false => vec![shown, template],
    }
}

/// What the images say of a disagreeing kernel beyond its declaration: where it is only a
/// stub, which toolchains built the images without it, whether those are all NVRTC's.
#[derive(PartialEq, Eq)]
struct Finding {
    stubbed: Vec<(Target, Stub)>,
    toolchains: Vec<String>,
    nvrtc_only: bool,
}

/// Kernels of one template that disagree alike: one failure for all of them.
struct Group<'a> {
    template: String,
    finding: Finding,
    members: Vec<&'a Mismatch>,
}

/// Every image of a module must hold every kernel, unless the kernel is declared for fewer
/// targets (`KernelSets`): an undeclared kernel some entries lack is a launch failing on
/// exactly the GPUs those entries serve. Returns the declared partial sets, or one failure
/// per disagreeing kernel (per template, for instantiations that disagree alike) that says
/// what to declare or fix.
pub(crate) fn check_kernel_sets(
    req: &Request,
    m: &Module,
    images: &[Image<'_>],
) -> Result<BTreeMap<String, Declared>, Vec<Failure>> {
    let mut kernels: BTreeMap<String, TargetSet> = BTreeMap::new();
    for i in images {
        for k in &i.kernels {
            kernels.entry(k.clone()).or_default().insert(i.target);
        }
    }
    let all: TargetSet = images.iter().map(|i| i.target).collect();
    let profile = req.ask.profile.all_targets();
    let mismatches =
        match req
            .ask
            .kernel_sets
            .check(&kernels, &all, (&profile, m.only.as_ref()), &forms)
        {
            Ok(declared) => return Ok(declared),
            Err(mismatches) => mismatches,
        };
    let whole = whole_source_fix(m, &kernels, &mismatches, &all);
    // Kernels named by the toolkit that built each image: one finding for them all.
    let (by_toolkit, mismatches) = super::toolkit_split::split(m, images, mismatches);
    let mut groups: Vec<Group<'_>> = Vec::new();
    for mm in &mismatches {
        let finding = finding_of(images, mm);
        let template = names::template_of(&mm.shown).to_owned();
        let alike = |g: &&mut Group<'_>| {
            let first = g.members.first().copied();
            g.template == template
                && g.finding == finding
                && first.is_some_and(|f| {
                    (&f.built, &f.expected, &f.rule) == (&mm.built, &mm.expected, &mm.rule)
                })
        };
        match groups.iter_mut().find(alike) {
            Some(g) => g.members.push(mm),
            None => groups.push(Group {
                template,
                finding,
                members: vec![mm],
            }),
        }
    }
    let instantiations = |template: &str| {
        kernels
            .keys()
            .filter(|k| names::template_of(&names::demangled(k)) == template)
            .count()
    };
    Err(by_toolkit
        .into_iter()
        .chain(
            groups.iter().filter_map(|g| {
                failure_of(m, g, &all, instantiations(&g.template), whole.as_deref())
            }),
        )
        .collect())
}

/// Where every kernel of the module is undeclared and built for the same targets, fewer than
/// the module's (its code needs a newer architecture throughout, under one `#if`): the fix
/// is the source's declaration, not one per kernel, which would leave the other images
/// without any kernel (the driver view's next refusal).
fn whole_source_fix(
    m: &Module,
    kernels: &BTreeMap<String, TargetSet>,
    mismatches: &[Mismatch],
    all: &TargetSet,
) -> Option<String> {
    let first = mismatches.first()?;
    let alike = mismatches.len() == kernels.len()
        && mismatches
            .iter()
            .all(|mm| mm.rule.is_none() && mm.built == first.built && !mm.built.is_empty());
    if !alike {
        return None;
    }
    let name = m.path.file_name()?.to_string_lossy().into_owned();
    let s = fatkit_package::kernel_sets::suggest(&first.built, all);
    Some(format!(
        "fix: every kernel of {name} is built for {} only: if the source is made for those targets, declare it: {}; its kernels are then declared for those targets, and GPUs below them are not gaps",
        first.built,
        crate::pipeline::failure::declare_source(&name, &s)
    ))
}

/// Where `mm`'s kernel is only a stub, and which toolchains built the images lacking it.
fn finding_of(images: &[Image<'_>], mm: &Mismatch) -> Finding {
    let built_by = |t: Target| {
        images
            .iter()
            .find(|i| i.target == t)
            .map(|i| (i.toolchain.0.short(&i.toolchain.1), i.toolchain.1.compiler))
    };
    let missing = mm.missing();
    let toolchains: Vec<String> = missing
        .iter()
        .filter_map(|t| built_by(*t).map(|(tc, _)| format!("{t} by {tc}")))
        .collect();
    let nvrtc_only = !missing.is_empty()
        && missing
            .iter()
            .all(|t| built_by(*t).is_some_and(|(_, c)| c == Compiler::Nvrtc));
    Finding {
        stubbed: stubbed_in(images, &mm.kernel),
        toolchains,
        nvrtc_only,
    }
}

/// The failure of one group: its kernel (or the template with a count of its instantiations),
/// what the images say, and the fix. `of_template`: how many kernels of the module
/// instantiate the group's template.
fn failure_of(
    m: &Module,
    g: &Group<'_>,
    all: &TargetSet,
    of_template: usize,
    whole: Option<&str>,
) -> Option<Failure> {
    let first = *g.members.first()?;
    let mut mm = first.clone();
    if g.members.len() > 1 {
        mm.shown = counted(g);
    }
    let missing = mm.missing();
    let target = missing
        .first()
        .copied()
        .or_else(|| mm.extra().first().copied())
        .or_else(|| all.iter().next())?;
    let mut lines = match stub_lines(&g.finding.stubbed, &mm) {
        Some(lines) => lines,
        None => vec![mm.to_string()],
    };
    if !g.finding.toolchains.is_empty() {
        let which = if g.finding.stubbed.is_empty() {
            "the images without it"
        } else {
            "the images with only a stub of it"
        };
        lines.push(format!("{which}: {}", g.finding.toolchains.join(", ")));
    }
    // Every instantiation of the template alike: its name declares them all.
    let whole_template = g.members.len() > 1 && g.members.len() == of_template;
    let key = match whole_template {
        true => g.template.clone(),
        false => first.shown.clone(),
    };
    let fix = match whole {
        Some(line) if !g.finding.nvrtc_only => line.to_owned(),
        _ => fix(&mm, &key, first, all, g.finding.nvrtc_only),
    };
    lines.push(fix.clone());
    Some(Failure {
        source: m.path.clone(),
        target,
        kind: match mm.rule {
            Some(_) => FailureKind::OverrideIgnored,
            None => FailureKind::KernelListsDisagree,
        },
        toolchain: None,
        location: None,
        message: lines.join("\n"),
        command: String::new(),
        status: match (&mm.rule, g.finding.stubbed.is_empty()) {
            (_, false) => Status::BodyCompiledOut,
            (Some(_), true) => Status::DisagreesWithDeclaration,
            (None, true) => Status::KernelListsDisagree,
        },
        fix: Some(fix),
    })
}

/// `dequant_kernel<...> (12 instantiations: dequant_kernel<float>, dequant_kernel<half> and
/// 10 more)`.
fn counted(g: &Group<'_>) -> String {
    const SHOWN: usize = 2;
    let named: Vec<&str> = g
        .members
        .iter()
        .take(SHOWN)
        .map(|mm| mm.shown.as_str())
        .collect();
    let more = match g.members.len().saturating_sub(SHOWN) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    format!(
        "{}<...> ({} instantiations: {}{more})",
        g.template,
        g.members.len(),
        named.join(", ")
    )
}

/// The fix for `mm` (a group's words), declared under `key`: the demangled name (or template)
/// people write; `first` is the group's first kernel, whose symbol names the define an
/// exclude sets.
fn fix(mm: &Mismatch, key: &str, first: &Mismatch, all: &TargetSet, nvrtc_only: bool) -> String {
    let suggestion = fatkit_package::kernel_sets::suggest(&mm.built, all);
    let key = writable(key);
    let key = key.as_str();
    // A TOML key: bare when it is an identifier, else quoted.
    let toml_key = match key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        true => key.to_owned(),
        false => format!("\"{key}\""),
    };
    match (&mm.rule, nvrtc_only && first.kernel.starts_with("_Z")) {
        (_, true) => format!(
            "fix: NVRTC compiles no host code, so a template kernel instantiated only by a host-side launch (or a kernel under #ifndef __CUDACC_RTC__) is dropped: instantiate it explicitly (`template __global__ void k<float>(float*);`) or declare it extern \"C\" without templates, or pin {} to nvcc in the profile's [toolchain] table",
            mm.missing().iter().map(|t| t.to_string()).collect::<Vec<_>>().join(" ")
        ),
        (Some(rule), false) if first.by_source => format!(
            "fix: declare the kernel for the targets that hold it (its own declaration narrows its source's `{rule}`): in build.rs `.kernel_targets(\"{key}\", \"{suggestion}\")`, in Cargo.toml `[package.metadata.fatkit.kernels] {toml_key} = {{ targets = \"{suggestion}\" }}`; or change the source's #if on __CUDA_ARCH__"
        ),
        (Some(rule), false) => format!(
            "fix: make the declaration `{rule}` say what the source builds (here: targets = \"{suggestion}\"), or change the source's #if on __CUDA_ARCH__ (an exclude by name also defines FATKIT_SKIP_{k} in the excluded compiles: guard the kernel with `#ifndef FATKIT_SKIP_{k}` ... `#endif`)",
            k = first.kernel
        ),
        (None, false) => format!(
            "fix: if the source builds it for some architectures on purpose (an #if on __CUDA_ARCH__), declare it: in Cargo.toml `[package.metadata.fatkit.kernels] {toml_key} = {{ targets = \"{suggestion}\" }}` (a glob such as \"*_bf16\" works too), in build.rs `.kernel_targets(\"{key}\", \"{suggestion}\")`, or accept every kernel as built with kernel_sets = \"as-built\" / `.kernel_sets_as_built()`; otherwise define it for every target of the profile"
        ),
    }
}

/// `key` as a declaration can name it whatever the profile: the inline namespaces CCCL names
/// after its version and the architecture list (`cub::_V_300200_SM_750_800::`,
/// `cub::CUB_200302_700_NS::`, `thrust::_V_...`) written as `*`.
fn writable(key: &str) -> String {
    key.split("::")
        .map(|part| match is_versioned_namespace(part) {
            true => "*",
            false => part,
        })
        .collect::<Vec<_>>()
        .join("::")
}

/// `_V_300200_SM_750_800` (CCCL 3) or `CUB_200302_700_800_NS` (CUB 2): digits and `_`
/// between those ends.
fn is_versioned_namespace(part: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'_');
    let v3 = part
        .strip_prefix("_V_")
        .and_then(|rest| rest.split_once("_SM_"))
        .is_some_and(|(version, list)| digits(version) && digits(list));
    let v2 = part
        .strip_prefix("CUB_")
        .and_then(|rest| rest.strip_suffix("_NS"))
        .is_some_and(digits);
    v3 || v2
}

/// The images holding `kernel` only as a stub, with what its code there does.
fn stubbed_in(images: &[Image<'_>], kernel: &str) -> Vec<(Target, Stub)> {
    images
        .iter()
        .filter_map(|i| {
            let (_, kind) = i.stubs.iter().find(|(k, _)| k == kernel)?;
            Some((i.target, *kind))
        })
        .collect()
}

/// What to say of a kernel whose body is compiled out of the images `stubbed`: where, what its
/// code does there, where its body is, and the ways out; `None` when it is in none.
fn stub_lines(stubbed: &[(Target, Stub)], mm: &Mismatch) -> Option<Vec<String>> {
    if stubbed.is_empty() {
        return None;
    }
    let with_body: Vec<String> = mm.built.iter().map(|t| t.to_string()).collect();
    let (targets, what): (Vec<String>, Vec<&str>) = stubbed
        .iter()
        .map(|(t, kind)| (t.to_string(), kind.words()))
        .unzip();
    let traps = stubbed.iter().any(|(_, k)| *k == Stub::Traps);
    Some(vec![
        format!(
            "kernel {k}'s body is compiled out of {}: there its code only {} (an #if on __CUDA_ARCH__ around the body), so on the GPUs that load {} a launch would {}; its body is in {}",
            targets.join(" "),
            match what.first() {
                Some(first) if what.iter().all(|w| w == first) => first,
                _ => "returns or traps",
            },
            if targets.len() == 1 { "that image" } else { "those images" },
            if traps { "trap" } else { "succeed and do nothing" },
            with_body.join(" "),
            k = mm.shown,
        ),
        "fixes: declare it for the targets that have its body (below), guard the whole kernel (the #if around its __global__ definition) so that it is absent elsewhere, or build its body for every target".to_owned(),
    ])
}

#[cfg(test)]
mod tests {
    use super::writable;

    /// CCCL's versioned namespaces, wherever they are in a name, are written as `*`; the rest
    /// stays as it is.
    #[test]
    fn declarations_name_cccl_kernels_whatever_the_architecture_list() {
        assert_eq!(
            writable("cub::_V_300200_SM_750_800::detail::reduce::DeviceReduceKernel<cub::_V_300200_SM_750_800::detail::reduce::policy_hub<unsigned int>::Policy1000, thrust::_V_300200_SM_750_800::transform_iterator<NonZeroOp<__nv_bfloat16> > >"),
            "cub::*::detail::reduce::DeviceReduceKernel<cub::*::detail::reduce::policy_hub<unsigned int>::Policy1000, thrust::*::transform_iterator<NonZeroOp<__nv_bfloat16> > >"
        );
        assert_eq!(
            writable("cub::CUB_200302_700_NS::EmptyKernel<void>"),
            "cub::*::EmptyKernel<void>"
        );
        for kept in [
            "gemv_kernel<float>",
            "ns::_V_x_SM_1::k",
            "CUB_NS::k",
            "_V_1_SM_::k",
        ] {
            assert_eq!(writable(kept), kept);
        }
    }
}
