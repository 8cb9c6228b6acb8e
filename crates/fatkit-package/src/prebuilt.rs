//! Kernels built ahead of time by `build-kernels`, checked by the crate's build script before
//! they are compiled in: present, and built from the inputs the crate has now. No toolchain is
//! needed for the check, nor the compile engine (fatkit-build): a crate's users build this
//! crate alone, `fatkit-package = ".."` among the build dependencies.
//!
//! Two places, by `[package.metadata.fatkit] vendor`:
//! - without it, `<target dir>/fatkit/<package>/` (the workspace route: every build machine
//!   runs `build-kernels`);
//! - with `vendor = "kernels/prebuilt"`, that directory of the package, committed and shipped
//!   in the `.crate`, so that the crate's users need no CUDA toolkit, Python or network. In a
//!   packaged crate (cargo keeps `Cargo.toml.orig` there) the profile is not compared: its users
//!   cannot rebuild the kernels, and the sources and metadata still are.
//!
//! Every module's manifest records its inputs ([`Inputs`]): the sha256 of the package's
//! `[package.metadata.fatkit]` table, the profile's targets, and every file the source reads
//! (itself and the local headers it includes, as paths relative to the package). The build
//! script recomputes them:
//!
//! ```no_run
//! // build.rs, whose main is just (fatkit_package::prebuilt is this module):
//! fatkit_package::prebuilt::check_or_exit();
//! // src/lib.rs: the modules, wherever they are, each an expression of a function:
//! // fn vector() -> Result<Module, ModuleError> {
//! //     fatkit_runtime::include_module!(concat!(env!("FATKIT_KERNELS_DIR"), "/vector.rs"))
//! // }
//! ```

use std::path::{Path, PathBuf};

use crate::error::{io_err, BuildError};
use crate::inputs::relative;
pub use crate::inputs::{InputFile, Inputs, Stamp};
use crate::module::Manifest;
use crate::workspace::{self, KernelPackage};

/// What the check found: where the modules are, for `include_module!`.
#[derive(Clone, Debug)]
pub struct Checked {
    pub dir: PathBuf,
    pub modules: Vec<String>,
}

/// The target directory of the build running this build script, from cargo's layout of
/// `OUT_DIR`: `<target dir>/[<triple>/]<profile>/build/<package>-<hash>/out` (whatever set it:
/// `--target-dir`, `CARGO_TARGET_DIR`, `build.target-dir`; the variable alone can be stale,
/// overridden by `--target-dir`, and cargo writes `CACHEDIR.TAG` only into a target directory
/// it created, which `build-kernels` may have created first).
fn target_dir(out_dir: &Path) -> Option<PathBuf> {
    let build = out_dir.ancestors().nth(2)?;
    if build.file_name()? != "build" {
        return None;
    }
    let above_profile = build.parent()?.parent()?;
    let triple = std::env::var_os("TARGET");
    match above_profile.file_name() {
        Some(name) if Some(name) == triple.as_deref() => {
            above_profile.parent().map(Path::to_path_buf)
        }
        _ => Some(above_profile.to_path_buf()),
    }
}

/// The check, for the package whose build script runs: every source of its
/// `[package.metadata.fatkit]` has a module in its `vendor` directory or in
/// `<target dir>/fatkit/<package>/`, built from the inputs it has now. Prints
/// `cargo:rerun-if-changed` for every input and module and
/// `cargo:rustc-env=FATKIT_KERNELS_DIR=<that directory>`.
/// The largest manifest (`Cargo.toml`, a module's `.manifest.json`) the check reads.
const MAX_MANIFEST: u64 = 64 << 20;

pub fn check() -> Result<Checked, BuildError> {
    let env =
        |var: &'static str| std::env::var(var).map_err(|_| BuildError::NotInBuildScript { var });
    let package_dir = PathBuf::from(env("CARGO_MANIFEST_DIR")?);
    let name = env("CARGO_PKG_NAME")?;
    let out_dir = PathBuf::from(env("OUT_DIR")?);
    let manifest_path = package_dir.join("Cargo.toml");
    println!("cargo:rerun-if-changed={}", manifest_path.display());
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");
    let text = fatkit_read::read_limited(&manifest_path, MAX_MANIFEST)
        .map_err(io_err(&manifest_path))
        .and_then(|b| {
            String::from_utf8(b).map_err(|_| BuildError::ManifestNotUtf8(manifest_path.clone()))
        })?;
    let toml: toml::Value = toml::from_str(&text).map_err(|source| BuildError::Toml {
        path: manifest_path.clone(),
        source,
    })?;
    let config = toml
        .get("package")
        .and_then(|p| p.get("metadata"))
        .and_then(|m| m.get("fatkit"))
        .ok_or_else(|| BuildError::NoFatkitTable(manifest_path.clone()))?;
    let config = serde_json::to_value(config).map_err(|source| BuildError::Json {
        path: manifest_path.clone(),
        source,
    })?;
    let pkg = workspace::kernel_package(&name, &manifest_path, &config)?;
    // `cargo package` keeps the author's manifest as Cargo.toml.orig: this is a crate from a
    // registry (or publish's verification), whose user cannot rebuild its kernels.
    let packaged = package_dir.join("Cargo.toml.orig").is_file();
    let (dir, targets, mode) = match &pkg.vendor {
        Some(dir) if packaged => (dir.clone(), None, Mode::Packaged),
        Some(dir) => {
            let profile = crate::profile::load_spec(&pkg.profile, &package_dir, None)?;
            (
                dir.clone(),
                Some(profile.targets.to_string()),
                Mode::Vendored,
            )
        }
        None => {
            println!("cargo:rerun-if-env-changed=FATKIT_PROFILE");
            let spec = std::env::var("FATKIT_PROFILE").unwrap_or_else(|_| pkg.profile.clone());
            let profile = crate::profile::load_spec(&spec, &package_dir, None)?;
            let dir = target_dir(&out_dir)
                .ok_or_else(|| BuildError::OutDirLayout(out_dir.clone()))?
                .join("fatkit")
                .join(&pkg.name);
            (dir, Some(profile.targets.to_string()), Mode::TargetDir)
        }
    };
    let checked = check_modules(&pkg, &dir, targets.as_deref(), mode)?;
    println!("cargo:rustc-env=FATKIT_KERNELS_DIR={}", dir.display());
    Ok(checked)
}

/// [`check`] for a build script's `main`: on failure, prints the error where cargo shows it and
/// exits 1.
pub fn check_or_exit() {
    if let Err(e) = check() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// What a module built by a fatkit that did not check it as the driver loads it can hold: a
/// kernel the loaded image lacks where its declaration says it runs, or an image without
/// kernels ([`crate::kernel_sets::driver_view`]). One line each, as stale.
pub(crate) fn driver_problems(module: &str, manifest: &Manifest) -> Vec<String> {
    let images: Vec<_> = manifest
        .entries
        .iter()
        .map(|e| (e.target, e.ptx_isa, e.kernels.clone()))
        .collect();
    let view = crate::kernel_sets::driver_view(
        &images,
        &manifest.declared(),
        fatkit_arch::Policy::default(),
    );
    let vanishes = view.vanishes.iter().map(|v| {
        let ccs: Vec<String> = v.ccs.iter().map(|c| c.to_string()).collect();
        format!(
            "module {module} is stale: kernel {} would not be found on CC {} (the driver loads its {} image there, which lacks it)",
            v.kernel,
            ccs.join(", "),
            v.loaded
        )
    });
    let empty = view
        .empty
        .iter()
        .map(|t| format!("module {module} is stale: its {t} image holds no kernel"));
    vanishes.chain(empty).collect()
}

/// Why a module cannot be used as it is; the summary line says which of them it met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unfit {
    /// No module (manifest, `.rs` or fatbin missing).
    NotBuilt,
    /// A manifest from an older fatkit, which records no inputs.
    NoInputs,
    /// Built from other inputs, or its images fail the driver's view.
    Stale,
}

/// Where the modules are, which decides what to tell the person whose build failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `<target dir>/fatkit/<package>`, written by `build-kernels`.
    TargetDir,
    /// The package's `vendor` directory, in its workspace: committed by its authors.
    Vendored,
    /// The `vendor` directory of a packaged crate (from a registry): its users cannot rebuild
    /// the kernels, and the profile is not compared (its definition may be in the authors'
    /// workspace, or differ in this fatkit version).
    Packaged,
}

impl Mode {
    fn fix(self, pkg: &KernelPackage, dir: &Path) -> String {
        let shown = dir.strip_prefix(&pkg.dir).unwrap_or(dir).display();
        match self {
            Mode::TargetDir => "run `cargo xtask build-kernels` (or `fatkit build-kernels`) in the workspace, then build again".to_owned(),
            Mode::Vendored => format!("run `cargo xtask build-kernels` (or `fatkit build-kernels`) in the workspace, commit {shown}, then build again"),
            Mode::Packaged => format!("the published crate {} ships kernels that do not match its sources; report it to its authors (they run `fatkit build-kernels` and publish again)", pkg.name),
        }
    }
}

/// Every source of `pkg` against its module in `dir`, and against `targets` (the profile's,
/// when they are compared).
pub fn check_modules(
    pkg: &KernelPackage,
    dir: &Path,
    targets: Option<&str>,
    mode: Mode,
) -> Result<Checked, BuildError> {
    let mut stale = Vec::new();
    let mut modules = Vec::new();
    for (source, module) in &pkg.sources {
        let rel = relative(source, &pkg.dir);
        let manifest_path = dir.join(format!("{module}.manifest.json"));
        let rust = dir.join(format!("{module}.rs"));
        let fatbin = dir.join(format!("{module}.fatbin"));
        println!("cargo:rerun-if-changed={}", source.display());
        for p in [&manifest_path, &rust, &fatbin] {
            println!("cargo:rerun-if-changed={}", p.display());
        }
        let manifest = fatkit_read::read_limited(&manifest_path, MAX_MANIFEST)
            .ok()
            .and_then(|b| serde_json::from_slice::<Manifest>(&b).ok());
        let Some(manifest) = manifest.filter(|_| rust.is_file() && fatbin.is_file()) else {
            stale.push((
                Unfit::NotBuilt,
                format!(
                    "module {module} ({rel}) is not built: no {}",
                    rust.display()
                ),
            ));
            continue;
        };
        let Some(inputs) = &manifest.inputs else {
            stale.push((
                Unfit::NoInputs,
                format!("module {module} ({rel}) records no inputs (built by an older fatkit)"),
            ));
            continue;
        };
        for f in &inputs.files {
            println!("cargo:rerun-if-changed={}", pkg.dir.join(&f.path).display());
        }
        // A file that appears where the build found none: cargo sees it in its directory.
        let mut dirs: Vec<PathBuf> = inputs
            .absent
            .iter()
            .filter_map(|a| Some(pkg.dir.join(a).parent()?.to_owned()))
            .filter(|d| d.is_dir())
            .collect();
        dirs.sort();
        dirs.dedup();
        for d in dirs {
            println!("cargo:rerun-if-changed={}", d.display());
        }
        let mut changes = inputs.changes(&pkg.dir, &pkg.config, targets);
        // The module's files are the ones its manifest describes: a partial commit or a merge
        // can leave an older `.rs` or `.fatbin` beside a newer manifest.
        if let Some(w) = &manifest.written {
            for (path, want) in [(&fatbin, &w.fatbin_sha256), (&rust, &w.rust_sha256)] {
                let same = crate::out::sha256_file(path).is_ok_and(|h| h == *want);
                if !same {
                    changes.push(format!(
                        "{} is not the file {module}.manifest.json records",
                        relative(path, &pkg.dir)
                    ));
                }
            }
        }
        if !changes.is_empty() {
            let line = format!("module {module} is stale: {}", changes.join(", "));
            stale.push((Unfit::Stale, line));
        }
        let driver = driver_problems(module, &manifest);
        stale.extend(driver.into_iter().map(|line| (Unfit::Stale, line)));
        modules.push(module.clone());
    }
    if !stale.is_empty() {
        let all = |kind| stale.iter().all(|(k, _)| *k == kind);
        let what = if all(Unfit::Stale) {
            "are stale"
        } else if all(Unfit::NotBuilt) {
            "are missing"
        } else {
            "are stale or missing"
        };
        let stale: Vec<String> = stale.into_iter().map(|(_, line)| line).collect();
        return Err(BuildError::Unfit {
            package: pkg.name.clone(),
            what,
            dir: dir.to_owned(),
            lines: stale,
            fix: mode.fix(pkg, dir),
        });
    }
    Ok(Checked {
        dir: dir.to_owned(),
        modules,
    })
}

#[cfg(test)]
mod driver_tests {
    use super::*;

    /// A manifest an older fatkit could write: the generated-manifest snapshot with its sm_70
    /// image emptied, then with a kernel dropped from the sm_120 cubin the PTX still holds.
    #[test]
    fn modules_the_driver_would_not_run_as_declared_are_stale() {
        let json = include_str!("../../../tests/snapshots/generated-manifest.json");
        let mut m: Manifest = serde_json::from_str(json).unwrap();
        assert_eq!(driver_problems("saxpy", &m), Vec::<String>::new());
        m.entries[0].kernels.clear();
        // Undeclared kernels vanish on the GPUs that load the empty image too.
        assert_eq!(
            driver_problems("saxpy", &m),
            [
                "module saxpy is stale: kernel _Z5scaleIfEvPT_S0_ would not be found on CC 7.0, 7.2, 7.5 (the driver loads its sm_70 image there, which lacks it)",
                "module saxpy is stale: kernel saxpy would not be found on CC 7.0, 7.2, 7.5 (the driver loads its sm_70 image there, which lacks it)",
                "module saxpy is stale: its sm_70 image holds no kernel"
            ]
        );
        let mut m: Manifest = serde_json::from_str(json).unwrap();
        m.entries[1].kernels.retain(|k| k != "saxpy");
        assert_eq!(
            driver_problems("saxpy", &m),
            ["module saxpy is stale: kernel saxpy would not be found on CC 12.0, 12.1 (the driver loads its sm_120 image there, which lacks it)"]
        );
    }
}
