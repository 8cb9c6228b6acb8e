//! A cargo workspace as fatkit sees it, through `cargo metadata`: the packages that declare
//! kernels in `[package.metadata.fatkit]`, and the binaries `package` ships.
//!
//! ```toml
//! [package.metadata.fatkit]
//! profile = "full"                        # default: full (FATKIT_PROFILE overrides)
//! sources = ["kernels/ops.cu", { path = "kernels/scale.cu", module = "scaling" }]
//! include = ["kernels/include"]           # more -I directories
//! defines = ["USE_FAST_MATH"]
//! flags = ["-std=c++17", "--use_fast_math"]  # nvcc's spelling; translated for NVRTC
//! kernel_sets = "as-built"                # optional: each kernel's targets are what was built
//! vendor = "kernels/prebuilt"             # optional: modules go into the crate, shipped with it
//! launcher = "sccache"                    # optional: nvcc's cubin jobs run under it
//! budget = "10 MiB"                       # optional: the most its build may ship, as
//! for = "crate"                           # fatbin (default) | crate | wheel (over the profile's)
//!
//! [package.metadata.fatkit.kernels]       # kernels built for some targets only, by design
//! "*_bf16" = { targets = "sm_80+" }       # a name or glob; "sm_80+" or a list of targets
//! scale_f16 = { exclude = ["sm_70"] }     # compiles with -DFATKIT_SKIP_scale_f16 there
//!
//! [package.metadata.fatkit.files]         # sources built for some targets only, by design
//! "marlin*.cu" = { targets = "sm_80+" }   # a file name, or a path with /; a glob of either
//!
//! [package.metadata.fatkit.toolchain]     # pins over the profile's, as its [toolchain]
//! sm_70 = "nvcc 12.4"
//!
//! # at the workspace root
//! [workspace.metadata.fatkit]
//! name = "myproject"                      # the archive's name; default: the root directory's
//! package = ["mytool"]                    # binaries `package` ships; default: every binary
//!                                         # of a member that is not `publish = false`
//! launcher = "sccache"                    # for every unit without its own
//! ```
//!
//! Sources are files or directories (every `.cu` directly in it), relative to the package.
//! Modules are written to `<target dir>/fatkit/<package>/`, or with `vendor` to that directory
//! of the package (committed, and in the `.crate`: the crate's users need no toolchain), where
//! the crate's build script checks them ([`crate::prebuilt`]) and the crate includes them, each
//! module the value of an expression in a function of the crate:
//! `fatkit_runtime::include_module!(concat!(env!("FATKIT_KERNELS_DIR"), "/ops.rs"))`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Why the workspace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("`cargo metadata` failed in {}: {message}; run it there to see why", dir.display())]
    Metadata { dir: PathBuf, message: String },
    #[error("{}: {package}: {message}", manifest.display())]
    Invalid {
        manifest: PathBuf,
        package: String,
        message: String,
    },
}

/// One `sources` element.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
enum SourceSpec {
    Path(PathBuf),
    Named { path: PathBuf, module: String },
}

/// `targets = "sm_80+"` or `targets = ["sm_80", "sm_90"]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
enum TargetsValue {
    One(String),
    List(Vec<String>),
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KernelOverride {
    targets: Option<TargetsValue>,
    exclude: Option<Vec<String>>,
}

/// One `[package.metadata.fatkit.kernels]` entry, checked against the profile later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelDeclaration {
    /// `targets = ..`: the targets it is built for.
    Targets(String),
    /// `exclude = [..]`: the targets it is not built for.
    Exclude(Vec<String>),
}

/// One `[package.metadata.fatkit.files]` entry.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileOverride {
    targets: TargetsValue,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    profile: Option<String>,
    sources: Vec<SourceSpec>,
    #[serde(default)]
    include: Vec<PathBuf>,
    #[serde(default)]
    defines: Vec<String>,
    #[serde(default)]
    flags: Vec<String>,
    kernel_sets: Option<String>,
    #[serde(default)]
    kernels: BTreeMap<String, KernelOverride>,
    #[serde(default)]
    files: BTreeMap<String, FileOverride>,
    vendor: Option<String>,
    launcher: Option<String>,
    budget: Option<String>,
    #[serde(rename = "for")]
    shipped: Option<String>,
    #[serde(default)]
    toolchain: BTreeMap<String, String>,
}

/// A package's kernels, resolved.
#[derive(Clone, Debug)]
pub struct KernelPackage {
    pub name: String,
    pub manifest_path: PathBuf,
    pub dir: PathBuf,
    /// The profile name (or `.toml` path relative to the package).
    pub profile: String,
    /// `(source, module name)`, every file existing.
    pub sources: Vec<(PathBuf, String)>,
    pub include_dirs: Vec<PathBuf>,
    pub defines: Vec<String>,
    /// Compile options, in nvcc's spelling.
    pub flags: Vec<String>,
    /// `kernel_sets = "as-built"`.
    pub kernel_sets_as_built: bool,
    /// Kernel name or glob -> its declaration (parsed against the profile later).
    pub kernels: Vec<(String, KernelDeclaration)>,
    /// `[package.metadata.fatkit.files]`: source name, path or glob -> the targets it is
    /// built for (parsed against the profile later).
    pub files: Vec<(String, String)>,
    /// The `[package.metadata.fatkit]` table as canonical JSON: part of every module's
    /// recorded inputs.
    pub config: String,
    /// `vendor = "DIR"`: the modules live in this directory of the package (absolute here),
    /// built for the package's own profile whatever `--profile` or `FATKIT_PROFILE` say.
    pub vendor: Option<PathBuf>,
    /// `launcher = "sccache"`: the known launcher ([`KNOWN_LAUNCHERS`]) nvcc's cubin jobs run
    /// under (`FATKIT_LAUNCHER` and `--launcher` override it). Not part of `config`: it changes how, not what, is built.
    pub launcher: Option<String>,
    /// `budget = "10 MiB"`, `for = "crate"`: the most its build may ship (over the profile's).
    /// Not part of `config`: it checks what is built, and changes nothing of it.
    pub budget: Option<fatkit_arch::size_budget::Budget>,
    /// `[package.metadata.fatkit.toolchain]`: targets pinned to a toolchain, as a profile's
    /// `[toolchain]` table pins them, over the profile's own pins (checked against the
    /// profile when the unit is made: `project`).
    pub toolchain: BTreeMap<fatkit_arch::Target, fatkit_arch::Pin>,
}

/// A binary target of a workspace member.
#[derive(Clone, Debug)]
pub struct Binary {
    pub name: String,
    pub package: String,
    pub version: String,
}

/// The workspace.
#[derive(Clone, Debug)]
pub struct Workspace {
    pub root: PathBuf,
    pub target_dir: PathBuf,
    /// `[workspace.metadata.fatkit] name`, else the root directory's name.
    pub name: String,
    /// The packages with `[package.metadata.fatkit]`.
    pub kernel_packages: Vec<KernelPackage>,
    /// The binaries `package` ships.
    pub binaries: Vec<Binary>,
    /// `[workspace.metadata.fatkit] launcher`: for every unit without its own.
    pub launcher: Option<String>,
}

impl Workspace {
    /// Where a kernel package's modules go: its `vendor` directory, else
    /// `<target dir>/fatkit/<package>`.
    pub fn out_dir(&self, package: &KernelPackage) -> PathBuf {
        package
            .vendor
            .clone()
            .unwrap_or_else(|| self.target_dir.join("fatkit").join(&package.name))
    }
}

/// A package's `[package.metadata.fatkit]` table (`config`, as JSON), resolved against the
/// package's directory: what `build-kernels` builds and what a build script's
/// [`crate::prebuilt`] check expects.
pub fn kernel_package(
    name: &str,
    manifest_path: &Path,
    config: &serde_json::Value,
) -> Result<KernelPackage, WorkspaceError> {
    let pkg_dir = manifest_path
        .parent()
        .map_or_else(PathBuf::new, Path::to_path_buf);
    let invalid = |message: String| WorkspaceError::Invalid {
        manifest: manifest_path.to_owned(),
        package: format!("[package.metadata.fatkit] of package {}", name),
        message,
    };
    if config.get("sources").is_some_and(|s| s.is_object()) {
        return Err(invalid(
            "sources is a table here; it lists the source files and directories (sources = [\"kernels\"]), and the targets of some sources go in [package.metadata.fatkit.files] (\"marlin*.cu\" = { targets = \"sm_80+\" })".to_owned(),
        ));
    }
    let raw: RawConfig = serde_json::from_value(config.clone()).map_err(|e| {
        invalid(format!(
            "{e}; it takes profile, sources (required), include, defines, flags, kernel_sets, kernels, files, vendor, launcher, budget, for and toolchain (see the fatkit README)"
        ))
    })?;
    let sources = resolve_sources(&raw.sources, &pkg_dir, &invalid)?;
    let kernel_sets_as_built = match raw.kernel_sets.as_deref() {
        None | Some("exact") => false,
        Some("as-built") => true,
        Some(other) => {
            return Err(invalid(format!(
                "kernel_sets = \"{other}\": expected \"as-built\" (each kernel's targets are what the compilers built) or \"exact\" (the default: every kernel in every image)"
            )))
        }
    };
    let kernels = kernel_declarations(raw.kernels, &invalid)?;
    let toolchain = toolchain_pins(&raw.toolchain, &invalid)?;
    // What reaches nvcc is checked where it is written (the build checks it again).
    for define in &raw.defines {
        if let Some(why) = crate::flags::define_refusal(define) {
            return Err(invalid(format!("defines: {define:?}: {why}")));
        }
    }
    let vendor = vendor_dir(raw.vendor.as_deref(), &pkg_dir, &sources, &invalid)?;
    let launcher = metadata_launcher(raw.launcher).map_err(invalid)?;
    let budget =
        fatkit_arch::size_budget::from_fields(raw.budget.as_deref(), raw.shipped.as_deref())
            .map_err(|e| match e {
                fatkit_arch::size_budget::BudgetError::Size(why) => {
                    invalid(format!("budget: {why}"))
                }
                other => invalid(other.to_string()),
            })?;
    Ok(KernelPackage {
        budget,
        name: name.to_owned(),
        vendor,
        profile: raw
            .profile
            .unwrap_or_else(|| crate::profile::DEFAULT.to_owned()),
        sources,
        include_dirs: raw.include.iter().map(|d| pkg_dir.join(d)).collect(),
        defines: raw.defines,
        flags: raw.flags,
        kernel_sets_as_built,
        kernels,
        files: raw
            .files
            .into_iter()
            .map(|(pattern, f)| {
                let targets = match f.targets {
                    TargetsValue::One(t) => t,
                    TargetsValue::List(l) => l.join(" "),
                };
                (pattern, targets)
            })
            .collect(),
        toolchain,
        config: canonical_json(&without_launcher(config)),
        launcher,
        manifest_path: manifest_path.to_owned(),
        dir: pkg_dir,
    })
}

/// The sources of a `sources` list: files, and the `.cu` files of directories, with their
/// module names.
fn resolve_sources(
    specs: &[SourceSpec],
    pkg_dir: &Path,
    invalid: &dyn Fn(String) -> WorkspaceError,
) -> Result<Vec<(PathBuf, String)>, WorkspaceError> {
    let mut sources = Vec::new();
    for spec in specs {
        let (path, module) = match spec {
            SourceSpec::Path(p) => (pkg_dir.join(p), None),
            SourceSpec::Named { path, module } => (pkg_dir.join(path), Some(module.clone())),
        };
        if let Some(module) = module
            .as_deref()
            .filter(|m| !crate::sources::is_module_name(m))
        {
            let suggestion = crate::sources::rust_identifier(module, false);
            let suggestion = if crate::sources::is_module_name(&suggestion) {
                suggestion
            } else {
                "scaling".to_owned()
            };
            return Err(invalid(format!(
                "sources: module = {module:?} is not a module name; name it with a Rust identifier (ASCII letters, digits and _), such as \"{suggestion}\": it names files in the output directory"
            )));
        }
        if path.is_dir() {
            if module.is_some() {
                return Err(invalid(format!(
                    "{}: a module name needs a single .cu file, not a directory",
                    path.display()
                )));
            }
            let found = crate::sources::sources_in(&path)
                .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
            sources.extend(
                found
                    .into_iter()
                    .map(|p| (p.clone(), crate::sources::module_name(&p))),
            );
        } else if path.is_file() {
            let module = module.unwrap_or_else(|| crate::sources::module_name(&path));
            sources.push((path, module));
        } else {
            return Err(invalid(format!(
                "source {} does not exist; fix the path (relative to {})",
                path.display(),
                pkg_dir.display()
            )));
        }
    }
    if sources.is_empty() {
        return Err(invalid(
            "sources names no .cu file; list files or directories holding them".to_owned(),
        ));
    }
    Ok(sources)
}

/// The `toolchain` table: each key a target, each value a toolchain (`"nvcc 12.4"`,
/// `"nvrtc 12.9"`), read as a profile's `[toolchain]` table is.
fn toolchain_pins(
    table: &BTreeMap<String, String>,
    invalid: &dyn Fn(String) -> WorkspaceError,
) -> Result<BTreeMap<fatkit_arch::Target, fatkit_arch::Pin>, WorkspaceError> {
    let mut pins = BTreeMap::new();
    for (target, pin) in table {
        let at = |why: String| invalid(format!("toolchain.{target} = {pin:?}: {why}"));
        let t = target.parse::<fatkit_arch::Target>().map_err(|e| {
            at(format!(
                "{e}; a key is a target of the package's profile, such as sm_70"
            ))
        })?;
        let p = pin
            .parse::<fatkit_arch::Pin>()
            .map_err(|e| at(e.to_string()))?;
        pins.insert(t, p);
    }
    Ok(pins)
}

/// The `kernels` table: each pattern's declaration, targets or exclusions.
fn kernel_declarations(
    raw: BTreeMap<String, KernelOverride>,
    invalid: &dyn Fn(String) -> WorkspaceError,
) -> Result<Vec<(String, KernelDeclaration)>, WorkspaceError> {
    let mut kernels = Vec::new();
    for (pattern, o) in raw {
        let declaration = match (o.targets, o.exclude) {
            (Some(TargetsValue::One(t)), None) => KernelDeclaration::Targets(t),
            (Some(TargetsValue::List(l)), None) => KernelDeclaration::Targets(l.join(" ")),
            (None, Some(e)) => KernelDeclaration::Exclude(e),
            _ => {
                return Err(invalid(format!(
                    "kernels.\"{pattern}\": give either targets (e.g. {{ targets = \"sm_80+\" }}) or exclude (e.g. {{ exclude = [\"sm_70\"] }})"
                )))
            }
        };
        kernels.push((pattern, declaration));
    }
    Ok(kernels)
}

/// `vendor`: a directory of the package, relative to it, holding no source and none of
/// cargo's own.
fn vendor_dir(
    vendor: Option<&str>,
    pkg_dir: &Path,
    sources: &[(PathBuf, String)],
    invalid: &dyn Fn(String) -> WorkspaceError,
) -> Result<Option<PathBuf>, WorkspaceError> {
    Ok(match vendor {
        None => None,
        Some(dir) => {
            let rel = Path::new(dir);
            let inside = !dir.is_empty()
                && rel
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)));
            if !inside {
                return Err(invalid(format!(
                    "vendor = \"{dir}\": a directory inside the package, relative to it (e.g. \"kernels/prebuilt\"), which the .crate ships"
                )));
            }
            if sources
                .iter()
                .any(|(s, _)| s.parent() == Some(&pkg_dir.join(rel)))
            {
                return Err(invalid(format!(
                    "vendor = \"{dir}\" holds sources; give the prebuilt modules a directory of their own (e.g. \"kernels/prebuilt\")"
                )));
            }
            if let Some(why) = vendor_refusal(pkg_dir, rel) {
                return Err(invalid(format!(
                    "vendor = \"{dir}\" {why}; give the prebuilt modules a directory of their own in this package (e.g. \"kernels/prebuilt\")"
                )));
            }
            Some(pkg_dir.join(rel))
        }
    })
}

/// Cargo's own directories of a package, and git's: Rust sources (a generated `main.rs` or
/// `<m>.rs` there is built as a binary, a test, an example), build outputs, the repository.
/// No vendor directory lies in one, at any depth (`src/bin/x`, `tests/x`, `target/x`).
const CARGO_DIRS: &[&str] = &["src", "examples", "tests", "benches", "target", ".git"];

/// Why `rel` (relative, inside `pkg_dir`) cannot be a vendor directory, if it cannot: one of
/// Cargo's directories, inside another package (a directory on the way holds a
/// `Cargo.toml`), or reached through a symbolic link.
fn vendor_refusal(pkg_dir: &Path, rel: &Path) -> Option<String> {
    let first = rel
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy());
    let in_cargos = first.is_some_and(|f| CARGO_DIRS.contains(&f.as_ref()));
    if in_cargos || rel.components().any(|c| c.as_os_str() == ".git") {
        return Some(format!(
            "is one of Cargo's directories or lies in one ({}, at any depth), where the crate's own files live",
            CARGO_DIRS.join(", ")
        ));
    }
    let mut at = pkg_dir.to_path_buf();
    for part in rel.components() {
        at.push(part);
        let Ok(meta) = std::fs::symlink_metadata(&at) else {
            // Not there yet: the build creates it, and nothing below it exists.
            return None;
        };
        if meta.file_type().is_symlink() {
            return Some(format!(
                "is reached through the symbolic link {}, which another package or directory may share",
                at.display()
            ));
        }
        if at.join("Cargo.toml").exists() {
            return Some(format!(
                "lies in the package of {}, whose build would remove these modules as its own orphans",
                at.join("Cargo.toml").display()
            ));
        }
    }
    None
}

/// The launchers a crate's metadata may name: programs made to run a compiler command they are
/// given, found on `PATH` (or, for sccache, where `toolchain install --sccache` puts it). A
/// crate's files are data: its metadata names no program of its own, no path and no other
/// program; the user names one with `--launcher` or `FATKIT_LAUNCHER`.
pub const KNOWN_LAUNCHERS: [&str; 3] = ["sccache", "ccache", "buildcache"];

/// A `launcher` metadata value, checked: one of [`KNOWN_LAUNCHERS`], or empty for none.
pub fn metadata_launcher(value: Option<String>) -> Result<Option<String>, String> {
    match value {
        Some(v) if !v.trim().is_empty() && !KNOWN_LAUNCHERS.contains(&v.trim()) => Err(format!(
            "launcher = {v:?}: a crate's metadata names a known launcher ({}), never a program or a path of its own; to run another program, give it with --launcher or FATKIT_LAUNCHER",
            KNOWN_LAUNCHERS.join(", ")
        )),
        other => Ok(other),
    }
}

/// The table less `launcher`, which decides where compiles run, not what they make: changing
/// it leaves prebuilt modules current.
fn without_launcher(config: &serde_json::Value) -> serde_json::Value {
    let mut config = config.clone();
    if let Some(table) = config.as_object_mut() {
        // How it is built and what it is held to, not what is built.
        for key in ["launcher", "budget", "for"] {
            table.remove(key);
        }
    }
    config
}

/// `value` as JSON with every object's keys sorted: the same text however the table was read.
pub(crate) fn canonical_json(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| {
                    format!(
                        "{}:{}",
                        serde_json::Value::String(k.clone()),
                        map.get(k).map_or_else(String::new, canonical_json)
                    )
                })
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        serde_json::Value::Array(items) => {
            let items: Vec<String> = items.iter().map(canonical_json).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}
