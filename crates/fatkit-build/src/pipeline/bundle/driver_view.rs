//! The module as the driver will load it, checked before it is written: on every GPU the
//! profile covers, the one image the driver loads holds every kernel its declaration says runs
//! there; the words of what fails, and the ways out.

use crate::pipeline::failure::Status;
use std::collections::BTreeMap;

use fatkit_arch::toolkit::PtxIsa;
use fatkit_arch::Target;
use fatkit_fatbin::names;

use super::Image;
use crate::pipeline::failure::{Failure, FailureKind};
use crate::pipeline::schedule::Module;
use crate::pipeline::Request;
use fatkit_package::kernel_sets::Declared;

/// The module as the driver will load it: one image per GPU, in which every kernel must be
/// that its declaration says runs there, and no image without kernels
/// ([`fatkit_package::kernel_sets::driver_view`]). One failure per kernel that would vanish and per
/// empty image, each with a fix that works.
pub(crate) fn check_driver_view(
    req: &Request,
    m: &Module,
    images: &[Image<'_>],
    declared: &BTreeMap<String, Declared>,
) -> Result<(), Vec<Failure>> {
    let listed: Vec<(Target, Option<PtxIsa>, Vec<String>)> = images
        .iter()
        .map(|i| (i.target, i.ptx_isa, i.kernels.clone()))
        .collect();
    let view =
        fatkit_package::kernel_sets::driver_view(&listed, declared, fatkit_arch::Policy::default());
    let failure = |target: Target, message: String| Failure {
        source: m.path.clone(),
        target,
        kind: FailureKind::DriverWouldNotFind,
        toolchain: None,
        location: None,
        message,
        command: String::new(),
        status: Status::DriverWouldNotFind,
        fix: None,
    };
    let mut failures: Vec<Failure> = Vec::new();
    for group in alike(&view.vanishes, declared) {
        let Some(v) = group.first().copied() else {
            continue;
        };
        let ccs = named_ccs(&v.ccs);
        let how = declared
            .get(&v.kernel)
            .map_or_else(String::new, |d| format!(" (declared `{}`)", d.how));
        // The images the author's declaration counts on there: where a PTX of its declared
        // set would serve those GPUs, declaring the PTX away too is the smallest fix.
        // When it is only a PTX of its declared set that would serve those GPUs, declaring
        // the PTX away too puts them outside the kernel's targets; when a cubin would, only
        // building the kernel for the loaded image (or a module without it) works.
        let serving_ptx = serving_ptx(declared.get(&v.kernel), v);
        // The kernel as people read and declare it: demangled, the instantiations of one
        // template that vanish alike said once.
        let (k, key) = names_of(&group, images);
        let k = &k;
        let loaded = v.loaded;
        let what = if loaded.is_ptx() { "PTX" } else { "cubin" };
        let fixes = fixes(
            req,
            declared.get(&v.kernel),
            (k, &key),
            loaded,
            &serving_ptx,
        );
        // What the author counted on: the images of its declaration that would serve those
        // GPUs if the driver loaded them.
        let counted = counted(declared.get(&v.kernel), v);
        failures.push(failure(
            loaded,
            format!(
                "kernel {k}{how} would not be found on CC {}: its declaration leaves it {} for those GPUs, but the driver loads one image of a module, there the {loaded} {what}, and {k} is not in it\nfix: {}",
                ccs.join(", "),
                counted.join(" "),
                fixes.join("; or ")
            ),
        ));
    }
    for t in &view.empty {
        let stubs: Vec<&str> = images
            .iter()
            .filter(|i| i.target == *t)
            .flat_map(|i| i.stubs.iter().map(|(k, _)| k.as_str()))
            .collect();
        let what = match stubs.is_empty() {
            true => "find nothing".to_owned(),
            false => format!(
                "find only stubs (the body of {} is compiled out there)",
                stubs.join(", ")
            ),
        };
        let declare = declare_source(req, m, images, &view.empty);
        failures.push(failure(
            *t,
            format!(
                "the {t} image holds no kernel (every kernel is declared away from it): on the GPUs it serves the driver would load it and {what}\nfix: {declare}drop {t} from the profile's targets, or build a kernel of the module for it"
            ),
        ));
    }
    match failures.is_empty() {
        true => Ok(()),
        false => Err(failures),
    }
}

/// The vanishing kernels in groups that vanish alike: instantiations of one template, from the
/// same loaded image on the same GPUs, under the same declaration.
fn alike<'v>(
    vanishes: &'v [fatkit_package::kernel_sets::Vanishes],
    declared: &BTreeMap<String, Declared>,
) -> Vec<Vec<&'v fatkit_package::kernel_sets::Vanishes>> {
    let template = |k: &str| names::template_of(&names::demangled(k)).to_owned();
    let mut groups: Vec<Vec<&fatkit_package::kernel_sets::Vanishes>> = Vec::new();
    for v in vanishes {
        let same = |g: &&mut Vec<&fatkit_package::kernel_sets::Vanishes>| {
            g.first().is_some_and(|f| {
                (f.loaded, &f.ccs, declared.get(&f.kernel))
                    == (v.loaded, &v.ccs, declared.get(&v.kernel))
                    && template(&f.kernel) == template(&v.kernel)
            })
        };
        match groups.iter_mut().find(same) {
            Some(g) => g.push(v),
            None => groups.push(vec![v]),
        }
    }
    groups
}

/// How a group's kernel reads (`k`, or `t<...> (3 instantiations: ...)`) and the name to
/// declare it by: the template's when the group is every kernel of the module instantiating
/// it, else the first kernel's demangled name.
fn names_of(
    group: &[&fatkit_package::kernel_sets::Vanishes],
    images: &[Image<'_>],
) -> (String, String) {
    let shown: Vec<String> = group.iter().map(|v| names::demangled(&v.kernel)).collect();
    let first = shown.first().cloned().unwrap_or_default();
    if shown.len() < 2 {
        return (first.clone(), first);
    }
    let template = names::template_of(&first).to_owned();
    let mut all: Vec<&String> = images.iter().flat_map(|i| &i.kernels).collect();
    all.sort();
    all.dedup();
    let of_template = all
        .iter()
        .filter(|k| names::template_of(&names::demangled(k)) == template)
        .count();
    let more = match shown.len().saturating_sub(2) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    let label = format!(
        "{template}<...> ({} instantiations: {}{more})",
        shown.len(),
        shown.iter().take(2).cloned().collect::<Vec<_>>().join(", ")
    );
    let key = match of_template == shown.len() {
        true => template,
        false => first,
    };
    (label, key)
}

/// Each compute capability with a product or two people know it by: `8.6 (RTX A6000, GeForce
/// RTX 3090)`.
fn named_ccs(ccs: &[fatkit_arch::Cc]) -> Vec<String> {
    ccs.iter()
        .map(|cc| {
            let of_cc: Vec<&str> = fatkit_arch::products::PRODUCTS
                .iter()
                .filter(|p| p.cc == *cc)
                .map(|p| p.name)
                .collect();
            let mut named: Vec<&str> = of_cc.first().copied().into_iter().collect();
            named.extend(
                of_cc
                    .iter()
                    .find(|n| n.starts_with("GeForce") && !named.contains(n))
                    .copied(),
            );
            match named.is_empty() {
                true => cc.to_string(),
                false => format!("{cc} ({})", named.join(", ")),
            }
        })
        .collect()
}

/// The PTX of a kernel's declared set that alone would serve the GPUs it vanishes on (when no
/// other image of the set does): declaring it away too puts those GPUs outside the kernel's
/// targets. Empty when a cubin would serve them: then only building the kernel for the loaded
/// image (or a module without it) works.
fn serving_ptx(
    declared: Option<&Declared>,
    v: &fatkit_package::kernel_sets::Vanishes,
) -> Vec<Target> {
    let Some(d) = declared else {
        return Vec::new();
    };
    let ptx: Vec<Target> = d
        .targets
        .ptx()
        .filter(|p| {
            v.ccs
                .iter()
                .any(|cc| fatkit_arch::rules::ptx_arch_fit(*p, *cc).is_ok())
        })
        .collect();
    let rest: Vec<fatkit_arch::Image> = d
        .targets
        .iter()
        .filter(|t| !ptx.contains(t))
        .map(|t| fatkit_arch::Image::of(t, None))
        .collect();
    let rest_serves = v.ccs.iter().any(|cc| {
        fatkit_arch::rules::select(
            &rest,
            &fatkit_arch::Device::new(*cc, None),
            fatkit_arch::Policy::default(),
        )
        .selection
        .is_ok()
    });
    if rest_serves {
        Vec::new()
    } else {
        ptx
    }
}

/// The ways out for kernel `k` (declared by the name `key`), which the `loaded` image lacks.
fn fixes(
    req: &Request,
    declared: Option<&Declared>,
    (k, key): (&str, &str),
    loaded: Target,
    serving_ptx: &[Target],
) -> Vec<String> {
    let mut fixes = Vec::new();
    if !serving_ptx.is_empty() {
        let names: Vec<String> = serving_ptx.iter().map(|t| t.to_string()).collect();
        let mut excluded: Vec<String> = declared
            .map(|d| {
                req.ask
                    .profile
                    .targets
                    .iter()
                    .filter(|t| !d.targets.contains(*t))
                    .map(|t| format!("\"{t}\""))
                    .collect()
            })
            .unwrap_or_default();
        excluded.extend(names.iter().map(|n| format!("\"{n}\"")));
        // A TOML key: bare when it is an identifier, else quoted.
        let key = match key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            true => key.to_owned(),
            false => format!("\"{key}\""),
        };
        fixes.push(format!(
            "declare the PTX away too, so those GPUs are outside {k}'s targets and only it is refused there: `{key} = {{ exclude = [{}] }}`",
            excluded.join(", ")
        ));
        fixes.push(format!("drop {} from the profile", names.join(" ")));
    }
    fixes.push(format!("build {k} for {loaded} too"));
    if serving_ptx.is_empty() {
        fixes.push(format!(
            "build {k} in a module whose targets stop below {loaded} (a package of its own with such a profile), where a lower image serves those GPUs"
        ));
    }
    fixes
}

/// What the author counted on: the images of the kernel's declaration that would serve the
/// GPUs it vanishes on if the driver loaded them (every target, undeclared).
fn counted(declared: Option<&Declared>, v: &fatkit_package::kernel_sets::Vanishes) -> Vec<String> {
    let Some(d) = declared else {
        return vec!["every target".to_owned()];
    };
    d.targets
        .iter()
        .filter(|t| {
            let own = fatkit_arch::Image::of(*t, None);
            v.ccs.iter().any(|cc| {
                matches!(
                    fatkit_arch::rules::image_fit(
                        &own,
                        &fatkit_arch::Device::new(*cc, None),
                        fatkit_arch::Policy::default()
                    ),
                    fatkit_arch::rules::Fit::Runs(_)
                )
            })
        })
        .map(|t| t.to_string())
        .collect()
}

/// The declaration that builds `m`'s source for the targets whose images hold its kernels (no
/// image left where none of it runs), as the first way out; empty when none holds any.
fn declare_source(req: &Request, m: &Module, images: &[Image<'_>], empty: &[Target]) -> String {
    let holding: fatkit_arch::TargetSet = images
        .iter()
        .map(|i| i.target)
        .filter(|t| !empty.contains(t))
        .collect();
    match (holding.is_empty(), m.path.file_name()) {
        (false, Some(name)) => {
            let s = fatkit_package::kernel_sets::suggest(&holding, &req.ask.profile.all_targets());
            format!(
                "declare the source for the targets that hold its kernels, which builds it for those alone: {}; or ",
                crate::pipeline::failure::declare_source(&name.to_string_lossy(), &s)
            )
        }
        _ => String::new(),
    }
}
