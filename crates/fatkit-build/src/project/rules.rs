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
pub(crate) fn sources_list(sources: &[PathBuf], base: &Path) -> String {
    sources
        .iter()
        .map(|s| s.strip_prefix(base).unwrap_or(s).display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Each source's declared targets (`[package.metadata.fatkit.files]`), by source; a
/// declaration matching no source of the package is refused, naming them.
pub(super) fn source_targets(
    pkg: &workspace::KernelPackage,
    kernel_sets: &crate::kernel_sets::KernelSets,
    sources: &[PathBuf],
) -> Result<std::collections::BTreeMap<PathBuf, crate::kernel_sets::FileRule>, BuildError> {
    kernel_sets.files_of(sources, &pkg.dir).map_err(|unused| {
        BuildError::from(crate::refused::Refused::FileMatchesNothing {
            written: format!(
                "{}: [package.metadata.fatkit.files]",
                pkg.manifest_path.display()
            ),
            pattern: unused.pattern.clone(),
            sources: sources_list(sources, &pkg.dir),
            root: pkg.dir.clone(),
        })
    })
}
