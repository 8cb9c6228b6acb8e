//! Arch profiles: fatkit's built-ins ([`BUILT_IN`], `profiles/*.toml` of this crate) and a
//! workspace's own `arch-profiles/*.toml`, which add or override, loaded into
//! [`fatkit_arch::profile::Profile`], with every error naming the file, line and column, the
//! bad value, and a fix.
//!
//! ```toml
//! description = "Volta to Blackwell, cubins for each, PTX for the newest"
//! targets = ["sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]
//! ptx = ["compute_120"]   # default: PTX of the highest target; [] for none
//! extra = ["sm_90a"]      # arch-specific cubins for the kernels that need them
//! compress = "none"       # none | lz4 | zstd
//! min_cuda = "12.8"       # the oldest toolkit allowed to build it
//! budget = "10 MiB"       # the most a build may ship, as
//! for = "fatbin"          # fatbin (the default) | crate | wheel
//!
//! [toolchain]             # pins; other targets go to the newest toolchain that builds them
//! sm_70 = "nvcc 11.8"     # compiler, version or both: "nvrtc", "nvcc 13", "12.9"
//! ```
//!
//! Every notation of `fatkit_arch::notation` is accepted in `targets`, `ptx` and `extra`, one
//! or several per string (`"8.6+PTX"`, `"75-real;86"`, `"-arch=sm_90"`).

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use fatkit_arch::notation::{self, Context};
use fatkit_arch::profile::{Compression, Profile};
use fatkit_arch::toolkit::{self, CudaVersion};
use fatkit_arch::{ImageKind, Target, TargetSet};
use serde::Deserialize;
use toml::Spanned;

/// The directory of profiles a workspace keeps at its root.
pub(crate) const PROFILES_DIR: &str = "arch-profiles";

/// Largest profile file read; a profile is a few hundred bytes.
const MAX_PROFILE_BYTES: u64 = 1 << 20;

/// Anything wrong with finding, reading or understanding a profile.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("{}: cannot read the profile: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// `path:line:col: message; hint`.
    #[error("{}:{line}:{col}: {message}", path.display())]
    Invalid {
        path: PathBuf,
        line: usize,
        col: usize,
        message: String,
    },
    #[error("unknown profile '{name}' (looked in {place}); {hint}")]
    UnknownName {
        name: String,
        place: String,
        hint: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    description: Option<String>,
    targets: Spanned<Vec<Spanned<String>>>,
    ptx: Option<Spanned<Vec<Spanned<String>>>>,
    extra: Option<Spanned<Vec<Spanned<String>>>>,
    compress: Option<Spanned<String>>,
    min_cuda: Option<Spanned<String>>,
    budget: Option<Spanned<String>>,
    #[serde(rename = "for")]
    shipped: Option<Spanned<String>>,
    toolchain: Option<BTreeMap<Spanned<String>, Spanned<String>>>,
}

/// Turns byte offsets of one file into `path:line:col` errors.
struct Source<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Source<'_> {
    /// 1-based line and column (in characters) of a byte offset.
    fn position(&self, offset: usize) -> (usize, usize) {
        let before = self.text.get(..offset).unwrap_or(self.text);
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, col)
    }

    fn error(&self, offset: usize, message: impl Into<String>) -> ProfileError {
        let (line, col) = self.position(offset);
        ProfileError::Invalid {
            path: self.path.to_owned(),
            line,
            col,
            message: message.into(),
        }
    }

    /// Where the text of a string value starts, when the file spells it without escapes:
    /// offsets inside the value then map straight onto the file.
    fn value_start(&self, span: &Range<usize>, value: &str) -> Option<usize> {
        let raw = self.text.get(span.clone())?;
        for quote in ["\"\"\"", "'''", "\"", "'"] {
            if let Some(inner) = raw.strip_prefix(quote).and_then(|r| r.strip_suffix(quote)) {
                return (inner == value).then_some(span.start + quote.len());
            }
        }
        None
    }
}

/// Parses a profile. `path` is used for messages and the profile's name (its file stem).
pub fn parse(path: &Path, text: &str) -> Result<Profile, ProfileError> {
    let src = Source { path, text };
    let raw: RawProfile = toml::from_str(text).map_err(|e| {
        let offset = e.span().map_or(0, |s| s.start);
        let mut message = e.message().trim().replace('\n', " ");
        if message.contains("expected a sequence") {
            message.push_str("; write a list, e.g. targets = [\"sm_80\", \"sm_90\"]");
        } else if message.contains("unknown field") {
            message.push_str("; a profile takes description, targets, ptx, extra, compress, min_cuda, budget, for and [toolchain]");
        }
        src.error(offset, message)
    })?;

    let min_cuda = match &raw.min_cuda {
        None => None,
        Some(v) => Some(
            v.get_ref()
                .parse::<CudaVersion>()
                .map_err(|e| src.error(v.span().start, e.to_string()))?,
        ),
    };
    let compress = match &raw.compress {
        None => Compression::None,
        Some(v) => Compression::parse(v.get_ref()).ok_or_else(|| {
            src.error(
                v.span().start,
                format!(
                    "unknown compression '{}'; use one of {}",
                    v.get_ref(),
                    Compression::NAMES.join(", ")
                ),
            )
        })?,
    };
    let budget = budget(&src, &raw)?;
    let ctx = Context {
        toolkit: min_cuda,
        ..Context::default()
    };
    let mut seen = BTreeMap::new();
    let targets = resolve_list(&src, &raw.targets, &ctx, None, &mut seen)?;
    if targets.is_empty() {
        return Err(src.error(
            raw.targets.span().start,
            "the profile lists no targets; add at least one, e.g. targets = [\"sm_90\"]",
        ));
    }
    let ptx = match &raw.ptx {
        Some(list) => resolve_list(&src, list, &ctx, Some(ImageKind::Ptx), &mut seen)?,
        None if targets.ptx().next().is_none() => targets
            .cubins()
            .next_back()
            .map(|t| t.with_kind(ImageKind::Ptx))
            .into_iter()
            .collect(),
        None => TargetSet::new(),
    };
    let extra = match &raw.extra {
        Some(list) => resolve_list(&src, list, &ctx, None, &mut seen)?,
        None => TargetSet::new(),
    };
    if let Some(min) = min_cuda {
        buildable_from(&src, min, &seen)?;
    }
    let name = path.file_stem().map_or_else(
        || "profile".to_owned(),
        |s| s.to_string_lossy().into_owned(),
    );
    let mut all = targets;
    all.extend(ptx.iter());
    let pins = pins(&src, raw.toolchain.as_ref(), &all, &extra)?;
    Ok(Profile {
        name,
        description: raw.description.unwrap_or_default().trim().to_owned(),
        targets: all,
        extra,
        compress,
        min_cuda,
        budget,
        pins,
    })
}

/// `budget = "10 MiB"` and `for = "crate"`: a size as people write it, and how it ships
/// (`fatbin` when not said).
fn budget(
    src: &Source<'_>,
    raw: &RawProfile,
) -> Result<Option<fatkit_arch::target_search::Budget>, ProfileError> {
    use fatkit_arch::size_budget::{from_fields, BudgetError};
    fn field(v: &Option<Spanned<String>>) -> Option<&str> {
        v.as_ref().map(|v| v.get_ref().as_str())
    }
    from_fields(field(&raw.budget), field(&raw.shipped)).map_err(|e| {
        // Where the wrong field is written.
        let at = match e {
            BudgetError::Size(_) => &raw.budget,
            BudgetError::For(_) | BudgetError::ForWithoutBudget => &raw.shipped,
        };
        src.error(at.as_ref().map_or(0, |v| v.span().start), e.to_string())
    })
}

/// Every target of the profile (`seen`, with where it is named) is one some CUDA from `min`
/// on builds.
fn buildable_from(
    src: &Source<'_>,
    min: CudaVersion,
    seen: &BTreeMap<Target, usize>,
) -> Result<(), ProfileError> {
    for (target, offset) in seen {
        if !toolkit::TOOLKITS
            .iter()
            .any(|t| t.version >= min && toolkit::can_build(t.version, *target))
        {
            let last = toolkit::toolkits_for(*target).last().copied();
            let why = last.map_or(String::new(), |v| {
                format!(" (the last to build it is CUDA {v})")
            });
            return Err(src.error(
                *offset,
                format!("{target} cannot be built by CUDA {min} or later{why}; lower min_cuda or drop {target}"),
            ));
        }
    }
    Ok(())
}

/// The `[toolchain]` table: each pinned target of the profile (`all` or `extra`) and the
/// compiler it goes to, which must build it.
fn pins(
    src: &Source<'_>,
    toolchain: Option<&BTreeMap<Spanned<String>, Spanned<String>>>,
    all: &TargetSet,
    extra: &TargetSet,
) -> Result<BTreeMap<Target, fatkit_arch::Pin>, ProfileError> {
    let mut pins = BTreeMap::new();
    for (key, value) in toolchain.into_iter().flatten() {
        let target = key
            .get_ref()
            .parse::<Target>()
            .ok()
            .filter(|t| all.contains(*t) || extra.contains(*t))
            .ok_or_else(|| {
                src.error(
                    key.span().start,
                    format!(
                        "[toolchain] pins '{}', which is not a target of this profile; name one of {}",
                        key.get_ref(),
                        all.iter().chain(extra.iter()).map(|t| t.to_string()).collect::<Vec<_>>().join(" ")
                    ),
                )
            })?;
        let pin = value
            .get_ref()
            .parse::<fatkit_arch::Pin>()
            .map_err(|e| src.error(value.span().start, e.to_string()))?;
        if !pin.can_build(target) {
            let versions = toolkit::toolkits_for(target);
            let range = match (versions.first(), versions.last()) {
                (Some(a), Some(b)) if a == b => format!("only CUDA {a} builds it"),
                (Some(a), Some(b)) => format!("CUDA {a} to {b} build it"),
                _ => "no known CUDA builds it".to_owned(),
            };
            return Err(src.error(
                value.span().start,
                format!("{pin} cannot build {target}: {range}; change the pin or remove it"),
            ));
        }
        pins.insert(target, pin);
    }
    Ok(pins)
}

/// Parses the strings of one list key; `as_kind` forces every target to that kind (`ptx`).
/// Refuses a target named twice anywhere in the profile.
fn resolve_list(
    src: &Source<'_>,
    list: &Spanned<Vec<Spanned<String>>>,
    ctx: &Context<'_>,
    as_kind: Option<ImageKind>,
    seen: &mut BTreeMap<Target, usize>,
) -> Result<TargetSet, ProfileError> {
    let mut out = TargetSet::new();
    for item in list.get_ref() {
        let value = item.get_ref();
        let start = src.value_start(&item.span(), value);
        let at = |offset: usize| start.map_or(item.span().start, |s| s + offset);
        let parsed = notation::parse_spanned(value, None, ctx)
            .map_err(|e| src.error(at(e.offset), format!("{e}")))?;
        if parsed.is_empty() {
            return Err(src.error(
                item.span().start,
                "empty target string; remove it or name a target",
            ));
        }
        for spanned in parsed {
            let target = as_kind.map_or(spanned.target, |kind| spanned.target.with_kind(kind));
            if !out.insert(target) && as_kind.is_some() {
                continue;
            }
            if let Some(&first) = seen.get(&target) {
                let (line, col) = src.position(first);
                return Err(src.error(
                    at(spanned.offset),
                    format!("{target} is listed twice (first at {line}:{col}); remove one"),
                ));
            }
            seen.insert(target, at(spanned.offset));
        }
    }
    Ok(out)
}

/// Reads and parses one profile file.
pub fn load(path: &Path) -> Result<Profile, ProfileError> {
    let read_err = |source| ProfileError::Read {
        path: path.to_owned(),
        source,
    };
    // A regular file of at most the limit, or refused: a FIFO, `/dev/zero`, a link to either.
    let bytes = fatkit_read::read_limited(path, MAX_PROFILE_BYTES).map_err(read_err)?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        let text =
            std::str::from_utf8(e.as_bytes().get(..offset).unwrap_or_default()).unwrap_or_default();
        Source { path, text }.error(offset, "the profile is not valid UTF-8")
    })?;
    parse(path, &text)
}

/// The profile used where none is named: every command, the build-script API and
/// `[package.metadata.fatkit]` default to it.
pub const DEFAULT: &str = "full";

/// The profiles built into fatkit (`crates/fatkit-package/profiles/`): every command and the
/// build-script API accept these names anywhere, with no `arch-profiles/` directory.
pub const BUILT_IN: &[(&str, &str)] = &[
    ("consumer", include_str!("../profiles/consumer.toml")),
    ("datacenter", include_str!("../profiles/datacenter.toml")),
    ("dev", include_str!("../profiles/dev.toml")),
    ("full", include_str!("../profiles/full.toml")),
    ("jetson", include_str!("../profiles/jetson.toml")),
    ("modern", include_str!("../profiles/modern.toml")),
];

/// Where a profile comes from: built into fatkit, or a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    BuiltIn {
        name: &'static str,
        text: &'static str,
    },
    File(PathBuf),
}

impl Origin {
    /// The built-in profile of this name.
    pub fn built_in(name: &str) -> Option<Origin> {
        BUILT_IN
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(name, text)| Origin::BuiltIn { name, text })
    }

    /// The file, for a profile read from one (a build script's `rerun-if-changed`).
    pub fn path(&self) -> Option<&Path> {
        match self {
            Origin::BuiltIn { .. } => None,
            Origin::File(p) => Some(p),
        }
    }

    /// The path messages name: the file, or `built-in/<name>.toml`.
    pub(crate) fn display_path(&self) -> PathBuf {
        match self {
            Origin::BuiltIn { name, .. } => PathBuf::from(format!("built-in/{name}.toml")),
            Origin::File(p) => p.clone(),
        }
    }

    /// Reads and parses the profile.
    pub fn load(&self) -> Result<Profile, ProfileError> {
        match self {
            Origin::BuiltIn { name, text } => parse(Path::new(&format!("{name}.toml")), text)
                .map_err(|e| match e {
                    ProfileError::Invalid {
                        line, col, message, ..
                    } => ProfileError::Invalid {
                        path: self.display_path(),
                        line,
                        col,
                        message,
                    },
                    other => other,
                }),
            Origin::File(p) => load(p),
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::BuiltIn { .. } => f.write_str("built-in"),
            Origin::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// The profiles a command can name: fatkit's built-ins, then the `*.toml` files of a local
/// `arch-profiles/` directory, which add profiles or override a built-in of the same name.
#[derive(Clone, Debug)]
pub struct ProfileSet {
    /// The local directory, if there is one.
    pub dir: Option<PathBuf>,
    /// `(name, origin)`, sorted by name; a local file replaces the built-in it overrides.
    pub entries: Vec<(String, Origin)>,
}

impl ProfileSet {
    /// The built-ins alone.
    pub fn built_in() -> ProfileSet {
        ProfileSet {
            dir: None,
            entries: BUILT_IN
                .iter()
                .map(|&(name, text)| (name.to_owned(), Origin::BuiltIn { name, text }))
                .collect(),
        }
    }

    /// The built-ins and the nearest `arch-profiles/` in `start` or a parent, if any.
    pub fn discover(start: &Path) -> Result<ProfileSet, ProfileError> {
        match start
            .ancestors()
            .map(|dir| dir.join(PROFILES_DIR))
            .find(|dir| dir.is_dir())
        {
            Some(dir) => ProfileSet::open(&dir),
            None => Ok(ProfileSet::built_in()),
        }
    }

    /// The built-ins and the `*.toml` files of `dir`.
    pub fn open(dir: &Path) -> Result<ProfileSet, ProfileError> {
        let read_err = |source| ProfileError::Read {
            path: dir.to_owned(),
            source,
        };
        let mut set = ProfileSet::built_in();
        for entry in std::fs::read_dir(dir).map_err(read_err)? {
            let path = entry.map_err(read_err)?.path();
            if path.extension().is_some_and(|e| e == "toml") {
                if let Some(stem) = path.file_stem() {
                    let name = stem.to_string_lossy().into_owned();
                    set.entries.retain(|(n, _)| *n != name);
                    set.entries.push((name, Origin::File(path)));
                }
            }
        }
        set.entries.sort_by(|a, b| a.0.cmp(&b.0));
        set.dir = Some(dir.to_owned());
        Ok(set)
    }

    /// A profile given by name (`full`) or as a path (`my/profile.toml`).
    pub fn resolve(&self, spec: &str) -> Result<Origin, ProfileError> {
        if is_path(spec) {
            return Ok(Origin::File(PathBuf::from(spec)));
        }
        if let Some((_, origin)) = self.entries.iter().find(|(name, _)| name == spec) {
            return Ok(origin.clone());
        }
        let names: Vec<&str> = self.entries.iter().map(|(n, _)| n.as_str()).collect();
        let near = names
            .iter()
            .min_by_key(|n| edit_distance(n, spec))
            .filter(|n| edit_distance(n, spec) <= 2);
        let hint = match near {
            Some(n) => format!("did you mean '{n}'? (profiles: {})", names.join(", ")),
            None => format!(
                "profiles: {}; or add {PROFILES_DIR}/{spec}.toml, or give a .toml path",
                names.join(", ")
            ),
        };
        Err(ProfileError::UnknownName {
            name: spec.to_owned(),
            place: self.to_string(),
            hint,
        })
    }

    /// Loads a profile by name or path.
    pub fn load(&self, spec: &str) -> Result<Profile, ProfileError> {
        self.resolve(spec)?.load()
    }
}

/// Whether a profile spec names a file (a `.toml`, or anything with a path separator) rather
/// than a profile by name: the one test [`resolve`] applies.
pub fn is_path(spec: &str) -> bool {
    spec.ends_with(".toml") || spec.contains('/') || spec.contains(std::path::MAIN_SEPARATOR)
}

/// The one resolution of a profile given by name or path, used by every command and the
/// build-script API: a `.toml` path (or anything with a `/`) is a file, relative to `base`;
/// a name is looked up in `dir` (which must exist), else in the nearest `arch-profiles/`
/// from `base` upwards, else among the built-ins.
pub fn resolve(spec: &str, base: &Path, dir: Option<&Path>) -> Result<Origin, ProfileError> {
    if is_path(spec) {
        let path = Path::new(spec);
        return Ok(Origin::File(if path.is_absolute() {
            path.to_owned()
        } else {
            base.join(path)
        }));
    }
    let set = match dir {
        Some(dir) => ProfileSet::open(dir)?,
        None => ProfileSet::discover(base)?,
    };
    set.resolve(spec)
}

/// Loads a profile given by name or path: [`resolve`], then [`Origin::load`].
pub fn load_spec(spec: &str, base: &Path, dir: Option<&Path>) -> Result<Profile, ProfileError> {
    resolve(spec, base, dir)?.load()
}

/// Levenshtein distance, for "did you mean".
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row.first().copied().unwrap_or(0);
        if let Some(first) = row.first_mut() {
            *first = i + 1;
        }
        for (j, cb) in b.iter().enumerate() {
            let above = row.get(j + 1).copied().unwrap_or(0);
            let left = row.get(j).copied().unwrap_or(0);
            let best = (prev + usize::from(ca != *cb)).min(above + 1).min(left + 1);
            prev = above;
            if let Some(cell) = row.get_mut(j + 1) {
                *cell = best;
            }
        }
    }
    row.last().copied().unwrap_or(0)
}

impl fmt::Display for ProfileSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.dir {
            Some(dir) => write!(f, "fatkit's built-in profiles and {}", dir.display()),
            None => f.write_str("fatkit's built-in profiles"),
        }
    }
}

mod listing;
mod required;
pub use listing::{listing, ListEntry, ListError, Listing};
pub use required::{required, RequireError};

#[cfg(test)]
mod tests;
