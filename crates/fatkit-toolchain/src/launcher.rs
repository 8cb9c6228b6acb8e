//! A compiler launcher, as CMake's `CMAKE_CUDA_COMPILER_LAUNCHER`: a program that nvcc's cubin
//! jobs run under (`sccache nvcc -cubin ...`), so that a team shares compiles through a cache
//! server or a build cluster. fatkit's own cache stays the first level: only the jobs it
//! misses reach the launcher.
//!
//! Where the setting comes from is decided here, once ([`configured`], which [`choose`]s the
//! setting and [`resolve`]s it): `--launcher`, else `FATKIT_LAUNCHER`, else a package's
//! `launcher` key or `fatkit_build::Build::launcher`. An empty value at any level means no launcher
//! (`FATKIT_LAUNCHER= cargo build` turns a configured one off). [`resolve`] finds the program and refuses one that cannot do the job (docs/BUILDS.md
//! says why sccache must be 0.9.0 or later).

use std::path::{Path, PathBuf};
use std::process::Command;

use fatkit_package::error::BuildError;

/// The sccache release `toolchain install --sccache` builds (with `sccache-dist`).
pub const SCCACHE_VERSION: &str = "0.19.0";

/// The first sccache that caches nvcc's `cicc` and `ptxas` steps, which is what makes a
/// cubin job's cache entry independent of the other targets of the build.
pub(crate) const SCCACHE_MIN: (u32, u32, u32) = (0, 9, 0);

/// A launcher found and checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launcher {
    /// The program run, with nvcc and its arguments after it.
    pub program: PathBuf,
    /// As the setting gave it (`sccache`, `/opt/bin/sccache`).
    pub spec: String,
    /// Where the setting came from, for messages: `--launcher`, `FATKIT_LAUNCHER`, ...
    pub origin: String,
    /// `sccache 0.19.0`, when the program is an sccache.
    pub version: Option<String>,
}

impl Launcher {
    /// `sccache (FATKIT_LAUNCHER: /home/me/.cache/fatkit/toolchains/sccache-0.19.0/bin/sccache)`.
    pub fn describe(&self) -> String {
        format!(
            "{} ({}: {})",
            self.version.as_deref().unwrap_or(&self.spec),
            self.origin,
            self.program.display()
        )
    }
}

/// The launcher setting in effect and its origin: the first of `explicit` (a command-line
/// option), `env` (`FATKIT_LAUNCHER`) and `configured` (a metadata key, the `Build` API) that
/// is given; `None` when none is, or when the one in effect is empty.
pub fn choose(
    explicit: Option<(&str, &str)>,
    env: Option<&str>,
    configured: Option<(&str, &str)>,
) -> Option<(String, String)> {
    let (value, origin) = explicit
        .or(env.map(|v| (v, "FATKIT_LAUNCHER")))
        .or(configured)?;
    let value = value.trim();
    (!value.is_empty()).then(|| (value.to_owned(), origin.to_owned()))
}

/// The launcher in effect ([`choose`]), found and checked ([`resolve`]); `None` when no setting
/// is given or the one in effect is empty. What every command that builds calls.
pub fn configured(
    explicit: Option<(&str, &str)>,
    env: Option<&str>,
    configured: Option<(&str, &str)>,
) -> Result<Option<Launcher>, BuildError> {
    match choose(explicit, env, configured) {
        Some((spec, origin)) => {
            let cache = crate::cache_dir().ok();
            resolve(&spec, &origin, cache.as_deref()).map(Some)
        }
        None => Ok(None),
    }
}

/// How to build without the launcher set at `origin`, for the end of a message.
fn turn_off(origin: &str) -> String {
    match origin {
        "FATKIT_LAUNCHER" => "unset FATKIT_LAUNCHER".to_owned(),
        "--launcher" => "leave out --launcher".to_owned(),
        other => {
            format!("remove it from {other}, or set FATKIT_LAUNCHER= (empty) to build without it")
        }
    }
}

/// What a job says when its compiler exited 0 but `what` (`wrote no out.cubin: ...`): naming
/// the launcher it ran under, with what to check and how to build without it.
pub fn no_output(launcher: Option<&Launcher>, what: &str) -> String {
    match launcher {
        None => format!("nvcc exited 0 but {what}"),
        Some(l) => format!(
            "the launcher {} exited 0 but {what}; the launcher must run the nvcc command it is given and leave its output (for sccache: `{} --show-stats`, SCCACHE_LOG=debug); to build without it, {}",
            l.describe(),
            l.program.display(),
            turn_off(&l.origin)
        ),
    }
}

/// Where `toolchain install --sccache` puts sccache and sccache-dist.
pub(crate) fn sccache_dir(cache: &Path) -> PathBuf {
    cache
        .join("toolchains")
        .join(format!("sccache-{SCCACHE_VERSION}"))
}

/// The provisioned sccache, if `toolchain install --sccache` has run.
pub fn provisioned_sccache(cache: &Path) -> Option<PathBuf> {
    let dir = sccache_dir(cache);
    let bin = dir.join("bin").join("sccache");
    (dir.join(crate::COMPLETE).is_file() && bin.is_file()).then_some(bin)
}

/// Finds the program of a launcher setting and checks it: a path, a name on `PATH`, or
/// `sccache`, which is also looked for where `toolchain install --sccache` puts it. An sccache
/// older than `SCCACHE_MIN`, one that does not run, and a program that is not there are
/// errors naming the setting and the fix.
pub fn resolve(spec: &str, origin: &str, cache: Option<&Path>) -> Result<Launcher, BuildError> {
    let off = turn_off(origin);
    let is_sccache = Path::new(spec)
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("sccache"));
    let found = if spec.contains('/') {
        Some(PathBuf::from(spec)).filter(|p| p.is_file())
    } else {
        crate::command::on_path(spec).or_else(|| {
            (spec == "sccache")
                .then(|| cache.and_then(provisioned_sccache))
                .flatten()
        })
    };
    let Some(program) = found else {
        let install = if is_sccache {
            "run `fatkit toolchain install --sccache` (or `cargo xtask toolchain install --sccache`), "
        } else {
            ""
        };
        return Err(BuildError::of(LauncherError::NotFound {
            spec: spec.to_owned(),
            origin: origin.to_owned(),
            looked: if spec.contains('/') {
                ""
            } else {
                " on PATH or in fatkit's cache"
            },
            install,
            off: off.clone(),
        }));
    };
    let version = if is_sccache {
        Some(sccache_version(&program, spec, origin, &off)?)
    } else {
        None
    };
    Ok(Launcher {
        program,
        spec: spec.to_owned(),
        origin: origin.to_owned(),
        version,
    })
}

/// Why a compiler launcher cannot be used: `spec` as given, `origin` where it was given
/// (`FATKIT_LAUNCHER`, `--launcher`), `off` how to build without one.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LauncherError {
    #[error("launcher '{spec}' ({origin}): not found{looked}; {install}give its path, or {off}")]
    NotFound {
        spec: String,
        origin: String,
        looked: &'static str,
        install: &'static str,
        off: String,
    },
    #[error("launcher '{spec}' ({origin}): `{} --version` does not run; reinstall it (`fatkit toolchain install --sccache`), or {off}", program.display())]
    DoesNotRun {
        spec: String,
        origin: String,
        program: PathBuf,
        off: String,
    },
    #[error("launcher '{spec}' ({origin}) at {} is {version}, too old: sccache caches nvcc's cicc and ptxas steps, which cubin jobs need, from {}.{}.{}; run `fatkit toolchain install --sccache` (sccache {SCCACHE_VERSION}) and use that, or {off}", program.display(), SCCACHE_MIN.0, SCCACHE_MIN.1, SCCACHE_MIN.2)]
    TooOld {
        spec: String,
        origin: String,
        program: PathBuf,
        version: String,
        off: String,
    },
}

/// `sccache --version`, refused below [`SCCACHE_MIN`].
fn sccache_version(
    program: &Path,
    spec: &str,
    origin: &str,
    off: &str,
) -> Result<String, BuildError> {
    let line = crate::command::version_line(program).ok_or_else(|| {
        BuildError::of(LauncherError::DoesNotRun {
            spec: spec.to_owned(),
            origin: origin.to_owned(),
            program: program.to_owned(),
            off: off.to_owned(),
        })
    })?;
    let parsed = parse_version(&line);
    match parsed {
        Some(v) if v >= SCCACHE_MIN => Ok(line.trim().to_owned()),
        _ => Err(BuildError::of(LauncherError::TooOld {
            spec: spec.to_owned(),
            origin: origin.to_owned(),
            program: program.to_owned(),
            version: line.trim().to_owned(),
            off: off.to_owned(),
        })),
    }
}

/// `sccache 0.19.0` -> `(0, 19, 0)`.
fn parse_version(line: &str) -> Option<(u32, u32, u32)> {
    let v = line.split_whitespace().nth(1)?;
    let mut parts = v.split(['.', '-']).map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

/// The command of a job: `launcher nvcc args...` run in `base`, or `nvcc args...`.
///
/// nvcc hands cicc the source's absolute path (`--orig_src_path_name`) however it is given,
/// so two checkouts make different cicc keys unless sccache strips the checkout's directory:
/// an sccache launcher gets `SCCACHE_BASEDIRS=<base>` unless the environment sets it. sccache
/// reads it where its server starts, which is here when no server runs yet.
pub fn command(launcher: Option<&Launcher>, nvcc: &Path, base: Option<&Path>) -> Command {
    let Some(l) = launcher else {
        let mut cmd = Command::new(nvcc);
        if let Some(base) = base {
            cmd.current_dir(base);
        }
        return cmd;
    };
    let mut cmd = Command::new(&l.program);
    cmd.arg(nvcc);
    if let Some(base) = base {
        cmd.current_dir(base);
        if l.version.is_some() && std::env::var_os("SCCACHE_BASEDIRS").is_none() {
            cmd.env("SCCACHE_BASEDIRS", base);
        }
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_setting_given_wins_and_empty_means_none() {
        let cli = Some(("sccache", "--launcher"));
        let meta = Some(("ccache", "Cargo.toml"));
        assert_eq!(
            choose(cli, Some("x"), meta),
            Some(("sccache".to_owned(), "--launcher".to_owned()))
        );
        assert_eq!(
            choose(None, Some("x"), meta),
            Some(("x".to_owned(), "FATKIT_LAUNCHER".to_owned()))
        );
        assert_eq!(choose(None, Some(""), meta), None);
        assert_eq!(
            choose(None, None, meta),
            Some(("ccache".to_owned(), "Cargo.toml".to_owned()))
        );
        assert_eq!(choose(None, None, None), None);
    }

    #[test]
    fn versions() {
        assert_eq!(parse_version("sccache 0.19.0"), Some((0, 19, 0)));
        assert_eq!(parse_version("sccache 0.4.2\n"), Some((0, 4, 2)));
        assert_eq!(parse_version("sccache 0.10.0-alpha"), Some((0, 10, 0)));
        assert_eq!(parse_version("sccache"), None);
    }

    #[test]
    fn a_missing_or_old_launcher_is_refused() {
        let dir = std::env::temp_dir().join(format!("fatkit-launcher-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = resolve("/nonexistent/sccache", "FATKIT_LAUNCHER", Some(&dir))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("launcher '/nonexistent/sccache' (FATKIT_LAUNCHER): not found; run `fatkit toolchain install --sccache`"),
            "{err}"
        );
        assert!(err.ends_with("or unset FATKIT_LAUNCHER"), "{err}");
        let old = dir.join("sccache");
        std::fs::write(&old, "#!/bin/sh\necho 'sccache 0.4.2'\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = resolve(old.to_str().unwrap(), "--launcher", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("is sccache 0.4.2, too old"), "{err}");
        assert!(
            err.contains("from 0.9.0; run `fatkit toolchain install --sccache` (sccache 0.19.0)"),
            "{err}"
        );
        std::fs::write(&old, "#!/bin/sh\necho 'sccache 0.19.0'\n").unwrap();
        let ok = resolve(old.to_str().unwrap(), "--launcher", None).unwrap();
        assert_eq!(ok.version.as_deref(), Some("sccache 0.19.0"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
