//! The arguments of a compile, as the compiler is given them: `-gencode`, the module's
//! `__CUDA_ARCH_LIST__`, include directories and defines, flags in each compiler's spelling,
//! the kernels a target skips, paths relative to the schedule's base. The schedule makes every
//! job's and every call's list with these; nothing after it does.

use std::path::{Path, PathBuf};

use fatkit_arch::{Compiler, ImageKind, Target};
use fatkit_toolchain::{Probe, Toolchain};

use super::Module;
use crate::pipeline::Request;

/// `-ccbin <host compiler>` where the probe chose one for nvcc.
pub(crate) fn ccbin_args(probe: &Probe) -> Vec<String> {
    match probe.host.as_ref().and_then(|h| h.ccbin.as_ref()) {
        Some(ccbin) => vec!["-ccbin".to_owned(), ccbin.display().to_string()],
        None => Vec::new(),
    }
}

/// `-gencode arch=compute_XY,code=<target>`: the one place nvcc's per-target flag is written
/// (the pipeline, the `cc` helper and the layout check all use it).
pub fn gencode(target: Target) -> [String; 2] {
    let virt = target.with_kind(ImageKind::Ptx);
    ["-gencode".to_owned(), format!("arch={virt},code={target}")]
}

/// `__CUDA_ARCH_LIST__` of a module built for the targets of `profile` (those of its source's
/// declaration `only`, if any): each target's virtual architecture, major*100 + minor*10,
/// ascending, once.
pub(super) fn arch_list(
    profile: &fatkit_arch::TargetSet,
    only: Option<&fatkit_package::kernel_sets::FileRule>,
) -> Vec<u32> {
    let mut list: Vec<u32> = profile
        .iter()
        .filter(|t| only.is_none_or(|r| r.targets.contains(*t)))
        .map(|t| u32::from(t.cc.major) * 100 + u32::from(t.cc.minor) * 10)
        .collect();
    list.sort_unstable();
    list.dedup();
    list
}

/// `__CUDA_ARCH_LIST__` as one nvcc call building every target of the module defines it, in
/// place of the one target's list each of the module's compiles would get: CUDA's own headers
/// name things after it (CUB and Thrust put their kernels in a namespace named after it, and
/// CUB's dispatch picks its tuning by it at run time), so only then do the images of one
/// module name their kernels alike, as the host code registers them, and does that host code
/// dispatch for every target (docs/BUILDS.md, "One architecture list per module"). nvcc
/// splits a `-D` value at commas unless escaped; NVRTC takes each option whole.
pub(crate) fn arch_list_args(m: &Module, compiler: fatkit_arch::Compiler) -> Vec<String> {
    if m.arch_list.is_empty() {
        return Vec::new();
    }
    let sep = match compiler {
        fatkit_arch::Compiler::Nvcc => "\\,",
        fatkit_arch::Compiler::Nvrtc => ",",
    };
    let list: Vec<String> = m.arch_list.iter().map(u32::to_string).collect();
    vec![
        "-U__CUDA_ARCH_LIST__".to_owned(),
        format!("-D__CUDA_ARCH_LIST__={}", list.join(sep)),
    ]
}

/// The arguments that decide a job's output besides the source: part of its cache key.
pub(super) fn job_args(
    target: Target,
    req: &Request,
    toolchain: &Toolchain,
    probe: &Probe,
    m: &Module,
    std_headers: Option<&Path>,
) -> Vec<String> {
    match probe.compiler {
        Compiler::Nvcc => nvcc_args(req, m, target, None),
        Compiler::Nvrtc => nvrtc_args(target, req, m, std_headers, toolchain.include_dirs()),
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
    m: &Module,
    std_headers: Option<&Path>,
    toolkit: &[PathBuf],
) -> Vec<String> {
    let mut args = vec![format!("--gpu-architecture={target}")];
    args.extend(arch_list_args(m, Compiler::Nvrtc));
    if let Some(dir) = m.path.parent() {
        args.push(format!("-I{}", dir.display()));
    }
    args.extend(common_args(req));
    args.extend(req.ask.flags.nvrtc_args().unwrap_or_default());
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
    req.ask.kernel_sets.skip_defines(target)
}

/// The arguments every compile of the request shares: include directories and defines.
pub(crate) fn common_args(req: &Request) -> Vec<String> {
    include_and_defines(req, None)
}

/// Include directories (relative to `base` where they lie under it) and defines.
pub(crate) fn include_and_defines(req: &Request, base: Option<&Path>) -> Vec<String> {
    let mut args: Vec<String> = req
        .ask
        .include_dirs
        .iter()
        .map(|d| format!("-I{}", nvcc_path(d, base)))
        .collect();
    args.extend(req.ask.defines.iter().map(|d| format!("-D{d}")));
    args
}

/// A file or directory as nvcc is given it: relative to `base` where it lies under it, and then
/// always `./name` (never `-name`, which nvcc would read as an option), else absolute. What it
/// holds is checked before anything compiles ([`super::preflight`]: [`fatkit_package::flags::path_safe`]).
pub(crate) fn nvcc_path(path: &Path, base: Option<&Path>) -> String {
    let rel = relative(path, base);
    let text = rel.display().to_string();
    if rel.is_absolute() || text.starts_with("./") || text == "." {
        text
    } else {
        format!("./{text}")
    }
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
pub(crate) fn nvcc_args(
    req: &Request,
    m: &Module,
    target: Target,
    base: Option<&Path>,
) -> Vec<String> {
    let mut args = gencode(target).to_vec();
    args.extend(arch_list_args(m, Compiler::Nvcc));
    args.extend(include_and_defines(req, base));
    args.extend(req.ask.flags.nvcc_args());
    args.extend(skip_defines(req, target));
    args
}
