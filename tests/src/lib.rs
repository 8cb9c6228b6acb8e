//! Helpers for the end-to-end tests in `tests/`: the real toolchain, temporary directories,
//! and cuobjdump as the oracle.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

pub mod cli;

use std::path::{Path, PathBuf};
use std::process::Command;

use fatkit_toolchain::{self as toolchain, Nvcc as Toolchain};

/// Whether this is CI, where a missing toolchain fails a test instead of skipping it.
pub fn in_ci() -> bool {
    fatkit_toolchain::command::is_ci()
}

/// nvcc and cuobjdump, or `None` (after saying so) outside CI. In CI a missing toolchain
/// panics: `cargo xtask test` provisions it first, so its absence is a real failure.
pub fn toolchain() -> Option<Toolchain> {
    let found =
        toolchain::find_default().unwrap_or_else(|e| panic!("looking for a toolchain: {e}"));
    match found {
        Some(tc) if tc.nvcc().is_file() && tc.cuobjdump().is_some() => Some(tc),
        _ if in_ci() => panic!(
            "CI=true and no nvcc + cuobjdump found; `cargo xtask toolchain install` provisions them (or set FATKIT_NVCC)"
        ),
        _ => {
            eprintln!("skipped: no nvcc + cuobjdump; run `cargo xtask toolchain install`");
            None
        }
    }
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// The cargo running these tests.
pub fn cargo() -> PathBuf {
    PathBuf::from(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
}

/// Runs `cmd`: whether it succeeded, and its stdout then its stderr.
pub fn output(cmd: &mut Command) -> (bool, String) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{:?}: {e}", cmd.get_program()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A fresh directory under the target dir's tmp, unique per test.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/tmp/fatkit-tests")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs a command in `dir`, panicking with its output when it fails. Returns stdout.
pub fn run(dir: &Path, program: &Path, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    assert!(
        out.status.success(),
        "{} {args:?} failed ({}):\n{}{}",
        program.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// cuobjdump's reading of a file as sorted `(kind, target)` pairs, from its default output
/// (`Fatbin elf code:` / `Fatbin ptx code:` blocks with `arch = sm_100f`: its `--list-elf`
/// file names drop the `f`). Empty when cuobjdump finds no device code.
pub fn cuobjdump_list(tc: &Toolchain, file: &Path) -> Vec<(String, String)> {
    let cuobjdump = tc.cuobjdump().unwrap();
    let res = Command::new(&cuobjdump).arg(file).output().unwrap();
    let mut out = Vec::new();
    let mut kind = None;
    for line in String::from_utf8_lossy(&res.stdout).lines() {
        let line = line.trim();
        if line.starts_with("Fatbin elf code") {
            kind = Some("cubin");
        } else if line.starts_with("Fatbin ptx code") {
            kind = Some("ptx");
        } else if let (Some(k), Some(arch)) = (kind, line.strip_prefix("arch = ")) {
            let target = if k == "ptx" {
                arch.replace("sm_", "compute_")
            } else {
                arch.to_owned()
            };
            out.push((k.to_owned(), target));
            kind = None;
        }
    }
    out.sort();
    out
}

/// What `cuobjdump -xelf all` and `-xptx all` extract: `(kind, bytes)` in cuobjdump's
/// numbering order (ELF files first, then PTX files).
pub fn cuobjdump_extract(tc: &Toolchain, file: &Path, scratch: &Path) -> Vec<(String, Vec<u8>)> {
    let cuobjdump = tc.cuobjdump().unwrap();
    let file = std::fs::canonicalize(file).unwrap();
    let mut out = Vec::new();
    for (flag, kind, ext) in [("-xelf", "cubin", "cubin"), ("-xptx", "ptx", "ptx")] {
        let dir = scratch.join(format!("x-{kind}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let listing = run(&dir, &cuobjdump, &[flag, "all", file.to_str().unwrap()]);
        // "Extracting ELF file    3: libk.3.sm_80.cubin": keep cuobjdump's order.
        for line in listing.lines().filter(|l| l.starts_with("Extracting")) {
            let name = line
                .split(": ")
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap();
            assert!(name.ends_with(ext), "{line}");
            out.push((kind.to_owned(), std::fs::read(dir.join(name)).unwrap()));
        }
    }
    out
}

/// `build-kernels` of a throwaway project in `dir`: profile `profile` from its
/// `arch-profiles/`, sources in `cuda-src/`, outputs in `out/`, its own compile cache in
/// `cache/`, offline, JSON progress, two jobs.
pub fn build_kernels_args(dir: &Path, profile: &str) -> Vec<String> {
    let d = |p: &str| dir.join(p).display().to_string();
    [
        "build-kernels",
        "--profile",
        profile,
        "--offline",
        "--message-format",
        "json",
        "--profiles-dir",
        &d("arch-profiles"),
        "--src",
        &d("cuda-src"),
        "--out",
        &d("out"),
        "--cache-dir",
        &d("cache"),
        "--jobs",
        "2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Runs `fatkit ARGS...` in process: (exit code, stdout, stderr).
pub fn fatkit_in_process<S: AsRef<str>>(args: &[S]) -> (u8, String, String) {
    let argv: Vec<&str> = std::iter::once("fatkit")
        .chain(args.iter().map(AsRef::as_ref))
        .collect();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = fatkit_cli::run_args(&argv, &mut out, &mut err);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// Whether the provisioned NVRTC 12.9 is there; in CI its absence panics (`cargo xtask test`
/// provisions it).
pub fn nvrtc_available() -> bool {
    let found = toolchain::provisioned_of(fatkit_arch::Compiler::Nvrtc, toolchain::DEFAULT_NVRTC)
        .unwrap_or_else(|e| panic!("looking for NVRTC: {e}"));
    match found {
        Some(_) => true,
        None if in_ci() => panic!(
            "CI=true and NVRTC {} is not provisioned; `cargo xtask toolchain install --nvrtc` adds it",
            toolchain::DEFAULT_NVRTC
        ),
        None => {
            eprintln!("skipped: NVRTC is not provisioned; run `cargo xtask toolchain install --nvrtc`");
            false
        }
    }
}

/// Debian's nvcc 11.8 (package nvidia-cuda-toolkit), which `.ci/run` installs; in CI its
/// absence panics.
pub fn debian_nvcc() -> Option<PathBuf> {
    let nvcc = PathBuf::from("/usr/lib/nvidia-cuda-toolkit/bin/nvcc");
    if nvcc.is_file() {
        return Some(nvcc);
    }
    if in_ci() {
        panic!("CI=true and Debian's nvidia-cuda-toolkit is missing; `bash .ci/install-debian-cuda` installs it");
    }
    eprintln!("skipped: Debian's nvidia-cuda-toolkit is not installed; `bash .ci/install-debian-cuda` installs it");
    None
}

/// `cuobjdump -elf`'s header line of every cubin: `(sm, toolkit)` such as `("70", "129")` or
/// `("80", "13.2")`, in file order.
pub fn cuobjdump_toolkits(tc: &Toolchain, file: &Path) -> Vec<(String, String)> {
    let cuobjdump = tc.cuobjdump().unwrap();
    let text = run(
        Path::new("."),
        &cuobjdump,
        &["-elf", file.to_str().unwrap()],
    );
    text.lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("64bit elf") || l.starts_with("64-bit ELF"))
        .filter_map(|l| {
            let field = |name: &str| {
                l.split([',', ' '])
                    .find_map(|w| w.strip_prefix(name))
                    .map(str::to_owned)
            };
            Some((field("sm=")?, field("toolkit=")?))
        })
        .collect()
}

/// The matrix against `--gpu` for each of its GPUs: cell by cell, from the per-kernel
/// verdicts `--gpu` reports.
pub fn check_matrix_against_each_gpu(paths: &[&str]) -> usize {
    let mut args: Vec<&str> = paths.to_vec();
    args.extend(["--matrix=generations", "--json"]);
    let (_, json, err) = fatkit_in_process(&{
        let mut a = vec!["audit"];
        a.extend(&args);
        a
    });
    let m: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {err}"));
    let gpus = m["matrix"]["gpus"].as_array().unwrap();
    let columns = m["matrix"]["columns"].as_array().unwrap();
    assert!(columns.len() >= 2, "{columns:?}");
    let mut checked = 0;
    for (g, gpu) in gpus.iter().enumerate() {
        let name = gpu["name"].as_str().unwrap();
        let mut a = vec!["audit"];
        a.extend(paths);
        a.extend(["--gpu", name, "--json"]);
        let (_, single, _) = fatkit_in_process(&a);
        let single: serde_json::Value = serde_json::from_str(&single).unwrap();
        let mut col = 0;
        for file in single["files"].as_array().unwrap() {
            // Per-kernel verdicts of the whole input, by library: the kernels of each library
            // are those named in its images.
            let verdicts = file["gpu"]["kernels"].as_array().unwrap();
            for lib in file["libraries"].as_array().unwrap() {
                let cell = &m["matrix"]["cells"][g][col];
                let names: std::collections::BTreeSet<&str> =
                    lib_kernels(file, lib["name"].as_str().unwrap());
                let mine: Vec<&serde_json::Value> = verdicts
                    .iter()
                    .filter(|v| names.contains(v["kernel"].as_str().unwrap()))
                    .collect();
                let fails = mine
                    .iter()
                    .filter(|v| {
                        v["status"] == "fails"
                            && v.get("declared").is_none()
                            && v.get("for_other_gpus").is_none()
                    })
                    .count();
                let runs = mine.iter().filter(|v| v["status"] == "runs").count();
                let by_ptx = mine
                    .iter()
                    .filter(|v| {
                        v["status"] == "runs"
                            && v["image"]
                                .as_str()
                                .is_some_and(|i| i.starts_with("compute_"))
                    })
                    .count();
                let expected = if fails > 0 || (runs == 0 && !mine.is_empty()) {
                    format!("no {fails}")
                } else if by_ptx > 0 {
                    "ptx".to_owned()
                } else {
                    "cubin".to_owned()
                };
                let got = match cell["by"].as_str().unwrap() {
                    "no" => format!("no {}", cell["failing"]),
                    other => other.to_owned(),
                };
                assert_eq!(got, expected, "{name} x {}", lib["name"]);
                col += 1;
                checked += 1;
            }
        }
        assert_eq!(col, columns.len());
    }
    checked
}

/// The kernels named in the images of the library `name` of a file's report.
fn lib_kernels<'a>(file: &'a serde_json::Value, name: &str) -> std::collections::BTreeSet<&'a str> {
    fn walk<'a>(r: &'a serde_json::Value, out: &mut std::collections::BTreeSet<&'a str>) {
        let entries = r["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["entries"].as_array().into_iter().flatten());
        let bare = r["images"].as_array().into_iter().flatten();
        for image in entries.chain(bare) {
            out.extend(
                image["kernels"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|k| k.as_str()),
            );
        }
        for m in r["members"].as_array().into_iter().flatten() {
            walk(m, out);
        }
    }
    let report = &file["report"];
    let mut out = std::collections::BTreeSet::new();
    let member = report["members"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| {
            m["name"]
                .as_str()
                .is_some_and(|n| n.ends_with(name) || n.ends_with(&format!("{name})")))
        });
    walk(member.unwrap_or(report), &mut out);
    out
}

/// Every library of `audit --json` output as `(package, name, verdict)`: the verdict is its
/// targets and toolkits, then per GPU the answer, counts, chosen images and driver need. For
/// comparing two ways of reading the same libraries.
pub fn library_rows(json: &str) -> Vec<(String, String, String)> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    let mut rows = Vec::new();
    for file in v["files"].as_array().unwrap() {
        for l in file["libraries"].as_array().unwrap() {
            let on: Vec<String> = l["on"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| {
                    format!(
                        "{} {}/{} {} needs {}",
                        o["answer"], o["run"], o["kernels"], o["images"], o["needs"]
                    )
                })
                .collect();
            rows.push((
                l["package"].to_string(),
                l["name"].as_str().unwrap().to_owned(),
                format!(
                    "{} {} {} | {}",
                    l["cubins"],
                    l["ptx"],
                    l["toolkits"],
                    on.join(" | ")
                ),
            ));
        }
    }
    rows
}

/// The sccache `toolchain install --sccache` built (with sccache-dist beside it), or `None`
/// (after saying so) outside CI; in CI its absence panics (`cargo xtask test` builds it).
pub fn sccache() -> Option<PathBuf> {
    let cache = toolchain::cache_dir().unwrap_or_else(|e| panic!("fatkit's cache: {e}"));
    match fatkit_toolchain::launcher::provisioned_sccache(&cache) {
        Some(bin) => Some(bin),
        None if in_ci() => panic!(
            "CI=true and sccache is not provisioned; `cargo xtask toolchain install --sccache` builds it"
        ),
        None => {
            eprintln!("skipped: sccache is not provisioned; run `cargo xtask toolchain install --sccache`");
            None
        }
    }
}

/// A Debian program the tests need (`redis-server`, `bwrap`, `umoci`), or `None` (after
/// saying so) outside CI; in CI its absence panics (`cargo xtask test` runs `script`, which
/// installs it).
pub fn debian_program(name: &str, package: &str, script: &str) -> Option<PathBuf> {
    for dir in ["/usr/bin", "/usr/sbin", "/bin"] {
        let p = Path::new(dir).join(name);
        if p.is_file() {
            return Some(p);
        }
    }
    if in_ci() {
        panic!("CI=true and {name} is missing; `bash {script}` installs Debian's {package}");
    }
    eprintln!("skipped: {name} is not installed; `bash {script}` installs Debian's {package}");
    None
}

/// A port free on 127.0.0.1 now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until something accepts connections on 127.0.0.1:`port`, for up to 30 seconds.
pub fn wait_for_port(port: u16, what: &str) {
    for _ in 0..300 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("{what} did not listen on 127.0.0.1:{port} within 30 s");
}

/// A server process a test started; killed when dropped.
#[derive(Debug)]
pub struct Server {
    pub child: std::process::Child,
    pub name: String,
}

impl Server {
    /// Starts `cmd` (its output to `log`) and waits for it to listen on `port`.
    pub fn start(name: &str, cmd: &mut Command, port: u16, log: &Path) -> Server {
        let file = std::fs::File::create(log).unwrap();
        let child = cmd
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        let server = Server {
            child,
            name: name.to_owned(),
        };
        wait_for_port(port, name);
        server
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The image of `target` (`sm_70`, `compute_90`) in the fatbin at `fatbin`, as a tool would
/// extract it.
pub fn image_of(fatbin: &Path, target: &str) -> Vec<u8> {
    let bytes = std::fs::read(fatbin).unwrap();
    let c = fatkit_fatbin::Container::parse(&bytes, fatkit_fatbin::Strictness::AnyKind).unwrap();
    let entry = c
        .entries()
        .find(|e| e.target().is_some_and(|t| t.to_string() == target))
        .unwrap_or_else(|| panic!("{}: no {target} image", fatbin.display()));
    entry
        .image(&fatkit_fatbin::Limits::default())
        .unwrap()
        .into_owned()
}

/// A virtual environment of its own in fatkit's cache, named `name`, with `requirement`
/// installed by pip (made the first time, in a partial directory renamed into place): its
/// directory; `None` (after saying so) outside CI when pip cannot install it; in CI that panics.
pub fn venv_with(name: &str, requirement: &str) -> Option<PathBuf> {
    let cache = toolchain::cache_dir().unwrap_or_else(|e| panic!("fatkit's cache: {e}"));
    let dir = cache.join("tools").join(name);
    if dir.join("complete").is_file() {
        return Some(dir);
    }
    let partial = cache.join(format!("tools/{name}.partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    let python = std::env::var_os("FATKIT_PYTHON").unwrap_or_else(|| "python3".into());
    let (made, text) = output(Command::new(&python).args(["-m", "venv"]).arg(&partial));
    let (installed, more) = if made {
        output(Command::new(partial.join("bin/pip")).args(["install", "--quiet", requirement]))
    } else {
        (false, String::new())
    };
    let marked = installed && std::fs::write(partial.join("complete"), requirement).is_ok();
    let renamed =
        marked && (std::fs::rename(&partial, &dir).is_ok() || dir.join("complete").is_file());
    let _ = std::fs::remove_dir_all(&partial);
    match renamed {
        true => Some(dir),
        false if in_ci() => {
            panic!("CI=true and {requirement} could not be installed with pip:\n{text}{more}")
        }
        false => {
            eprintln!("skipped: {requirement} could not be installed with pip (no network?):\n{text}{more}");
            None
        }
    }
}

/// maturin 1.16.0 in a virtual environment of its own in fatkit's cache ([`venv_with`]).
pub fn maturin() -> Option<PathBuf> {
    let cache = toolchain::cache_dir().unwrap_or_else(|e| panic!("fatkit's cache: {e}"));
    // Made before `venv_with` marked what it made: a maturin there is one.
    let old = cache.join("tools/maturin-1.16.0/bin/maturin");
    if old.is_file() {
        return Some(old);
    }
    venv_with("maturin-1.16.0", "maturin==1.16.0").map(|d| d.join("bin/maturin"))
}

/// The Python of a virtual environment with the CycloneDX project's own library and its JSON
/// schema validation ([`venv_with`]).
pub fn cyclonedx_python() -> Option<PathBuf> {
    venv_with(
        "cyclonedx-python-lib-9.1.0",
        "cyclonedx-python-lib[json-validation]==9.1.0",
    )
    .map(|d| d.join("bin/python"))
}

/// The curand wheel of the corpus (NVIDIA's, from PyPI; `cargo xtask test` downloads it), or
/// `None` (after saying so) outside CI; in CI its absence panics.
pub fn curand_wheel() -> Option<PathBuf> {
    let dir = toolchain::cache_dir().unwrap().join("corpus");
    let found = std::fs::read_dir(&dir).ok().and_then(|rd| {
        rd.flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().contains("nvidia_curand"))
    });
    if found.is_none() {
        assert!(
            !in_ci(),
            "CI=true and no curand wheel in {}; `cargo xtask test` downloads it",
            dir.display()
        );
        eprintln!("skipped: no curand wheel in {}", dir.display());
    }
    found
}

/// A small deterministic generator (xorshift): the shapes a test generates are the same on
/// every run, and written by no one.
#[derive(Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}
