//! The failure classes an adversarial run found in `audit` (issue 17), one test per example
//! and variant: hostile files audit in time linear in their size and bounded memory, or are
//! refused with exit 2. (Streams and devices, `*.py` text, corrupt entries and an empty
//! `--require` are tests/tests/it/audit/fixtures.rs's.)
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fatkit_tests::{cli, temp_dir};

/// `fatkit audit ARGS...` in process: (exit code, stdout, stderr).
/// A hang guard, not a speed target (`cargo xtask bench` measures speed): the quadratic
/// scans these files found took minutes; linear ones take well under a second.
const HANG: Duration = Duration::from_secs(60);

fn timed_audit(file: &Path) -> (i32, String, String, Duration) {
    let start = Instant::now();
    let (code, out, err) = cli::audit(&[file.to_str().unwrap()]).parts();
    let took = start.elapsed();
    eprintln!(
        "{}: {} MB audited in {took:.2?}",
        file.display(),
        std::fs::metadata(file).unwrap().len() / 1_000_000
    );
    (code, out, err, took)
}

/// 64-byte units, each a valid fatbin entry header (cubin, no payload) whose last 16 bytes
/// (reserved and uncompressed-size fields) are also a fatbin header claiming `claim` bytes:
/// every magic starts a container whose entries are the following units. Every `bad_every`
/// units one is not an entry, so every container fails there, after walking up to
/// `bad_every` entries: quadratic for a scan that retries each magic.
fn crafted_containers(len: usize, claim: u64, bad_every: usize) -> Vec<u8> {
    let mut unit = [0u8; 64];
    unit[0..2].copy_from_slice(&2u16.to_le_bytes()); // kind: cubin
    unit[2..4].copy_from_slice(&0x0101u16.to_le_bytes()); // entry version
    unit[4..8].copy_from_slice(&64u32.to_le_bytes()); // header size
    unit[48..52].copy_from_slice(&0xBA55_ED50u32.to_le_bytes()); // fatbin magic
    unit[52..54].copy_from_slice(&1u16.to_le_bytes());
    unit[54..56].copy_from_slice(&16u16.to_le_bytes());
    unit[56..64].copy_from_slice(&claim.to_le_bytes());
    let mut bad = unit;
    bad[2..4].copy_from_slice(&0u16.to_le_bytes());
    (0..len / 64)
        .flat_map(|i| {
            if i % bad_every == bad_every - 1 {
                bad
            } else {
                unit
            }
        })
        .collect()
}

/// One cubin whose `sections` sections are all named `.nv.compat` and all cover the same
/// `data_len` bytes of records: quadratic for a reader that reads every such section.
fn crafted_cubin(sections: usize, data_len: usize) -> Vec<u8> {
    let table = 64;
    let names_at = table + sections * 64;
    let names = b"\0.nv.compat\0\0\0\0\0";
    let data_at = names_at + names.len();
    let mut elf = vec![0u8; data_at + data_len];
    elf[0..4].copy_from_slice(b"\x7fELF");
    elf[4] = 2; // 64-bit
    elf[5] = 1; // little-endian
    elf[6] = 1;
    elf[7] = 0x41; // the CUDA 13 ABI, version 8
    elf[8] = 8;
    elf[16..18].copy_from_slice(&2u16.to_le_bytes());
    elf[18..20].copy_from_slice(&190u16.to_le_bytes()); // EM_CUDA
    elf[20..24].copy_from_slice(&1u32.to_le_bytes());
    elf[40..48].copy_from_slice(&(table as u64).to_le_bytes()); // e_shoff
    elf[48..52].copy_from_slice(&(90u32 << 8).to_le_bytes()); // sm_90
    elf[52..54].copy_from_slice(&64u16.to_le_bytes());
    elf[58..60].copy_from_slice(&64u16.to_le_bytes());
    elf[60..62].copy_from_slice(&(sections as u16).to_le_bytes());
    elf[62..64].copy_from_slice(&1u16.to_le_bytes()); // e_shstrndx
    let mut section = |i: usize, name: u32, kind: u32, at: usize, len: usize| {
        let s = table + i * 64;
        elf[s..s + 4].copy_from_slice(&name.to_le_bytes());
        elf[s + 4..s + 8].copy_from_slice(&kind.to_le_bytes());
        elf[s + 24..s + 32].copy_from_slice(&(at as u64).to_le_bytes());
        elf[s + 32..s + 40].copy_from_slice(&(len as u64).to_le_bytes());
    };
    section(1, 0, 3, names_at, names.len()); // the section names
    for i in 2..sections {
        section(i, 1, 1, data_at, data_len);
    }
    elf[names_at..names_at + names.len()].copy_from_slice(names);
    // Records of format 1 (4 bytes each, no payload).
    for rec in elf[data_at..].chunks_exact_mut(4) {
        rec[0] = 1;
    }
    elf
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn crafted_containers_audit_in_time_linear_in_their_size() {
    let dir = temp_dir("adversarial-containers");
    for mb in [4, 16] {
        let file = write(
            &dir,
            &format!("containers-{mb}.bin"),
            &crafted_containers(mb << 20, 1 << 20, 16 * 1024),
        );
        let (code, out, err, took) = timed_audit(&file);
        assert!(took < HANG, "{mb} MB took {took:?}");
        // Nothing in them is device code: no libraries, and the invalid containers are not
        // errors of a file that holds none.
        assert!(code == 0 || code == 1, "exit {code}: {out}{err}");
    }
}

#[test]
fn a_cubin_of_many_overlapping_sections_audits_in_time() {
    let dir = temp_dir("adversarial-cubin");
    let file = write(&dir, "sections.cubin", &crafted_cubin(60_000, 12 << 20));
    let (code, out, err, took) = timed_audit(&file);
    assert!(took < HANG, "took {took:?}");
    assert!(out.contains("sm_90"), "exit {code}: {out}{err}");
}

/// A zip of zips whose innermost members are zeros: 16 x 16 x 64 MiB = 16 GiB from a few
/// hundred KB.
fn nested_zip(dir: &Path) -> PathBuf {
    use zip::write::SimpleFileOptions;
    let deflate = SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .large_file(false);
    let mut inner = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let zeros = vec![0u8; 64 << 20];
    inner.start_file("zeros-0.bin", deflate).unwrap();
    inner.write_all(&zeros).unwrap();
    let once = inner.finish().unwrap().into_inner();
    // The same deflated member 16 times, copied raw (deflating 1 GiB would be the test's cost).
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(once)).unwrap();
    let mut inner = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for i in 0..16 {
        let member = archive.by_index_raw(0).unwrap();
        inner
            .raw_copy_file_rename(member, format!("zeros-{i}.bin"))
            .unwrap();
    }
    let inner = inner.finish().unwrap().into_inner();
    let mut outer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for i in 0..16 {
        outer.start_file(format!("layer-{i}.zip"), deflate).unwrap();
        outer.write_all(&inner).unwrap();
    }
    write(
        dir,
        "nested-1.0-py3-none-any.whl",
        &outer.finish().unwrap().into_inner(),
    )
}

#[test]
fn a_nested_zip_bomb_is_refused_with_exit_2_in_seconds() {
    let dir = temp_dir("adversarial-zip");
    let bomb = nested_zip(&dir);
    eprintln!("bomb: {} bytes", std::fs::metadata(&bomb).unwrap().len());
    let (code, out, err, took) = timed_audit(&bomb);
    assert_eq!(code, 2, "{out}{err}");
    // Issue 41: the input is unknown, named with why (one budget per input, not the command).
    assert!(
        out.contains(&format!("{}", bomb.display())) && out.contains(": UNKNOWN: "),
        "{out}"
    );
    assert!(out.contains("zip bomb"), "{out}");
    assert!(took < HANG, "took {took:?}");
}

#[test]
fn a_file_truncated_while_audited_ends_with_exit_2_never_sigbus() {
    let dir = temp_dir("adversarial-truncate");
    let file = dir.join("big.so");
    let fatkit = env!("CARGO_BIN_EXE_fatkit-e2e");
    let mut changed = 0;
    for round in 0..20 {
        // 2 GiB, sparse: reading it takes long enough to truncate it meanwhile.
        let f = std::fs::File::create(&file).unwrap();
        f.set_len(2 << 30).unwrap();
        let child = Command::new(fatkit)
            .args(["audit", file.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(20 + 15 * round));
        f.set_len(4096).unwrap();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let code = out.status.code();
        // Killed by a signal (SIGBUS: no code) or anything but a clean answer or exit 2 fails.
        assert!(
            matches!(code, Some(0 | 2)),
            "round {round}: {:?}: {err}",
            out.status
        );
        if code == Some(2) {
            assert!(err.contains("changed while being read"), "{err}");
            changed += 1;
        }
    }
    assert!(changed > 0, "no round truncated the file while it was read");
}

/// A library with thousands of entries corrupt alike (cuFFT's link-time IR was read so) says
/// each kind of error once, with a count: the answer stays on one screen.
#[test]
fn repeated_errors_print_once_with_a_count() {
    let dir = fatkit_tests::temp_dir("repeated-errors");
    let fatbin = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gpu/sm_80.fatbin"),
    )
    .unwrap();
    let container =
        fatkit_fatbin::Container::parse(&fatbin, fatkit_fatbin::Strictness::KnownKindsOnly)
            .unwrap();
    let entry = container.entries().next().unwrap();
    let cubin = entry.data(&fatkit_fatbin::Limits::default()).unwrap();
    let mut lz4 = fatkit_fatbin::write::write(&[fatkit_fatbin::write::Input {
        target: entry.target().unwrap(),
        data: &cubin,
        identifier: None,
        compression: fatkit_fatbin::Compression::Lz4,
    }])
    .unwrap();
    // The compressed payload, spoiled: every copy fails to decompress alike.
    let n = lz4.len();
    lz4[n - 96..].fill(0xff);
    let mut lib = b"a host library, not an ELF for the test\0\0\0\0\0\0\0\0".to_vec();
    for _ in 0..40 {
        lib.extend(&lz4);
        lib.extend([0u8; 16]);
    }
    let path = dir.join("libspoiled.so");
    std::fs::write(&path, &lib).unwrap();
    let (code, out, _) = fatkit_tests::fatkit_in_process(&[
        "audit".to_owned(),
        path.display().to_string(),
        "--gpu".to_owned(),
        "A100".to_owned(),
    ]);
    assert_eq!(code, 2, "{out}");
    let errors: Vec<&str> = out.lines().filter(|l| l.contains("error:")).collect();
    assert_eq!(errors.len(), 1, "{out}");
    assert!(
        errors[0].contains("(and 39 alike at other offsets; --json lists each)"),
        "{out}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 29: a file name holding a newline forged a line of the text report ("yes on ..."
/// under a library that does not run). Names from inputs are shown with control characters
/// escaped: every line the report has is one fatkit wrote.
#[test]
fn a_name_holding_a_newline_cannot_forge_a_line() {
    let dir = temp_dir("adv-newline-name");
    let forged = "k.fatbin\nx.so  yes  all kernels run\n\u{1b}[32mok";
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gpu/sm_100.fatbin"),
        dir.join(forged),
    )
    .unwrap();
    let (code, out, err) = cli::audit(&[dir.to_str().unwrap(), "--gpu", "RTX 5090", "-v"]).parts();
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("k.fatbin\\nx.so  yes"), "{out}");
    for line in out.lines().chain(err.lines()) {
        assert!(
            !line.trim_start().starts_with("x.so") && !line.contains('\u{1b}'),
            "a forged line: {line:?}\n{out}"
        );
    }
}

/// Issue 29: `--driver 575.64.03-open` (the open kernel modules' release, as packages name
/// it) was refused as not a driver version.
#[test]
fn an_open_kernel_module_release_is_a_driver_version() {
    let fatbin = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gpu/sm_100.fatbin");
    let file = fatbin.to_str().unwrap();
    let (code, out, err) =
        cli::audit(&[file, "--gpu", "B200", "--driver", "575.64.03-open"]).parts();
    let (plain_code, plain, _) =
        cli::audit(&[file, "--gpu", "B200", "--driver", "575.64.03"]).parts();
    assert_eq!((code, out), (plain_code, plain), "{err}");
}

/// `n` cubin ELF headers back to back, each pointing its section table at one shared table of
/// 65,535 sections (after them) whose first section claims bytes past the file: every header
/// is a candidate whose size cannot be had, and each walked its whole table (quadratic).
fn shared_section_tables(n: usize) -> Vec<u8> {
    const SECTIONS: usize = 65_535;
    // 64 bytes of nothing first: the file is no ELF itself, so the headers are found by scan.
    let table_at = 64 + n * 64;
    let mut data = vec![0u8; table_at + SECTIONS * 64];
    for i in 0..n {
        let at = 64 + i * 64;
        let h = &mut data[at..at + 64];
        h[..9].copy_from_slice(b"\x7fELF\x02\x01\x01\x41\x08");
        // sm_90, as CUDA 13 writes it (the new ABI: the SM in the second byte).
        h[48..52].copy_from_slice(&0x0600_5a04u32.to_le_bytes());
        h[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
        h[18..20].copy_from_slice(&190u16.to_le_bytes()); // EM_CUDA
        h[20..24].copy_from_slice(&1u32.to_le_bytes());
        h[40..48].copy_from_slice(&((table_at - at) as u64).to_le_bytes()); // e_shoff
        h[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
        h[58..60].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
        h[60..62].copy_from_slice(&(SECTIONS as u16).to_le_bytes()); // e_shnum
        h[62..64].copy_from_slice(&1u16.to_le_bytes()); // e_shstrndx
    }
    // Section 1 a string table of one byte (so the table reads), the rest claiming bytes past
    // the file (so no candidate has a size).
    for s in 1..SECTIONS {
        let e = &mut data[table_at + s * 64..table_at + s * 64 + 64];
        let (kind, offset, size) = match s {
            1 => (3u32, 0u64, 1u64),
            _ => (1, 1 << 40, 64),
        };
        e[4..8].copy_from_slice(&kind.to_le_bytes());
        e[24..32].copy_from_slice(&offset.to_le_bytes());
        e[32..40].copy_from_slice(&size.to_le_bytes());
    }
    data
}

/// Issue 29: cubin candidates whose section tables overlap each other (or the next header)
/// made the scan quadratic. A candidate whose table was read is skipped past that table,
/// whatever it turns out to be, so no byte of a table is read for two candidates.
#[test]
fn cubin_candidates_sharing_a_section_table_audit_in_linear_time() {
    let dir = temp_dir("adv-shared-tables");
    let file = dir.join("tables.bin");
    std::fs::write(&file, shared_section_tables(200_000)).unwrap();
    let (code, out, err, took) = timed_audit(&file);
    assert!(took < HANG, "{took:?}");
    assert!(matches!(code, 0 | 2), "{code}: {out}{err}");
}
