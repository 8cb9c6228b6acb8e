//! The verdict's one home (ARCHITECTURE.md, fatkit-audit): which GPUs and drivers a kernel runs
//! on is judged by fatkit-arch's model, asked by fatkit-audit for every binary audited or
//! packaged and `profiles show`, by the runtime for the device it runs on, and by the build
//! gate for the images it writes; no other library code judges a device.

use std::path::Path;

use super::{code_lines, library_sources, root};

/// How code judges images on a device.
const JUDGING: &[&str] = &[
    "Device::new(",
    "Device {",
    "rules::select(",
    "explain::explain(",
    "explain::of_verdict(",
    "load::Module::of(",
    ".fate(&",
];

/// The library crates that must not judge a device themselves (the kernel crates and demos
/// are users of the runtime's check; fatkit-arch, fatkit-audit and fatkit-runtime are where
/// judging lives).
const NOT_JUDGES: &[&str] = &[
    "fatkit-fatbin",
    "fatkit-read",
    "fatkit-run",
    "fatkit-package",
    "fatkit-toolchain",
    "fatkit-build",
    "fatkit-project",
    "fatkit-cli",
];

/// The build gate, which judges the images a build writes on every GPU of its profile before
/// writing them (fatkit-package, which a kernel crate's users build, cannot depend on the
/// audit), each file with its part.
const BUILD_GATE: &[(&str, &str)] = &[
    (
        "crates/fatkit-package/src/kernel_sets.rs",
        "declared kernels in the image the driver loads on each GPU",
    ),
    (
        "crates/fatkit-build/src/pipeline/bundle.rs",
        "a stub only where another image holds the body",
    ),
    (
        "crates/fatkit-build/src/pipeline/bundle/driver_view.rs",
        "what the driver would find on each GPU of the profile",
    ),
];

/// Lines of the [`NOT_JUDGES`] crates' library code under `root` that judge a device, as
/// `path:line: how`, less the [`BUILD_GATE`]; and in fatkit-fatbin, any mention of a `Device`
/// (the format crate takes none).
fn judging_outside_the_home(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (shown, code) in library_sources(root, NOT_JUDGES) {
        if BUILD_GATE.iter().any(|(f, _)| *f == shown) {
            continue;
        }
        let format_crate = shown.starts_with("crates/fatkit-fatbin/");
        for (n, line) in code_lines(&code) {
            match JUDGING.iter().find(|j| line.contains(**j)) {
                Some(how) => out.push(format!("{shown}:{n}: {how}")),
                None if format_crate && line.contains("Device") => {
                    out.push(format!("{shown}:{n}: Device"));
                }
                None => {}
            }
        }
    }
    out
}

#[test]
fn the_verdict_has_one_home() {
    let root = root();
    let found = judging_outside_the_home(&root);
    assert!(
        found.is_empty(),
        "library code that judges images on a device outside fatkit-audit (and fatkit-arch's model, the runtime and the build gate); ask fatkit-audit:\n{}",
        found.join("\n")
    );
    let release =
        std::fs::read_to_string(root.join("crates/fatkit-project/src/archive.rs")).unwrap();
    assert!(
        release.contains("fatkit_audit::gate"),
        "package's gate is fatkit-audit's (fatkit_audit::gate): archive.rs builds, calls it and writes"
    );
}

#[test]
fn judging_outside_the_home_is_caught() {
    let dir = std::env::temp_dir().join(format!("fatkit-tidy-verdict-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for krate in ["fatkit-cli", "fatkit-fatbin", "fatkit-audit"] {
        std::fs::create_dir_all(dir.join("crates").join(krate).join("src")).unwrap();
    }
    let judging = "pub fn f(p: &P, cc: Cc) -> V { rules::select(&p.images(), &Device::new(cc, None), Policy::default()) }\n";
    for krate in ["fatkit-cli", "fatkit-audit"] {
        std::fs::write(dir.join("crates").join(krate).join("src/lib.rs"), judging).unwrap();
    }
    std::fs::write(
        dir.join("crates/fatkit-fatbin/src/lib.rs"),
        "pub fn on(report: &R, device: &fatkit_arch::Device) {}\n",
    )
    .unwrap();
    assert_eq!(
        judging_outside_the_home(&dir),
        [
            "crates/fatkit-fatbin/src/lib.rs:1: Device",
            "crates/fatkit-cli/src/lib.rs:1: Device::new("
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
