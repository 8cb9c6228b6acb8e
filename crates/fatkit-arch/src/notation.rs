//! Every spelling of a target list (docs/ARCH_RULES.md section 1), parsed and printed.
//!
//! | notation | example |
//! |---|---|
//! | [`Notation::Names`] | `sm_80 sm_90a compute_120` |
//! | [`Notation::Torch`] | `7.0;8.0;9.0a;12.0+PTX` (`TORCH_CUDA_ARCH_LIST`) |
//! | [`Notation::Cmake`] | `75-real;86;120-virtual`, `all`, `all-major`, `native` (`CUDA_ARCHITECTURES`) |
//! | [`Notation::Nvcc`] | `-gencode arch=compute_80,code=[sm_80,compute_80] -arch=sm_90` |

use std::fmt;

use crate::parse::ParseError;
use crate::target::split_suffix;
use crate::toolkit::{self, CudaVersion};
use crate::{Cc, ImageKind, Suffix, Target, TargetSet};

/// One of the spellings of a target list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notation {
    Names,
    Torch,
    Cmake,
    Nvcc,
}

impl Notation {
    pub const ALL: [Notation; 4] = [
        Notation::Names,
        Notation::Torch,
        Notation::Cmake,
        Notation::Nvcc,
    ];
}

/// What lists may need to expand: `all` and `all-major` need a toolkit version,
/// `native` the compute capabilities of the GPUs present.
#[derive(Clone, Copy, Debug, Default)]
pub struct Context<'a> {
    pub toolkit: Option<CudaVersion>,
    pub native: Option<&'a [Cc]>,
    /// Accept targets no known toolkit builds (`sm_91`). Off by default: they are typos.
    pub allow_unknown: bool,
}

/// A target together with where it was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spanned {
    pub target: Target,
    pub offset: usize,
    pub len: usize,
}

/// Parses a list written in `notation`.
pub fn parse_list(
    input: &str,
    notation: Notation,
    ctx: &Context<'_>,
) -> Result<TargetSet, ParseError> {
    Ok(parse_spanned(input, Some(notation), ctx)?
        .iter()
        .map(|s| s.target)
        .collect())
}

/// Parses a list in any notation, telling them apart element by element (nvcc flags when the
/// input has any).
pub fn parse_any(input: &str, ctx: &Context<'_>) -> Result<TargetSet, ParseError> {
    Ok(parse_spanned(input, None, ctx)?
        .iter()
        .map(|s| s.target)
        .collect())
}

/// Parses a list, keeping where each target came from. `None` guesses the notation.
pub fn parse_spanned(
    input: &str,
    notation: Option<Notation>,
    ctx: &Context<'_>,
) -> Result<Vec<Spanned>, ParseError> {
    let looks_like_nvcc = input.split_whitespace().any(|w| w.starts_with('-'));
    let out = match notation {
        Some(Notation::Nvcc) => parse_nvcc(input, ctx)?,
        None if looks_like_nvcc => parse_nvcc(input, ctx)?,
        _ => {
            let mut out = Vec::new();
            for (offset, element) in elements(input) {
                let parsed = match notation {
                    Some(Notation::Names) => element_name(element),
                    Some(Notation::Torch) => element_torch(element),
                    Some(Notation::Cmake) => element_cmake(element, ctx),
                    Some(Notation::Nvcc) | None => element_any(element, ctx),
                };
                let targets = parsed.map_err(|reason| ParseError::at(element, offset, reason))?;
                out.extend(targets.iter().map(|&target| Spanned {
                    target,
                    offset,
                    len: element.len(),
                }));
            }
            out
        }
    };
    if !ctx.allow_unknown {
        if let Some(bad) = out.iter().find(|s| !toolkit::is_known(s.target)) {
            let element = input
                .get(bad.offset..bad.offset + bad.len)
                .unwrap_or_default();
            let mut err = ParseError::at(
                element,
                bad.offset,
                format!("unknown target {}: no CUDA toolkit builds it", bad.target),
            );
            err.suggestions = toolkit::suggest(bad.target);
            return Err(err);
        }
    }
    Ok(out)
}

/// Splits on whitespace, `;` and `,`, yielding `(byte offset, element)`.
fn elements(input: &str) -> impl Iterator<Item = (usize, &str)> {
    let is_sep = |c: char| c.is_whitespace() || c == ';' || c == ',';
    let mut rest = input;
    let mut base = 0;
    std::iter::from_fn(move || {
        let skip = rest.len() - rest.trim_start_matches(is_sep).len();
        base += skip;
        rest = rest.get(skip..)?;
        if rest.is_empty() {
            return None;
        }
        let len = rest.find(is_sep).unwrap_or(rest.len());
        let (element, tail) = rest.split_at(len);
        let offset = base;
        base += len;
        rest = tail;
        Some((offset, element))
    })
}

fn element_name(s: &str) -> Result<Vec<Target>, String> {
    Target::parse_name(s).map(|t| vec![t]).map_err(|e| e.reason)
}

/// `8.6`, `9.0a`, `12.0+PTX`.
fn element_torch(s: &str) -> Result<Vec<Target>, String> {
    const FORM: &str =
        "expected MAJOR.MINOR with an optional a/f suffix and +PTX, e.g. 8.6, 9.0a or 12.0+PTX";
    let lower = s.to_ascii_lowercase();
    let (arch, with_ptx) = match lower.strip_suffix("+ptx") {
        Some(arch) => (arch, true),
        None => (lower.as_str(), false),
    };
    let (version, suffix) = split_suffix(arch);
    let cc: Cc = version.parse().map_err(|_| FORM.to_owned())?;
    let cubin = Target::checked(ImageKind::Cubin, cc, suffix)?;
    let mut out = vec![cubin];
    if with_ptx {
        out.push(cubin.with_kind(ImageKind::Ptx));
    }
    Ok(out)
}

/// `86`, `86-real`, `86-virtual`, `90a`, `all`, `all-major`, `native`.
fn element_cmake(s: &str, ctx: &Context<'_>) -> Result<Vec<Target>, String> {
    const FORM: &str = "expected a CMake architecture such as 86, 86-real, 120-virtual, 90a, all, all-major or native";
    let lower = s.to_ascii_lowercase();
    if let Some(expanded) = expand_keyword(&lower, ctx)? {
        return Ok(expanded);
    }
    let (arch, kinds): (&str, &[ImageKind]) = if let Some(a) = lower.strip_suffix("-real") {
        (a, &[ImageKind::Cubin])
    } else if let Some(a) = lower.strip_suffix("-virtual") {
        (a, &[ImageKind::Ptx])
    } else {
        (&lower, &[ImageKind::Cubin, ImageKind::Ptx])
    };
    let (digits, suffix) = split_suffix(arch);
    let cc = Cc::from_digits(digits).ok_or_else(|| FORM.to_owned())?;
    kinds
        .iter()
        .map(|&kind| Target::checked(kind, cc, suffix).map_err(str::to_owned))
        .collect()
}

/// `all`, `all-major` and `native`, shared by CMake and nvcc.
fn expand_keyword(word: &str, ctx: &Context<'_>) -> Result<Option<Vec<Target>>, String> {
    let needs_toolkit = |w: &str| {
        format!("'{w}' depends on the toolkit; say which CUDA version to expand it for (e.g. min_cuda = \"13.0\" in a profile)")
    };
    let set = match word {
        "all" => toolkit::all_targets(ctx.toolkit.ok_or_else(|| needs_toolkit(word))?),
        "all-major" => toolkit::all_major_targets(ctx.toolkit.ok_or_else(|| needs_toolkit(word))?),
        "native" => {
            let ccs = ctx.native.ok_or_else(|| {
                "'native' means the GPUs of this machine, and none is known here; list the targets instead".to_owned()
            })?;
            ccs.iter()
                .map(|&cc| Target::new(ImageKind::Cubin, cc, Suffix::None))
                .collect()
        }
        _ => return Ok(None),
    };
    Ok(Some(set.iter().collect()))
}

/// Any single element: a name, a Torch `X.Y`, or a CMake number.
fn element_any(s: &str, ctx: &Context<'_>) -> Result<Vec<Target>, String> {
    let lower = s.to_ascii_lowercase();
    if lower.starts_with("sm_") || lower.starts_with("compute_") {
        element_name(s)
    } else if lower.contains('.') {
        element_torch(s)
    } else if lower.starts_with(|c: char| c.is_ascii_digit())
        || expand_keyword(&lower, ctx)?.is_some()
    {
        element_cmake(s, ctx)
    } else {
        Err(
            "expected a target: sm_90, compute_120, 8.6+PTX, 86-real or an nvcc -gencode flag"
                .to_owned(),
        )
    }
}

/// nvcc flags: `-gencode arch=compute_XY,code=[sm_XY,compute_XY]` (also `-gencode=...`,
/// `--generate-code`), `-arch=sm_XY` (cubin + PTX), `-arch=compute_XY` (PTX), `-code=...`.
fn parse_nvcc(input: &str, ctx: &Context<'_>) -> Result<Vec<Spanned>, ParseError> {
    let tokens: Vec<(usize, &str)> = whitespace_tokens(input).collect();
    let mut out = Vec::new();
    let mut arch: Option<(usize, &str)> = None;
    let mut code: Option<(usize, &str)> = None;
    let mut idx = 0;
    while let Some(&(offset, token)) = tokens.get(idx) {
        idx += 1;
        let (flag, inline) = match token.split_once('=') {
            Some((flag, value)) if flag.starts_with('-') => (flag, Some(value)),
            _ => (token, None),
        };
        let mut value = || -> Result<(usize, &str), ParseError> {
            if let Some(v) = inline {
                return Ok((offset + flag.len() + 1, v));
            }
            let next = tokens.get(idx).copied();
            idx += 1;
            next.ok_or_else(|| ParseError::at(token, offset, format!("{flag} needs a value")))
        };
        match flag {
            "-gencode" | "--generate-code" => {
                let (at, v) = value()?;
                let targets = gencode(v).map_err(|reason| ParseError::at(v, at, reason))?;
                out.extend(targets.into_iter().map(|target| Spanned { target, offset: at, len: v.len() }));
            }
            "-arch" | "--gpu-architecture" => arch = Some(value()?),
            "-code" | "--gpu-code" => code = Some(value()?),
            _ => {
                return Err(ParseError::at(
                    token,
                    offset,
                    "not a target flag; expected -gencode, --generate-code, -arch, --gpu-architecture, -code or --gpu-code",
                ))
            }
        }
    }
    match (arch, code) {
        (Some((at, a)), code) => {
            let targets = arch_flag(a, code.map(|(_, c)| c), ctx)
                .map_err(|reason| ParseError::at(a, at, reason))?;
            out.extend(targets.into_iter().map(|target| Spanned {
                target,
                offset: at,
                len: a.len(),
            }));
        }
        (None, Some((at, c))) => {
            return Err(ParseError::at(c, at, "-code needs an -arch to go with it"))
        }
        (None, None) => {}
    }
    Ok(out)
}

fn whitespace_tokens(input: &str) -> impl Iterator<Item = (usize, &str)> {
    input
        .split_whitespace()
        .map(move |w| (w.as_ptr() as usize - input.as_ptr() as usize, w))
}

fn unquote(s: &str) -> &str {
    let s = s.trim_matches(|c| c == '"' || c == '\'');
    s.strip_prefix(['[', '{'])
        .and_then(|s| s.strip_suffix([']', '}']))
        .unwrap_or(s)
}

/// `arch=compute_80,code=[sm_80,compute_80]`.
fn gencode(value: &str) -> Result<Vec<Target>, String> {
    const FORM: &str = "expected arch=compute_XY,code=sm_XY (or code=[sm_XY,compute_XY])";
    let value = value.trim_matches(|c| c == '"' || c == '\'');
    let (arch, code) = value.split_once(',').ok_or(FORM)?;
    let arch = arch.strip_prefix("arch=").ok_or(FORM)?;
    let code = code.strip_prefix("code=").ok_or(FORM)?;
    let virt = Target::parse_name(unquote(arch)).map_err(|e| e.reason)?;
    if !virt.is_ptx() {
        return Err(format!(
            "arch= takes a virtual architecture; write compute_{}{}",
            virt.cc.digits(),
            virt.suffix.as_str()
        ));
    }
    codes(virt, unquote(code))
}

fn codes(virt: Target, list: &str) -> Result<Vec<Target>, String> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let t = Target::parse_name(name).map_err(|e| e.reason)?;
        let compatible = match (t.kind, t.suffix) {
            (ImageKind::Ptx, _) => t == virt,
            (ImageKind::Cubin, suffix) if suffix != virt.suffix => false,
            (ImageKind::Cubin, Suffix::Arch) => t.cc == virt.cc,
            (ImageKind::Cubin, Suffix::Family) => t.cc.major == virt.cc.major && t.cc >= virt.cc,
            (ImageKind::Cubin, Suffix::None) => t.cc >= virt.cc,
        };
        if !compatible {
            return Err(format!("code={t} cannot be generated from arch={virt}"));
        }
        out.push(t);
    }
    if out.is_empty() {
        return Err("code= lists no target".to_owned());
    }
    Ok(out)
}

/// `-arch=X [-code=Y]`.
fn arch_flag(arch: &str, code: Option<&str>, ctx: &Context<'_>) -> Result<Vec<Target>, String> {
    let arch = unquote(arch);
    if let Some(expanded) = expand_keyword(&arch.to_ascii_lowercase(), ctx)? {
        return Ok(expanded);
    }
    let t = Target::parse_name(arch).map_err(|e| e.reason)?;
    let virt = t.with_kind(ImageKind::Ptx);
    match (code, t.kind) {
        (Some(code), _) => codes(virt, unquote(code)),
        (None, ImageKind::Cubin) => Ok(vec![t, virt]),
        (None, ImageKind::Ptx) => Ok(vec![virt]),
    }
}

/// A list that cannot be written in a notation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderError {
    pub target: Target,
    pub reason: String,
}

impl fmt::Display for RenderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.target, self.reason)
    }
}

impl std::error::Error for RenderError {}

/// Groups a set by architecture: `(cubin target of that arch, has cubin, has PTX)`.
fn by_arch(set: &TargetSet) -> Vec<(Target, bool, bool)> {
    let mut out: Vec<(Target, bool, bool)> = Vec::new();
    for t in set.iter() {
        let base = t.with_kind(ImageKind::Cubin);
        if out.last().is_none_or(|last| last.0 != base) {
            out.push((base, false, false));
        }
        if let Some(last) = out.last_mut() {
            match t.kind {
                ImageKind::Cubin => last.1 = true,
                ImageKind::Ptx => last.2 = true,
            }
        }
    }
    out
}

/// Writes `set` in `notation`; the result parses back to the same set.
pub fn render(set: &TargetSet, notation: Notation) -> Result<String, RenderError> {
    let arch_name = |t: Target| format!("{}{}", t.cc.digits(), t.suffix.as_str());
    let mut parts = Vec::new();
    for (t, cubin, ptx) in by_arch(set) {
        let virt = t.with_kind(ImageKind::Ptx);
        let part = match (notation, cubin, ptx) {
            (Notation::Names, ..) => return Ok(set.to_string()),
            (Notation::Torch, true, true) => format!("{}{}+PTX", t.cc, t.suffix.as_str()),
            (Notation::Torch, true, false) => format!("{}{}", t.cc, t.suffix.as_str()),
            (Notation::Torch, false, _) => {
                return Err(RenderError {
                    target: virt,
                    reason: format!(
                        "TORCH_CUDA_ARCH_LIST cannot ask for PTX alone; {}+PTX adds the cubin too",
                        t.cc
                    ),
                })
            }
            (Notation::Cmake, true, true) => arch_name(t),
            (Notation::Cmake, true, false) => format!("{}-real", arch_name(t)),
            (Notation::Cmake, false, _) => format!("{}-virtual", arch_name(t)),
            (Notation::Nvcc, true, true) => format!("-gencode arch={virt},code=[{t},{virt}]"),
            (Notation::Nvcc, true, false) => format!("-gencode arch={virt},code={t}"),
            (Notation::Nvcc, false, _) => format!("-gencode arch={virt},code={virt}"),
        };
        parts.push(part);
    }
    Ok(match notation {
        Notation::Names => set.to_string(),
        Notation::Torch | Notation::Cmake => parts.join(";"),
        Notation::Nvcc => parts.join(" "),
    })
}

#[cfg(test)]
mod tests;
