//! Collections built per GPU: a distribution (or an input) of standalone cubin files, each a
//! module that a loader picks by name for the GPU it is built for (FlashInfer's
//! `flashinfer-cubin`: 15,970 of them, for sm_100, sm_100a and sm_103a). A file of one built for
//! another GPU is aside on this one, as an architecture-specific family inside cuBLAS is
//! ([`crate::general`]): not a failure. A distribution whose every file is for other GPUs holds
//! nothing for this one: that is the finding, said as such, never "install a build for it".
//! `--strict` holds every file to every GPU.

use std::collections::BTreeMap;

use fatkit_fatbin::Format;

use crate::record::LibraryRef;
use crate::summary::{Answer, Library};

/// The fewest standalone cubins of one distribution that make it a collection: one cubin is
/// the file asked about, judged as it is.
const MIN_FILES: usize = 2;

/// For each library: whether it is a file of a collection built per GPU.
pub(crate) fn per_gpu(libs: &[LibraryRef<'_>]) -> Vec<bool> {
    let cubin =
        |l: &LibraryRef<'_>| l.report.format == Format::Cubin && l.report.members.is_empty();
    let mut cubins: BTreeMap<Option<&str>, usize> = BTreeMap::new();
    for l in libs.iter().filter(|l| cubin(l)) {
        *cubins.entry(l.package.as_deref()).or_default() += 1;
    }
    libs.iter()
        .map(|l| {
            cubin(l)
                && cubins
                    .get(&l.package.as_deref())
                    .is_some_and(|&n| n >= MIN_FILES)
        })
        .collect()
}

/// The distributions (by name; `None` the libraries of none) that hold nothing for GPU `g`:
/// every library of theirs is for other GPUs, or has no kernel, and one is for other GPUs.
pub fn none_for<'a>(libs: impl IntoIterator<Item = &'a Library>, g: usize) -> Vec<Option<&'a str>> {
    let mut of: BTreeMap<Option<&str>, (bool, bool)> = BTreeMap::new();
    for l in libs {
        let Some(on) = l.on.get(g) else { continue };
        let (all_aside, some_other) = of.entry(l.package.as_deref()).or_insert((true, false));
        *all_aside &= matches!(on.answer, Answer::OtherGpus | Answer::NoKernels);
        *some_other |= on.answer == Answer::OtherGpus;
    }
    of.into_iter()
        .filter(|(_, (all, some))| *all && *some)
        .map(|(p, _)| p)
        .collect()
}
