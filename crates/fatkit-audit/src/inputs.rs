//! What `audit` reads: files, wheels, directories and Python environments, each turned into
//! one report whose libraries are its files (or members) holding device code, with the
//! Python distribution each belongs to where one is installed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::input::{distribution, inspect_zip, record_path};
use crate::record::{member_name, wheel_package};
pub use crate::record::{Input, LibraryRef};
use fatkit_fatbin::declarations::Declarations;
use fatkit_fatbin::inspect::{self, Depth, FileReport};
use fatkit_fatbin::{Budget, Format, Limits};

use crate::read::{open_regular, read_into};
use crate::{Error, Result};

fn cannot_read(path: &Path, source: std::io::Error) -> Error {
    Error::Read {
        shown: shown(path),
        source,
    }
}

/// A path as reports show it: a name holding a newline cannot forge a line of them.
fn shown(path: &Path) -> String {
    fatkit_fatbin::printable(&path.display().to_string()).into_owned()
}

/// A path inside a directory as reports show it: `/`-separated, then [`shown`]'s escapes.
fn shown_relative(rel: &Path) -> String {
    fatkit_fatbin::printable(&rel.to_string_lossy().replace('\\', "/")).into_owned()
}

/// Reads a file or a directory given on the command line, within one budget
/// ([`fatkit_fatbin::Budget`]) proportional to its size (a directory's: its files' together),
/// with one floor. Past the budget the input is unknown, its report only the reason: what
/// could not be read to the end. A container image ([`crate::image`]) is an input per image
/// it holds; anything else one input.
pub fn read(path: &Path, limits: &Limits) -> Result<Vec<Input>> {
    let label = shown(path);
    let meta = std::fs::metadata(path).map_err(|e| cannot_read(path, e))?;
    let probe = Budget::for_input(limits, meta.len());
    match crate::image::Store::find(path, &probe).map_err(|e| cannot_read(path, e))? {
        crate::image::Found::Image(store) => {
            let budget = Budget::for_input(limits, store.size());
            let images = crate::image::read(&label, &store, limits, &budget);
            return Ok(images.into_iter().map(|i| refused(i, &budget)).collect());
        }
        crate::image::Found::Compressed(how) => {
            return Err(Error::CompressedTar { shown: label, how })
        }
        crate::image::Found::NotAnImage => {}
    }
    let input = if meta.is_dir() {
        let mut files = Vec::new();
        walk(path, &mut files)?;
        let size = files
            .iter()
            .map(|f| std::fs::symlink_metadata(f).map_or(0, |m| m.len()))
            .sum();
        let budget = Budget::for_input(limits, size);
        let input = read_dir(path, label, files, limits, &budget)?;
        refused(input, &budget)
    } else {
        let budget = Budget::for_input(limits, meta.len());
        let (report, declarations, is_zip) =
            read_one(path, (&label, &label), limits, &budget, &mut Vec::new())
                .map_err(|e| cannot_read(path, e))?;
        let input = Input {
            package: if is_zip { wheel_package(path) } else { None },
            label,
            report,
            declarations,
            owners: BTreeMap::new(),
            layers: BTreeMap::new(),
            unbuilt: Vec::new(),
            pinned: BTreeMap::new(),
        };
        refused(input, &budget)
    };
    Ok(vec![input])
}

/// `input`, or, where its budget was spent, an input whose report is only why: nothing read of
/// it is an answer.
///
/// Every input leaves the readers here, and every name in it read from the input (its label,
/// distributions and versions, image tags, layer paths, members, kernels, errors) is escaped
/// here ([`Input::escaped`]): no input can write a line of fatkit's report or move the cursor.
fn refused(input: Input, budget: &Budget) -> Input {
    let input = input.escaped();
    let Some(why) = budget.spent() else {
        return input;
    };
    Input {
        report: FileReport {
            errors: vec![why.clone()],
            refused: Some(why),
            ..FileReport::empty(&input.label, input.report.format)
        },
        declarations: Declarations::default(),
        owners: BTreeMap::new(),
        layers: BTreeMap::new(),
        ..input
    }
}

/// How the lock pins each distribution it would install: the wheels', and those with none.
fn pinned(locked: &fatkit_lock::Locked) -> BTreeMap<String, crate::record::Pinned> {
    locked
        .pins
        .iter()
        .filter_map(|p| {
            let pinned = crate::record::Pinned {
                line: p.line,
                sha256: p.sha256.clone(),
            };
            Some((wheel_package(Path::new(&p.file_name))?, pinned))
        })
        .chain(locked.skipped.iter().map(|s| {
            let pinned = crate::record::Pinned {
                line: s.line,
                sha256: None,
            };
            (unbuilt_name(s), pinned)
        }))
        .collect()
}

/// The distributions a lock would install with no wheel for the target.
fn unbuilt(skipped: Vec<fatkit_lock::Skipped>) -> Vec<crate::record::Unbuilt> {
    skipped
        .into_iter()
        .map(|s| crate::record::Unbuilt {
            package: unbuilt_name(&s),
            why: s.why,
            built: s.built,
        })
        .collect()
}

/// A distribution of a lock with no wheel, named as a wheel's file names it (`flash_attn
/// 2.8.3`, PEP 427's escaping), as every other distribution of the lock is.
fn unbuilt_name(s: &fatkit_lock::Skipped) -> String {
    format!("{} {}", s.name.replace(['-', '.'], "_"), s.version)
}

/// One file, named `name` (its leaf name `leaf`): a zip (a wheel) is read through, member by
/// member, so that the wheel itself is never in memory; anything else whole, into `buf`.
/// Returns its report, its declaration records and whether it is a zip.
fn read_one(
    path: &Path,
    (name, leaf): (&str, &str),
    limits: &Limits,
    budget: &Budget,
    buf: &mut Vec<u8>,
) -> std::io::Result<(FileReport, Declarations, bool)> {
    // Opened once: what is checked to be a regular file is what is read.
    let (mut file, len) = open_regular(path)?;
    let mut head = [0u8; 4];
    let is_zip = {
        use std::io::{Read, Seek};
        let zip = file.read(&mut head)? == 4 && head == *b"PK\x03\x04";
        file.rewind()?;
        zip
    };
    if is_zip {
        let (report, declarations) =
            inspect_zip(name, std::io::BufReader::new(file), limits, budget);
        return Ok((report, declarations, true));
    }
    read_into(file, len, buf)?;
    let report = inspect::inspect_named_in(name, leaf, buf, Depth::Kernels, limits, budget);
    let declarations = declarations(path, buf, budget)?;
    Ok((report, declarations, false))
}

/// Every regular file under `dir` (symbolic links are not followed: an installed library's
/// links name files already in the tree), sorted by path.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| cannot_read(dir, e))?
        .collect::<std::io::Result<_>>()
        .map_err(|e| cannot_read(dir, e))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let kind = entry
            .file_type()
            .map_err(|e| cannot_read(&entry.path(), e))?;
        if kind.is_dir() {
            walk(&entry.path(), out)?;
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
    Ok(())
}

fn read_dir(
    dir: &Path,
    label: String,
    files: Vec<PathBuf>,
    limits: &Limits,
    budget: &Budget,
) -> Result<Input> {
    let mut report = FileReport::empty(&label, Format::Directory);
    let mut declarations = Declarations::default();
    let rel_name = |path: &PathBuf| {
        let rel = path.strip_prefix(dir).unwrap_or(path);
        shown_relative(rel)
    };
    // A distribution's metadata (`*.dist-info/`: RECORD, METADATA, licenses) holds no device
    // code: its RECORD is read a line at a time for the owners below, never whole.
    let metadata = |p: &PathBuf| {
        p.parent()
            .and_then(Path::file_name)
            .is_some_and(|d| d.to_string_lossy().ends_with(".dist-info"))
    };
    let read: Vec<(&Path, String, String)> = files
        .iter()
        .filter(|p| !metadata(p))
        .map(|p| {
            let rel = rel_name(p);
            let name = format!("{}/{rel}", label.trim_end_matches('/'));
            (p.as_path(), name, rel)
        })
        .collect();
    let outcomes = read_files(&read, limits, budget);
    let rel = |i: usize| read.get(i).map(|(_, _, r)| r.as_str());
    keep(outcomes, rel, &mut report, &mut declarations);
    // CUDA sources: what a package that compiles its kernels at run time ships.
    report.sources = files
        .iter()
        .map(rel_name)
        .filter(|n| inspect::is_cuda_source(n))
        .collect();
    let (owners, unread) = owners(dir, &files, &wanted(&report), budget);
    report.errors.extend(unread);
    Ok(Input {
        owners,
        label,
        report,
        declarations,
        package: None,
        layers: BTreeMap::new(),
        unbuilt: Vec::new(),
        pinned: BTreeMap::new(),
    })
}

/// One file read: its report and declaration records, or why it could not be read.
type Outcome = std::io::Result<(FileReport, Declarations)>;

/// `files` (each a path, the name its report takes, and its name relative to the input) read
/// on every core, largest first (so that the last to finish is a small one), each worker into
/// its own buffer: each outcome with its index in `files`, in that order.
fn read_files(
    files: &[(&Path, String, String)],
    limits: &Limits,
    budget: &Budget,
) -> Vec<(usize, Outcome)> {
    let mut by_size: Vec<(usize, u64)> = files
        .iter()
        .enumerate()
        .map(|(i, (p, _, _))| (i, std::fs::symlink_metadata(p).map_or(0, |m| m.len())))
        .collect();
    by_size.sort_by_key(|&(i, len)| (std::cmp::Reverse(len), i));
    let read = fatkit_fatbin::par::map(&by_size, Vec::new, |buf, &(i, _)| {
        let (path, name, rel) = files.get(i)?;
        if !budget.items("the directory's files", 1) {
            return None;
        }
        let outcome = read_one(path, (name, rel), limits, budget, buf);
        Some((i, outcome.map(|(report, found, _)| (report, found))))
    });
    let mut read: Vec<_> = read.into_iter().flatten().collect();
    read.sort_by_key(|(i, _)| *i);
    read
}

/// The outcomes, in order, kept in `report`'s members where they hold device code, compilers
/// or errors, their declaration records in `declarations`; `rel` names the file of an outcome.
/// A file that cannot be read is an error of the input's report (exit 2), and the rest is
/// kept.
fn keep<'a>(
    outcomes: Vec<(usize, Outcome)>,
    rel: impl Fn(usize) -> Option<&'a str>,
    report: &mut FileReport,
    declarations: &mut Declarations,
) {
    for (i, outcome) in outcomes {
        let (mut sub, found) = match outcome {
            Ok(read) => read,
            Err(e) => {
                let rel = rel(i).unwrap_or_default();
                report.errors.push(format!("{rel}: cannot read: {e}"));
                continue;
            }
        };
        // A compiler is the directory's, whatever else its file holds; a wheel's stay its own.
        if sub.format != Format::Zip {
            report.compilers.append(&mut sub.compilers);
            report.nvrtc_sources.append(&mut sub.nvrtc_sources);
        }
        // A wheel of compilers or NVRTC programs alone (nvidia-cuda-nvcc) is kept for them.
        let runs_compilers = !sub.compilers.is_empty() || !sub.nvrtc_sources.is_empty();
        if sub.has_device_code() || !sub.errors.is_empty() || runs_compilers {
            declarations.extend(found);
            report.members.push(sub);
        }
    }
}

/// Reads what is named: a lock or requirements file ([`fatkit_lock::Kind`]) is the wheels it
/// would install on the settings' target, each fetched whole and hash-verified into the store
/// ([`fatkit_lock::store`]) and read as a wheel in a directory is, its own distribution, or
/// taken from the readings cache (`readings.rs`) where it was read before; anything else
/// is [`read`].
pub fn read_named(
    path: &Path,
    limits: &Limits,
    lock: &fatkit_lock::Settings,
) -> Result<Vec<Input>> {
    let Some(kind) = fatkit_lock::Kind::of(path).filter(|_| !path.is_dir()) else {
        return read(path, limits);
    };
    let locked = fatkit_lock::resolve(path, kind, lock)?;
    let readings = lock
        .store
        .as_deref()
        .and_then(|s| crate::readings::Readings::open(&crate::readings::Readings::default_dir(s)));
    // A directory a team shares that cannot be written would leave every run reading every
    // wheel, unseen: said, once, before anything is read.
    if let (Some(r), Some(dir)) = (&readings, std::env::var_os("FATKIT_READINGS_DIR")) {
        r.writable().map_err(|source| Error::Readings {
            dir: dir.into(),
            source,
        })?;
    }
    // A wheel read before is not fetched: its reading answers (a wheel's report is named by
    // its file alone, whatever the lock's path, so its reading is the same).
    let names: Vec<&str> = locked.pins.iter().map(|p| p.file_name.as_str()).collect();
    let mut outcomes: Vec<(usize, Outcome)> = Vec::new();
    let mut wanted = fatkit_lock::Locked::default();
    // Readings parsed on every core.
    let kept = fatkit_fatbin::par::map(
        &locked.pins,
        || (),
        |_, pin| {
            pin.sha256
                .as_deref()
                .and_then(|h| readings.as_ref()?.get(h))
        },
    );
    for ((i, pin), kept) in locked.pins.iter().enumerate().zip(kept) {
        match kept {
            Some(report) => outcomes.push((i, Ok((report, Declarations::default())))),
            None => wanted.pins.push(pin.clone()),
        }
    }
    let wheels = fatkit_lock::store::fetch(&wanted, lock).map_err(|source| {
        fatkit_lock::LockError::Store {
            shown: shown(path),
            source,
        }
    })?;
    let label = shown(path);
    let size = wheels
        .iter()
        .map(|w| std::fs::metadata(&w.path).map_or(0, |m| m.len()))
        .sum();
    let budget = Budget::for_input(limits, size);
    let files: Vec<(&Path, String, String)> = wheels
        .iter()
        .map(|w| (w.path.as_path(), w.file_name.clone(), w.file_name.clone()))
        .collect();
    for (j, outcome) in read_files(&files, limits, &budget) {
        let Some(w) = wheels.get(j) else { continue };
        if let (Ok((report, found)), Some(r)) = (&outcome, &readings) {
            // A reading is kept whole or not at all: declaration records are not kept.
            if found.is_empty() && budget.spent().is_none() {
                r.put(&w.sha256, report);
            }
        }
        // In the lock's order, whichever were read before.
        let at = locked
            .pins
            .iter()
            .position(|p| p.file_name == w.file_name && p.name == w.name);
        outcomes.push((at.unwrap_or(names.len()), outcome));
    }
    outcomes.sort_by_key(|(i, _)| *i);
    let mut report = FileReport::empty(&label, Format::Directory);
    let mut declarations = Declarations::default();
    let rel = |i: usize| names.get(i).copied();
    keep(outcomes, rel, &mut report, &mut declarations);
    let input = Input {
        label,
        report,
        declarations,
        package: None,
        owners: BTreeMap::new(),
        layers: BTreeMap::new(),
        pinned: pinned(&locked),
        unbuilt: unbuilt(locked.skipped),
    };
    Ok(vec![refused(input, &budget)])
}

/// The names whose distribution is wanted from the RECORDs (only those are held): each
/// library kept, each source and each compiler.
fn wanted(report: &FileReport) -> std::collections::BTreeSet<String> {
    report
        .members
        .iter()
        .map(|m| member_name(&report.name, &m.name))
        .chain(report.sources.iter().cloned())
        .chain(report.compilers.iter().map(|c| c.name.clone()))
        .chain(report.nvrtc_sources.iter().map(|s| s.name.clone()))
        .collect()
}

/// The largest `*.dist-info/RECORD` read (the largest real ones list a distribution's files
/// in tens of megabytes); a longer line is cut, and what it names is no library's.
const MAX_RECORD: u64 = 256 << 20;
const MAX_RECORD_LINE: usize = 64 << 10;

/// The distribution owning each file of `wanted` (relative names, as shown), from every
/// `NAME-VERSION.dist-info/RECORD` in `files`, each read a line at a time through
/// [`crate::read::for_each_line`] (a regular file of at most [`MAX_RECORD`] bytes): memory is
/// a line and the names wanted, whatever the RECORDs hold. Also the RECORDs that could not be
/// read, as errors of the directory.
fn owners(
    dir: &Path,
    files: &[PathBuf],
    wanted: &std::collections::BTreeSet<String>,
    budget: &Budget,
) -> (BTreeMap<String, String>, Vec<String>) {
    let mut out = BTreeMap::new();
    let mut unread = Vec::new();
    for record in files.iter().filter(|p| {
        p.file_name().is_some_and(|n| n == "RECORD")
            && p.parent()
                .and_then(|d| d.file_name())
                .is_some_and(|d| d.to_string_lossy().ends_with(".dist-info"))
    }) {
        let Some(info) = record.parent() else {
            continue;
        };
        let Some(base) = info.parent() else { continue };
        let package = distribution(
            &info
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
        let read = crate::read::for_each_line(record, MAX_RECORD, MAX_RECORD_LINE, |line| {
            if !budget.work("the RECORD files", line.len() as u64 + 1) {
                return;
            }
            let line = String::from_utf8_lossy(line);
            let full = base.join(record_path(&line));
            if let Ok(rel) = full.strip_prefix(dir) {
                let name = shown_relative(rel);
                if wanted.contains(&name) {
                    out.insert(name, package.clone());
                }
            }
        });
        if let Err(e) = read {
            let rel = record.strip_prefix(dir).unwrap_or(record);
            unread.push(format!(
                "{}: cannot read: {e}; the distributions of its files are unknown",
                shown_relative(rel)
            ));
        }
    }
    (out, unread)
}

/// The declaration records of a file: embedded in a binary, or for a `.fatbin` or `.cubin`
/// fatkit wrote, in the generated module beside it (`<stem>.rs`).
fn declarations(path: &Path, bytes: &[u8], budget: &Budget) -> std::io::Result<Declarations> {
    if !budget.work("the declaration records", bytes.len() as u64) {
        return Ok(Declarations::default());
    }
    let found = Declarations::scan(bytes);
    let beside = path.with_extension("rs");
    let is_image = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("fatbin" | "cubin")
    );
    if !found.is_empty() || !is_image || !beside.is_file() {
        return Ok(found);
    }
    // The generated module beside it: no larger than such a module is.
    let text = crate::read::read_limited(&beside, MAX_GENERATED)?;
    if !budget.work("the declaration records", text.len() as u64) {
        return Ok(Declarations::default());
    }
    Ok(Declarations::scan(&text))
}

/// The largest generated module (`<module>.rs`) read beside a `.fatbin` for its record.
const MAX_GENERATED: u64 = 256 << 20;
