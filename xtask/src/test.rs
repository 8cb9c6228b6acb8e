//! `cargo xtask test`: what `.ci/run` calls, and what a developer runs before a commit.

use std::path::Path;

use clap::Args;
use fatkit_cli::{Outcome, Result};
use fatkit_toolchain as toolchain;
use xshell::cmd;

use crate::harness::{cargo, shell, workspace_root};

#[derive(Debug, Args)]
pub struct Test {
    /// The fast tier: formatting, the library crates' unit tests, the repository's own rules
    /// (tidy) and the fuzz smoke run; no toolchain, no kernels, no server
    #[arg(long)]
    quick: bool,
}

/// Debian's packages the tests need that only root can install, by a `.ci/` script: installed
/// in CI, where the tests need them; elsewhere their tests skip with a message and this says
/// how to install them. `files`: what the packages put on the machine.
fn debian_packages(root: &Path, what: &str, files: &[&str], script: &str) -> Result<()> {
    if files.iter().all(|f| Path::new(f).is_file()) {
        return Ok(());
    }
    if !fatkit_toolchain::command::is_ci() {
        eprintln!("==> {what} is not installed: its tests will skip (`bash {script}` installs it, as root)");
        return Ok(());
    }
    eprintln!("==> CI: installing {what} ({script})");
    let sh = shell(root)?;
    cmd!(sh, "bash {script}")
        .run()
        .map_err(|e| crate::harness::failed(format!("{e}; the tests need {what} in CI")))
}

impl Test {
    pub fn run(self) -> Result<Outcome> {
        let root = workspace_root();
        if self.quick {
            return run_steps(&root, quick_steps());
        }
        provision(&root)?;
        fetch_corpus()?;
        // The main job first: fatkit-example includes the kernels it writes.
        eprintln!("==> kernels: cargo xtask build-kernels");
        let built = fatkit_cli::build_kernels::BuildKernels::for_workspace(None)
            .run_in(&root, &mut std::io::stderr())?;
        if built != Outcome::Ok {
            eprintln!("==> kernels failed");
            return Ok(Outcome::Finding);
        }
        run_steps(&root, steps())
    }
}

/// Runs cargo with each step's arguments, in order, stopping at the first that fails.
fn run_steps(root: &Path, steps: Vec<(&'static str, Vec<&'static str>)>) -> Result<Outcome> {
    let sh = shell(root)?;
    // The tests' answers are those of a machine without a GPU, on one with a GPU too:
    // `audit` asks no driver for the GPUs in front of it (the GPU tests say their own).
    sh.set_var("FATKIT_NVIDIA_SMI", "");
    let cargo = cargo();
    for (name, args) in steps {
        if args.first() == Some(&"publish") {
            forget_packaged_crates(root);
        }
        eprintln!("==> {name}");
        if let Err(e) = cmd!(sh, "{cargo} {args...}").run() {
            eprintln!("==> {name} failed: {e}");
            return Ok(Outcome::Finding);
        }
    }
    eprintln!("==> all checks passed");
    Ok(Outcome::Ok)
}

/// The fast tier: what needs no toolchain, no kernels and no server. The unit tests of every
/// library crate (its `--lib` and `--bins`: xtask's are the tidy tests) and the fuzz smoke run,
/// in one cargo call, so the tree compiles once. Left to the full tier: the crates whose build
/// scripts compile kernels (fatkit-demo, fatkit-cc-demo), fatkit-example (it includes what
/// `build-kernels` writes) and the end-to-end tests (fatkit-tests).
fn quick_steps() -> Vec<(&'static str, Vec<&'static str>)> {
    vec![
        ("formatting", vec!["fmt", "--all", "--check"]),
        (
            "unit tests, tidy and the fuzz smoke run",
            vec![
                "test",
                "--workspace",
                "--exclude",
                "fatkit-example",
                "--exclude",
                "fatkit-demo",
                "--exclude",
                "fatkit-cc-demo",
                "--exclude",
                "fatkit-tests",
                "--lib",
                "--bins",
                "--test",
                "smoke",
            ],
        ),
    ]
}

/// Everything the tests need besides the repository: CUDA and NVRTC from NVIDIA's wheels,
/// sccache built with cargo, Debian's CUDA 11.8 and servers.
fn provision(root: &Path) -> Result<()> {
    // Toolchain tests need nvcc and cuobjdump: provision them with the project's own command.
    eprintln!(
        "==> toolchain: provisioning CUDA {}",
        toolchain::DEFAULT_CUDA
    );
    let tc = toolchain::provision(toolchain::DEFAULT_CUDA, &mut |line| eprintln!("    {line}"))
        .map_err(fatkit_cli::Error::from)?;
    eprintln!("    using {}", tc.bin_dir().display());
    eprintln!(
        "==> toolchain: provisioning NVRTC {} (sm_70 for profile full)",
        toolchain::DEFAULT_NVRTC
    );
    let nvrtc = toolchain::provision_of(
        fatkit_arch::Compiler::Nvrtc,
        toolchain::DEFAULT_NVRTC,
        &mut |line| eprintln!("    {line}"),
    )
    .map_err(fatkit_cli::Error::from)?;
    eprintln!("    using {}", nvrtc.program().display());
    eprintln!(
        "==> toolchain: sccache {} with sccache-dist (built once with cargo, a few minutes)",
        fatkit_toolchain::launcher::SCCACHE_VERSION
    );
    let sccache = toolchain::provision_sccache(&mut |line| eprintln!("    {line}"))
        .map_err(fatkit_cli::Error::from)?;
    eprintln!("    using {}", sccache.display());
    // A second, real nvcc that builds sm_70, for the multi-toolchain tests.
    debian_packages(
        root,
        "Debian's CUDA 11.8",
        &["/usr/lib/nvidia-cuda-toolkit/bin/nvcc"],
        ".ci/install-debian-cuda",
    )?;
    // The launcher tests' servers.
    debian_packages(
        root,
        "Debian's redis-server and bubblewrap",
        &["/usr/bin/redis-server", "/usr/bin/bwrap"],
        ".ci/install-debian-servers",
    )?;
    // The image tests' image builders.
    debian_packages(
        root,
        "Debian's umoci and skopeo",
        &["/usr/bin/umoci", "/usr/bin/skopeo"],
        ".ci/install-debian-image-tools",
    )?;
    Ok(())
}

/// The cargo commands of the whole check, in order.
fn steps() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut steps: Vec<(&str, Vec<&str>)> = vec![("formatting", vec!["fmt", "--all", "--check"])];
    steps.push((
        "clippy",
        vec![
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    ));
    // The API docs: every intra-doc link resolves (docs that drift fail here).
    steps.push((
        "docs",
        vec![
            "doc",
            "--workspace",
            "--no-deps",
            "--config",
            "build.rustdocflags=[\"-D\", \"warnings\"]",
        ],
    ));
    // The library crates as crates.io would take them (packaged, then built alone).
    steps.push((
        "publish dry run",
        vec![
            "publish",
            "--dry-run",
            "--allow-dirty",
            "--target-dir",
            "target/publish-check",
            "-p",
            "fatkit-arch",
            "-p",
            "fatkit-fatbin",
            "-p",
            "fatkit-lock",
            "-p",
            "fatkit-audit",
            "-p",
            "fatkit-read",
            "-p",
            "fatkit-run",
            "-p",
            "fatkit-package",
            "-p",
            "fatkit-toolchain",
            "-p",
            "fatkit-build",
            "-p",
            "fatkit-project",
            "-p",
            "fatkit-runtime",
            "-p",
            "fatkit-cli",
            "-p",
            "fatkit-example-kernels",
        ],
    ));
    steps.push(("tests", vec!["test", "--workspace"]));
    steps
}

/// Real NVIDIA libraries the toolchain tests read, downloaded once into the cache.
pub const CORPUS: [&str; 1] = ["nvidia-curand==10.4.5.25"];

fn fetch_corpus() -> Result<()> {
    let dir = toolchain::cache_dir()
        .map_err(fatkit_cli::Error::from)?
        .join("corpus");
    std::fs::create_dir_all(&dir)?;
    for spec in CORPUS {
        let stem = spec.replace('-', "_").replace("==", "-");
        let have = std::fs::read_dir(&dir)?
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(&stem));
        if have {
            continue;
        }
        eprintln!("==> corpus: pip download {spec} into {}", dir.display());
        if !pip_download(spec, &dir)? {
            return Err(crate::harness::failed(format!(
                "pip download {spec} failed"
            )));
        }
    }
    Ok(())
}

/// `pip download --no-deps SPEC` into `dir`; whether it succeeded.
pub fn pip_download(spec: &str, dir: &Path) -> Result<bool> {
    let sh = shell(dir)?;
    Ok(cmd!(
        sh,
        "python3 -m pip download --quiet --no-deps --disable-pip-version-check -d {dir} {spec}"
    )
    .run()
    .is_ok())
}

/// `cargo publish --dry-run` of several packages verifies them against a temporary local
/// registry, which cargo extracts under `$CARGO_HOME/registry/src/-<hash of its path>/` and does
/// not refresh for the same name and version: after a change to one crate, a later run in the
/// same checkout would build the others against an earlier run's copy of it. Those copies of
/// this workspace's crates are removed first (only in such nameless local registries), and so
/// is what the dry run compiled from them (`target/publish-check/debug`): cargo takes a
/// registry crate of the same name and version for the one it built before.
fn forget_packaged_crates(root: &Path) {
    let _ = std::fs::remove_dir_all(root.join("target/publish-check/debug"));
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cargo")));
    let Some(src) = home.map(|h| h.join("registry/src")) else {
        return;
    };
    for registry in std::fs::read_dir(src).into_iter().flatten().flatten() {
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        for krate in std::fs::read_dir(registry.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if krate.file_name().to_string_lossy().starts_with("fatkit-") {
                let _ = std::fs::remove_dir_all(krate.path());
            }
        }
    }
}
