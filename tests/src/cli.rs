//! The one driver of the command line the tests run: in this process (the library the `fatkit`
//! binary runs: fast, and what most tests want), or as a process of the tests' own binary
//! (`fatkit-e2e`), where the test needs an environment variable set for it alone.

use std::path::Path;
use std::process::Command;

/// One run of the command line: its exit code and what it printed.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub out: String,
    pub err: String,
}

impl Run {
    /// Exit code, stdout and stderr.
    pub fn parts(self) -> (i32, String, String) {
        (self.code, self.out, self.err)
    }

    /// Exit code and what a terminal shows: stdout, then stderr.
    pub fn text(self) -> (i32, String) {
        (self.code, format!("{}{}", self.out, self.err))
    }

    /// Exit code and stdout alone (a `--json` run's document).
    pub fn out(self) -> (i32, String) {
        (self.code, self.out)
    }
}

/// `fatkit ARGS`, in this process.
pub fn fatkit<S: AsRef<str>>(args: &[S]) -> Run {
    let (code, out, err) = crate::fatkit_in_process(args);
    Run {
        code: i32::from(code),
        out,
        err,
    }
}

/// `fatkit audit ARGS`, in this process.
pub fn audit<S: AsRef<str>>(args: &[S]) -> Run {
    let all: Vec<&str> = std::iter::once("audit")
        .chain(args.iter().map(AsRef::as_ref))
        .collect();
    fatkit(&all)
}

/// `fatkit audit FILE --gpu GPU` (`--json` when `json`), in this process.
pub fn audit_on(file: &Path, gpu: &str, json: bool) -> Run {
    let mut args = vec!["audit", file.to_str().unwrap_or_default(), "--gpu", gpu];
    if json {
        args.push("--json");
    }
    fatkit(&args)
}

/// `fatkit ARGS` as a process of `program` (the tests' `fatkit-e2e`), with `env` set for it.
pub fn process(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(program);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    match cmd.output() {
        Ok(out) => Run {
            code: out.status.code().unwrap_or(-1),
            out: String::from_utf8_lossy(&out.stdout).into_owned(),
            err: String::from_utf8_lossy(&out.stderr).into_owned(),
        },
        Err(e) => Run {
            code: -1,
            out: String::new(),
            err: format!("{}: could not start: {e}", program.display()),
        },
    }
}
