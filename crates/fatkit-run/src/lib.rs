//! The one way fatkit spawns a tool (nvcc, pip, cargo, nvidia-smi, gcc, objcopy, Python) and
//! reports it: every run has a time limit and keeps its output; a failure is typed
//! ([`ToolStatus`]) and names the whole command line, the end of its output and what to do,
//! as cc-rs does for the compilers it runs. No other library code spawns a process (the tidy
//! test `every_spawn_goes_through_the_one_runner`).

mod groups;
pub use groups::{kill_all, stop_on_signals};

use std::io::Read;
use std::path::Path;
use std::process::{Command, ExitStatus, Output};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// A tool that could not be started or failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{command}` failed ({status}); {hint}\n{output}")]
pub struct ToolError {
    /// The command line, shell-quoted.
    pub command: String,
    /// How it failed.
    pub status: ToolStatus,
    /// The last lines of its output (stdout, then stderr), or why it could not start.
    pub output: String,
    /// What to do about it.
    pub hint: String,
}

/// How a tool run failed, as data; its words are the `Display`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolStatus {
    /// No such program.
    NotFound,
    /// It exists but could not be started (permissions, not an executable, out of processes).
    CouldNotStart,
    /// Killed at its time limit.
    TimedOut(Duration),
    /// It exited with this status (non-zero, or killed by a signal).
    Exited(ExitStatus),
    /// It exited 0, but what it installed is not all there.
    IncompleteInstall,
    /// It exited 0, but its output is not what fatkit reads.
    UnrecognisedOutput,
    /// It exited 0, but reports another version than the one asked for.
    UnexpectedVersion,
}

impl std::fmt::Display for ToolStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolStatus::NotFound | ToolStatus::CouldNotStart => f.write_str("could not start"),
            ToolStatus::TimedOut(limit) => write!(f, "timed out after {} s", limit.as_secs()),
            ToolStatus::Exited(status) => write!(f, "{status}"),
            ToolStatus::IncompleteInstall => f.write_str("incomplete install"),
            ToolStatus::UnrecognisedOutput => f.write_str("unrecognised output"),
            ToolStatus::UnexpectedVersion => f.write_str("unexpected version"),
        }
    }
}

/// How a tool runs: its time limit, whether it leads a process group of its own (killed
/// whole at the limit: a compiler and the tools it starts), and whether its stderr is shown
/// as it runs (a long `cargo build`) rather than kept.
#[derive(Clone, Copy, Debug)]
pub struct How {
    pub limit: Duration,
    pub own_group: bool,
    pub show_stderr: bool,
}

impl How {
    /// A question to a tool (`--version`, `nvidia-smi`, `rustc -vV`, a Python one-liner).
    pub const QUERY: How = How {
        limit: Duration::from_secs(120),
        own_group: false,
        show_stderr: false,
    };
    /// A tool doing a job (objcopy, ar, a probe compile): minutes at most.
    pub const JOB: How = How {
        limit: Duration::from_secs(15 * 60),
        own_group: true,
        show_stderr: false,
    };
    /// An install or a build of many crates (pip, `cargo install`, `cargo build`).
    pub const INSTALL: How = How {
        limit: Duration::from_secs(2 * 60 * 60),
        own_group: false,
        show_stderr: false,
    };
}

/// `program arg 'arg with space' ...`, for messages and for a person to paste into a shell.
pub(crate) fn command_line(program: &Path, args: &[String]) -> String {
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

/// Whether a shell reads `s` literally (and nvcc, which runs its steps through `sh -c` and
/// quotes nothing): ASCII letters, digits and `_ @ % + = : , . / -`, nothing else (no space,
/// quote, `$`, backquote, glob, brace, redirection or separator), and not empty. The one rule:
/// fatkit-package's flag allowlist and the command lines here both use it.
pub fn shell_safe(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_@%+=:,./-".contains(&b))
}

/// The characters [`shell_safe`] accepts, for messages.
pub const SAFE_CHARACTERS: &str = "ASCII letters, digits and _ @ % + = : , . / -";

/// `s` as a shell reads it back: as it is where every character is literal to a shell
/// ([`shell_safe`], the one rule), else in single quotes.
fn quote(s: &str) -> String {
    if shell_safe(s) {
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

/// Runs `cmd` as [`How::INSTALL`] and returns its output as text, or a [`ToolError`] carrying
/// `hint` when it cannot start, runs past the limit or exits non-zero.
pub fn run(cmd: &mut Command, hint: &str) -> Result<String, ToolError> {
    run_with(cmd, How::INSTALL, hint).map(|out| text_of(&out))
}

/// Runs `cmd` as `how` says: its whole output when it exits 0, else a [`ToolError`] with the
/// last 20 lines of its output and `hint`.
pub fn run_with(cmd: &mut Command, how: How, hint: &str) -> Result<Output, ToolError> {
    let out = output_of(cmd, how, hint)?;
    if !out.status.success() {
        return Err(ToolError {
            command: line_of(cmd),
            status: ToolStatus::Exited(out.status),
            output: tail(&text_of(&out), 20),
            hint: hint.to_owned(),
        });
    }
    Ok(out)
}

/// Runs `cmd` as `how` says and returns its output whatever its exit status (the caller reads
/// the status: a compiler's errors are its answer); a [`ToolError`] when it cannot start or
/// runs past the limit.
pub fn output_of(cmd: &mut Command, how: How, hint: &str) -> Result<Output, ToolError> {
    let command = line_of(cmd);
    let error = |status, output| ToolError {
        command: command.clone(),
        status,
        output,
        hint: hint.to_owned(),
    };
    match wait_within(cmd, how) {
        Ok((out, false)) => Ok(out),
        Ok((out, true)) => Err(error(
            ToolStatus::TimedOut(how.limit),
            tail(&text_of(&out), 20),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(error(ToolStatus::NotFound, e.to_string()))
        }
        Err(e) => Err(error(ToolStatus::CouldNotStart, e.to_string())),
    }
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let tail: Vec<&str> = text.lines().rev().take(n).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// Runs `cmd` with no input (stdin is `/dev/null`: a source that includes `/dev/stdin` reads
/// nothing instead of waiting on the terminal) and at most `limit`: past it the whole process
/// group (nvcc and its cicc, ptxas, gcc) is killed. `Ok((output, timed_out))`.
///
/// The exit is seen within a few milliseconds: the threads reading the child's output say when
/// its pipes close (at its exit, for a compiler), and only then does the wait poll in short
/// steps. Polling every 50 ms alone cost a build of 72 half-second jobs about a second of its
/// 15 (`cargo xtask bench build`).
pub fn output_within(cmd: &mut Command, limit: Duration) -> std::io::Result<(Output, bool)> {
    wait_within(
        cmd,
        How {
            limit,
            own_group: true,
            show_stderr: false,
        },
    )
}

/// How long the output of a tool that has exited is waited for: what it wrote is in the pipe
/// already; a process it started and left running may hold the pipe open for good.
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// [`output_within`] as `how` says.
fn wait_within(cmd: &mut Command, how: How) -> std::io::Result<(Output, bool)> {
    use std::process::Stdio;
    let limit = how.limit;
    let stderr = if how.show_stderr {
        Stdio::inherit()
    } else {
        Stdio::piped()
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr);
    // A group of its own is registered while it lives: a signal to fatkit kills it.
    let mut child = match how.own_group {
        true => groups::spawn_registered(cmd)?,
        false => cmd.spawn()?,
    };
    let try_wait = |child: &mut std::process::Child| match how.own_group {
        true => groups::try_wait(child),
        false => child.try_wait(),
    };
    let mut pipes = Pipes::of(&mut child);
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = try_wait(&mut child)? {
            break status;
        }
        let elapsed = start.elapsed();
        if elapsed >= limit {
            timed_out = true;
            if how.own_group {
                break groups::kill_and_wait(&mut child)?;
            }
            let _ = child.kill();
            break child.wait()?;
        }
        let step = pause.min(limit - elapsed);
        // Woken as soon as a pipe closes; a process that closes its output and runs on (or
        // leaves it to a daemon it started) is polled as before.
        if pipes.wait_for_one(step) {
            pause = Duration::from_millis(1);
            continue;
        }
        pause = (pause * 2).min(Duration::from_millis(50));
    };
    let (stdout, stderr) = pipes.output();
    Ok((
        Output {
            status,
            stdout,
            stderr,
        },
        timed_out,
    ))
}

/// A child's stdout and stderr, each read on a thread of its own into a buffer shared with
/// the waiting thread, so that what was read is kept even where a process the tool started
/// holds the pipe open after the tool's exit.
struct Pipes {
    stdout: Option<Arc<Mutex<Vec<u8>>>>,
    stderr: Option<Arc<Mutex<Vec<u8>>>>,
    open: usize,
    closed: mpsc::Receiver<()>,
}

impl Pipes {
    fn of(child: &mut std::process::Child) -> Pipes {
        let (closed_tx, closed) = mpsc::channel::<()>();
        let mut open = 0;
        let mut drain = |pipe: Option<Box<dyn Read + Send>>| {
            let mut pipe = pipe?;
            open += 1;
            let tell = closed_tx.clone();
            let kept = Arc::new(Mutex::new(Vec::new()));
            let shared = Arc::clone(&kept);
            std::thread::spawn(move || {
                let mut chunk = vec![0u8; 64 * 1024];
                while let Ok(n @ 1..) = pipe.read(&mut chunk) {
                    if let (Ok(mut kept), Some(read)) = (shared.lock(), chunk.get(..n)) {
                        kept.extend_from_slice(read);
                    }
                }
                let _ = tell.send(());
            });
            Some(kept)
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
        Pipes {
            stdout,
            stderr,
            open,
            closed,
        }
    }

    /// Waits at most `step` for a pipe to close (at once when none is open): whether one did.
    fn wait_for_one(&mut self, step: Duration) -> bool {
        if self.open == 0 {
            std::thread::sleep(step);
            return false;
        }
        match self.closed.recv_timeout(step) {
            Ok(()) => {
                self.open -= 1;
                true
            }
            Err(mpsc::RecvTimeoutError::Timeout) => false,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                self.open = 0;
                false
            }
        }
    }

    /// What was read, once the tool has exited: what is left in the pipes comes at once; a
    /// process the tool left behind that holds them open is not waited for past
    /// [`PIPE_GRACE`] (its thread ends when it does).
    fn output(self) -> (Vec<u8>, Vec<u8>) {
        let grace = Instant::now() + PIPE_GRACE;
        let mut open = self.open;
        while open > 0 {
            let left = grace.saturating_duration_since(Instant::now());
            match self.closed.recv_timeout(left) {
                Ok(()) => open -= 1,
                Err(_) => break,
            }
        }
        let taken = |kept: Option<Arc<Mutex<Vec<u8>>>>| {
            kept.and_then(|k| k.lock().ok().map(|mut k| std::mem::take(&mut *k)))
                .unwrap_or_default()
        };
        (taken(self.stdout), taken(self.stderr))
    }
}

/// The first line `program --version` prints, if it runs.
pub fn version_line(program: &Path) -> Option<String> {
    run_with(Command::new(program).arg("--version"), How::QUERY, "")
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_owned)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(err.status.to_string(), "exit status: 3");
        assert!(matches!(err.status, ToolStatus::Exited(s) if s.code() == Some(3)));
        assert_eq!(err.output, "out\nerr");
        let err = run(&mut Command::new("/nonexistent/tool"), "install it").unwrap_err();
        assert_eq!(err.status, ToolStatus::NotFound);
        assert_eq!(err.status.to_string(), "could not start");
        let quick = How {
            limit: Duration::from_millis(300),
            ..How::QUERY
        };
        let err = run_with(
            Command::new("sh").args(["-c", "echo started; sleep 30"]),
            quick,
            "",
        )
        .unwrap_err();
        assert_eq!(
            (err.status, err.output.as_str()),
            (ToolStatus::TimedOut(quick.limit), "started")
        );
        // A tool that exits leaving a process that holds its output open: its output, and
        // no wait for that process (a daemon lives on; a build must not).
        let start = std::time::Instant::now();
        let out = run_with(
            Command::new("sh").args(["-c", "sleep 600 & echo $!; exit 0"]),
            How::QUERY,
            "",
        )
        .unwrap();
        let pid = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let _ = Command::new("kill").arg(&pid).status();
        assert!(pid.parse::<u32>().is_ok(), "{pid:?}");
        assert!(start.elapsed() < Duration::from_secs(300));
    }
}
