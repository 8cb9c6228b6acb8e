use super::*;

fn job(module: usize, target: &str, toolchain: usize) -> Job {
    Job {
        module,
        target: target.parse().unwrap(),
        toolchain,
        args: Vec::new(),
        argv: Vec::new(),
        source_key: String::new(),
        object_key: None,
        deps: Vec::new(),
        last_seconds: None,
    }
}

#[test]
fn a_ptx_target_shares_the_call_of_its_cubin_and_nothing_else_is_paired() {
    let jobs = [
        // Module 0: the PTX after its cubin.
        job(0, "sm_80", 0),
        job(0, "sm_120", 0),
        job(0, "compute_120", 0),
        // Module 1: the PTX first, and sm_121 of another virtual architecture.
        job(1, "compute_120", 0),
        job(1, "sm_121", 0),
        job(1, "sm_120", 0),
        // Module 2: the cubin on another toolchain (NVRTC, say), which runs in process.
        job(2, "sm_120", 1),
        job(2, "compute_120", 0),
        // Module 3: the PTX target skips a kernel the cubin builds.
        job(3, "sm_90", 0),
        job(3, "compute_90", 0),
    ];
    let all: Vec<usize> = (0..jobs.len()).collect();
    let nvcc = |j: &Job| j.toolchain == 0;
    let skips = |t: Target| {
        if t.to_string() == "compute_90" {
            vec!["-DFATKIT_SKIP_k".to_owned()]
        } else {
            Vec::new()
        }
    };
    assert_eq!(
        pair_calls(&jobs, &all, nvcc, skips),
        [
            vec![0],
            vec![1, 2],
            vec![4],
            vec![5, 3],
            vec![6],
            vec![7],
            vec![8],
            vec![9]
        ]
    );
    // Only the jobs to run: a cached cubin leaves its PTX alone.
    assert_eq!(pair_calls(&jobs, &[0, 2], nvcc, skips), [vec![0], vec![2]]);
    // With a launcher (no job may share a call), every job is its own call.
    let none = pair_calls(&jobs, &all, |_| false, skips);
    assert_eq!(none, all.iter().map(|&i| vec![i]).collect::<Vec<_>>());
}
