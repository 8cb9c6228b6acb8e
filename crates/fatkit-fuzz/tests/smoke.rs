//! The fuzz smoke run of every test run: each harness over its seeds, every input in
//! `fuzz/regressions/<harness>/` (the crashes and slow inputs a campaign found, kept), and a
//! deterministic batch of mutations of the seeds. A panic here is a bug in a parser; the
//! campaign itself is `cargo xtask fuzz`.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// xorshift64*: the same mutations in every run, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A few edits of `seed` as fuzzers make them: flipped bits, interesting values over size
/// fields, cuts, repeats, and the magics that start a container or an ELF.
fn mutate(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut data = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(data.len());
        match rng.below(7) {
            0 if !data.is_empty() => data[at] ^= 1 << rng.below(8),
            1 if at + 8 <= data.len() => {
                let v: u64 = [0, 1, 7, 8, 64, 0xffff, 0x7fff_ffff, u64::MAX][rng.below(8)];
                data[at..at + 8].copy_from_slice(&v.to_le_bytes());
            }
            2 => data.truncate(at),
            3 if !data.is_empty() => {
                let len = rng.below(data.len() - at).min(4096);
                let copy = data[at..at + len].to_vec();
                let to = rng.below(data.len());
                data.splice(to..to, copy);
            }
            4 => data
                .splice(at..at, 0xBA55_ED50u32.to_le_bytes())
                .for_each(drop),
            5 => data
                .splice(at..at, *b"\x7fELF\x02\x01\x01\x41")
                .for_each(drop),
            _ if !data.is_empty() => data[at] = rng.next() as u8,
            _ => data.push(rng.next() as u8),
        }
    }
    data
}

/// How many mutations of each harness's seeds a test run tries.
const MUTATIONS: usize = 3000;

#[test]
fn every_harness_survives_its_seeds_regressions_and_mutations() {
    let root = root();
    for &(name, harness) in fatkit_fuzz::HARNESSES {
        let seeds = fatkit_fuzz::seeds(name, &root);
        assert!(!seeds.is_empty(), "harness {name} has no seeds");
        let mut regressions: Vec<PathBuf> =
            std::fs::read_dir(root.join("fuzz/regressions").join(name))
                .map(|r| r.flatten().map(|e| e.path()).collect())
                .unwrap_or_default();
        regressions.sort();
        for path in &regressions {
            harness(&std::fs::read(path).unwrap());
        }
        for seed in &seeds {
            harness(seed);
        }
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ name.len() as u64);
        for _ in 0..MUTATIONS {
            let seed = &seeds[rng.below(seeds.len())];
            harness(&mutate(seed, &mut rng));
        }
        eprintln!(
            "{name}: {} seeds, {} regressions, {MUTATIONS} mutations",
            seeds.len(),
            regressions.len()
        );
    }
}
