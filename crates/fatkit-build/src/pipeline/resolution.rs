//! What a path resolves to, checked after a compile: a header's own stamp says nothing of the
//! way to it. A symbolic link on the way pointed elsewhere during the compile and back, or an
//! include directory renamed away (another put in its place) and back, made the compiler read
//! other bytes than the file whose stamp is unchanged after. Every link on the way (each
//! re-pointing or rename makes a new link or sets its change time) and every directory on
//! the way at or under an include directory (a rename sets the directory's change time, as
//! does an entry added or removed) must show no change since before the compile began.
//! Directories above the include directories are not checked: their entries change as the
//! build runs (its output and cache directories).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

use super::snapshot::{Changed, Stamp};

/// The most links followed on the way to one file, as the kernel's own limit.
const MAX_LINKS: usize = 40;

/// Of the links and directories on the way to each of `named` (absolute paths, as the
/// compiler named the files it read), the one that changed since `start` (less the margin)
/// and settled last, as [`Changed::During`]; `search`: the include directories, canonical.
pub(super) fn check(
    named: &[PathBuf],
    search: &[PathBuf],
    start: SystemTime,
) -> Result<(), Changed> {
    let mut latest: Option<(PathBuf, SystemTime)> = None;
    for path in named {
        for (at, stamp) in changed_on_the_way(path, search, start) {
            let settled = stamp.settled_at();
            if latest.as_ref().is_none_or(|(_, t)| settled > *t) {
                latest = Some((at, settled));
            }
        }
    }
    match latest {
        Some((at, settled)) => Err(Changed::During(at, settled)),
        None => Ok(()),
    }
}

/// The links and checked directories on the way to `path` that changed since `start`.
fn changed_on_the_way(path: &Path, search: &[PathBuf], start: SystemTime) -> Vec<(PathBuf, Stamp)> {
    let mut out = Vec::new();
    let mut pending: VecDeque<OsString> = parts(path);
    let mut cur = PathBuf::from("/");
    let mut links = 0;
    while let Some(part) = pending.pop_front() {
        match part.to_str() {
            Some("/") => cur = PathBuf::from("/"),
            Some(".") => {}
            Some("..") => {
                cur.pop();
            }
            _ => {
                let next = cur.join(&part);
                let Ok(meta) = std::fs::symlink_metadata(&next) else {
                    // Gone: the check of the file itself says so.
                    return out;
                };
                let stamp = Stamp::of(&meta);
                if meta.file_type().is_symlink() {
                    if stamp.changed_since(start) {
                        out.push((next.clone(), stamp));
                    }
                    links += 1;
                    let Ok(target) = std::fs::read_link(&next) else {
                        return out;
                    };
                    if links > MAX_LINKS {
                        return out;
                    }
                    // Resolved from the link's directory (`cur`), or from the root.
                    for p in parts(&target).into_iter().rev() {
                        pending.push_front(p);
                    }
                    continue;
                }
                if meta.is_dir()
                    && search.iter().any(|d| next.starts_with(d))
                    && stamp.changed_since(start)
                {
                    out.push((next.clone(), stamp));
                }
                cur = next;
            }
        }
    }
    out
}

/// `path`'s components as names, the root as `/`.
fn parts(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::RootDir => Some(OsString::from("/")),
            Component::CurDir => Some(OsString::from(".")),
            Component::ParentDir => Some(OsString::from("..")),
            Component::Normal(n) => Some(n.to_owned()),
            Component::Prefix(_) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_link_or_an_include_directory_changed_during_a_compile_is_seen() {
        let dir = std::env::temp_dir().join(format!("fatkit-resolution-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let inc = dir.join("inc");
        std::fs::create_dir_all(&inc).unwrap();
        std::fs::write(inc.join("a.cuh"), "a").unwrap();
        std::os::unix::fs::symlink("a.cuh", inc.join("h.cuh")).unwrap();
        let dir = std::fs::canonicalize(&dir).unwrap();
        let inc = dir.join("inc");
        let search = [inc.clone()];
        let named = [inc.join("h.cuh")];
        // Everything older than the compile: nothing to say.
        let later = SystemTime::now() + Duration::from_secs(5);
        assert_eq!(check(&named, &search, later), Ok(()));
        // The link made during the compile (its change time is after the start).
        let past = SystemTime::now() - Duration::from_secs(5);
        let Err(Changed::During(at, _)) = check(&named, &search, past) else {
            panic!("a new link is not seen");
        };
        // The include directory is the latest change (the link was made in it).
        assert!(at == inc || at == inc.join("h.cuh"), "{at:?}");
        // Outside the include directories, only links count.
        let named = [dir.join("inc/a.cuh")];
        assert_eq!(check(&named, &[], past), Ok(()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
