//! Hostile input: truncations, byte flips and absurd size fields never panic, never allocate
//! past the limits, and always end in a report (with errors) or "no container".
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::path::Path;

use fatkit_fatbin::container::{Container, Strictness};
use fatkit_fatbin::inspect::{inspect, Depth};
use fatkit_fatbin::Limits;

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/small")
            .join(name),
    )
    .unwrap()
}

/// Small limits so a hostile size field cannot make a test allocate much.
const LIMITS: Limits = Limits {
    max_payload: 1 << 20,
    max_member: 1 << 20,
    max_depth: 2,
    inflate_ratio: 32,
    inflate_floor: 1 << 20,
    work_ratio: 64,
    work_floor: 2 * (1 << 20),
};

/// Reads everything there is to read, decompression and ELF parsing included.
fn read_all(data: &[u8]) -> usize {
    let report = inspect("fuzz", data, Depth::Kernels, &LIMITS);
    report.all_images().len() + report.all_errors().len()
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[test]
fn every_truncation_is_an_error() {
    for name in ["plain.fatbin", "size.fatbin", "speed.fatbin"] {
        let data = fixture(name);
        for cut in 0..data.len() {
            let err = Container::parse(&data[..cut], Strictness::AnyKind).unwrap_err();
            assert!(!err.to_string().is_empty());
            read_all(&data[..cut]);
        }
    }
}

#[test]
fn random_byte_flips_never_panic() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for name in [
        "plain.fatbin",
        "size.fatbin",
        "compress-all.fatbin",
        "speed.fatbin",
    ] {
        let data = fixture(name);
        for _ in 0..1500 {
            let mut mutated = data.clone();
            for _ in 0..=(rng.next() % 4) {
                let idx = (rng.next() % mutated.len() as u64) as usize;
                mutated[idx] ^= 1 << (rng.next() % 8);
            }
            read_all(&mutated);
        }
    }
}

/// Every 8-byte field of every header set to 2^63, 2^64-1 and 2^32-1 in turn.
#[test]
fn absurd_size_fields_are_errors() {
    let data = fixture("size.fatbin");
    let container = Container::parse(&data, Strictness::AnyKind).unwrap();
    // (offset, width): the container's fat_size, then each entry's size and offset fields.
    let mut fields = vec![(8usize, 8usize)];
    for entry in container.entries() {
        for (field, width) in [
            (0x04, 4),
            (0x08, 8),
            (0x10, 4),
            (0x14, 4),
            (0x20, 4),
            (0x24, 4),
            (0x38, 8),
        ] {
            fields.push((entry.offset + field, width));
        }
    }
    for (at, width) in fields {
        for value in [1u64 << 63, u64::MAX, u64::from(u32::MAX), 0] {
            let mut mutated = data.clone();
            mutated[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
            read_all(&mutated);
        }
    }
}

#[test]
fn decompression_is_capped() {
    let data = fixture("size.fatbin");
    let container = Container::parse(&data, Strictness::AnyKind).unwrap();
    let first = container.entries().next().unwrap();
    let mut mutated = data.clone();
    let at = first.offset + 0x38;
    mutated[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let container = Container::parse(&mutated, Strictness::AnyKind).unwrap();
    let err = container
        .entries()
        .next()
        .unwrap()
        .data(&LIMITS)
        .unwrap_err();
    assert!(err.to_string().contains("exceeds the limit"), "{err}");
}

#[test]
fn random_bytes_hold_no_container() {
    let mut rng = Rng(42);
    let mut data: Vec<u8> = (0..(4 << 20)).map(|_| rng.next() as u8).collect();
    // Plant magics that must be refused.
    for idx in (0..data.len() - 16).step_by(4099) {
        data[idx..idx + 4].copy_from_slice(&0xBA55_ED50u32.to_le_bytes());
    }
    let report = inspect("random", &data, Depth::Kernels, &LIMITS);
    assert!(
        report.containers.is_empty() && report.images.is_empty(),
        "{:?}",
        report.containers
    );
}
