//! Bundling a module whose jobs all succeeded: the kernel-list check across its images, then
//! the fatbin (every toolchain's images merged by fatkit's writer), the manifest and the Rust
//! module, each written atomically and only when it changed.

use crate::pipeline::failure::Status;
use std::collections::BTreeMap;
use std::path::PathBuf;

use fatkit_arch::load::Stub;
use fatkit_arch::toolkit::PtxIsa;
use fatkit_arch::{ImageKind, Target, TargetSet};
use fatkit_fatbin::params::{Layouts, Param};
use fatkit_fatbin::write::{self, Input};
use serde::Serialize;

use super::failure::{Failure, FailureKind};
use super::schedule::Module;
use super::{BuildError, Request};
use fatkit_package::kernel_sets::Declared;
use fatkit_package::module::{self, Manifest, ManifestEntry};
use fatkit_package::out;
use fatkit_toolchain::{Probe, Toolchain};

mod driver_view;
mod kernel_lists;
mod toolkit_split;
pub(crate) use driver_view::check_driver_view;
pub(crate) use kernel_lists::check_kernel_sets;
pub use kernel_lists::forms;

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
    /// The record of its declared kernels (`fatkit_arch::declared`), bound to its fatbin, as
    /// its generated module holds it; empty for a failed one. A host-code library carries it
    /// in each object (`Build::compile_library`).
    #[serde(skip)]
    pub declared: String,
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
            declared: String::new(),
        }
    }
}

/// One compiled image of a module, read once: its kernels and PTX ISA.
pub(crate) struct Image<'a> {
    pub target: Target,
    pub data: &'a [u8],
    pub toolchain: &'a (Toolchain, Probe),
    /// The kernels whose body it holds (see [`with_stubs`]).
    pub kernels: Vec<String>,
    /// The kernels it holds only as a stub, their body compiled out for its target.
    pub stubs: Vec<(String, Stub)>,
    pub ptx_isa: Option<PtxIsa>,
    /// Each kernel's parameters, or why they cannot be read.
    pub params: Result<Layouts, String>,
}

/// What one image holds: its kernels (a cubin's symbol table, or the `.entry` lines of PTX),
/// its PTX ISA, and the kernels whose code there only returns or traps, when its code was read
/// (`fatkit_fatbin::body`).
pub(crate) struct ImageKernels {
    pub kernels: Vec<String>,
    pub ptx_isa: Option<PtxIsa>,
    pub empty: Option<Vec<(String, Stub)>>,
}

pub(crate) fn image_kernels(target: Target, data: &[u8]) -> ImageKernels {
    match target.kind {
        ImageKind::Cubin => {
            let info = fatkit_fatbin::cubin::inspect(data).ok();
            ImageKernels {
                empty: info
                    .as_ref()
                    .filter(|i| i.code_read)
                    .map(|i| i.empty.clone()),
                kernels: info.map(|i| i.kernels).unwrap_or_default(),
                ptx_isa: None,
            }
        }
        ImageKind::Ptx => {
            let info = fatkit_fatbin::ptx::inspect(data);
            ImageKernels {
                kernels: info.kernels,
                ptx_isa: info.version,
                empty: Some(info.empty),
            }
        }
    }
}

/// The module's images with each kernel a stub where its code is empty and another image
/// holds its body (`fatkit_arch::load::Module::with_stubs`, docs/ARCH_RULES.md section 10):
/// moved from the image's kernels to its stubs. A kernel empty in every image (written so)
/// stays a kernel.
pub(crate) fn with_stubs<'a>(
    mut images: Vec<Image<'a>>,
    empty: &[Option<Vec<(String, Stub)>>],
) -> Vec<Image<'a>> {
    let read: Vec<(usize, &[(String, Stub)])> = empty
        .iter()
        .enumerate()
        .filter_map(|(i, e)| Some((i, e.as_deref()?)))
        .collect();
    let module: fatkit_arch::load::Module<String> =
        fatkit_arch::load::Module::of(images.iter().map(|i| {
            (
                fatkit_arch::rules::Image::of(i.target, i.ptx_isa),
                i.kernels.iter(),
            )
        }))
        .with_stubs(&read);
    for (kernel, stubbed) in &module.stubs {
        for &(idx, kind) in stubbed {
            if let Some(image) = images.get_mut(idx) {
                image.kernels.retain(|k| k != kernel);
                image.stubs.push((kernel.clone(), kind));
            }
        }
    }
    images
}

/// The parameter layout of each kernel of one image: a cubin's `.nv.info` records, or the
/// `.entry` signatures of PTX.
pub(crate) fn image_params(target: Target, data: &[u8]) -> Result<Layouts, String> {
    match target.kind {
        ImageKind::Cubin => fatkit_fatbin::params::cubin(data).map_err(|e| e.to_string()),
        ImageKind::Ptx => fatkit_fatbin::params::ptx(data),
    }
}

/// Every image of a kernel must lay out its parameters alike: one launch is made for whichever
/// image the driver picks, so a kernel whose signature differs by architecture (an `#if` on
/// `__CUDA_ARCH__` around a parameter) would read garbage on some GPUs. Returns each kernel's
/// layout, or one failure per kernel whose images disagree (or cannot be read).
pub(crate) fn check_params(
    m: &Module,
    images: &[Image<'_>],
) -> Result<BTreeMap<String, Vec<module::Param>>, Vec<Failure>> {
    let mut failures = Vec::new();
    // kernel -> layout -> the targets whose image has it
    let mut seen: BTreeMap<&str, Vec<(&[Param], TargetSet)>> = BTreeMap::new();
    for i in images {
        let layouts = match &i.params {
            Ok(l) => l,
            Err(e) => {
                failures.push(params_failure(
                    m,
                    i.target,
                    format!("cannot read the kernel parameters of the {} image: {e}", i.target),
                    "fix: this is a bug in fatkit or the compiler's output; report it with the source".to_owned(),
                ));
                continue;
            }
        };
        for k in &i.kernels {
            let Some(layout) = layouts.get(k) else {
                continue;
            };
            let groups = seen.entry(k).or_default();
            match groups.iter_mut().find(|(l, _)| *l == layout.as_slice()) {
                Some((_, targets)) => {
                    targets.insert(i.target);
                }
                None => groups.push((layout, std::iter::once(i.target).collect())),
            }
        }
    }
    let mut out = BTreeMap::new();
    for (kernel, groups) in seen {
        match groups.as_slice() {
            [(layout, _)] => {
                out.insert(
                    kernel.to_owned(),
                    layout
                        .iter()
                        .map(|p| module::Param {
                            offset: p.offset,
                            size: p.size,
                        })
                        .collect(),
                );
            }
            [(a, at), (b, bt), ..] => {
                let describe = |l: &[Param], i: usize| match l.get(i) {
                    Some(p) => format!("{} bytes at offset {}", p.size, p.offset),
                    None => format!("absent ({} parameters)", l.len()),
                };
                let i = (0..a.len().max(b.len()))
                    .find(|&i| a.get(i) != b.get(i))
                    .unwrap_or(0);
                let lines: Vec<String> = groups
                    .iter()
                    .map(|(l, t)| format!("  {t}: {}", render(l)))
                    .collect();
                let Some(target) = bt.iter().next() else {
                    continue;
                };
                failures.push(params_failure(
                    m,
                    target,
                    format!(
                        "kernel {kernel}: its images disagree on parameter {i}: {} in {at}, {} in {bt}\n{}",
                        describe(a, i),
                        describe(b, i),
                        lines.join("\n")
                    ),
                    format!("fix: give {kernel} the same parameters on every architecture (an #if on __CUDA_ARCH__ must not change its signature): one launch has to fit whichever image the driver picks"),
                ));
            }
            [] => {}
        }
    }
    if failures.is_empty() {
        Ok(out)
    } else {
        Err(failures)
    }
}

/// `(0:4) (4:4) (8:8) (16:8)`: offset and size of each parameter.
fn render(layout: &[Param]) -> String {
    if layout.is_empty() {
        return "no parameters".to_owned();
    }
    layout
        .iter()
        .map(|p| format!("({}:{})", p.offset, p.size))
        .collect::<Vec<_>>()
        .join(" ")
}

fn params_failure(m: &Module, target: Target, message: String, fix: String) -> Failure {
    Failure {
        source: m.path.clone(),
        target,
        kind: FailureKind::ParamsDisagree,
        toolchain: None,
        location: None,
        message: format!("{message}\n{fix}"),
        command: String::new(),
        status: Status::ParamsDisagree,
        fix: Some(fix),
    }
}

/// The manifest of module `m`, bundled as `fatbin` from `images`: their targets, compilers and
/// kernels, the declared sets and parameter layouts, and for a package its inputs (`inputs`:
/// the source, then every header its images were built from, with the sha256 of the bytes the
/// build read; and the paths its compiles looked for and did not find).
fn manifest_of(
    req: &Request,
    m: &Module,
    images: &[Image<'_>],
    fatbin: &[u8],
    (declared, params): (
        &BTreeMap<String, Declared>,
        &BTreeMap<String, Vec<module::Param>>,
    ),
    (inputs, absent): (&[(PathBuf, String)], &[PathBuf]),
) -> Result<Manifest, BuildError> {
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
                stubs: i
                    .stubs
                    .iter()
                    .map(|(kernel, stub)| module::StubbedKernel {
                        kernel: kernel.clone(),
                        stub: *stub,
                    })
                    .collect(),
            }
        })
        .collect();
    Ok(Manifest {
        schema: module::SCHEMA,
        module: m.name.clone(),
        // Relative to the project root, both canonical: the same in every checkout.
        source: {
            let root =
                std::fs::canonicalize(&req.ask.root).unwrap_or_else(|_| req.ask.root.clone());
            let path = std::fs::canonicalize(&m.path).unwrap_or_else(|_| m.path.clone());
            path.strip_prefix(&root).map_or_else(
                |_| m.path.display().to_string(),
                |p| p.display().to_string(),
            )
        },
        profile: req.ask.profile.name.clone(),
        fatbin: format!("{}.fatbin", m.name),
        fatbin_size: fatbin.len(),
        fatbin_blake3: blake3::hash(fatbin).to_hex().to_string(),
        written: None,
        compression: req.ask.profile.compress,
        min_driver: module::min_driver(&entries, req.ask.profile.compress),
        kernels: Manifest::kernel_targets(&entries, declared, params)
            .into_iter()
            .map(|mut k| {
                let shown = fatkit_fatbin::names::demangled(&k.name);
                k.demangled = (shown != k.name).then_some(shown);
                k
            })
            .collect(),
        entries,
        inputs: match &req.ask.stamp {
            Some(stamp) => {
                let targets = req.ask.profile.targets.to_string();
                Some(
                    fatkit_package::prebuilt::Inputs::of(stamp, &targets, inputs, absent)
                        .map_err(super::io_err(&m.path))?,
                )
            }
            None => None,
        },
    })
}

pub(crate) fn bundle(
    req: &Request,
    m: &Module,
    images: &[Image<'_>],
    (declared, params): (
        &BTreeMap<String, Declared>,
        &BTreeMap<String, Vec<module::Param>>,
    ),
    read: (&[(PathBuf, String)], &[PathBuf]),
) -> Result<ModuleReport, BuildError> {
    let ident = m.path.file_name().map(|n| n.to_string_lossy().into_owned());
    let compression = req.ask.profile.compress;
    let inputs: Vec<Input<'_>> = images
        .iter()
        .map(|i| Input {
            target: i.target,
            data: i.data,
            identifier: ident.as_deref(),
            compression,
        })
        .collect();
    let fatbin = write::write(&inputs).map_err(|source| crate::refused::Refused::Bundle {
        module: m.path.clone(),
        source,
    })?;
    let mut manifest = manifest_of(req, m, images, &fatbin, (declared, params), read)?;
    let source = match &req.ask.library {
        Some(library) => module::FatbinSource::Linked {
            symbol: super::linked_symbol(library, &m.name),
        },
        None => module::FatbinSource::Included,
    };
    let rust = module::generate_rust_from(&manifest, &fatbin, &source);
    let written = module::Written::of(&fatbin, rust.as_bytes());
    manifest.written = Some(written.clone());
    let json = manifest.to_json();
    let files = crate::owned::ModuleFiles::new(&req.ask.out_dir, &m.name);
    crate::owned::may_replace(&files, &m.name, &fatbin, rust.as_bytes()).map_err(BuildError::of)?;
    let write = |path: &PathBuf, bytes: &[u8]| {
        out::write_if_changed(path, bytes).map_err(super::io_err(path))
    };
    // The manifest last: it records the others' hashes, by which the next build knows them
    // for fatkit's (see crate::owned); until it is in place, the pending record does.
    files
        .writing(&written)
        .map_err(super::io_err(&files.manifest))?;
    let mut changed = write(&files.fatbin, &fatbin)?;
    changed |= write(&files.rust, rust.as_bytes())?;
    changed |= write(&files.manifest, &json)?;
    files.written().map_err(super::io_err(&files.manifest))?;
    let (fatbin_path, manifest_path, rust_path) = (files.fatbin, files.manifest, files.rust);
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
        declared: fatkit_package::kernel_sets::record(&m.name, &fatbin, declared),
    })
}
/// Module `m` from its jobs' images (`mine`; any missing, it failed): held to its declared
/// kernel sets, to what the driver would find, and to one parameter layout per kernel (each
/// disagreement a failure), then bundled and written.
pub(crate) fn finish(
    req: &Request,
    snapshot: &super::snapshot::Snapshot,
    m: &Module,
    mine: &[(&super::schedule::Job, Option<&super::failure::Output>)],
    on_event: &(dyn Fn(&super::Event) + Sync),
    failures: &mut Vec<Failure>,
) -> Result<ModuleReport, BuildError> {
    // The headers every image was built from, as each compile read them.
    let mut headers: Vec<PathBuf> = mine
        .iter()
        .filter_map(|(_, o)| o.map(|o| o.deps.clone()))
        .flatten()
        .collect();
    headers.sort();
    headers.dedup();
    if mine.iter().any(|(_, o)| o.is_none()) {
        return Ok(ModuleReport::failed(m, headers));
    }
    let mut empty = Vec::new();
    let images: Vec<Image<'_>> = mine
        .iter()
        .filter_map(|(j, o)| {
            let data = o.map(|o| o.image.as_slice())?;
            let read = image_kernels(j.target, data);
            let toolchain = req.with.toolchains.get(j.toolchain)?;
            empty.push(read.empty);
            Some(Image {
                target: j.target,
                data,
                toolchain,
                params: image_params(j.target, data),
                kernels: read.kernels,
                stubs: Vec::new(),
                ptx_isa: read.ptx_isa,
            })
        })
        .collect();
    // A kernel whose body is compiled out of an image is not in it for the checks below: it
    // must be declared away from that target like a kernel absent there.
    let images = with_stubs(images, &empty);
    let checked = check_kernel_sets(req, m, &images)
        .and_then(|declared| check_driver_view(req, m, &images, &declared).map(|()| declared))
        .and_then(|declared| check_params(m, &images).map(|params| (declared, params)));
    let (declared, params) = match checked {
        Ok(checked) => checked,
        Err(disagreements) => {
            failures.extend(disagreements);
            return Ok(ModuleReport::failed(m, headers));
        }
    };
    // What the manifest records of the module's inputs: the bytes this build read.
    let inputs: Vec<(PathBuf, String)> = std::iter::once(&m.path)
        .chain(&headers)
        .map(|p| {
            let sha256 = match snapshot.sha256_of(p) {
                Some(s) => s,
                None => {
                    snapshot
                        .hash(p)
                        .map_err(|c| crate::refused::Refused::Changed(c.message()))?
                        .sha256
                }
            };
            Ok((p.clone(), sha256))
        })
        .collect::<Result<_, BuildError>>()?;
    // The project's files its compiles looked for and did not find, for the build-script
    // check of a vendored package (the toolchain's own misses are the cache's business).
    let absent: Vec<PathBuf> = match &req.ask.stamp {
        Some(_) => {
            let search: Vec<PathBuf> = req
                .ask
                .header_search(&m.path)
                .into_iter()
                .map(|d| std::fs::canonicalize(&d).unwrap_or(d))
                .collect();
            let mut read = vec![m.path.clone()];
            read.extend(headers.iter().cloned());
            super::probes::absent(&read, &headers, &search)
                .map_err(|c| crate::refused::Refused::Changed(c.message()))?
        }
        None => Vec::new(),
    };
    let mut report = bundle(req, m, &images, (&declared, &params), (&inputs, &absent))?;
    report.headers = headers;
    if let Some(fatbin) = &report.fatbin {
        on_event(&super::Event::ModuleWritten {
            module: m.name.clone(),
            fatbin: fatbin.clone(),
            changed: report.status == ModuleStatus::Built,
        });
    }
    Ok(report)
}
