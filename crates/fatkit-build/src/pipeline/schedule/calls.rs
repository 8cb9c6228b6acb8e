//! The compiler calls that run a build's jobs, each with the arguments that decide its images:
//! one call per job, a PTX target in the call of its cubin, a library's host object taking
//! over the call of its architecture's images; ordered as they are to start. The compile
//! phase runs them as they are given.

use fatkit_arch::{ImageKind, Target};
use fatkit_toolchain::Toolchain;

use super::{arch_list_args, gencode, include_and_defines, Job, Schedule};
use crate::pipeline::Request;

/// One compiler call, with `argv`: the arguments that decide its images (the host compiler,
/// `-gencode`s, `__CUDA_ARCH_LIST__`, include directories, defines, flags, skipped kernels),
/// with paths as nvcc is given them in the schedule's base. The compile adds only what says
/// where the output goes and how it is kept.
#[derive(Clone, Debug)]
pub(crate) enum Call {
    /// Jobs (indices into the schedule's): one, or a cubin and the PTX of its architecture.
    Jobs { jobs: Vec<usize>, argv: Vec<String> },
    /// A library's host object (an index into [`crate::pipeline::Ask::host_objects`]) and
    /// the jobs it builds on the way.
    Host {
        host: usize,
        jobs: Vec<usize>,
        argv: Vec<String>,
    },
}

/// The calls that run the jobs without an output in `outputs` (the cache's), in the order they
/// start: longest first where timings are
/// known; a host object's own time is not recorded, so it goes first; among calls of unknown
/// time (a cold build), those of more jobs first: a PTX target's call with its cubin's takes
/// longer than one cubin's, and the last call to start sets how long one core idles.
pub(crate) fn calls_to_run<T>(
    req: &Request,
    schedule: &Schedule,
    outputs: &[Option<T>],
) -> Vec<Call> {
    let jobs = &schedule.jobs;
    let to_run: Vec<usize> = (0..jobs.len())
        .filter(|&i| outputs.get(i).is_some_and(Option::is_none))
        .collect();
    let seconds = |call: &Vec<usize>| -> f64 {
        call.iter()
            .map(|&i| {
                jobs.get(i)
                    .and_then(|j| j.last_seconds)
                    .unwrap_or(f64::INFINITY)
            })
            .sum()
    };
    let mut calls = calls(req, jobs, &to_run);
    let hosts = host_calls(req, schedule, &mut calls);
    let mut calls: Vec<(Call, (f64, usize))> = hosts
        .into_iter()
        .map(|(host, jobs, argv)| {
            let estimate = (f64::INFINITY, jobs.len() + 1);
            (Call::Host { host, jobs, argv }, estimate)
        })
        .chain(calls.into_iter().map(|jobs| {
            let estimate = (seconds(&jobs), jobs.len());
            let argv = images_argv(schedule, &jobs);
            (Call::Jobs { jobs, argv }, estimate)
        }))
        .collect();
    calls.sort_by(|(_, (ta, na)), (_, (tb, nb))| tb.total_cmp(ta).then(nb.cmp(na)));
    calls.into_iter().map(|(call, _)| call).collect()
}

/// The arguments that decide the images of a call of `jobs` (one source, one compiler): the
/// first job's own, and the other jobs' `-gencode` (nvcc runs the front end once per virtual
/// architecture). A library's host object builds its images with the same, so that they are
/// the bytes the jobs' own call makes.
fn images_argv(schedule: &Schedule, jobs: &[usize]) -> Vec<String> {
    let mut picked = jobs.iter().filter_map(|&i| schedule.jobs.get(i));
    let mut argv = picked.next().map(|j| j.argv.clone()).unwrap_or_default();
    for other in picked {
        argv.extend(gencode(other.target));
    }
    argv
}

/// The compiler calls that run `to_run` (indices into `jobs`): one per job, except that a PTX
/// job and the cubin job of its virtual architecture (compute_120 and sm_120 of one source, on
/// one nvcc, with the same kernels skipped) are one `nvcc --fatbin` for both. Run apart, each
/// would run that architecture's preprocessing and cicc: the PTX job is nothing else, so a
/// source's PTX target cost as much as a cubin, where nvcc's own `-gencode` list shares it
/// (docs/BUILDS.md). With a launcher every job stays one call: the cubin goes through it, the
/// PTX cannot.
fn calls(req: &Request, jobs: &[Job], to_run: &[usize]) -> Vec<Vec<usize>> {
    let may_pair = |j: &Job| {
        req.with.launcher.is_none()
            && matches!(
                req.with.toolchains.get(j.toolchain),
                Some((Toolchain::Nvcc(_), _))
            )
    };
    pair_calls(jobs, to_run, may_pair, |t| {
        req.ask.kernel_sets.skip_defines(t)
    })
}

/// [`calls`], given which jobs may share a call (nvcc's, without a launcher) and the kernels
/// each target skips.
fn pair_calls(
    jobs: &[Job],
    to_run: &[usize],
    may_pair: impl Fn(&Job) -> bool,
    skips: impl Fn(Target) -> Vec<String>,
) -> Vec<Vec<usize>> {
    let mut paired = std::collections::BTreeSet::new();
    let mut calls = Vec::new();
    for &i in to_run {
        if paired.contains(&i) {
            continue;
        }
        let Some(job) = jobs.get(i) else { continue };
        let partner = (job.target.kind == ImageKind::Cubin && may_pair(job))
            .then(|| {
                to_run.iter().copied().find(|&p| {
                    jobs.get(p).is_some_and(|ptx| {
                        ptx.target.kind == ImageKind::Ptx
                            && ptx.target == job.target.with_kind(ImageKind::Ptx)
                            && ptx.module == job.module
                            && ptx.toolchain == job.toolchain
                            && !paired.contains(&p)
                            && skips(ptx.target) == skips(job.target)
                    })
                })
            })
            .flatten();
        match partner {
            Some(p) => {
                paired.insert(p);
                calls.push(vec![i, p]);
            }
            None => calls.push(vec![i]),
        }
    }
    // A PTX job met before its cubin was pushed alone; drop it where it was paired since.
    calls.retain(|c| !(c.len() == 1 && c.first().is_some_and(|i| paired.contains(i))));
    calls
}

/// One call per host object of `req`, each taking over from `calls` the call of its module's
/// images of the host object's architecture, where there is one to take: `nvcc -c` with that
/// `-gencode` builds the same images (the host compile passes the host compiler `-fPIC` and
/// nothing more to the device side) as well as the object, where otherwise the object's own
/// device pass would be thrown away. Not with a launcher (its cubin jobs run through it) nor
/// where the target skips kernels (the host code would not see them). Each with the
/// arguments of its device side: those of the images it builds, else its own PTX target's,
/// its device code not optimised (it is thrown away).
fn host_calls(
    req: &Request,
    schedule: &Schedule,
    calls: &mut Vec<Vec<usize>>,
) -> Vec<(usize, Vec<usize>, Vec<String>)> {
    let mut out = Vec::new();
    for (h, host) in req.ask.host_objects.iter().enumerate() {
        let module = schedule.modules.iter().position(|m| m.name == host.module);
        let fits = |i: &usize| {
            schedule.jobs.get(*i).is_some_and(|j| {
                Some(j.module) == module
                    && j.toolchain == host.toolchain
                    && j.target.cc == host.target.cc
                    && j.target.suffix == host.target.suffix
                    && req.ask.kernel_sets.skip_defines(j.target).is_empty()
            })
        };
        let taken = match req.with.launcher {
            Some(_) => None,
            None => calls
                .iter()
                .position(|c| !c.is_empty() && c.iter().all(fits)),
        };
        let jobs = taken.map(|c| calls.remove(c)).unwrap_or_default();
        let argv = match (
            jobs.is_empty(),
            module.and_then(|i| schedule.modules.get(i)),
        ) {
            (true, Some(m)) => {
                let probe = req.with.toolchains.get(host.toolchain).map(|(_, p)| p);
                let mut argv = probe.map(super::ccbin_args).unwrap_or_default();
                argv.extend(gencode(host.target));
                argv.extend(arch_list_args(m, fatkit_arch::Compiler::Nvcc));
                argv.extend(include_and_defines(req, Some(&schedule.base)));
                argv.extend(req.ask.flags.nvcc_args());
                // Its device code is replaced by the module's fatbin: not optimised.
                argv.extend(["-Xcicc".to_owned(), "-O0".to_owned()]);
                argv
            }
            _ => images_argv(schedule, &jobs),
        };
        out.push((h, jobs, argv));
    }
    out
}

#[cfg(test)]
mod tests;
