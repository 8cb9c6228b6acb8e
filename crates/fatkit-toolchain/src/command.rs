//! Tools found where users keep them (discovery, apart from running them): a program on
//! `PATH`, whether this is CI, and whether an installed tool is the release it should be.
//! Running a tool is fatkit-run's, re-exported here.

pub use fatkit_run::*;

/// The first program called `name` in a `PATH` directory: a file that may be run, as a
/// shell looks for it (a file without execute permission is passed over).
pub fn on_path(name: &str) -> Option<std::path::PathBuf> {
    on_path_in(name, &std::env::var_os("PATH")?)
}

/// [`on_path`] over the directories of `path` (the `which` crate's search: a regular file the
/// user may execute; a relative directory is taken from the current one, as a shell does).
fn on_path_in(name: &str, path: &std::ffi::OsStr) -> Option<std::path::PathBuf> {
    let cwd = std::env::current_dir().unwrap_or_default();
    which::which_in(name, Some(path), cwd).ok()
}

/// Whether this runs in CI (`CI` set to anything but empty, `false` or `0`): there progress
/// stays plain and a missing toolchain fails a test instead of skipping it.
pub fn is_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Runs `program --version`, which must print `expected` (the install is then the release
/// `what` names); an error naming the command and what it printed otherwise.
pub fn expect_version(
    program: &std::path::Path,
    expected: &str,
    what: &str,
) -> Result<(), ToolError> {
    let name = program
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let version = run(
        std::process::Command::new(program).arg("--version"),
        &format!("the installed {name} does not run on this machine"),
    )?;
    if version.contains(expected) {
        Ok(())
    } else {
        Err(ToolError {
            command: format!("{name} --version"),
            status: ToolStatus::UnexpectedVersion,
            output: version,
            hint: format!("expected {what}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_file_on_path_that_cannot_be_run_is_passed_over() {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!("fatkit-on-path-{}", std::process::id()));
        let (plain, runnable) = (root.join("a"), root.join("b"));
        for dir in [&plain, &runnable] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("tool"), "#!/bin/sh\n").unwrap();
        }
        std::fs::set_permissions(plain.join("tool"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        std::fs::set_permissions(
            runnable.join("tool"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let path = std::env::join_paths([&plain, &runnable]).unwrap();
        assert_eq!(on_path_in("tool", &path), Some(runnable.join("tool")));
        assert_eq!(on_path_in("absent", &path), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
