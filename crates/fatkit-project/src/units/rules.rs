//! A package's declarations read against its profile: `[package.metadata.fatkit.kernels]`
//! (kernels built for fewer targets) and `[package.metadata.fatkit.files]` (sources built for
//! fewer targets), each rule checked, an error naming the manifest and the entry.

use fatkit_arch::profile::Profile;

use fatkit_package::error::BuildError;
use fatkit_package::kernel_sets::KernelRule;
use fatkit_package::workspace::{self, KernelDeclaration};

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
                BuildError::from(fatkit_build::refused::Refused::PackageKernelTargets {
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
) -> Result<Vec<fatkit_package::kernel_sets::FileRule>, BuildError> {
    let all = profile.all_targets();
    pkg.files
        .iter()
        .map(|(pattern, spec)| {
            fatkit_package::kernel_sets::FileRule::targets(pattern, spec, &all).map_err(|e| {
                BuildError::from(fatkit_build::refused::Refused::PackageFileTargets {
                    manifest: pkg.manifest_path.clone(),
                    pattern: pattern.clone(),
                    why: e,
                    profile: profile.name.clone(),
                })
            })
        })
        .collect()
}
