//! Which profile a unit and a release are built for, resolved in one place (as ripgrep's
//! `HiArgs` resolves options and their defaults once): `build-kernels`, `plan` and `package`
//! all ask here, so a package's `profile` in `[package.metadata.fatkit]` means the same to each.

use fatkit_package::error::BuildError;
use fatkit_package::workspace::{KernelPackage, Workspace};

/// The profile a package's unit is built for: `--profile` where given, except for a vendored
/// package (its modules are what its crate ships: always its own), else its metadata's
/// (`profile::DEFAULT` when it names none).
pub(crate) fn of_package<'a>(given: Option<&'a str>, pkg: &'a KernelPackage) -> &'a str {
    match (&pkg.vendor, given) {
        (None, Some(given)) => given,
        _ => &pkg.profile,
    }
}

/// The profile a release is held to: `--profile` where given, else the one every package with
/// `[package.metadata.fatkit]` is built for (the default where there is none); two packages
/// built for different profiles are an error naming both. With it, the directory a profile
/// file named so is looked up from: the package's (as its unit looks it up), else the root.
pub(crate) fn of_release(
    given: Option<&str>,
    ws: &Workspace,
) -> Result<(String, std::path::PathBuf), BuildError> {
    if let Some(given) = given {
        return Ok((given.to_owned(), ws.root.clone()));
    }
    let mut packages = ws.kernel_packages.iter();
    let Some(first) = packages.next() else {
        return Ok((fatkit_package::profile::DEFAULT.to_owned(), ws.root.clone()));
    };
    match packages.find(|p| p.profile != first.profile) {
        None => Ok((first.profile.clone(), first.dir.clone())),
        Some(other) => Err(fatkit_build::refused::Refused::ProfilesDisagree {
            first: (first.name.clone(), first.profile.clone()),
            other: (other.name.clone(), other.profile.clone()),
        }
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn package(name: &str, profile: &str, vendor: bool) -> KernelPackage {
        KernelPackage {
            name: name.into(),
            manifest_path: PathBuf::from(format!("/ws/{name}/Cargo.toml")),
            dir: PathBuf::from(format!("/ws/{name}")),
            profile: profile.into(),
            sources: Vec::new(),
            include_dirs: Vec::new(),
            defines: Vec::new(),
            flags: Vec::new(),
            kernel_sets_as_built: false,
            kernels: Vec::new(),
            files: Vec::new(),
            toolchain: Default::default(),
            config: String::new(),
            vendor: vendor.then(|| PathBuf::from(format!("/ws/{name}/kernels"))),
            launcher: None,
            budget: None,
        }
    }

    fn workspace(packages: Vec<KernelPackage>) -> Workspace {
        Workspace {
            root: "/ws".into(),
            target_dir: "/ws/target".into(),
            name: "ws".into(),
            kernel_packages: packages,
            binaries: Vec::new(),
            launcher: None,
        }
    }

    /// Every command's answer from one table: (given, packages) -> the release's profile and
    /// each package unit's.
    #[test]
    fn the_metadata_profile_means_the_same_to_every_command() {
        let relapp = package("relapp", "release", false);
        let vendored = package("kernels", "modern", true);
        assert_eq!(of_package(None, &relapp), "release");
        assert_eq!(of_package(Some("dev"), &relapp), "dev");
        assert_eq!(of_package(Some("dev"), &vendored), "modern");

        let one = workspace(vec![relapp.clone()]);
        let (spec, base) = of_release(None, &one).unwrap();
        assert_eq!(
            (spec.as_str(), base),
            ("release", PathBuf::from("/ws/relapp"))
        );
        assert_eq!(of_release(Some("dev"), &one).unwrap().0, "dev");
        assert_eq!(of_release(None, &workspace(Vec::new())).unwrap().0, "full");

        let two = workspace(vec![relapp, vendored]);
        let err = of_release(None, &two).unwrap_err().to_string();
        assert_eq!(
            err,
            "which profile to package for: package relapp is built for profile release, package kernels for modern; pass --profile"
        );
        assert_eq!(of_release(Some("full"), &two).unwrap().0, "full");
    }
}
