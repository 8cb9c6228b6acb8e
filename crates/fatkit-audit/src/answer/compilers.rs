//! A distribution's run-time compilers on one GPU (docs/ARCH_RULES.md section 12): what each
//! is asked to compile for the GPU, whether its targets hold that, which one the package runs,
//! and the driver what it makes needs. Triton compiles every kernel for the exact GPU with the
//! `ptxas` it bundles, so one that cannot stops it (a blocker); NVRTC, nvJitLink, NVVM and
//! NVIDIA's `ptxas` and `nvcc` are asked by the program that loads them, which can fall back to
//! PTX the driver compiles, so they inform and decide nothing.

use fatkit_arch::driver::{DriverRelease, DriverVersion};
use fatkit_arch::toolkit::{self, CudaVersion};
use fatkit_arch::{Cc, ImageKind, Suffix, Target};
use fatkit_fatbin::compiler::{Compiler, Kind, TargetsFrom};
use serde::Serialize;

/// One compiler of a distribution on one GPU.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct CompilerOn {
    /// Its path in the input.
    pub name: String,
    pub kind: Kind,
    pub release: Option<CudaVersion>,
    /// What it is asked for on this GPU: the cubin target Triton names (`sm_121a`: `a` from
    /// CC 9.0), or the GPU's own (`sm_121`).
    pub target: Target,
    /// Whether its targets hold it; `None` where they are not known.
    pub compiles: Option<bool>,
    /// The one the package runs on this GPU (Triton's choice between its two; any other
    /// compiler is the only one of its kind).
    pub chosen: bool,
    /// Whether it is the `ptxas` Triton runs on this GPU (its own, or PyTorch's in its place):
    /// then it decides whether the package can make its kernels here.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub for_triton: bool,
    /// The CUDA level of driver what it makes needs: its release's major for cubins (minor
    /// version compatibility), its release for NVVM's PTX.
    pub needs: Option<CudaVersion>,
    /// That driver as nvidia-smi prints it, where the tables know it.
    pub needs_driver: Option<DriverRelease>,
    /// Whether the driver asked about is older than that (`None`: no driver given, or the
    /// tables cannot place it).
    pub driver_too_old: Option<bool>,
}

/// A program of a distribution that compiles CUDA C++ it holds with NVRTC, on one GPU.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct SourceOn {
    /// Its path in the input.
    pub name: String,
    /// How it reaches NVRTC (`DT_NEEDED libnvrtc.so.12`, `loads libnvrtc.so`).
    pub nvrtc: String,
    /// The CUDA major of that NVRTC, where its name says it.
    pub major: Option<u8>,
    /// The kernels its source defines.
    pub kernels: usize,
    /// The GPU's own cubin target.
    pub target: Target,
    /// The first release of that major whose NVRTC compiles the target (the toolkit tables);
    /// `None`: none does, or the major is not known.
    pub from: Option<CudaVersion>,
}

/// Each NVRTC program of a distribution on CC `cc`.
pub(super) fn sources_on(
    sources: &[&fatkit_fatbin::nvrtc_source::NvrtcSource],
    cc: Cc,
) -> Vec<SourceOn> {
    let target = Target::new(ImageKind::Cubin, cc, Suffix::None);
    sources
        .iter()
        .map(|s| SourceOn {
            name: s.name.clone(),
            nvrtc: s.nvrtc.clone(),
            major: s.major,
            kernels: s.kernels.len(),
            target,
            from: s.major.and_then(|m| {
                toolkit::toolkits_for(target)
                    .into_iter()
                    .find(|v| v.major == m)
            }),
        })
        .collect()
}

/// A Triton release: its `ptxas`'s CUDA release, its `ptxas-blackwell`'s, and the CC from
/// which Triton runs the second (`get_ptxas` of `backends/nvidia/compiler.py`). Read from each
/// release's x86-64 wheel on PyPI (docs/ARCH_RULES.md section 12).
struct Triton {
    release: (u8, u8, u8),
    ptxas: CudaVersion,
    blackwell: Option<(CudaVersion, Cc)>,
}

const fn triton(
    release: (u8, u8, u8),
    ptxas: (u8, u8),
    blackwell: Option<((u8, u8), (u8, u8))>,
) -> Triton {
    Triton {
        release,
        ptxas: CudaVersion::new(ptxas.0, ptxas.1),
        blackwell: match blackwell {
            Some((v, c)) => Some((CudaVersion::new(v.0, v.1), Cc::new(c.0, c.1))),
            None => None,
        },
    }
}

const TRITON: &[Triton] = &[
    triton((3, 4, 0), (12, 8), None),
    triton((3, 5, 0), (12, 8), None),
    triton((3, 6, 0), (12, 8), Some(((12, 9), (10, 0)))),
    triton((3, 7, 1), (12, 8), Some(((13, 1), (10, 0)))),
    triton((3, 8, 0), (12, 9), Some(((13, 3), (10, 0)))),
    triton((3, 9, 0), (12, 9), Some(((13, 4), (9, 0)))),
];

/// The CC from which a Triton release runs `ptxas-blackwell`: none before 3.6, 10.0 from 3.6,
/// 9.0 from 3.9 (and after, until a later release is measured). `None` for an unknown release.
fn blackwell_from(release: Option<(u8, u8)>) -> Option<Option<Cc>> {
    let r = release?;
    Some(match r {
        r if r < (3, 6) => None,
        r if r < (3, 9) => Some(Cc::new(10, 0)),
        _ => Some(Cc::new(9, 0)),
    })
}

/// `(3, 6)` of `triton 3.6.0`; `None` for another name or no version.
fn triton_release(name: Option<&str>) -> Option<(u8, u8)> {
    let version = name?.strip_prefix("triton ")?;
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor: String = parts
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((major, minor.parse().ok()?))
}

/// The target Triton asks `ptxas` for on CC `cc`: `sm_{cc}a` from 9.0 (`sm_arch_from_capability`).
pub(crate) fn triton_target(cc: Cc) -> Target {
    let suffix = if cc.major >= 9 {
        Suffix::Arch
    } else {
        Suffix::None
    };
    Target::new(ImageKind::Cubin, cc, suffix)
}

/// Each compiler of the distribution `name` on CC `cc` with `driver`; `torch`: PyTorch's own
/// `ptxas` where the input holds one, which its inductor puts in the place of Triton's `ptxas`
/// (`TRITON_PTXAS_PATH`, `_set_triton_ptxas_path` in torch/_inductor/runtime/compile_tasks.py;
/// an H200 ran it so, docs/ARCH_RULES.md section 12).
pub(super) fn on(
    name: Option<&str>,
    (compilers, torch): (&[&Compiler], Option<&Compiler>),
    (cc, driver): (Cc, Option<DriverVersion>),
) -> Vec<CompilerOn> {
    let mut out = own(name, compilers, (cc, driver));
    let replaced = out
        .iter_mut()
        .find(|c| c.kind == Kind::TritonPtxas && c.chosen);
    if let (Some(triton), Some(torch)) = (replaced, torch) {
        (triton.chosen, triton.for_triton) = (false, false);
        let mut by_torch = own(name, &[torch], (cc, driver));
        for c in &mut by_torch {
            c.for_triton = true;
            c.target = triton_target(cc);
            c.compiles = (torch.targets_from != TargetsFrom::Unknown)
                .then(|| torch.targets.contains(c.target));
        }
        out.extend(by_torch);
    }
    out
}

/// Each of the distribution's own compilers on CC `cc` with `driver`.
fn own(
    name: Option<&str>,
    compilers: &[&Compiler],
    (cc, driver): (Cc, Option<DriverVersion>),
) -> Vec<CompilerOn> {
    let release = triton_release(name);
    let has_blackwell = compilers
        .iter()
        .any(|c| c.kind == Kind::TritonPtxasBlackwell);
    compilers
        .iter()
        .map(|c| {
            let triton = matches!(c.kind, Kind::TritonPtxas | Kind::TritonPtxasBlackwell);
            let target = match triton {
                true => triton_target(cc),
                false => Target::new(ImageKind::Cubin, cc, Suffix::None),
            };
            let chosen = match (c.kind, blackwell_from(release)) {
                (Kind::TritonPtxas, Some(from)) => {
                    !has_blackwell || from.is_none_or(|from| cc < from)
                }
                (Kind::TritonPtxasBlackwell, Some(from)) => from.is_some_and(|from| cc >= from),
                // A Triton of no known release: the choice is known only below 9.0 and from
                // 10.0, where every rule agrees.
                (Kind::TritonPtxas, None) => !has_blackwell || cc < Cc::new(9, 0),
                (Kind::TritonPtxasBlackwell, None) => cc >= Cc::new(10, 0),
                _ => true,
            };
            let compiles =
                (c.targets_from != TargetsFrom::Unknown).then(|| c.targets.contains(target));
            let needs = c.release.map(|r| match c.kind {
                Kind::Nvvm => r,
                _ => CudaVersion::new(r.major, 0),
            });
            let needs_driver = needs.and_then(|n| toolkit::toolkit(n)?.min_driver);
            let driver_too_old = match (needs, driver.and_then(|d| d.cuda_level())) {
                (Some(n), Some(level)) => Some(level < n),
                _ => None,
            };
            CompilerOn {
                name: c.name.clone(),
                kind: c.kind,
                release: c.release,
                target,
                compiles,
                chosen,
                for_triton: triton && chosen,
                needs,
                needs_driver,
                driver_too_old,
            }
        })
        .collect()
}

impl CompilerOn {
    /// `ptxas-blackwell of CUDA 12.9 (triton/backends/nvidia/bin/ptxas-blackwell)`.
    pub fn describe(&self) -> String {
        let release = self.release.map_or_else(
            || " of an unread release".to_owned(),
            |r| format!(" of CUDA {r}"),
        );
        format!("{}{release} ({})", self.kind.words(), self.name)
    }
}

/// Whether `on` stops its package: Triton's chosen `ptxas` cannot compile for the GPU, or what
/// it makes needs a newer driver than the one asked about.
pub fn blocks(on: &CompilerOn) -> bool {
    triton_runs(on) && (on.compiles == Some(false) || on.driver_too_old == Some(true))
}

/// Whether `on` is the `ptxas` Triton runs on its GPU: its own chosen one, or PyTorch's in its
/// place.
fn triton_runs(on: &CompilerOn) -> bool {
    on.for_triton
}

/// Whether `on` is Triton's chosen `ptxas` and its targets could not be read: whether the
/// package can make its kernels here is unknown.
pub fn unread(on: &CompilerOn) -> bool {
    triton_runs(on) && on.compiles.is_none()
}

/// The first Triton release whose chosen `ptxas` compiles `target` (the tables' targets of its
/// CUDA release), as `3.6.0`.
pub(crate) fn first_triton_for(target: Target) -> Option<String> {
    TRITON.iter().find_map(|t| {
        let used = match t.blackwell {
            Some((v, from)) if target.cc >= from => v,
            _ => t.ptxas,
        };
        let (a, b, c) = t.release;
        toolkit::can_build(used, target).then(|| format!("{a}.{b}.{c}"))
    })
}

/// The oldest CUDA release whose `ptxas` compiles `target`.
pub(crate) fn first_cuda_for(target: Target) -> Option<CudaVersion> {
    toolkit::toolkits_for(target).first().copied()
}

/// What to do where `c` stops its package: a driver for its cubins, or a `ptxas` that knows
/// the target (by Triton's variable, or a later Triton).
pub(super) fn fix(c: &CompilerOn, who: crate::fix::Who) -> crate::fix::Fix {
    crate::fix::Fix::Compiler {
        who,
        kind: c.kind,
        target: c.target,
        driver: match c.driver_too_old {
            Some(true) => c.needs.map(|n| (n, c.needs_driver)),
            _ => None,
        },
        cuda: first_cuda_for(c.target),
        triton: first_triton_for(c.target),
    }
}

/// The environment variable that points Triton's `kind` elsewhere (`knobs.nvidia`).
pub fn override_variable(kind: Kind) -> &'static str {
    match kind {
        Kind::TritonPtxasBlackwell => "TRITON_PTXAS_BLACKWELL_PATH",
        _ => "TRITON_PTXAS_PATH",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fatkit_arch::TargetSet;

    fn ptxas(kind: Kind, release: (u8, u8)) -> Compiler {
        let r = CudaVersion::new(release.0, release.1);
        Compiler {
            name: format!("triton/backends/nvidia/bin/{}", kind.words()),
            kind,
            release: Some(r),
            version: None,
            targets: toolkit::targets_of(r)
                .iter()
                .filter(|t| t.is_cubin())
                .collect::<TargetSet>(),
            targets_from: TargetsFrom::Table,
        }
    }

    /// Triton 3.5.0 on a GB10 cannot compile (triton-lang/triton#8539: "Value 'sm_121a' is
    /// not defined for option 'gpu-name'"); 3.6.0 can; 3.6.0 on a Jetson Thor cannot (ptxas
    /// 12.9 has no sm_110a), 3.9.0 can; on an H100 3.9.0 runs its CUDA 13.4 ptxas, whose cubins
    /// a CUDA 12.8 driver refuses.
    #[test]
    fn triton_on_the_gpus_of_the_issue() {
        let one = ptxas(Kind::TritonPtxas, (12, 8));
        let bw = |r| ptxas(Kind::TritonPtxasBlackwell, r);
        let chosen = |name: &str, cs: &[&Compiler], cc: Cc, driver| {
            on(Some(name), (cs, None), (cc, driver))
                .into_iter()
                .find(|c| c.chosen)
                .unwrap()
        };
        let gb10 = Cc::new(12, 1);
        let c = chosen("triton 3.5.0", &[&one], gb10, None);
        assert_eq!((c.compiles, blocks(&c)), (Some(false), true));
        assert_eq!(c.target.to_string(), "sm_121a");
        let b129 = bw((12, 9));
        let c = chosen("triton 3.6.0", &[&one, &b129], gb10, None);
        assert_eq!(
            (c.kind, c.compiles),
            (Kind::TritonPtxasBlackwell, Some(true))
        );
        let thor = Cc::new(11, 0);
        assert!(blocks(&chosen("triton 3.6.0", &[&one, &b129], thor, None)));
        let b134 = bw((13, 4));
        let one129 = ptxas(Kind::TritonPtxas, (12, 9));
        let c = chosen("triton 3.9.0", &[&one129, &b134], thor, None);
        assert_eq!((c.compiles, blocks(&c)), (Some(true), false));
        // 3.9 runs ptxas-blackwell from CC 9.0; 3.6 does not.
        let h100 = Cc::new(9, 0);
        assert_eq!(
            chosen("triton 3.9.0", &[&one129, &b134], h100, None).kind,
            Kind::TritonPtxasBlackwell
        );
        assert_eq!(
            chosen("triton 3.6.0", &[&one, &b129], h100, None).kind,
            Kind::TritonPtxas
        );
        let old = Some(DriverVersion::Cuda(CudaVersion::new(12, 8)));
        let c = chosen("triton 3.9.0", &[&one129, &b134], h100, old);
        assert_eq!((c.driver_too_old, blocks(&c)), (Some(true), true));
        // A T4 is compiled for by every release.
        let t4 = Cc::new(7, 5);
        assert!(!blocks(&chosen("triton 3.5.0", &[&one], t4, None)));
        assert_eq!(
            chosen("triton 3.5.0", &[&one], t4, None).target.to_string(),
            "sm_75"
        );
        // Fixes that exist.
        assert_eq!(
            first_triton_for(triton_target(gb10)).as_deref(),
            Some("3.6.0")
        );
        assert_eq!(
            first_triton_for(triton_target(thor)).as_deref(),
            Some("3.7.1")
        );
        assert_eq!(
            first_cuda_for(triton_target(gb10)),
            Some(CudaVersion::new(12, 9))
        );
    }

    /// PyTorch's inductor hands Triton its own ptxas (`TRITON_PTXAS_PATH`): where Triton
    /// would run its `ptxas`, PyTorch's decides (an H200 ran torch/bin/ptxas 13.0 in place of
    /// triton 3.6.0's 12.8); where Triton runs `ptxas-blackwell`, it is not replaced.
    #[test]
    fn pytorch_hands_triton_its_ptxas() {
        let one = ptxas(Kind::TritonPtxas, (12, 8));
        let mut torch = ptxas(Kind::TorchPtxas, (13, 0));
        torch.name = "torch/bin/ptxas".into();
        let gb10 = Cc::new(12, 1);
        let all = on(Some("triton 3.5.0"), (&[&one], Some(&torch)), (gb10, None));
        let runs: Vec<&CompilerOn> = all.iter().filter(|c| c.for_triton).collect();
        assert_eq!(runs.len(), 1);
        assert_eq!(
            (runs[0].kind, runs[0].compiles),
            (Kind::TorchPtxas, Some(true))
        );
        assert_eq!(runs[0].target.to_string(), "sm_121a");
        assert!(!all.iter().any(blocks));
        // triton 3.6.0 runs ptxas-blackwell from CC 10.0: PyTorch's does not replace it.
        let bw = ptxas(Kind::TritonPtxasBlackwell, (12, 9));
        let all = on(
            Some("triton 3.6.0"),
            (&[&one, &bw], Some(&torch)),
            (gb10, None),
        );
        let runs: Vec<Kind> = all
            .iter()
            .filter(|c| c.for_triton)
            .map(|c| c.kind)
            .collect();
        assert_eq!(runs, [Kind::TritonPtxasBlackwell]);
        // PyTorch's own ptxas in its own distribution decides nothing.
        let own = on(
            Some("torch 2.11.0"),
            (&[&torch], None),
            (Cc::new(6, 1), None),
        );
        assert!(!own[0].for_triton && !blocks(&own[0]));
    }

    /// NVRTC decides nothing: it is asked by a program, which can take PTX instead.
    #[test]
    fn other_compilers_inform() {
        let mut nvrtc = ptxas(Kind::Nvrtc, (12, 9));
        nvrtc.name = "nvidia/cuda_nvrtc/lib/libnvrtc.so.12".into();
        let c = &on(
            Some("nvidia-cuda-nvrtc-cu12 12.9.86"),
            (&[&nvrtc], None),
            (Cc::new(11, 0), None),
        )[0];
        assert_eq!(
            (c.compiles, c.chosen, blocks(c)),
            (Some(false), true, false)
        );
        assert_eq!(c.target.to_string(), "sm_110");
    }
}
