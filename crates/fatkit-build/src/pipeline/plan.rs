//! Planning a build: which toolchain builds each target ([`route`], or a [`PlanError`] before
//! anything compiles), the modules and their jobs (one per source and target), and the
//! arguments of each job, which are part of its cache key.

use std::fmt;
use std::path::{Path, PathBuf};

use fatkit_arch::profile::Profile;
use fatkit_arch::toolkit;
use fatkit_arch::{Compiler, ImageKind, Target, TargetSet};

use super::{BuildError, Request};
use crate::cache::{self, Cache};
pub use crate::sources::{module_name, sources_in};
use crate::toolchain::{Probe, Toolchain};

/// The targets no toolchain can build, found before anything compiles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanError {
    pub profile: String,
    pub unbuildable: Vec<Target>,
    /// The unbuildable targets the profile pins, with their pins.
    pub pins: Vec<(Target, fatkit_arch::Pin)>,
    /// `(toolchain, what it builds)`.
    pub toolchains: Vec<(String, TargetSet)>,
}

impl From<PlanError> for crate::BuildError {
    fn from(e: PlanError) -> crate::BuildError {
        crate::BuildError::Build(Box::new(e))
    }
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.unbuildable.iter().map(|t| t.to_string()).collect();
        if self.toolchains.is_empty() {
            return write!(
                f,
                "no CUDA toolchain found to build profile {}; run `cargo xtask toolchain install` (or build without --offline), set CUDA_HOME, or pass --nvcc",
                self.profile
            );
        }
        writeln!(
            f,
            "no toolchain found can build {} (profile {})",
            names.join(", "),
            self.profile
        )?;
        for (name, targets) in &self.toolchains {
            let cubins: Vec<String> = targets
                .cubins()
                .filter(|t| t.suffix == fatkit_arch::Suffix::None)
                .map(|t| t.to_string())
                .collect();
            writeln!(f, "  {name} builds {}", cubins.join(" "))?;
        }
        for (t, pin) in &self.pins {
            writeln!(
                f,
                "  {t} is pinned to {pin} by the profile's [toolchain] table, and no such toolchain was found"
            )?;
        }
        let mut fixes = Vec::new();
        for t in &self.unbuildable {
            let versions = toolkit::toolkits_for(*t);
            let range = match (versions.first(), versions.last()) {
                (Some(a), Some(b)) if a == b => format!("CUDA {a}"),
                (Some(a), Some(b)) => format!("CUDA {a} to {b}"),
                _ => "no known CUDA".to_owned(),
            };
            fixes.push(format!("{t} needs {range}"));
        }
        write!(
            f,
            "fix: {}; install such a toolkit and set CUDA_HOME (or pass --nvcc), or drop {} from the profile",
            fixes.join(", "),
            names.join(", ")
        )
    }
}

impl std::error::Error for PlanError {}

/// A source and its module name.
#[derive(Debug)]
pub(crate) struct Module {
    pub path: PathBuf,
    pub name: String,
    pub hash: blake3::Hash,
}

/// One compile: a module's source for one target, by one toolchain.
#[derive(Debug)]
pub(crate) struct Job {
    pub module: usize,
    pub target: Target,
    pub toolchain: usize,
    /// The arguments that decide the output besides the source (part of the cache key); for
    /// NVRTC, its whole option list.
    pub args: Vec<String>,
    pub source_key: String,
    pub object_key: Option<String>,
    /// Seconds the last compile of this job took, if known.
    pub last_seconds: Option<f64>,
}

/// Routes every target of the profile to the newest toolchain that builds it (nvcc before
/// NVRTC of the same version), or to the newest one matching the profile's pin for it.
pub fn route(
    profile: &Profile,
    toolchains: &[(Toolchain, Probe)],
) -> Result<Vec<(Target, usize)>, PlanError> {
    let mut order: Vec<usize> = (0..toolchains.len()).collect();
    order.sort_by_key(|&i| toolchains.get(i).map(|(_, p)| p.preference()));
    let mut routes = Vec::new();
    let mut unbuildable = Vec::new();
    for target in profile.all_targets().iter() {
        let pin = profile.pins.get(&target);
        let chosen = order.iter().copied().find(|&i| {
            toolchains.get(i).is_some_and(|(_, p)| {
                p.targets.contains(target)
                    && profile.min_cuda.is_none_or(|min| p.version >= min)
                    && pin.is_none_or(|pin| pin.matches(p.compiler, p.version))
            })
        });
        match chosen {
            Some(i) => routes.push((target, i)),
            None => unbuildable.push(target),
        }
    }
    if unbuildable.is_empty() && !toolchains.is_empty() {
        return Ok(routes);
    }
    Err(PlanError {
        profile: profile.name.clone(),
        pins: unbuildable
            .iter()
            .filter_map(|t| Some((*t, *profile.pins.get(t)?)))
            .collect(),
        unbuildable,
        toolchains: toolchains
            .iter()
            .map(|(t, p)| (t.describe(Some(p)), p.targets.clone()))
            .collect(),
    })
}

/// The targets a build routes to NVRTC, and the (first) NVRTC toolchain that builds them.
pub(crate) struct NvrtcRoute {
    pub toolchain: String,
    pub targets: TargetSet,
}

/// Where the routes send targets to NVRTC; `None` when nothing is built by it.
pub(crate) fn nvrtc_route(req: &Request, routes: &[(Target, usize)]) -> Option<NvrtcRoute> {
    let mut found: Option<NvrtcRoute> = None;
    for &(target, tc) in routes {
        let Some((t, p)) = req.toolchains.get(tc) else {
            continue;
        };
        if p.compiler != Compiler::Nvrtc {
            continue;
        }
        found
            .get_or_insert_with(|| NvrtcRoute {
                toolchain: t.short(p),
                targets: TargetSet::new(),
            })
            .targets
            .insert(target);
    }
    found
}

/// What NVRTC cannot do for a build that routes targets to it, found before anything
/// compiles: a flag with no NVRTC equivalent, or host code in a source (a `<<<...>>>` launch,
/// a host-only header, `main`). One message: the construct, the targets and toolchain, the fix.
pub(crate) fn nvrtc_refusals(
    req: &Request,
    modules: &[Module],
    route: &NvrtcRoute,
) -> Result<(), BuildError> {
    let name = &route.toolchain;
    let targets: Vec<Target> = route.targets.iter().collect();
    let list = route.targets.to_string();
    let fix = nvrtc_fix(req, &targets, &list);
    if let Err(u) = req.flags.nvrtc_args() {
        return Err(BuildError::Input(format!(
            "flag '{}': {name} builds {list} (profile {}) and cannot honour it: {}; {fix}, or remove the flag",
            u.flag, req.profile.name, u.why
        )));
    }
    for m in modules {
        let mut files = vec![m.path.clone()];
        files.extend(crate::nvrtc::scan_includes(
            &m.path,
            &req.header_search(&m.path),
        ));
        for file in files {
            // Bounded: a header larger than any real one (generated data) is left to NVRTC,
            // which reports host code itself; the check only says it sooner.
            let Ok(text) = fatkit_audit::read::read_limited(&file, HOST_CODE_SCAN_LIMIT) else {
                continue;
            };
            if let Some((line, what)) = host_code(&text) {
                return Err(BuildError::Input(format!(
                    "{}:{line}: {what}, which NVRTC cannot compile; {name} builds {list} for profile {} and NVRTC compiles device code only; {fix}, or move the host code out of the kernel source",
                    file.display(),
                    req.profile.name
                )));
            }
        }
    }
    Ok(())
}

/// The ways out of an NVRTC refusal: an nvcc found that builds those targets (pin it), else
/// installing one, else dropping the targets.
fn nvrtc_fix(req: &Request, targets: &[Target], list: &str) -> String {
    let nvcc = req.toolchains.iter().rev().find(|(_, p)| {
        p.compiler == Compiler::Nvcc && targets.iter().all(|t| p.targets.contains(*t))
    });
    match nvcc {
        Some((t, p)) => format!(
            "fix: build {list} with {} by pinning it in the profile ([toolchain] {} = \"nvcc {}\")",
            t.describe(Some(p)),
            targets.first().map_or_else(String::new, |t| t.to_string()),
            p.version
        ),
        None => format!(
            "fix: install a CUDA toolkit whose nvcc builds {list} (CUDA 12.x for sm_70), set CUDA_HOME or pass --nvcc, and pin it in the profile ([toolchain] {} = \"nvcc 12\"); or drop {list} from the profile",
            targets.first().map_or_else(String::new, |t| t.to_string())
        ),
    }
}

/// Headers only host code includes: NVRTC has none of them.
const HOST_ONLY_HEADERS: &[&str] = &[
    "iostream",
    "fstream",
    "sstream",
    "iomanip",
    "vector",
    "string",
    "map",
    "unordered_map",
    "set",
    "unordered_set",
    "list",
    "deque",
    "thread",
    "mutex",
    "condition_variable",
    "future",
    "memory",
    "regex",
    "filesystem",
    "chrono",
    "random",
    "stdexcept",
    "exception",
    "cublas_v2.h",
    "cublas.h",
    "cufft.h",
    "curand.h",
    "cudnn.h",
    "nccl.h",
    "thrust/host_vector.h",
];

/// The largest source or header the host-code check reads.
pub(crate) const HOST_CODE_SCAN_LIMIT: u64 = 64 << 20;

/// The first host-only construct of a source that NVRTC would see: outside comments, string
/// literals and the blocks NVRTC skips (`#ifndef __CUDACC_RTC__`, `#ifndef __CUDA_ARCH__` and
/// their `#if !defined(..)` forms, the `#else` of `#ifdef __CUDACC_RTC__`): `(line, what)`.
pub(crate) fn host_code(text: &[u8]) -> Option<(usize, String)> {
    let code = strip_comments_and_strings(text);
    // One entry per open #if: whether NVRTC skips the current branch of it.
    let mut skipped: Vec<Option<bool>> = Vec::new();
    for (idx, line) in code.split(|&b| b == b'\n').enumerate() {
        let line = String::from_utf8_lossy(line);
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix('#') {
            let directive = rest.trim_start();
            let compact: String = directive.chars().filter(|c| !c.is_whitespace()).collect();
            let nvrtc_macro = |s: &str| s.contains("__CUDACC_RTC__") || s.contains("__CUDA_ARCH__");
            if compact.starts_with("ifndef") || compact.starts_with("if!defined") {
                // Skipped under NVRTC when it tests for NVRTC (or device compilation) alone.
                skipped.push(Some(
                    nvrtc_macro(&compact) && !compact.contains("||") && !compact.contains("&&"),
                ));
            } else if compact.starts_with("ifdef") || compact.starts_with("ifdefined") {
                skipped.push(Some(false).filter(|_| nvrtc_macro(&compact)).or(None));
            } else if compact.starts_with("if") {
                skipped.push(None);
            } else if compact.starts_with("else") {
                if let Some(Some(s)) = skipped.last_mut() {
                    *s = !*s;
                }
            } else if compact.starts_with("elif") {
                if let Some(last) = skipped.last_mut() {
                    *last = None;
                }
            } else if compact.starts_with("endif") {
                skipped.pop();
            }
            if skipped.contains(&Some(true)) {
                continue;
            }
            if let Some(name) = directive.strip_prefix("include") {
                let name = name
                    .trim()
                    .trim_matches(|c| c == '<' || c == '>' || c == '"');
                let host = HOST_ONLY_HEADERS.contains(&name)
                    || ["torch/", "ATen/", "c10/", "pybind11/"]
                        .iter()
                        .any(|p| name.starts_with(p));
                if host {
                    return Some((idx + 1, format!("#include <{name}> is a host-only header")));
                }
            }
            continue;
        }
        if skipped.contains(&Some(true)) {
            continue;
        }
        if let Some(at) = line.find("<<<") {
            if line.get(at..).is_some_and(|r| r.contains(">>>")) {
                return Some((
                    idx + 1,
                    "a kernel launch (<<<...>>>) is host code".to_owned(),
                ));
            }
        }
        let words: Vec<&str> = line
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '('))
            .filter(|w| !w.is_empty())
            .collect();
        if words.windows(2).any(
            |w| matches!(w, [ty, f] if (*ty == "int" || *ty == "void") && f.starts_with("main(")),
        ) {
            return Some((idx + 1, "main() is host code".to_owned()));
        }
    }
    None
}

/// The source with comments and the contents of string and character literals blanked
/// (newlines kept, so line numbers stay).
fn strip_comments_and_strings(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    let at = |i: usize| text.get(i).copied().unwrap_or(0);
    while i < text.len() {
        let c = at(i);
        if c == b'/' && at(i + 1) == b'/' {
            while i < text.len() && at(i) != b'\n' {
                i += 1;
            }
        } else if c == b'/' && at(i + 1) == b'*' {
            i += 2;
            while i < text.len() && !(at(i) == b'*' && at(i + 1) == b'/') {
                if at(i) == b'\n' {
                    out.push(b'\n');
                }
                i += 1;
            }
            i += 2;
        } else if c == b'"' || c == b'\'' {
            out.push(c);
            i += 1;
            while i < text.len() && at(i) != c && at(i) != b'\n' {
                if at(i) == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            out.push(c);
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `-gencode arch=compute_XY,code=<target>`: the one place nvcc's per-target flag is written
/// (the pipeline, the `cc` helper and the layout check all use it).
pub fn gencode(target: Target) -> [String; 2] {
    let virt = target.with_kind(ImageKind::Ptx);
    ["-gencode".to_owned(), format!("arch={virt},code={target}")]
}

/// The modules of a request: each source canonicalised, hashed and named; two sources making
/// one module name are refused.
pub(crate) fn modules(req: &Request) -> Result<Vec<Module>, BuildError> {
    let mut modules = Vec::new();
    for path_given in &req.sources {
        let path = std::fs::canonicalize(path_given).map_err(super::io_err(path_given))?;
        let hash = cache::hash_file(&path).ok_or_else(|| BuildError::Io {
            path: path.clone(),
            source: std::io::Error::other("cannot read the source"),
        })?;
        let name = req.module_name_of(path_given, &path);
        if !crate::sources::is_module_name(&name) {
            return Err(BuildError::Input(format!(
                "{}: module name {name:?} is not a Rust identifier (ASCII letters, digits and _); name the module with one",
                path.display()
            )));
        }
        if modules.iter().any(|m: &Module| m.name == name) {
            return Err(BuildError::Input(format!(
                "two sources make module '{name}': rename one of them ({})",
                path.display()
            )));
        }
        modules.push(Module { path, name, hash });
    }
    Ok(modules)
}

/// One job per (module, routed target), each looked up in the cache. `std_headers`: the
/// directory of the standard headers NVRTC jobs get.
pub(crate) fn jobs(
    req: &Request,
    modules: &[Module],
    routes: &[(Target, usize)],
    std_headers: Option<&Path>,
) -> Vec<Job> {
    let mut jobs = Vec::new();
    // Whether an include-path miss now exists, asked once per file per build.
    let mut seen: std::collections::HashMap<PathBuf, bool> = std::collections::HashMap::new();
    let mut exists = |p: &Path| *seen.entry(p.to_owned()).or_insert_with(|| p.exists());
    let nvcc_env = crate::cache::env_of(crate::cache::NVCC_ENV);
    let root = std::fs::canonicalize(&req.root).unwrap_or_else(|_| req.root.clone());
    for (module_idx, m) in modules.iter().enumerate() {
        for &(target, tc) in routes {
            let Some((toolchain, probe)) = req.toolchains.get(tc) else {
                continue;
            };
            let args = job_args(target, req, toolchain, probe, &m.path, std_headers);
            // What nvcc reads from the environment decides its output as its arguments do.
            let mut key_args = args.clone();
            if probe.compiler == Compiler::Nvcc {
                key_args.extend(nvcc_env.iter().cloned());
            }
            // The name the compiler is given for the source, which internal symbols are named
            // after (compile::source_name_args, and NVRTC's program name).
            key_args.push(format!(
                "source-name={}",
                relative(&m.path, Some(&root)).display()
            ));
            let source_key = Cache::source_key(
                &probe.identity,
                &target.to_string(),
                &key_args,
                &m.path,
                &m.hash,
            );
            let entry = req.cache.source_entry(&source_key);
            let object_key = entry
                .as_ref()
                .filter(|e| !crate::cache::shadowed(e, &mut exists))
                .and_then(|e| Cache::object_key(&source_key, &e.deps));
            jobs.push(Job {
                module: module_idx,
                target,
                toolchain: tc,
                args,
                source_key,
                object_key,
                last_seconds: entry.map(|e| e.seconds),
            });
        }
    }
    jobs
}

/// The arguments that decide a job's output besides the source: part of its cache key.
fn job_args(
    target: Target,
    req: &Request,
    toolchain: &Toolchain,
    probe: &Probe,
    source: &Path,
    std_headers: Option<&Path>,
) -> Vec<String> {
    match probe.compiler {
        Compiler::Nvcc => nvcc_args(req, target, None),
        Compiler::Nvrtc => nvrtc_args(target, req, source, std_headers, toolchain.include_dirs()),
    }
}

/// NVRTC's options: the architecture, the source's own directory (nvcc searches it for quoted
/// includes; NVRTC does not), the request's include directories, defines and flags (NVRTC's
/// spellings; [`nvrtc_refusals`] has refused those it lacks), `-default-device` (unannotated
/// functions are device functions: NVRTC compiles no host code, and nvcc's
/// `--expt-relaxed-constexpr` lets device code call constexpr ones), then fatkit's standard
/// headers (its `stdint.h` pre-included) and the toolchain's own.
pub(crate) fn nvrtc_args(
    target: Target,
    req: &Request,
    source: &Path,
    std_headers: Option<&Path>,
    toolkit: &[PathBuf],
) -> Vec<String> {
    let mut args = vec![format!("--gpu-architecture={target}")];
    if let Some(dir) = source.parent() {
        args.push(format!("-I{}", dir.display()));
    }
    args.extend(common_args(req));
    args.extend(req.flags.nvrtc_args().unwrap_or_default());
    args.push("-default-device".to_owned());
    args.extend(skip_defines(req, target));
    if let Some(dir) = std_headers {
        args.push(format!("-I{}", dir.display()));
        // fatkit's integer types first, whatever the source includes first: libcu++ (behind
        // <math.h>, <type_traits>, <cuda/std/...>) would otherwise define its own.
        args.push(format!("--pre-include={}", dir.join("stdint.h").display()));
    }
    args.extend(toolkit.iter().map(|d| format!("-I{}", d.display())));
    args
}

/// `-DFATKIT_SKIP_<kernel>` for every kernel excluded by name from `target`.
pub(crate) fn skip_defines(req: &Request, target: Target) -> Vec<String> {
    req.kernel_sets.skip_defines(target)
}

/// The arguments every compile of the request shares: include directories and defines.
pub(crate) fn common_args(req: &Request) -> Vec<String> {
    include_and_defines(req, None)
}

/// Include directories (relative to `base` where they lie under it) and defines.
pub(crate) fn include_and_defines(req: &Request, base: Option<&Path>) -> Vec<String> {
    let mut args: Vec<String> = req
        .include_dirs
        .iter()
        .map(|d| format!("-I{}", relative(d, base).display()))
        .collect();
    args.extend(req.defines.iter().map(|d| format!("-D{d}")));
    args
}

/// `path` relative to `base` when it lies under it (`.` for `base` itself), else as it is.
pub(crate) fn relative<'a>(path: &'a Path, base: Option<&Path>) -> std::borrow::Cow<'a, Path> {
    match base.and_then(|b| path.strip_prefix(b).ok()) {
        Some(rel) if rel.as_os_str().is_empty() => Path::new(".").into(),
        Some(rel) => rel.into(),
        None => path.into(),
    }
}

/// What decides an nvcc job's output besides the source: `-gencode`, include directories,
/// defines, flags and the kernels skipped for the target. With `base`, include directories
/// under it are written relative to it (a launcher's jobs run there, so that two checkouts
/// make the same command).
pub(crate) fn nvcc_args(req: &Request, target: Target, base: Option<&Path>) -> Vec<String> {
    let mut args = gencode(target).to_vec();
    args.extend(include_and_defines(req, base));
    args.extend(req.flags.nvcc_args());
    args.extend(skip_defines(req, target));
    args
}

#[cfg(test)]
mod tests;
