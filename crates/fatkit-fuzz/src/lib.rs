//! One harness per parser that reads what a user or an attacker controls: fatbin containers,
//! cubins, PTX, the finder over any file (ELF and Windows PE sections, `ar` and zip members, the
//! magic scan), container images (the tar reader, manifests and layers), target notations and driver versions, profiles, `[package.metadata.fatkit]`
//! tables and module manifests. Each takes arbitrary bytes and must return: no panic, no
//! allocation beyond [`LIMITS`], time linear in the input. `fuzz/` runs them under
//! libFuzzer (`cargo xtask fuzz`); `tests/smoke.rs` replays every committed input and a
//! deterministic batch of mutations in every test run.

pub mod hostile;
pub mod pe;
pub mod sass;

use fatkit_fatbin::inspect::{self, Depth};
use fatkit_fatbin::{Container, Limits, Strictness};

/// Small caps, so that a fuzz input may reach every limit quickly.
pub const LIMITS: Limits = Limits {
    max_payload: 1 << 20,
    max_member: 1 << 20,
    max_depth: 3,
    inflate_ratio: 32,
    inflate_floor: 4 << 20,
    work_ratio: 64,
    work_floor: 2 * (4 << 20),
};

/// A harness: a name (the cargo-fuzz target and the corpus directory) and its function.
pub type Harness = (&'static str, fn(&[u8]));

/// Every harness.
pub const HARNESSES: &[Harness] = &[
    ("container", container),
    ("cubin", cubin),
    ("ptx", ptx),
    ("find", find),
    ("zip", zip),
    ("image", image),
    ("notation", notation),
    ("profile", profile),
    ("metadata", metadata),
];

/// A fatbin container: validated, then every entry read (decompressed under [`LIMITS`]).
pub fn container(data: &[u8]) {
    for strictness in [Strictness::AnyKind, Strictness::KnownKindsOnly] {
        if let Ok(c) = Container::parse(data, strictness) {
            for e in c.entries() {
                let _ = (e.target(), e.identifier(), e.options(), e.compat());
                let _ = e.image(&LIMITS);
            }
        }
        let _ = Container::parse_walk(data, strictness);
    }
}

/// A device ELF.
pub fn cubin(data: &[u8]) {
    let _ = fatkit_fatbin::cubin::is_cubin(data);
    let _ = fatkit_fatbin::cubin::elf_size(data);
    let _ = fatkit_fatbin::cubin::inspect(data);
    let _ = fatkit_fatbin::cubin::info_records(data);
}

/// PTX text.
pub fn ptx(data: &[u8]) {
    let _ = fatkit_fatbin::ptx::is_ptx(data);
    let _ = fatkit_fatbin::ptx::inspect(data);
}

/// Any file, as `audit` reads it: the finder (sections, `ar` members, the scan), then every
/// container, image and archive member inspected; and the images extracted.
pub fn find(data: &[u8]) {
    let _ = fatkit_fatbin::find(data);
    let _ = inspect::inspect("fuzz.so", data, Depth::Kernels, &LIMITS);
    let _ = inspect::extract_all("fuzz.so", data, &LIMITS);
    let _ = fatkit_fatbin::declarations::Declarations::scan(data);
}

/// A zip file (a wheel), members read one at a time under the inflate budget.
pub fn zip(data: &[u8]) {
    let budget = fatkit_fatbin::Budget::for_input(&LIMITS, data.len() as u64);
    let _ = fatkit_fatbin::find::zip_members(data, &LIMITS, &budget, |m| {
        let _ = fatkit_fatbin::find::find_named(m.name, m.data);
    });
    let _ = inspect::inspect_zip(
        "fuzz.whl",
        std::io::Cursor::new(data),
        Depth::Kernels,
        &LIMITS,
    );
}

/// A container image (a `docker save` or OCI archive): the tar reader over the bytes, then
/// the whole image reader as `audit` runs it on a file (store, manifests, layers bottom first,
/// every library inspected). Through a file of this process and thread: images are read from
/// disk, never whole into memory.
pub fn image(data: &[u8]) {
    let _ = fatkit_audit::image::tar_entries(data, LIMITS.max_member);
    let path = std::env::temp_dir().join(format!(
        "fatkit-fuzz-image-{}-{:?}.tar",
        std::process::id(),
        std::thread::current().id()
    ));
    if std::fs::write(&path, data).is_ok() {
        let _ = fatkit_audit::inputs::read(&path, &LIMITS);
    }
    let _ = std::fs::remove_file(&path);
}

/// Target lists in every notation, single targets, driver and CUDA versions, and declared
/// kernel records: what `--require`, `--gpu`, `--driver` and profiles are parsed with.
pub fn notation(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let ctx = fatkit_arch::notation::Context::default();
    let _ = fatkit_arch::notation::parse_any(&text, &ctx);
    for n in fatkit_arch::notation::Notation::ALL {
        let _ = fatkit_arch::notation::parse_list(&text, n, &ctx);
    }
    let _ = text.parse::<fatkit_arch::Target>();
    let _ = text.parse::<fatkit_arch::Cc>();
    let _ = text.parse::<fatkit_arch::DriverVersion>();
    let _ = text.parse::<fatkit_arch::toolkit::CudaVersion>();
    let _ = fatkit_arch::declared::at(data);
    let _ = fatkit_arch::declared::Record::parse(&text);
}

/// A profile's TOML.
pub fn profile(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = fatkit_package::profile::parse(std::path::Path::new("fuzz.toml"), &text);
}

/// A `[package.metadata.fatkit]` table (as cargo metadata hands it over, JSON), compile
/// flags, and a module manifest.
pub fn metadata(data: &[u8]) {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        let manifest = std::path::Path::new("/nonexistent/fatkit-fuzz/Cargo.toml");
        let _ = fatkit_package::workspace::kernel_package("fuzz", manifest, &value);
        if let Some(flags) = value.as_array() {
            let flags: Vec<&str> = flags.iter().filter_map(|f| f.as_str()).collect();
            let _ = fatkit_package::flags::Flags::parse(&flags);
        }
    }
    let _ = serde_json::from_slice::<fatkit_package::module::Manifest>(data);
}

/// The starting inputs of harness `name`, read from the repository at `root` (its fixtures,
/// built-in profiles and snapshots) and built here: what the fuzzer mutates first and what
/// the smoke test replays.
pub fn seeds(name: &str, root: &std::path::Path) -> Vec<Vec<u8>> {
    let files = |dir: &str, ext: &str| -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut stack = vec![root.join(dir)];
        while let Some(d) = stack.pop() {
            let Ok(read) = std::fs::read_dir(&d) else {
                continue;
            };
            let mut entries: Vec<_> = read.flatten().map(|e| e.path()).collect();
            entries.sort();
            for p in entries {
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|e| e == ext) {
                    out.extend(std::fs::read(&p).ok());
                }
            }
        }
        out
    };
    let fixtures = "tests/fixtures/small";
    match name {
        "container" => files(fixtures, "fatbin"),
        "cubin" => files(fixtures, "cubin"),
        "ptx" => files(fixtures, "ptx"),
        "find" => {
            let mut out = files(fixtures, "fatbin");
            out.extend(files(fixtures, "cubin"));
            out.push(ar(&files(fixtures, "fatbin")));
            // Windows DLLs of a fatbin: x64, and ARM64X (its load configuration read too).
            if let Some(fatbin) = files(fixtures, "fatbin").first() {
                let imports = ["KERNEL32.dll", "cudart64_12.dll"];
                out.push(pe::Dll::x64(fatbin, &imports).write());
                let arm64x = pe::Dll {
                    machine: pe::ARM64,
                    hybrid: true,
                    delayed: &["cudart64_110.dll"],
                    ..pe::Dll::x64(fatbin, &imports)
                };
                out.push(arm64x.write());
            }
            out
        }
        "zip" => vec![
            zip_of(&files(fixtures, "fatbin")),
            zip_of(&files(fixtures, "ptx")),
        ],
        "image" => files(fixtures, "fatbin")
            .first()
            .map(|fatbin| vec![docker_image(fatbin), tar_of(&[("a/b.so", fatbin)])])
            .unwrap_or_default(),
        "notation" => [
            "sm_80,sm_90a,compute_90",
            "8.0;9.0+PTX;12.0a",
            "80-real;90-virtual;100a",
            "-gencode arch=compute_90a,code=[sm_90a,compute_90a] -arch=sm_120f",
            "all-major",
            "580.65.06",
            "12.9",
            "fatkit:declared:v2;module=saxpy;fatbin=64:00000000000000ff;saxpy_bf16=sm_120,compute_120;end;",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect(),
        "profile" => files("crates/fatkit-package/profiles", "toml"),
        "metadata" => {
            let mut out = files("tests/snapshots", "json");
            out.push(
                br#"{"profile":"consumer","sources":["kernels/ops.cu",{"path":"k.cu","module":"scaling"}],"include":["kernels"],"defines":["N=4"],"flags":["-O3","--use_fast_math"],"kernels":{"bf16_*":{"targets":"sm_90"}},"vendor":"kernels/prebuilt","launcher":"sccache"}"#
                    .to_vec(),
            );
            out.push(br#"["-O3","-Xptxas=-v","--expt-relaxed-constexpr","-lineinfo"]"#.to_vec());
            out
        }
        _ => Vec::new(),
    }
}

/// A `!<arch>` archive of `members`.
fn ar(members: &[Vec<u8>]) -> Vec<u8> {
    let mut out = b"!<arch>\n".to_vec();
    for (i, m) in members.iter().enumerate() {
        let name = format!("m{i}.o/");
        out.extend(
            format!(
                "{name:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n",
                0,
                0,
                0,
                644,
                m.len()
            )
            .bytes(),
        );
        out.extend(m);
        if m.len() % 2 == 1 {
            out.push(b'\n');
        }
    }
    out
}

/// A tar of `(path, data)` members.
fn tar_of(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in members {
        let mut header = tar::Header::new_ustar();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        if b.append_data(&mut header, path, *data).is_err() {
            return Vec::new();
        }
    }
    b.into_inner().unwrap_or_default()
}

/// A `docker save` archive of one layer holding `fatbin` as a library.
fn docker_image(fatbin: &[u8]) -> Vec<u8> {
    let layer = tar_of(&[("usr/lib/libk.so", fatbin)]);
    let manifest = br#"[{"Config":"config.json","RepoTags":["fuzz:1"],"Layers":["layer.tar"]}]"#;
    tar_of(&[
        ("manifest.json", manifest),
        ("config.json", br#"{"architecture":"amd64","os":"linux"}"#),
        ("layer.tar", &layer),
    ])
}

/// A zip file of `members`, deflated.
fn zip_of(members: &[Vec<u8>]) -> Vec<u8> {
    use std::io::Write;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (i, m) in members.iter().enumerate() {
        if w.start_file(format!("pkg/lib/m{i}.fatbin"), options)
            .is_err()
            || w.write_all(m).is_err()
        {
            return Vec::new();
        }
    }
    w.finish().map(|c| c.into_inner()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    /// The image harness's seeds reach the depth it is for: a docker archive whose layer's
    /// library the image reader finds, and a tar whose one member the tar reader reads.
    #[test]
    fn the_image_seeds_reach_a_library_and_a_member() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let seeds = super::seeds("image", &root);
        let [image, tar] = seeds.as_slice() else {
            panic!("two image seeds, got {}", seeds.len());
        };
        assert_eq!(fatkit_audit::image::tar_entries(tar, 1 << 20).unwrap(), 1);
        let path =
            std::env::temp_dir().join(format!("fatkit-fuzz-seed-{}.tar", std::process::id()));
        std::fs::write(&path, image).unwrap();
        let inputs = fatkit_audit::inputs::read(&path, &fatkit_fatbin::Limits::default()).unwrap();
        std::fs::remove_file(&path).unwrap();
        let libraries: Vec<String> = inputs
            .iter()
            .flat_map(|i| i.libraries().into_iter().map(|l| l.name))
            .collect();
        assert_eq!(libraries, ["/usr/lib/libk.so"]);
    }
}
