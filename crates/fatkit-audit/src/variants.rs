//! Libraries that are alternatives to one another: one file per CUDA release
//! (`libbitsandbytes_cuda118.so` ... `libbitsandbytes_cuda132.so`), of which a program loads
//! one. Judging all of them as loaded would fail an environment for a variant nobody loads.
//!
//! Variants are files of one directory whose names differ only in a CUDA version after `cuda`
//! or `cu` (`_cuda124`, `_cu124`). Which one is loaded is known where the rule is: bitsandbytes
//! loads the one of the CUDA release torch was built with (docs/ARCH_RULES.md section 8), so
//! with torch in the same input, the variant of torch's CUDA is the loaded one.

use std::collections::BTreeMap;

use crate::summary::{Answer, Library};
use fatkit_arch::CudaVersion;
use serde::Serialize;

/// A set of libraries of which one is loaded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Variants {
    /// The name with the version replaced: `bitsandbytes/libbitsandbytes_cuda{118,...}.so`.
    pub pattern: String,
    /// Indices into the input's libraries, by CUDA version.
    pub members: Vec<usize>,
    /// The CUDA version each member is for, in the same order.
    pub cuda: Vec<String>,
    /// The member loaded, where the rule is known and its input is there.
    pub loaded: Option<usize>,
    /// Why that one, or why none is known.
    pub because: String,
}

/// `libbitsandbytes_cuda124.so` -> (`libbitsandbytes_cuda`, `124`, `.so`).
fn split(name: &str) -> Option<(&str, &str, &str)> {
    let file_at = name.rfind('/').map_or(0, |i| i + 1);
    let file = &name[file_at..];
    for tag in ["cuda", "cu"] {
        let mut from = 0;
        while let Some(i) = file[from..].find(tag) {
            let digits_at = from + i + tag.len();
            let digits = file[digits_at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .count();
            if (2..=3).contains(&digits) {
                let end = file_at + digits_at + digits;
                return Some((
                    &name[..file_at + digits_at],
                    &name[file_at + digits_at..end],
                    &name[end..],
                ));
            }
            from = digits_at;
        }
    }
    None
}

/// `124` -> CUDA 12.4; `12` -> CUDA 12.0.
fn version(digits: &str) -> Option<CudaVersion> {
    let text = match digits.len() {
        3 => format!("{}.{}", &digits[..2], &digits[2..]),
        2 => format!("{digits}.0"),
        _ => return None,
    };
    text.parse().ok()
}

/// The CUDA release torch was built with, from its libraries in `libs`: the newest toolkit
/// that built the cubins of `libtorch_cuda.so`.
fn torch_cuda(libs: &[Library]) -> Option<CudaVersion> {
    libs.iter()
        .filter(|l| l.name.ends_with("libtorch_cuda.so"))
        .flat_map(|l| l.toolkits.iter())
        .filter_map(|t| t.parse::<CudaVersion>().ok())
        .max()
}

/// The variant sets among `libs` (two or more files each).
pub fn find(libs: &[Library]) -> Vec<Variants> {
    // By (name before the version, name after it, distribution): (library, version digits).
    type Key<'a> = (String, String, Option<&'a str>);
    let mut sets: BTreeMap<Key<'_>, Vec<(usize, String)>> = BTreeMap::new();
    for (i, l) in libs.iter().enumerate() {
        if let Some((stem, digits, rest)) = split(&l.name) {
            if version(digits).is_some() {
                sets.entry((stem.to_owned(), rest.to_owned(), l.package.as_deref()))
                    .or_default()
                    .push((i, digits.to_owned()));
            }
        }
    }
    let torch = torch_cuda(libs);
    sets.into_iter()
        .filter(|(_, m)| m.len() > 1)
        .map(|((stem, rest, _), mut m)| {
            m.sort_by_key(|(_, d)| version(d));
            let listed: Vec<&str> = m.iter().map(|(_, d)| d.as_str()).collect();
            let pattern = format!("{stem}{{{}}}{rest}", listed.join(","));
            let bnb = stem.contains("bitsandbytes");
            let (loaded, because) = match (bnb, torch) {
                (true, Some(cuda)) => {
                    let hit = m
                        .iter()
                        .find(|(_, d)| version(d) == Some(cuda))
                        .map(|(i, _)| *i);
                    let because = match hit {
                        Some(_) => format!(
                            "bitsandbytes loads the variant of torch's CUDA ({cuda}, from libtorch_cuda.so), unless BNB_CUDA_VERSION names another"
                        ),
                        None => format!(
                            "bitsandbytes loads the variant of torch's CUDA ({cuda}), and there is none: it fails to load; set BNB_CUDA_VERSION to one of them"
                        ),
                    };
                    (hit, because)
                }
                (true, None) => (
                    None,
                    "bitsandbytes loads the variant of torch's CUDA (or BNB_CUDA_VERSION's); torch is not in this input, so which is loaded is not known: audit it with torch's environment".to_owned(),
                ),
                (false, _) => (
                    None,
                    "a program loads one of them; which is not known here".to_owned(),
                ),
            };
            Variants {
                pattern,
                cuda: m
                    .iter()
                    .map(|(_, d)| version(d).map_or_else(|| d.clone(), |v| v.to_string()))
                    .collect(),
                members: m.into_iter().map(|(i, _)| i).collect(),
                loaded,
                because,
            }
        })
        .collect()
}

/// On the first GPU asked about, when the loaded variant does not run or is not known and
/// another runs: how to have that one loaded.
pub fn fix(libs: &[Library], set: &Variants) -> Option<String> {
    let passes = |i: usize| {
        libs.get(i)
            .and_then(|l| l.on.first())
            .is_some_and(|o| matches!(o.answer, Answer::Runs | Answer::RunsByPtx))
    };
    if set.loaded.is_some_and(passes) {
        return None;
    }
    // The newest variant that runs.
    let (_, cuda) = set
        .members
        .iter()
        .zip(&set.cuda)
        .rfind(|(i, _)| passes(**i))?;
    let digits = cuda.replace('.', "");
    Some(if set.pattern.contains("bitsandbytes") {
        format!(
            "have the CUDA {cuda} variant loaded: a torch built with CUDA {cuda}, or BNB_CUDA_VERSION={digits}"
        )
    } else {
        format!("load the CUDA {cuda} variant")
    })
}

/// The libraries whose every failure is the input's: all but the members of variant sets,
/// save the one known to be loaded (a set whose loaded member is not known speaks only
/// through [`decided`]).
pub(crate) fn speaking(libs: &[Library], sets: &[Variants]) -> Vec<usize> {
    (0..libs.len())
        .filter(|i| {
            sets.iter()
                .all(|s| !s.members.contains(i) || s.loaded == Some(*i))
        })
        .collect()
}

/// Library `i`'s answer on GPU `g`.
fn answer(libs: &[Library], i: usize, g: usize) -> Option<Answer> {
    libs.get(i).and_then(|l| l.on.get(g)).map(|o| o.answer)
}

/// A variant set's answer on GPU `g`: the loaded member's; where that is not known, the
/// members' common answer, or UNKNOWN when they differ.
pub fn decided(libs: &[Library], set: &Variants, g: usize) -> Option<Answer> {
    if let Some(i) = set.loaded {
        return answer(libs, i, g);
    }
    let answers: Vec<Answer> = set
        .members
        .iter()
        .filter_map(|&i| answer(libs, i, g))
        .collect();
    match answers.split_first() {
        Some((first, rest)) if rest.iter().all(|a| a == first) => Some(*first),
        Some(_) => Some(Answer::Unknown),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_split_at_the_cuda_version() {
        assert_eq!(
            split("bitsandbytes/libbitsandbytes_cuda124.so"),
            Some(("bitsandbytes/libbitsandbytes_cuda", "124", ".so"))
        );
        assert_eq!(
            split("lib/libfoo_cu12.so"),
            Some(("lib/libfoo_cu", "12", ".so"))
        );
        // `cuda` in a directory name or without digits is no version.
        assert_eq!(split("nvidia/cuda_cupti/lib/libcupti.so.12"), None);
        assert_eq!(split("libcudart.so.12"), None);
        assert_eq!(
            version("132").map(|v| v.to_string()).as_deref(),
            Some("13.2")
        );
    }
}
