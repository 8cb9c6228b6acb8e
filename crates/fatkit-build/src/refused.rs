//! Why a build, `build-kernels`, `package` or a build script's `Build` refuses to go on, as
//! data ([`Refused`]): each refusal a variant with what it names, its words (context first,
//! the fix after a semicolon) its `Display`, made here once. A [`BuildError`] carries one
//! whole (`BuildError::Build`), so a caller can match on it.
//!
//! [`BuildError`]: crate::BuildError

use std::path::PathBuf;

use fatkit_arch::TargetSet;

use fatkit_package::flags::FlagError;

/// A refusal of the build.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// What a unit built weighs more, as it ships, than its budget allows.
    #[error("{unit}: the build ships {size} bytes as a {shipped}, over {whose} of {budget} bytes; {fits} (`fatkit plan {} --budget {budget} --for {shipped}` says more)", dir.display())]
    OverBudget {
        unit: String,
        shipped: &'static str,
        size: u64,
        budget: u64,
        whose: &'static str,
        /// The plan that fits, in words, or why there is none.
        fits: String,
        dir: PathBuf,
    },
    /// A file of what was built cannot be read to weigh it.
    #[error("{}: cannot read it to weigh the build: {source}", path.display())]
    Unweighable {
        path: PathBuf,
        source: std::io::Error,
    },
    // The build script's `Build`.
    #[error("{}: no nvcc to check the shared types' layout with; `cargo xtask toolchain install`", header.display())]
    NoLayoutNvcc { header: PathBuf },
    /// A flag the allowlist refuses; `origin`: where it was written (`Build::flag`, `--flag`).
    #[error("{origin}: {source}")]
    Flag {
        origin: &'static str,
        source: FlagError,
    },
    /// A package's `[package.metadata.fatkit] flags` the allowlist refuses.
    #[error("{}: [package.metadata.fatkit] flags: {source}", manifest.display())]
    PackageFlag {
        manifest: PathBuf,
        source: FlagError,
    },
    /// `Build::define` the allowlist refuses, and why.
    #[error("Build::define({define:?}): {why}")]
    Define { define: String, why: String },
    #[error("no OUT_DIR: call from a build script, or set out_dir()")]
    NoOutDir,
    #[error("no sources: add .cu files with file() or files()")]
    NoSources,
    #[error("the index {name}.rs would replace module {name}'s own {name}.rs (from {}); give the index another name (such as \"kernels\")", file.display())]
    IndexClash { name: String, file: PathBuf },
    /// `Build::kernel_targets` that does not read against the profile.
    #[error("Build::kernel_targets(\"{pattern}\"): {why} (profile {profile})")]
    KernelTargets {
        pattern: String,
        why: fatkit_package::kernel_sets::RuleError,
        profile: String,
    },
    /// `Build::file_targets` that does not read against the profile.
    #[error("Build::file_targets(\"{pattern}\"): {why} (profile {profile})")]
    FileTargets {
        pattern: String,
        why: fatkit_package::kernel_sets::RuleError,
        profile: String,
    },
    /// A package's `[package.metadata.fatkit.files]` entry that does not read.
    #[error("{}: [package.metadata.fatkit.files] {pattern:?}: {why} (profile {profile})", manifest.display())]
    PackageFileTargets {
        manifest: PathBuf,
        pattern: String,
        why: fatkit_package::kernel_sets::RuleError,
        profile: String,
    },
    /// A declaration of a source's targets that matches none of the build's sources.
    #[error("{written} {pattern:?} matches none of the sources ({sources}); fix the name or the path (a pattern with `/` is a path relative to {root}, one without is a file name)", root = root.display())]
    FileMatchesNothing {
        written: String,
        pattern: String,
        sources: String,
        root: PathBuf,
    },
    /// A package's `[package.metadata.fatkit.kernels]` entry that does not read.
    #[error("{}: [package.metadata.fatkit.kernels] {pattern:?}: {why} (profile {profile})", manifest.display())]
    PackageKernelTargets {
        manifest: PathBuf,
        pattern: String,
        why: fatkit_package::kernel_sets::RuleError,
        profile: String,
    },
    #[error("no single nvcc found builds every target of profile {profile} ({targets}); cc compiles each file with one nvcc (found: {found}); fix: use `fatkit_build::Build::new().profile(\"{profile}\").file(..).compile_library(name)`, which takes each target's device code from a compiler that builds it")]
    NoSingleNvcc {
        profile: String,
        targets: TargetSet,
        found: String,
    },
    #[error("no compile failed; report it")]
    NoCompileFailed,
    /// Compiles failed: how many, the first one's lines, where all are, and a hint.
    #[error("{count} compile(s) failed; the first:\n{first}{log_line}{hint}")]
    CompilesFailed {
        count: usize,
        first: String,
        log_line: String,
        hint: String,
    },
    // `build-kernels`' units.
    #[error("--flag: {0}")]
    FlagCurrentDir(std::io::Error),
    /// No workspace where one was looked for, and no `--src`.
    #[error("{0}; or pass --src DIR")]
    NoWorkspace(fatkit_package::workspace::WorkspaceError),
    #[error("nothing to build in {}: no cuda-src/ and no package with [package.metadata.fatkit]; pass --src DIR", .0.display())]
    NothingToBuild(PathBuf),
    #[error("{}: cannot read the sources: {source}; pass --src DIR", src.display())]
    UnreadableSources {
        src: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: no .cu files to build; pass --src DIR", .0.display())]
    NoCuFiles(PathBuf),
    // `package`.
    #[error("`rustc -vV` printed no host line")]
    NoHostLine,
    #[error("--dist {}: {source}; give --dist a directory (made if missing)", dist.display())]
    Dist {
        dist: PathBuf,
        source: std::io::Error,
    },
    #[error("the current directory: {0}")]
    CurrentDir(std::io::Error),
    #[error("{}: no binary to package; list them in [workspace.metadata.fatkit] package = [..]", .0.display())]
    NoBinaries(PathBuf),
    #[error("which profile to package for: package {} is built for profile {}, package {} for {}; pass --profile", first.0, first.1, other.0, other.1)]
    ProfilesDisagree {
        first: (String, String),
        other: (String, String),
    },
    #[error("cargo built no executable named {name} (package {package})")]
    NoExecutable { name: String, package: String },
    #[error("cargo build --profile {profile} failed ({status}); see its errors above")]
    CargoBuildFailed {
        profile: String,
        status: std::process::ExitStatus,
    },
    // A host-code library (`Build::compile_library`).
    #[error("compile_library({0:?}): a library name is letters, digits, '_' and '-'; the library is lib<name>.a")]
    LibraryName(String),
    /// A cross-compile the host-code route cannot make, in the words of `host::cross_refusal`.
    #[error("{0}")]
    CrossCompile(String),
    #[error("nvcc {version} ({}) is not among the build's toolchains; report it", nvcc.display())]
    NvccNotAmong { version: String, nvcc: PathBuf },
    #[error("{}: its module was not written; the messages above say why", .0.display())]
    ModuleNotWritten(PathBuf),
    #[error("{}: module {module} has no host object; report it", file.display())]
    NoHostObject { file: PathBuf, module: String },
    /// A `Build::toolchain` pin the profile cannot take.
    #[error("Build::toolchain(\"{target}\", \"{toolchain}\"): {why}")]
    BuildToolchain {
        target: String,
        toolchain: String,
        why: String,
    },
    /// A `[package.metadata.fatkit.toolchain]` pin the package's profile cannot take.
    #[error("{}: [package.metadata.fatkit.toolchain]: {why}", manifest.display())]
    PackageToolchain { manifest: PathBuf, why: String },
    /// The host code registers a kernel no image of the module holds.
    #[error("{}: the host code registers kernel {}{more}, which none of the module's images holds, so its launch would fail with cudaErrorInvalidDeviceFunction on every GPU; the images hold {held}; fix: NVRTC compiles no host code, so a template kernel instantiated only by a host-side launch is dropped: instantiate it explicitly (`template __global__ void k<float>(float*);`), or build the targets NVRTC builds here with an nvcc (`fatkit toolchain install --cuda 12.4` provisions Debian's nvcc 12.4, which builds sm_70 and sm_72; or install CUDA 12.x where fatkit finds it)", file.display(), fatkit_fatbin::names::demangled(first))]
    RegisteredNotBuilt {
        file: PathBuf,
        first: String,
        more: String,
        held: String,
    },
    /// Host code for targets no nvcc builds, in the words of `host::host_code_refusal`; and,
    /// where provisioning one was tried, why that failed.
    #[error("{refusal}{}", provisioning.as_ref().map_or_else(String::new, |(release, e)| format!("\nprovisioning nvcc {release} failed: {e}")))]
    HostCode {
        refusal: String,
        provisioning: Option<(String, fatkit_toolchain::ToolchainError)>,
    },
    #[error("no nvcc found builds any target of profile {profile} ({targets}), and host code needs one (found: {found}); fix: run `fatkit toolchain install` or install a CUDA toolkit (fatkit finds it through FATKIT_NVCC, CUDA_HOME, PATH or /usr/local/cuda-*)")]
    NoHostNvcc {
        profile: String,
        targets: TargetSet,
        found: String,
    },
    #[error("{}: its fatbin: {error}", object.display())]
    HostFatbin { object: PathBuf, error: String },
    #[error("{}: nvcc's host object holds {count} fatbins where one was expected (is -rdc or --device-c among the flags? a host-code library is whole-program code)", object.display())]
    FatbinCount { object: PathBuf, count: usize },
    #[error("no {files} beside nvcc {} (looked in {dirs}); fix: install the toolkit's runtime (the cudart package), point FATKIT_NVCC at a complete toolkit, or choose the other runtime with Build::cudart", nvcc.display())]
    NoCudart {
        files: String,
        nvcc: PathBuf,
        dirs: String,
    },
    #[error("compile_library: {name} is not on PATH; fatkit uses it to {job}; fix: install GNU binutils (Debian: apt install binutils), or set {var}")]
    NoBinTool {
        name: &'static str,
        job: &'static str,
        var: &'static str,
    },
    // The pipeline.
    #[error("{}: cannot bundle: {source}", module.display())]
    Bundle {
        module: PathBuf,
        source: fatkit_fatbin::write::WriteError,
    },
    #[error("FATKIT_JOB_TIMEOUT={0:?} is not a time; set it to seconds (3600) or with a unit (90s, 30m, 2h), or unset it")]
    JobTimeout(String),
    #[error("{}: the path is not UTF-8, and nvcc takes paths as text, so it would read another file; rename it", .0.display())]
    NotUtf8Path(PathBuf),
    #[error("{}: the compile cache cannot be written ({source}); make it writable, or give another with --cache-dir or FATKIT_CACHE_DIR", cache.display())]
    CacheUnwritable {
        cache: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: cannot be the output directory: {source}; give --out a directory (made if missing)", dir.display())]
    NotAnOutDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: the output directory cannot be written ({source}); make it writable, or build into another (--out)", dir.display())]
    OutDirUnwritable {
        dir: PathBuf,
        source: std::io::Error,
    },
    /// A path nvcc would hand its shell as it is; `shown`: the path as printed.
    #[error("{shown}: nvcc would be given this {what} as {given:?}, which its shell would read (nvcc quotes nothing); rename it to use {}", fatkit_package::flags::PATH_CHARACTERS)]
    ShellPath {
        shown: String,
        what: &'static str,
        given: String,
    },
    /// A define nvcc's shell would read, and why.
    #[error("define {shown:?}: {why}")]
    ShellDefine { shown: String, why: String },
    #[error("{shown}: the compile cache holds nvcc's outputs, and this path would be read by nvcc's shell (it quotes nothing); give --cache-dir or FATKIT_CACHE_DIR a path of {}", fatkit_package::flags::PATH_CHARACTERS)]
    ShellCache { shown: String },
    /// A file that changed or could not be read as the build hashed it, in the snapshot's words.
    #[error("{0}")]
    Changed(String),
    #[error("{}: module name {name:?} is not a Rust identifier (ASCII letters, digits and _); name the module with one", file.display())]
    ModuleName { file: PathBuf, name: String },
    #[error("two sources make module '{name}': rename one of them ({})", file.display())]
    TwoSources { name: String, file: PathBuf },
    #[error("{} includes {}; refused before compiling: {why}", file.display(), header.display())]
    Include {
        file: PathBuf,
        header: PathBuf,
        why: String,
    },
    /// A source reaching more headers than a build scans.
    #[error("{0}; refused before compiling")]
    TooManyHeaders(fatkit_toolchain::nvrtc::TooManyHeaders),
    /// An include probe whose name the scan cannot read, so that no key can cover it.
    #[error("{}: `{line}` probes for a header by a name only the preprocessor makes; refused before compiling, as a header appearing under that name would not make the cached kernel stale; write the name as a literal (`__has_include(\"name.cuh\")` or `__has_include(<name.h>)`, directly or through an alias macro called with a literal)", file.display())]
    OpaqueProbe { file: PathBuf, line: String },
    /// A flag NVRTC cannot honour for the targets it builds.
    #[error("flag '{flag}': {nvrtc} builds {targets} (profile {profile}) and cannot honour it: {why}; {fix}, or remove the flag")]
    NvrtcFlag {
        flag: String,
        nvrtc: String,
        targets: String,
        profile: String,
        why: String,
        fix: String,
    },
    /// Host code in a source NVRTC builds.
    #[error("{}:{line}: {what}, which NVRTC cannot compile; {nvrtc} builds {targets} for profile {profile} and NVRTC compiles device code only; {fix}, or move the host code out of the kernel source", file.display())]
    NvrtcHostCode {
        file: PathBuf,
        line: usize,
        what: String,
        nvrtc: String,
        targets: String,
        profile: String,
        fix: String,
    },
}

impl From<Refused> for crate::BuildError {
    fn from(r: Refused) -> crate::BuildError {
        crate::BuildError::of(r)
    }
}
