//! One kernel of one module, with the images it is in and those its module has: the record
//! the coverage analysis and the general-build reading both take ([`KernelImages`]).

use std::sync::Arc;

use fatkit_arch::load::{self, Fate};
use fatkit_arch::rules::{self, Device, Image, Policy, Status, Verdict};
use fatkit_arch::TargetSet;
use serde::Serialize;

/// One kernel of one module.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KernelImages {
    pub name: String,
    /// Its module (see `coverage::ModuleImages::name`).
    pub module: String,
    /// The images of its module that hold it.
    pub images: Vec<Image>,
    /// Its module's images, all of them: the driver chooses among these.
    #[serde(skip)]
    pub module_images: Arc<[Image]>,
    /// Indices into `module_images` of the images holding it.
    #[serde(skip)]
    pub holders: Vec<usize>,
    /// Its module's fatbin binding (see `coverage::ModuleImages::fatbin`).
    #[serde(skip)]
    pub fatbin: Option<(u64, u64)>,
    /// Indices into `module_images` of the images holding it only as a stub (its body compiled
    /// out there; `fatkit_arch::load::Module::with_stubs`).
    #[serde(skip)]
    pub stubs: Vec<(usize, fatkit_arch::load::Stub)>,
}

impl KernelImages {
    pub fn targets(&self) -> TargetSet {
        self.images.iter().map(|i| i.target).collect()
    }

    /// What the driver does with this kernel's module on `device`.
    pub fn select(&self, device: &Device, policy: Policy) -> Verdict {
        rules::select(&self.module_images, device, policy)
    }

    /// The kernel's fate and status on `device`: found in the image its module loads, or not.
    pub fn fate(&self, device: &Device, policy: Policy) -> (Verdict, Fate, Status) {
        let verdict = self.select(device, policy);
        let fate = load::fate(&verdict, &self.holders, &self.stubs);
        let status = load::status(&verdict, &fate);
        (verdict, fate, status)
    }
}
