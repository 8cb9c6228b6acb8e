//! What a binary's declaration records ([`Declarations`], read with the formats) excuse:
//! a kernel lacking a target, or not running on a device, by its crate's declaration.

use fatkit_arch::rules::{Device, Policy};
use fatkit_arch::Target;
pub use fatkit_fatbin::declarations::Declarations;

use super::{as_images, Cell, Gap, KernelImages};

/// The verdict's questions of a binary's declarations.
pub trait Excuses {
    /// Whether `kernel` (of the module bound to `fatbin`) lacks `target` by declaration: it is
    /// declared, and none of its declared targets serves `target` (judged as
    /// `KernelImages::target_cell` judges images).
    fn excuses(
        &self,
        fatbin: Option<(u64, u64)>,
        kernel: &str,
        target: Target,
        policy: Policy,
    ) -> bool {
        self.get(fatbin, kernel)
            .is_some_and(|set| as_images(kernel, set).target_cell(target, policy) == Cell::Missing)
    }

    /// Whether `kernel` not running on `device` is by declaration: none of its declared
    /// targets would run there.
    fn excuses_device(&self, k: &KernelImages, device: &Device, policy: Policy) -> bool {
        self.get(k.fatbin, &k.name).is_some_and(|set| {
            as_images(&k.name, set)
                .select(&Device::new(device.cc, None), policy)
                .selection
                .is_err()
        })
    }

    /// Splits [`require`](super::require) gaps into the rest and those the declarations excuse: `(gaps,
    /// declared)`.
    fn split_require(&self, gaps: Vec<Gap>, policy: Policy) -> (Vec<Gap>, Vec<Gap>) {
        gaps.into_iter()
            .partition(|g| !self.excuses(g.fatbin, &g.kernel, g.target, policy))
    }

    /// Splits `exact_gaps` into the rest and those the declarations excuse (the kernel is
    /// declared without that very target): `(gaps, declared)`.
    fn split_exact(&self, gaps: Vec<Gap>) -> (Vec<Gap>, Vec<Gap>) {
        gaps.into_iter().partition(|g| {
            self.get(g.fatbin, &g.kernel)
                .is_none_or(|set| set.contains(g.target))
        })
    }

    /// The targets `kernel` of the module bound to `fatbin` is declared for, if it is.
    fn get(&self, fatbin: Option<(u64, u64)>, kernel: &str) -> Option<&fatkit_arch::TargetSet>;
}

impl Excuses for Declarations {
    fn get(&self, fatbin: Option<(u64, u64)>, kernel: &str) -> Option<&fatkit_arch::TargetSet> {
        Declarations::get(self, fatbin, kernel)
    }
}
