//! One nvcc call, as every kind of call runs it ([`run_nvcc`]: the time limit, the failure),
//! the names it gives the source ([`source_name_args`]), and what it leaves behind for the
//! cache ([`store`]: the headers its preprocessed sources name, and whether a new header could
//! shadow one of them).

use crate::pipeline::failure::Status;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use fatkit_arch::toolkit::CudaVersion;
use fatkit_arch::{ImageKind, Target};

use super::failure::{CallResult, Failure, FailureKind};
use super::schedule::{Job, Module};
use super::snapshot::{with_retry, Attempt, Changed, Snapshot};
use super::Request;
use crate::cache::{Cache, SourceEntry};
use fatkit_toolchain::command;
use fatkit_toolchain::launcher;
use fatkit_toolchain::{Nvcc, Probe};

/// `file:line` of the compiler's first error, in any compiler's shape
/// ([`super::diagnostic::first`]).
pub(super) fn first_error_location(output: &str) -> Option<String> {
    super::diagnostic::first(output).location()
}

/// What makes a [`Failure`] of a call: where the compiler's first error is (if it says), its
/// output or what went wrong, and the status.
pub(super) type MakeFailure<'a> = dyn Fn(Option<String>, String, Status) -> Box<Failure> + 'a;

/// Runs the nvcc call `cmd`, which keeps its files in `tmp` (made here), within the time limit
/// of one compile: its output and how long it took; or, with `tmp` removed, the failure `fail`
/// makes of a call that could not start, timed out or failed (where its first error is, files
/// named relative to `base`, where the call ran, made whole).
/// Whether `arg` is an nvcc `__CUDA_ARCH_LIST__` define as the schedule writes it
/// (`schedule::arch_list_args`): digits and escaped commas, which nvcc reads itself (they
/// never reach its shell).
fn is_arch_list_arg(arg: &str) -> bool {
    arg.strip_prefix("-D__CUDA_ARCH_LIST__=")
        .is_some_and(|list| {
            list.split("\\,")
                .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
}

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
            Status::CouldNotStart,
        ));
    }
    let failed = |f: Box<Failure>| {
        let _ = std::fs::remove_dir_all(tmp);
        Err(f)
    };
    // The last gate: nvcc hands its arguments to `sh -c` unquoted, so one its shell would
    // read never reaches it, whatever let it through before (preflight refuses them all).
    // fatkit's own `__CUDA_ARCH_LIST__` escapes its commas for nvcc, which unescapes them.
    if let Some(arg) = cmd
        .get_args()
        .map(|a| a.to_string_lossy())
        .find(|a| !fatkit_package::flags::shell_safe(a) && !is_arch_list_arg(a))
    {
        return failed(fail(
            None,
            format!(
                "argument {arg:?} holds characters nvcc's shell would interpret (nvcc quotes nothing), so fatkit did not run it; use paths and values of {}",
                fatkit_package::flags::SAFE_CHARACTERS
            ),
            Status::Refused,
        ));
    }
    let start = Instant::now();
    let res = command::output_within(cmd, req.with.job_timeout);
    let took = start.elapsed();
    let output = match res {
        Ok((_, true)) => {
            return failed(fail(
                None,
                format!(
                    "stopped after {} s, the limit of one compile; raise it with FATKIT_JOB_TIMEOUT=<seconds> if the compile is genuinely that slow, or look for an include of a pipe or device",
                    req.with.job_timeout.as_secs()
                ),
                Status::TimedOut,
            ))
        }
        Ok((o, false)) => o,
        Err(e) => return failed(fail(None, e.to_string(), Status::CouldNotStart)),
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
            Status::Exited(output.status),
        ));
    }
    Ok((text, took))
}

/// Stores the `images` of `jobs` in the cache, with the headers the call read: those named
/// by the device-side preprocessed sources nvcc kept in `tmp` (under `toolkit_root`, the
/// toolkit's own), keyed by the bytes the build's snapshot holds of them, when the source and
/// each header are as the build read them and none changed during the call (started at
/// `start`, `Snapshot::verify`); else nothing is stored and the images are not used. Returns
/// the headers. A cache that cannot be written only costs a recompile next time.
pub(super) fn store(
    req: &Request,
    snapshot: &Snapshot,
    m: &Module,
    (jobs, images): (&[&Job], &[Vec<u8>]),
    (tmp, toolkit_root): (&Path, &Path),
    base: Option<&Path>,
    (took, start): (Duration, SystemTime),
) -> Result<Vec<PathBuf>, Changed> {
    let (deps, headers, named) = preprocessed_deps(tmp, &m.path, toolkit_root, base);
    let mut read = vec![m.path.clone()];
    read.extend(deps.iter().cloned());
    let hashed: Vec<(PathBuf, blake3::Hash)> = snapshot
        .verify(&read, start)?
        .into_iter()
        .skip(1)
        .map(|(p, seen)| (p, seen.blake3))
        .collect();
    let search = search_dirs(req, &m.path);
    // The files as the compiler named them, resolved again: no link or include directory on
    // the way changed during the compile.
    let mut named = named;
    named.push(m.path.clone());
    super::resolution::check(&named, &search, start)?;
    // The same for every job of the call: they read the same headers, and looked for the
    // same names.
    let absent = super::probes::absent(&read, &headers, &search)?;
    for (j, image) in jobs.iter().zip(images) {
        let key = Cache::object_key(&j.source_key, &hashed);
        let _ = req.with.cache.put_object(&key, image);
        let entry = SourceEntry {
            deps: deps.clone(),
            seconds: took.as_secs_f64() / jobs.len() as f64,
            absent: absent.clone(),
        };
        let _ = req.with.cache.put_source_entry(&j.source_key, &entry);
    }
    Ok(deps)
}

/// nvcc names internal-linkage symbols (`_INTERNAL_5615eb9e_...`, anything using libcu++)
/// after a hash of the source's absolute path, which cicc gets as `--orig_src_path_name`: given
/// the path relative to the project root instead, the same sources make the same bytes in
/// every checkout (docs/BUILDS.md). A name a `-Xcicc` list cannot carry (a comma) is left.
pub(crate) fn source_name_args(source: &Path) -> Vec<String> {
    let name = source.display().to_string();
    if source.is_absolute() || !fatkit_package::flags::path_safe(&name) {
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
    req.ask
        .header_search(source)
        .into_iter()
        .map(|d| std::fs::canonicalize(&d).unwrap_or(d))
        .collect()
}

/// The headers a compile read: the files named by the line markers (`# 12 "/path/h.cuh" 1`)
/// of the preprocessed sources nvcc kept in `dir`, less the source itself and anything not a
/// regular file; relative names are taken relative to `base`. Returned twice: without the
/// include-path misses); and the project's headers as named (absolute, not resolved), for
/// the check of what they resolve to.
fn preprocessed_deps(
    dir: &Path,
    source: &Path,
    toolkit_root: &Path,
    base: Option<&Path>,
) -> (Vec<PathBuf>, Vec<PathBuf>, Vec<PathBuf>) {
    let mut names = std::collections::BTreeSet::new();
    let Ok(read) = std::fs::read_dir(dir) else {
        return (Vec::new(), Vec::new(), Vec::new());
    };
    for entry in read.flatten() {
        let path = entry.path();
        if !path.to_string_lossy().ends_with(".cpp1.ii") {
            continue;
        }
        let Ok(text) = fatkit_read::read_limited(&path, fatkit_read::MAX_FILE) else {
            continue;
        };
        names.extend(line_marker_files(&text));
    }
    // Names relative to where the job ran (a launcher's jobs run in the project root).
    let named: Vec<PathBuf> = names
        .into_iter()
        .filter_map(|p| match base {
            Some(b) if p.is_relative() => Some(b.join(p)),
            _ => Some(p).filter(|p| p.is_absolute()),
        })
        .collect();
    // The toolkit as nvcc was found and as it resolves: where it is reached through a link
    // (`/usr/local/cuda` to `cuda-12.4`, a cache directory linked to another), the compiler
    // names its headers by either.
    let roots = [
        toolkit_root.to_owned(),
        std::fs::canonicalize(toolkit_root).unwrap_or_else(|_| toolkit_root.to_owned()),
    ];
    let toolkits = |p: &Path| roots.iter().any(|r| is_toolchain_header(p, r));
    let project_named = named.iter().filter(|p| !toolkits(p)).cloned().collect();
    // Each header canonical, and whether it is the toolkit's (as named, or once resolved).
    let headers: std::collections::BTreeMap<PathBuf, bool> = named
        .into_iter()
        .map(|p| {
            let named_in_toolkit = toolkits(&p);
            let p = std::fs::canonicalize(&p).unwrap_or(p);
            let in_toolkit = named_in_toolkit || toolkits(&p);
            (p, in_toolkit)
        })
        // Everything read but the source, files or not: a FIFO or a device read through a
        // macro is refused by the snapshot's check, never hashed.
        .filter(|(p, _)| p != source)
        .collect();
    let deps = headers
        .iter()
        .filter(|(_, &in_toolkit)| !in_toolkit)
        .map(|(p, _)| p.clone())
        .collect();
    (deps, headers.into_keys().collect(), project_named)
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

/// Runs one nvcc for one job, or for a cubin job and the PTX job of its virtual architecture
/// ([`calls`]), and stores each image in the cache: `-cubin` for one cubin target (under the
/// launcher, if one is set), else `--fatbin` (always local: docs/BUILDS.md says why), whose
/// entries are the images. With a launcher, the job runs in `base` and names the source and
/// include directories relative to it. A failure names the first job's target.
/// One nvcc call of `jobs` (one source), `argv` the arguments that decide their images (the
/// schedule's): a cubin of one job, else a fatbin whose images are split out.
pub(super) fn compile_nvcc(
    req: &Request,
    snapshot: &Snapshot,
    (m, jobs, argv): (&Module, &[&Job], &[String]),
    (nvcc, probe): (&Nvcc, &Probe),
    base: Option<&Path>,
) -> CallResult {
    let Some(job) = jobs.first() else {
        return Ok((Vec::new(), Vec::new(), Duration::ZERO));
    };
    let cubin = jobs.len() == 1 && job.target.kind == ImageKind::Cubin;
    let launcher = req.with.launcher.as_ref().filter(|_| cubin);
    let toolchain = match launcher {
        Some(l) => format!("{} + nvcc {}", l.spec, probe.version),
        None => format!("nvcc {}", probe.version),
    };
    let tmp = req
        .with
        .cache
        .scratch(job.source_key.get(..16).unwrap_or(&job.source_key));
    let out = tmp.join(if cubin { "out.cubin" } else { "out.fatbin" });
    let mut args = Vec::new();
    if cubin {
        args.push("-cubin".to_owned());
    } else {
        args.push("--fatbin".to_owned());
        // The images are split out of nvcc's fatbin: uncompressed saves the round trip
        // (--compress-mode is CUDA 12.8's; older releases compress only when asked).
        if probe.version >= CudaVersion::new(12, 8) {
            args.push("--compress-mode=none".to_owned());
        }
    }
    args.extend(argv.iter().cloned());
    args.extend(source_name_args(&m.relative));
    // --keep leaves the device-side preprocessed source (*.cpp1.ii) in `tmp`: its line markers
    // name every header the compile read, at no cost (nvcc's -MMD would preprocess again, on
    // the host side, which also misses headers included under __CUDA_ARCH__).
    args.extend(kept_call_tail(&tmp, &out, &m.given));
    let make = || {
        let mut cmd = launcher::command(launcher, &nvcc.nvcc(), base);
        cmd.args(&args);
        cmd
    };
    let line = command::line_of(&make());
    let of = |kind| Failure::of_call(&m.path, job.target, kind, &toolchain, line.clone());
    let (fail, changed) = (of(FailureKind::Compile), of(FailureKind::InputChanged));
    let read = |text: &str| {
        jobs.iter()
            .map(|j| {
                read_image(&out, j.target, !cubin).map_err(|what| {
                    let mut message = launcher::no_output(launcher, &what);
                    if !text.trim().is_empty() {
                        message.push('\n');
                        message.push_str(text.trim_end());
                    }
                    message
                })
            })
            .collect()
    };
    run_kept(
        req,
        snapshot,
        m,
        jobs,
        (&tmp, &nvcc.root, base),
        (&make, &fail, &changed),
        &read,
    )
}

/// How a kept call's images are read back, given what nvcc printed: the images, or what was
/// wrong with its output.
pub(super) type ReadImages<'a> = dyn Fn(&str) -> Result<Vec<Vec<u8>>, String> + 'a;

/// One kept nvcc call ([`kept_call_tail`]), run again while a file it read changes under it
/// (`with_retry`): the command `make` builds, its images read back by `read` (given what nvcc
/// printed; an error is the message of a call that "exited 0 without its output"), then, for
/// `jobs`, stored in the cache with the headers it read. Its scratch directory `tmp` is removed
/// after every attempt.
pub(super) fn run_kept(
    req: &Request,
    snapshot: &Snapshot,
    m: &Module,
    jobs: &[&Job],
    (tmp, toolkit_root, base): (&Path, &Path, Option<&Path>),
    (make, fail, changed): (
        &dyn Fn() -> std::process::Command,
        &MakeFailure<'_>,
        &MakeFailure<'_>,
    ),
    read: &ReadImages<'_>,
) -> CallResult {
    with_retry(
        || {
            snapshot.wait_settled();
            let start = SystemTime::now();
            let (text, took) = run_nvcc(req, &mut make(), tmp, base, fail)?;
            let result = match read(&text) {
                Err(message) => Err(Attempt::Failed(fail(None, message, Status::NoOutput))),
                Ok(images) if jobs.is_empty() => Ok((images, Vec::new(), took)),
                Ok(images) => store(
                    req,
                    snapshot,
                    m,
                    (jobs, &images),
                    (tmp, toolkit_root),
                    base,
                    (took, start),
                )
                .map(|deps| (images, deps, took))
                .map_err(Attempt::Changed),
            };
            let _ = std::fs::remove_dir_all(tmp);
            result
        },
        changed,
    )
}

/// The image an nvcc call wrote to `out`: a cubin (checked to be an ELF file), or the entry for
/// `target` of a fatbin. The error says what was wrong, to follow "exited 0 but".
fn read_image(out: &Path, target: Target, fatbin: bool) -> Result<Vec<u8>, String> {
    let bytes = fatkit_read::read_limited(out, fatkit_read::MAX_FILE)
        .map_err(|e| format!("wrote no {}: {e}", out.display()))?;
    if !fatbin {
        return if bytes.starts_with(b"\x7fELF") {
            Ok(bytes)
        } else {
            Err(format!(
                "wrote {} ({} bytes), which is not a cubin (no ELF header)",
                out.display(),
                bytes.len()
            ))
        };
    }
    let container = fatkit_fatbin::Container::parse(&bytes, fatkit_fatbin::Strictness::AnyKind)
        .map_err(|e| format!("wrote a fatbin fatkit cannot read ({}): {e}", out.display()))?;
    let limits = fatkit_fatbin::Limits::default();
    container
        .entries()
        .find(|e| e.target() == Some(target))
        .and_then(|e| e.image(&limits).ok())
        .map(|b| b.into_owned())
        .ok_or_else(|| format!("wrote a fatbin with no {target} entry ({})", out.display()))
}

#[cfg(test)]
mod tests;

/// How every kept nvcc call ends: its scratch directory (`--keep --keep-dir`, where the
/// preprocessed source's line markers say what it read), its output, and the source as
/// nvcc is given it ([`Module::given`]).
pub(super) fn kept_call_tail(tmp: &Path, out: &Path, source: &str) -> [String; 6] {
    [
        "--keep".to_owned(),
        "--keep-dir".to_owned(),
        tmp.display().to_string(),
        "-o".to_owned(),
        out.display().to_string(),
        source.to_owned(),
    ]
}
