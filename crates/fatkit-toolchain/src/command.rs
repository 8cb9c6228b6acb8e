//! The one way fatkit spawns a tool (nvcc, pip, cargo, nvidia-smi, gcc) and reports it: a
//! failure names the whole command line, its exit status, the end of its output and what to
//! do, as cc-rs does for the compilers it runs.

use std::path::Path;
use std::process::{Command, Output};

/// A tool that could not be started or failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{command}` failed ({status}); {hint}\n{output}")]
pub struct ToolError {
    /// The command line, shell-quoted.
    pub command: String,
    /// `exit status: 1`, `could not start`.
    pub status: String,
    /// The last lines of its output (stdout, then stderr).
    pub output: String,
    /// What to do about it.
    pub hint: String,
}

/// `program arg 'arg with space' ...`, for messages and for a person to paste into a shell.
pub fn command_line(program: &Path, args: &[String]) -> String {
    std::iter::once(quote(&program.display().to_string()))
        .chain(args.iter().map(|a| quote(a)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The command line of a `Command`.
pub fn line_of(cmd: &Command) -> String {
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    command_line(Path::new(cmd.get_program()), &args)
}

/// `s` as a shell reads it back: as it is where every character is literal to a shell
/// ([`fatkit_package::flags::shell_safe`], the one rule), else in single quotes.
fn quote(s: &str) -> String {
    if fatkit_package::flags::shell_safe(s) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// stdout then stderr, as text.
pub fn text_of(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs `cmd` to completion and returns its output, or a [`ToolError`] carrying `hint` when
/// it cannot start or exits non-zero (with the last 20 lines of its output).
pub fn run(cmd: &mut Command, hint: &str) -> Result<String, ToolError> {
    let command = line_of(cmd);
    let out = cmd.output().map_err(|e| ToolError {
        command: command.clone(),
        status: "could not start".to_owned(),
        output: e.to_string(),
        hint: hint.to_owned(),
    })?;
    let text = text_of(&out);
    if !out.status.success() {
        let tail: Vec<&str> = text.lines().rev().take(20).collect();
        return Err(ToolError {
            command,
            status: out.status.to_string(),
            output: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            hint: hint.to_owned(),
        });
    }
    Ok(text)
}

/// Runs `cmd` with no input (stdin is `/dev/null`: a source that includes `/dev/stdin` reads
/// nothing instead of waiting on the terminal) and at most `limit`: past it the whole process
/// group (nvcc and its cicc, ptxas, gcc) is killed. `Ok((output, timed_out))`.
///
/// The exit is seen within a few milliseconds: the threads reading the child's output say when
/// its pipes close (at its exit, for a compiler), and only then does the wait poll in short
/// steps. Polling every 50 ms alone cost a build of 72 half-second jobs about a second of its
/// 15 (`cargo xtask bench build`).
pub fn output_within(
    cmd: &mut Command,
    limit: std::time::Duration,
) -> std::io::Result<(Output, bool)> {
    use std::io::Read;
    use std::process::Stdio;
    use std::sync::mpsc;
    use std::time::Duration;
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(cmd, 0);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let (closed_tx, closed_rx) = mpsc::channel::<()>();
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        let closed = closed_tx.clone();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            let _ = closed.send(());
            bytes
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    drop(closed_tx);
    let start = std::time::Instant::now();
    let mut pause = Duration::from_millis(1);
    let mut open_pipes = 2;
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        let elapsed = start.elapsed();
        if elapsed >= limit {
            timed_out = true;
            kill_group(&mut child);
            break child.wait()?;
        }
        let step = pause.min(limit - elapsed);
        if open_pipes > 0 {
            // Woken as soon as a pipe closes; a process that closes its output and runs on
            // (or leaves it to a daemon it started) is polled as before.
            match closed_rx.recv_timeout(step) {
                Ok(()) => {
                    open_pipes -= 1;
                    pause = Duration::from_millis(1);
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => open_pipes = 0,
            }
        } else {
            std::thread::sleep(step);
        }
        pause = (pause * 2).min(Duration::from_millis(50));
    };
    let output = Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
    Ok((output, timed_out))
}

/// Kills `child` and every process of its group (it leads one: `process_group(0)`).
fn kill_group(child: &mut std::process::Child) {
    #[cfg(unix)]
    {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", child.id())])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
    let _ = child.kill();
}

/// The first line `program --version` prints, if it runs.
pub fn version_line(program: &Path) -> Option<String> {
    Command::new(program)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_owned)
        })
}

/// The first program called `name` in a `PATH` directory: a file that may be run, as a
/// shell looks for it (a file without execute permission is passed over).
pub fn on_path(name: &str) -> Option<std::path::PathBuf> {
    on_path_in(name, &std::env::var_os("PATH")?)
}

/// [`on_path`] over the directories of `path` (the `which` crate's search: a regular file the
/// user may execute; a relative directory is taken from the current one, as a shell does).
fn on_path_in(name: &str, path: &std::ffi::OsStr) -> Option<std::path::PathBuf> {
    let cwd = std::env::current_dir().unwrap_or_default();
    which::which_in(name, Some(path), cwd).ok()
}

/// Whether this runs in CI (`CI` set to anything but empty, `false` or `0`): there progress
/// stays plain and a missing toolchain fails a test instead of skipping it.
pub fn is_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_file_on_path_that_cannot_be_run_is_passed_over() {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!("fatkit-on-path-{}", std::process::id()));
        let (plain, runnable) = (root.join("a"), root.join("b"));
        for dir in [&plain, &runnable] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("tool"), "#!/bin/sh\n").unwrap();
        }
        std::fs::set_permissions(plain.join("tool"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        std::fs::set_permissions(
            runnable.join("tool"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let path = std::env::join_paths([&plain, &runnable]).unwrap();
        assert_eq!(on_path_in("tool", &path), Some(runnable.join("tool")));
        assert_eq!(on_path_in("absent", &path), None);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn output_within_sees_the_exit_whether_or_not_the_output_closes_first() {
        let limit = std::time::Duration::from_secs(60);
        let (out, timed_out) = output_within(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            limit,
        )
        .unwrap();
        assert_eq!(
            (
                out.status.code(),
                timed_out,
                &out.stdout[..],
                &out.stderr[..]
            ),
            (Some(3), false, &b"out\n"[..], &b"err\n"[..])
        );
        // Both pipes closed long before the exit: the wait goes on polling.
        let (out, timed_out) = output_within(
            Command::new("sh").args(["-c", "echo gone; exec >&- 2>&-; sleep 0.3; exit 4"]),
            limit,
        )
        .unwrap();
        assert_eq!((out.status.code(), timed_out), (Some(4), false));
        assert_eq!(out.stdout, b"gone\n");
        // Past the limit, killed, with its pipes closed or not.
        for script in ["sleep 30", "exec >&- 2>&-; sleep 30"] {
            let (out, timed_out) = output_within(
                Command::new("sh").args(["-c", script]),
                std::time::Duration::from_millis(300),
            )
            .unwrap();
            assert!(timed_out && !out.status.success(), "{script}");
        }
    }

    #[test]
    fn quoting() {
        let args = [
            "-gencode".to_owned(),
            "arch=compute_80,code=[sm_80]".to_owned(),
            "it's".to_owned(),
            String::new(),
        ];
        assert_eq!(
            command_line(Path::new("/cuda/bin/nvcc"), &args),
            r"/cuda/bin/nvcc -gencode 'arch=compute_80,code=[sm_80]' 'it'\''s' ''"
        );
        // Issue 41: `$(...)` was quoted and a backquote was not. Every character a shell reads
        // is quoted, by the one rule (`shell_safe`).
        for arg in [
            "`id`", "$(id)", "a;b", "a\nb", "{a,b}", "~x", "a\\b", "<x", "a#",
        ] {
            let line = command_line(Path::new("nvcc"), &[arg.to_owned()]);
            assert!(line.starts_with("nvcc '") && line.ends_with('\''), "{line}");
        }
    }

    #[test]
    fn failures_name_the_command_and_status() {
        let err = run(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            "fix it",
        )
        .unwrap_err();
        assert_eq!(err.command, "sh -c 'echo out; echo err >&2; exit 3'");
        assert_eq!(err.status, "exit status: 3");
        assert_eq!(err.output, "out\nerr");
        let err = run(&mut Command::new("/nonexistent/tool"), "install it").unwrap_err();
        assert_eq!(err.status, "could not start");
    }
}
