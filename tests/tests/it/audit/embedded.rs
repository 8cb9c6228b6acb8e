//! A Rust binary embedding a fatbin with `include_bytes!` at an odd offset: cuobjdump sees no
//! device code (there is no `.nv_fatbin` section), `audit` finds every entry. This test binary
//! is that Rust binary.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use fatkit_fatbin::inspect::{inspect, Depth};
use fatkit_fatbin::{Limits, Origin};
use fatkit_tests::{cuobjdump_list, toolchain};

/// Only the length: a `const` holding the bytes would put a second copy in the binary.
const N: usize = include_bytes!("../../../fixtures/small/size.fatbin").len();

/// Aligned to 8, then three bytes in: the fatbin starts at an odd address and file offset.
#[repr(C, align(8))]
struct Embedded {
    pad: [u8; 3],
    fatbin: [u8; N],
}

#[used]
static EMBEDDED: Embedded = Embedded {
    pad: *b"odd",
    fatbin: *include_bytes!("../../../fixtures/small/size.fatbin"),
};

#[test]
fn audit_finds_a_fatbin_cuobjdump_cannot_see() {
    assert_eq!(EMBEDDED.pad, *b"odd");
    assert_eq!(
        (EMBEDDED.fatbin.as_ptr() as usize) % 2,
        1,
        "the fatbin is not at an odd address"
    );
    let exe = std::env::current_exe().unwrap();
    let data = std::fs::read(&exe).unwrap();
    let report = inspect("test-binary", &data, Depth::Kernels, &Limits::default());
    let embedded: Vec<_> = report
        .containers
        .iter()
        .filter(|c| c.origin == Origin::Scan && c.size == N as u64)
        .collect();
    assert_eq!(embedded.len(), 1, "{:?}", report.containers);
    let container = embedded[0];
    assert_eq!(
        container.offset % 2,
        1,
        "file offset {:#x} is not odd",
        container.offset
    );
    assert_eq!(
        &data[container.offset as usize..][..N],
        &EMBEDDED.fatbin[..]
    );
    let targets: Vec<String> = container
        .entries
        .iter()
        .map(|e| e.target.unwrap().to_string())
        .collect();
    assert_eq!(targets, ["sm_80", "sm_90", "sm_120", "compute_120"]);
    assert!(container
        .entries
        .iter()
        .all(|e| e.error.is_none() && !e.kernels.is_empty()));

    if let Some(tc) = toolchain() {
        assert_eq!(
            cuobjdump_list(&tc, &exe),
            Vec::<(String, String)>::new(),
            "cuobjdump saw device code"
        );
    }
}
