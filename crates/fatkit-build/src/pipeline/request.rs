//! What a build is asked ([`Ask`]: the inputs that decide what it writes) and what it answers
//! with ([`Resources`]: the cache, the compilers, how many at once and for how long), each made
//! by its one constructor at the entry (a build script's [`crate::Build`], a project's unit),
//! the environment included: read by the caller, never by the pipeline. A [`Request`] is the
//! two, handed to [`super::build`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fatkit_arch::profile::Profile;
use fatkit_arch::Target;
use fatkit_toolchain::{Probe, Toolchain};

use super::BuildError;
use crate::cache::Cache;

/// What a build is asked: every input that decides what it writes.
#[derive(Clone, Debug)]
pub struct Ask {
    pub profile: Profile,
    /// The `.cu` files; each is one module, named after its stem.
    pub sources: Vec<PathBuf>,
    pub include_dirs: Vec<PathBuf>,
    /// `NAME` or `NAME=VALUE`.
    pub defines: Vec<String>,
    /// Compile options in nvcc's spelling, translated for each compiler; part of every cache
    /// key.
    pub flags: fatkit_package::flags::Flags,
    pub out_dir: PathBuf,
    /// Sources are named relative to this in manifests (the workspace root).
    pub root: PathBuf,
    /// Module names other than the source's stem, by source path as given in `sources`.
    pub module_names: BTreeMap<PathBuf, String>,
    /// Kernels built for some targets only, as declared; the kernel-list check holds every
    /// image to them.
    pub kernel_sets: fatkit_package::kernel_sets::KernelSets,
    /// Sources built for some targets of the profile only, by source path as given in
    /// `sources` (their declarations in `kernel_sets.files`, resolved by
    /// [`crate::resolve::source_targets`]).
    pub source_targets: BTreeMap<PathBuf, fatkit_package::kernel_sets::FileRule>,
    /// For a `[package.metadata.fatkit]` package: record each module's inputs in its
    /// manifest, for the package's build-script check.
    pub stamp: Option<fatkit_package::prebuilt::Stamp>,
    /// For a host-code library (`Build::compile_library`): its name. Each generated module's
    /// `FATBIN` is then the library's copy (`linked_symbol`), not an `include_bytes!`.
    pub library: Option<String>,
    /// For a host-code library: the host object of each source, compiled among the jobs
    /// (`compile::host_calls`); empty otherwise.
    pub host_objects: Vec<HostObject>,
}

impl Ask {
    /// The one constructor: `sources` built for `profile` into `out_dir`, named relative to
    /// `root`; no include directories, defines, flags, declarations, stamp or library until a
    /// caller sets them (`Ask { defines, ..Ask::new(..) }`).
    pub fn new(profile: Profile, sources: Vec<PathBuf>, root: PathBuf, out_dir: PathBuf) -> Ask {
        Ask {
            profile,
            sources,
            include_dirs: Vec::new(),
            defines: Vec::new(),
            flags: Default::default(),
            out_dir,
            root,
            module_names: BTreeMap::new(),
            kernel_sets: Default::default(),
            source_targets: BTreeMap::new(),
            stamp: None,
            library: None,
            host_objects: Vec::new(),
        }
    }

    /// The module a source makes (`given` as it is in `sources`, `canonical` the file it
    /// resolves to): its name in `module_names`, else the resolved file's stem. The one rule,
    /// for the build's modules and for a host-code library's objects.
    pub(crate) fn module_name_of(&self, given: &Path, canonical: &Path) -> String {
        self.module_names
            .get(given)
            .cloned()
            .unwrap_or_else(|| super::schedule::module_name(canonical))
    }

    /// Where `source`'s local headers are looked for, in order: its own directory, the
    /// include directories, then the flags' `-I` directories. The one search: the NVRTC
    /// compile's `-I` list starts with it (`schedule::nvrtc_args`), and the include scans for
    /// the cache key and the recorded inputs use it, so no header the compile reads is
    /// missing from either.
    pub fn header_search(&self, source: &Path) -> Vec<PathBuf> {
        let mut search: Vec<PathBuf> = source.parent().map(PathBuf::from).into_iter().collect();
        search.extend(self.include_dirs.iter().cloned());
        search.extend(self.flags.include_dirs());
        search
    }
}

/// What a build answers with: none of it is an input of what it writes beyond the compilers'
/// own identities (part of every cache key).
#[derive(Clone, Debug)]
pub struct Resources {
    /// Parallel compiles.
    pub jobs: usize,
    /// The longest one nvcc job may run before it is killed (`FATKIT_JOB_TIMEOUT`).
    pub job_timeout: Duration,
    pub cache: Cache,
    /// The toolchains to route targets to, probed.
    pub toolchains: Vec<(Toolchain, Probe)>,
    /// The program nvcc's cubin jobs run under (sccache), found and checked.
    pub launcher: Option<fatkit_toolchain::launcher::Launcher>,
    /// Cargo's jobserver, in a build script: every parallel job beyond the first holds one
    /// of its tokens while it runs.
    pub tokens: Option<std::sync::Arc<jobserver::Client>>,
}

/// The environment a build reads, read once by its entry: a build script's through `Build`
/// (which tells cargo to run it again when a variable changes), a command's as it starts. The
/// pipeline reads none.
#[derive(Clone, Debug, Default)]
pub struct BuildEnv {
    /// `FATKIT_LAUNCHER`: the launcher of cubin jobs, over a package's `launcher` key (empty:
    /// none), under `--launcher` and `Build::launcher`.
    pub launcher: Option<String>,
    /// `FATKIT_JOB_TIMEOUT`: the longest one compile may run.
    pub job_timeout: Option<String>,
}

impl BuildEnv {
    /// The variables, each read once through `var`.
    pub fn read(mut var: impl FnMut(&str) -> Option<String>) -> BuildEnv {
        BuildEnv {
            launcher: var("FATKIT_LAUNCHER"),
            job_timeout: var("FATKIT_JOB_TIMEOUT"),
        }
    }

    /// The process's environment, as a command reads it when it starts.
    pub fn of_process() -> BuildEnv {
        BuildEnv::read(|v| std::env::var(v).ok())
    }
}

impl Resources {
    /// The one constructor. `jobs`: as asked, else one per core; the time limit of a job from
    /// `env`, refused when it is not a time. No launcher and no jobserver until the caller
    /// sets them (`Resources { launcher, ..Resources::new(..)? }`).
    pub fn new(
        cache: Cache,
        toolchains: Vec<(Toolchain, Probe)>,
        jobs: Option<usize>,
        env: &BuildEnv,
    ) -> Result<Resources, BuildError> {
        Ok(Resources {
            jobs: jobs
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
            job_timeout: timeout_of(env.job_timeout.as_deref())?,
            cache,
            toolchains,
            launcher: None,
            tokens: None,
        })
    }
}

/// A build: what it is asked, and what it answers with.
#[derive(Clone, Debug)]
pub struct Request {
    pub ask: Ask,
    pub with: Resources,
}

/// A host object of a library ([`Ask::host_objects`]): `nvcc -c` of a module's source,
/// whose stub registers the module's kernels; its device code is replaced by the module's
/// fatbin afterwards (docs/BUILDS.md, "Host-code libraries").
#[derive(Clone, Debug)]
pub struct HostObject {
    /// The module, by name.
    pub module: String,
    /// Where nvcc writes it.
    pub object: PathBuf,
    /// The nvcc that compiles it (an index into [`Resources::toolchains`]) and the PTX target it
    /// is compiled for when it builds none of the module's images.
    pub toolchain: usize,
    pub target: Target,
}

/// How long one nvcc job may run: `FATKIT_JOB_TIMEOUT` (seconds, or `90s`, `30m`, `2h`), else
/// an hour (the slowest real compiles, CUTLASS kernels for one target, take minutes). A job
/// past it is killed with its compiler's children and fails, naming the variable.
fn timeout_of(setting: Option<&str>) -> Result<Duration, BuildError> {
    match setting {
        None => Ok(Duration::from_secs(3600)),
        Some(v) => parse_timeout(v)
            .ok_or_else(|| BuildError::from(crate::refused::Refused::JobTimeout(v.to_owned()))),
    }
}

/// `3600`, `90s`, `30m`, `2h`; never zero.
fn parse_timeout(text: &str) -> Option<std::time::Duration> {
    let t = text.trim();
    let (number, unit) = match t.char_indices().last() {
        Some((at, 's')) => (t.get(..at)?, 1),
        Some((at, 'm')) => (t.get(..at)?, 60),
        Some((at, 'h')) => (t.get(..at)?, 3600),
        _ => (t, 1),
    };
    number
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .filter(|&s| s > 0)
        .map(std::time::Duration::from_secs)
}

#[cfg(test)]
mod tests {
    #[test]
    fn timeouts_in_seconds_or_with_a_unit() {
        let secs = |t: &str| super::parse_timeout(t).map(|d| d.as_secs());
        assert_eq!(secs("3600"), Some(3600));
        assert_eq!(secs(" 90s "), Some(90));
        assert_eq!(secs("30m"), Some(1800));
        assert_eq!(secs("2h"), Some(7200));
        for bad in ["", "0", "10x", "m", "-5", "1.5h", "99999999999999999999h"] {
            assert_eq!(secs(bad), None, "{bad:?}");
        }
    }
}
