//! Issue 53, the build dies with its jobs: SIGINT and SIGTERM to `build-kernels` stop every
//! compiler process group it started before it exits, and leave no module file.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fatkit_tests::toolchain;

use crate::hostile::adversarial_build::Project;

/// Whether process `pid` is gone (or a zombie no one reaped yet).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

/// SIGINT or SIGTERM to build-kernels left the nvcc process trees running. A compile that
/// takes long (an nvcc that starts a child and sleeps, saying their ids): the build dies with
/// its jobs, whole process groups, and leaves no module file.
#[test]
fn a_signal_to_the_build_stops_every_compiler_it_started() {
    if toolchain().is_none() {
        return;
    }
    for (signal, code) in [("TERM", 143), ("INT", 130)] {
        let p = Project::new(&format!("boundary-signal-{signal}"));
        let real = toolchain().unwrap().nvcc();
        let pids = p.dir.join("pids");
        let nvcc = p.dir.join("slow-cuda/bin/nvcc");
        std::fs::create_dir_all(nvcc.parent().unwrap()).unwrap();
        std::fs::write(
            &nvcc,
            format!(
                "#!/bin/sh\ncase \" $* \" in *\" -cubin \"*|*\" --fatbin \"*) sleep 600 & echo $$ $! >> {pids}; wait; exit 1;; esac\nexec {real} \"$@\"\n",
                pids = pids.display(),
                real = real.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&nvcc, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut args = p.args("one");
        args.push(format!("--nvcc={}", nvcc.display()));
        let mut child = Command::new(env!("CARGO_BIN_EXE_fatkit-e2e"))
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Both modules' compiles running (two jobs).
        let start = Instant::now();
        let started = loop {
            let text = std::fs::read_to_string(&pids).unwrap_or_default();
            let ids: Vec<u32> = text
                .split_whitespace()
                .map(|s| s.parse().unwrap())
                .collect();
            if ids.len() >= 4 {
                break ids;
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "the compiles did not start: {text:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .unwrap()
            .success());
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(code), "SIG{signal}");
        let start = Instant::now();
        while !started.iter().all(|&pid| gone(pid)) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "SIG{signal}: compiler processes {started:?} outlived the build"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let written: Vec<String> = std::fs::read_dir(p.dir.join("out"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| !n.starts_with('.'))
                    .collect()
            })
            .unwrap_or_default();
        assert!(written.is_empty(), "SIG{signal}: {written:?}");
    }
}
