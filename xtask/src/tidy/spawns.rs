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
