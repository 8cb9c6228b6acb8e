use std::path::Path;

use super::*;
use crate::container::{Container, Strictness};
use crate::Limits;

fn golden(file: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/small/golden/plain.fatbin.x")
            .join(file),
    )
    .unwrap()
}

fn t(s: &str) -> Target {
    s.parse().unwrap()
}

/// write -> parse -> compare, for every compression and with and without identifiers.
#[test]
fn round_trips() {
    let sm80 = golden("plain.1.sm_80.cubin");
    let sm120 = golden("plain.3.sm_120.cubin");
    let ptx = golden("plain.1.sm_120.ptx");
    for compression in [Compression::None, Compression::Lz4, Compression::Zstd] {
        for identifier in [
            None,
            Some("kernels.cu"),
            Some("a-name-longer-than-eight.cu"),
        ] {
            let inputs = [
                Input {
                    target: t("sm_80"),
                    data: &sm80,
                    identifier,
                    compression,
                },
                Input {
                    target: t("sm_120"),
                    data: &sm120,
                    identifier,
                    compression,
                },
                Input {
                    target: t("compute_120"),
                    data: &ptx,
                    identifier,
                    compression,
                },
            ];
            let bytes = write(&inputs).unwrap();
            let c = Container::parse(&bytes, Strictness::KnownKindsOnly).unwrap();
            assert_eq!(c.len(), bytes.len());
            let entries: Vec<_> = c.entries().collect();
            assert_eq!(entries.len(), 3);
            for (e, input) in entries.iter().zip(&inputs) {
                assert_eq!(e.target(), Some(input.target));
                assert_eq!(e.compression(), compression);
                assert_eq!(e.image(&Limits::default()).unwrap().as_ref(), input.data);
                assert_eq!(
                    e.identifier()
                        .map(|b| String::from_utf8_lossy(b).into_owned()),
                    identifier.map(str::to_owned)
                );
            }
            assert_eq!(entries[0].code_version(), (1, 8));
            assert_eq!(entries[2].code_version(), (9, 2));
            // The new-ABI cubin carries its .nv.compat blob; the PTX an empty options string.
            assert_eq!(entries[1].options(), Some(&b""[..]));
            assert_eq!(entries[1].compat().map(<[u8]>::len), Some(28));
            assert_eq!(entries[0].compat(), None);
            assert_eq!(entries[1].flags() & flags::NEW_ABI, flags::NEW_ABI);
            assert_eq!(entries[2].options(), Some(&b""[..]));
        }
    }
}

#[test]
fn refuses_mismatched_images() {
    let sm80 = golden("plain.1.sm_80.cubin");
    let ptx = golden("plain.1.sm_120.ptx");
    let none = Compression::None;
    let err = write(&[Input {
        target: t("sm_90"),
        data: &sm80,
        identifier: None,
        compression: none,
    }])
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "sm_90: the cubin was built for sm_80, not 9.0"
    );
    let err = write(&[Input {
        target: t("sm_80"),
        data: &ptx,
        identifier: None,
        compression: none,
    }])
    .unwrap_err();
    assert!(err.reason.contains("malformed cubin"), "{err}");
    let err = write(&[Input {
        target: t("compute_80"),
        data: b"garbage",
        identifier: None,
        compression: none,
    }])
    .unwrap_err();
    assert_eq!(err.reason, "the PTX has no .version line");
}

#[test]
fn empty_container() {
    let bytes = write(&[]).unwrap();
    assert_eq!(bytes.len(), 16);
    assert_eq!(
        Container::parse(&bytes, Strictness::KnownKindsOnly)
            .unwrap()
            .entries()
            .count(),
        0
    );
}
