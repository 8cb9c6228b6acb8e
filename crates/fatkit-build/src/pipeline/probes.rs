//! Negative dependencies: the files a compile looked for and did not find. An entry of the
//! cache stands for a compile only while what the preprocessor looked at is as it was, and a
//! name it searched for in vain is part of that: `#if __has_include("extra.cuh")` takes the
//! other branch once `extra.cuh` appears, and a header found in a later include directory is
//! shadowed once one of the same name appears in an earlier one. Each such path is recorded
//! in the entry (`SourceEntry::absent`); when one exists, the entry is stale.
//!
//! The names come from the include scan of every file the compile read (the compiler says
//! which: nvcc's line markers, NVRTC's copies): each `#include`, each `__has_include` and
//! `__has_include_next` with a literal name (directly or through an alias macro called with
//! one), each string of a `#define`. Every place the preprocessor may look for each name (the
//! including file's directory for a quoted name, then every include directory, all of them:
//! `#include_next` goes on past the first) that holds nothing is recorded. A probe whose name
//! the scan cannot read (`__has_include(MACRO)`) is refused before compiling
//! (`schedule::read_headers`) and here, for files only the compiler found.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::snapshot::Changed;

/// The paths a compile that read `files` (its source and project headers) may have looked for
/// and not found, searching `search` (canonical, in order), with the include-path misses of
/// `headers` (`cache::shadowing`); or the first file holding a probe the scan cannot read.
pub(super) fn absent(
    files: &[PathBuf],
    headers: &[PathBuf],
    search: &[PathBuf],
) -> Result<Vec<PathBuf>, Changed> {
    let mut out: BTreeSet<PathBuf> = crate::cache::shadowing(headers, search)
        .into_iter()
        .collect();
    let mut looked: BTreeSet<PathBuf> = BTreeSet::new();
    for file in files {
        let Ok(names) = fatkit_toolchain::scan::names_of(file) else {
            // Not readable now: the compile's check of its inputs says so.
            continue;
        };
        if let Some(line) = names.opaque_probe {
            return Err(Changed::OpaqueProbe(file.clone(), line));
        }
        for (name, quoted) in names.names {
            for candidate in candidates(file, &name, quoted, search) {
                if looked.insert(candidate.clone()) && !exists(&candidate) {
                    out.insert(candidate);
                }
            }
        }
    }
    Ok(out.into_iter().collect())
}

/// Whether anything is at `path` (a dangling link counts: it may be pointed at a file).
fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// Every place the preprocessor may look for `name` included from `file`.
fn candidates(file: &Path, name: &str, quoted: bool, search: &[PathBuf]) -> Vec<PathBuf> {
    let name = Path::new(name);
    if name.is_absolute() {
        return vec![name.to_owned()];
    }
    let here = file.parent().filter(|_| quoted);
    here.into_iter()
        .chain(search.iter().map(PathBuf::as_path))
        .map(|d| d.join(name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_searched_for_and_not_found_is_recorded() {
        let dir = std::env::temp_dir().join(format!("fatkit-probes-{}", std::process::id()));
        let inc = dir.join("inc");
        std::fs::create_dir_all(&inc).unwrap();
        let source = dir.join("k.cu");
        std::fs::write(
            &source,
            "#if __has_include(\"extra.cuh\") && HAS(<alias.h>)\n#endif\n#include \"here.cuh\"\n",
        )
        .unwrap();
        std::fs::write(dir.join("here.cuh"), "").unwrap();
        let search = [dir.clone(), inc.clone()];
        let absent = absent(std::slice::from_ref(&source), &[], &search).unwrap();
        assert_eq!(
            absent,
            [
                dir.join("alias.h"),
                dir.join("extra.cuh"),
                inc.join("alias.h"),
                inc.join("extra.cuh"),
                inc.join("here.cuh"),
            ]
        );
        std::fs::write(
            &source,
            "#define P(x) __has_include(x)\n#if __has_include(NAME)\n#endif\n",
        )
        .unwrap();
        assert!(matches!(
            super::absent(std::slice::from_ref(&source), &[], &search),
            Err(Changed::OpaqueProbe(..))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
