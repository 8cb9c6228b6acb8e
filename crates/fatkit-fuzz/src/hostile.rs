//! Every hostile shape of input the adversarial rounds found making `audit` work faster than
//! its input grows, as a generator: `make(n, dir)` writes the shape at scale `n` (a count of
//! its repeated part) and returns the path to audit. The growth test doubles `n` and fails
//! when time or memory grows faster than linearly (`tests/tests/growth.rs`); `cargo xtask bench
//! hostile` runs the same shapes at large scales and prints the table the README shows.
//!
//! A generator, not a reader: it lays out buffers it sized itself.
#![allow(clippy::indexing_slicing)]

use std::io::Write;
use std::path::{Path, PathBuf};

/// One shape: its name, what the round measured of it before, and its generator.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub name: &'static str,
    pub finding: &'static str,
    /// The scale the growth test starts at (it runs `n`, `2n`, `4n`).
    pub small: usize,
    /// The scale the bench starts at.
    pub large: usize,
    /// `audit`'s arguments besides the path (the report a shape stresses).
    pub args: &'static [&'static str],
    pub make: fn(usize, &Path) -> PathBuf,
}

/// Every shape known.
pub const SHAPES: &[Shape] = &[
    Shape {
        name: "ptx-entries-on-one-line",
        finding: "PTX with many .entry on one line: a 512-byte ZSTD fatbin took 22 s (16x per 4x)",
        small: 20_000,
        large: 400_000,
        args: &[],
        make: ptx_entries_on_one_line,
    },
    Shape {
        name: "zip-end-record-candidates",
        finding: "a zip of many end-of-central-directory candidates: 276 KB took 21 s",
        small: 2_000,
        large: 40_000,
        args: &[],
        make: zip_end_record_candidates,
    },
    Shape {
        name: "elf-sections-over-one-region",
        finding: "a host ELF of N .nv_fatbin sections over one region: 304 KB took 12 s and 4.1 GB",
        small: 1_000,
        large: 16_000,
        args: &[],
        make: elf_sections_over_one_region,
    },
    Shape {
        name: "declaration-magics-without-end",
        finding: "fatkit:declared magics without an end marker: 22 s per MB of any file",
        small: 20_000,
        large: 400_000,
        args: &[],
        make: declaration_magics_without_end,
    },
    Shape {
        name: "declaration-magics-before-one-end",
        finding: "(a variant) magics each reaching the one end marker after them",
        small: 20_000,
        large: 400_000,
        args: &[],
        make: declaration_magics_before_one_end,
    },
    Shape {
        name: "records-times-kernels",
        finding: "N declaration records x N kernels: 8.7 s for 8 MB",
        small: 1_000,
        large: 20_000,
        args: &["--gpu", "T4"],
        make: records_times_kernels,
    },
    Shape {
        name: "same-size-entries",
        finding: "N same-sized entries differing mid-payload: 16.6 MB took 54 s",
        small: 1_000,
        large: 16_000,
        args: &[],
        make: same_size_entries,
    },
    Shape {
        name: "alike-libraries",
        finding: "the text report's grouping of N alike libraries: 160k libraries took 36 s",
        small: 400,
        large: 16_000,
        args: &["--gpu", "T4"],
        make: alike_libraries,
    },
    Shape {
        name: "elf-headers-sharing-a-table",
        finding: "ELF headers sharing one huge section header table: 0.5 / 2.0 / 7.6 / 32 s at 4.8 / 9.6 / 19 / 38 MB",
        small: 2_000,
        large: 40_000,
        args: &[],
        make: elf_headers_sharing_a_table,
    },
    Shape {
        name: "failing-copies",
        finding: "identical entries that fail after inflating were inflated again, each",
        small: 200,
        large: 4_000,
        args: &[],
        make: failing_copies,
    },
    Shape {
        name: "directory-of-bombs",
        finding: "a directory gave every file its own 1 GiB inflation floor: 190 s per MB, exit 0",
        small: 8,
        large: 256,
        args: &[],
        make: directory_of_bombs,
    },
    Shape {
        name: "many-distributions",
        finding: "(a variant) a site-packages of N distributions, one library each, grouped in the report",
        small: 400,
        large: 16_000,
        args: &["--gpu", "T4"],
        make: many_distributions,
    },
    Shape {
        name: "image-of-whiteouts",
        finding: "(issue 44) a container image whose top layer deletes, by whiteouts and opaque directories, the N deep files below it",
        small: 2_000,
        large: 40_000,
        args: &["--gpu", "T4"],
        make: image_of_whiteouts,
    },
    Shape {
        name: "nested-oci-indexes",
        finding: "(issue 53) OCI indexes nested four deep, each listing N copies of the next and no image: 5 / 10 / 20 / 41 KB took 0.01 / 0.17 / 2.6 / 42 s, the same index parsed once per path to it",
        small: 40,
        large: 400,
        args: &["--gpu", "T4"],
        make: nested_oci_indexes,
    },
    Shape {
        name: "ptx-text-blocks",
        finding: "(issue 54, new) a host file of N PTX text blocks between binary bytes, each read by the text scan",
        small: 1_000,
        large: 20_000,
        args: &["--gpu", "T4"],
        make: ptx_text_blocks,
    },
    Shape {
        name: "sections-side-by-side",
        finding: "(issue 54, new) a PE image of N .nv_fatb sections side by side, each checked against every section searched before it: 0.8 / 1.6 / 3.1 MB took 0.16 / 1.1 / 3.8 s",
        small: 8_000,
        large: 16_000,
        args: &[],
        make: sections_side_by_side,
    },
    Shape {
        name: "long-record",
        finding: "a wheel's RECORD read whole with no limit: a real 40 MB RECORD cost 1 GB",
        small: 100_000,
        large: 2_000_000,
        args: &[],
        make: long_record,
    },
];

mod build;
pub use build::{build_args, BUILD_SHAPES};

const PTX_HEAD: &str = ".version 8.0\n.target sm_80\n.address_size 64\n";

/// A fatbin container of raw entries `(kind, arch, flags, payload, uncompressed size)`,
/// laid out as docs/FATBIN_FORMAT.md section 2 says, whatever the payloads hold.
pub fn container(entries: &[(u16, u32, u64, Vec<u8>, u64)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (kind, arch, flags, payload, uncompressed) in entries {
        let padded = payload.len().next_multiple_of(8);
        let mut h = [0u8; 64];
        h[0..2].copy_from_slice(&kind.to_le_bytes());
        h[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
        h[4..8].copy_from_slice(&64u32.to_le_bytes());
        h[8..16].copy_from_slice(&(padded as u64).to_le_bytes());
        let compressed = if flags & 0xA000 != 0 {
            payload.len()
        } else {
            0
        };
        h[16..20].copy_from_slice(&(compressed as u32).to_le_bytes());
        h[24..26].copy_from_slice(&0u16.to_le_bytes());
        h[26..28].copy_from_slice(&8u16.to_le_bytes());
        h[28..32].copy_from_slice(&arch.to_le_bytes());
        h[40..48].copy_from_slice(&(flags | 0x11).to_le_bytes());
        h[56..64].copy_from_slice(&uncompressed.to_le_bytes());
        body.extend_from_slice(&h);
        body.extend_from_slice(payload);
        body.resize(body.len() + padded - payload.len(), 0);
    }
    let mut out = Vec::with_capacity(16 + body.len());
    out.extend_from_slice(&0xBA55_ED50u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// A PTX entry (kind 1) of `text` for sm_80, uncompressed.
fn ptx_entry(text: &str) -> (u16, u32, u64, Vec<u8>, u64) {
    (1, 80, 0, text.as_bytes().to_vec(), 0)
}

/// A PTX entry of `text`, ZSTD-compressed (flag 0x8000).
fn zstd_ptx_entry(text: &[u8], claimed: u64) -> (u16, u32, u64, Vec<u8>, u64) {
    let packed = zstd::bulk::compress(text, 19).unwrap_or_default();
    (1, 80, 0x8000, packed, claimed)
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    let _ = std::fs::create_dir_all(dir);
    let _ = std::fs::write(&path, bytes);
    path
}

fn ptx_entries_on_one_line(n: usize, dir: &Path) -> PathBuf {
    let mut text = PTX_HEAD.as_bytes().to_vec();
    for _ in 0..n {
        text.extend_from_slice(b".entry k( ");
    }
    let len = text.len() as u64;
    write(dir, "ptx.fatbin", &container(&[zstd_ptx_entry(&text, len)]))
}

fn zip_end_record_candidates(n: usize, dir: &Path) -> PathBuf {
    let mut bytes = b"PK\x03\x04".to_vec();
    bytes.resize(30, 0);
    // Each a well-formed end record naming one entry at offset 0, whose central directory
    // is nowhere: a reader that tries them all searches the file once each.
    let mut eocd = [0u8; 22];
    eocd[0..4].copy_from_slice(b"PK\x05\x06");
    eocd[8..10].copy_from_slice(&1u16.to_le_bytes());
    eocd[10..12].copy_from_slice(&1u16.to_le_bytes());
    for _ in 0..n {
        bytes.extend_from_slice(&eocd);
    }
    write(dir, "eocd.whl", &bytes)
}

/// A 64-bit little-endian ELF (`e_machine` x86-64) of `data` and sections `(name, offset in
/// data, size)`, after a string table.
pub fn host_elf(data: &[u8], sections: &[(&str, usize, usize)]) -> Vec<u8> {
    let mut names = vec![0u8];
    let mut name_at = Vec::new();
    for (name, _, _) in sections {
        match names
            .windows(name.len() + 1)
            .position(|w| w.get(..name.len()) == Some(name.as_bytes()) && w.last() == Some(&0))
        {
            Some(at) => name_at.push(at),
            None => {
                name_at.push(names.len());
                names.extend_from_slice(name.as_bytes());
                names.push(0);
            }
        }
    }
    let shstrtab_name = names.len();
    names.extend_from_slice(b".shstrtab\0");
    let data_at = 64;
    let names_at = data_at + data.len();
    let table_at = (names_at + names.len()).next_multiple_of(8);
    let count = sections.len() + 2;
    let mut out = vec![0u8; table_at + count * 64];
    out[0..8].copy_from_slice(b"\x7fELF\x02\x01\x01\x00");
    out[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
    out[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
    out[20..24].copy_from_slice(&1u32.to_le_bytes());
    out[40..48].copy_from_slice(&(table_at as u64).to_le_bytes());
    out[52..54].copy_from_slice(&64u16.to_le_bytes());
    out[58..60].copy_from_slice(&64u16.to_le_bytes());
    // ELF counts sections in 16 bits: past that, the shape would be another.
    assert!(count <= usize::from(u16::MAX), "at most 65,535 sections");
    out[60..62].copy_from_slice(&(count as u16).to_le_bytes());
    out[62..64].copy_from_slice(&((count - 1) as u16).to_le_bytes());
    out[data_at..names_at].copy_from_slice(data);
    out[names_at..names_at + names.len()].copy_from_slice(&names);
    let mut section = |i: usize, name: usize, kind: u32, offset: usize, size: usize| {
        let e = &mut out[table_at + i * 64..table_at + i * 64 + 64];
        e[0..4].copy_from_slice(&(name as u32).to_le_bytes());
        e[4..8].copy_from_slice(&kind.to_le_bytes());
        e[24..32].copy_from_slice(&(offset as u64).to_le_bytes());
        e[32..40].copy_from_slice(&(size as u64).to_le_bytes());
        e[48..56].copy_from_slice(&8u64.to_le_bytes());
    };
    for (i, ((_, offset, size), name)) in sections.iter().zip(&name_at).enumerate() {
        section(i + 1, *name, 1, data_at + offset, *size);
    }
    section(count - 1, shstrtab_name, 3, names_at, names.len());
    out
}

fn sections_side_by_side(n: usize, dir: &Path) -> PathBuf {
    write(dir, "sections.dll", &crate::pe::sections_side_by_side(n))
}

fn elf_sections_over_one_region(n: usize, dir: &Path) -> PathBuf {
    let ptx = format!("{PTX_HEAD}.visible .entry k()\n{{\nret;\n}}\n");
    let one = container(&[ptx_entry(&ptx)]);
    let region: Vec<u8> = std::iter::repeat_n(one, 8).flatten().collect();
    let sections: Vec<(&str, usize, usize)> =
        (0..n).map(|_| (".nv_fatbin", 0, region.len())).collect();
    write(dir, "sections.so", &host_elf(&region, &sections))
}

fn declaration_magics_without_end(n: usize, dir: &Path) -> PathBuf {
    let magic = fatkit_arch::declared::MAGIC.as_bytes();
    let bytes: Vec<u8> = std::iter::repeat_n(magic, n).flatten().copied().collect();
    write(dir, "magics.bin", &bytes)
}

fn declaration_magics_before_one_end(n: usize, dir: &Path) -> PathBuf {
    let magic = fatkit_arch::declared::MAGIC.as_bytes();
    let mut bytes: Vec<u8> = std::iter::repeat_n(magic, n).flatten().copied().collect();
    bytes.extend_from_slice(fatkit_arch::declared::END.as_bytes());
    write(dir, "magics-end.bin", &bytes)
}

fn records_times_kernels(n: usize, dir: &Path) -> PathBuf {
    let mut ptx = PTX_HEAD.to_owned();
    for i in 0..n {
        ptx.push_str(&format!(".visible .entry k{i}()\n{{\nret;\n}}\n"));
    }
    let c = container(&[ptx_entry(&ptx)]);
    let print = fatkit_arch::fingerprint::fingerprint(&c);
    let mut bytes = vec![0u8; 64];
    bytes.extend_from_slice(&c);
    for i in 0..n {
        bytes.extend_from_slice(
            format!(
                "{}module=m{i};fatbin={}:{print:016x};k{i}=sm_80;end;\n",
                fatkit_arch::declared::MAGIC,
                c.len()
            )
            .as_bytes(),
        );
    }
    write(dir, "records.bin", &bytes)
}

fn same_size_entries(n: usize, dir: &Path) -> PathBuf {
    let entries: Vec<_> = (0..n)
        .map(|i| {
            let mut text = PTX_HEAD.to_owned();
            text.push_str(&format!("// {i:08}"));
            text.push_str(&" ".repeat(1000));
            text.push_str(".visible .entry k()\n{\nret;\n}\n");
            ptx_entry(&text)
        })
        .collect();
    write(dir, "same.fatbin", &container(&entries))
}

fn alike_libraries(n: usize, dir: &Path) -> PathBuf {
    let ptx = format!("{PTX_HEAD}.visible .entry k()\n{{\nret;\n}}\n");
    let c = container(&[ptx_entry(&ptx)]);
    let libs = dir.join("libs");
    for i in 0..n {
        write(&libs, &format!("lib{i}.fatbin"), &c);
    }
    libs
}

fn elf_headers_sharing_a_table(n: usize, dir: &Path) -> PathBuf {
    const SECTIONS: usize = 4_096;
    let table_at = 64 + n * 64;
    let mut data = vec![0u8; table_at + SECTIONS * 64];
    for i in 0..n {
        let at = 64 + i * 64;
        let h = &mut data[at..at + 64];
        h[..9].copy_from_slice(b"\x7fELF\x02\x01\x01\x41\x08");
        // sm_90, as CUDA 13 writes it (the new ABI: the SM in the second byte).
        h[48..52].copy_from_slice(&0x0600_5a04u32.to_le_bytes());
        h[16..18].copy_from_slice(&2u16.to_le_bytes());
        h[18..20].copy_from_slice(&190u16.to_le_bytes());
        h[20..24].copy_from_slice(&1u32.to_le_bytes());
        // A program header table past the file: no size can be had from the headers alone.
        h[32..40].copy_from_slice(&(1u64 << 40).to_le_bytes());
        h[40..48].copy_from_slice(&((table_at - at) as u64).to_le_bytes());
        h[52..54].copy_from_slice(&64u16.to_le_bytes());
        h[54..56].copy_from_slice(&56u16.to_le_bytes());
        h[56..58].copy_from_slice(&1u16.to_le_bytes());
        h[58..60].copy_from_slice(&64u16.to_le_bytes());
        h[60..62].copy_from_slice(&(SECTIONS as u16).to_le_bytes());
        h[62..64].copy_from_slice(&1u16.to_le_bytes());
    }
    for s in 1..SECTIONS {
        let e = &mut data[table_at + s * 64..table_at + s * 64 + 64];
        let (kind, offset, size) = match s {
            1 => (3u32, 0u64, 1u64),
            _ => (1, 64, 64),
        };
        e[4..8].copy_from_slice(&kind.to_le_bytes());
        e[24..32].copy_from_slice(&offset.to_le_bytes());
        e[32..40].copy_from_slice(&size.to_le_bytes());
    }
    write(dir, "tables.bin", &data)
}

fn failing_copies(n: usize, dir: &Path) -> PathBuf {
    // 4 MiB of PTX that claims one byte less than it inflates to: each copy fails after
    // inflating.
    let mut text = PTX_HEAD.as_bytes().to_vec();
    text.resize(4 << 20, b' ');
    let entry = zstd_ptx_entry(&text, text.len() as u64 - 1);
    let entries: Vec<_> = (0..n).map(|_| entry.clone()).collect();
    write(dir, "copies.fatbin", &container(&entries))
}

fn directory_of_bombs(n: usize, dir: &Path) -> PathBuf {
    let mut text = PTX_HEAD.as_bytes().to_vec();
    text.resize(32 << 20, b' ');
    let len = text.len() as u64;
    let bomb = container(&[zstd_ptx_entry(&text, len)]);
    let bombs = dir.join("bombs");
    for i in 0..n {
        write(&bombs, &format!("b{i}.fatbin"), &bomb);
    }
    bombs
}

fn many_distributions(n: usize, dir: &Path) -> PathBuf {
    let site = dir.join("site-packages");
    for i in 0..n {
        // Each a different kernel: no two alike, so none share a block.
        let ptx = format!("{PTX_HEAD}.visible .entry k{i}()\n{{\nret;\n}}\n");
        write(
            &site.join(format!("p{i}")),
            "lib.fatbin",
            &container(&[ptx_entry(&ptx)]),
        );
        write(
            &site.join(format!("p{i}-1.0.dist-info")),
            "RECORD",
            format!("p{i}/lib.fatbin,,\n").as_bytes(),
        );
    }
    site
}

fn long_record(n: usize, dir: &Path) -> PathBuf {
    let site = dir.join("site-packages");
    let info = site.join("big-1.0.dist-info");
    let _ = std::fs::create_dir_all(&info);
    let ptx = format!("{PTX_HEAD}.visible .entry k()\n{{\nret;\n}}\n");
    write(
        &site.join("big"),
        "lib.fatbin",
        &container(&[ptx_entry(&ptx)]),
    );
    if let Ok(file) = std::fs::File::create(info.join("RECORD")) {
        let mut w = std::io::BufWriter::new(file);
        let _ = writeln!(w, "big/lib.fatbin,,");
        for i in 0..n {
            let _ = writeln!(
                w,
                "big/data/file_{i:012}.py,sha256=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA,1234"
            );
        }
    }
    site
}

/// A tar of `entries` (path, data), as the OCI spec's layers are; ustar headers, GNU long names
/// past 100 bytes.
fn layer_tar(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        let _ = b.append_data(&mut h, path, &data[..]);
    }
    b.into_inner().unwrap_or_default()
}

fn image_of_whiteouts(n: usize, dir: &Path) -> PathBuf {
    let ptx = format!("{PTX_HEAD}.visible .entry k()\n{{\nret;\n}}\n");
    let lib = container(&[ptx_entry(&ptx)]);
    let deep = |i: usize| format!("opt/{}/d{i}", "sub/".repeat(20));
    let bottom: Vec<(String, Vec<u8>)> = (0..n)
        .map(|i| (format!("{}/lib.fatbin", deep(i)), lib.clone()))
        .collect();
    let top: Vec<(String, Vec<u8>)> = (0..n)
        .map(|i| match i % 2 {
            0 => (format!("{}/.wh.lib.fatbin", deep(i)), Vec::new()),
            _ => (format!("{}/.wh..wh..opq", deep(i)), Vec::new()),
        })
        .collect();
    let layers = [layer_tar(&bottom), layer_tar(&top)];
    let names: Vec<String> = (0..layers.len())
        .map(|i| format!("l{i}/layer.tar"))
        .collect();
    let manifest =
        serde_json::json!([{"Config": "c.json", "RepoTags": ["shape:1"], "Layers": names}]);
    let mut entries: Vec<(String, Vec<u8>)> = names.iter().cloned().zip(layers).collect();
    entries.push((
        "manifest.json".to_owned(),
        manifest.to_string().into_bytes(),
    ));
    write(dir, "image.tar", &layer_tar(&entries))
}

/// An OCI layout (as a tar) whose `index.json` lists `n` copies of an index, which lists `n`
/// copies of the next, four deep, the last listing nothing: `n^4` paths through `4n`
/// descriptors.
fn nested_oci_indexes(n: usize, dir: &Path) -> PathBuf {
    let digest = |level: usize| format!("{level:0>64}");
    let listing = |next: Option<usize>| {
        let manifests: Vec<serde_json::Value> = match next {
            Some(l) => (0..n)
                .map(|_| {
                    serde_json::json!({
                        "mediaType": "application/vnd.oci.image.index.v1+json",
                        "digest": format!("sha256:{}", digest(l)),
                        "size": 1,
                    })
                })
                .collect(),
            None => Vec::new(),
        };
        serde_json::json!({"schemaVersion": 2, "manifests": manifests})
            .to_string()
            .into_bytes()
    };
    let mut entries = vec![
        (
            "oci-layout".to_owned(),
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
        ("index.json".to_owned(), listing(Some(1))),
    ];
    for level in 1..=4 {
        let next = (level < 4).then_some(level + 1);
        entries.push((format!("blobs/sha256/{}", digest(level)), listing(next)));
    }
    write(dir, "oci-indexes.tar", &layer_tar(&entries))
}

/// A data file of `n` PTX text blocks, each one kernel, each ended by a NUL and a binary byte,
/// as C strings lie in `.rodata`: `n` candidates for the text scan, each read once.
fn ptx_text_blocks(n: usize, dir: &Path) -> PathBuf {
    let mut data = vec![0x7fu8, 0, 1, 2];
    for i in 0..n {
        data.extend_from_slice(
            format!("{PTX_HEAD}.visible .entry k{i}()\n{{\nret;\n}}\n").as_bytes(),
        );
        data.extend_from_slice(&[0, 0xff]);
    }
    write(dir, "blocks.bin", &data)
}
