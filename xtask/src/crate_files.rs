//! The files a public crate's build script compiles, as its globs name them: `kernels/*/*.cu`
//! less the file names it excludes.

use std::path::{Path, PathBuf};

use fatkit_cli::Result;

/// The files `patterns` name under `root` (a `*` for a directory, a `*` in the file name),
/// less those whose name matches an `exclude` glob, sorted.
pub(crate) fn expand(root: &Path, patterns: &[&str], exclude: &[&str]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in patterns {
        let (dirs, name) = match p.rsplit_once('/') {
            Some((dir, name)) => (dirs_of(root, dir)?, name),
            None => (vec![root.to_owned()], *p),
        };
        for dir in dirs {
            let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)?
                .flatten()
                .map(|e| e.path())
                .filter(|f| f.is_file())
                .filter(|f| {
                    let n = f.file_name().map(|n| n.to_string_lossy().into_owned());
                    n.is_some_and(|n| {
                        fatkit_package::kernel_sets::glob_match(name, &n)
                            && !exclude
                                .iter()
                                .any(|x| fatkit_package::kernel_sets::glob_match(x, &n))
                    })
                })
                .collect();
            found.sort();
            out.extend(found);
        }
    }
    Ok(out)
}

/// The directories `dir` names under `root`: itself, or with a `*` part, every directory there.
fn dirs_of(root: &Path, dir: &str) -> Result<Vec<PathBuf>> {
    let mut dirs = vec![root.to_owned()];
    for part in dir.split('/') {
        let mut next = Vec::new();
        for d in dirs {
            if part == "*" {
                let mut found: Vec<PathBuf> = std::fs::read_dir(&d)?
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_dir())
                    .collect();
                found.sort();
                next.extend(found);
            } else {
                next.push(d.join(part));
            }
        }
        dirs = next;
    }
    Ok(dirs)
}
