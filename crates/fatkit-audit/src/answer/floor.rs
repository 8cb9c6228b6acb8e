//! What stops a package before any architecture question (docs/ARCH_RULES.md section 11): a
//! driver older than its floor, from every source that sets one (a CUDA runtime it links, the
//! toolkit its cubins were built by, a distribution named for a CUDA major), and host code
//! built for another machine than the GPU lives in.

use fatkit_arch::driver::DriverVersion;
use fatkit_arch::products;
use fatkit_arch::toolkit::CudaVersion;
use fatkit_arch::{Cc, Target, TargetSet};
use fatkit_fatbin::host::Machine;

use crate::summary::{driver_meets, DriverNeed, Library, Needs};

/// The driver floors of `libs` (one distribution's) that `driver` is below, the first to stop
/// it first: a CUDA runtime they link (its first call fails before any image is chosen), the
/// CUDA major the distribution is named for (`package`, built against that runtime), the CUDA
/// major of the toolkits that built their cubins (the driver refuses them as it loads them);
/// within each, the most demanding first.
pub(crate) fn below_floors(
    libs: &[&Library],
    package: Option<&str>,
    (driver, cc): (Option<DriverVersion>, Cc),
) -> Vec<DriverNeed> {
    let mut needs: Vec<DriverNeed> = Vec::new();
    for l in libs {
        needs.extend(l.runtimes.iter().cloned());
        // Cubins the driver would load here by architecture: others it never reads.
        needs.extend(
            l.drivers
                .iter()
                .filter(|d| matches!(d.what, Needs::Cubins(_)))
                .filter(|d| d.targets.iter().any(|t| loads_by_arch(t, cc)))
                .cloned(),
        );
    }
    if let Some(cuda) = package.and_then(named_major) {
        let (name, _) = crate::record::name_and_version(package.unwrap_or_default());
        let name = name.to_owned();
        needs.push(DriverNeed::new(TargetSet::new(), Needs::Named(name), cuda));
    }
    // A driver that does not know the GPU stops it before anything else.
    needs.extend(crate::summary::gpu_need(cc));
    let rank = |n: &DriverNeed| match n.what {
        Needs::Gpu(_) => 0,
        Needs::Runtime(_) => 1,
        Needs::Named(_) => 2,
        _ => 3,
    };
    needs.retain(|n| below(driver, n));
    needs.sort_by_key(|n| (rank(n), std::cmp::Reverse(n.cuda)));
    needs.dedup_by_key(|n| (rank(n), n.cuda));
    needs
}

/// The CUDA major a distribution is named for: `nvidia-cudnn-cu13 9.28.1.4` -> CUDA 13.0,
/// `torch 2.15.0+cu130` -> CUDA 13.0 (a minor names the major's floor: minor version
/// compatibility).
pub(crate) fn named_major(package: &str) -> Option<CudaVersion> {
    let (name, version) = crate::record::name_and_version(package);
    let from_name = crate::record::cuda_suffix(name).map(|(_, major)| major);
    let from_local = version
        .split_once('+')
        .and_then(|(_, l)| crate::record::cuda_tag(l));
    let major = from_name.or(from_local)?;
    (major >= 9).then(|| CudaVersion::new(major, 0))
}

/// Whether a GPU of CC `cc` runs the cubin `t` by architecture (docs/ARCH_RULES.md section 2).
fn loads_by_arch(t: Target, cc: Cc) -> bool {
    let device = fatkit_arch::rules::Device::new(cc, None);
    t.kind == fatkit_arch::ImageKind::Cubin
        && fatkit_arch::rules::select(
            &[fatkit_arch::rules::Image::cubin(t)],
            &device,
            fatkit_arch::rules::Policy::default(),
        )
        .selection
        .is_ok()
}

/// Whether `driver` is below `need`: `Some(true)` when it certainly is.
pub(crate) fn below(driver: Option<DriverVersion>, need: &DriverNeed) -> bool {
    driver.is_some_and(|d| driver_meets(d, need) == Some(false))
}

/// The machine `libs`' host code is built for, when the GPU named `gpu` lives only in aarch64
/// machines and none of them is built for 64-bit Arm code (aarch64, or a Windows image's
/// ARM64, ARM64EC, ARM64X: [`Machine::is_arm64`]).
pub(crate) fn wrong_machine(libs: &[&Library], gpu: &str) -> Option<Machine> {
    if !products::aarch64_only(gpu) {
        return None;
    }
    let machines: Vec<Machine> = libs.iter().filter_map(|l| l.machine).collect();
    match machines.first() {
        Some(&first) if !machines.iter().any(|m| m.is_arm64()) => Some(first),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_distribution_named_for_a_cuda_major_sets_its_floor() {
        let v = |s: &str| named_major(s).map(|v| v.to_string());
        assert_eq!(v("nvidia_cudnn_cu13 9.28.1.4").as_deref(), Some("13.0"));
        assert_eq!(v("nvidia-cublas-cu12 12.9.3.13").as_deref(), Some("12.0"));
        assert_eq!(v("torch 2.15.0+cu130").as_deref(), Some("13.0"));
        assert_eq!(v("torch 2.7.1+cu126").as_deref(), Some("12.0"));
        assert_eq!(v("torch 2.15.0"), None);
        assert_eq!(v("cupy_cuda12x 13.0"), None);
        assert_eq!(v("jax_cuda12_plugin 0.10.2"), None);
        assert_eq!(v("micro 1.0+cu1"), None);
    }
}
