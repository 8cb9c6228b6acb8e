//! What the build writes, and what it refuses to touch, with real nvcc: module names that are
//! paths, vendor directories that are Cargo's or another package's, files fatkit did not write,
//! options that would write elsewhere, outputs where a file is in the way.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

use fatkit_tests::{fatkit_in_process, temp_dir, toolchain};

use crate::hostile::adversarial_build::Project;

/// A package whose `[package.metadata.fatkit]` names a module `name`.
fn package_naming_module(dir: &Path, name: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/lib.rs"), "").unwrap();
    std::fs::write(
        dir.join("k.cu"),
        "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }\n",
    )
    .unwrap();
    let manifest = dir.join("Cargo.toml");
    std::fs::write(
        &manifest,
        format!(
            "[package]\nname = \"victim\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[package.metadata.fatkit]\nprofile = \"dev\"\nsources = [{{ path = \"k.cu\", module = {name:?} }}]\n\n[workspace]\n"
        ),
    )
    .unwrap();
    manifest
}

#[test]
fn a_module_name_that_is_a_path_or_holds_a_quote_is_refused() {
    for (i, name) in ["../../../k/src/main", "a\"b", "", "9lives"]
        .iter()
        .enumerate()
    {
        let dir = temp_dir(&format!("adv-module-name-{i}"));
        let manifest = package_naming_module(&dir, name);
        let main_rs = dir.join("src/main.rs");
        std::fs::write(&main_rs, "fn main() {}\n").unwrap();
        let (code, out, err) = fatkit_in_process(&[
            "build-kernels",
            "--offline",
            "--manifest-path",
            manifest.to_str().unwrap(),
        ]);
        assert_eq!(code, 2, "{name:?}: {out}{err}");
        // cargo metadata names the manifest by its canonical path.
        let canonical = manifest.canonicalize().unwrap();
        assert!(err.contains(canonical.to_str().unwrap()), "{err}");
        assert!(err.contains("is not a module name"), "{err}");
        assert_eq!(std::fs::read_to_string(&main_rs).unwrap(), "fn main() {}\n");
    }
}

/// A package `victim` in `dir` with `k.cu` and `src/lib.rs`, vendoring its modules in `vendor`.
fn vendoring_package(dir: &Path, vendor: &str, source: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/lib.rs"), "// the crate's own code\n").unwrap();
    std::fs::write(
        dir.join(source),
        "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }\n",
    )
    .unwrap();
    let manifest = dir.join("Cargo.toml");
    std::fs::write(
        &manifest,
        format!(
            "[package]\nname = \"victim\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[package.metadata.fatkit]\nprofile = \"dev\"\nsources = [{source:?}]\nvendor = {vendor:?}\n\n[workspace]\n"
        ),
    )
    .unwrap();
    manifest
}

/// `build-kernels` of the package at `manifest`, offline: its exit code and what it said.
pub(crate) fn build_package(manifest: &Path) -> (u8, String) {
    let (code, out, err) = fatkit_in_process(&[
        "build-kernels",
        "--offline",
        "--manifest-path",
        manifest.to_str().unwrap(),
    ]);
    (code, format!("{out}{err}"))
}

/// Issue 29: `vendor = "src"` replaced the crate's `src/lib.rs` with a generated module; a
/// vendor directory inside a nested package, or reached through a symbolic link, is shared
/// with whatever else writes there. Each is refused before anything is compiled.
#[test]
fn a_vendor_directory_of_cargo_another_package_or_a_link_is_refused() {
    let cases: [(&str, &str, &str); 4] = [
        ("src", "lib.cu", "is one of Cargo's directories"),
        ("tests", "k.cu", "is one of Cargo's directories"),
        ("b/prebuilt", "k.cu", "lies in the package of"),
        (
            "link/prebuilt",
            "k.cu",
            "is reached through the symbolic link",
        ),
    ];
    for (i, (vendor, source, says)) in cases.iter().enumerate() {
        let dir = temp_dir(&format!("adv-vendor-{i}"));
        let manifest = vendoring_package(&dir, vendor, source);
        std::fs::create_dir_all(dir.join("b/prebuilt")).unwrap();
        std::fs::write(
            dir.join("b/Cargo.toml"),
            "[package]\nname = \"b\"\nversion = \"0.1.0\"\n",
        )
        .unwrap();
        std::fs::create_dir_all(dir.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(dir.join("elsewhere"), dir.join("link")).unwrap();
        let (code, log) = build_package(&manifest);
        assert_eq!(code, 2, "vendor = {vendor:?}: {log}");
        assert!(
            log.contains(&format!("vendor = \"{vendor}\" {says}"))
                && log.contains("give the prebuilt modules a directory of their own"),
            "vendor = {vendor:?}: {log}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("src/lib.rs")).unwrap(),
            "// the crate's own code\n"
        );
        assert!(!dir.join("src/lib.fatbin").exists() && !dir.join("elsewhere/prebuilt").exists());
    }
}

/// Issue 29: fatkit replaced a hand-written file where a module's `.rs` goes, removed a
/// hand-edited `.rs` of a module whose source was renamed, and deleted a user's
/// `.report.2024.final.tmp` as a stale temporary. It knows its files by the hashes their
/// manifest records, and touches nothing else.
#[test]
fn fatkit_never_replaces_or_removes_a_file_it_did_not_write() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("adv-not-ours");
    let manifest = vendoring_package(&dir, "kernels/prebuilt", "k.cu");
    let prebuilt = dir.join("kernels/prebuilt");
    std::fs::create_dir_all(&prebuilt).unwrap();
    let users_tmp = prebuilt.join(".report.2024.final.tmp");
    std::fs::write(&users_tmp, "a user's file").unwrap();
    std::fs::write(prebuilt.join("k.rs"), "// mine\n").unwrap();

    let (code, log) = build_package(&manifest);
    assert_eq!(code, 2, "{log}");
    assert!(
        log.contains("k.rs: exists and fatkit did not write it")
            && log.contains("fatkit never replaces or removes a file it did not write"),
        "{log}"
    );
    assert!(
        !log.contains("] k.cu sm_"),
        "refused only after compiling: {log}"
    );
    assert_eq!(
        std::fs::read_to_string(prebuilt.join("k.rs")).unwrap(),
        "// mine\n"
    );
    assert!(!prebuilt.join("k.manifest.json").exists(), "{log}");

    std::fs::remove_file(prebuilt.join("k.rs")).unwrap();
    let (code, log) = build_package(&manifest);
    assert_eq!(code, 0, "{log}");
    assert!(users_tmp.is_file(), "a user's .tmp file was deleted");

    // Written over since fatkit wrote it: neither replaced nor, once its source is gone,
    // removed.
    let edited = "// my own k.rs\n";
    std::fs::write(prebuilt.join("k.rs"), edited).unwrap();
    let (code, log) = build_package(&manifest);
    assert_eq!(code, 2, "{log}");
    assert!(log.contains("k.rs: changed since fatkit wrote it"), "{log}");
    std::fs::rename(dir.join("k.cu"), dir.join("k2.cu")).unwrap();
    let text = std::fs::read_to_string(&manifest)
        .unwrap()
        .replace("\"k.cu\"", "\"k2.cu\"");
    std::fs::write(&manifest, text).unwrap();
    let (code, log) = build_package(&manifest);
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("kept module k, whose source is gone")
            && log.contains("changed since fatkit wrote it"),
        "{log}"
    );
    assert_eq!(
        std::fs::read_to_string(prebuilt.join("k.rs")).unwrap(),
        edited
    );
    assert!(prebuilt.join("k2.rs").is_file() && users_tmp.is_file());

    // As fatkit wrote it: removed with its source gone.
    std::fs::remove_file(prebuilt.join("k.rs")).unwrap();
    let (code, log) = build_package(&manifest);
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("its source is gone") && !prebuilt.join("k.fatbin").exists(),
        "{log}"
    );
    assert!(!prebuilt.join("k.manifest.json").exists(), "{log}");
}

/// Issue 29: `--flag=--dependency-output=PATH` made nvcc write outside the output directory.
/// Every option that writes a file of its own is refused, as a flag and in the metadata.
#[test]
fn an_option_that_writes_files_elsewhere_is_refused() {
    let p = Project::new("adv-dep-output");
    let elsewhere = p.dir.join("elsewhere.d");
    for flag in [
        format!("--flag=--dependency-output={}", elsewhere.display()),
        "--flag=-MMD".to_owned(),
        format!("--flag=--output-directory={}", p.dir.display()),
        "--flag=--keep".to_owned(),
    ] {
        let mut args = p.args("one");
        args.push(flag.clone());
        let (code, _, log) = p.build_with(&args);
        assert_eq!(code, 2, "{flag}: {log}");
        assert!(log.contains("fatkit sets this itself"), "{flag}: {log}");
        assert!(
            !elsewhere.exists() && !p.dir.join("out/a.fatbin").exists(),
            "{flag}: {log}"
        );
    }
    let dir = temp_dir("adv-dep-output-metadata");
    let manifest = vendoring_package(&dir, "kernels/prebuilt", "k.cu");
    let text = std::fs::read_to_string(&manifest)
        .unwrap()
        .replace("vendor = ", "flags = [\"-MD\"]\nvendor = ");
    std::fs::write(&manifest, text).unwrap();
    let (code, log) = build_package(&manifest);
    assert_eq!(code, 2, "{log}");
    assert!(
        log.contains("flag '-MD'") && log.contains("fatkit sets this itself"),
        "{log}"
    );
}

/// Issue 29: an empty `FATKIT_CACHE_DIR` put the cache's `build/` and `probes/` in the
/// current directory. It is an error naming the variable.
#[test]
fn an_empty_cache_dir_variable_is_an_error() {
    let p = Project::new("adv-empty-cache");
    let out = Command::new(env!("CARGO_BIN_EXE_fatkit-e2e"))
        .args(p.args("one"))
        .env("FATKIT_CACHE_DIR", "")
        .current_dir(&p.dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("FATKIT_CACHE_DIR is set but empty"), "{err}");
    for made in ["build", "probes", "toolchains", "out"] {
        assert!(!p.dir.join(made).exists(), "{made} was made: {err}");
    }
}

/// Issue 29: `--out FILE` said "File exists (os error 17)". The file is named as the problem.
#[test]
fn an_output_directory_that_is_a_file_is_named() {
    let p = Project::new("adv-out-file");
    std::fs::write(p.dir.join("out"), "a file").unwrap();
    for out in ["out", "out/sub"] {
        let mut args = p.args("one");
        let at = args.iter().position(|a| a == "--out").unwrap();
        args[at + 1] = p.dir.join(out).display().to_string();
        let (code, _, log) = p.build_with(&args);
        assert_eq!(code, 2, "{log}");
        assert!(
            log.contains("cannot be the output directory")
                && log.contains(&format!(
                    "{} is a file, not a directory",
                    p.dir.join("out").display()
                ))
                && log.contains("give --out a directory"),
            "{log}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(p.dir.join("out")).unwrap(),
        "a file"
    );
}

/// Issue 29: `package --dist FILE` said "File exists (os error 17)" after building everything.
/// The file is named, before anything is built.
#[test]
fn a_dist_directory_that_is_a_file_is_named_before_building() {
    let dir = temp_dir("adv-dist-file");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(dir.join("dist"), "a file").unwrap();
    let manifest = dir.join("Cargo.toml").display().to_string();
    let dist = dir.join("dist").display().to_string();
    let (code, out, err) =
        fatkit_in_process(&["package", "--manifest-path", &manifest, "--dist", &dist]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains(&format!("--dist {dist}: {dist} is a file, not a directory")),
        "{err}"
    );
    assert!(
        !out.contains("==> kernels"),
        "refused only after building: {out}"
    );
    assert_eq!(std::fs::read_to_string(dir.join("dist")).unwrap(), "a file");
}
