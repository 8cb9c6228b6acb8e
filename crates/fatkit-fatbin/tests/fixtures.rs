//! The reader against committed fatbins and what cuobjdump read from them
//! (tests/fixtures/small: the .cu source, the fatbins and `build.sh`, which made both).
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::{Path, PathBuf};

use fatkit_fatbin::container::{Container, Strictness};
use fatkit_fatbin::inspect::{inspect, Depth};
use fatkit_fatbin::{EntryKind, Limits};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/small")
}

const FATBINS: [&str; 5] = ["plain", "compress-all", "size", "speed", "ptx-jit"];

/// `(kind, target)` from cuobjdump's `ELF file 1: plain.1.sm_80.cubin` / `PTX file 1: plain.1.sm_120.ptx`.
fn golden_list(name: &str) -> Vec<(String, String)> {
    let text =
        std::fs::read_to_string(fixtures().join(format!("golden/{name}.fatbin.list"))).unwrap();
    let mut out: Vec<(String, String)> = text
        .lines()
        .filter_map(|line| {
            let file = line.split(": ").nth(1)?;
            let arch = file.split('.').find(|p| p.starts_with("sm_"))?;
            Some(if line.starts_with("ELF") {
                ("cubin".to_owned(), arch.to_owned())
            } else {
                ("ptx".to_owned(), arch.replace("sm_", "compute_"))
            })
        })
        .collect();
    out.sort();
    out
}

#[test]
fn listing_equals_cuobjdump() {
    for name in FATBINS {
        let data = std::fs::read(fixtures().join(format!("{name}.fatbin"))).unwrap();
        let report = inspect(name, &data, Depth::Headers, &Limits::default());
        assert!(report.errors.is_empty(), "{name}: {:?}", report.errors);
        let mut ours: Vec<(String, String)> = report
            .all_images()
            .iter()
            .map(|(_, _, e)| (e.kind.name(), e.target.unwrap().to_string()))
            .collect();
        ours.sort();
        assert_eq!(ours, golden_list(name), "{name}");
    }
}

#[test]
fn extracted_images_equal_cuobjdump_byte_for_byte() {
    let limits = Limits::default();
    let mut n_compared = 0;
    for name in FATBINS {
        let data = std::fs::read(fixtures().join(format!("{name}.fatbin"))).unwrap();
        let container = Container::parse(&data, Strictness::AnyKind).unwrap();
        // cuobjdump numbers ELF and PTX files separately, in entry order.
        let (mut n_elf, mut n_ptx) = (0, 0);
        for entry in container.entries() {
            let target = entry.target().unwrap();
            let file = match entry.kind() {
                EntryKind::Cubin => {
                    n_elf += 1;
                    format!(
                        "{name}.{n_elf}.sm_{}{}.cubin",
                        target.cc.digits(),
                        target.suffix.as_str()
                    )
                }
                EntryKind::Ptx => {
                    n_ptx += 1;
                    format!(
                        "{name}.{n_ptx}.sm_{}{}.ptx",
                        target.cc.digits(),
                        target.suffix.as_str()
                    )
                }
                other => panic!("unexpected {other:?}"),
            };
            let expected =
                std::fs::read(fixtures().join(format!("golden/{name}.fatbin.x/{file}"))).unwrap();
            let image = entry.image(&limits).unwrap();
            assert!(
                image.as_ref() == expected.as_slice(),
                "{name}: {file} differs ({} vs {} bytes)",
                image.len(),
                expected.len()
            );
            n_compared += 1;
        }
    }
    assert_eq!(n_compared, 22);
}

#[test]
fn kernels_and_toolkit_are_read() {
    let data = std::fs::read(fixtures().join("size.fatbin")).unwrap();
    let report = inspect("size", &data, Depth::Kernels, &Limits::default());
    let summary: Vec<String> = report
        .all_images()
        .iter()
        .map(|(_, _, e)| {
            format!(
                "{} {:?} isa={} toolkit={} kernels={}",
                e.target.unwrap(),
                e.compression,
                e.ptx_isa.map_or("-".into(), |i| i.to_string()),
                e.toolkit.as_deref().unwrap_or("-"),
                e.kernels.join(",")
            )
        })
        .collect();
    expect_test::expect![[r#"
        [
            "sm_80 Zstd isa=- toolkit=13.2 kernels=a,b",
            "sm_90 Zstd isa=- toolkit=13.2 kernels=a,b",
            "sm_120 Zstd isa=- toolkit=13.2 kernels=a",
            "compute_120 Zstd isa=9.2 toolkit=- kernels=a",
        ]
    "#]]
    .assert_debug_eq(&summary);
}

#[test]
fn standalone_cubin_and_ptx_files() {
    let x = fixtures().join("golden/plain.fatbin.x");
    let cubin = std::fs::read(x.join("plain.3.sm_120.cubin")).unwrap();
    let report = inspect("k.cubin", &cubin, Depth::Kernels, &Limits::default());
    assert_eq!(report.format, fatkit_fatbin::Format::Cubin);
    let image = &report.images[0].image;
    assert_eq!(
        (image.target.unwrap().to_string(), image.kernels.clone()),
        ("sm_120".to_owned(), vec!["a".to_owned()])
    );
    let ptx = std::fs::read(x.join("plain.1.sm_120.ptx")).unwrap();
    let report = inspect("k.ptx", &ptx, Depth::Kernels, &Limits::default());
    assert_eq!(report.format, fatkit_fatbin::Format::Ptx);
    let image = &report.images[0].image;
    assert_eq!(image.target.unwrap().to_string(), "compute_120");
    assert_eq!(image.ptx_isa.unwrap().to_string(), "9.2");
    assert_eq!(image.kernels, ["a"]);
}

/// Bare cubins embedded in other bytes (as in `.rodata` of a host binary) are found by the
/// scan, at any alignment, and nothing is found in the bytes around them.
#[test]
fn bare_cubins_embedded_anywhere() {
    let x = fixtures().join("golden/plain.fatbin.x");
    let sm80 = std::fs::read(x.join("plain.1.sm_80.cubin")).unwrap();
    let sm90 = std::fs::read(x.join("plain.2.sm_90.cubin")).unwrap();
    let mut blob = b"not an ELF \x7fELF\x02\x01 either".to_vec();
    let at80 = blob.len();
    blob.extend_from_slice(&sm80);
    blob.extend_from_slice(b"xyz");
    let at90 = blob.len();
    blob.extend_from_slice(&sm90);
    blob.extend_from_slice(&[0u8; 33]);
    let report = inspect("blob", &blob, Depth::Kernels, &Limits::default());
    let found: Vec<(u64, String, Vec<String>)> = report
        .images
        .iter()
        .map(|b| {
            (
                b.image.offset,
                b.image.target.unwrap().to_string(),
                b.image.kernels.clone(),
            )
        })
        .collect();
    let ab = vec!["a".to_owned(), "b".to_owned()];
    assert_eq!(
        found,
        [
            (at80 as u64, "sm_80".to_owned(), ab.clone()),
            (at90 as u64, "sm_90".to_owned(), ab)
        ]
    );
    assert!(report
        .images
        .iter()
        .all(|b| b.origin == fatkit_fatbin::Origin::Scan));
}

/// An entry the driver never loads as an image (link-time IR, as cuFFT ships thousands of,
/// with flags that say LZ4 over what is no LZ4 block) is reported by its header and decides
/// nothing: no error, no image of the verdicts.
#[test]
fn link_time_ir_entries_are_not_read_as_images() {
    let mut data = std::fs::read(fixtures().join("plain.fatbin")).unwrap();
    let entry = 16;
    let put = |d: &mut Vec<u8>, at: usize, v: &[u8]| d[at..at + v.len()].copy_from_slice(v);
    put(&mut data, entry, &8u16.to_le_bytes()); // kind: LTO IR
    let flags = u64::from_le_bytes(data[entry + 0x28..entry + 0x30].try_into().unwrap()) | 0x2000;
    put(&mut data, entry + 0x28, &flags.to_le_bytes()); // "LZ4"
    let stored = u64::from_le_bytes(data[entry + 8..entry + 16].try_into().unwrap()) as u32;
    put(&mut data, entry + 0x10, &stored.to_le_bytes());
    // A payload no LZ4 reader takes: each token copies from before the start.
    let header = u32::from_le_bytes(data[entry + 4..entry + 8].try_into().unwrap()) as usize;
    let payload = entry + header;
    data[payload..payload + stored as usize].fill(0x1f);
    put(&mut data, entry + 0x38, &(1u64 << 16).to_le_bytes());
    let report = inspect("lto", &data, Depth::Kernels, &Limits::default());
    assert_eq!(report.all_errors(), Vec::<String>::new());
    assert_eq!(report.all_images()[0].2.error, None);
    let kinds: Vec<EntryKind> = report.all_images().iter().map(|(_, _, e)| e.kind).collect();
    assert_eq!(kinds[0], EntryKind::LtoIr);
    assert!(report.all_images()[0].2.kernels.is_empty());
    // The other images are read as before.
    assert_eq!(report.all_images()[1].2.kernels, ["a", "b"]);
}

/// `a` targets exist from sm_90 on: the bit an old-ABI cubin sets for them (0x800 in
/// `e_flags`, as CUDA 9.0 did on sm_60 cubins for another purpose) makes no "sm_60a".
#[test]
fn no_arch_specific_target_below_sm_90() {
    let data = std::fs::read(fixtures().join("plain.fatbin")).unwrap();
    let c = Container::parse(&data, Strictness::AnyKind).unwrap();
    let cubin = c
        .entries()
        .next()
        .unwrap()
        .image(&Limits::default())
        .unwrap()
        .into_owned();
    let old_abi = |sm: u32| {
        let mut elf = cubin.clone();
        elf[7] = 0x33; // OS ABI of the older cubins
        elf[8] = 7; // ABI version 7
        elf[48..52].copy_from_slice(&(sm | 0x800).to_le_bytes());
        fatkit_fatbin::cubin::inspect(&elf).unwrap()
    };
    let sm60 = old_abi(60);
    assert_eq!(
        (sm60.cc.unwrap().to_string(), sm60.arch_specific),
        ("6.0".to_owned(), false)
    );
    let sm90 = old_abi(90);
    assert_eq!(
        (sm90.cc.unwrap().to_string(), sm90.arch_specific),
        ("9.0".to_owned(), true)
    );
}
