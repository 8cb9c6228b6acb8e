//! What a build is asked, resolved once for every caller: a source's declared targets
//! (`[package.metadata.fatkit.files]`, `Build::file_targets`) matched to the sources, and the
//! pins of targets to toolchains (`[package.metadata.fatkit.toolchain]`, `Build::toolchain`)
//! over a profile. A build script's [`crate::Build`] and a project's units (fatkit-project)
//! both resolve through these.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fatkit_arch::profile::Profile;
use fatkit_package::error::BuildError;
use fatkit_package::kernel_sets::{FileRule, KernelSets};

/// Pins (a package's table, `Build::toolchain`) over the profile's `[toolchain]`: each
/// pinned target one of the profile's, each pin a toolchain that builds it; else why not.
pub fn pin_toolchains(
    pins: &BTreeMap<fatkit_arch::Target, fatkit_arch::Pin>,
    profile: &mut Profile,
) -> Result<(), String> {
    let all = profile.all_targets();
    for (target, pin) in pins {
        if !all.contains(*target) {
            return Err(format!(
                "{target} is not a target of the profile; name one of {all}"
            ));
        }
        if !pin.can_build(*target) {
            return Err(format!(
                "{pin} cannot build {target}; pin a toolchain that builds it, or remove the pin"
            ));
        }
        profile.pins.insert(*target, *pin);
    }
    Ok(())
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
pub fn source_targets(
    kernel_sets: &KernelSets,
    sources: &[PathBuf],
    base: &Path,
    written: impl Fn() -> String,
) -> Result<BTreeMap<PathBuf, FileRule>, BuildError> {
    kernel_sets.files_of(sources, base).map_err(|unused| {
        BuildError::from(crate::refused::Refused::FileMatchesNothing {
            written: written(),
            pattern: unused.pattern.clone(),
            sources: sources_list(sources, base),
            root: base.to_owned(),
        })
    })
}
