//! What a module was built from ([`Inputs`], recorded in its manifest) and where a package's
//! inputs are read ([`Stamp`]): the records the build writes and the build-script check
//! (`prebuilt`) compares, in a leaf module both read.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::out::sha256_hex;

/// What a module was built from, recorded in its manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inputs {
    /// sha256 of the package's `[package.metadata.fatkit]` table as canonical JSON.
    pub config_sha256: String,
    /// The profile's targets, as `build-kernels` resolved them.
    pub targets: String,
    /// The source and every local header it includes, relative to the package.
    pub files: Vec<InputFile>,
    /// The files of the package its compiles looked for and did not find (`__has_include`, an
    /// include-path miss), relative to it: one that appears makes the module stale.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub absent: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    pub path: String,
    pub sha256: String,
}

/// Where a package's inputs are read: what `build-kernels` records for a package's modules.
#[derive(Clone, Debug)]
pub struct Stamp {
    pub package_dir: PathBuf,
    /// The `[package.metadata.fatkit]` table as canonical JSON.
    pub config: String,
    /// The modules go into the package (`vendor`): every input must be a file of the package,
    /// which its `.crate` ships.
    pub vendored: bool,
}

/// `path` relative to `dir`, with `/` separators; `..` steps where it lies outside.
pub(crate) fn relative(path: &Path, dir: &Path) -> String {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
    let mut base = dir.as_path();
    let mut ups = 0;
    loop {
        if let Ok(rest) = path.strip_prefix(base) {
            let rest: Vec<String> = rest
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let mut parts = vec!["..".to_owned(); ups];
            parts.extend(rest);
            return parts.join("/");
        }
        match base.parent() {
            Some(p) => {
                base = p;
                ups += 1;
            }
            None => return path.display().to_string(),
        }
    }
}

impl Inputs {
    /// The inputs of a module: the stamp's table, `targets`, and `files`, the source then the
    /// headers its images were built from, each with the sha256 of the bytes the build read
    /// (never read again here: what is recorded is what was compiled).
    /// `absent`: the paths its compiles looked for and did not find; those in the package are
    /// recorded (a user of the crate can add no file outside it).
    pub fn of(
        stamp: &Stamp,
        targets: &str,
        read: &[(PathBuf, String)],
        absent: &[PathBuf],
    ) -> std::io::Result<Inputs> {
        let mut files = Vec::new();
        for (p, sha256) in read {
            let path = relative(p, &stamp.package_dir);
            if stamp.vendored && (path.starts_with("../") || Path::new(&path).is_absolute()) {
                return Err(std::io::Error::other(format!(
                    "reads {}, outside the package {}: a vendored crate ships only its own files, so its users could not check it; move the header into the package",
                    p.display(),
                    stamp.package_dir.display()
                )));
            }
            files.push(InputFile {
                path,
                sha256: sha256.clone(),
            });
        }
        let mut absent: Vec<String> = absent
            .iter()
            .map(|p| relative(p, &stamp.package_dir))
            .filter(|p| !p.starts_with("../") && !Path::new(p).is_absolute())
            .collect();
        absent.sort();
        absent.dedup();
        Ok(Inputs {
            config_sha256: sha256_hex(stamp.config.as_bytes()),
            targets: targets.to_owned(),
            files,
            absent,
        })
    }

    /// What differs between these recorded inputs and the package as it is now, in words;
    /// empty when nothing does.
    pub(crate) fn changes(
        &self,
        package_dir: &Path,
        config: &str,
        targets: Option<&str>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        if self.config_sha256 != sha256_hex(config.as_bytes()) {
            out.push("[package.metadata.fatkit] changed".to_owned());
        }
        match targets {
            Some(targets) if self.targets != targets => out.push(format!(
                "the profile's targets are now {targets} (built for {})",
                self.targets
            )),
            _ => {}
        }
        for f in &self.files {
            match crate::out::sha256_file(&package_dir.join(&f.path)) {
                Ok(hash) if hash == f.sha256 => {}
                Ok(_) => out.push(format!("{} changed", f.path)),
                Err(_) => out.push(format!("{} is gone", f.path)),
            }
        }
        for a in &self.absent {
            if std::fs::symlink_metadata(package_dir.join(a)).is_ok() {
                out.push(format!(
                    "{a} appeared (the build looked for it and found nothing)"
                ));
            }
        }
        out
    }
}
