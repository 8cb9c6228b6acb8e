//! One NVRTC compile, from a snapshot: NVRTC reports no dependencies and reads headers
//! itself, so it is given copies of them, made by fatkit from the bytes the build hashed, and
//! nothing else of the project's (docs/BUILDS.md, "NVRTC's inputs").
//!
//! The copies lie in a mirror of the file system under the job's scratch directory (its stage,
//! made afresh, owner-only, and removed after the job): a header `/p/kernels/inc/a.cuh` at
//! `<stage>/p/kernels/inc/a.cuh`, so that a relative include (`"../x.h"`) resolves in the
//! mirror as it would outside. What is copied is placed by its canonical path (no `..` of the
//! input is ever resolved against the stage), created anew (nothing there is followed or
//! replaced) with a mode no wider than the source's; an include whose `..` climbs past the
//! root, out of the mirror, finds no copy and fails the compile. NVRTC's project include directories are their
//! mirrors; the program's name is its mirrored path, and its first line `#line 1 "<name>"`
//! gives it back its own name (diagnostics, `__FILE__`, internal-linkage symbols are those of an
//! unstaged compile); each copied header likewise starts with `#line 1 "<its real path>"`.
//!
//! What is copied first: the headers the include scan finds (`scan_includes`), and those of
//! the job's last compile. A header NVRTC then cannot open (`cannot open source file "x"`: one
//! included through a macro, say) is found as NVRTC searches (the including file's directory,
//! then the include directories), copied, and the compile runs again. So NVRTC reads only bytes
//! the build hashed, and what it needed is known: the job's dependencies are the copies.
//! After [`MISSES_ONE_AT_A_TIME`] such misses, a miss copies every file of the missed header's
//! directory with its extension, so that headers named through macros cost a few compiles,
//! not one each (the dependencies are then more than NVRTC read: rebuilt too often, never
//! too rarely).
//! A header included by an absolute path is read by NVRTC where it is; it is checked as nvcc's
//! headers are (`Snapshot::verify`).

use crate::pipeline::failure::Status;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use super::failure::{CompileResult, Failure, FailureKind, Output};
use super::nvcc_call::{first_error_location, is_toolchain_header};
use super::schedule::{Job, Module};
use super::snapshot::{with_retry, Attempt, Changed, Snapshot};
use super::Request;
use crate::cache::{Cache, SourceEntry};
use fatkit_toolchain::Nvrtc;

/// How many times a compile may go back for headers before it is a failure.
const MAX_MISSES: usize = fatkit_toolchain::nvrtc::MAX_HEADERS;

/// How many misses are copied one header at a time before a miss copies its directory.
const MISSES_ONE_AT_A_TIME: usize = 8;

/// `file(line): catastrophic error: cannot open source file "name"` -> `(file, name)`.
fn missing_include(log: &str) -> Option<(String, String)> {
    log.lines().find_map(|line| {
        let (head, rest) = line.split_once("): catastrophic error: ")?;
        let (file, _) = head.rsplit_once('(')?;
        let rest = rest
            .strip_prefix("cannot open source file \"")
            .or_else(|| rest.strip_prefix("could not open source file \""))?;
        let name = rest.split('"').next()?;
        Some((file.to_owned(), name.to_owned()))
    })
}

/// `"text"` as a C string literal's contents.
fn c_string(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The mirror a compile reads from: the copies made so far, by the canonical path they stand
/// for.
struct Stage {
    root: PathBuf,
    staged: BTreeSet<PathBuf>,
}

impl Stage {
    /// A fresh, empty mirror at `root` (whatever was there removed; made owner-only).
    fn new(root: PathBuf) -> Result<Stage, Changed> {
        use std::os::unix::fs::DirBuilderExt;
        let _ = std::fs::remove_dir_all(&root);
        let made = match root.parent() {
            Some(parent) => std::fs::create_dir_all(parent),
            None => Ok(()),
        }
        .and_then(|()| std::fs::DirBuilder::new().mode(0o700).create(&root));
        made.map_err(|e| Changed::Unreadable(root.clone(), format!("cannot make the stage: {e}")))?;
        Ok(Stage {
            root,
            staged: BTreeSet::new(),
        })
    }

    /// Where the mirror holds `real`, a canonical path: under the root, by its names only
    /// (`None` for a path with `..` or `.` in it, which would be resolved against the stage).
    fn mirror(&self, real: &Path) -> Option<PathBuf> {
        let mut to = self.root.clone();
        for part in real.strip_prefix("/").ok()?.components() {
            match part {
                std::path::Component::Normal(name) => to.push(name),
                _ => return None,
            }
        }
        Some(to)
    }

    /// Copies `real` (canonicalised first) as the build's snapshot reads it to its place in
    /// the mirror, opened by `#line 1 "<real>"`: a new file, owner-only at most (no wider
    /// than the source's mode), in owner-only directories.
    fn copy(&mut self, snapshot: &Snapshot, real: &Path) -> Result<(), Changed> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        let unstageable = |at: &Path, e: String| Changed::Unreadable(at.to_owned(), e);
        let real = std::fs::canonicalize(real).map_err(|e| unstageable(real, e.to_string()))?;
        if self.staged.contains(&real) {
            return Ok(());
        }
        let to = self
            .mirror(&real)
            .ok_or_else(|| unstageable(&real, "not a canonical path".to_owned()))?;
        let (bytes, _) = snapshot.read(&real)?;
        let mode = std::fs::metadata(&real).map_or(0o600, |m| m.mode() & 0o600);
        let mut text =
            format!("#line 1 \"{}\"\n", c_string(&real.display().to_string())).into_bytes();
        text.extend_from_slice(&bytes);
        let written = to
            .parent()
            .map_or(Ok(()), |d| {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(d)
            })
            .and_then(|()| fatkit_package::out::write_new(&to, &text, mode));
        written.map_err(|e| unstageable(&to, format!("cannot stage it: {e}")))?;
        self.staged.insert(real);
        Ok(())
    }
}

/// Compiles one job with NVRTC, in this process, from copies of its inputs, and stores the
/// image in the cache keyed by what it read.
pub(super) fn compile_nvrtc(
    req: &Request,
    snapshot: &Snapshot,
    m: &Module,
    job: &Job,
    tc: &Nvrtc,
    toolchain: &str,
) -> CompileResult {
    let library = tc.library.clone();
    let command = format!(
        "nvrtcCompileProgram({}) [{}] {}",
        library.display(),
        job.args.join(" "),
        m.path.display()
    );
    let of = |kind| Failure::of_call(&m.path, job.target, kind, toolchain, command.clone());
    let (fail, changed) = (of(FailureKind::Compile), of(FailureKind::InputChanged));
    let nvrtc = fatkit_toolchain::nvrtc::Nvrtc::open(&library)
        .map_err(|e| fail(None, e.to_string(), Status::NvrtcNotLoaded))?;
    let stage_dir = req.with.cache.scratch(&format!(
        "nvrtc-{}",
        job.source_key.get(..16).unwrap_or(&job.source_key)
    ));
    let res = with_retry(
        || {
            snapshot.wait_settled();
            staged_compile(req, snapshot, m, job, (tc, &nvrtc), &stage_dir, &fail)
        },
        &changed,
    );
    let _ = std::fs::remove_dir_all(&stage_dir);
    res
}

/// One attempt of [`compile_nvrtc`] in `stage_dir`.
fn staged_compile(
    req: &Request,
    snapshot: &Snapshot,
    m: &Module,
    job: &Job,
    (tc, nvrtc): (&Nvrtc, &fatkit_toolchain::nvrtc::Nvrtc),
    stage_dir: &Path,
    fail: &dyn Fn(Option<String>, String, Status) -> Box<Failure>,
) -> Result<(Output, std::time::Duration), Attempt> {
    let start = SystemTime::now();
    let _ = std::fs::remove_dir_all(stage_dir);
    let mut stage = Stage::new(stage_dir.join("m")).map_err(Attempt::Changed)?;
    // The project's include directories, as NVRTC is given them.
    let search: Vec<PathBuf> = req
        .ask
        .header_search(&m.path)
        .into_iter()
        .filter_map(|d| std::fs::canonicalize(d).ok())
        .collect();
    let options = mirrored_options(&stage, &job.args, &search).map_err(Attempt::Changed)?;
    let absolute = copy_known(&mut stage, snapshot, (tc, m, job), &search)?;
    // The include directories NVRTC reads where they are (fatkit's standard headers, the
    // toolchain's): no name may climb out of them, or out of the mirror.
    let unmirrored: Vec<PathBuf> = options
        .iter()
        .filter_map(|o| o.strip_prefix("-I"))
        .map(PathBuf::from)
        .filter(|d| !d.starts_with(&stage.root))
        .collect();
    let mut files = vec![m.path.clone()];
    files.extend(stage.staged.iter().cloned());
    if let Some(why) = climbing_include(&files, &search, &unmirrored) {
        return Err(Attempt::Failed(fail(None, why, Status::Refused)));
    }
    let (source, _) = snapshot.read(&m.path).map_err(Attempt::Changed)?;
    let name = m.relative.display().to_string();
    let mut program = format!("#line 1 \"{}\"\n", c_string(&name)).into_bytes();
    program.extend_from_slice(&source);
    let began = Instant::now();
    let compiled = compile_copies(
        (nvrtc, job),
        &mut stage,
        snapshot,
        (&program, &name, m),
        (&options, &search),
        fail,
    )?;
    let took = began.elapsed();
    let deps = read_from(&stage, snapshot, (tc, m), absolute, start)?;
    let hashed: Vec<(PathBuf, blake3::Hash)> = deps
        .iter()
        .map(|d| Ok((d.clone(), snapshot.hash(d)?.blake3)))
        .collect::<Result<_, Changed>>()
        .map_err(Attempt::Changed)?;
    let mut read = vec![m.path.clone()];
    read.extend(deps.iter().cloned());
    let absent = super::probes::absent(&read, &deps, &search).map_err(Attempt::Changed)?;
    let key = Cache::object_key(&job.source_key, &hashed);
    let _ = req.with.cache.put_object(&key, &compiled.image);
    let entry = SourceEntry {
        absent,
        deps: deps.clone(),
        seconds: took.as_secs_f64(),
    };
    let _ = req.with.cache.put_source_entry(&job.source_key, &entry);
    let image = compiled.image;
    Ok((Output { image, deps }, took))
}

/// NVRTC's options with each of the project's include directories (`search`) replaced by its
/// mirror, made.
fn mirrored_options(
    stage: &Stage,
    args: &[String],
    search: &[PathBuf],
) -> Result<Vec<String>, Changed> {
    let mut options = Vec::new();
    for arg in args {
        let dir = arg
            .strip_prefix("-I")
            .and_then(|d| std::fs::canonicalize(d).ok());
        match dir.filter(|d| search.contains(d)) {
            Some(d) => {
                use std::os::unix::fs::DirBuilderExt;
                let mirrored = stage
                    .mirror(&d)
                    .ok_or_else(|| Changed::Unreadable(d.clone(), "not a canonical path".into()))?;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&mirrored)
                    .map_err(|e| Changed::Unreadable(mirrored.clone(), e.to_string()))?;
                options.push(format!("-I{}", mirrored.display()));
            }
            None => options.push(arg.clone()),
        }
    }
    Ok(options)
}

/// Copies the headers the include scan finds and those the job's last compile read; returns
/// those of the scan outside the include directories (an absolute include, read where it is).
fn copy_known(
    stage: &mut Stage,
    snapshot: &Snapshot,
    (tc, m, job): (&Nvrtc, &Module, &Job),
    search: &[PathBuf],
) -> Result<Vec<PathBuf>, Attempt> {
    let mut outside = Vec::new();
    let scanned = fatkit_toolchain::nvrtc::scan_includes(&m.path, search)
        .map_err(|e| Attempt::Changed(Changed::Unreadable(m.path.clone(), e.to_string())))?;
    for header in scanned {
        if is_toolkit(tc, &header) {
            continue;
        }
        stage.copy(snapshot, &header).map_err(Attempt::Changed)?;
        if !search.iter().any(|d| header.starts_with(d)) {
            outside.push(header);
        }
    }
    for header in &job.deps {
        if header.is_file() && !stage.staged.contains(header) {
            stage.copy(snapshot, header).map_err(Attempt::Changed)?;
        }
    }
    Ok(outside)
}

/// Compiles `program` (named `name`, the job's source `m`) from the copies, copying each
/// header NVRTC reports it cannot open, as NVRTC would find it, and compiling again.
fn compile_copies(
    (nvrtc, job): (&fatkit_toolchain::nvrtc::Nvrtc, &Job),
    stage: &mut Stage,
    snapshot: &Snapshot,
    (program, name, m): (&[u8], &str, &Module),
    (options, search): (&[String], &[PathBuf]),
    fail: &dyn Fn(Option<String>, String, Status) -> Box<Failure>,
) -> Result<fatkit_toolchain::nvrtc::Compiled, Attempt> {
    let program_path = stage
        .mirror(&m.path)
        .ok_or_else(|| {
            Attempt::Changed(Changed::Unreadable(
                m.path.clone(),
                "not a canonical path".into(),
            ))
        })?
        .display()
        .to_string();
    for misses in 0..MAX_MISSES {
        let res = nvrtc
            .compile(&program_path, program, options, job.target.kind)
            .map_err(|e| fail(None, e.to_string(), Status::NvrtcCallFailed))?;
        let failure = match res {
            Ok(compiled) => return Ok(compiled),
            Err(f) => f,
        };
        // Paths in the mirror are shown as the files they stand for.
        let log = failure
            .log
            .replace(&format!("{}/", stage.root.display()), "/");
        let found = missing_include(&log).and_then(|(file, wanted)| {
            let includer = if file == name {
                m.path.clone()
            } else {
                PathBuf::from(&file)
            };
            found_as_nvrtc_would(&includer, &wanted, search, &stage.staged)
        });
        match found {
            Some(header) => {
                stage.copy(snapshot, &header).map_err(Attempt::Changed)?;
                if misses >= MISSES_ONE_AT_A_TIME {
                    copy_siblings(stage, snapshot, &header)?;
                }
            }
            None => {
                return Err(Attempt::Failed(fail(
                    first_error_location(&log),
                    log,
                    Status::Nvrtc(failure.status),
                )))
            }
        }
    }
    Err(Attempt::Failed(fail(
        None,
        format!("NVRTC asked for more than {MAX_MISSES} headers the include scan did not find, the most a build goes back for; include fewer headers (one generated header can hold many definitions)"),
        Status::TooManyHeaders,
    )))
}

/// The first literal include name of `files` (the source and the staged headers) that would
/// make NVRTC read a file fatkit did not copy: a name whose `..` climbs past the root of the
/// file system from a directory NVRTC resolves it in (the mirror is deeper than the real
/// tree, so the climb would land elsewhere in each), or that reaches, from one of the
/// `unmirrored` include directories, a file outside it. The words of the failure.
fn climbing_include(
    files: &[PathBuf],
    search: &[PathBuf],
    unmirrored: &[PathBuf],
) -> Option<String> {
    for file in files {
        let Ok(names) = fatkit_toolchain::scan::names_of(file) else {
            continue;
        };
        for (name, quoted) in names.names {
            let wanted = Path::new(&name);
            if wanted.is_absolute()
                || !wanted
                    .components()
                    .any(|c| c == std::path::Component::ParentDir)
            {
                continue;
            }
            let here = file.parent().filter(|_| quoted);
            let climbs = here
                .into_iter()
                .chain(search.iter().map(PathBuf::as_path))
                .any(|d| climbs_past_root(d, wanted));
            let leaves = unmirrored.iter().find(|d| {
                let dir = std::fs::canonicalize(d).unwrap_or_else(|_| d.to_path_buf());
                std::fs::canonicalize(d.join(wanted)).is_ok_and(|p| !p.starts_with(&dir))
            });
            if climbs || leaves.is_some() {
                return Some(format!(
                    "{} includes \"{name}\", whose `..` climbs out of {}: NVRTC compiles from copies of the hashed files and would read it from wherever the climb lands, unhashed; fatkit did not run it; name the header by a path that stays in its directories (without the extra `..`, or absolute)",
                    file.display(),
                    match leaves {
                        Some(d) => d.display().to_string(),
                        None => "the root of the file system".to_owned(),
                    }
                ));
            }
        }
    }
    None
}

/// Whether `name`'s `..` steps, taken from `dir` (absolute), go above the root.
fn climbs_past_root(dir: &Path, name: &Path) -> bool {
    let mut depth = dir
        .components()
        .filter(|c| matches!(c, std::path::Component::Normal(_)))
        .count();
    for c in name.components() {
        match c {
            std::path::Component::ParentDir if depth == 0 => return true,
            std::path::Component::ParentDir => depth -= 1,
            std::path::Component::Normal(_) => depth += 1,
            _ => {}
        }
    }
    false
}

/// Copies every regular file of `header`'s directory with its extension (a header NVRTC will
/// likely ask for next, named through the same macro), up to [`fatkit_toolchain::nvrtc::MAX_HEADERS`]
/// copies in all.
fn copy_siblings(stage: &mut Stage, snapshot: &Snapshot, header: &Path) -> Result<(), Attempt> {
    let (Some(dir), Some(ext)) = (header.parent(), header.extension()) else {
        return Ok(());
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let regular = entry.file_type().is_ok_and(|t| t.is_file());
        if !regular || path.extension() != Some(ext) || stage.staged.contains(&path) {
            continue;
        }
        if stage.staged.len() >= fatkit_toolchain::nvrtc::MAX_HEADERS {
            break;
        }
        stage.copy(snapshot, &path).map_err(Attempt::Changed)?;
    }
    Ok(())
}

/// The headers a compile started at `start` read: the copies (outside the toolchain's), and
/// `outside` (absolute includes NVRTC read where they are), checked unchanged since hashed.
fn read_from(
    stage: &Stage,
    snapshot: &Snapshot,
    (tc, m): (&Nvrtc, &Module),
    outside: Vec<PathBuf>,
    start: SystemTime,
) -> Result<Vec<PathBuf>, Attempt> {
    let mut read = vec![m.path.clone()];
    read.extend(outside.iter().cloned());
    snapshot.verify(&read, start).map_err(Attempt::Changed)?;
    let mut deps: Vec<PathBuf> = stage
        .staged
        .iter()
        .filter(|p| **p != m.path && !is_toolkit(tc, p))
        .cloned()
        .chain(outside)
        .collect();
    deps.sort();
    deps.dedup();
    Ok(deps)
}

/// Whether `path` is one of the NVRTC toolchain's own headers (covered by its identity).
fn is_toolkit(tc: &Nvrtc, path: &Path) -> bool {
    tc.include_dirs.iter().any(|d| path.starts_with(d)) || is_toolchain_header(path, &tc.root)
}

/// The file NVRTC would open for `#include "wanted"` in `includer` (a real path), searching as
/// it does: the including file's directory, then the include directories in order; the first
/// that exists and is not staged yet, canonical (one staged already is one NVRTC did not look at: an
/// angle-bracket include skips the including file's directory). `None` when there is none.
fn found_as_nvrtc_would(
    includer: &Path,
    wanted: &str,
    search: &[PathBuf],
    staged: &BTreeSet<PathBuf>,
) -> Option<PathBuf> {
    let wanted = Path::new(wanted);
    let mut candidates: Vec<PathBuf> = Vec::new();
    if wanted.is_absolute() {
        candidates.push(wanted.to_owned());
    } else {
        candidates.extend(includer.parent().map(|d| d.join(wanted)));
        candidates.extend(search.iter().map(|d| d.join(wanted)));
    }
    candidates
        .into_iter()
        .filter_map(|c| std::fs::canonicalize(c).ok())
        .find(|c| !staged.contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvrtcs_missing_include_is_read_from_its_log() {
        let log = "nvrtc: warning: x\n/p/inc/a.cuh(3): catastrophic error: cannot open source file \"b.cuh\"\n  #include B\n\n1 catastrophic error detected";
        assert_eq!(
            missing_include(log),
            Some(("/p/inc/a.cuh".to_owned(), "b.cuh".to_owned()))
        );
        let log = "cuda-src/k.cu(1): catastrophic error: could not open source file \"x.h\" (no directories in search list)";
        assert_eq!(
            missing_include(log),
            Some(("cuda-src/k.cu".to_owned(), "x.h".to_owned()))
        );
        assert_eq!(
            missing_include("k.cu(1): error: identifier \"x\" is undefined"),
            None
        );
        assert_eq!(c_string("a\"b\\c"), "a\\\"b\\\\c");
    }

    #[test]
    fn a_copy_lies_in_the_stage_by_its_canonical_path_no_wider_than_its_source() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("fatkit-stage-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("src")).unwrap();
        let dir = std::fs::canonicalize(&dir).unwrap();
        let key = dir.join("key");
        std::fs::write(&key, "secret\n").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let open = dir.join("open.h");
        std::fs::write(&open, "\n").unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
        let snapshot = Snapshot::default();
        let mut stage = Stage::new(dir.join("stage/m")).unwrap();
        // Named with `..` that climb further than the stage is deep: placed by the real path.
        let climbing = PathBuf::from(format!(
            "{}/src/{}{}",
            dir.display(),
            "../".repeat(40),
            key.strip_prefix("/").unwrap().display()
        ));
        stage.copy(&snapshot, &climbing).unwrap();
        stage.copy(&snapshot, &open).unwrap();
        let copy = stage.mirror(&key).unwrap();
        assert!(copy.starts_with(dir.join("stage/m")), "{copy:?}");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&copy), 0o600);
        assert_eq!(mode(&stage.mirror(&open).unwrap()), 0o600);
        assert_eq!(mode(&dir.join("stage/m")), 0o700);
        assert_eq!(stage.mirror(Path::new("/a/../b")), None);
        assert_eq!(std::fs::read_to_string(&key).unwrap(), "secret\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
