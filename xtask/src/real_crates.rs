//! `cargo xtask bench crates`: the kernel sources of public crates, fetched from crates.io at
//! run time (never copied into this repository), built for a profile (`full` by default) by
//! `build-kernels` from `[package.metadata.fatkit]` in a workspace of their own, as a crate
//! author moving off bindgen_cuda/cudaforge would write it: the crate's own flags,
//! `kernel_sets = "as-built"` for its architecture guards. Every module must build, and
//! cuobjdump must list an image of every target of the profile in every module's fatbin.
//!
//! The kernels are vendored (`vendor = "kernels/prebuilt"`), and the crate is packaged with
//! `cargo package`: the table reports the `.crate` a crate shipping its kernels for the profile
//! would publish, against crates.io's 10 MiB limit.
//!
//! The `.crate` files are checked against the sha256 of crates.io's index and kept in
//! `<fatkit cache>/corpus/crates/`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use fatkit_cli::{Error, Outcome, Result};
use fatkit_package::out::sha256_hex;
use fatkit_toolchain as toolchain;

/// A public crate whose kernels are built: which directory holds its `.cu` and `.cuh` files,
/// the sources its own build script leaves out of its PTX build, and its nvcc flags.
pub(crate) struct RealCrate {
    pub(crate) name: &'static str,
    pub(crate) version: &'static str,
    dir: &'static str,
    /// File names its build script compiles otherwise (host code linked as a static library).
    skip: &'static [&'static str],
    flags: &'static [&'static str],
}

/// candle's kernels (candle-kernels, built by bindgen_cuda, later cudaforge, for the build
/// machine's GPU alone): three releases a year apart.
pub(crate) const CRATES: &[RealCrate] = &[
    RealCrate {
        name: "candle-kernels",
        version: "0.8.0",
        dir: "src",
        skip: &[],
        flags: &["--expt-relaxed-constexpr", "-std=c++17", "-O3"],
    },
    RealCrate {
        name: "candle-kernels",
        version: "0.9.1",
        dir: "src",
        skip: &[],
        flags: &["--expt-relaxed-constexpr", "-std=c++17", "-O3"],
    },
    RealCrate {
        name: "candle-kernels",
        version: "0.11.1",
        dir: "src",
        // Its build.rs: `.exclude(&["moe_*.cu", "mmvq_gguf.cu", "mmq_*.cu"])`, built into
        // libmoe.a with their host launchers instead.
        skip: &["mmvq_gguf.cu"],
        flags: &["--expt-relaxed-constexpr", "-std=c++17", "-O3"],
    },
];

/// One crate's result.
struct Row {
    krate: String,
    sources: usize,
    modules: usize,
    failed: usize,
    kernels: usize,
    declared: usize,
    seconds: f64,
    /// The modules' bytes, and the vendored `.crate`'s (gzip).
    prebuilt_bytes: u64,
    crate_bytes: Option<u64>,
    /// The size build-kernels refused the `.crate` at, over crates.io's limit.
    refused: Option<u64>,
    /// The planner's choices for crates.io's limit and half of it, each built and packaged.
    plans: Vec<crate::bench_plan::PlanRow>,
    problems: Vec<String>,
}

/// crates.io's upload limit.
const CRATES_IO_LIMIT: u64 = 10 << 20;

pub fn run(profile: &str, only: &[String]) -> Result<Outcome> {
    let profile_set = fatkit_package::profile::ProfileSet::built_in();
    let targets = profile_set.load(profile)?.targets;
    let (_, cuobjdump) = default_toolchain()?;
    let store = toolchain::cache_dir()
        .map_err(Error::from)?
        .join("corpus/crates");
    std::fs::create_dir_all(&store)?;
    let scratch = crate::harness::workspace_root().join("target/bench-crates");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let bench = Bench {
        profile,
        targets: &targets,
        cuobjdump: &cuobjdump,
        store: &store,
        scratch: &scratch,
        exe: std::env::current_exe()?,
    };
    let mut rows = Vec::new();
    for krate in CRATES.iter().filter(|c| {
        only.is_empty()
            || only
                .iter()
                .any(|o| *o == c.name || *o == format!("{}@{}", c.name, c.version))
    }) {
        rows.push(bench.krate(krate)?);
    }
    if rows.is_empty() {
        return Err(crate::harness::failed(format!(
            "no crate named {}; the crates are: {}",
            only.join(", "),
            CRATES
                .iter()
                .map(|c| format!("{}@{}", c.name, c.version))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    println!("profile {profile}: {targets}");
    print_rows(&rows);
    let ok = rows.iter().all(|r| r.problems.is_empty());
    Ok(if ok { Outcome::Ok } else { Outcome::Finding })
}

/// What every crate of a run shares.
struct Bench<'a> {
    profile: &'a str,
    targets: &'a fatkit_arch::TargetSet,
    cuobjdump: &'a Path,
    /// Where the `.crate` files are kept between runs.
    store: &'a Path,
    /// This run's workspaces and compile cache.
    scratch: &'a Path,
    /// This xtask, whose `build-kernels` is fatkit's.
    exe: PathBuf,
}

impl Bench<'_> {
    /// One crate: fetched, made a kernel package, built for the profile, its outputs checked
    /// with cuobjdump, and (when built) packaged as crates.io would take it.
    fn krate(&self, krate: &RealCrate) -> Result<Row> {
        let label = format!("{}@{}", krate.name, krate.version);
        eprintln!("bench: {label}");
        let file = fetch(krate.name, krate.version, self.store)?;
        let unpacked = self
            .scratch
            .join(format!("{}-{}", krate.name, krate.version));
        unpack(&file, self.scratch)?;
        let ws = workspace(krate, &unpacked, self.scratch, self.profile)?;
        let sources = std::fs::read_dir(ws.join("kern/kernels"))?
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "cu"))
            .count();
        let start = Instant::now();
        let out = Command::new(&self.exe)
            .args([
                "build-kernels",
                "--profile",
                self.profile,
                "--manifest-path",
            ])
            .arg(ws.join("Cargo.toml"))
            .arg("--cache-dir")
            .arg(self.scratch.join("cache"))
            .output()?;
        let seconds = start.elapsed().as_secs_f64();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        let mut row = Row {
            krate: label,
            sources,
            modules: 0,
            failed: 0,
            kernels: 0,
            declared: 0,
            seconds,
            prebuilt_bytes: 0,
            crate_bytes: None,
            refused: None,
            plans: Vec::new(),
            problems: Vec::new(),
        };
        // A vendored package over crates.io's limit is refused after its modules are written:
        // what the bench measures (its `.crate`, then the plans that fit).
        row.refused = refused_at(&text);
        if !out.status.success() && row.refused.is_none() {
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            row.problems.push(format!(
                "build-kernels exited {}:\n{}",
                out.status,
                tail.join("\n")
            ));
        }
        let prebuilt = ws.join("kern/kernels/prebuilt");
        check_outputs(&prebuilt, self.targets, self.cuobjdump, &mut row)?;
        row.prebuilt_bytes = std::fs::read_dir(&prebuilt)
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0);
        if out.status.success() || row.refused.is_some() {
            match crate::bench_plan::package(&ws) {
                Ok(size) => row.crate_bytes = Some(size),
                Err(e) => row.problems.push(e),
            }
            if let (Some(said), Some(size)) = (row.refused, row.crate_bytes) {
                if said.abs_diff(size) * 20 > size || size <= CRATES_IO_LIMIT {
                    row.problems.push(format!(
                        "build-kernels refused a .crate of {said} bytes; cargo's is {size} bytes"
                    ));
                }
            }
            row.plans = crate::bench_plan::Planned {
                exe: &self.exe,
                ws: &ws,
                cache: &self.scratch.join("cache"),
                profile: self.profile,
            }
            .run()?;
            let failed = row.plans.iter().any(|p| !p.problems.is_empty());
            if failed {
                row.problems
                    .push("a planned build disagrees (below)".to_owned());
            }
        }
        row.failed = sources.saturating_sub(row.modules);
        Ok(row)
    }
}

/// The table of rows, then each failed crate's problems.
fn print_rows(rows: &[Row]) {
    println!(
        "{:<24} {:>7} {:>7} {:>7} {:>8} {:>8} {:>9} {:>9} {:>9}  verdict",
        "crate",
        "sources",
        "modules",
        "failed",
        "kernels",
        "declared",
        "wall",
        "prebuilt",
        ".crate"
    );
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / f64::from(1u32 << 20));
    for r in rows {
        let verdict = if r.problems.is_empty() {
            "ok"
        } else {
            "FAILED"
        };
        let over = match r.crate_bytes {
            Some(b) if b > CRATES_IO_LIMIT => " (over crates.io's 10 MiB)",
            _ => "",
        };
        println!(
            "{:<24} {:>7} {:>7} {:>7} {:>8} {:>8} {:>8.1}s {:>9} {:>9}  {verdict}{over}",
            r.krate,
            r.sources,
            r.modules,
            r.failed,
            r.kernels,
            r.declared,
            r.seconds,
            mib(r.prebuilt_bytes),
            r.crate_bytes.map_or_else(|| "-".to_owned(), mib)
        );
    }
    for r in rows {
        if let Some(said) = r.refused {
            println!(
                "\n{}: build-kernels refused its .crate at {said} bytes, over crates.io's limit (cargo package: {})",
                r.krate,
                r.crate_bytes.map_or_else(|| "-".to_owned(), |b| format!("{b} bytes"))
            );
        }
        crate::bench_plan::print(&r.krate, &r.plans);
    }
    for r in rows.iter().filter(|r| !r.problems.is_empty()) {
        println!("\n{}:", r.krate);
        for p in &r.problems {
            println!("  {p}");
        }
    }
}

/// NVIDIA's default nvcc, provisioned if need be, and its cuobjdump: the oracle of the tiers.
pub(crate) fn default_toolchain() -> Result<(toolchain::Nvcc, PathBuf)> {
    let tc = toolchain::provision(toolchain::DEFAULT_CUDA, &mut |l| {
        eprintln!("toolchain: {l}")
    })
    .map_err(Error::from)?;
    let cuobjdump = tc.cuobjdump().ok_or_else(|| {
        crate::harness::failed(format!(
            "{}: no cuobjdump beside nvcc; run `cargo xtask toolchain install`",
            tc.bin_dir().display()
        ))
    })?;
    Ok((tc, cuobjdump))
}

/// The `.crate` file, from the store or crates.io, checked against the index's sha256.
pub(crate) fn fetch(name: &str, version: &str, store: &Path) -> Result<PathBuf> {
    let file = store.join(format!("{name}-{version}.crate"));
    let want = index_checksum(name, version)?;
    if file.is_file() && sha256_hex(&std::fs::read(&file)?) == want {
        return Ok(file);
    }
    let url = format!("https://static.crates.io/crates/{name}/{name}-{version}.crate");
    let bytes = curl(&url)?;
    let got = sha256_hex(&bytes);
    if got != want {
        return Err(crate::harness::failed(format!(
            "{url}: sha256 {got}, but crates.io's index says {want}; not used"
        )));
    }
    let partial = file.with_extension("crate.partial");
    std::fs::write(&partial, &bytes)?;
    std::fs::rename(&partial, &file)?;
    Ok(file)
}

/// The sha256 crates.io's sparse index records for the crate's version.
fn index_checksum(name: &str, version: &str) -> Result<String> {
    let part = |r: std::ops::Range<usize>| name.get(r).unwrap_or_default();
    let path = match name.len() {
        1 => format!("1/{name}"),
        2 => format!("2/{name}"),
        3 => format!("3/{}/{name}", part(0..1)),
        _ => format!("{}/{}/{name}", part(0..2), part(2..4)),
    };
    let url = format!("https://index.crates.io/{path}");
    let index = String::from_utf8_lossy(&curl(&url)?).into_owned();
    index
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v.get("vers").and_then(|v| v.as_str()) == Some(version))
        .and_then(|v| v.get("cksum")?.as_str().map(str::to_owned))
        .ok_or_else(|| crate::harness::failed(format!("{url}: no version {version}")))
}

fn curl(url: &str) -> Result<Vec<u8>> {
    let out = Command::new("curl")
        .args([
            "--silent",
            "--show-error",
            "--fail",
            "--location",
            "--max-time",
            "120",
        ])
        .args(["--user-agent", "fatkit-bench (https://github.com/fatkit)"])
        .arg(url)
        .output()
        .map_err(|e| crate::harness::failed(format!("curl could not run ({e}); install curl")))?;
    if !out.status.success() {
        return Err(crate::harness::failed(format!(
            "{url}: {}; the bench tier needs network access to crates.io",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

/// Unpacks a `.crate` (a gzipped tar) under `into`; tar refuses entries outside it.
pub(crate) fn unpack(file: &Path, into: &Path) -> Result<()> {
    let mut gz = flate2::read::GzDecoder::new(std::fs::File::open(file)?);
    let mut bytes = Vec::new();
    gz.read_to_end(&mut bytes)?;
    tar::Archive::new(bytes.as_slice())
        .unpack(into)
        .map_err(|e| crate::harness::failed(format!("{}: cannot unpack: {e}", file.display())))
}

/// The size in build-kernels' refusal of a `.crate` over crates.io's limit.
fn refused_at(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .find(|l| l.contains("bytes as a crate, over crates.io's limit"))?;
    let (_, after) = line.split_once("the build ships ")?;
    after.split(' ').next()?.parse().ok()
}

/// A workspace with one crate, `kern`, holding the crate's kernel sources and headers.
pub(crate) fn workspace(
    krate: &RealCrate,
    unpacked: &Path,
    scratch: &Path,
    profile: &str,
) -> Result<PathBuf> {
    let ws = scratch.join(format!("ws-{}-{}", krate.name, krate.version));
    let kernels = ws.join("kern/kernels");
    std::fs::create_dir_all(&kernels)?;
    std::fs::create_dir_all(ws.join("kern/src"))?;
    std::fs::write(
        ws.join("Cargo.toml"),
        "[workspace]\nmembers = [\"kern\"]\nresolver = \"2\"\n",
    )?;
    std::fs::write(ws.join("kern/src/lib.rs"), "")?;
    let flags: Vec<String> = krate.flags.iter().map(|f| format!("{f:?}")).collect();
    std::fs::write(
        ws.join("kern/Cargo.toml"),
        format!(
            "[package]\nname = \"kern\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\
             description = \"{} {}, vendored\"\nlicense = \"MIT OR Apache-2.0\"\n\n\
             [package.metadata.fatkit]\nprofile = {profile:?}\nsources = [\"kernels\"]\nflags = [{}]\n\
             kernel_sets = \"as-built\"\nvendor = \"kernels/prebuilt\"\n",
            krate.name,
            krate.version,
            flags.join(", ")
        ),
    )?;
    let dir = unpacked.join(krate.dir);
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let wanted = (name.ends_with(".cu") || name.ends_with(".cuh"))
            && !krate.skip.contains(&name.as_str());
        if wanted && path.is_file() {
            std::fs::copy(&path, kernels.join(&name))?;
        }
    }
    Ok(ws)
}

/// The module fatbins in `dir`, by name.
pub(crate) fn fatbins_in(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut fatbins: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "fatbin"))
        .collect();
    fatbins.sort();
    Ok(fatbins)
}

/// Every module's fatbin holds every target, as cuobjdump lists it; kernels and declared
/// kernels counted from the manifests.
fn check_outputs(
    out: &Path,
    targets: &fatkit_arch::TargetSet,
    cuobjdump: &Path,
    row: &mut Row,
) -> Result<()> {
    let Ok(fatbins) = fatbins_in(out) else {
        row.problems
            .push(format!("{}: nothing written", out.display()));
        return Ok(());
    };
    for fatbin in fatbins {
        row.modules += 1;
        let listed = Command::new(cuobjdump)
            .args(["--list-elf", "--list-ptx"])
            .arg(&fatbin)
            .output()?;
        let text = String::from_utf8_lossy(&listed.stdout);
        let missing: Vec<String> = targets
            .iter()
            .filter(|t| {
                let name = t.to_string();
                let (kind, arch) = if t.is_ptx() {
                    ("PTX file", name.trim_start_matches("compute_").to_owned())
                } else {
                    ("ELF file", name.trim_start_matches("sm_").to_owned())
                };
                !text
                    .lines()
                    .any(|l| l.contains(kind) && l.contains(&format!(".sm_{arch}.")))
            })
            .map(|t| t.to_string())
            .collect();
        if !listed.status.success() || !missing.is_empty() {
            row.problems.push(format!(
                "{}: cuobjdump lists no image of {}",
                fatbin.display(),
                missing.join(" ")
            ));
        }
        let manifest: serde_json::Value = std::fs::read(fatbin.with_extension("manifest.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        if let Some(kernels) = manifest.get("kernels").and_then(|k| k.as_array()) {
            row.kernels += kernels.len();
            row.declared += kernels
                .iter()
                .filter(|k| k.get("declared").is_some_and(|d| d.is_string()))
                .count();
        }
    }
    Ok(())
}
