//! A rule of ARCHITECTURE.md that holds for every library crate: it spawns a process only
//! through the one runner (`fatkit-run`), which has a time limit, keeps the output and types
//! the failure.

use std::path::Path;

use super::{code_lines, library_sources, root};

/// How a process is started or waited for.
const SPAWNS: &[&str] = &[".spawn()", ".output()", ".status()", ".exec()"];

/// Spawns in the library code of the crates under `root` outside fatkit-run, as
/// `path:line: how`. `.status()` is also a verdict's method: it counts in a file that builds
/// a `Command`.
fn spawns(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (shown, code) in library_sources(root, &[]) {
        if shown.starts_with("crates/fatkit-run/") {
            continue;
        }
        let builds_commands = code.contains("Command") || code.contains("cargo_metadata");
        for (n, line) in code_lines(&code) {
            for how in SPAWNS {
                if line.contains(how) && (*how != ".status()" || builds_commands) {
                    out.push(format!("{shown}:{n}: {how}"));
                }
            }
        }
    }
    out
}

#[test]
fn every_spawn_goes_through_the_one_runner() {
    let found = spawns(&root());
    assert!(
        found.is_empty(),
        "library code that starts a process itself; run it with fatkit_run (run, run_with, output_of), which limits its time, keeps its output and types its failure:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_spawn_outside_the_runner_is_caught() {
    let dir = std::env::temp_dir().join(format!("fatkit-tidy-spawn-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for krate in ["fatkit-build", "fatkit-run", "fatkit-arch"] {
        std::fs::create_dir_all(dir.join("crates").join(krate).join("src")).unwrap();
    }
    let spawning = "use std::process::Command;\npub fn f() { let _ = Command::new(\"nvidia-smi\").output(); }\n#[cfg(test)]\nmod tests { fn t() { let _ = std::process::Command::new(\"x\").status(); } }\n";
    for krate in ["fatkit-build", "fatkit-run"] {
        std::fs::write(dir.join("crates").join(krate).join("src/lib.rs"), spawning).unwrap();
    }
    // A verdict's `status()` in a file that runs nothing is not a spawn.
    std::fs::write(
        dir.join("crates/fatkit-arch/src/lib.rs"),
        "pub fn f(v: &V) -> S { v.status() }\n",
    )
    .unwrap();
    assert_eq!(
        spawns(&dir),
        ["crates/fatkit-build/src/lib.rs:2: .output()"]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every program a library crate starts, and where its name comes from: never from an input
/// (a crate's files or metadata, a binary, a wheel, an environment, an image). A `Command::new`
/// not listed here fails [`no_program_is_named_by_an_input`] until its origin is reviewed and
/// written down (docs/GUARANTEES.md, "Nothing from the input runs").
const PROGRAMS: &[(&str, &str, &str)] = &[
    ("crates/fatkit-audit/src/local.rs", "Command::new(program)", "nvidia-smi, or FATKIT_NVIDIA_SMI: the user's"),
    ("crates/fatkit-project/src/weigh/crate_file.rs", "Command::new(cargo)", "CARGO or cargo on PATH: the user's"),
    ("crates/fatkit-build/src/layout.rs", "Command::new(tc.nvcc())", "the nvcc fatkit found or provisioned"),
    ("crates/fatkit-build/src/layout.rs", "Command::new(\"gcc\")", "gcc on PATH"),
    ("crates/fatkit-project/src/archive.rs", "Command::new(&rustc)", "RUSTC or rustc on PATH"),
    ("crates/fatkit-project/src/archive.rs", "Command::new(cargo)", "CARGO or cargo on PATH"),
    ("crates/fatkit-build/src/host/link.rs", "Command::new(&self.objcopy)", "objcopy on PATH"),
    ("crates/fatkit-build/src/host/link.rs", "Command::new(&self.ar)", "ar on PATH"),
    ("crates/fatkit-toolchain/src/command.rs", "Command::new(program)", "a tool fatkit looks for by its own name"),
    ("crates/fatkit-toolchain/src/debian.rs", "Command::new(python)", "the user's python3, for pip"),
    ("crates/fatkit-toolchain/src/debian.rs", "Command::new(\"python3\")", "python3 on PATH"),
    ("crates/fatkit-toolchain/src/provision.rs", "Command::new(python())", "the user's python3, for pip"),
    ("crates/fatkit-toolchain/src/provision.rs", "Command::new(&cargo)", "CARGO or cargo on PATH"),
    ("crates/fatkit-lock/src/pip.rs", "Command::new(&settings.python)", "FATKIT_PYTHON or python3 on PATH: the user's, for pip's resolver"),
    ("crates/fatkit-lock/src/store.rs", "Command::new(&settings.python)", "FATKIT_PYTHON or python3 on PATH: the user's, to fetch the wheels a lock names"),
    ("crates/fatkit-toolchain/src/launcher.rs", "Command::new(nvcc)", "the nvcc fatkit found or provisioned"),
    ("crates/fatkit-toolchain/src/launcher.rs", "Command::new(&l.program)", "--launcher or FATKIT_LAUNCHER (the user's), or a known launcher a crate's metadata names (workspace::KNOWN_LAUNCHERS)"),
    ("crates/fatkit-toolchain/src/probe.rs", "Command::new(&nvcc)", "the nvcc fatkit found or provisioned"),
];

/// Lines of library code under `root` that start a program not in [`PROGRAMS`].
fn unreviewed_programs(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (shown, code) in library_sources(root, &[]) {
        if shown.starts_with("crates/fatkit-run/") {
            continue;
        }
        for (n, line) in code_lines(&code) {
            if !line.contains("Command::new(") || line.contains("MetadataCommand::new(") {
                continue;
            }
            // Each call on the line is one listed for this file.
            let known = line.match_indices("Command::new(").all(|(at, _)| {
                PROGRAMS
                    .iter()
                    .any(|(file, fragment, _)| *file == shown && line[at..].starts_with(fragment))
            });
            if !known {
                out.push(format!("{shown}:{n}: {}", line.trim()));
            }
        }
    }
    out
}

#[test]
fn no_program_is_named_by_an_input() {
    let found = unreviewed_programs(&root());
    assert!(
        found.is_empty(),
        "library code starts a program this test has not reviewed; a program may come from the user (an option, the environment), a toolchain fatkit provisions or a name fatkit knows, never from an input; add it to PROGRAMS with where its name comes from:\n{}",
        found.join("\n")
    );
}

#[test]
fn an_unreviewed_program_is_caught() {
    let dir = std::env::temp_dir().join(format!("fatkit-tidy-program-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("crates/fatkit-audit/src")).unwrap();
    std::fs::write(
        dir.join("crates/fatkit-audit/src/local.rs"),
        "pub fn f(p: &str) { let _ = Command::new(program); let _ = Command::new(p); }\n",
    )
    .unwrap();
    assert_eq!(
        unreviewed_programs(&dir),
        ["crates/fatkit-audit/src/local.rs:1: pub fn f(p: &str) { let _ = Command::new(program); let _ = Command::new(p); }"]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
