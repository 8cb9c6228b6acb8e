//! Builds the repository's `cuda-src/` with fatkit into `OUT_DIR` (profile `modern`, or
//! `FATKIT_PROFILE`), provisioning CUDA 13.2 from NVIDIA's wheels when no toolchain can.

use std::path::{Path, PathBuf};

use fatkit_build::cache::Cache;
use fatkit_build::pipeline::{self, Request};
use fatkit_build::{toolchain, ProfileSet};

fn main() {
    if let Err(e) = run() {
        // A build script's panic is cargo's way to fail with a message; this one is worded.
        eprintln!("error: fatkit-demo's kernels: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let root = manifest_dir
        .parent()
        .and_then(Path::parent)
        .ok_or("no workspace root")?
        .to_owned();
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    // Every variable the profile choice, the cache and toolchain discovery read.
    for var in fatkit_build::toolchain::ENV_VARS
        .iter()
        .chain(&["FATKIT_PROFILE"])
    {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let profile_name = std::env::var("FATKIT_PROFILE").unwrap_or_else(|_| "modern".to_owned());
    let profile = ProfileSet::open(&root.join("arch-profiles"))?.load(&profile_name)?;
    println!(
        "cargo:rerun-if-changed={}",
        root.join("arch-profiles")
            .join(format!("{profile_name}.toml"))
            .display()
    );
    let src = root.join("cuda-src");
    let sources = pipeline::sources_in(&src)?;
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-changed={}", src.join("include").display());
    let mut toolchains = Vec::new();
    for tc in toolchain::discover(None)? {
        if let Ok(p) = toolchain::probe(&tc) {
            toolchains.push((tc, p));
        }
    }
    if toolchains.is_empty() {
        let tc = toolchain::provision(toolchain::DEFAULT_CUDA, &mut |l| {
            println!("cargo:warning=toolchain: {l}")
        })?;
        let p = toolchain::probe(&tc)?;
        toolchains.push((tc, p));
    }
    let req = Request {
        profile,
        sources,
        include_dirs: vec![src.clone()],
        defines: Vec::new(),
        extra_args: Vec::new(),
        out_dir,
        root,
        jobs: std::env::var("NUM_JOBS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(2),
        cache: Cache::new(toolchain::cache_dir()?.join("build")),
        toolchains,
    };
    let report = pipeline::build(&req, &|_| {})?;
    for f in &report.failures {
        for line in f.to_string().lines() {
            println!("cargo:warning={line}");
        }
    }
    if !report.failures.is_empty() {
        return Err(format!(
            "{} compile(s) failed; see the warnings above",
            report.failures.len()
        )
        .into());
    }
    Ok(())
}
