//! What NVRTC cannot build, found before anything compiles: the targets a build routes to it
//! ([`nvrtc_route`]), and what it cannot honour of a build that routes targets to it
//! ([`nvrtc_refusals`]: a flag with no NVRTC spelling, host code in a source, [`host_code`]).

use fatkit_arch::{Compiler, Target, TargetSet};

use super::super::{BuildError, Request};
use super::Module;

/// The targets a build routes to NVRTC, and the (first) NVRTC toolchain that builds them.
pub(crate) struct NvrtcRoute {
    pub toolchain: String,
    pub targets: TargetSet,
}

/// Where the routes send targets to NVRTC; `None` when nothing is built by it.
pub(crate) fn nvrtc_route(req: &Request, routes: &[(Target, usize)]) -> Option<NvrtcRoute> {
    let mut found: Option<NvrtcRoute> = None;
    for &(target, tc) in routes {
        let Some((t, p)) = req.with.toolchains.get(tc) else {
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
    if let Err(u) = req.ask.flags.nvrtc_args() {
        return Err(crate::refused::Refused::NvrtcFlag {
            flag: u.flag,
            nvrtc: name.to_string(),
            targets: list,
            profile: req.ask.profile.name.clone(),
            why: u.why.to_owned(),
            fix,
        }
        .into());
    }
    for m in modules {
        let mut files = vec![m.path.clone()];
        files.extend(
            fatkit_toolchain::nvrtc::scan_includes(&m.path, &req.ask.header_search(&m.path))
                .map_err(crate::refused::Refused::TooManyHeaders)?,
        );
        for file in files {
            // Bounded: a header larger than any real one (generated data) is left to NVRTC,
            // which reports host code itself; the check only says it sooner.
            let Ok(text) = fatkit_read::read_limited(&file, HOST_CODE_SCAN_LIMIT) else {
                continue;
            };
            if let Some((line, what)) = host_code(&text) {
                return Err(crate::refused::Refused::NvrtcHostCode {
                    file,
                    line,
                    what,
                    nvrtc: name.to_string(),
                    targets: list,
                    profile: req.ask.profile.name.clone(),
                    fix,
                }
                .into());
            }
        }
    }
    Ok(())
}

/// The ways out of an NVRTC refusal: an nvcc found that builds those targets (pin it), else
/// installing one, else dropping the targets.
fn nvrtc_fix(req: &Request, targets: &[Target], list: &str) -> String {
    let nvcc = req.with.toolchains.iter().rev().find(|(_, p)| {
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
