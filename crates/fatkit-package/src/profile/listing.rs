//! `profiles`' list: every profile of a [`ProfileSet`], read, with what it builds and which
//! single toolkits build all of it; those that do not read, with their error. Serialised, the
//! list is `profiles --json`.

use std::path::{Path, PathBuf};

use fatkit_arch::{CudaVersion, Target};
use serde::Serialize;

use super::ProfileSet;

/// A profile that reads.
#[derive(Debug, Serialize)]
pub struct ListEntry {
    pub name: String,
    /// The file, or `built-in/<name>.toml`.
    pub path: PathBuf,
    pub built_in: bool,
    pub description: String,
    pub cubins: Vec<Target>,
    pub ptx: Vec<Target>,
    pub extra: Vec<Target>,
    pub single_toolkits: Vec<CudaVersion>,
}

/// A profile that does not read.
#[derive(Debug, Serialize)]
pub struct ListError {
    pub name: String,
    pub path: PathBuf,
    pub error: String,
}

/// Every profile of a set.
#[derive(Debug, Serialize)]
pub struct Listing<'a> {
    /// The local `arch-profiles/`, if any.
    pub dir: Option<&'a Path>,
    pub profiles: Vec<ListEntry>,
    pub errors: Vec<ListError>,
}

/// Reads every profile of `set`.
pub fn listing(set: &ProfileSet) -> Listing<'_> {
    let mut profiles = Vec::new();
    let mut errors = Vec::new();
    for (name, origin) in &set.entries {
        match origin.load() {
            Ok(p) => profiles.push(ListEntry {
                name: name.clone(),
                path: origin.display_path(),
                built_in: origin.path().is_none(),
                description: p.description.clone(),
                cubins: p.targets.cubins().collect(),
                ptx: p.targets.ptx().collect(),
                extra: p.extra.iter().collect(),
                single_toolkits: p.single_toolkits(),
            }),
            Err(e) => errors.push(ListError {
                name: name.clone(),
                path: origin.display_path(),
                error: e.to_string(),
            }),
        }
    }
    Listing {
        dir: set.dir.as_deref(),
        profiles,
        errors,
    }
}
