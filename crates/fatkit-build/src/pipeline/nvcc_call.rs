//! One nvcc call, as every kind of call runs it ([`run_nvcc`]: the time limit, the failure),
//! the names it gives the source ([`source_name_args`]), and what it leaves behind for the
//! cache ([`store`]: the headers its preprocessed sources name, and whether a new header could
//! shadow one of them).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::failure::Failure;
use super::plan::{Job, Module};
use super::Request;
use crate::cache::{Cache, SourceEntry};
use crate::command;

/// `file(line): error: ...` -> `file:line`.
pub(super) fn first_error_location(output: &str) -> Option<String> {
    output.lines().find_map(|line| {
        let (head, _) = line.split_once("): ")?;
        let (file, line_no) = head.rsplit_once('(')?;
        line_no.parse::<u32>().ok()?;
        line.contains("error").then(|| format!("{file}:{line_no}"))
    })
}

/// What makes a [`Failure`] of a call: where the compiler's first error is (if it says), its
/// output or what went wrong, and the status.
pub(super) type MakeFailure<'a> = dyn Fn(Option<String>, String, String) -> Box<Failure> + 'a;

/// Runs the nvcc call `cmd`, which keeps its files in `tmp` (made here), within the time limit
/// of one compile: its output and how long it took; or, with `tmp` removed, the failure `fail`
/// makes of a call that could not start, timed out or failed (where its first error is, files
/// named relative to `base`, where the call ran, made whole).
pub(super) fn run_nvcc(
    req: &Request,
    cmd: &mut std::process::Command,
    tmp: &Path,
    base: Option<&Path>,
    fail: &MakeFailure<'_>,
) -> Result<(String, Duration), Box<Failure>> {
    if let Err(e) = std::fs::create_dir_all(tmp) {
        return Err(fail(
            None,
            format!("{}: {e}", tmp.display()),
            "could not start".to_owned(),
        ));
    }
    let failed = |f: Box<Failure>| {
        let _ = std::fs::remove_dir_all(tmp);
        Err(f)
    };
    let start = Instant::now();
    let res = command::output_within(cmd, req.job_timeout);
    let took = start.elapsed();
    let output = match res {
        Ok((_, true)) => {
            return failed(fail(
                None,
                format!(
                    "stopped after {} s, the limit of one compile; raise it with FATKIT_JOB_TIMEOUT=<seconds> if the compile is genuinely that slow, or look for an include of a pipe or device",
                    req.job_timeout.as_secs()
                ),
                "timed out".to_owned(),
            ))
        }
        Ok((o, false)) => o,
        Err(e) => return failed(fail(None, e.to_string(), "could not start".to_owned())),
    };
    let text = command::text_of(&output);
    if !output.status.success() {
        // A launcher's messages name files relative to where the job ran.
        let location = first_error_location(&text).map(|l| match base {
            Some(b) if !Path::new(&l).is_absolute() => b.join(l).display().to_string(),
            _ => l,
        });
        return failed(fail(
            location,
            text.trim_end().to_owned(),
            output.status.to_string(),
        ));
    }
    Ok((text, took))
}

/// Stores the `images` of `jobs` in the cache, with the headers the call read: those named
/// by the device-side preprocessed sources nvcc kept in `tmp` (under `toolkit_root`, the
/// toolkit's own). A cache that cannot be written only costs a recompile next time.
pub(super) fn store(
    req: &Request,
    m: &Module,
    (jobs, images): (&[&Job], &[Vec<u8>]),
    (tmp, toolkit_root): (&Path, &Path),
    base: Option<&Path>,
    took: Duration,
) {
    let (deps, headers) = preprocessed_deps(tmp, &m.path, toolkit_root, base);
    // The same for every job of the call: they read the same headers.
    let absent = crate::cache::shadowing(&headers, &search_dirs(req, &m.path));
    for (j, image) in jobs.iter().zip(images) {
        if let Some(key) = Cache::object_key(&j.source_key, &deps) {
            let _ = req.cache.put_object(&key, image);
            let entry = SourceEntry {
                deps: deps.clone(),
                seconds: took.as_secs_f64() / jobs.len() as f64,
                absent: absent.clone(),
            };
            let _ = req.cache.put_source_entry(&j.source_key, &entry);
        }
    }
}

/// nvcc names internal-linkage symbols (`_INTERNAL_5615eb9e_...`, anything using libcu++)
/// after a hash of the source's absolute path, which cicc gets as `--orig_src_path_name`: given
/// the path relative to the project root instead, the same sources make the same bytes in
/// every checkout (docs/BUILDS.md). A name a `-Xcicc` list cannot carry (a comma) is left.
pub(crate) fn source_name_args(source: &Path) -> Vec<String> {
    let name = source.display().to_string();
    if source.is_absolute() || name.contains([',', ' ', '"', '\'']) {
        return Vec::new();
    }
    vec!["-Xcicc".to_owned(), format!("--orig_src_path_name={name}")]
}

/// Whether a header belongs to the toolchain or the system (covered by the toolchain's
/// identity and the host compiler's version in every key) rather than to the project.
pub(super) fn is_toolchain_header(path: &Path, toolkit_root: &Path) -> bool {
    path.starts_with(toolkit_root)
        || path.starts_with("/usr/include")
        || path.starts_with("/usr/lib")
}

/// Where a new header could appear and shadow one a compile read: the source's directory,
/// then the include directories, in the order the compiler searches them (canonical, as the
/// headers are).
fn search_dirs(req: &Request, source: &Path) -> Vec<PathBuf> {
    req.header_search(source)
        .into_iter()
        .map(|d| std::fs::canonicalize(&d).unwrap_or(d))
        .collect()
}

/// The headers a compile read: the files named by the line markers (`# 12 "/path/h.cuh" 1`)
/// of the preprocessed sources nvcc kept in `dir`, less the source itself and anything not a
/// regular file; relative names are taken relative to `base`. Returned twice: without the
/// toolchain's and system's headers (the cache's dependencies), and all of them (for the
/// include-path misses).
fn preprocessed_deps(
    dir: &Path,
    source: &Path,
    toolkit_root: &Path,
    base: Option<&Path>,
) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut names = std::collections::BTreeSet::new();
    let Ok(read) = std::fs::read_dir(dir) else {
        return (Vec::new(), Vec::new());
    };
    for entry in read.flatten() {
        let path = entry.path();
        if !path.to_string_lossy().ends_with(".cpp1.ii") {
            continue;
        }
        let Ok(text) = std::fs::read(&path) else {
            continue;
        };
        names.extend(line_marker_files(&text));
    }
    // Each header canonical, and whether it is the toolkit's (as named, or once resolved).
    let headers: std::collections::BTreeMap<PathBuf, bool> = names
        .into_iter()
        // Names relative to where the job ran (a launcher's jobs run in the project root).
        .filter_map(|p| match base {
            Some(b) if p.is_relative() => Some(b.join(p)),
            _ => Some(p).filter(|p| p.is_absolute()),
        })
        .map(|p| {
            let named_in_toolkit = is_toolchain_header(&p, toolkit_root);
            let p = std::fs::canonicalize(&p).unwrap_or(p);
            let in_toolkit = named_in_toolkit || is_toolchain_header(&p, toolkit_root);
            (p, in_toolkit)
        })
        // Files only: a source may include `/dev/stdin` or a FIFO, never to be hashed.
        .filter(|(p, _)| p != source && p.is_file())
        .collect();
    let deps = headers
        .iter()
        .filter(|(_, &in_toolkit)| !in_toolkit)
        .map(|(p, _)| p.clone())
        .collect();
    (deps, headers.into_keys().collect())
}

/// The file names of a preprocessed source's line markers.
fn line_marker_files(text: &[u8]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let Some(rest) = line.strip_prefix(b"# ") else {
            continue;
        };
        let Some(open) = rest.iter().position(|&b| b == b'"') else {
            continue;
        };
        let name = rest.get(open + 1..).unwrap_or_default();
        let Some(close) = name.iter().position(|&b| b == b'"') else {
            continue;
        };
        let name = String::from_utf8_lossy(name.get(..close).unwrap_or_default()).into_owned();
        if !name.starts_with('<') && out.last().is_none_or(|l: &PathBuf| *l != Path::new(&name)) {
            out.push(PathBuf::from(name));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_locations() {
        let out = "/src/bad.cu(12): error: expected an expression\n  int x = ;\n";
        assert_eq!(first_error_location(out).as_deref(), Some("/src/bad.cu:12"));
        assert_eq!(
            first_error_location("/src/ok.cu(3): warning: unused\n"),
            None
        );
        assert_eq!(
            first_error_location("nvcc fatal   : Unknown option '-x'"),
            None
        );
    }

    #[test]
    fn line_markers() {
        let ii = b"# 1 \"/s/a.cu\"\n# 1 \"<built-in>\" 1\nint x;\n# 1 \"/cuda/include/cuda_runtime.h\" 1 3\n# 7 \"/s/include/r.cuh\" 1\n#pragma once\n";
        let files: Vec<String> = line_marker_files(ii)
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            files,
            [
                "/s/a.cu",
                "/cuda/include/cuda_runtime.h",
                "/s/include/r.cuh"
            ]
        );
        assert!(is_toolchain_header(
            Path::new("/cuda/bin/../include/x.h"),
            Path::new("/cuda")
        ));
        assert!(is_toolchain_header(
            Path::new("/usr/include/c++/12/cmath"),
            Path::new("/cuda")
        ));
        assert!(!is_toolchain_header(
            Path::new("/s/include/r.cuh"),
            Path::new("/cuda")
        ));
    }
}
