//! Host-code libraries: `.cu` files with host launchers (`<<<...>>>`, `extern "C"` wrappers
//! over the CUDA runtime), as most Rust crates with CUDA code write them, compiled into a static
//! library whose one registered fatbin holds every target of the profile, though no single
//! compiler builds them all (CUDA 13 has no sm_70, CUDA 12.x no sm_110).
//!
//! ```no_run
//! // build.rs
//! fatkit_build::Build::new()
//!     .profile("full")
//!     .file("src/scale.cu")
//!     .compile_library("scale"); // libscale.a, linked; OUT_DIR/scale_kernels.rs: the modules
//! ```
//!
//! How (docs/BUILDS.md, "Host-code libraries"):
//!
//! 1. The device images are the module route's: one job per (source, target) on the toolchain
//!    the profile routes the target to, through the compile cache and the launcher, held to the
//!    declared kernel sets, written as `<module>.fatbin` with its manifest and `<module>.rs`.
//! 2. The host object is compiled once, by the newest nvcc that builds a target of the profile,
//!    as one of the module build's compiler calls: `nvcc -c` with the `-gencode` of the
//!    module's images of that nvcc's newest architecture where those are to be built (the call
//!    builds them, as their own call would have), else of its PTX alone, not optimised
//!    (`pipeline::host_call`). Either way its stub registers the source's kernels, device
//!    variables and runtime. Its `.nv_fatbin` section, the fatbin that stub registers with the
//!    CUDA runtime, is then replaced by the module's fatbin (`objcopy --update-section`): the
//!    stub holds a pointer to the section's start, and the runtime reads the fatbin's size from
//!    its header.
//! 3. The runtime finds each kernel by the name the stub registers, in the one image the driver
//!    loads (docs/ARCH_RULES.md section 2). So before the library is written, every
//!    kernel the stub registers must be one the module's images hold, or the build stops naming
//!    it.
//!
//! A source with host code that NVRTC would have to compile (a target no nvcc found builds) is
//! refused before any toolchain is provisioned or anything compiled, naming the file, the line,
//! the targets and the fixes.

use std::path::{Path, PathBuf};

use fatkit_arch::toolkit::{self, CudaVersion};
use fatkit_arch::{Compiler, ImageKind, Target, TargetSet};

use crate::builder::{Build, NvrtcUse};
use crate::pipeline::{self, schedule, BuildError, Report, Request};
use fatkit_toolchain::{self as toolchain, Nvcc, Probe, Toolchain};

/// The CUDA runtime a host-code library links: an option of [`Build`], defined with it.
pub use crate::builder::Cudart;

mod link;
use link::{registered_kernels, runtime_library, BinTools};

/// A static library built by [`Build::compile_library`].
#[derive(Debug)]
pub struct Library {
    pub name: String,
    /// `lib<name>.a`, in the output directory.
    pub path: PathBuf,
    /// The nvcc that compiled the host code, as `nvcc 13.2 (provisioned)`.
    pub host_compiler: String,
    /// The CUDA release of the runtime linked: a user's driver must support this major
    /// release (docs/ARCH_RULES.md section 3).
    pub runtime: CudaVersion,
    pub cudart: Cudart,
    /// The `cargo:` link lines printed (or, without cargo metadata, that would be).
    pub link_lines: Vec<String>,
    /// The kernels of every module, for every target: what the device images hold.
    pub report: Report,
}

impl Build {
    /// Compiles host-code sources into `lib<name>.a` and links it (as `cc` does), its device
    /// code for every target of the profile; also writes the modules and their index
    /// `<name>_kernels.rs` as [`Build::compile`] does, so the crate can check a device before
    /// its first launch (`include!(concat!(env!("OUT_DIR"), "/<name>_kernels.rs"))`). Ends the
    /// build script with the error.
    pub fn compile_library(&self, name: &str) -> Library {
        match self.try_compile_library(name) {
            Ok(lib) => lib,
            Err(e) => {
                eprintln!(
                    "\nerror occurred in fatkit_build::Build::compile_library(\"{name}\"): {e}\n"
                );
                std::process::exit(1);
            }
        }
    }

    /// [`Build::compile_library`], returning the error instead of exiting.
    pub fn try_compile_library(&self, name: &str) -> Result<Library, BuildError> {
        refuse_name_or_cross_build(name)?;
        let tools = BinTools::find()?;
        // The index of the library's modules: `<name>.rs` would be module `<name>`'s own
        // file when a source is `<name>.cu`, as it usually is.
        let index = format!("{name}_kernels");
        let offline = self.is_offline();
        let meta = self.prints_cargo_metadata();
        let mut warn = |line: String| {
            if meta {
                println!("cargo:warning={line}");
            }
        };
        let cudart = self.runtime_choice();
        // The host objects compile among the device jobs, each building its module's images
        // of one architecture on the way (docs/BUILDS.md).
        let (req, report) = self.build_modules(
            &index,
            |profile, sources| nvcc_for_host_code(profile, sources, offline, &mut warn),
            |req| {
                prefer_nvcc_for_host_code(req);
                req.ask.library = Some(name.to_owned());
                plan_host_objects(req, name)
            },
        )?;
        let (nvcc, probe, _) = host_compiler(&req)?;
        let (runtime_dir, runtime_lib) = runtime_library(nvcc, probe.version, cudart)?;
        // What the runtime needs of a user's driver, recorded in every object for `audit`.
        let record = objects_dir(&req, name).join("cudart.record");
        let linked = fatkit_fatbin::runtime::LinkedRuntime {
            linking: match cudart {
                Cudart::Static => fatkit_fatbin::runtime::Linking::Static,
                Cudart::Shared => fatkit_fatbin::runtime::Linking::Shared,
            },
            cuda: probe.version,
            from: String::new(),
        };
        fatkit_package::out::write_atomic(&record, linked.record().as_bytes())
            .map_err(pipeline::io_err(&record))?;
        let objects = finish_objects(&req, &report, name, &tools, &record)?;
        let path = req.ask.out_dir.join(format!("lib{name}.a"));
        tools.archive(&path, &objects)?;
        let mut link_lines = vec![
            format!(
                "cargo:rustc-link-search=native={}",
                req.ask.out_dir.display()
            ),
            format!("cargo:rustc-link-lib=static={name}"),
            format!("cargo:rustc-link-search=native={}", runtime_dir.display()),
            runtime_lib,
        ];
        for lib in ["stdc++", "dl", "rt", "pthread"] {
            link_lines.push(format!("cargo:rustc-link-lib=dylib={lib}"));
        }
        if self.prints_cargo_metadata() {
            for line in &link_lines {
                println!("{line}");
            }
        }
        Ok(Library {
            name: name.to_owned(),
            path,
            host_compiler: format!("nvcc {} ({})", probe.version, nvcc.source),
            runtime: probe.version,
            cudart,
            link_lines,
            report,
        })
    }
}

/// A library name is letters, digits, `_` and `-`; and nvcc builds host code for the machine
/// it runs on only.
fn refuse_name_or_cross_build(name: &str) -> Result<(), BuildError> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(crate::refused::Refused::LibraryName(name.to_owned()).into());
    }
    if let (Ok(target), Ok(host)) = (std::env::var("TARGET"), std::env::var("HOST")) {
        if let Some(message) = cross_refusal(name, &target, &host) {
            return Err(crate::refused::Refused::CrossCompile(message).into());
        }
    }
    Ok(())
}

/// Where library `name`'s objects go.
fn objects_dir(req: &Request, name: &str) -> PathBuf {
    req.ask.out_dir.join(format!("fatkit-lib-{name}"))
}

/// One host object per source of `req`, by the nvcc that compiles host code, named as the
/// build names the modules (so that each object meets its module): compiled among the jobs.
fn plan_host_objects(req: &mut Request, name: &str) -> Result<(), BuildError> {
    let (nvcc, probe, target) = host_compiler(req)?;
    let toolchain = req
        .with
        .toolchains
        .iter()
        .position(|(_, p)| std::ptr::eq(p, probe))
        .ok_or_else(|| {
            BuildError::from(crate::refused::Refused::NvccNotAmong {
                version: probe.version.to_string(),
                nvcc: nvcc.nvcc(),
            })
        })?;
    let dir = objects_dir(req, name);
    std::fs::create_dir_all(&dir).map_err(pipeline::io_err(&dir))?;
    req.ask.host_objects = req
        .ask
        .sources
        .iter()
        .map(|s| {
            let canonical = std::fs::canonicalize(s).unwrap_or_else(|_| s.clone());
            let module = req.ask.module_name_of(s, &canonical);
            // A source built for some targets only compiles its host code for the newest
            // of those this nvcc builds: it may not compile for the profile's newest.
            let own = req.ask.source_targets.get(s).and_then(|rule| {
                rule.targets
                    .iter()
                    .map(|t| t.with_kind(ImageKind::Ptx))
                    .filter(|t| probe.targets.contains(*t))
                    .max_by_key(|t| t.cc)
            });
            pipeline::HostObject {
                object: dir.join(format!("{module}.o")),
                module,
                toolchain,
                target: own.unwrap_or(target),
            }
        })
        .collect();
    Ok(())
}

/// Each module's host object made final: every kernel its stub registers checked to be one
/// the module's images hold, then its fatbin replaced by the module's, with the library's
/// symbol and the runtime `record`. The objects, in the modules' order.
fn finish_objects(
    req: &Request,
    report: &Report,
    name: &str,
    tools: &BinTools,
    record: &Path,
) -> Result<Vec<PathBuf>, BuildError> {
    let mut objects = Vec::new();
    for m in &report.modules {
        let Some(fatbin) = &m.fatbin else {
            return Err(crate::refused::Refused::ModuleNotWritten(m.source.clone()).into());
        };
        let object = req
            .ask
            .host_objects
            .iter()
            .find(|h| h.module == m.module)
            .map(|h| h.object.clone())
            .ok_or_else(|| {
                BuildError::from(crate::refused::Refused::NoHostObject {
                    file: m.source.clone(),
                    module: m.module.clone(),
                })
            })?;
        let registered = registered_kernels(&object)?;
        let missing: Vec<&String> = registered
            .iter()
            .filter(|k| !m.kernels.contains(k))
            .collect();
        if let Some(first) = missing.first() {
            return Err(crate::refused::Refused::RegisteredNotBuilt {
                file: m.source.clone(),
                first: (*first).clone(),
                more: if missing.len() > 1 {
                    format!(" (and {} more)", missing.len() - 1)
                } else {
                    String::new()
                },
                held: if m.kernels.is_empty() {
                    "no kernel".to_owned()
                } else {
                    m.kernels
                        .iter()
                        .map(|k| fatkit_fatbin::names::demangled(k))
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            }
            .into());
        }
        let declared = object.with_extension("declared");
        fatkit_package::out::write_atomic(&declared, m.declared.as_bytes())
            .map_err(pipeline::io_err(&declared))?;
        tools.replace_fatbin(
            &object,
            fatbin,
            &pipeline::linked_symbol(name, &m.module),
            (record, &declared),
        )?;
        objects.push(object);
    }
    Ok(objects)
}

/// nvcc compiles host code for the machine it runs on, with its own host compiler: a build
/// for another target (cargo's `TARGET` against `HOST`) would not link.
fn cross_refusal(name: &str, target: &str, host: &str) -> Option<String> {
    (target != host).then(|| format!(
        "compile_library({name:?}): building for {target} on {host}: nvcc compiles host code for the machine it runs on, so the library would not link; build on the {target} machine itself (with its nvcc), or use Build::compile, whose modules load on any host"
    ))
}

/// The first host-only construct of each source (`(source, line, what)`), as NVRTC would meet
/// it.
fn host_code_of(sources: &[PathBuf]) -> Vec<(PathBuf, usize, String)> {
    sources
        .iter()
        .filter_map(|s| {
            let text = fatkit_read::read_limited(s, schedule::HOST_CODE_SCAN_LIMIT).ok()?;
            let (line, what) = schedule::host_code(&text)?;
            Some((s.clone(), line, what))
        })
        .collect()
}

/// Makes sure, before the module route provisions its toolchains, that an nvcc builds every
/// target of the profile when a source has host code (NVRTC, the only other compiler,
/// compiles device code only): the nvccs found, the release fatkit provisions by default, and
/// for the targets only CUDA 12 builds (sm_70, sm_72), Debian's CUDA 12.4, provisioned here
/// unless `offline`. Refuses the source otherwise, naming its first host-only line. With host
/// code, NVRTC is not provisioned: it could build none of these sources.
fn nvcc_for_host_code(
    profile: &fatkit_arch::profile::Profile,
    sources: &[PathBuf],
    offline: bool,
    log: &mut dyn FnMut(String),
) -> Result<NvrtcUse, BuildError> {
    let host = host_code_of(sources);
    let Some(first) = host.first() else {
        return Ok(NvrtcUse::Provision);
    };
    // Found toolchains only: probing is cached, nothing is installed.
    let found = toolchain::for_profile(profile, None, true, &mut |_| {}).unwrap_or_default();
    let nvccs: Vec<(String, TargetSet)> = found
        .iter()
        .filter(|(_, p)| p.compiler == Compiler::Nvcc)
        .map(|(t, p)| (t.describe(Some(p)), p.targets.clone()))
        .collect();
    let missing = without_nvcc(profile, &nvccs);
    let debian = toolchain::debian::DEBIAN_CUDA;
    if !missing.is_empty() && (offline || !missing.iter().all(|t| toolkit::can_build(debian, t))) {
        return Err(crate::refused::Refused::HostCode {
            refusal: host_code_refusal(profile, first, &missing, &nvccs, offline),
            provisioning: None,
        }
        .into());
    }
    // The targets Debian's CUDA 12.4 builds with a newer release than any nvcc found (none
    // found, or an older one such as CUDA 11.8), as the module route provisions its defaults.
    let newer: TargetSet = profile
        .all_targets()
        .iter()
        .filter(|&t| {
            !toolkit::can_build(toolchain::DEFAULT_CUDA, t)
                && toolkit::can_build(debian, t)
                && profile
                    .pins
                    .get(&t)
                    .is_none_or(|pin| pin.matches(Compiler::Nvcc, debian))
                && found
                    .iter()
                    .filter(|(_, p)| p.compiler == Compiler::Nvcc && p.targets.contains(t))
                    .all(|(_, p)| p.version < debian)
        })
        .collect();
    if offline || newer.is_empty() {
        return Ok(NvrtcUse::FoundOnly);
    }
    log(format!(
        "{}:{}: host code, which NVRTC cannot compile, and no nvcc found builds {newer} with CUDA {debian} or newer: provisioning nvcc {debian} (Debian's build)",
        first.0.display(),
        first.1
    ));
    match toolchain::provision_of(Compiler::Nvcc, debian, &mut |l| log(l.to_owned())) {
        Ok(_) => Ok(NvrtcUse::FoundOnly),
        Err(e) if missing.is_empty() => {
            // An older nvcc builds the targets: the build goes on with it.
            log(format!(
                "provisioning nvcc {debian} failed, going on with the nvcc found: {e}"
            ));
            Ok(NvrtcUse::FoundOnly)
        }
        Err(e) => Err(crate::refused::Refused::HostCode {
            refusal: host_code_refusal(profile, first, &missing, &nvccs, offline),
            provisioning: Some((debian.to_string(), e)),
        }
        .into()),
    }
}

/// The targets of `profile` that neither the nvccs found (description, targets) nor the nvcc
/// fatkit provisions by default builds.
fn without_nvcc(
    profile: &fatkit_arch::profile::Profile,
    nvccs: &[(String, TargetSet)],
) -> TargetSet {
    profile
        .all_targets()
        .iter()
        .filter(|&t| {
            !toolkit::can_build(toolchain::DEFAULT_CUDA, t)
                && !nvccs.iter().any(|(_, targets)| targets.contains(t))
        })
        .collect()
}

/// The refusal of a source with host code at `(file, line, what)` when no nvcc found (`nvccs`:
/// description, targets) builds `missing` of `profile`.
fn host_code_refusal(
    profile: &fatkit_arch::profile::Profile,
    (file, line, what): &(PathBuf, usize, String),
    missing: &TargetSet,
    nvccs: &[(String, TargetSet)],
    offline: bool,
) -> String {
    let debian = toolchain::debian::DEBIAN_CUDA;
    let provision = if missing.iter().all(|t| toolkit::can_build(debian, t)) {
        format!(
            "let fatkit provision Debian's nvcc {debian} (`fatkit toolchain install --cuda {debian}`, or a build that is not offline{}), ",
            if offline { "; this one is" } else { "" }
        )
    } else {
        String::new()
    };
    format!(
        "{}:{line}: {what}, and no nvcc found builds {missing} of profile {} (nvcc {} does not; found: {}); NVRTC, the only other compiler for {missing}, compiles device code only; fix: {provision}install a CUDA toolkit whose nvcc builds {missing} (CUDA 12.x for sm_70; fatkit finds it through FATKIT_NVCC, CUDA_HOME, PATH or /usr/local/cuda-*), or put the host code under `#ifndef __CUDACC_RTC__` ... `#endif` so that NVRTC builds {missing} from the device code, or use a profile without {missing} (such as `modern`)",
        file.display(),
        profile.name,
        toolchain::DEFAULT_CUDA,
        if nvccs.is_empty() {
            "none".to_owned()
        } else {
            nvccs.iter().map(|(d, _)| d.as_str()).collect::<Vec<_>>().join(", ")
        }
    )
}

/// With host code in a source, NVRTC is left out wherever an nvcc builds the same targets:
/// the module route prefers the newest compiler, and NVRTC would refuse the source.
fn prefer_nvcc_for_host_code(req: &mut Request) {
    if host_code_of(&req.ask.sources).is_empty() {
        return;
    }
    let covered = req.ask.profile.all_targets().iter().all(|t| {
        req.with
            .toolchains
            .iter()
            .any(|(_, p)| p.compiler == Compiler::Nvcc && p.targets.contains(t))
    });
    if covered {
        req.with
            .toolchains
            .retain(|(_, p)| p.compiler != Compiler::Nvrtc);
    }
}

/// The nvcc that compiles the host code and the PTX target it compiles it for: the one
/// `FATKIT_NVCC` names, else the newest nvcc, that builds a target of the profile (its runtime
/// is the one linked: a CUDA 12 nvcc there keeps the library on CUDA 12 drivers), and the
/// newest such target (a kernel built for some architectures only by an `#if` on
/// `__CUDA_ARCH__` is built for the newest).
fn host_compiler(req: &Request) -> Result<(&Nvcc, &Probe, Target), BuildError> {
    host_compiler_of(&req.ask.profile, &req.with.toolchains).ok_or_else(|| {
        let found: Vec<String> = req
            .with
            .toolchains
            .iter()
            .map(|(t, p)| t.describe(Some(p)))
            .collect();
        BuildError::from(crate::refused::Refused::NoHostNvcc {
            profile: req.ask.profile.name.clone(),
            targets: req.ask.profile.all_targets(),
            found: if found.is_empty() {
                "none".to_owned()
            } else {
                found.join(", ")
            },
        })
    })
}

/// `host_compiler` among `toolchains` (the rule `fatkit doctor` reports too).
pub fn host_compiler_of<'a>(
    profile: &fatkit_arch::profile::Profile,
    toolchains: &'a [(Toolchain, Probe)],
) -> Option<(&'a Nvcc, &'a Probe, Target)> {
    let all = profile.all_targets();
    toolchains
        .iter()
        .filter_map(|(t, p)| Some((t.as_nvcc()?, p)))
        .filter_map(|(n, p)| {
            let target = all
                .iter()
                .map(|t| t.with_kind(ImageKind::Ptx))
                .filter(|t| p.targets.contains(*t))
                .max_by_key(|t| t.cc)?;
            Some((n, p, target))
        })
        .max_by_key(|(n, p, _)| (n.source == "FATKIT_NVCC", p.version))
}

#[cfg(test)]
mod tests;
