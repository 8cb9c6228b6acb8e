//! The process groups a build started, so that the build dies with its jobs: every tool run in
//! a group of its own (`How::own_group`: a compiler and the tools it starts) is registered
//! here while it lives, and [`stop_on_signals`] (installed by the command line) makes SIGINT
//! and SIGTERM kill every registered group before the process exits (130, 143). A group is
//! registered as it is spawned and removed as its leader is reaped, both under one lock that
//! the killer takes too: no group is started after the kill, and none is missed by it.
#![allow(unsafe_code)]

use std::collections::BTreeSet;
use std::process::{Child, Command, ExitStatus};
use std::sync::Mutex;

/// The live groups (their leaders' ids), and whether the process is stopping.
static GROUPS: Mutex<(BTreeSet<u32>, bool)> = Mutex::new((BTreeSet::new(), false));

fn groups() -> std::sync::MutexGuard<'static, (BTreeSet<u32>, bool)> {
    GROUPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Spawns `cmd` as the leader of a new process group and registers it; refused once the
/// process is stopping.
pub(crate) fn spawn_registered(cmd: &mut Command) -> std::io::Result<Child> {
    std::os::unix::process::CommandExt::process_group(cmd, 0);
    let mut live = groups();
    if live.1 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::Interrupted,
            "the build is stopping (a signal); nothing more is started",
        ));
    }
    let child = cmd.spawn()?;
    live.0.insert(child.id());
    Ok(child)
}

/// `child.try_wait()`, unregistering its group once it is reaped (under the lock, so that a
/// kill never reaches a group id the system may give out again).
pub(crate) fn try_wait(child: &mut Child) -> std::io::Result<Option<ExitStatus>> {
    let mut live = groups();
    let res = child.try_wait();
    if !matches!(res, Ok(None)) {
        live.0.remove(&child.id());
    }
    res
}

/// Kills `child`'s whole group and reaps it (unregistered first: once reaped, its id may be
/// given to another process).
pub(crate) fn kill_and_wait(child: &mut Child) -> std::io::Result<ExitStatus> {
    kill_group(child.id());
    let _ = child.kill();
    groups().0.remove(&child.id());
    child.wait()
}

fn kill_group(leader: u32) {
    if let Ok(pgid) = libc::pid_t::try_from(leader) {
        // SAFETY: kill(2) with a negative id signals that process group; no memory is shared.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}

/// Kills every registered group and stops any more from starting. Returns how many.
pub fn kill_all() -> usize {
    let mut live = groups();
    live.1 = true;
    for &leader in &live.0 {
        kill_group(leader);
    }
    live.0.len()
}

/// The write end of the pipe the signal handler writes the signal's number to.
static SIGNAL_PIPE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

extern "C" fn on_signal(signal: libc::c_int) {
    let fd = SIGNAL_PIPE.load(std::sync::atomic::Ordering::Relaxed);
    let byte = u8::try_from(signal).unwrap_or(0);
    // SAFETY: write(2) is async-signal-safe; the buffer is a local byte.
    unsafe {
        libc::write(fd, std::ptr::addr_of!(byte).cast(), 1);
    }
}

/// Makes SIGINT and SIGTERM stop the process with its jobs: a watcher thread, woken through a
/// pipe by the handler (which only writes a byte), kills every registered process group
/// ([`kill_all`]) and exits with 128 + the signal's number. Installed once; later calls do
/// nothing.
pub fn stop_on_signals() -> std::io::Result<()> {
    static INSTALLED: Mutex<bool> = Mutex::new(false);
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    if *installed {
        return Ok(());
    }
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let [read_end, write_end] = fds;
    SIGNAL_PIPE.store(write_end, std::sync::atomic::Ordering::Relaxed);
    std::thread::Builder::new()
        .name("fatkit-signals".to_owned())
        .spawn(move || {
            let mut byte = 0u8;
            // SAFETY: reads one byte into a local from the pipe this thread owns.
            let n = unsafe { libc::read(read_end, std::ptr::addr_of_mut!(byte).cast(), 1) };
            if n == 1 {
                kill_all();
                std::process::exit(128 + i32::from(byte));
            }
        })?;
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid; the handler is an `extern "C" fn(c_int)` that
        // only calls write(2).
        let res = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if res != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    *installed = true;
    Ok(())
}
