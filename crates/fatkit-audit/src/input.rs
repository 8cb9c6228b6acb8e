//! Reading one file's bytes as every reader of files, directories and container images
//! ([`crate::inputs`], [`crate::image`]) reads them, and what a wheel's `RECORD` says.

use fatkit_fatbin::declarations::Declarations;
use fatkit_fatbin::inspect::{self, Depth, FileReport};
use fatkit_fatbin::{Budget, Limits};

/// A file already in memory (read from a container image's layer), named `name` (its leaf
/// name `leaf`), judged as `inputs` judges a file it reads: a zip member by member, anything else
/// whole. Returns its report, its declaration records and whether it is a zip.
pub(crate) fn inspect_bytes(
    name: &str,
    leaf: &str,
    bytes: Vec<u8>,
    limits: &Limits,
    budget: &Budget,
) -> (FileReport, Declarations, bool) {
    if bytes.starts_with(b"PK\x03\x04") {
        let (report, declarations) = inspect_zip(name, std::io::Cursor::new(bytes), limits, budget);
        return (report, declarations, true);
    }
    let report = inspect::inspect_named_in(name, leaf, &bytes, Depth::Kernels, limits, budget);
    let declarations = match budget.work("the declaration records", bytes.len() as u64) {
        true => Declarations::scan(&bytes),
        false => Declarations::default(),
    };
    (report, declarations, false)
}

/// A zip (a wheel) read through member by member, so that it is never whole in memory: its
/// report, and the declaration records of its members (a crate's declarations live in the
/// binaries that hold its kernels).
pub(crate) fn inspect_zip(
    name: &str,
    reader: impl std::io::Read + std::io::Seek,
    limits: &Limits,
    budget: &Budget,
) -> (FileReport, Declarations) {
    let mut declarations = Declarations::default();
    let report = inspect::inspect_zip_in(
        name,
        reader,
        (Depth::Kernels, limits, budget),
        |_, member| {
            if budget.work("the declaration records", member.len() as u64) {
                declarations.extend(Declarations::scan(member));
            }
        },
    );
    (report, declarations)
}

/// The distribution a `NAME-VERSION.dist-info` directory is of: `torch-2.7.0.dist-info` ->
/// `torch 2.7.0`.
pub(crate) fn distribution(dist_info: &str) -> String {
    let dist = dist_info.trim_end_matches(".dist-info");
    match dist.split_once('-') {
        Some((name, version)) => format!("{name} {version}"),
        None => dist.to_owned(),
    }
}

/// The path a `RECORD` line names: `path,sha256=...,size`, a path with a comma quoted.
pub(crate) fn record_path(line: &str) -> &str {
    match line.strip_prefix('"') {
        Some(q) => q.split('"').next().unwrap_or_default(),
        None => line.split(',').next().unwrap_or_default(),
    }
}
