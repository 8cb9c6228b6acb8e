//! What the benchmark tiers share: the repository root, the fatkit binary they time, the
//! timing of a whole command with its peak memory, a free port and an sccache server on it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fatkit_cli::{Error, Outcome, Result};

/// A port free on 127.0.0.1 now.
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A bench's own sccache server: a free port, an empty client configuration in `dir` (nothing
/// of this machine's sccache set-up leaks in), no idle exit, and `extra`. The first job of the
/// build run under [`SccacheServer::env`] starts it, as a user's first job does; it is stopped
/// when dropped, so a failed run leaves no server behind.
pub struct SccacheServer {
    sccache: PathBuf,
    vars: Vec<(String, String)>,
}

impl SccacheServer {
    pub fn new(sccache: &Path, dir: &Path, extra: &[(&str, String)]) -> Result<SccacheServer> {
        let conf = dir.join("sccache-client.toml");
        std::fs::write(&conf, "")?;
        let mut vars: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        vars.extend([
            ("SCCACHE_SERVER_PORT".to_owned(), free_port()?.to_string()),
            ("SCCACHE_CONF".to_owned(), conf.display().to_string()),
            ("SCCACHE_IDLE_TIMEOUT".to_owned(), "0".to_owned()),
        ]);
        Ok(SccacheServer {
            sccache: sccache.to_owned(),
            vars,
        })
    }

    /// `cmd` talking to this server, with no launcher or base directories of the caller's.
    pub fn env<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        cmd.envs(self.vars.iter().map(|(k, v)| (k, v)))
            .env_remove("FATKIT_LAUNCHER")
            .env_remove("SCCACHE_BASEDIRS")
    }

    /// `sccache --show-stats`'s `counts` of `what` (`cache_hits`, `cache_misses`), as JSON text.
    pub fn counts(&self, what: &str) -> Result<String> {
        let out = self
            .env(Command::new(&self.sccache).args(["--show-stats", "--stats-format", "json"]))
            .output()?;
        let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        Ok(stats
            .get("stats")
            .and_then(|s| s.get(what))
            .and_then(|w| w.get("counts"))
            .map_or_else(|| "?".to_owned(), ToString::to_string))
    }
}

impl Drop for SccacheServer {
    fn drop(&mut self) {
        let _ = self
            .env(Command::new(&self.sccache).arg("--stop-server"))
            .output();
    }
}

/// The release `fatkit` binary, built now so that the whole command is what is timed.
pub(crate) fn fatkit_binary() -> Result<PathBuf> {
    let sh = shell(&workspace_root())?;
    let cargo = cargo();
    let ok = xshell::cmd!(
        sh,
        "{cargo} build --quiet --release -p fatkit-cli --bin fatkit"
    )
    .run()
    .is_ok();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from);
    let bin = target.join("release/fatkit");
    if !ok || !bin.is_file() {
        return Err(crate::harness::failed(
            "cannot build the release fatkit binary".to_owned(),
        ));
    }
    Ok(bin)
}

/// The value at `pointer` in `v` (`/files/0/answer`), null where there is none.
pub(crate) fn at<'v>(v: &'v serde_json::Value, pointer: &str) -> &'v serde_json::Value {
    v.pointer(pointer).unwrap_or(&serde_json::Value::Null)
}

/// The string at `pointer` in `v`, `""` where there is none.
pub(crate) fn text_at<'v>(v: &'v serde_json::Value, pointer: &str) -> &'v str {
    at(v, pointer).as_str().unwrap_or_default()
}

/// Wall time and peak memory (KiB, from `/usr/bin/time` where it exists) of a command whose
/// output goes to /dev/null.
pub(crate) fn whole(program: &Path, args: &[&std::ffi::OsStr]) -> Result<(Duration, Option<u64>)> {
    whole_status(program, args).map(|(took, peak, _)| (took, peak))
}

/// [`whole`], and the command's exit code (GNU time exits with its command's).
pub(crate) fn whole_status(
    program: &Path,
    args: &[&std::ffi::OsStr],
) -> Result<(Duration, Option<u64>, Option<i32>)> {
    let time = Path::new("/usr/bin/time");
    let mut cmd = if time.is_file() {
        let mut c = Command::new(time);
        c.args(["-f", "%M"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    cmd.args(args).stdout(std::process::Stdio::null());
    let start = Instant::now();
    let out = cmd.output()?;
    let took = start.elapsed();
    let peak = String::from_utf8_lossy(&out.stderr)
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .filter(|_| time.is_file());
    Ok((took, peak, out.status.code()))
}

/// The workspace root: the parent of this crate's directory.
pub(crate) fn workspace_root() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    dir.parent().unwrap_or(dir).to_owned()
}

/// A shell (xshell) in `dir` for xtask's scripted commands: each echoed as it runs, a failure
/// an error naming the command and its status.
pub(crate) fn shell(dir: &Path) -> Result<xshell::Shell> {
    let sh = xshell::Shell::new().map_err(shell_error)?;
    sh.change_dir(dir);
    Ok(sh)
}

/// An xshell error (the command and how it failed) as the CLI's.
pub(crate) fn shell_error(e: xshell::Error) -> Error {
    crate::harness::failed(e.to_string())
}

/// `cargo`: the one running this xtask.
pub(crate) fn cargo() -> std::ffi::OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// The middle of `xs` (the upper one of two).
pub(crate) fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs.get(xs.len() / 2).copied().unwrap_or_default()
}

/// Times and sizes of a debug build mean nothing: where this xtask is one, the same command
/// run again optimised (`cargo run --release -p xtask -- ARGS`), its outcome; else `None`.
pub(crate) fn rerun_optimised() -> Option<Result<Outcome>> {
    if !cfg!(debug_assertions) {
        return None;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let status = Command::new(cargo())
        .args(["run", "--quiet", "--release", "--package", "xtask", "--"])
        .args(&args)
        .status();
    Some(status.map_err(Into::into).map(|s| {
        if s.success() {
            Outcome::Ok
        } else {
            Outcome::Finding
        }
    }))
}

/// Why an xtask command failed, as it words it.
#[derive(Debug)]
pub struct Failed(pub String);

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failed {}

/// An xtask command's failure, as fatkit's command line reports errors (exit 2).
pub fn failed(message: impl Into<String>) -> fatkit_cli::Error {
    fatkit_cli::Error::Other(Box::new(Failed(message.into())))
}

/// What a failed build said: fatkit's error, else the tail.
pub(crate) fn error_of(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.contains("error occurred in fatkit_build"))
        .unwrap_or(lines.len().saturating_sub(30));
    let rest = lines.get(start..).unwrap_or_default();
    // The first lines (what failed, the compiler's first errors) and the fix.
    let mut out: Vec<&str> = rest.iter().take(12).map(|l| l.trim()).collect();
    out.extend(
        rest.iter()
            .skip(12)
            .map(|l| l.trim())
            .filter(|l| l.starts_with("fix:")),
    );
    out.join("\n")
}
