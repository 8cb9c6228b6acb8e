//! What the driver does with one module: it loads **one** image of the module's fatbin (the
//! one [`rules::select`] picks), and `cuModuleGetFunction` finds a kernel only in that image
//! (docs/ARCH_RULES.md section 2, "One image per module"). A kernel another image holds is
//! not found.
//!
//! The one model every verdict of fatkit comes from: the runtime's plan, the build's check of
//! declared kernels, `audit`, `package` and `profiles show`.

use serde::Serialize;

use crate::rules::{self, Device, Doubt, Image, LoadError, Policy, Status, Verdict};

/// `cuModuleGetFunction`'s error for a name the loaded image does not hold.
pub const NOT_FOUND: (u32, &str, &str) = (500, "CUDA_ERROR_NOT_FOUND", "named symbol not found");

/// What a launch of a kernel whose loaded image holds it only as a stub returns: success (0),
/// having done nothing (docs/ARCH_RULES.md section 10). Not a CUDA error: fatkit's own name.
pub const COMPILED_OUT: (u32, &str, &str) = (
    0,
    "FATKIT_KERNEL_COMPILED_OUT",
    "the kernel's body is compiled out for this GPU",
);

/// What the check says of a kernel the image the driver loads holds, but which its crate
/// declared for other targets only (its body there may be partly compiled out): the launch
/// would be found, and is refused before it by fatkit's check. Not a CUDA error.
pub const DECLARED_AWAY: (u32, &str, &str) = (
    0,
    "FATKIT_KERNEL_DECLARED_FOR_OTHER_GPUS",
    "its crate declares the kernel for other GPUs only",
);

/// A kernel's code in one image that does nothing but return, or trap, where another image of
/// its module holds a body: its body was compiled out for that image's target
/// (docs/ARCH_RULES.md section 10).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Stub {
    /// `EXIT` (PTX `ret;`) and nothing before it: the launch succeeds and does nothing.
    Returns,
    /// A trap (`BPT.TRAP`, PTX `trap;`) and nothing before it: the launch fails at run time.
    Traps,
}

impl Stub {
    /// `returns` / `traps`: the name generated modules and manifests use.
    pub fn name(self) -> &'static str {
        match self {
            Stub::Returns => "returns",
            Stub::Traps => "traps",
        }
    }

    /// [`Stub::name`] read back.
    pub fn from_name(name: &str) -> Option<Stub> {
        match name {
            "returns" => Some(Stub::Returns),
            "traps" => Some(Stub::Traps),
            _ => None,
        }
    }

    /// `returns at once` / `traps`.
    pub fn words(self) -> &'static str {
        match self {
            Stub::Returns => "returns at once",
            Stub::Traps => "traps",
        }
    }
}

/// One kernel's fate on a device, given the module's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fate {
    /// The image the driver loads holds it.
    Loaded { image: usize },
    /// The module loads, but the image the driver loads does not hold the kernel:
    /// `cuModuleGetFunction` returns `CUDA_ERROR_NOT_FOUND` (500). `elsewhere`: the module's
    /// images that do hold it (none: the kernel is in no image).
    Absent {
        loaded: usize,
        elsewhere: Vec<usize>,
    },
    /// The module does not load at all.
    NoLoad(LoadError),
    /// The image the driver loads holds the kernel only as a [`Stub`]: found and launched, it
    /// does nothing (or traps).
    Stub { image: usize, kind: Stub },
}

/// Kind of a [`Fate`], for grouping and JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FateKind {
    Loaded,
    /// Not in the image the driver loads.
    NotInLoadedImage,
    /// The module does not load.
    ModuleFails,
    /// Its body is compiled out in the image the driver loads.
    CompiledOut,
}

impl Fate {
    pub fn kind(&self) -> FateKind {
        match self {
            Fate::Loaded { .. } => FateKind::Loaded,
            Fate::Absent { .. } => FateKind::NotInLoadedImage,
            Fate::NoLoad(_) => FateKind::ModuleFails,
            Fate::Stub { .. } => FateKind::CompiledOut,
        }
    }

    /// The image the kernel runs from.
    pub fn image(&self) -> Option<usize> {
        match self {
            Fate::Loaded { image } => Some(*image),
            _ => None,
        }
    }

    /// CUDA's error for this kernel: `(code, name, message)`; `None` when it is found.
    pub fn error(&self) -> Option<(u32, &'static str, &'static str)> {
        match self {
            Fate::Loaded { .. } => None,
            Fate::Absent { .. } => Some(NOT_FOUND),
            Fate::NoLoad(e) => Some((e.code(), e.name(), e.message())),
            Fate::Stub { .. } => Some(COMPILED_OUT),
        }
    }
}

/// What the driver does with a module's `images` on `device`, and with the kernel held by the
/// images `holders` (indices into `images`), of which those in `stubs` hold it as a stub.
pub fn fate(verdict: &Verdict, holders: &[usize], stubs: &[(usize, Stub)]) -> Fate {
    match verdict.selection {
        Err(e) => Fate::NoLoad(e),
        Ok(s) if holders.contains(&s.image()) => {
            match stubs.iter().find(|(i, _)| *i == s.image()) {
                Some(&(image, kind)) => Fate::Stub { image, kind },
                None => Fate::Loaded { image: s.image() },
            }
        }
        Ok(s) => Fate::Absent {
            loaded: s.image(),
            elsewhere: holders.to_vec(),
        },
    }
}

/// A kernel's status: the module's when the loaded image holds it; otherwise it fails, unless
/// which image the driver chooses is in doubt (an entry header that disagrees with its image).
/// A doubt about whether the chosen cubin loads at all does not save a kernel it lacks: it
/// fails either way.
pub fn status(verdict: &Verdict, fate: &Fate) -> Status {
    let choice_in_doubt = verdict
        .doubts
        .iter()
        .any(|d| matches!(d, Doubt::HeaderDisagrees { .. }));
    match fate {
        Fate::Loaded { .. } => verdict.status(),
        Fate::Absent { .. } | Fate::NoLoad(_) | Fate::Stub { .. } if choice_in_doubt => {
            Status::Unknown
        }
        Fate::Absent { .. } | Fate::NoLoad(_) | Fate::Stub { .. } => Status::Fails,
    }
}

/// One module: its images, and for each kernel the images holding it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Module<K> {
    pub images: Vec<Image>,
    /// Each kernel with the indices of the images holding it.
    pub kernels: Vec<(K, Vec<usize>)>,
    /// The kernels some image holds only as a [`Stub`], with those images.
    pub stubs: std::collections::BTreeMap<K, Vec<(usize, Stub)>>,
}

impl<K: Clone + Ord> Module<K> {
    /// A module from its images and, per image, the kernels it holds.
    pub fn of<'a, I>(images: impl IntoIterator<Item = (Image, I)>) -> Module<K>
    where
        I: IntoIterator<Item = &'a K>,
        K: 'a,
    {
        let mut list = Vec::new();
        let mut kernels: std::collections::BTreeMap<K, Vec<usize>> = Default::default();
        for (idx, (image, names)) in images.into_iter().enumerate() {
            list.push(image);
            for k in names {
                let holders = kernels.entry(k.clone()).or_default();
                if !holders.contains(&idx) {
                    holders.push(idx);
                }
            }
        }
        Module {
            images: list,
            kernels: kernels.into_iter().collect(),
            stubs: Default::default(),
        }
    }

    /// The same module, its kernels' stubs known: for each image whose code was read (index
    /// into `images`), the kernels it holds only as a stub (none: every kernel it holds has a
    /// body). A stub is kept only where another image whose code was read holds the same
    /// kernel with a body: a kernel written empty is empty everywhere, and no stub; an image
    /// whose code could not be read corroborates nothing.
    pub fn with_stubs(mut self, read: &[(usize, &[(K, Stub)])]) -> Module<K> {
        let mut stubs: std::collections::BTreeMap<K, Vec<(usize, Stub)>> = Default::default();
        for (image, list) in read {
            for (k, kind) in list.iter() {
                stubs.entry(k.clone()).or_default().push((*image, *kind));
            }
        }
        let has_body = |k: &K, h: usize, stubbed: &[(usize, Stub)]| {
            read.iter().any(|(i, _)| *i == h)
                && !stubbed.iter().any(|(s, _)| *s == h)
                && self
                    .kernels
                    .iter()
                    .any(|(name, holders)| name == k && holders.contains(&h))
        };
        stubs.retain(|k, stubbed| (0..self.images.len()).any(|h| has_body(k, h, stubbed)));
        self.stubs = stubs;
        self
    }

    /// The images holding `kernel` only as a stub.
    pub fn stubs_of(&self, kernel: &K) -> &[(usize, Stub)] {
        self.stubs.get(kernel).map_or(&[], Vec::as_slice)
    }

    /// The images no kernel is in: each an image the driver may load and find nothing in.
    pub fn empty_images(&self) -> Vec<usize> {
        (0..self.images.len())
            .filter(|i| !self.kernels.iter().any(|(_, h)| h.contains(i)))
            .collect()
    }

    /// The module's verdict on `device`, and each kernel's fate and status there.
    pub fn on(&self, device: &Device, policy: Policy) -> Answer<'_, K> {
        let verdict = rules::select(&self.images, device, policy);
        let kernels = self
            .kernels
            .iter()
            .map(|(k, holders)| {
                let fate = fate(&verdict, holders, self.stubs_of(k));
                let status = status(&verdict, &fate);
                (k, fate, status)
            })
            .collect();
        Answer { verdict, kernels }
    }
}

/// A module on one device: which image loads (or the error), and every kernel's fate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer<'m, K> {
    pub verdict: Verdict,
    pub kernels: Vec<(&'m K, Fate, Status)>,
}

#[cfg(test)]
mod tests;
