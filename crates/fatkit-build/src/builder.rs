//! A `build.rs` API in the style of the `cc` crate:
//!
//! ```no_run
//! // build.rs
//! fatkit_build::Build::new()
//!     .profile("full")
//!     .file("cuda-src/saxpy.cu")
//!     .compile("kernels");
//! // src/lib.rs: include!(concat!(env!("OUT_DIR"), "/kernels.rs"));  // mod saxpy { FATBIN, IMAGES, .. }
//! ```
//!
//! Writes each module (`<module>.fatbin`, `.manifest.json`, `.rs`) and `<name>.rs`, which
//! declares one `pub mod` per module, into `OUT_DIR` (or [`Build::out_dir`]); every path in
//! them is relative to the file, so the directory can be moved or committed. Emits `rerun-if-changed` for every
//! source, every header they include and the profile, and `rerun-if-env-changed` for every
//! variable it reads; compile errors are forwarded as `cargo:warning` lines.

use std::path::{Path, PathBuf};

use crate::cache::Cache;
use crate::pipeline::{self, Ask, BuildEnv, BuildError, Report, Request, Resources};
use fatkit_package::profile;
use fatkit_toolchain as toolchain;

mod cuda_cc;
mod report;

pub use cuda_cc::cuda_cc;
use report::{failed, write_index};

/// The profile a build script asked for: `FATKIT_PROFILE` if set, else `requested`, else
/// `full`; a name (a built-in, or from the nearest `arch-profiles/` above `here`) or a `.toml`
/// path. Emits
/// `rerun-if-env-changed` for every variable fatkit reads and `rerun-if-changed` for the file.
fn build_script_profile(
    requested: Option<&str>,
    here: &Path,
    meta: bool,
) -> Result<fatkit_arch::profile::Profile, BuildError> {
    for var in toolchain::ENV_VARS {
        env(var, meta);
    }
    let spec = env("FATKIT_PROFILE", meta)
        .or_else(|| requested.map(str::to_owned))
        .unwrap_or_else(|| profile::DEFAULT.to_owned());
    let origin = profile::resolve(&spec, here, None)?;
    if let (true, Some(path)) = (meta, origin.path()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    Ok(origin.load()?)
}

/// The CUDA runtime a host-code library links ([`Build::cudart`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Cudart {
    /// `libcudart_static.a` of the nvcc that compiled the host code.
    #[default]
    Static,
    /// The shared `libcudart.so` of that release, found at run time on the user's machine.
    Shared,
}

/// A kernel build configured from a build script.
#[derive(Clone, Debug)]
pub struct Build {
    profile: Option<String>,
    files: Vec<PathBuf>,
    include_dirs: Vec<PathBuf>,
    defines: Vec<String>,
    flags: Vec<String>,
    kernel_targets: Vec<(String, String)>,
    file_targets: Vec<(String, String)>,
    toolchains: Vec<(String, String)>,
    kernel_sets_as_built: bool,
    out_dir: Option<PathBuf>,
    jobs: Option<usize>,
    offline: bool,
    cargo_metadata: bool,
    launcher: Option<String>,
    cudart: Cudart,
    #[cfg(feature = "layout")]
    shared_types: Vec<PathBuf>,
}

impl Default for Build {
    fn default() -> Build {
        Build::new()
    }
}

fn env(var: &str, cargo_metadata: bool) -> Option<String> {
    if cargo_metadata {
        println!("cargo:rerun-if-env-changed={var}");
    }
    std::env::var(var).ok()
}

impl Build {
    pub fn new() -> Build {
        Build {
            profile: None,
            files: Vec::new(),
            include_dirs: Vec::new(),
            defines: Vec::new(),
            flags: Vec::new(),
            kernel_targets: Vec::new(),
            file_targets: Vec::new(),
            toolchains: Vec::new(),
            kernel_sets_as_built: false,
            out_dir: None,
            jobs: None,
            offline: false,
            cargo_metadata: true,
            launcher: None,
            cudart: Cudart::Static,
            #[cfg(feature = "layout")]
            shared_types: Vec::new(),
        }
    }

    /// A profile name (a built-in such as `full`, or one from the nearest `arch-profiles/`
    /// above the crate, which adds or overrides) or the path of a `.toml`. `FATKIT_PROFILE` in the environment overrides it; the default is `full`.
    pub fn profile(&mut self, profile: impl Into<String>) -> &mut Build {
        self.profile = Some(profile.into());
        self
    }

    /// One `.cu` source: one module, named after its stem.
    pub fn file(&mut self, path: impl AsRef<Path>) -> &mut Build {
        self.files.push(path.as_ref().to_owned());
        self
    }

    pub fn files<P: AsRef<Path>>(&mut self, paths: impl IntoIterator<Item = P>) -> &mut Build {
        self.files
            .extend(paths.into_iter().map(|p| p.as_ref().to_owned()));
        self
    }

    pub fn include(&mut self, dir: impl AsRef<Path>) -> &mut Build {
        self.include_dirs.push(dir.as_ref().to_owned());
        self
    }

    pub fn define(&mut self, name: &str, value: Option<&str>) -> &mut Build {
        self.defines.push(match value {
            Some(v) => format!("{name}={v}"),
            None => name.to_owned(),
        });
        self
    }

    /// One more compile option, in nvcc's spelling (`-std=c++17`, `--use_fast_math`,
    /// `-Xptxas -v`): translated for NVRTC where a target is built by it, refused before
    /// compiling where NVRTC has no equivalent; part of every cache key. See
    /// [`fatkit_package::flags`] for the table.
    pub fn flag(&mut self, flag: impl Into<String>) -> &mut Build {
        self.flags.push(flag.into());
        self
    }

    /// Declares that the kernels matching `pattern` (a name: the symbol, or the demangled C++
    /// name whole (`ns::k<float, 4>`) or without template arguments (`ns::k`, every
    /// instantiation); or a glob of either with `*` and `?`) are
    /// built for `targets` only, by the source's design (an `#if` on `__CUDA_ARCH__`):
    /// `"sm_80+"` (every target of the profile from that compute capability up) or a list
    /// (`"sm_80 sm_90"`). The build then holds their images to that, the manifest and the
    /// generated module record it, and the runtime check refuses only those kernels on other
    /// GPUs.
    pub fn kernel_targets(&mut self, pattern: &str, targets: &str) -> &mut Build {
        self.kernel_targets
            .push((pattern.to_owned(), targets.to_owned()));
        self
    }

    /// Declares that the sources matching `pattern` (a file name, or a path relative to the
    /// crate when it has a `/`; either a glob with `*` and `?`) are built for `targets` only:
    /// `"sm_80+"` or a list, as [`Build::kernel_targets`] takes. For code that needs a newer
    /// architecture throughout (`mma.sync` on bf16, `cp.async`, `ldmatrix`) and has no `#if`
    /// on `__CUDA_ARCH__`: it is compiled for those targets alone, and every kernel of its
    /// module is declared for them, so the build, the runtime check, `audit --require` and
    /// `package` treat the other GPUs as declared, not as gaps.
    pub fn file_targets(&mut self, pattern: &str, targets: &str) -> &mut Build {
        self.file_targets
            .push((pattern.to_owned(), targets.to_owned()));
        self
    }

    /// Pins `target` to a toolchain (`"nvcc 12.4"`, `"nvrtc 12.9"`, `"12"`), over the
    /// profile's `[toolchain]` table: what a profile file's `[toolchain]` says, without a
    /// profile file. The target must be one of the profile's, the toolchain one that builds it.
    pub fn toolchain(&mut self, target: &str, toolchain: &str) -> &mut Build {
        self.toolchains
            .push((target.to_owned(), toolchain.to_owned()));
        self
    }

    /// Accepts every kernel's targets as built: a kernel some images lack is recorded as
    /// declared for the others instead of failing the build.
    pub fn kernel_sets_as_built(&mut self) -> &mut Build {
        self.kernel_sets_as_built = true;
        self
    }

    /// Where outputs go instead of `OUT_DIR`.
    pub fn out_dir(&mut self, dir: impl AsRef<Path>) -> &mut Build {
        self.out_dir = Some(dir.as_ref().to_owned());
        self
    }

    /// Parallel compiles instead of cargo's `NUM_JOBS`.
    pub fn jobs(&mut self, jobs: usize) -> &mut Build {
        self.jobs = Some(jobs);
        self
    }

    /// A program nvcc's cubin jobs run under, as CMake's `CMAKE_CUDA_COMPILER_LAUNCHER`:
    /// `sccache` shares compiles through a team's cache or build cluster. A name on `PATH`
    /// (`sccache` is also found where `fatkit toolchain install --sccache` puts it) or a path.
    /// `FATKIT_LAUNCHER` in the environment overrides it; set empty, it turns it off.
    pub fn launcher(&mut self, program: impl Into<String>) -> &mut Build {
        self.launcher = Some(program.into());
        self
    }

    /// Which CUDA runtime a host-code library ([`Build::compile_library`]) links: the static
    /// one of the nvcc that compiles its host code (the default: nothing to install beside the
    /// binary), or the system's shared `libcudart.so` of that release (as bindgen_cuda's and
    /// cudaforge's crates link it: the user's machine must have it). Either way the user's
    /// driver must support that runtime's CUDA major release.
    pub fn cudart(&mut self, runtime: Cudart) -> &mut Build {
        self.cudart = runtime;
        self
    }

    /// The runtime a host-code library links.
    pub(crate) fn runtime_choice(&self) -> Cudart {
        self.cudart
    }

    /// Never provision a toolchain.
    pub fn offline(&mut self, offline: bool) -> &mut Build {
        self.offline = offline;
        self
    }

    /// A C header of structs shared by host and device: bindgen writes their Rust types to
    /// `<stem>_types.rs` (a `pub mod <stem>_types` of the index), and a check compiled by
    /// nvcc proves the device lays every one out the same way; a difference fails the build
    /// naming the struct and the field. Needs the `layout` feature.
    #[cfg(feature = "layout")]
    pub fn shared_types(&mut self, header: impl AsRef<Path>) -> &mut Build {
        self.shared_types.push(header.as_ref().to_owned());
        self
    }

    /// Whether to print `cargo:` lines (on by default).
    pub fn cargo_metadata(&mut self, on: bool) -> &mut Build {
        self.cargo_metadata = on;
        self
    }

    /// The `pub mod <stem>_types` entries of the index, after checking each shared header.
    #[cfg(feature = "layout")]
    fn shared_types_index(
        &self,
        here: &Path,
        out_dir: &Path,
        include_dirs: &[PathBuf],
        toolchains: &[(toolchain::Toolchain, toolchain::Probe)],
        say: &dyn Fn(String),
    ) -> Result<String, BuildError> {
        let mut index_extra = String::new();
        for header in &self.shared_types {
            let header = here.join(header);
            say(format!("cargo:rerun-if-changed={}", header.display()));
            say("cargo:rerun-if-env-changed=LIBCLANG_PATH".to_owned());
            let (tc, probe) = toolchains
                .iter()
                .filter_map(|(t, p)| Some((t.as_nvcc()?, p)))
                .max_by_key(|(_, p)| p.version)
                .ok_or_else(|| {
                    BuildError::from(crate::refused::Refused::NoLayoutNvcc {
                        header: header.clone(),
                    })
                })?;
            let args: Vec<String> = include_dirs
                .iter()
                .map(|d| format!("-I{}", d.display()))
                .collect();
            let types = crate::layout::check(
                &header,
                &args,
                (tc, probe),
                &out_dir.join("fatkit-layout"),
                &mut |l| say(format!("cargo:warning={l}")),
            )
            .map_err(BuildError::of)?;
            let stem = pipeline::module_name(&header);
            let path = out_dir.join(format!("{stem}_types.rs"));
            fatkit_package::out::write_if_changed(&path, types.rust.as_bytes())
                .map_err(crate::pipeline::io_err(&path))?;
            index_extra.push_str(&format!(
                "/// The structs of {} (bindgen), laid out as nvcc lays them out (checked).
pub mod {stem}_types {{
    #![allow(non_camel_case_types, non_snake_case, non_upper_case_globals, dead_code)]
    include!({:?});
}}
",
                header
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                format!("{stem}_types.rs")
            ));
        }
        Ok(index_extra)
    }

    #[cfg(not(feature = "layout"))]
    fn shared_types_index(
        &self,
        _here: &Path,
        _out_dir: &Path,
        _include_dirs: &[PathBuf],
        _toolchains: &[(toolchain::Toolchain, toolchain::Probe)],
        _say: &dyn Fn(String),
    ) -> Result<String, BuildError> {
        Ok(String::new())
    }

    /// Builds, or ends the build script with the error (as `cc` does). A SIGINT or SIGTERM to
    /// the build script kills the compilers it started before it exits.
    pub fn compile(&self, name: &str) -> Report {
        // A build script interrupted (cargo's Ctrl-C) stops the compilers it started.
        let _ = fatkit_toolchain::command::stop_on_signals();
        match self.try_compile(name) {
            Ok(report) => report,
            Err(e) => {
                eprintln!("\nerror occurred in fatkit_build::Build::compile(\"{name}\"): {e}\n");
                std::process::exit(1);
            }
        }
    }

    /// Builds, returning the error instead of exiting.
    pub fn try_compile(&self, name: &str) -> Result<Report, BuildError> {
        self.build_modules(name, |_, _| Ok(NvrtcUse::Provision), |_| Ok(()))
            .map(|(_, report)| report)
    }

    /// The flags and defines as the build takes them, each checked (`Build::flag`'s `-I`
    /// relative to the package, as `Build::include` is): the flags without their `-I`s, and
    /// those directories.
    fn checked_flags(
        &self,
        here: &Path,
    ) -> Result<(fatkit_package::flags::Flags, Vec<PathBuf>), BuildError> {
        let flags = fatkit_package::flags::Flags::parse(&self.flags).map_err(|source| {
            crate::refused::Refused::Flag {
                origin: "Build::flag",
                source,
            }
        })?;
        for define in &self.defines {
            if let Some(why) = fatkit_package::flags::define_refusal(define) {
                return Err(crate::refused::Refused::Define {
                    define: define.clone(),
                    why,
                }
                .into());
            }
        }
        Ok(flags.split_includes(here))
    }

    /// Builds every module and writes the index `<name>.rs`. `before_toolchains` sees the
    /// profile and sources before any toolchain is looked for or provisioned; `vet` sees the
    /// request (its toolchains found) before anything compiles, and may add the host objects of
    /// a library (compiled among the jobs). Either may refuse the build. Returns the request
    /// and the report; a failed compile is the error.
    pub(crate) fn build_modules(
        &self,
        name: &str,
        before_toolchains: impl FnOnce(
            &fatkit_arch::profile::Profile,
            &[PathBuf],
        ) -> Result<NvrtcUse, BuildError>,
        vet: impl FnOnce(&mut Request) -> Result<(), BuildError>,
    ) -> Result<(Request, Report), BuildError> {
        let meta = self.cargo_metadata;
        let say = |line: String| {
            if meta {
                println!("{line}");
            }
        };
        let manifest_dir = env("CARGO_MANIFEST_DIR", meta).map(PathBuf::from);
        let here = manifest_dir
            .clone()
            .unwrap_or_else(|| std::env::current_dir().unwrap_or_default());
        let out_dir = match (&self.out_dir, env("OUT_DIR", meta)) {
            (Some(dir), _) => dir.clone(),
            (None, Some(dir)) => PathBuf::from(dir),
            (None, None) => return Err(crate::refused::Refused::NoOutDir.into()),
        };
        let mut profile = build_script_profile(self.profile.as_deref(), &here, meta)?;
        self.pin_toolchains(&mut profile)?;
        let (flags, flag_includes) = self.checked_flags(&here)?;
        let kernel_sets = self.kernel_sets(&profile)?;
        let sources = self.sources(&here, name, &say)?;
        let source_targets = crate::resolve::source_targets(&kernel_sets, &sources, &here, || {
            "Build::file_targets".to_owned()
        })?;
        let compilers: &[fatkit_arch::Compiler] = match before_toolchains(&profile, &sources)? {
            NvrtcUse::Provision => &[fatkit_arch::Compiler::Nvcc, fatkit_arch::Compiler::Nvrtc],
            NvrtcUse::FoundOnly => &[fatkit_arch::Compiler::Nvcc],
        };
        let mut warn = |line: String| say(format!("cargo:warning={line}"));
        let toolchains =
            toolchain::for_profile_with(&profile, None, self.offline, compilers, &mut warn)
                .map_err(BuildError::of)?;
        let include_dirs: Vec<PathBuf> = self
            .include_dirs
            .iter()
            .map(|d| here.join(d))
            .chain(flag_includes)
            .collect();
        let index_extra =
            self.shared_types_index(&here, &out_dir, &include_dirs, &toolchains, &say)?;
        let jobs = self
            .jobs
            .or_else(|| env("NUM_JOBS", meta).and_then(|n| n.parse().ok()));
        let build_env = BuildEnv::read(|var| env(var, meta));
        let launcher = fatkit_toolchain::launcher::configured(
            None,
            build_env.launcher.as_deref(),
            self.launcher.as_deref().map(|l| (l, "Build::launcher")),
        )?;
        let ask = Ask {
            include_dirs,
            defines: self.defines.clone(),
            flags,
            kernel_sets,
            source_targets,
            ..Ask::new(profile, sources, here.clone(), out_dir.clone())
        };
        let cache = Cache::new(
            toolchain::cache_dir()
                .map_err(BuildError::of)?
                .join("build"),
        );
        let with = Resources {
            launcher,
            tokens: crate::jobs::inherited().filter(|_| meta),
            ..Resources::new(cache, toolchains, jobs, &build_env)?
        };
        let mut req = Request { ask, with };
        vet(&mut req)?;
        let report = pipeline::build(&req, &|_| {})?;
        for m in &report.modules {
            for h in &m.headers {
                say(format!("cargo:rerun-if-changed={}", h.display()));
            }
        }
        if !report.failures.is_empty() {
            return Err(failed(&report, &out_dir, name, &say));
        }
        let _ = std::fs::remove_file(out_dir.join(format!("{name}.fatkit-errors.log")));
        write_index(&report, &out_dir, name, &index_extra)?;
        Ok((req, report))
    }

    /// The sources, under `here`, each a `rerun-if-changed` line; none, or one whose module
    /// would be named like the index `name`, is refused.
    fn sources(
        &self,
        here: &Path,
        name: &str,
        say: &dyn Fn(String),
    ) -> Result<Vec<PathBuf>, BuildError> {
        if self.files.is_empty() {
            return Err(crate::refused::Refused::NoSources.into());
        }
        let sources: Vec<PathBuf> = self.files.iter().map(|f| here.join(f)).collect();
        for s in &sources {
            say(format!("cargo:rerun-if-changed={}", s.display()));
        }
        if let Some(s) = sources.iter().find(|s| pipeline::module_name(s) == name) {
            return Err(crate::refused::Refused::IndexClash {
                name: name.to_owned(),
                file: s.clone(),
            }
            .into());
        }
        Ok(sources)
    }

    /// The pins of `toolchain` over `profile`'s own.
    fn pin_toolchains(
        &self,
        profile: &mut fatkit_arch::profile::Profile,
    ) -> Result<(), BuildError> {
        for (target, toolchain) in &self.toolchains {
            let refused = |why: String| -> BuildError {
                crate::refused::Refused::BuildToolchain {
                    target: target.clone(),
                    toolchain: toolchain.clone(),
                    why,
                }
                .into()
            };
            let t = target
                .parse::<fatkit_arch::Target>()
                .map_err(|e| refused(e.to_string()))?;
            let p = toolchain
                .parse::<fatkit_arch::Pin>()
                .map_err(|e| refused(e.to_string()))?;
            let pin = std::collections::BTreeMap::from([(t, p)]);
            crate::resolve::pin_toolchains(&pin, profile).map_err(refused)?;
        }
        Ok(())
    }

    /// The declared kernel sets (`kernel_targets`, `kernel_sets_as_built`) over `profile`.
    fn kernel_sets(
        &self,
        profile: &fatkit_arch::profile::Profile,
    ) -> Result<fatkit_package::kernel_sets::KernelSets, BuildError> {
        let all = profile.all_targets();
        let mut rules = Vec::new();
        for (pattern, targets) in &self.kernel_targets {
            rules.push(
                fatkit_package::kernel_sets::KernelRule::targets(pattern, targets, &all).map_err(
                    |e| {
                        BuildError::from(crate::refused::Refused::KernelTargets {
                            pattern: pattern.clone(),
                            why: e,
                            profile: profile.name.clone(),
                        })
                    },
                )?,
            );
        }
        let mut files = Vec::new();
        for (pattern, targets) in &self.file_targets {
            files.push(
                fatkit_package::kernel_sets::FileRule::targets(pattern, targets, &all).map_err(
                    |e| {
                        BuildError::from(crate::refused::Refused::FileTargets {
                            pattern: pattern.clone(),
                            why: e,
                            profile: profile.name.clone(),
                        })
                    },
                )?,
            );
        }
        Ok(fatkit_package::kernel_sets::KernelSets {
            as_built: self.kernel_sets_as_built,
            rules,
            files,
        })
    }

    /// Whether `cargo:` lines are printed.
    pub(crate) fn prints_cargo_metadata(&self) -> bool {
        self.cargo_metadata
    }

    /// Whether toolchains may be provisioned ([`Build::offline`]).
    pub(crate) fn is_offline(&self) -> bool {
        self.offline
    }
}

/// Whether a build provisions NVIDIA's NVRTC where it would build a target with a newer
/// release ([`toolchain::for_profile_with`]), or uses only an NVRTC already found (a
/// host-code library, whose host code NVRTC cannot compile).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NvrtcUse {
    Provision,
    FoundOnly,
}
