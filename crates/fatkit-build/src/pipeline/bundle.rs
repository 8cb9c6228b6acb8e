//! Bundling a module whose jobs all succeeded: the kernel-list check across its images, then
//! the fatbin (every toolchain's images merged by fatkit's writer), the manifest and the Rust
//! module, each written atomically and only when it changed.

use std::collections::BTreeMap;
use std::path::PathBuf;

use fatkit_arch::toolkit::PtxIsa;
use fatkit_arch::{Compiler, ImageKind, Target, TargetSet};
use fatkit_fatbin::write::{self, Input};
use serde::Serialize;

use super::compile::{Failure, FailureKind};
use super::plan::Module;
use super::{BuildError, Request};
use crate::module::{self, Manifest, ManifestEntry};
use crate::out;
use crate::toolchain::{Probe, Toolchain};

/// What became of a module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModuleStatus {
    /// Written: some output changed.
    Built,
    /// The outputs were already up to date.
    Unchanged,
    /// Not written: a compile failed, or its images disagree.
    Failed,
}

/// One module's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct ModuleReport {
    pub module: String,
    pub source: PathBuf,
    pub status: ModuleStatus,
    pub fatbin: Option<PathBuf>,
    pub manifest: Option<PathBuf>,
    pub rust: Option<PathBuf>,
    /// The headers the source includes (outside the toolkit), as the last compiles saw them.
    pub headers: Vec<PathBuf>,
    /// The kernels of a written module; empty for a failed one.
    pub kernels: Vec<String>,
}

impl ModuleReport {
    /// A module left unwritten: a compile failed, or its images disagree.
    pub(crate) fn failed(m: &Module, headers: Vec<PathBuf>) -> ModuleReport {
        ModuleReport {
            module: m.name.clone(),
            source: m.path.clone(),
            status: ModuleStatus::Failed,
            fatbin: None,
            manifest: None,
            rust: None,
            headers,
            kernels: Vec::new(),
        }
    }
}

/// One compiled image of a module, read once: its kernels and PTX ISA.
pub(crate) struct Image<'a> {
    pub target: Target,
    pub data: &'a [u8],
    pub toolchain: &'a (Toolchain, Probe),
    pub kernels: Vec<String>,
    pub ptx_isa: Option<PtxIsa>,
}

/// The kernels of one image: a cubin's symbol table, or the `.entry` lines of PTX.
pub(crate) fn image_kernels(target: Target, data: &[u8]) -> (Vec<String>, Option<PtxIsa>) {
    match target.kind {
        ImageKind::Cubin => (
            fatkit_fatbin::cubin::inspect(data)
                .map(|i| i.kernels)
                .unwrap_or_default(),
            None,
        ),
        ImageKind::Ptx => {
            let info = fatkit_fatbin::ptx::inspect(data);
            (info.kernels, info.version)
        }
    }
}

/// Every image of a module must hold every kernel: one that some entries lack is a launch
/// failing on exactly the GPUs those entries serve. Typically NVRTC, which sees no host code,
/// dropped a template kernel that only a host-side launch instantiated.
pub(crate) fn kernel_disagreements(
    m: &Module,
    images: &[Image<'_>],
    excludes: &BTreeMap<String, TargetSet>,
) -> Vec<Failure> {
    let excluded = |k: &str, t: Target| excludes.get(k).is_some_and(|ts| ts.contains(t));
    let listed: Vec<(Target, &Vec<String>, String, Compiler)> = images
        .iter()
        .map(|i| {
            let (tc, probe) = i.toolchain;
            (i.target, &i.kernels, tc.short(probe), probe.compiler)
        })
        .collect();
    let mut all: Vec<&String> = listed.iter().flat_map(|(_, k, _, _)| k.iter()).collect();
    all.sort();
    all.dedup();
    let mut out = Vec::new();
    for (target, kernels, toolchain, compiler) in &listed {
        let missing: Vec<&str> = all
            .iter()
            .filter(|k| !kernels.contains(k) && !excluded(k, *target))
            .map(|k| k.as_str())
            .collect();
        let unguarded: Vec<&String> = kernels.iter().filter(|k| excluded(k, *target)).collect();
        if !unguarded.is_empty() {
            let names: Vec<&str> = unguarded.iter().map(|k| k.as_str()).collect();
            out.push(Failure {
                source: m.path.clone(),
                target: *target,
                kind: FailureKind::OverrideIgnored,
                toolchain: None,
                location: None,
                message: format!(
                    "the per-kernel overrides exclude {} from {target}, but the {target} image built by {toolchain} holds it\nfix: guard the kernel with `#ifndef FATKIT_SKIP_<name>` ... `#endif` (fatkit defines FATKIT_SKIP_<name> in the compiles that exclude it), or drop the override",
                    names.join(", ")
                ),
                command: String::new(),
                status: "a kernel override has no effect".to_owned(),
            });
        }
        if missing.is_empty() {
            continue;
        }
        let mut lines = Vec::new();
        for k in &missing {
            let having: Vec<String> = listed
                .iter()
                .filter(|(_, ks, _, _)| ks.iter().any(|x| x == k))
                .map(|(t, _, tc, _)| format!("{t} ({tc})"))
                .collect();
            lines.push(format!(
                "kernel {k} is missing from the {target} image built by {toolchain}; it is in {}",
                having.join(", ")
            ));
        }
        let fix = match compiler {
            Compiler::Nvrtc => format!(
                "fix: NVRTC compiles no host code, so a template kernel instantiated only by a host-side launch (or a kernel under #ifndef __CUDACC_RTC__) is dropped: instantiate it explicitly (`template __global__ void k<float>(float*);`) or declare it extern \"C\" without templates, or pin {target} to nvcc in the profile's [toolchain] table"
            ),
            Compiler::Nvcc => format!(
                "fix: a kernel under an #if on __CUDA_ARCH__ is missing for some targets; define it (even as a stub that traps) for every target, or drop {target} from the profile"
            ),
        };
        lines.push(fix);
        out.push(Failure {
            source: m.path.clone(),
            target: *target,
            kind: FailureKind::KernelListsDisagree,
            toolchain: None,
            location: None,
            message: lines.join("\n"),
            command: String::new(),
            status: "kernel lists disagree".to_owned(),
        });
    }
    out
}

pub(crate) fn bundle(
    req: &Request,
    m: &Module,
    images: &[Image<'_>],
) -> Result<ModuleReport, BuildError> {
    let ident = m.path.file_name().map(|n| n.to_string_lossy().into_owned());
    let compression = req.profile.compress;
    let inputs: Vec<Input<'_>> = images
        .iter()
        .map(|i| Input {
            target: i.target,
            data: i.data,
            identifier: ident.as_deref(),
            compression,
        })
        .collect();
    let fatbin = write::write(&inputs)
        .map_err(|e| BuildError::Input(format!("{}: cannot bundle: {e}", m.path.display())))?;
    let entries: Vec<ManifestEntry> = images
        .iter()
        .map(|i| {
            let (_, probe) = i.toolchain;
            ManifestEntry {
                target: i.target,
                kind: i.target.kind,
                compiler: probe.compiler,
                toolkit: probe.version,
                ptx_isa: i.ptx_isa,
                size: i.data.len(),
                kernels: i.kernels.clone(),
            }
        })
        .collect();
    let manifest = Manifest {
        schema: module::SCHEMA,
        module: m.name.clone(),
        source: m
            .path
            .strip_prefix(&req.root)
            .unwrap_or(&m.path)
            .display()
            .to_string(),
        profile: req.profile.name.clone(),
        fatbin: format!("{}.fatbin", m.name),
        fatbin_size: fatbin.len(),
        fatbin_blake3: blake3::hash(&fatbin).to_hex().to_string(),
        compression: req.profile.compress,
        min_driver: module::min_driver(&entries, req.profile.compress),
        kernels: Manifest::kernel_targets(&entries),
        entries,
    };
    let json = manifest.to_json();
    let rust = module::generate_rust(&manifest);
    let fatbin_path = req.out_dir.join(format!("{}.fatbin", m.name));
    let manifest_path = req.out_dir.join(format!("{}.manifest.json", m.name));
    let rust_path = req.out_dir.join(format!("{}.rs", m.name));
    let write = |path: &PathBuf, bytes: &[u8]| {
        out::write_if_changed(path, bytes).map_err(super::io_err(path))
    };
    // The fatbin first: the manifest and the Rust module describe it.
    let mut changed = write(&fatbin_path, &fatbin)?;
    changed |= write(&manifest_path, &json)?;
    changed |= write(&rust_path, rust.as_bytes())?;
    Ok(ModuleReport {
        module: m.name.clone(),
        source: m.path.clone(),
        status: if changed {
            ModuleStatus::Built
        } else {
            ModuleStatus::Unchanged
        },
        fatbin: Some(fatbin_path),
        manifest: Some(manifest_path),
        rust: Some(rust_path),
        headers: Vec::new(),
        kernels: manifest.kernels.iter().map(|k| k.name.clone()).collect(),
    })
}
