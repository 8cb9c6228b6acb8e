//! A library's general build, told from the architecture-specific parts it selects per GPU.
//!
//! NVIDIA's libraries (cuBLAS, cuDNN, cuSPARSE, cuFFT) compile most files for one arch list
//! and some kernel families for one or a few architectures only (a Hopper GEMM family built
//! for `sm_90` alone), and choose at run time which kernels to launch on the GPU at hand. A
//! family for another GPU not loading here is by design, not a gap. This is a reading of how
//! libraries are built, not a driver rule; docs/ARCH_RULES.md section 7 says how the general
//! build is found, on what evidence, and with what confidence.
//!
//! - A module's **reach** is the set of product compute capabilities on which the driver
//!   loads one of its images, judged by architecture alone.
//! - The **general reach** is, of the reaches at least `MIN_SHARE` of its kernels share, the
//!   one that reaches the oldest GPU, then the widest (ties: the reach most modules share). A
//!   module is **general** when its reach contains the general reach; any other module is an
//!   architecture-specific family.
//! - A kernel compiled out of the image the driver loads, whose body other images hold, is
//!   **for other GPUs** in a library that holds images built for this GPU ([`built_for`]); one
//!   reached through a fallback is a failure (docs/ARCH_RULES.md section 11).
//! - A kernel is **for other GPUs** on a device when no image holding it would load there
//!   by architecture, and either its module is a family, or its module loads there and every
//!   image holding it is for a later GPU or for one GPU alone (`a`, `f`): the kernel is gated
//!   by architecture inside a general module, present in the `sm_90` image and absent from
//!   the `sm_80` one the driver loads on an A100. A general module with no image for the
//!   device, or a kernel in older images only and absent from the newer one loaded, is never
//!   "for other GPUs": that is the library not running.

use std::collections::{BTreeMap, HashMap, HashSet};

use fatkit_arch::load::Fate;
use fatkit_arch::products;
use fatkit_arch::rules::{self, Device, Image, Policy};
use fatkit_arch::{Cc, ImageKind, Suffix, Target, TargetSet};

use crate::kernel::KernelImages;

/// The share of a library's kernels a reach needs to be its general build's: 1 in 20.
pub(crate) const MIN_SHARE: (usize, usize) = (1, 20);

/// How a library's modules divide into its general build and architecture-specific families.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Roles {
    /// Every module counts as general and no kernel as gated: `--strict`, and what a build
    /// of one's own is held to.
    strict: bool,
    /// The product compute capabilities the general build reaches.
    pub reach: Vec<Cc>,
    /// The modules (by [`KernelImages::module`]) that are architecture-specific families.
    families: HashSet<String>,
    /// How many modules (with kernels) there are.
    modules: usize,
    /// Per library judged (one, or several merged): the targets of all its images, and its
    /// modules; whether a library holds images built for a GPU decides its stubs there.
    libraries: Vec<(TargetSet, HashSet<String>)>,
}

impl Roles {
    /// Every module general: the library is held to every kernel.
    pub fn strict() -> Roles {
        Roles {
            strict: true,
            ..Roles::default()
        }
    }

    /// Finds the general build among `kernels`' modules.
    pub fn of(kernels: &[KernelImages], policy: Policy) -> Roles {
        let ccs = products::product_ccs();
        // One reach per distinct set of images (cuFFT has thousands of modules, few sets).
        let mut by_images: HashMap<Vec<Image>, Vec<Cc>> = HashMap::new();
        let mut modules: BTreeMap<&str, Vec<Cc>> = BTreeMap::new();
        // Per reach: the modules and the kernels that share it.
        let mut shared: BTreeMap<Vec<Cc>, (usize, usize)> = BTreeMap::new();
        for k in kernels {
            if let Some(reach) = modules.get(k.module.as_str()) {
                if let Some(slot) = shared.get_mut(reach) {
                    slot.1 += 1;
                }
                continue;
            }
            let reach = by_images
                .entry(k.module_images.to_vec())
                .or_insert_with(|| reach(&k.module_images, &ccs, policy))
                .clone();
            let slot = shared.entry(reach.clone()).or_default();
            slot.0 += 1;
            slot.1 += 1;
            modules.insert(&k.module, reach);
        }
        // A reach a handful of kernels share is not the library's build: cuSPARSELt 0.6 links
        // one kernel with compute_52 PTX beside 7,500 built for sm_80 and later.
        let total = kernels.len();
        let weighty = |kernels: usize| kernels * MIN_SHARE.1 >= total * MIN_SHARE.0;
        let candidates: Vec<(&Vec<Cc>, &(usize, usize))> =
            match shared.iter().filter(|(_, (_, k))| weighty(*k)).count() {
                0 => shared.iter().collect(),
                _ => shared.iter().filter(|(_, (_, k))| weighty(*k)).collect(),
            };
        // The build that reaches the oldest GPU is the general one (a family starts later);
        // of those, the widest, then the one most modules share.
        let general = candidates
            .into_iter()
            .max_by_key(|(reach, (n, _))| {
                (
                    !reach.is_empty(),
                    std::cmp::Reverse(reach.first().copied()),
                    reach.len(),
                    *n,
                )
            })
            .map(|(reach, _)| reach.clone())
            .unwrap_or_default();
        let count = modules.len();
        let names: HashSet<String> = modules.keys().map(|m| (*m).to_owned()).collect();
        let families = modules
            .into_iter()
            .filter(|(_, reach)| !general.iter().all(|cc| reach.contains(cc)))
            .map(|(m, _)| m.to_owned())
            .collect();
        Roles {
            strict: false,
            reach: general,
            families,
            modules: count,
            libraries: vec![(targets_of(kernels), names)],
        }
    }

    /// A file of a collection built per GPU: each of its modules stands as a family does,
    /// run where it is built for and aside elsewhere ([`crate::collection`]).
    pub fn per_gpu(kernels: &[KernelImages]) -> Roles {
        let families: HashSet<String> = kernels.iter().map(|k| k.module.clone()).collect();
        Roles {
            strict: false,
            reach: Vec::new(),
            modules: families.len(),
            libraries: vec![(targets_of(kernels), families.clone())],
            families,
        }
    }

    /// The roles of several libraries' modules together (module names are unique across
    /// them): what each library found, for a report that holds them all.
    pub fn merge<'a>(all: impl IntoIterator<Item = &'a Roles>) -> Roles {
        let mut out = Roles::default();
        for r in all {
            out.strict |= r.strict;
            out.modules += r.modules;
            out.families.extend(r.families.iter().cloned());
            out.libraries.extend(r.libraries.iter().cloned());
        }
        out
    }

    /// Whether the library of `module` holds an image built for GPUs of CC `cc`
    /// ([`built_for`]).
    fn holds_own(&self, module: &str, cc: Cc) -> bool {
        self.libraries
            .iter()
            .filter(|(_, modules)| modules.contains(module))
            .any(|(targets, _)| targets.iter().any(|t| built_for(t, cc)))
    }

    /// Whether `module` is an architecture-specific family.
    pub(crate) fn is_family(&self, module: &str) -> bool {
        self.families.contains(module)
    }

    /// How many modules are families.
    pub fn families(&self) -> usize {
        self.families.len()
    }

    /// How many modules were judged.
    pub fn modules(&self) -> usize {
        self.modules
    }

    /// For a kernel that does not run on `device`: the targets of the images holding it when
    /// they are built for other GPUs only (see the module's documentation); `None` when its
    /// not running is the library's gap.
    pub fn for_other_gpus(
        &self,
        k: &KernelImages,
        device: &Device,
        policy: Policy,
    ) -> Option<TargetSet> {
        if self.strict {
            return None;
        }
        // Compiled out of the image the driver loads while other images hold the body, in a
        // library that holds images built for this GPU (its own cubins, its family's): the
        // build meant it for those GPUs (docs/ARCH_RULES.md section 11). In a library that
        // reaches this GPU only through a fallback (a lower cubin, PTX), it is a failure.
        if let (_, Fate::Stub { .. }, _) = k.fate(device, policy) {
            let own = self.holds_own(&k.module, device.cc);
            return own.then(|| bodies(k)).filter(|t| !t.is_empty());
        }
        let by_arch = Device::new(device.cc, None);
        let holders_load = rules::select(&k.images, &by_arch, policy).selection.is_ok();
        if holders_load {
            return None;
        }
        if self.is_family(&k.module) {
            return Some(k.targets());
        }
        // In a general module: gated by architecture when it loads here and every image
        // holding the kernel is for a later GPU (or for one GPU alone: `a`, `f`). A kernel in
        // older images only, absent from the newer one loaded, is a gap of the build.
        let module_loads = rules::select(&k.module_images, &by_arch, policy)
            .selection
            .is_ok();
        let later = k
            .images
            .iter()
            .all(|i| i.target.cc > device.cc || i.target.suffix != Suffix::None);
        (module_loads && later && !k.images.is_empty()).then(|| k.targets())
    }
}

/// Whether `target` is an image built for GPUs of compute capability `cc`: a cubin of that
/// architecture (plain or `a`), or of its family (`f`, same major, no newer minor). PTX, and a
/// cubin of a lower architecture the driver also loads, are fallbacks.
pub fn built_for(target: Target, cc: Cc) -> bool {
    target.kind == ImageKind::Cubin
        && match target.suffix {
            Suffix::None | Suffix::Arch => target.cc == cc,
            Suffix::Family => target.cc.major == cc.major && target.cc.minor <= cc.minor,
        }
}

/// The targets of every image of `kernels`' modules.
pub(crate) fn targets_of(kernels: &[KernelImages]) -> TargetSet {
    let mut seen: HashSet<*const [Image]> = HashSet::new();
    let mut out = TargetSet::new();
    for k in kernels {
        if seen.insert(std::sync::Arc::as_ptr(&k.module_images)) {
            for i in k.module_images.iter() {
                out.insert(i.target);
            }
        }
    }
    out
}

/// The targets of the images that hold `k` with its body (not as a stub).
pub fn bodies(k: &KernelImages) -> TargetSet {
    k.holders
        .iter()
        .filter(|h| !k.stubs.iter().any(|(s, _)| s == *h))
        .filter_map(|&h| k.module_images.get(h))
        .map(|i| i.target)
        .collect()
}

/// The product compute capabilities (of `ccs`) on which `images` load, by architecture.
fn reach(images: &[Image], ccs: &[Cc], policy: Policy) -> Vec<Cc> {
    let mut out: Vec<Cc> = ccs
        .iter()
        .copied()
        .filter(|&cc| {
            rules::select(images, &Device::new(cc, None), policy)
                .selection
                .is_ok()
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use super::*;

    /// A module named `module` of `targets`, holding `kernel` in the images `holders`.
    fn kernel(module: &str, targets: &str, kernel: &str, holders: &[usize]) -> KernelImages {
        let images: Vec<Image> = targets
            .split(' ')
            .map(|n| {
                let t = Target::parse_name(n).unwrap();
                match t.kind {
                    ImageKind::Cubin => Image::cubin(t),
                    ImageKind::Ptx => Image::ptx(t, None),
                }
            })
            .collect();
        KernelImages {
            name: kernel.to_owned(),
            module: module.to_owned(),
            images: holders.iter().map(|&i| images[i]).collect(),
            module_images: Arc::from(images),
            holders: holders.to_vec(),
            fatbin: None,
            stubs: Vec::new(),
        }
    }

    fn device(cc: &str) -> Device {
        Device::new(cc.parse().unwrap(), None)
    }

    /// cuBLASLt's shape: a general arch list with PTX, and families for one or two GPUs.
    fn cublas_like() -> Vec<KernelImages> {
        let general = "sm_50 sm_60 sm_61 sm_70 sm_75 sm_80 sm_86 sm_90 compute_90";
        vec![
            kernel("lib@0x1", general, "gemm", &[0, 1, 2, 3, 4, 5, 6, 7, 8]),
            // The same list less images a neighbour's cubin serves: general too.
            kernel(
                "lib@0x2",
                "sm_50 sm_60 sm_70 sm_80 sm_90 compute_90",
                "axpy",
                &[0, 1, 2, 3, 4, 5],
            ),
            // Gated inside a general module: only its sm_90 image holds it.
            kernel("lib@0x1", general, "gemm_tma", &[7]),
            kernel("lib@0x3", "sm_90", "hopper_gemm", &[0]),
            kernel("lib@0x4", "sm_80 sm_90", "ampere_gemm", &[0, 1]),
            kernel("lib@0x5", "sm_80", "ampere_only", &[0]),
        ]
    }

    #[test]
    fn the_widest_reach_is_the_general_build() {
        let kernels = cublas_like();
        let roles = Roles::of(&kernels, Policy::default());
        assert_eq!(
            roles.reach.first().map(Cc::to_string).as_deref(),
            Some("5.0")
        );
        assert_eq!(roles.families(), 3);
        assert!(!roles.is_family("lib@0x2"));
        assert!(roles.is_family("lib@0x4"));
    }

    #[test]
    fn a_stray_module_with_few_kernels_is_not_the_general_build() {
        // cuSPARSELt 0.6's shape: one kernel with compute_52 PTX beside many for sm_80+.
        let mut kernels = vec![kernel("lib@0x0", "sm_80 compute_52", "stray", &[0, 1])];
        for i in 1..=30 {
            kernels.push(kernel(
                &format!("lib@{i:#x}"),
                "sm_80 sm_86 sm_90",
                "k",
                &[0, 1, 2],
            ));
        }
        let roles = Roles::of(&kernels, Policy::default());
        assert_eq!(roles.reach.len(), 5, "{:?}", roles.reach);
        // The stray reaches at least as far: it is general too, and no module is a family.
        assert_eq!(roles.families(), 0);
        // So a GPU only the stray's PTX reaches does not run the library.
        assert_eq!(
            roles.for_other_gpus(&kernels[1], &device("12.0"), Policy::default()),
            None
        );
    }

    #[test]
    fn families_and_gated_kernels_for_other_gpus_are_told_apart() {
        let kernels = cublas_like();
        let roles = Roles::of(&kernels, Policy::default());
        let other = |name: &str, cc: &str| {
            let k = kernels.iter().find(|k| k.name == name).unwrap();
            roles
                .for_other_gpus(k, &device(cc), Policy::default())
                .map(|t| t.to_string())
        };
        // An A100 loads sm_80 of the general module: the sm_90-only kernel is for Hopper.
        assert_eq!(other("gemm_tma", "8.0").as_deref(), Some("sm_90"));
        assert_eq!(other("hopper_gemm", "8.0").as_deref(), Some("sm_90"));
        assert_eq!(other("ampere_only", "9.0").as_deref(), Some("sm_80"));
        // On an RTX 5090 the general module runs by compute_90 PTX; a kernel only its sm_90
        // cubin holds, from an older GPU, is a gap there, as the sm_80 family's is on a 9.0.
        assert_eq!(other("gemm_tma", "12.0"), None);
        // A kernel whose own image would load but is not the one loaded is a gap.
        let lacks = kernel("m@0x1", "sm_80 sm_86", "b", &[0]);
        let roles = Roles::of(std::slice::from_ref(&lacks), Policy::default());
        assert_eq!(
            roles.for_other_gpus(&lacks, &device("8.6"), Policy::default()),
            None
        );
        // A general module with no image for the GPU is the library not running.
        let torch = kernel(
            "t@0x1",
            "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90",
            "add",
            &[0, 1, 2, 3, 4, 5, 6],
        );
        let roles = Roles::of(std::slice::from_ref(&torch), Policy::default());
        assert_eq!(
            roles.for_other_gpus(&torch, &device("12.0"), Policy::default()),
            None
        );
        // --strict: nothing is for other GPUs.
        assert_eq!(
            Roles::strict().for_other_gpus(&kernels[3], &device("8.0"), Policy::default()),
            None
        );
    }
}
