//! What each target adds to a package as it ships (issue 45), measured from modules already
//! built for the candidates (a `vendor` directory, or the output of `build-kernels`), for the
//! target planner (`fatkit_arch::target_search`). Every image of every module is written again by
//! fatkit's own writer under each compression (what a build with that profile would write),
//! and the package is weighed as it ships, whole and without each target in turn: gzip at
//! cargo's level for a `.crate` (with the rest of the package), deflate at the wheel tools' for
//! a wheel, nothing for bare fatbins. What a target adds is the difference; images of one
//! kernel for several targets share bytes gzip finds, so a target weighed alone would be
//! overstated. The images are written again, and the weighings run, side by side on the
//! cores. `crate_file`: a `.crate` as `cargo package` makes it; `over_budget`: the budget a
//! build is held to after it builds (`check_budget`).

mod crate_file;
mod over_budget;

pub(crate) use over_budget::check_budget;

use std::io::Write;
use std::path::{Path, PathBuf};

use fatkit_arch::profile::Compression;
use fatkit_arch::target_search::Candidate;
use fatkit_arch::{ImageKind, Target};
use fatkit_fatbin::inspect::extract_all;
use fatkit_fatbin::write::{write, Input};
use fatkit_fatbin::{EntryKind, Limits};

use crate_file::{crate_bytes, package_base};

pub use fatkit_arch::target_search::{parse_size, Shipped};

/// Bytes as `shipped` of one file holding `data`.
pub(crate) fn shipped_size(shipped: Shipped, data: &[u8]) -> u64 {
    weigh_files(shipped, [vec![data]])
}

/// `files` (each its parts one after the other) as `shipped` holds them: the bytes of bare
/// fatbins; each file deflated at the wheel tools' level; a tar of them gzipped at cargo's.
fn weigh_files<'a>(shipped: Shipped, files: impl IntoIterator<Item = Vec<&'a [u8]>>) -> u64 {
    let files = files.into_iter();
    match shipped {
        Shipped::Fatbin => files.flatten().map(|p| p.len() as u64).sum(),
        Shipped::Wheel => files.map(|parts| deflated(6, false, [parts])).sum(),
        Shipped::Crate => deflated(9, true, files),
    }
}

/// What was measured: the candidates and the base (per compression: everything that ships
/// but what the targets add one by one).
#[derive(Clone, Debug)]
pub struct Measured {
    pub candidates: Vec<Candidate>,
    pub base: [u64; 3],
    /// The modules read.
    pub modules: usize,
    /// Files `cargo package --list` names that a `.crate` of the package would not hold but
    /// for the user's ignore files (build outputs, fatkit's release archives): not weighed.
    pub set_aside: Vec<PathBuf>,
}

/// Why a directory cannot be measured.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: no .fatbin in it; build the candidates first (cargo xtask build-kernels --profile full) and name their directory", .0.display())]
    NoModules(PathBuf),
    #[error("{}: {target}: cannot be written again: {reason}", path.display())]
    Rewrite {
        path: PathBuf,
        target: Target,
        reason: String,
    },
    #[error("{}: cannot write the profile: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

const ORDER: [Compression; 3] = [Compression::None, Compression::Lz4, Compression::Zstd];

/// Every module of a directory, its images rewritten once per compression.
struct Modules {
    /// Per module, per image in its order: the target and its entry under each compression
    /// (a one-image fatbin).
    modules: Vec<Vec<(Target, [Vec<u8>; 3])>>,
    isa: std::collections::BTreeMap<Target, fatkit_arch::toolkit::PtxIsa>,
    /// Per cubin target, the newest toolkit its notes name.
    toolkit: std::collections::BTreeMap<Target, fatkit_arch::toolkit::CudaVersion>,
    /// What ships beside the modules, as `shipped`.
    rest: u64,
    /// What was set aside, unweighed ([`Measured::set_aside`]).
    set_aside: Vec<PathBuf>,
}

/// One image of a module, written again under each compression, with what it says of the
/// driver it needs (a PTX's ISA, a cubin's toolkit).
struct Rewritten {
    written: [Vec<u8>; 3],
    isa: Option<fatkit_arch::toolkit::PtxIsa>,
    toolkit: Option<fatkit_arch::toolkit::CudaVersion>,
}

/// `bytes`, an image of `target` from the module at `path`, written again under each
/// compression of `ORDER`.
fn rewrite(path: &Path, target: Target, bytes: &[u8]) -> Result<Rewritten, MeasureError> {
    let mut written: [Vec<u8>; 3] = Default::default();
    for (slot, compression) in written.iter_mut().zip(ORDER) {
        *slot = write(&[Input {
            target,
            data: bytes,
            identifier: None,
            compression,
        }])
        .map_err(|e| MeasureError::Rewrite {
            path: path.to_owned(),
            target,
            reason: e.reason,
        })?;
    }
    let (isa, toolkit) = match target.kind {
        ImageKind::Ptx => (fatkit_fatbin::ptx::inspect(bytes).version, None),
        ImageKind::Cubin => (
            None,
            fatkit_fatbin::cubin::inspect(bytes)
                .ok()
                .and_then(|c| c.toolkit?.parse().ok()),
        ),
    };
    Ok(Rewritten {
        written,
        isa,
        toolkit,
    })
}

impl Modules {
    fn read(dir: &Path, shipped: Shipped) -> Result<Modules, MeasureError> {
        let read_err = |path: &Path| {
            let path = path.to_owned();
            move |source| MeasureError::Read { path, source }
        };
        let (paths, other): (Vec<PathBuf>, Vec<PathBuf>) = files_of(dir)
            .map_err(read_err(dir))?
            .into_iter()
            .partition(|p| is_module(p));
        if paths.is_empty() {
            return Err(MeasureError::NoModules(dir.to_owned()));
        }
        // Every image of every module (which module, its target, its bytes), then each
        // written again on the cores side by side.
        let mut found: Vec<(usize, Target, Vec<u8>)> = Vec::new();
        for (m, path) in paths.iter().enumerate() {
            let data = fatkit_read::read_file(path).map_err(read_err(path))?;
            for image in extract_all("plan", &data, &Limits::default()) {
                if !matches!(image.kind, EntryKind::Cubin | EntryKind::Ptx) {
                    continue;
                }
                if let (Some(target), Ok(bytes)) = (image.target, image.bytes) {
                    found.push((m, target, bytes));
                }
            }
        }
        let rewritten = fatkit_fatbin::par::map(
            &found,
            || (),
            |_, (m, target, bytes)| {
                rewrite(paths.get(*m).map_or(dir, PathBuf::as_path), *target, bytes)
            },
        );
        let mut modules: Vec<Vec<(Target, [Vec<u8>; 3])>> = vec![Vec::new(); paths.len()];
        let mut isa = std::collections::BTreeMap::new();
        let mut toolkit = std::collections::BTreeMap::new();
        for ((m, target, _), r) in found.iter().zip(rewritten) {
            let r = r?;
            if let Some(v) = r.isa {
                isa.insert(*target, v);
            }
            if let Some(v) = r.toolkit {
                let newest = toolkit.entry(*target).or_insert(v);
                *newest = (*newest).max(v);
            }
            if let Some(module) = modules.get_mut(*m) {
                module.push((*target, r.written));
            }
        }
        let (rest, set_aside) = rest_of(dir, shipped, &other)?;
        Ok(Modules {
            modules,
            isa,
            toolkit,
            rest,
            set_aside,
        })
    }

    /// The package as shipped holding `keep`'s images compressed as `ORDER[c]`: each module
    /// one file of its kept entries, weighed as the package ships.
    fn weigh(&self, shipped: Shipped, c: usize, keep: &dyn Fn(Target) -> bool) -> u64 {
        // Each module's file: its kept entries, streamed into the compressor as they are (no
        // copy of the package is made: weighings run side by side).
        let files = self.modules.iter().map(|m| -> Vec<&[u8]> {
            m.iter()
                .filter(|(t, _)| keep(*t))
                .filter_map(|(_, w)| w.get(c).map(Vec::as_slice))
                .collect()
        });
        let files = files.filter(|parts| parts.iter().any(|p| !p.is_empty()));
        weigh_files(shipped, files) + self.rest
    }
}

/// The deflated size (at `level`: 9 is a `.crate`'s, 6 a wheel's) of `files`, each its parts
/// one after the other, as a tar holds them if `tar` (a 512-byte header each, data padded to
/// 512), else bare; the bytes are streamed into the encoder, never copied.
fn deflated<'a>(level: u32, tar: bool, files: impl IntoIterator<Item = Vec<&'a [u8]>>) -> u64 {
    /// Counts what is written.
    struct Count(u64);
    impl Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut z = flate2::write::DeflateEncoder::new(Count(0), flate2::Compression::new(level));
    for parts in files {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if tar {
            let _ = z.write_all(&[0u8; 512]);
        }
        for p in &parts {
            let _ = z.write_all(p);
        }
        if tar {
            let _ = z.write_all(&vec![0u8; len.next_multiple_of(512) - len]);
        }
    }
    z.finish().map_or(0, |c| c.0)
}

/// Measures the modules (`*.fatbin`) of `dir` as `shipped`: the whole under each compression,
/// and what each target adds to it (the whole less the whole without it: images of one kernel
/// for several targets share bytes a `.crate`'s gzip finds, so a target alone would be
/// overstated). What no target adds alone is the base. Weighing is `targets + 1` compressions
/// of the package per way of compressing its entries.
pub fn measure(dir: &Path, shipped: Shipped) -> Result<Measured, MeasureError> {
    let modules = Modules::read(dir, shipped)?;
    let targets: std::collections::BTreeSet<Target> = modules
        .modules
        .iter()
        .flat_map(|m| m.iter().map(|(t, _)| *t))
        .collect();
    // Every weighing, side by side on the cores: per compression, the whole (no target left
    // out) and the whole without each target.
    let jobs: Vec<(usize, Option<Target>)> = (0..ORDER.len())
        .flat_map(|c| {
            std::iter::once(None)
                .chain(targets.iter().copied().map(Some))
                .map(move |t| (c, t))
        })
        .collect();
    let weighed = fatkit_fatbin::par::map(
        &jobs,
        || (),
        |_, &(c, out)| modules.weigh(shipped, c, &|x| Some(x) != out),
    );
    let weight = |c: usize, out: Option<Target>| {
        jobs.iter()
            .zip(&weighed)
            .find(|(job, _)| **job == (c, out))
            .map_or(0, |(_, w)| *w)
    };
    let mut base = [0u64; 3];
    let mut adds: std::collections::BTreeMap<Target, [Option<u64>; 3]> = Default::default();
    for (c, slot) in base.iter_mut().enumerate() {
        let whole = weight(c, None);
        let mut added = 0u64;
        for &t in &targets {
            let add = whole.saturating_sub(weight(c, Some(t)));
            added += add;
            if let Some(a) = adds.entry(t).or_default().get_mut(c) {
                *a = Some(add);
            }
        }
        *slot = whole.saturating_sub(added);
    }
    let candidates = adds
        .into_iter()
        .map(|(target, bytes)| Candidate {
            target,
            ptx_isa: modules.isa.get(&target).copied(),
            toolkit: modules.toolkit.get(&target).copied(),
            bytes,
        })
        .collect();
    Ok(Measured {
        candidates,
        base,
        modules: modules.modules.len(),
        set_aside: modules.set_aside,
    })
}

/// Whether `dir` is the vendor directory of a package of its workspace (`vendor` in its
/// `[package.metadata.fatkit]`): its modules ship in the package's `.crate`. Modules anywhere
/// else (the target directory's) ship inside a binary, as bare fatbins. `plan DIR` and `plan`
/// both ask this, so that they weigh alike by default.
pub fn is_vendored(dir: &Path) -> bool {
    let Ok(dir) = dir.canonicalize() else {
        return false;
    };
    crate::workspace::discover(&dir).is_ok_and(|ws| {
        ws.kernel_packages.iter().any(|p| {
            p.vendor
                .as_ref()
                .and_then(|v| v.canonicalize().ok())
                .as_ref()
                == Some(&dir)
        })
    })
}

/// The driver each GPU needs for the chosen `targets`, as the modules measured hold them
/// (each PTX's ISA, the toolkit each cubin's notes name): `fatkit_arch::floor`, as `package`,
/// `profiles` and `doctor` say it.
pub fn driver_floors(
    targets: &fatkit_arch::TargetSet,
    candidates: &[Candidate],
) -> fatkit_arch::floor::Floors {
    let module: Vec<fatkit_arch::Image> = targets
        .iter()
        .map(|t| {
            let c = candidates.iter().find(|c| c.target == t);
            fatkit_arch::Image::of(t, c.and_then(|c| c.ptx_isa)).built_by(c.and_then(|c| c.toolkit))
        })
        .collect();
    fatkit_arch::floor::floors(&[module], &[], &fatkit_arch::products::product_ccs())
}

/// What the modules of `dir` would weigh as `shipped` holding only `targets`' images,
/// compressed as `compress`: each module's fatbin written again by fatkit's writer with those
/// images, in their order, then weighed as the package ships it, with what ships beside it
/// (as [`measure`]'s base). The search's sizes are estimates; this is the plan's size.
pub fn weigh(
    dir: &Path,
    targets: &fatkit_arch::TargetSet,
    compress: Compression,
    shipped: Shipped,
) -> Result<u64, MeasureError> {
    let read_err = |path: &Path| {
        let path = path.to_owned();
        move |source| MeasureError::Read { path, source }
    };
    let (modules, other): (Vec<PathBuf>, Vec<PathBuf>) = files_of(dir)
        .map_err(read_err(dir))?
        .into_iter()
        .partition(|p| is_module(p));
    // Each module written again on the cores side by side (ZSTD at the writer's level is
    // most of the time).
    let one_module = |path: &PathBuf| -> Result<Option<Vec<u8>>, MeasureError> {
        let data = fatkit_read::read_file(path).map_err(read_err(path))?;
        let kept: Vec<(Target, Vec<u8>)> = extract_all("plan", &data, &Limits::default())
            .into_iter()
            .filter(|i| matches!(i.kind, EntryKind::Cubin | EntryKind::Ptx))
            .filter_map(|i| Some((i.target?, i.bytes.ok()?)))
            .filter(|(t, _)| targets.contains(*t))
            .collect();
        let inputs: Vec<Input<'_>> = kept
            .iter()
            .map(|(target, bytes)| Input {
                target: *target,
                data: bytes,
                identifier: None,
                compression: compress,
            })
            .collect();
        if inputs.is_empty() {
            return Ok(None);
        }
        let one = write(&inputs).map_err(|e| MeasureError::Rewrite {
            path: path.clone(),
            target: e.target,
            reason: e.reason,
        })?;
        Ok(Some(one))
    };
    let mut written: Vec<Vec<u8>> = Vec::new();
    for one in fatkit_fatbin::par::map(&modules, || (), |_, path| one_module(path)) {
        written.extend(one?);
    }
    let files = written.iter().map(|f| vec![f.as_slice()]);
    Ok(weigh_files(shipped, files) + rest_of(dir, shipped, &other)?.0)
}

/// The regular files directly in `dir`, sorted.
fn files_of(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    Ok(out)
}

/// Whether `path` is a module's fatbin.
fn is_module(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "fatbin")
}

/// What ships beside the modules of `dir` (its `other` files), as `shipped`: for a `.crate`,
/// the rest of the package the directory is in where cargo can list it, else those files; for
/// a wheel, each of them deflated; for bare fatbins, nothing. With it, the files of the package
/// set aside unweighed.
fn rest_of(
    dir: &Path,
    shipped: Shipped,
    other: &[PathBuf],
) -> Result<(u64, Vec<PathBuf>), MeasureError> {
    match shipped {
        Shipped::Crate => match package_base(dir) {
            Some(base) => Ok(base),
            None => crate_bytes(other, &[])
                .map(|n| (n, Vec::new()))
                .map_err(|(path, source)| MeasureError::Read { path, source }),
        },
        Shipped::Fatbin => Ok((0, Vec::new())),
        Shipped::Wheel => {
            let mut sum = 0;
            for p in other {
                let data = fatkit_read::read_file(p).map_err(|source| MeasureError::Read {
                    path: p.clone(),
                    source,
                })?;
                sum += shipped_size(shipped, &data);
            }
            Ok((sum, Vec::new()))
        }
    }
}

/// How every profile `fatkit plan` writes begins: what `--write` may replace.
const PROFILE_HEADER: &str = "# Written by `fatkit plan`";

/// The chosen plan as a profile (`arch-profiles/NAME.toml`).
pub fn profile_toml(
    plan: &fatkit_arch::target_search::Plan,
    budget: u64,
    shipped: Shipped,
) -> String {
    let list = |kind: ImageKind| -> String {
        plan.targets
            .iter()
            .filter(|t| t.kind == kind)
            .map(|t| format!("\"{t}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let what = match shipped {
        Shipped::Crate => "a .crate",
        Shipped::Wheel => "a wheel",
        Shipped::Fatbin => "the fatbins",
    };
    format!(
        "{PROFILE_HEADER}: the targets covering the most GPUs within {budget} bytes for {what}.\n\
         description = \"planned for {budget} bytes ({} bytes as measured)\"\n\
         targets = [{}]\n\
         ptx = [{}]\n\
         compress = \"{}\"\n\
         budget = \"{budget}\"\n\
         for = \"{}\"\n",
        plan.bytes,
        list(ImageKind::Cubin),
        list(ImageKind::Ptx),
        plan.compress.name(),
        shipped.name(),
    )
}

/// Writes the chosen profile to `path` whole or not at all (a temporary renamed into place);
/// what is there already is replaced only when it is a regular file `fatkit plan` wrote.
pub fn write_profile(path: &Path, toml: &str) -> Result<(), MeasureError> {
    let ours = |head: &[u8]| head.starts_with(PROFILE_HEADER.as_bytes());
    fatkit_package::out::write_replacing(
        path,
        toml.as_bytes(),
        &ours,
        "a profile `fatkit plan` wrote",
    )
    .map_err(|source| MeasureError::Write {
        path: path.to_owned(),
        source,
    })
}
