//! A library's host object as one of the pipeline's compiler calls: `nvcc -c` of a module's
//! source, which also builds the module's images of one architecture where those are to be
//! built (`schedule::calls` says which), so that its device pass is not thrown away
//! (docs/BUILDS.md, "Host-code libraries").

use std::path::Path;

use fatkit_arch::toolkit::CudaVersion;

use super::failure::{CallResult, Failure, FailureKind};
use super::nvcc_call::{run_kept, source_name_args};
use super::schedule::{Job, Module};
use super::snapshot::Snapshot;
use super::{HostObject, Request};
use fatkit_toolchain::command;
use fatkit_toolchain::launcher;
use fatkit_toolchain::{Nvcc, Probe};

/// `nvcc -c` of `m`'s source into the host object, building the images of `jobs` on the way
/// (the arguments of the first job's own call, with the other's `-gencode`); with no job, for
/// the host object's PTX target, its device code not optimised (it is thrown away). Stores the
/// images in the cache as the other calls do.
pub(super) fn compile_host(
    req: &Request,
    snapshot: &Snapshot,
    (m, jobs, argv): (&Module, &[&Job], &[String]),
    host: &HostObject,
    (nvcc, probe): (&Nvcc, &Probe),
    base: Option<&Path>,
) -> CallResult {
    let toolchain = format!("nvcc {} (host code)", probe.version);
    let tmp = req.with.cache.scratch(&format!("host-{}", m.name));
    let mut args = vec!["-c".to_owned()];
    args.extend(argv.iter().cloned());
    // The images are read back and the object's fatbin replaced: compressing is wasted.
    if probe.version >= CudaVersion::new(12, 8) {
        args.push("--compress-mode=none".to_owned());
    }
    args.extend(["-Xcompiler".to_owned(), "-fPIC".to_owned()]);
    args.extend(source_name_args(&m.relative));
    args.extend(super::nvcc_call::kept_call_tail(
        &tmp,
        &host.object,
        &m.given,
    ));
    let make = || {
        let mut cmd = launcher::command(None, &nvcc.nvcc(), base);
        cmd.args(&args);
        cmd
    };
    let line = command::line_of(&make());
    let of = |kind| Failure::of_call(&m.path, host.target, kind, &toolchain, line.clone());
    let (fail, changed) = (of(FailureKind::HostCompile), of(FailureKind::InputChanged));
    run_kept(
        req,
        snapshot,
        m,
        jobs,
        (&tmp, &nvcc.root, base),
        (&make, &fail, &changed),
        &|_| images_of(&host.object, jobs),
    )
}

/// The images of `jobs` in the fatbin of the host object nvcc wrote.
fn images_of(object: &Path, jobs: &[&Job]) -> Result<Vec<Vec<u8>>, String> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let bytes = fatkit_read::read_limited(object, fatkit_read::MAX_FILE)
        .map_err(|e| format!("wrote no {}: {e}", object.display()))?;
    let limits = fatkit_fatbin::Limits::default();
    let mut found =
        fatkit_fatbin::inspect::extract_all(&object.display().to_string(), &bytes, &limits);
    jobs.iter()
        .map(|j| {
            let at = found
                .iter()
                .position(|e| e.target == Some(j.target) && e.bytes.is_ok())
                .ok_or_else(|| {
                    format!(
                        "wrote a host object with no {} image ({})",
                        j.target,
                        object.display()
                    )
                })?;
            Ok(found.swap_remove(at).bytes.unwrap_or_default())
        })
        .collect()
}
