//! Issue 55, item 5, as a release engineer met it: a one-crate workspace whose
//! `[package.metadata.fatkit]` names its `cuda-src/` is one unit, built once, and `plan --write`
//! plans it; every command reads the package's `profile` from its metadata; `plan DIR` weighs as
//! `plan` does; and fatkit's release archive in the crate is named, not weighed as its `.crate`.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::{Path, PathBuf};

use fatkit_tests::{fatkit_in_process, temp_dir, toolchain};

const KERNEL: &str = "extern \"C\" __global__ void NAME(float* x, float a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }\n";

/// A one-crate workspace, `relapp`, whose metadata names its own `cuda-src/` (two kernels)
/// and profile `dev`.
fn relapp(name: &str) -> PathBuf {
    let dir = temp_dir(name);
    std::fs::create_dir_all(dir.join("cuda-src")).unwrap();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"relapp\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [package.metadata.fatkit]\nsources = [\"cuda-src\"]\nprofile = \"dev\"\n\n[workspace]\n",
    )
    .unwrap();
    for kernel in ["scale", "shrink"] {
        let source = KERNEL.replace("NAME", kernel);
        std::fs::write(dir.join(format!("cuda-src/{kernel}.cu")), source).unwrap();
    }
    dir
}

/// Where build-kernels wrote the package's modules (cargo's target directory, which
/// CARGO_TARGET_DIR may move out of the crate).
fn out_dir(dir: &Path) -> PathBuf {
    let (_, out, _) = run(dir, &["build-kernels"]);
    let line = out
        .lines()
        .find(|l| l.starts_with("profile dev: "))
        .unwrap();
    let (_, rest) = line.split_once(" in ").unwrap();
    PathBuf::from(rest.split_once("; ").unwrap().0)
}

fn run(dir: &Path, args: &[&str]) -> (u8, String, String) {
    let manifest = dir.join("Cargo.toml");
    let mut all = vec![args[0], "--offline", "--manifest-path"];
    all.push(manifest.to_str().unwrap());
    all.extend_from_slice(&args[1..]);
    fatkit_in_process(&all)
}

#[test]
fn a_crate_naming_its_cuda_src_is_one_unit_for_its_own_profile() {
    if toolchain().is_none() {
        return;
    }
    let dir = relapp("one-unit");
    let (code, out, err) = run(&dir, &["build-kernels"]);
    assert_eq!(code, 0, "{out}{err}");
    // Once, by the package, for its metadata's profile: dev is sm_90 alone, a job per source.
    assert!(out.contains("== package relapp (profile dev)"), "{out}");
    assert!(!out.contains("== cuda-src"), "{out}");
    assert!(out.contains("2 jobs"), "{out}");

    // plan plans the one unit and writes it; as plan DIR of its modules would, by default.
    let profile = dir.join("planned.toml");
    let budget = ["--budget", "10 MiB"];
    let (code, out, err) = run(
        &dir,
        &[
            "plan",
            budget[0],
            budget[1],
            "--write",
            profile.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("package relapp: 2 modules"), "{out}");
    assert!(out.contains("as fatbin:"), "{out}");
    let written = std::fs::read_to_string(&profile).unwrap();
    assert!(written.contains("for = \"fatbin\""), "{written}");
    // Its modules, where a target directory in the crate would hold them.
    let built = out_dir(&dir);
    let modules = dir.join("target/fatkit/relapp");
    std::fs::create_dir_all(&modules).unwrap();
    if std::fs::canonicalize(&built).unwrap() != std::fs::canonicalize(&modules).unwrap() {
        for file in std::fs::read_dir(built).unwrap() {
            let file = file.unwrap().path();
            std::fs::copy(&file, modules.join(file.file_name().unwrap())).unwrap();
        }
    }
    let args = ["plan", modules.to_str().unwrap(), budget[0], budget[1]];
    let (code, by_dir, err) = fatkit_in_process(&args);
    assert_eq!(code, 0, "{by_dir}{err}");
    assert!(
        by_dir
            .contains("2 modules, 1 targets measured; within 10.0 MiB (10485760 bytes) as fatbin:"),
        "{by_dir}"
    );
    let size = |text: &str| {
        text.lines()
            .find(|l| l.contains("size:"))
            .unwrap()
            .to_owned()
    };
    assert_eq!(size(&by_dir), size(&out));

    // fatkit's release archive in the crate: named, not weighed as part of its .crate.
    std::fs::create_dir_all(dir.join("dist")).unwrap();
    let noise: Vec<u8> = (0..200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(
        dir.join("dist/relapp-0.1.0-x86_64-unknown-linux-gnu.tar.gz"),
        noise,
    )
    .unwrap();
    let (code, as_crate, err) = fatkit_in_process(&[&args[..], &["--for", "crate"]].concat());
    assert_eq!(code, 0, "{as_crate}{err}");
    assert!(
        as_crate.contains("not weighed: ")
            && as_crate.contains("dist/relapp-0.1.0-x86_64-unknown-linux-gnu.tar.gz"),
        "{as_crate}"
    );
    let kib: f64 = size(&as_crate)
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(kib < 100.0, "{as_crate}");
}

/// `package` with no `--profile` builds and holds the binaries to the profile the package's
/// metadata names, as `build-kernels` does.
#[test]
fn package_reads_the_profile_from_the_metadata() {
    if toolchain().is_none() {
        return;
    }
    let dir = crate::ship::package::downstream("package-metadata-profile", "");
    let manifest = dir.join("crates/fatkit-example/Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replace("profile = \"full\"", "profile = \"dev\""),
    )
    .unwrap();
    let (code, out, err) = crate::ship::package::package(&dir);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("==> kernels for profile dev"), "{out}");
    assert!(
        out.contains("== package fatkit-example (profile dev)"),
        "{out}"
    );
    let (_, coverage) = crate::ship::package::unpacked(&dir, &out);
    assert_eq!(coverage["profile"], "dev");
    assert_eq!(coverage["targets"], serde_json::json!(["sm_90"]));
}
