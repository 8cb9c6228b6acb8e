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

/// The driver's choice for each module on one device, made once per module: the kernels of a
/// module share its images (one `Arc`) and come one after another, so the choice of the last
/// module is kept and reused while the kernels are its. The same choice the kernel's own
/// [`KernelImages::fate`] makes, without making it again for each kernel.
pub(crate) struct Chooser<'d> {
    device: &'d Device,
    policy: Policy,
    last: Option<(Arc<[Image]>, Verdict)>,
}

impl<'d> Chooser<'d> {
    pub(crate) fn new(device: &'d Device, policy: Policy) -> Chooser<'d> {
        Chooser {
            device,
            policy,
            last: None,
        }
    }

    fn verdict(&mut self, k: &KernelImages) -> &Verdict {
        let same = matches!(&self.last, Some((m, _)) if Arc::ptr_eq(m, &k.module_images));
        if !same {
            self.last = None;
        }
        let (device, policy) = (self.device, self.policy);
        &self
            .last
            .get_or_insert_with(|| (k.module_images.clone(), k.select(device, policy)))
            .1
    }

    /// [`KernelImages::fate`], the module's choice made once.
    pub(crate) fn fate(&mut self, k: &KernelImages) -> (Verdict, Fate, Status) {
        let verdict = self.verdict(k).clone();
        let fate = load::fate(&verdict, &k.holders, &k.stubs);
        let status = load::status(&verdict, &fate);
        (verdict, fate, status)
    }

    /// The kernel's status alone.
    pub(crate) fn status(&mut self, k: &KernelImages) -> Status {
        let verdict = self.verdict(k);
        let fate = load::fate(verdict, &k.holders, &k.stubs);
        load::status(verdict, &fate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel of every fixture of the repository (fatbins, cubins, PTX, host objects, a
    /// fatbin with stubs), on every GPU of the product tables, with and without a driver: the
    /// choice made once per module is the kernel's own.
    #[test]
    fn the_module_choice_made_once_is_each_kernels_own() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        let mut files = Vec::new();
        let mut stack = vec![root];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                match e.path().is_dir() {
                    true => stack.push(e.path()),
                    false => files.push(e.path()),
                }
            }
        }
        let mut kernels = 0;
        for path in files {
            let bytes = std::fs::read(&path).unwrap_or_default();
            let report = fatkit_fatbin::inspect::inspect(
                "f",
                &bytes,
                fatkit_fatbin::inspect::Depth::Kernels,
                &fatkit_fatbin::Limits::default(),
            );
            let all = crate::coverage::kernels_declared(&report, &Default::default());
            kernels += all.len();
            for cc in fatkit_arch::products::product_ccs() {
                for driver in [None, "535.104.05".parse().ok()] {
                    let device = Device::new(cc, driver);
                    let mut chooser = Chooser::new(&device, Policy::default());
                    for k in &all {
                        let own = k.fate(&device, Policy::default());
                        assert_eq!(
                            chooser.fate(k),
                            own,
                            "{} {} on {cc}",
                            path.display(),
                            k.name
                        );
                        assert_eq!(chooser.status(k), own.2);
                    }
                }
            }
        }
        assert!(kernels > 20, "only {kernels} kernels in the fixtures");
    }
}
