//! `cargo xtask bench stubs`: kernels compiled out for a GPU (stubs) in real CUDA wheels from
//! PyPI, fetched now: vLLM 0.10.1 (whose extensions build CUTLASS kernels for every target
//! and compile their bodies out below sm_80) and bitsandbytes 0.50.2.
//!
//! For every library with device code: `fatkit audit --gpu T4 --json`'s count of kernels
//! compiled out on a T4, and per cubin architecture the kernels fatkit reads as empty (their
//! code only returns or traps) and those it calls stubs (empty where another image of the
//! module holds the body). For the oracle library (`vllm/_moe_C.abi3.so`), every kernel of
//! every cubin is also classified from `cuobjdump -sass` (CUDA 13.2's, with the nvdisasm of
//! NVIDIA's `nvidia-cuda-nvdisasm` wheel, fetched into the cache; Debian's cuobjdump 11.8 for
//! sm_70 and older, which nvdisasm 13 no longer reads) and compared kernel by kernel.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use fatkit_cli::{Error, Outcome, Result};
use fatkit_fatbin::inspect::{inspect, Depth, FileReport};
use fatkit_fatbin::Limits;
use fatkit_toolchain as toolchain;

use crate::bench_env::fetch;
use crate::harness::fatkit_binary;

/// The wheels, and the library of the first compared with cuobjdump kernel by kernel.
const WHEELS: [(&str, &str); 2] = [
    ("vllm==0.10.1", "vllm-0.10.1"),
    ("bitsandbytes==0.50.2", "bitsandbytes-0.50.2"),
];
const ORACLE: &str = "vllm/_moe_C.abi3.so";

/// Each (architecture, kernel) of a file's loaded cubins with what its code is, one per image.
type Bodies = BTreeMap<String, BTreeMap<String, Vec<&'static str>>>;

/// What fatkit reads: per cubin architecture, each kernel's code (`returns`, `traps`, `code`),
/// one per image holding it.
fn fatkit_bodies(report: &FileReport) -> Bodies {
    let mut out: Bodies = BTreeMap::new();
    for c in report.loaded_containers() {
        for e in &c.entries {
            let Some(t) = e.target.filter(|t| t.is_cubin()) else {
                continue;
            };
            let arch = out.entry(t.to_string()).or_default();
            for k in &e.kernels {
                let body = e
                    .empty_bodies
                    .iter()
                    .find(|(name, _)| name == k)
                    .map_or("code", |(_, stub)| stub.name());
                arch.entry(k.clone()).or_default().push(body);
            }
        }
    }
    for kernels in out.values_mut() {
        for list in kernels.values_mut() {
            list.sort_unstable();
        }
    }
    out
}

/// The stubs fatkit finds (empty where another image of the module has a body), per
/// architecture.
fn stub_counts(report: &FileReport) -> BTreeMap<String, usize> {
    let mut out: BTreeMap<String, usize> = BTreeMap::new();
    for m in fatkit_audit::coverage::modules(report) {
        for stubbed in m.stubs.values() {
            for (image, _) in stubbed {
                if let Some(i) = m.images.get(*image) {
                    *out.entry(i.target.to_string()).or_default() += 1;
                }
            }
        }
    }
    out
}

/// What `cuobjdump -sass -arch ARCH` shows of each function (`fatkit_fuzz::sass`), added to
/// `into`: one body per image holding it.
fn sass_bodies(sass: &str, into: &mut BTreeMap<String, Vec<&'static str>>) {
    for (_, function, body) in fatkit_fuzz::sass::bodies(sass) {
        into.entry(function).or_default().push(body);
    }
}

/// nvdisasm from NVIDIA's wheel, into the cache once.
fn nvdisasm(corpus: &Path) -> Result<PathBuf> {
    let dir = corpus.join("nvdisasm-13.2");
    fetch(
        "nvidia-cuda-nvdisasm==13.2.86",
        false,
        &dir,
        "nvidia_cuda_nvdisasm",
    )?;
    let bin = dir.join("unpacked/nvidia/cu13/bin/nvdisasm");
    if !bin.is_file() {
        let wheel = std::fs::read_dir(&dir)?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "whl"))
            .ok_or_else(|| {
                crate::harness::failed("bench stubs: no nvdisasm wheel downloaded".to_owned())
            })?;
        let ok = Command::new("python3")
            .args(["-m", "zipfile", "-e"])
            .arg(&wheel)
            .arg(dir.join("unpacked"))
            .status()?
            .success();
        if !ok {
            return Err(crate::harness::failed(format!(
                "bench stubs: cannot unpack {}",
                wheel.display()
            )));
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    Ok(bin)
}

/// Every library of `wheel` with device code, unpacked into `dir`.
fn libraries(wheel: &Path, dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let file = std::fs::File::open(wheel)?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| crate::harness::failed(e.to_string()))?;
    let mut out = Vec::new();
    for i in 0..zip.len() {
        let mut member = zip
            .by_index(i)
            .map_err(|e| crate::harness::failed(e.to_string()))?;
        let name = member.name().to_owned();
        if !name.contains(".so") {
            continue;
        }
        let path = dir.join(name.replace('/', "__"));
        if !path.is_file() {
            let mut f = std::fs::File::create(&path)?;
            std::io::copy(&mut member, &mut f)?;
        }
        out.push((name, path));
    }
    Ok(out)
}

pub(crate) fn run() -> Result<Outcome> {
    let corpus = toolchain::cache_dir().map_err(Error::from)?.join("corpus");
    let dir = corpus.join("stubs");
    let fatkit = fatkit_binary()?;
    let mut rows = Vec::new();
    let mut disagreements = Vec::new();
    let mut compared = 0usize;
    for (spec, marker) in WHEELS {
        fetch(spec, false, &dir, marker)?;
        let wheel = std::fs::read_dir(&dir)?
            .flatten()
            .map(|e| e.path())
            // The wheel, not the directory of its libraries beside it.
            .find(|p| {
                p.extension().is_some_and(|x| x == "whl")
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(marker))
            })
            .ok_or_else(|| crate::harness::failed(format!("bench stubs: {spec} not downloaded")))?;
        let unpacked = dir.join(format!("{marker}-libs"));
        std::fs::create_dir_all(&unpacked)?;
        for (name, path) in libraries(&wheel, &unpacked)? {
            let bytes = std::fs::read(&path)?;
            let report = inspect(&name, &bytes, Depth::Kernels, &Limits::default());
            let ours = fatkit_bodies(&report);
            if ours.is_empty() {
                continue;
            }
            let stubs = stub_counts(&report);
            let out = Command::new(&fatkit)
                .args(["audit", "--json", "--gpu", "T4"])
                .arg(&path)
                .output()?;
            let json: serde_json::Value =
                serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
            let on_t4 = json
                .pointer("/files/0/libraries/0/on/0/compiled_out")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            let theirs = if name == ORACLE {
                Some(oracle(&corpus, &path, ours.keys())?)
            } else {
                None
            };
            let (mut lib_rows, n, differ) = arch_rows(&name, &ours, &stubs, theirs.as_ref());
            rows.append(&mut lib_rows);
            compared += n;
            disagreements.extend(differ);
            rows.push(format!(
                "| {name} | on a T4 (audit) | | | {on_t4} compiled out | |"
            ));
        }
    }
    println!("| library | architecture | kernel images | empty (fatkit) | stubs (fatkit) | agrees with nvdisasm |");
    println!("|---|---|---|---|---|---|");
    for r in &rows {
        println!("{r}");
    }
    println!(
        "\n{compared} kernel images compared with cuobjdump -sass; {} differ",
        disagreements.len()
    );
    for d in disagreements.iter().take(20) {
        println!("  {d}");
    }
    if disagreements.is_empty() && compared > 0 {
        Ok(Outcome::Ok)
    } else {
        Ok(Outcome::Finding)
    }
}

/// One row per architecture of library `name`: its kernel images, those fatkit reads as empty
/// and as stubs, and agreement with `theirs` (cuobjdump's classification) where there is one;
/// with the number of kernel images compared and every disagreement.
fn arch_rows(
    name: &str,
    ours: &Bodies,
    stubs: &BTreeMap<String, usize>,
    theirs: Option<&Bodies>,
) -> (Vec<String>, usize, Vec<String>) {
    let (mut rows, mut compared, mut disagreements) = (Vec::new(), 0, Vec::new());
    for (arch, kernels) in ours {
        let count = |b: &str| kernels.values().flatten().filter(|x| **x == b).count();
        let images: usize = kernels.values().map(Vec::len).sum();
        let empty = count("returns") + count("traps");
        let agreement = match theirs.and_then(|t| t.get(arch)) {
            Some(theirs) => {
                // Only the kernels fatkit lists: cuobjdump shows device functions too.
                let differ: Vec<String> = kernels
                    .iter()
                    .filter_map(|(k, v)| {
                        let mut t = theirs.get(k).cloned().unwrap_or_default();
                        t.sort_unstable();
                        (t != *v).then(|| format!("{arch} {k}: fatkit {v:?}, nvdisasm {t:?}"))
                    })
                    .collect();
                compared += images;
                let theirs_empty = kernels
                    .keys()
                    .filter_map(|k| theirs.get(k))
                    .flatten()
                    .filter(|b| **b != "code")
                    .count();
                let word = if differ.is_empty() {
                    format!("yes ({theirs_empty} empty)")
                } else {
                    format!("NO ({} differ)", differ.len())
                };
                disagreements.extend(differ);
                word
            }
            None if theirs.is_some() => "not disassembled".to_owned(),
            None => "-".to_owned(),
        };
        rows.push(format!(
            "| {name} | {arch} | {images} | {empty} | {} | {agreement} |",
            stubs.get(arch).copied().unwrap_or(0)
        ));
    }
    (rows, compared, disagreements)
}

/// `cuobjdump -sass` of `lib`, one architecture at a time: CUDA 13.2's with nvdisasm 13.2
/// (sm_75 and later), Debian's 11.8 for older ones where it is installed.
fn oracle<'a>(
    corpus: &Path,
    lib: &Path,
    archs: impl Iterator<Item = &'a String>,
) -> Result<BTreeMap<String, BTreeMap<String, Vec<&'static str>>>> {
    let nvdisasm = nvdisasm(corpus)?;
    let tc = toolchain::find_default()
        .map_err(Error::from)?
        .ok_or_else(|| {
            crate::harness::failed(
                "bench stubs: no CUDA toolchain; run cargo xtask build-kernels".to_owned(),
            )
        })?;
    let cuobjdump13 = tc.cuobjdump().ok_or_else(|| {
        crate::harness::failed("bench stubs: the toolchain has no cuobjdump".to_owned())
    })?;
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![nvdisasm.parent().map(Path::to_path_buf).unwrap_or_default()];
    dirs.extend(std::env::split_paths(&path));
    let with_nvdisasm =
        std::env::join_paths(dirs).map_err(|e| crate::harness::failed(e.to_string()))?;
    let debian = Path::new("/usr/bin/cuobjdump");
    let mut out = BTreeMap::new();
    for arch in archs {
        let cc: u32 = arch
            .trim_start_matches("sm_")
            .trim_end_matches(['a', 'f'])
            .parse()
            .unwrap_or(0);
        let mut cmd = if cc >= 75 {
            let mut c = Command::new(&cuobjdump13);
            c.env("PATH", &with_nvdisasm);
            c
        } else if debian.is_file() {
            Command::new(debian)
        } else {
            continue;
        };
        let sass = cmd
            .args(["-elf", "-sass", "-arch", arch])
            .arg(lib)
            .output()?;
        let text = String::from_utf8_lossy(&sass.stdout);
        let mut bodies = BTreeMap::new();
        sass_bodies(&text, &mut bodies);
        if !bodies.is_empty() {
            out.insert(arch.clone(), bodies);
        }
    }
    Ok(out)
}
