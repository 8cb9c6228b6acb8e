//! A Python environment's site-packages, read from its layout: nothing of the environment runs.
//!
//! An environment is data. Its interpreter may be a script, its `.pth` files may hold `import`
//! lines and its `sitecustomize.py` runs on every start (docs/GUARANTEES.md, "Reading an input
//! never runs it"). So fatkit starts no interpreter of the input: the directories an
//! interpreter would put on `sys.path` for installed packages are found from where every
//! installer puts them (`site.getsitepackages()` in CPython's `Lib/site.py`, Debian's
//! `dist-packages` patch, conda's and Windows' layouts), with the version taken from the
//! interpreter's name, `pyvenv.cfg` or the `lib/python3.N` directories present:
//!
//! - `lib/python3.N/site-packages` and `lib64/...` (CPython's prefix, a venv, conda, uv);
//! - `lib/python3/dist-packages`, `lib/python3.N/dist-packages` and, for the prefix `/usr`,
//!   `local/lib/python3.N/dist-packages` (Debian and Ubuntu);
//! - `Lib/site-packages` (Windows);
//! - with `include-system-site-packages = true` in `pyvenv.cfg`, the same for the base
//!   environment its `home` names;
//! - directories a `.pth` file names on a line of its own, read as text, when they lie inside
//!   the environment (its `import` lines are code and are skipped).

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// The most `.pth` bytes read from one file, and the most links followed to name an
/// interpreter's version.
const MAX_PTH: u64 = 1 << 20;
const MAX_LINKS: usize = 40;

/// The interpreter `--python` means without a value: the one beside this program when pip
/// installed it into a Python environment (its `bin/` holds `fatkit` and that environment's
/// `python3`), else the first `python3` on `PATH`. Found, never run.
pub fn default_python() -> PathBuf {
    let beside = std::env::current_exe().ok().and_then(|exe| {
        let dir = exe.parent()?;
        ["python3", "python"]
            .iter()
            .map(|name| dir.join(name))
            .find(|p| p.is_file())
    });
    beside
        .or_else(|| {
            std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|dir| dir.join("python3"))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// The site-packages directories of a Python environment: `python` names its interpreter (a
/// file, which is not run) or its directory.
pub fn site_packages(python: &Path) -> Result<Vec<PathBuf>> {
    let (root, interpreter) = if python.is_dir() {
        let interpreter = [
            "bin/python3",
            "bin/python",
            "Scripts/python.exe",
            "python.exe",
        ]
        .iter()
        .map(|p| python.join(p))
        .find(|p| p.symlink_metadata().is_ok());
        let layout = ["pyvenv.cfg", "lib", "Lib"]
            .iter()
            .any(|p| python.join(p).exists());
        if interpreter.is_none() && !layout {
            return Err(Error::NotAnEnvironment(python.to_owned()));
        }
        (python.to_owned(), interpreter)
    } else if python.symlink_metadata().is_ok() {
        (root_of(python), Some(python.to_owned()))
    } else {
        return Err(Error::NotAnEnvironment(python.to_owned()));
    };
    let version = interpreter.as_deref().and_then(version_of_name);
    let config = Config::read(&root);
    let version = version.or_else(|| config.version.clone());
    let mut dirs = layout_dirs(&root, version.as_deref());
    if config.system_site_packages {
        if let Some(home) = &config.home {
            dirs.extend(layout_dirs(&root_of_bin(home), version.as_deref()));
        }
    }
    let mut unique: Vec<PathBuf> = Vec::new();
    let push = |d: PathBuf, unique: &mut Vec<PathBuf>| {
        let canon = d.canonicalize().unwrap_or(d);
        if canon.is_dir() && !unique.contains(&canon) {
            unique.push(canon);
        }
    };
    for d in dirs {
        push(d, &mut unique);
    }
    let inside = root.canonicalize().unwrap_or_else(|_| root.clone());
    for site in unique.clone() {
        for named in pth_dirs(&site) {
            if named.starts_with(&inside) {
                push(named, &mut unique);
            }
        }
    }
    if unique.is_empty() {
        // A script where the interpreter should be (pyenv's and asdf's shims): which Python
        // it would start is decided by running it, which fatkit does not.
        let script = interpreter.as_deref().is_some_and(|i| {
            fatkit_read::open_regular(i).is_ok_and(|(f, _)| {
                let mut head = [0u8; 2];
                std::io::Read::read_exact(&mut &f, &mut head).is_ok() && &head == b"#!"
            })
        });
        return Err(match (script, interpreter) {
            (true, Some(interpreter)) => Error::ScriptInterpreter(interpreter),
            _ => Error::NoSitePackages(root),
        });
    }
    Ok(unique)
}

/// The prefix of an interpreter: the directory above its `bin/` or `Scripts/`, else its own.
fn root_of(interpreter: &Path) -> PathBuf {
    interpreter
        .parent()
        .map(root_of_bin)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn root_of_bin(dir: &Path) -> PathBuf {
    match dir.file_name().and_then(|n| n.to_str()) {
        Some("bin" | "Scripts") => dir.parent().unwrap_or(dir).to_owned(),
        _ => dir.to_owned(),
    }
}

/// `3.N` from an interpreter's name, or the name a chain of links ends at (`python3` ->
/// `python3.12`); the links are read, not followed into anything that runs.
fn version_of_name(interpreter: &Path) -> Option<String> {
    let mut path = interpreter.to_owned();
    for _ in 0..MAX_LINKS {
        if let Some(v) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("python"))
            .and_then(version_text)
        {
            return Some(v);
        }
        let target = std::fs::read_link(&path).ok()?;
        path = match path.parent() {
            Some(dir) if target.is_relative() => dir.join(target),
            _ => target,
        };
    }
    None
}

/// `3.N` when `text` starts with it (`3.12`, `3.12.3`, `3.13t`).
fn version_text(text: &str) -> Option<String> {
    let mut parts = text.trim().split('.');
    let major = parts.next()?;
    let minor: String = parts
        .next()?
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    (major == "3" && !minor.is_empty()).then(|| format!("3.{minor}"))
}

/// What `pyvenv.cfg` says: `version`/`version_info`, `home` and
/// `include-system-site-packages`.
#[derive(Default)]
struct Config {
    version: Option<String>,
    home: Option<PathBuf>,
    system_site_packages: bool,
}

impl Config {
    fn read(root: &Path) -> Config {
        let mut config = Config::default();
        let Ok(text) = fatkit_read::read_limited(&root.join("pyvenv.cfg"), MAX_PTH) else {
            return config;
        };
        for line in String::from_utf8_lossy(&text).lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let value = value.trim();
            match key.trim() {
                "version" | "version_info" => config.version = version_text(value),
                "home" => config.home = Some(PathBuf::from(value)),
                "include-system-site-packages" => {
                    config.system_site_packages = value.eq_ignore_ascii_case("true")
                }
                _ => {}
            }
        }
        config
    }
}

/// Where installers put packages under `root`, for `version` (`3.N`) or, unknown, for every
/// `python3.N` directory present.
fn layout_dirs(root: &Path, version: Option<&str>) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for lib in ["lib", "lib64"] {
        for v in versions(&root.join(lib), version) {
            let base = root.join(lib).join(format!("python{v}"));
            dirs.push(base.join("site-packages"));
            dirs.push(base.join("dist-packages"));
        }
    }
    dirs.push(root.join("lib/python3/dist-packages"));
    if root == Path::new("/usr") {
        for v in versions(&root.join("local/lib"), version) {
            dirs.push(root.join(format!("local/lib/python{v}/dist-packages")));
        }
    }
    dirs.push(root.join("Lib/site-packages"));
    dirs
}

/// The versions to look under `lib`: the one named, else every `python3.N` there.
fn versions(lib: &Path, version: Option<&str>) -> Vec<String> {
    if let Some(v) = version {
        return vec![v.to_owned()];
    }
    let Ok(entries) = std::fs::read_dir(lib) else {
        return Vec::new();
    };
    let mut found: Vec<String> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let v = version_text(name.to_str()?.strip_prefix("python")?)?;
            (name.to_str()? == format!("python{v}")).then_some(v)
        })
        .collect();
    found.sort();
    found
}

/// The directories the `.pth` files of `site` name, each line read as a path relative to
/// `site` (CPython's `site.addpackage`); `import` lines, comments and blank lines are skipped.
fn pth_dirs(site: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(site) else {
        return Vec::new();
    };
    let mut pth: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "pth"))
        .collect();
    pth.sort();
    let mut dirs = Vec::new();
    for file in pth {
        let Ok(text) = fatkit_read::read_limited(&file, MAX_PTH) else {
            continue;
        };
        for line in String::from_utf8_lossy(&text).lines() {
            let line = line.trim_end();
            let code = line.starts_with("import ") || line.starts_with("import\t");
            if line.is_empty() || line.starts_with('#') || code {
                continue;
            }
            let dir = site.join(line);
            if let Ok(canon) = dir.canonicalize() {
                if canon.is_dir() {
                    dirs.push(canon);
                }
            }
        }
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mkdirs(root: &Path, dirs: &[&str]) {
        for d in dirs {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
    }

    /// A fresh scratch directory for one test.
    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fatkit-env-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn canon(p: PathBuf) -> PathBuf {
        p.canonicalize().unwrap()
    }

    #[test]
    fn a_venv_a_conda_prefix_and_a_debian_prefix_are_read_from_their_layouts() {
        let tmp = scratch("layouts");
        let venv = tmp.join("venv");
        mkdirs(
            &venv,
            &[
                "bin",
                "lib/python3.12/site-packages",
                "lib/python3.11/site-packages",
            ],
        );
        std::fs::write(
            venv.join("pyvenv.cfg"),
            "home = /nowhere/bin\nversion = 3.12.3\n",
        )
        .unwrap();
        std::fs::write(venv.join("bin/python3"), "#!/bin/sh\nexit 1\n").unwrap();
        let found = site_packages(&venv.join("bin/python3")).unwrap();
        assert_eq!(
            found,
            vec![canon(venv.join("lib/python3.12/site-packages"))]
        );

        let conda = tmp.join("conda");
        mkdirs(&conda, &["bin", "lib/python3.11/site-packages"]);
        std::os::unix::fs::symlink("python3.11", conda.join("bin/python3")).unwrap();
        let found = site_packages(&conda).unwrap();
        assert_eq!(
            found,
            vec![canon(conda.join("lib/python3.11/site-packages"))]
        );

        let debian = tmp.join("usr");
        mkdirs(
            &debian,
            &["bin", "lib/python3/dist-packages", "lib/python3.12"],
        );
        std::fs::write(debian.join("bin/python3.12"), "").unwrap();
        let found = site_packages(&debian.join("bin/python3.12")).unwrap();
        assert_eq!(found, vec![canon(debian.join("lib/python3/dist-packages"))]);

        let windows = tmp.join("win");
        mkdirs(&windows, &["Scripts", "Lib/site-packages"]);
        std::fs::write(windows.join("Scripts/python.exe"), "MZ").unwrap();
        let found = site_packages(&windows).unwrap();
        assert_eq!(found, vec![canon(windows.join("Lib/site-packages"))]);
    }

    #[test]
    fn pth_lines_are_paths_inside_the_environment_and_imports_are_skipped() {
        let tmp = scratch("pth");
        let venv = tmp.join("venv");
        let site = venv.join("lib/python3.12/site-packages");
        mkdirs(&venv, &["bin", "lib/python3.12/site-packages", "src/pkg"]);
        mkdirs(&tmp, &["outside"]);
        std::fs::write(
            site.join("a.pth"),
            "# comment\nimport os; os.system('touch ran')\n../../../src/pkg\n../../../../outside\n",
        )
        .unwrap();
        let found = site_packages(&venv).unwrap();
        assert_eq!(found, vec![canon(site), canon(venv.join("src/pkg"))]);
    }

    #[test]
    fn a_directory_without_a_layout_is_not_an_environment() {
        let tmp = scratch("none");
        let err = site_packages(&tmp).unwrap_err();
        assert!(matches!(err, Error::NotAnEnvironment(_)), "{err}");
        mkdirs(&tmp, &["bin"]);
        std::fs::write(tmp.join("bin/python3"), "").unwrap();
        let err = site_packages(&tmp).unwrap_err();
        assert!(matches!(err, Error::NoSitePackages(_)), "{err}");
        // A shim: a script where the interpreter would be, and no layout beside it.
        let shims = tmp.join("shims");
        mkdirs(&tmp, &["shims"]);
        std::fs::write(
            shims.join("python3"),
            "#!/usr/bin/env bash\nexec pyenv exec python3\n",
        )
        .unwrap();
        let err = site_packages(&shims.join("python3")).unwrap_err();
        assert!(matches!(err, Error::ScriptInterpreter(_)), "{err}");
    }
}
