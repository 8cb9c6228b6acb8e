//! A package's declarations read against its profile: `[package.metadata.fatkit.kernels]`
//! (kernels built for fewer targets) and `[package.metadata.fatkit.files]` (sources built for
//! fewer targets), each rule checked, an error naming the manifest and the entry.

use std::path::{Path, PathBuf};

use fatkit_arch::profile::Profile;

use crate::kernel_sets::KernelRule;
use crate::workspace::{self, KernelDeclaration};
use crate::BuildError;

/// `[package.metadata.fatkit.kernels]`: the kernels a package declares for fewer targets of
/// `profile`, each rule checked against it.
pub(super) fn kernel_rules(
    pkg: &workspace::KernelPackage,
    profile: &Profile,
) -> Result<Vec<KernelRule>, BuildError> {
    let all = profile.all_targets();
    pkg.kernels
        .iter()
        .map(|(pattern, declaration)| {
            let rule = match declaration {
                KernelDeclaration::Targets(spec) => KernelRule::targets(pattern, spec, &all),
                KernelDeclaration::Exclude(list) => KernelRule::exclude(pattern, list, &all),
            };
            rule.map_err(|e| {
                BuildError::from(crate::refused::Refused::PackageKernelTargets {
                    manifest: pkg.manifest_path.clone(),
                    pattern: pattern.clone(),
                    why: e,
                    profile: profile.name.clone(),
                })
            })
        })
        .collect()
}

/// `[package.metadata.fatkit.files]`: the sources a package declares for fewer targets of
/// `profile`, each rule checked against it.
pub(super) fn file_rules(
    pkg: &workspace::KernelPackage,
    profile: &Profile,
) -> Result<Vec<crate::kernel_sets::FileRule>, BuildError> {
    let all = profile.all_targets();
    pkg.files
        .iter()
        .map(|(pattern, spec)| {
            crate::kernel_sets::FileRule::targets(pattern, spec, &all).map_err(|e| {
                BuildError::from(crate::refused::Refused::PackageFileTargets {
                    manifest: pkg.manifest_path.clone(),
                    pattern: pattern.clone(),
                    why: e,
                    profile: profile.name.clone(),
                })
            })
        })
        .collect()
}

/// The sources, relative to `base`, for a message.
fn sources_list(sources: &[PathBuf], base: &Path) -> String {
    sources
        .iter()
        .map(|s| s.strip_prefix(base).unwrap_or(s).display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Each source's declared targets (`kernel_sets.files`), by source, patterns with `/` relative
/// to `base`; a declaration matching none of `sources` is refused, naming them and where the
/// declaration is `written` (`Build::file_targets`, a manifest's table). The one resolution
/// both a build script's `Build` and a package unit use.
pub(crate) fn source_targets(
    kernel_sets: &crate::kernel_sets::KernelSets,
    sources: &[PathBuf],
    base: &Path,
    written: impl Fn() -> String,
) -> Result<std::collections::BTreeMap<PathBuf, crate::kernel_sets::FileRule>, BuildError> {
    kernel_sets.files_of(sources, base).map_err(|unused| {
        BuildError::from(crate::refused::Refused::FileMatchesNothing {
            written: written(),
            pattern: unused.pattern.clone(),
            sources: sources_list(sources, base),
            root: base.to_owned(),
        })
    })
}
