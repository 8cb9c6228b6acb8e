//! The compilers a package carries to make device code on the user's machine at run time
//! (docs/ARCH_RULES.md section 12): Triton's bundled `ptxas` and `ptxas-blackwell`, the
//! `ptxas` and `nvcc` of NVIDIA's wheels, NVRTC, nvJitLink and NVVM. Each is recognised by its
//! file name and read from its bytes, never run: its CUDA release from the version string every
//! one of them holds ("Cuda compilation tools, release 12.8, V12.8.93"), and the targets it
//! compiles for from the table of `--gpu-name` values `ptxas` and `nvcc` hold (`\0compute_90a\0`),
//! else from the release's row of the toolkit tables.

use fatkit_arch::toolkit::{self, CudaVersion};
use fatkit_arch::{ImageKind, Target, TargetSet};
use serde::Serialize;

/// What kind of compiler a file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Triton's `backends/nvidia/bin/ptxas`.
    TritonPtxas,
    /// Triton's `backends/nvidia/bin/ptxas-blackwell` (3.6 and later).
    TritonPtxasBlackwell,
    /// PyTorch's `torch/bin/ptxas` (its CUDA 13 wheels): its inductor points
    /// `TRITON_PTXAS_PATH` at it before Triton compiles, unless the user set it.
    TorchPtxas,
    /// A `ptxas` elsewhere (`nvidia/cu13/bin/ptxas` of `nvidia-cuda-nvcc`).
    Ptxas,
    /// `nvcc`.
    Nvcc,
    /// `libnvrtc.so.N`, `nvrtc64_*.dll`: CUDA C++ compiled by a program at run time.
    Nvrtc,
    /// `libnvJitLink.so.N`, `nvJitLink_*.dll`: PTX and LTO-IR linked and compiled at run time.
    NvJitLink,
    /// `libnvvm.so.N`, `nvvm64_*.dll`: NVVM IR to PTX (numba-cuda).
    Nvvm,
}

impl Kind {
    /// What it is called in a report: `ptxas`, `ptxas-blackwell`, `NVRTC`.
    pub fn words(self) -> &'static str {
        match self {
            Kind::TritonPtxas | Kind::TorchPtxas | Kind::Ptxas => "ptxas",
            Kind::TritonPtxasBlackwell => "ptxas-blackwell",
            Kind::Nvcc => "nvcc",
            Kind::Nvrtc => "NVRTC",
            Kind::NvJitLink => "nvJitLink",
            Kind::Nvvm => "NVVM",
        }
    }

    /// Whether it compiles PTX to cubins itself (its output is a cubin, not PTX): `ptxas`,
    /// `nvcc`, nvJitLink and NVRTC asked for a cubin. NVVM writes PTX only.
    pub fn writes_cubins(self) -> bool {
        self != Kind::Nvvm
    }
}

/// Where a compiler's targets were read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetsFrom {
    /// The `--gpu-name` values the file itself holds.
    Itself,
    /// The toolkit tables' row for its release (docs/ARCH_RULES.md section 4).
    Table,
    /// Neither: the release is not read or not in the tables.
    Unknown,
}

/// One compiler found in an input.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
pub struct Compiler {
    /// The path inside the input (`triton/backends/nvidia/bin/ptxas`).
    pub name: String,
    pub kind: Kind,
    /// The CUDA release it is part of; `None` where its bytes hold no version string.
    pub release: Option<CudaVersion>,
    /// The full version (`12.8.93`), as its bytes say.
    pub version: Option<String>,
    /// The real (cubin) targets it compiles for.
    pub targets: TargetSet,
    pub targets_from: TargetsFrom,
}

/// The kind of compiler a file named `name` (a path; `/` or `\` between parts) is, if any.
pub fn kind_of(name: &str) -> Option<Kind> {
    let lower = name.to_ascii_lowercase().replace('\\', "/");
    let file = lower.rsplit('/').next().unwrap_or(&lower);
    let in_triton = lower.contains("triton/backends/nvidia/bin/");
    let in_bin = lower.contains("/bin/") || lower.starts_with("bin/");
    let stem = file.strip_suffix(".exe").unwrap_or(file);
    let versioned = |prefix: &str| {
        file.strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
    };
    match stem {
        "ptxas" if in_triton => Some(Kind::TritonPtxas),
        "ptxas-blackwell" if in_triton => Some(Kind::TritonPtxasBlackwell),
        "ptxas" if lower.ends_with("torch/bin/ptxas") => Some(Kind::TorchPtxas),
        "ptxas" if in_bin => Some(Kind::Ptxas),
        "nvcc" if in_bin => Some(Kind::Nvcc),
        _ if file.contains("builtins") => None,
        _ if versioned("libnvrtc.so.") || versioned("nvrtc64_") => Some(Kind::Nvrtc),
        _ if versioned("libnvjitlink.so.") || versioned("nvjitlink_") => Some(Kind::NvJitLink),
        _ if versioned("libnvvm.so.") || versioned("nvvm64_") => Some(Kind::Nvvm),
        _ => None,
    }
}

/// The compiler a file named `name` holding `data` is, read from its bytes; `None` when the
/// name is no compiler's.
pub fn read(name: &str, data: &[u8]) -> Option<Compiler> {
    let kind = kind_of(name)?;
    let version = version_in(data);
    let release = version
        .as_deref()
        .and_then(|v| v.parse::<CudaVersion>().ok());
    let own = match kind {
        Kind::TritonPtxas
        | Kind::TritonPtxasBlackwell
        | Kind::TorchPtxas
        | Kind::Ptxas
        | Kind::Nvcc => gpu_names_in(data),
        _ => TargetSet::new(),
    };
    let (targets, targets_from) = match (own.is_empty(), release) {
        (false, _) => (own, TargetsFrom::Itself),
        (true, Some(r)) if toolkit::toolkit(CudaVersion::new(r.major, r.minor)).is_some() => (
            toolkit::targets_of(r)
                .iter()
                .filter(|t| t.kind == ImageKind::Cubin)
                .collect(),
            TargetsFrom::Table,
        ),
        (true, _) => (TargetSet::new(), TargetsFrom::Unknown),
    };
    Some(Compiler {
        name: name.to_owned(),
        kind,
        release,
        version,
        targets,
        targets_from,
    })
}

/// The string every CUDA compiler binary holds.
const VERSION: &[u8] = b"Cuda compilation tools, release ";

/// `12.8.93` out of "Cuda compilation tools, release 12.8, V12.8.93": the first such string
/// whose release is digits (a format string "release %d.%d" is passed over).
pub(crate) fn version_in(data: &[u8]) -> Option<String> {
    for at in memchr::memmem::find_iter(data, VERSION) {
        let rest = data.get(at + VERSION.len()..)?;
        let Some(v) = rest.iter().position(|&b| b == b'V') else {
            continue;
        };
        let full: Vec<u8> = rest
            .get(v + 1..)
            .unwrap_or_default()
            .iter()
            .take(16)
            .take_while(|b| b.is_ascii_digit() || **b == b'.')
            .copied()
            .collect();
        let release = rest.get(..v).unwrap_or_default();
        if release.first().is_some_and(u8::is_ascii_digit) && full.contains(&b'.') {
            return String::from_utf8(full).ok();
        }
    }
    None
}

/// The real targets named in a table of `--gpu-name` values: every NUL-delimited
/// `compute_NN`, `compute_NNa`, `compute_NNf` (the linker merges string tails, so the `sm_`
/// names are not all whole; each `compute_` one is), as `sm_NN`.
pub(crate) fn gpu_names_in(data: &[u8]) -> TargetSet {
    let mut out = TargetSet::new();
    for at in memchr::memmem::find_iter(data, b"\0compute_") {
        let rest = data.get(at + 1..).unwrap_or_default();
        let Some(end) = rest.iter().take(16).position(|&b| b == 0) else {
            continue;
        };
        let name = rest.get(..end).unwrap_or_default();
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        if let Ok(t) = name.parse::<Target>() {
            out.insert(Target::new(ImageKind::Cubin, t.cc, t.suffix));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_compilers() {
        for (name, kind) in [
            ("triton/backends/nvidia/bin/ptxas", Some(Kind::TritonPtxas)),
            (
                "site-packages/triton/backends/nvidia/bin/ptxas-blackwell",
                Some(Kind::TritonPtxasBlackwell),
            ),
            ("nvidia/cu13/bin/ptxas", Some(Kind::Ptxas)),
            ("site-packages/torch/bin/ptxas", Some(Kind::TorchPtxas)),
            ("nvidia/cuda_nvcc/bin/nvcc", Some(Kind::Nvcc)),
            ("nvidia\\cu13\\bin\\ptxas.exe", Some(Kind::Ptxas)),
            ("nvidia/cuda_nvrtc/lib/libnvrtc.so.12", Some(Kind::Nvrtc)),
            ("nvidia/cu13/lib/libnvrtc-builtins.so.13.0", None),
            (
                "nvidia/cu13/bin/x86_64/nvrtc64_130_0.dll",
                Some(Kind::Nvrtc),
            ),
            (
                "nvidia/nvjitlink/lib/libnvJitLink.so.12",
                Some(Kind::NvJitLink),
            ),
            ("nvidia/cu13/lib/libnvvm.so.4", Some(Kind::Nvvm)),
            ("ptxas", None),
            ("torch/lib/libtorch_cuda.so", None),
            ("notes/ptxas.txt", None),
        ] {
            assert_eq!(kind_of(name), kind, "{name}");
        }
    }

    #[test]
    fn version_and_targets_from_bytes() {
        let data = b"junk Cuda compilation tools, release %d.%d, V%s\0x\0Cuda compilation tools, release 12.9, V12.9.86\nBuild\0sm_90a\0compute_90a\0sm_121\0compute_121\0compute_121f\0compute_1x\0compute_\0";
        assert_eq!(version_in(data).as_deref(), Some("12.9.86"));
        let t: Vec<String> = gpu_names_in(data).iter().map(|t| t.to_string()).collect();
        assert_eq!(t, ["sm_90a", "sm_121", "sm_121f"]);
        let c = read("triton/backends/nvidia/bin/ptxas-blackwell", data).unwrap();
        assert_eq!(
            (c.kind, c.targets_from),
            (Kind::TritonPtxasBlackwell, TargetsFrom::Itself)
        );
        assert_eq!(c.release, Some(CudaVersion::new(12, 9)));
        // A library's targets come from the table of its release.
        let nvrtc = read("lib/libnvrtc.so.12", data).unwrap();
        assert_eq!(nvrtc.targets_from, TargetsFrom::Table);
        assert!(nvrtc.targets.contains("sm_121a".parse().unwrap()));
        assert!(!nvrtc.targets.contains("sm_110".parse().unwrap()));
        // Nothing readable: no version, no targets, said so.
        let bare = read("lib/libnvJitLink.so.13", b"nothing").unwrap();
        assert_eq!(
            (bare.release, bare.targets_from),
            (None, TargetsFrom::Unknown)
        );
    }
}
