//! `cuda_cc`: a `cc::Build` for a profile one nvcc builds whole.

use std::path::PathBuf;

use super::build_script_profile;
use crate::pipeline::{self, BuildError};
use fatkit_toolchain as toolchain;

/// A `cc::Build` for `.cu` files with host code (runtime-API launches), compiled by nvcc with
/// the `-gencode` flags of an arch profile, linking the static CUDA runtime of that nvcc. Only
/// for a profile one nvcc builds whole; [`Build::compile_library`](crate::Build::compile_library) builds any profile, with
/// the module route's cache, launcher and checks:
///
/// ```no_run
/// // build.rs
/// fatkit_build::cuda_cc("modern").unwrap().file("src/host.cu").compile("host");
/// ```
///
/// The profile is a built-in name, one from the nearest `arch-profiles/`, or a `.toml` path (`FATKIT_PROFILE`
/// overrides it); the toolchain is the newest found that builds every target, provisioned if
/// need be. The final binary's `.nv_fatbin` section then holds every target of the profile,
/// which `fatkit audit --require PROFILE` checks.
pub fn cuda_cc(profile_spec: &str) -> Result<cc::Build, BuildError> {
    let here = std::env::var("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_default();
    let profile = build_script_profile(Some(profile_spec), &here, true)?;
    let targets = profile.targets.clone();
    let toolchains = toolchain::for_targets(&targets, None, false, &mut |l| {
        println!("cargo:warning={l}")
    })
    .map_err(BuildError::of)?;
    let (tc, _) = toolchains
        .iter()
        .filter_map(|(t, p)| Some((t.as_nvcc()?, p)))
        .filter(|(_, p)| targets.iter().all(|t| p.targets.contains(t)))
        .max_by_key(|(_, p)| p.version)
        .ok_or_else(|| {
            let found: Vec<String> = toolchains
                .iter()
                .map(|(t, p)| format!("{} ({})", t.describe(Some(p)), p.targets))
                .collect();
            BuildError::from(crate::refused::Refused::NoSingleNvcc {
                profile: profile.name.clone(),
                targets: targets.clone(),
                found: if found.is_empty() {
                    "none".to_owned()
                } else {
                    found.join("; ")
                },
            })
        })?;
    // cc finds nvcc through NVCC (or PATH); `.compiler()` would make it treat nvcc as gcc.
    // A build script is single-threaded here, and this is the variable cc documents.
    std::env::set_var("NVCC", tc.nvcc());
    let mut build = cc::Build::new();
    build.cuda(true).cudart("static");
    for flag in targets.iter().flat_map(pipeline::gencode) {
        build.flag(flag);
    }
    // cc looks for the runtime under targets/<arch>-linux/lib; wheels and most installs keep it
    // in lib/ (or lib64/). The static runtime needs these system libraries too.
    for lib in ["lib", "lib64"] {
        let dir = tc.root.join(lib);
        if dir.is_dir() {
            println!("cargo:rustc-link-search=native={}", dir.display());
        }
    }
    for lib in ["dl", "rt", "pthread"] {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
    Ok(build)
}
