//! GPU products and their compute capabilities (docs/ARCH_RULES.md section 6), with a forgiving
//! lookup: `"RTX 5090"`, `"rtx5090"`, `"GeForce RTX 4090"`, `"H100"`, `"jetson orin"`.

use std::fmt;

use serde::Serialize;

use crate::toolkit::Confidence;
use crate::Cc;

/// One GPU product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Product {
    pub name: &'static str,
    pub cc: Cc,
    /// Other names it goes by.
    pub aliases: &'static [&'static str],
    pub confidence: Confidence,
}

const fn p(name: &'static str, major: u8, minor: u8) -> Product {
    Product {
        name,
        cc: Cc::new(major, minor),
        aliases: &[],
        confidence: Confidence::High,
    }
}

const fn aka(
    name: &'static str,
    major: u8,
    minor: u8,
    aliases: &'static [&'static str],
) -> Product {
    Product {
        name,
        cc: Cc::new(major, minor),
        aliases,
        confidence: Confidence::High,
    }
}

/// Every product the tables know, newest compute capability first.
pub const PRODUCTS: &[Product] = &[
    aka("GB10", 12, 1, &["DGX Spark"]),
    p("GeForce RTX 5090", 12, 0),
    p("GeForce RTX 5080", 12, 0),
    p("GeForce RTX 5070 Ti", 12, 0),
    p("GeForce RTX 5070", 12, 0),
    p("GeForce RTX 5060 Ti", 12, 0),
    p("GeForce RTX 5060", 12, 0),
    p("GeForce RTX 5050", 12, 0),
    p("RTX PRO 6000 Blackwell", 12, 0),
    p("RTX PRO 5000 Blackwell", 12, 0),
    p("RTX PRO 4500 Blackwell", 12, 0),
    p("RTX PRO 4000 Blackwell", 12, 0),
    p("RTX PRO 2000 Blackwell", 12, 0),
    aka("Jetson T5000", 11, 0, &["Jetson AGX Thor"]),
    aka("Jetson T4000", 11, 0, &["Jetson Thor T4000"]),
    Product {
        name: "Rubin",
        cc: Cc::new(10, 7),
        aliases: &[],
        confidence: Confidence::Medium,
    },
    p("B300", 10, 3),
    p("GB300", 10, 3),
    p("B200", 10, 0),
    p("GB200", 10, 0),
    p("H100", 9, 0),
    p("H200", 9, 0),
    p("GH200", 9, 0),
    p("L4", 8, 9),
    p("L40", 8, 9),
    p("L40S", 8, 9),
    p("RTX 6000 Ada", 8, 9),
    p("GeForce RTX 4090", 8, 9),
    p("GeForce RTX 4080 Super", 8, 9),
    p("GeForce RTX 4080", 8, 9),
    p("GeForce RTX 4070 Ti Super", 8, 9),
    p("GeForce RTX 4070 Ti", 8, 9),
    p("GeForce RTX 4070 Super", 8, 9),
    p("GeForce RTX 4070", 8, 9),
    p("GeForce RTX 4060 Ti", 8, 9),
    p("GeForce RTX 4060", 8, 9),
    p("GeForce RTX 4050", 8, 9),
    p("Jetson AGX Orin", 8, 7),
    p("Jetson Orin NX", 8, 7),
    p("Jetson Orin Nano", 8, 7),
    p("A40", 8, 6),
    p("A10", 8, 6),
    p("A16", 8, 6),
    p("A2", 8, 6),
    p("RTX A6000", 8, 6),
    p("RTX A5500", 8, 6),
    p("RTX A5000", 8, 6),
    p("RTX A4500", 8, 6),
    p("RTX A4000", 8, 6),
    p("RTX A2000", 8, 6),
    p("GeForce RTX 3090 Ti", 8, 6),
    p("GeForce RTX 3090", 8, 6),
    p("GeForce RTX 3080 Ti", 8, 6),
    p("GeForce RTX 3080", 8, 6),
    p("GeForce RTX 3070 Ti", 8, 6),
    p("GeForce RTX 3070", 8, 6),
    p("GeForce RTX 3060 Ti", 8, 6),
    p("GeForce RTX 3060", 8, 6),
    p("GeForce RTX 3050", 8, 6),
    p("A100", 8, 0),
    p("A800", 8, 0),
    p("A30", 8, 0),
    p("T4", 7, 5),
    p("Quadro RTX 8000", 7, 5),
    p("Quadro RTX 6000", 7, 5),
    p("Quadro RTX 5000", 7, 5),
    p("Quadro RTX 4000", 7, 5),
    p("GeForce RTX 2080 Ti", 7, 5),
    p("GeForce RTX 2080 Super", 7, 5),
    p("GeForce RTX 2080", 7, 5),
    p("GeForce RTX 2070 Super", 7, 5),
    p("GeForce RTX 2070", 7, 5),
    p("GeForce RTX 2060 Super", 7, 5),
    p("GeForce RTX 2060", 7, 5),
    p("GeForce GTX 1660 Ti", 7, 5),
    p("GeForce GTX 1660 Super", 7, 5),
    p("GeForce GTX 1660", 7, 5),
    p("GeForce GTX 1650 Super", 7, 5),
    p("GeForce GTX 1650", 7, 5),
    p("Jetson AGX Xavier", 7, 2),
    p("Jetson Xavier NX", 7, 2),
    aka("V100", 7, 0, &["Tesla V100"]),
    p("TITAN V", 7, 0),
    p("Quadro GV100", 7, 0),
    // Pascal and Maxwell (NVIDIA's CUDA GPUs list): CUDA 12.x still builds for them.
    p("Jetson TX2", 6, 2),
    p("GeForce GTX 1080 Ti", 6, 1),
    p("GeForce GTX 1080", 6, 1),
    p("GeForce GTX 1070 Ti", 6, 1),
    p("GeForce GTX 1070", 6, 1),
    p("GeForce GTX 1060", 6, 1),
    p("GeForce GTX 1050 Ti", 6, 1),
    p("GeForce GTX 1050", 6, 1),
    p("TITAN Xp", 6, 1),
    aka("TITAN X Pascal", 6, 1, &["NVIDIA TITAN X (Pascal)"]),
    p("Tesla P40", 6, 1),
    p("Tesla P4", 6, 1),
    p("Quadro P6000", 6, 1),
    p("Quadro P5000", 6, 1),
    p("Quadro P4000", 6, 1),
    p("Tesla P100", 6, 0),
    p("Quadro GP100", 6, 0),
    p("Jetson Nano", 5, 3),
    p("Jetson TX1", 5, 3),
    p("GeForce GTX 980 Ti", 5, 2),
    p("GeForce GTX 980", 5, 2),
    p("GeForce GTX 970", 5, 2),
    p("GeForce GTX 960", 5, 2),
    p("GeForce GTX 950", 5, 2),
    aka("GeForce GTX TITAN X", 5, 2, &["GTX TITAN X"]),
    p("Tesla M40", 5, 2),
    p("Tesla M60", 5, 2),
    p("Tesla M4", 5, 2),
    p("Quadro M6000", 5, 2),
    p("GeForce GTX 750 Ti", 5, 0),
    p("GeForce GTX 750", 5, 0),
    p("Tesla M10", 5, 0),
];

/// Words that carry no information in a product name.
const NOISE: &[&str] = &["nvidia", "geforce", "tesla"];

/// Lowercase alphanumeric tokens, split at letter/digit boundaries: `"RTX5090"` -> `rtx`, `5090`.
fn tokens(s: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut prev: Option<bool> = None;
    for c in s.chars() {
        if !c.is_ascii_alphanumeric() {
            prev = None;
            continue;
        }
        let digit = c.is_ascii_digit();
        match out.last_mut() {
            Some(last) if prev == Some(digit) => last.push(c.to_ascii_lowercase()),
            _ => out.push(c.to_ascii_lowercase().to_string()),
        }
        prev = Some(digit);
    }
    out.retain(|t| !NOISE.contains(&t.as_str()));
    out
}

/// Lowercase alphanumeric words, split at anything else: `"A100-PCIE-40GB"` -> `a100`,
/// `pcie`, `40gb`.
fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .filter(|w| !NOISE.contains(&w.as_str()))
        .collect()
}

/// A GPU named on the command line: a product, or a bare compute capability.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Gpu {
    /// The product's name, or `CC 9.0` for a bare compute capability.
    pub name: String,
    pub cc: Cc,
    /// Every product of the family matched, when the query named several of one CC
    /// (`"jetson orin"`).
    pub products: Vec<&'static str>,
}

/// A GPU name that matches no product, or several of different compute capabilities.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LookupError {
    Unknown {
        query: String,
        near: Vec<&'static Product>,
    },
    Ambiguous {
        query: String,
        matches: Vec<&'static Product>,
    },
    /// A compute capability no GPU in the tables has and no toolkit builds for.
    NoSuchCc { query: String, cc: Cc },
}

fn list(products: &[&Product]) -> String {
    let names: Vec<String> = products
        .iter()
        .map(|p| format!("{} ({})", p.name, p.cc))
        .collect();
    names.join(", ")
}

impl fmt::Display for LookupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LookupError::NoSuchCc { query, cc } => write!(
                f,
                "'{query}': no GPU has compute capability {cc}; give a product name or the compute capability of a GPU (e.g. 8.6, sm_86)"
            ),
            LookupError::Unknown { query, near } if near.is_empty() => write!(
                f,
                "unknown GPU '{query}'; give its compute capability instead (e.g. --gpu 8.6), or see `fatkit profiles show NAME` for the GPUs known"
            ),
            LookupError::Unknown { query, near } => write!(
                f,
                "unknown GPU '{query}'; did you mean {}? A compute capability (e.g. 8.6) works too",
                list(near)
            ),
            LookupError::Ambiguous { query, matches } => write!(
                f,
                "'{query}' matches GPUs of different compute capabilities: {}; name one of them",
                list(matches)
            ),
        }
    }
}

impl std::error::Error for LookupError {}

/// A query that is a compute capability, as `12.0` or as a target name (`sm_120`,
/// `compute_120`): the GPU of that capability, if some GPU has it or a toolkit builds for it
/// (`99.9` is a typo, not a GPU); `None` for a query that is no capability.
fn lookup_cc(query: &str) -> Result<Option<Gpu>, LookupError> {
    let cc = query.trim().parse::<Cc>().ok().or_else(|| {
        let t = query.trim();
        let digits = t
            .strip_prefix("sm_")
            .or_else(|| t.strip_prefix("compute_"))?;
        Cc::from_digits(digits)
    });
    let Some(cc) = cc else {
        return Ok(None);
    };
    let known = PRODUCTS.iter().any(|p| p.cc == cc)
        || crate::toolkit::known_targets().iter().any(|t| t.cc == cc);
    if !known {
        return Err(LookupError::NoSuchCc {
            query: query.trim().to_owned(),
            cc,
        });
    }
    Ok(Some(Gpu {
        name: format!("CC {cc}"),
        cc,
        products: Vec::new(),
    }))
}

/// The products a name query (its tokens `q`) matches, each with the tokens its best-matching
/// name has beyond the query's; failing that, the products whose whole name is in the query.
fn matching(query: &str, q: &[String]) -> Vec<(&'static Product, usize)> {
    // (product, extra tokens in the best-matching name)
    let mut hits: Vec<(&'static Product, usize)> = Vec::new();
    for product in PRODUCTS {
        let best = std::iter::once(product.name)
            .chain(product.aliases.iter().copied())
            .map(tokens)
            .filter(|name| q.iter().all(|t| name.contains(t)))
            .map(|name| name.len().saturating_sub(q.len()))
            .min();
        if let Some(extra) = best {
            hits.push((product, extra));
        }
    }
    if hits.is_empty() {
        // The other way round: names as drivers report them carry more words than the
        // product's ("NVIDIA A100-SXM4-80GB", "H100 80GB HBM3"). Take the products whose whole
        // name is in the query, the longest names first.
        // Whole words, not tokens: "A100-PCIE-40GB" holds the word `a100`, not the `a40` of
        // A40 that its tokens `a` and `40` would spell.
        let query_words = words(query);
        let mut within: Vec<(&'static Product, usize)> = PRODUCTS
            .iter()
            .filter_map(|p| {
                let name = words(p.name);
                (!name.is_empty() && name.iter().all(|w| query_words.contains(w)))
                    .then_some((p, tokens(p.name).len()))
            })
            .collect();
        let longest = within.iter().map(|&(_, n)| n).max().unwrap_or(0);
        within.retain(|&(_, n)| n == longest);
        hits = within.into_iter().map(|(p, _)| (p, 0)).collect();
    }
    hits
}

mod near;

/// Resolves a GPU name (`"RTX 5090"`) or a compute capability (`"12.0"`).
pub fn lookup(query: &str) -> Result<Gpu, LookupError> {
    if let Some(gpu) = lookup_cc(query)? {
        return Ok(gpu);
    }
    let q = tokens(query);
    let unknown = |near| LookupError::Unknown {
        query: query.trim().to_owned(),
        near,
    };
    if q.is_empty() {
        return Err(unknown(Vec::new()));
    }
    let hits = matching(query, &q);
    let Some(fewest) = hits.iter().map(|&(_, extra)| extra).min() else {
        let mut near: Vec<(&'static Product, usize)> = PRODUCTS
            .iter()
            .map(|p| (p, tokens(p.name).iter().filter(|t| q.contains(t)).count()))
            .filter(|&(_, shared)| shared > 0)
            .collect();
        near.sort_by_key(|&(_, shared)| std::cmp::Reverse(shared));
        let most = near.first().map_or(0, |&(_, shared)| shared);
        // A name one typo away (`A10O` for A100) first: sharing words alone misses it.
        let mut out = near::one_slip(query);
        for (p, s) in near {
            if s == most && !out.iter().any(|o| o.name == p.name) {
                out.push(p);
            }
        }
        out.truncate(5);
        return Err(unknown(out));
    };
    // An exact name wins outright; otherwise every partial match must agree on the CC.
    let candidates: Vec<&'static Product> = if fewest == 0 {
        hits.iter()
            .filter(|&&(_, extra)| extra == 0)
            .map(|&(p, _)| p)
            .collect()
    } else {
        hits.iter().map(|&(p, _)| p).collect()
    };
    let Some(first) = candidates.first() else {
        return Err(unknown(Vec::new()));
    };
    if candidates.iter().any(|p| p.cc != first.cc) {
        return Err(LookupError::Ambiguous {
            query: query.trim().to_owned(),
            matches: candidates,
        });
    }
    let best = hits
        .iter()
        .find(|&&(_, extra)| extra == fewest)
        .map_or(*first, |&(p, _)| p);
    Ok(Gpu {
        name: best.name.to_owned(),
        cc: best.cc,
        products: candidates.iter().map(|p| p.name).collect(),
    })
}

/// Named sets of GPUs for `audit --matrix`: one product per row, oldest first.
pub const SETS: &[(&str, &str, &[&str])] = &[
    (
        "generations",
        "one GPU of each generation from Volta to Blackwell",
        &[
            "V100",
            "T4",
            "A100",
            "GeForce RTX 3090",
            "GeForce RTX 4090",
            "H100",
            "B200",
            "GeForce RTX 5090",
        ],
    ),
    (
        "datacenter",
        "data-center GPUs from Volta to Blackwell Ultra",
        &["V100", "T4", "A100", "A10", "L4", "H100", "B200", "B300"],
    ),
    (
        "consumer",
        "GeForce cards from Turing to Blackwell",
        &[
            "GeForce RTX 2080",
            "GeForce RTX 3090",
            "GeForce RTX 4090",
            "GeForce RTX 5090",
        ],
    ),
];

/// The GPUs of a named set ([`SETS`]).
pub fn set(name: &str) -> Option<Vec<Gpu>> {
    let (_, _, names) = SETS.iter().find(|(n, _, _)| *n == name)?;
    names.iter().map(|n| lookup(n).ok()).collect()
}

/// The products of one compute capability, in table order.
pub fn products_of(cc: Cc) -> impl Iterator<Item = &'static Product> {
    PRODUCTS.iter().filter(move |p| p.cc == cc)
}

/// Every compute capability in the product table, newest first.
pub fn product_ccs() -> Vec<Cc> {
    let mut ccs: Vec<Cc> = PRODUCTS.iter().map(|p| p.cc).collect();
    ccs.sort_by(|a, b| b.cmp(a));
    ccs.dedup();
    ccs
}

/// Products that live only in aarch64 machines (docs/ARCH_RULES.md section 6): the Jetson
/// modules and DGX Spark are Arm systems on a chip, and the Grace superchips (GH200, GB200,
/// GB300) pair the GPU with NVIDIA's Arm CPU. A library built for x86-64 cannot run there.
pub const AARCH64_ONLY: &[&str] = &[
    "GB10",
    "Jetson T5000",
    "Jetson T4000",
    "GB300",
    "GB200",
    "GH200",
    "Jetson AGX Orin",
    "Jetson Orin NX",
    "Jetson Orin Nano",
    "Jetson AGX Xavier",
    "Jetson Xavier NX",
    "Jetson TX2",
    "Jetson Nano",
    "Jetson TX1",
];

/// Whether the GPU named `name` (a product's name, as [`lookup`] gives it) lives only in
/// aarch64 machines.
pub fn aarch64_only(name: &str) -> bool {
    AARCH64_ONLY.contains(&name)
}

/// The architecture generation of a compute capability, by NVIDIA's names (docs/ARCH_RULES.md
/// section 6): what a library built for "one generation only" is built for. `None` beyond the
/// tables.
pub fn generation(cc: Cc) -> Option<&'static str> {
    Some(match (cc.major, cc.minor) {
        (5, _) => "Maxwell",
        (6, _) => "Pascal",
        (7, 0) | (7, 2) => "Volta",
        (7, 5) => "Turing",
        (8, 9) => "Ada",
        (8, _) => "Ampere",
        (9, _) => "Hopper",
        (10, 7) => "Rubin",
        (10, _) | (11, _) | (12, _) => "Blackwell",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_aarch64_only_name_is_a_product_and_generations_group_majors() {
        for name in AARCH64_ONLY {
            assert!(
                PRODUCTS.iter().any(|p| p.name == *name),
                "{name} is not a product of the table"
            );
        }
        assert!(aarch64_only("GB10"));
        assert!(!aarch64_only("H100"));
        assert_eq!(generation(Cc::new(12, 0)), generation(Cc::new(10, 0)));
        assert_ne!(generation(Cc::new(8, 9)), generation(Cc::new(8, 6)));
        assert_ne!(generation(Cc::new(7, 5)), generation(Cc::new(7, 0)));
        // Every product has a generation.
        for p in PRODUCTS {
            assert!(generation(p.cc).is_some(), "{}", p.name);
        }
    }

    fn check(query: &str, expect: &str) {
        let got = match lookup(query) {
            Ok(gpu) => format!("{} {}", gpu.name, gpu.cc),
            Err(e) => e.to_string(),
        };
        assert_eq!(got, expect, "{query}");
    }

    #[test]
    fn forgiving_lookup() {
        check("RTX 5090", "GeForce RTX 5090 12.0");
        for (name, _, products) in SETS {
            let gpus = set(name).unwrap_or_default();
            assert_eq!(
                gpus.len(),
                products.len(),
                "set {name}: a product is not in the table"
            );
            assert!(
                gpus.windows(2)
                    .all(|w| w.first().map(|g| g.cc) <= w.get(1).map(|g| g.cc)),
                "set {name}: oldest first"
            );
        }
        check("rtx5090", "GeForce RTX 5090 12.0");
        check("GeForce RTX 4090", "GeForce RTX 4090 8.9");
        check("NVIDIA GeForce RTX 4090", "GeForce RTX 4090 8.9");
        check("H100", "H100 9.0");
        check("h200", "H200 9.0");
        check("jetson orin", "Jetson AGX Orin 8.7");
        check("Orin Nano", "Jetson Orin Nano 8.7");
        check("RTX 5080", "GeForce RTX 5080 12.0");
        check("V100", "V100 7.0");
        check("Tesla V100", "V100 7.0");
        check("L40", "L40 8.9");
        check("l40s", "L40S 8.9");
        check("A10", "A10 8.6");
        check("B200", "B200 10.0");
        check("DGX Spark", "GB10 12.1");
        check("thor", "Jetson T5000 11.0");
        check("RTX 4070", "GeForce RTX 4070 8.9");
        check("12.0", "CC 12.0 12.0");
        check("sm_120", "CC 12.0 12.0");
        check("compute_86", "CC 8.6 8.6");
        check(
            "99.9",
            "'99.9': no GPU has compute capability 99.9; give a product name or the compute capability of a GPU (e.g. 8.6, sm_86)",
        );
        // Names as nvidia-smi prints them.
        check("NVIDIA A800-SXM4-40GB", "A800 8.0");
        check("NVIDIA A100-PCIE-40GB", "A100 8.0");
        check("NVIDIA A100-SXM4-40GB", "A100 8.0");
        check("NVIDIA GH200 480GB", "GH200 9.0");
        check("NVIDIA GeForce GTX 1080", "GeForce GTX 1080 6.1");
        check("GTX 1070", "GeForce GTX 1070 6.1");
        check("Tesla P100-PCIE-16GB", "Tesla P100 6.0");
        check("P40", "Tesla P40 6.1");
        check("NVIDIA TITAN Xp", "TITAN Xp 6.1");
        check("GTX 980", "GeForce GTX 980 5.2");
        check(
            "RTX 6000",
            "'RTX 6000' matches GPUs of different compute capabilities: RTX PRO 6000 Blackwell (12.0), RTX 6000 Ada (8.9), RTX A6000 (8.6), Quadro RTX 6000 (7.5); name one of them",
        );
        check("H100 SXM", "H100 9.0");
        check("NVIDIA A100-SXM4-80GB", "A100 8.0");
        check("NVIDIA H100 80GB HBM3", "H100 9.0");
        check("Jetson Orin AGX 64GB", "Jetson AGX Orin 8.7");
        check(
            "A6001",
            "unknown GPU 'A6001'; did you mean A40 (8.6), A10 (8.6), A16 (8.6), A2 (8.6), RTX A6000 (8.6)? A compute capability (e.g. 8.6) works too",
        );
        check(
            "Radeon",
            "unknown GPU 'Radeon'; give its compute capability instead (e.g. --gpu 8.6), or see `fatkit profiles show NAME` for the GPUs known",
        );
        check("", "unknown GPU ''; give its compute capability instead (e.g. --gpu 8.6), or see `fatkit profiles show NAME` for the GPUs known");
    }

    #[test]
    fn every_product_finds_itself() {
        for product in PRODUCTS {
            let gpu = lookup(product.name).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(gpu.name, product.name);
        }
    }
}
