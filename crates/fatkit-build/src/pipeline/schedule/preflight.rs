//! What would make the whole build fail after compiling, refused before anything compiles:
//! paths nvcc would read changed or its shell would interpret, an unwritable cache or output
//! directory.

use std::path::PathBuf;

use crate::pipeline::{BuildError, Request};

/// What would make the whole build fail after compiling, checked before: a path nvcc would
/// read changed (not UTF-8), an unwritable cache or output directory. One error (exit 2)
/// instead of one failure per job. Returns the output directory's lock.
pub(crate) fn preflight(
    req: &Request,
    root: &std::path::Path,
) -> Result<fatkit_package::out::DirLock, BuildError> {
    // Paths reach nvcc as text: one that is not UTF-8 would reach it changed.
    let base = req.with.launcher.is_some().then_some(&req.ask.root);
    let search: Vec<PathBuf> = req
        .ask
        .sources
        .iter()
        .flat_map(|s| req.ask.header_search(s))
        .collect();
    for path in req
        .ask
        .sources
        .iter()
        .chain(&search)
        .chain(std::iter::once(&req.with.cache.root().to_path_buf()))
        .chain(base)
    {
        if path.to_str().is_none() {
            return Err(crate::refused::Refused::NotUtf8Path(path.clone()).into());
        }
    }
    shell_refusals(req, root)?;
    // What the build writes is checked before anything compiles: an unwritable cache or
    // output directory is one error (exit 2), not one failure per job after the compiles.
    let scratch = req.with.cache.root().join("tmp");
    fatkit_package::out::check_writable(&scratch).map_err(|e| {
        BuildError::from(crate::refused::Refused::CacheUnwritable {
            cache: req.with.cache.root().to_owned(),
            source: e,
        })
    })?;
    fatkit_package::out::no_file_in_the_way(&req.ask.out_dir).map_err(|e| {
        BuildError::from(crate::refused::Refused::NotAnOutDir {
            dir: req.ask.out_dir.clone(),
            source: e,
        })
    })?;
    fatkit_package::out::DirLock::open(&req.ask.out_dir)
        .and_then(|lock| fatkit_package::out::check_writable(&req.ask.out_dir).map(|()| lock))
        .map_err(|e| {
            BuildError::from(crate::refused::Refused::OutDirUnwritable {
                dir: req.ask.out_dir.clone(),
                source: e,
            })
        })
}

/// What nvcc would hand its shell unquoted (it quotes nothing), refused before anything
/// compiles: every source and include directory as nvcc is given it ([`super::nvcc_path`]),
/// every define, the cache (its scratch directories hold nvcc's outputs) and a library's host
/// objects must be [`fatkit_package::flags::path_safe`]. Flags were checked when parsed
/// ([`fatkit_package::flags::Flags::parse`]); `run_nvcc` checks every argument once more.
fn shell_refusals(req: &Request, root: &std::path::Path) -> Result<(), BuildError> {
    use fatkit_package::flags::{define_refusal, path_safe};
    let refuse = |path: &std::path::Path, given: &str, what: &'static str| {
        BuildError::from(crate::refused::Refused::ShellPath {
            shown: fatkit_fatbin::printable(&path.display().to_string()).into_owned(),
            what,
            given: given.to_owned(),
        })
    };
    for source in &req.ask.sources {
        let canonical = std::fs::canonicalize(source).unwrap_or_else(|_| source.clone());
        let given = super::nvcc_path(&canonical, Some(root));
        if !path_safe(&given) {
            return Err(refuse(source, &given, "source"));
        }
    }
    for dir in &req.ask.include_dirs {
        let given = super::nvcc_path(dir, Some(root));
        if !path_safe(&given) {
            return Err(refuse(dir, &given, "include directory"));
        }
    }
    for define in &req.ask.defines {
        if let Some(why) = define_refusal(define) {
            return Err(crate::refused::Refused::ShellDefine {
                shown: fatkit_fatbin::printable(define).into_owned(),
                why,
            }
            .into());
        }
    }
    let cache = req.with.cache.root();
    if !path_safe(&cache.display().to_string()) {
        return Err(crate::refused::Refused::ShellCache {
            shown: fatkit_fatbin::printable(&cache.display().to_string()).into_owned(),
        }
        .into());
    }
    for host in &req.ask.host_objects {
        if !path_safe(&host.object.display().to_string()) {
            return Err(refuse(
                &host.object,
                &host.object.display().to_string(),
                "host object",
            ));
        }
    }
    Ok(())
}
