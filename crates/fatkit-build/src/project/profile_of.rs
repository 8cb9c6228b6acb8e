//! Which profile a unit and a release are built for, resolved in one place (as ripgrep's
//! `HiArgs` resolves options and their defaults once): `build-kernels`, `plan` and `package`
//! all ask here, so a package's `profile` in `[package.metadata.fatkit]` means the same to each.

use crate::workspace::{KernelPackage, Workspace};
use crate::BuildError;

/// The profile a package's unit is built for: `--profile` where given, except for a vendored
/// package (its modules are what its crate ships: always its own), else its metadata's
/// (`profile::DEFAULT` when it names none).
pub fn of_package<'a>(given: Option<&'a str>, pkg: &'a KernelPackage) -> &'a str {
    match (&pkg.vendor, given) {
        (None, Some(given)) => given,
        _ => &pkg.profile,
    }
}

/// The profile a release is held to: `--profile` where given, else the one every package with
/// `[package.metadata.fatkit]` is built for (the default where there is none); two packages
/// built for different profiles are an error naming both. With it, the directory a profile
/// file named so is looked up from: the package's (as its unit looks it up), else the root.
pub fn of_release(
    given: Option<&str>,
    ws: &Workspace,
) -> Result<(String, std::path::PathBuf), BuildError> {
    if let Some(given) = given {
        return Ok((given.to_owned(), ws.root.clone()));
    }
    let mut packages = ws.kernel_packages.iter();
    let Some(first) = packages.next() else {
        return Ok((crate::profile::DEFAULT.to_owned(), ws.root.clone()));
    };
    match packages.find(|p| p.profile != first.profile) {
        None => Ok((first.profile.clone(), first.dir.clone())),
        Some(other) => Err(crate::refused::Refused::ProfilesDisagree {
            first: (first.name.clone(), first.profile.clone()),
            other: (other.name.clone(), other.profile.clone()),
        }
        .into()),
    }
}
