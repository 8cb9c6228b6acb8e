//! One NVRTC compile, from a snapshot: NVRTC reports no dependencies and reads headers
//! itself, so it is given copies of them, made by fatkit from the bytes the build hashed, and
//! nothing else of the project's (docs/BUILDS.md, "NVRTC's inputs").
//!
//! The copies lie in a mirror of the file system under the job's scratch directory: a header
//! `/p/kernels/inc/a.cuh` at `<stage>/p/kernels/inc/a.cuh`, so that a relative include (`"../x.h"`)
//! resolves in the mirror as it would outside. NVRTC's project include directories are their
//! mirrors; the program's name is its mirrored path, and its first line `#line 1 "<name>"`
//! gives it back its own name (diagnostics, `__FILE__`, internal-linkage symbols are those of an
//! unstaged compile); each copied header likewise starts with `#line 1 "<its real path>"`.
//!
//! What is copied first: the headers the include scan finds (`scan_includes`), and those of
//! the job's last compile. A header NVRTC then cannot open (`cannot open source file "x"`: one
//! included through a macro, say) is found as NVRTC searches (the including file's directory,
//! then the include directories), copied, and the compile runs again. So NVRTC reads only bytes
//! the build hashed, and what it needed is known: the job's dependencies are the copies.
//! A header included by an absolute path is read by NVRTC where it is; it is checked as nvcc's
//! headers are (`Snapshot::verify`).

use crate::pipeline::failure::Status;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use super::failure::{CompileResult, Failure, FailureKind, Output};
use super::nvcc_call::{first_error_location, is_toolchain_header};
use super::plan::{relative, Job, Module};
use super::snapshot::{with_retry, Attempt, Changed, Snapshot};
use super::Request;
use crate::cache::{Cache, SourceEntry};
use crate::toolchain::Nvrtc;

/// How many headers a compile may go back for, one at a time, before it is a failure.
const MAX_MISSES: usize = crate::nvrtc::MAX_HEADERS;

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

/// The mirror a compile reads from: the copies made so far, by the path they stand for.
struct Stage {
    root: PathBuf,
    staged: BTreeSet<PathBuf>,
}

impl Stage {
    fn mirror(&self, real: &Path) -> PathBuf {
        self.root.join(real.strip_prefix("/").unwrap_or(real))
    }

    /// Copies `real` as the build's snapshot reads it to its place in the mirror, opened by
    /// `#line 1 "<real>"`.
    fn copy(&mut self, snapshot: &Snapshot, real: &Path) -> Result<(), Changed> {
        let (bytes, _) = snapshot.read(real)?;
        let to = self.mirror(real);
        let mut text =
            format!("#line 1 \"{}\"\n", c_string(&real.display().to_string())).into_bytes();
        text.extend_from_slice(&bytes);
        let written = to
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&to, &text));
        written.map_err(|e| Changed::Unreadable(to.clone(), format!("cannot stage it: {e}")))?;
        self.staged.insert(real.to_owned());
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
    let nvrtc = crate::nvrtc::Nvrtc::open(&library)
        .map_err(|e| fail(None, e.to_string(), Status::NvrtcNotLoaded))?;
    let stage_dir = req.cache.root().join("tmp").join(format!(
        "{}-nvrtc-{}",
        std::process::id(),
        job.source_key.get(..16).unwrap_or(&job.source_key)
    ));
    let res = with_retry(
        || {
            snapshot.wait_settled();
            let _ = std::fs::remove_dir_all(&stage_dir);
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
    (tc, nvrtc): (&Nvrtc, &crate::nvrtc::Nvrtc),
    stage_dir: &Path,
    fail: &dyn Fn(Option<String>, String, Status) -> Box<Failure>,
) -> Result<(Output, std::time::Duration), Attempt> {
    let start = SystemTime::now();
    let mut stage = Stage {
        root: stage_dir.join("m"),
        staged: BTreeSet::new(),
    };
    // The project's include directories, as NVRTC is given them.
    let search: Vec<PathBuf> = req
        .header_search(&m.path)
        .into_iter()
        .filter_map(|d| std::fs::canonicalize(d).ok())
        .collect();
    let options = mirrored_options(&stage, &job.args, &search).map_err(Attempt::Changed)?;
    let absolute = copy_known(&mut stage, snapshot, (tc, m, job), &search)?;
    let (source, _) = snapshot.read(&m.path).map_err(Attempt::Changed)?;
    let root = std::fs::canonicalize(&req.root).unwrap_or_else(|_| req.root.clone());
    let name = relative(&m.path, Some(&root)).display().to_string();
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
    let key = Cache::object_key(&job.source_key, &hashed);
    let _ = req.cache.put_object(&key, &compiled.image);
    let mut read = vec![m.path.clone()];
    read.extend(deps.iter().cloned());
    let entry = SourceEntry {
        absent: super::probes::absent(&read, &deps, &search).map_err(Attempt::Changed)?,
        deps: deps.clone(),
        seconds: took.as_secs_f64(),
    };
    let _ = req.cache.put_source_entry(&job.source_key, &entry);
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
                let mirrored = stage.mirror(&d);
                std::fs::create_dir_all(&mirrored)
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
    let scanned = crate::nvrtc::scan_includes(&m.path, search)
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
    (nvrtc, job): (&crate::nvrtc::Nvrtc, &Job),
    stage: &mut Stage,
    snapshot: &Snapshot,
    (program, name, m): (&[u8], &str, &Module),
    (options, search): (&[String], &[PathBuf]),
    fail: &dyn Fn(Option<String>, String, Status) -> Box<Failure>,
) -> Result<crate::nvrtc::Compiled, Attempt> {
    let program_path = stage.mirror(&m.path).display().to_string();
    for _ in 0..MAX_MISSES {
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
            Some(header) => stage.copy(snapshot, &header).map_err(Attempt::Changed)?,
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
/// that exists and is not staged yet (one staged already is one NVRTC did not look at: an
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
        .find(|c| c.exists() && !staged.contains(c))
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
}
