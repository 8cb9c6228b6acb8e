//! Server tier: `build-kernels --launcher` with real servers on 127.0.0.1, started and stopped
//! here. A launcher that exits 0 without its output; two checkouts at different paths, with
//! their own fatkit caches and sccache daemons, sharing one redis; an sccache-dist scheduler
//! and build server, killed halfway through a build.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fatkit_tests::{
    debian_program, fatkit_in_process, free_port, repo_root, sccache, temp_dir, toolchain, Server,
};

/// The profile of the server tests: three cubins and one PTX.
const TEAM_PROFILE: &str = "targets = [\"sm_75\", \"sm_80\", \"sm_90\"]\nptx = [\"compute_90\"]\n";
const CUBINS_PER_SOURCE: usize = 3;

/// A checkout of a project at `dir`: the repository's own `cuda-src/` (seven real sources,
/// two with local headers) and `arch-profiles/team.toml`.
fn checkout(dir: &Path) -> usize {
    let src = repo_root().join("cuda-src");
    copy_dir(&src, &dir.join("cuda-src"));
    std::fs::create_dir_all(dir.join("arch-profiles")).unwrap();
    std::fs::write(dir.join("arch-profiles/team.toml"), TEAM_PROFILE).unwrap();
    fatkit_build::pipeline::sources_in(&dir.join("cuda-src"))
        .unwrap()
        .len()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let dest = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &dest);
        } else {
            std::fs::copy(&path, &dest).unwrap();
        }
    }
}

/// `fatkit build-kernels` of a checkout, as its own process (so that the sccache daemon its
/// first job may start gets the environment a user's would), with `launcher` and `env`.
fn build_command(dir: &Path, launcher: Option<&Path>, env: &[(String, String)]) -> Command {
    build_command_to(dir, "", launcher, env)
}

/// As [`build_command`], writing to `out<tag>` with the fatkit cache `fatkit-cache<tag>`.
fn build_command_to(
    dir: &Path,
    tag: &str,
    launcher: Option<&Path>,
    env: &[(String, String)],
) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fatkit-e2e"));
    cmd.current_dir(dir)
        .args([
            "build-kernels",
            "--profile",
            "team",
            "--offline",
            "--src",
            "cuda-src",
            "--message-format",
            "json",
        ])
        .arg("--out")
        .arg(format!("out{tag}"))
        .arg("--cache-dir")
        .arg(format!("fatkit-cache{tag}"))
        .env_remove("FATKIT_LAUNCHER")
        .env_remove("SCCACHE_BASEDIRS");
    if let Some(l) = launcher {
        cmd.arg("--launcher").arg(l);
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    cmd
}

/// Runs a build to the end: the report (`build_finished`) and the wall time. Panics with the
/// output if it fails.
fn build(
    dir: &Path,
    launcher: Option<&Path>,
    env: &[(String, String)],
) -> (serde_json::Value, f64) {
    build_to(dir, "", launcher, env)
}

fn build_to(
    dir: &Path,
    tag: &str,
    launcher: Option<&Path>,
    env: &[(String, String)],
) -> (serde_json::Value, f64) {
    let start = Instant::now();
    let out = build_command_to(dir, tag, launcher, env).output().unwrap();
    let seconds = start.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "build in {} failed ({}):\n{stdout}{}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (finished(&stdout), seconds)
}

fn finished(stdout: &str) -> serde_json::Value {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "build_finished")
        .unwrap_or_else(|| panic!("no build_finished event in:\n{stdout}"))
}

/// Every image of every fatbin a build wrote: `module target` -> its size and hash (a diff of
/// two builds then names the module and target that differ).
fn images(out: &Path) -> BTreeMap<String, String> {
    let limits = fatkit_fatbin::Limits::default();
    let mut found = BTreeMap::new();
    for (name, bytes) in fatbins(out) {
        let container =
            fatkit_fatbin::Container::parse(&bytes, fatkit_fatbin::Strictness::AnyKind).unwrap();
        for e in container.entries() {
            let image = e.image(&limits).unwrap();
            let mut hasher = std::hash::DefaultHasher::new();
            std::hash::Hash::hash(&image[..], &mut hasher);
            found.insert(
                format!("{name} {}", e.target().unwrap()),
                format!(
                    "{} bytes, {:016x}",
                    image.len(),
                    std::hash::Hasher::finish(&hasher)
                ),
            );
        }
    }
    found
}

/// Every fatbin a build wrote, by file name.
fn fatbins(out: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut found = BTreeMap::new();
    for entry in std::fs::read_dir(out).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "fatbin") {
            found.insert(
                path.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&path).unwrap(),
            );
        }
    }
    assert!(!found.is_empty(), "no fatbins in {}", out.display());
    found
}

/// One sccache daemon: its own port and environment; stopped when dropped.
struct Daemon {
    sccache: PathBuf,
    env: Vec<(String, String)>,
}

impl Daemon {
    /// A daemon whose configuration is `env` (plus its port, no idle exit and an empty
    /// client configuration file, so that nothing of this machine's sccache set-up leaks in).
    /// Not started: the build's first job starts it, as a user's would.
    fn new(sccache: &Path, dir: &Path, mut env: Vec<(String, String)>) -> Daemon {
        let conf = dir.join("sccache-client.toml");
        if !conf.exists() {
            std::fs::write(&conf, "").unwrap();
        }
        env.push(("SCCACHE_SERVER_PORT".into(), free_port().to_string()));
        env.push(("SCCACHE_IDLE_TIMEOUT".into(), "0".into()));
        env.push(("SCCACHE_CONF".into(), conf.display().to_string()));
        env.push((
            "SCCACHE_ERROR_LOG".into(),
            dir.join("sccache.log").display().to_string(),
        ));
        Daemon {
            sccache: sccache.to_owned(),
            env,
        }
    }

    /// Waits until the scheduler this daemon's client configuration names has a build server
    /// (it registers a moment after it listens).
    fn wait_for_build_server(&self) {
        let mut last = String::new();
        for _ in 0..300 {
            let out = Command::new(&self.sccache)
                .arg("--dist-status")
                .envs(self.env.iter().map(|(k, v)| (k, v)))
                .output()
                .unwrap();
            last = String::from_utf8_lossy(&out.stdout).into_owned();
            if last.contains("\"num_servers\":1") {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("no build server registered with the scheduler in 30 s: {last}");
    }

    /// `sccache --show-stats` as JSON: the `stats` object.
    fn stats(&self) -> serde_json::Value {
        let out = Command::new(&self.sccache)
            .args(["--show-stats", "--stats-format", "json"])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "sccache --show-stats: {e}:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        v["stats"].clone()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new(&self.sccache)
            .arg("--stop-server")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A count in sccache's stats: `cache_misses`/`cache_hits` by kind (`CUBIN`, `PTX`).
fn count(stats: &serde_json::Value, what: &str, kind: &str) -> u64 {
    stats[what]["counts"][kind].as_u64().unwrap_or(0)
}

/// Distributed compiles, summed over build servers.
fn dist_compiles(stats: &serde_json::Value) -> u64 {
    stats["dist_compiles"]
        .as_object()
        .map_or(0, |m| m.values().filter_map(|v| v.as_u64()).sum())
}

#[test]
fn a_launcher_that_exits_0_without_its_output_fails_the_job() {
    let Some(_tc) = toolchain() else { return };
    let dir = temp_dir("launcher-silent");
    checkout(&dir);
    let launcher = dir.join("do-nothing");
    std::fs::write(&launcher, "#!/bin/sh\nexit 0\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = build_command(&dir, Some(&launcher), &[]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Exit 1: compile failures are findings; every cubin job names the launcher and itself.
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let report = finished(&stdout);
    let failures = report["failures"].as_array().unwrap();
    let sources = fatkit_build::pipeline::sources_in(&dir.join("cuda-src"))
        .unwrap()
        .len();
    assert_eq!(failures.len(), sources * CUBINS_PER_SOURCE, "{stdout}");
    let f = failures
        .iter()
        .find(|f| f["source"].as_str().unwrap().ends_with("saxpy.cu") && f["target"] == "sm_80")
        .unwrap_or_else(|| panic!("no saxpy.cu sm_80 failure:\n{stdout}"));
    let message = f["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "the launcher {} (--launcher: {}) exited 0 but wrote no ",
            launcher.display(),
            launcher.display()
        )),
        "{message}"
    );
    assert!(message.contains("out.cubin"), "{message}");
    assert!(message.contains("leave out --launcher"), "{message}");
    assert_eq!(f["status"], "exited 0 without its output");
    assert!(
        f["command"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{} ", launcher.display())),
        "{f}"
    );
    // PTX stays local, so the PTX jobs succeeded; no module was written.
    assert!(!dir.join("out/saxpy.fatbin").exists());
    // The human form names the job and the launcher too.
    let (code, text, _) = fatkit_in_process(&[
        "build-kernels",
        "--profile",
        &dir.join("arch-profiles/team.toml").display().to_string(),
        "--offline",
        "--src",
        &dir.join("cuda-src").display().to_string(),
        "--out",
        &dir.join("out").display().to_string(),
        "--cache-dir",
        &dir.join("fatkit-cache").display().to_string(),
        "--launcher",
        &launcher.display().to_string(),
    ]);
    assert_eq!(code, 1, "{text}");
    let line = format!("saxpy.cu: sm_80: {} + nvcc", launcher.display());
    assert!(text.contains(&line), "no {line:?} in:\n{text}");
}

#[test]
fn a_launcher_not_found_is_refused_before_anything_compiles() {
    let dir = temp_dir("launcher-missing");
    checkout(&dir);
    let out = build_command(
        &dir,
        None,
        &[("FATKIT_LAUNCHER".into(), "no-such-launcher-xyz".into())],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("launcher 'no-such-launcher-xyz' (FATKIT_LAUNCHER): not found on PATH or in fatkit's cache; give its path, or unset FATKIT_LAUNCHER"),
        "{stderr}"
    );
    assert!(!dir.join("fatkit-cache").join("objects").exists());
}

#[test]
fn two_checkouts_share_compiles_through_one_redis() {
    let (Some(tc), Some(sccache), Some(redis)) = (
        toolchain(),
        sccache(),
        debian_program("redis-server", "redis-server", ".ci/install-debian-servers"),
    ) else {
        return;
    };
    let root = temp_dir("launcher-redis");
    let port = free_port();
    let _redis = Server::start(
        "redis-server",
        Command::new(redis)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(&root),
        port,
        &root.join("redis.log"),
    );
    let endpoint = (
        "SCCACHE_REDIS_ENDPOINT".to_owned(),
        format!("redis://127.0.0.1:{port}"),
    );
    // Two checkouts at different depths, each with its own fatkit cache and sccache daemon.
    let a = root.join("alice/project");
    let b = root.join("ci/builds/42/project");
    let sources = checkout(&a);
    checkout(&b);
    let cubin_jobs = (sources * CUBINS_PER_SOURCE) as u64;

    let daemon_a = Daemon::new(&sccache, &root.join("alice"), vec![endpoint.clone()]);
    let (first, first_s) = build(&a, Some(&sccache), &daemon_a.env);
    let stats_a = daemon_a.stats();
    assert_eq!(first["jobs_failed"], 0);
    assert_eq!(
        count(&stats_a, "cache_misses", "CUBIN"),
        cubin_jobs,
        "{stats_a}"
    );

    let daemon_b = Daemon::new(&sccache, &root.join("ci"), vec![endpoint]);
    let (second, second_s) = build(&b, Some(&sccache), &daemon_b.env);
    let stats_b = daemon_b.stats();
    eprintln!(
        "first build {first_s:.2}s, second (other checkout, cold fatkit cache, warm redis) {second_s:.2}s: {:.1}x; sccache hits {}, misses {}",
        first_s / second_s,
        stats_b["cache_hits"]["counts"],
        stats_b["cache_misses"]["counts"]
    );
    // Every job ran again as far as fatkit knows (its cache is cold), and sccache served every
    // cubin job, both its steps, from redis.
    let launcher = second["launcher"].as_str().unwrap_or_default();
    assert!(
        launcher.starts_with("sccache 0.19.0 (--launcher: "),
        "{second}"
    );
    assert_eq!(second["jobs_cached"], 0);
    assert_eq!(second["jobs_run"], first["jobs_run"]);
    assert_eq!(count(&stats_b, "cache_misses", "CUBIN"), 0, "{stats_b}");
    assert_eq!(count(&stats_b, "cache_misses", "PTX"), 0, "{stats_b}");
    assert_eq!(
        count(&stats_b, "cache_hits", "CUBIN"),
        cubin_jobs,
        "{stats_b}"
    );
    // Every image is the first build's, byte for byte: the cubins sccache served, and the PTX
    // each checkout compiled locally, though nvcc names cluster_sum.cu's internal symbols after
    // a hash of the source's path (fatkit gives cicc the path relative to the project root).
    let (images_a, images_b) = (images(&a.join("out")), images(&b.join("out")));
    let differ: Vec<&String> = images_a
        .keys()
        .filter(|k| images_a.get(*k) != images_b.get(*k))
        .collect();
    assert!(differ.is_empty(), "{differ:?}");
    let nvcc = |dir: &Path| {
        let out = dir.join("plain.fatbin");
        fatkit_tests::run(
            dir,
            &tc.nvcc(),
            &[
                "--fatbin",
                "-gencode",
                "arch=compute_90,code=compute_90",
                "-Icuda-src",
                "-o",
                out.to_str().unwrap(),
                "cuda-src/cluster_sum.cu",
            ],
        );
        std::fs::read(out).unwrap()
    };
    assert_ne!(
        nvcc(&a),
        nvcc(&b),
        "plain nvcc made the same PTX in both checkouts"
    );
    let fatbins_b = fatbins(&b.join("out"));
    for (name, bytes) in fatbins(&a.join("out")) {
        assert!(fatbins_b.get(&name) == Some(&bytes), "{name} differs");
    }
}

/// An sccache-dist cluster on 127.0.0.1: a scheduler and one `overlay` build server (root and
/// bubblewrap), with token authentication.
struct Cluster {
    scheduler: Server,
    server: Server,
    client_conf: PathBuf,
}

fn cluster(sccache: &Path, bwrap: &Path, dir: &Path) -> Cluster {
    let dist = sccache.with_file_name("sccache-dist");
    let auth = |args: &[&str]| -> String {
        let out = Command::new(&dist).arg("auth").args(args).output().unwrap();
        assert!(out.status.success(), "sccache-dist auth {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let key = auth(&["generate-jwt-hs256-key"]);
    let (scheduler_port, server_port) = (free_port(), free_port());
    let server_addr = format!("127.0.0.1:{server_port}");
    // `--secret-key=KEY`, one argument: a base64url key may start with `-`, which as a second
    // argument the parser takes for a flag (one CI run in about sixty-four).
    let token = auth(&[
        "generate-jwt-hs256-server-token",
        &format!("--secret-key={key}"),
        "--server",
        &server_addr,
    ]);
    let scheduler_url = format!("http://127.0.0.1:{scheduler_port}");
    std::fs::write(
        dir.join("scheduler.conf"),
        format!("public_addr = \"127.0.0.1:{scheduler_port}\"\n[client_auth]\ntype = \"token\"\ntoken = \"fatkit-test-client\"\n[server_auth]\ntype = \"jwt_hs256\"\nsecret_key = \"{key}\"\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("server.conf"),
        format!(
            "cache_dir = \"{}\"\npublic_addr = \"{server_addr}\"\nscheduler_url = \"{scheduler_url}\"\n[builder]\ntype = \"overlay\"\nbuild_dir = \"{}\"\nbwrap_path = \"{}\"\n[scheduler_auth]\ntype = \"jwt_token\"\ntoken = \"{token}\"\n",
            dir.join("server-toolchains").display(),
            dir.join("server-build").display(),
            bwrap.display()
        ),
    )
    .unwrap();
    let client_conf = dir.join("sccache-client.toml");
    std::fs::write(
        &client_conf,
        format!(
            "[dist]\nscheduler_url = \"{scheduler_url}\"\ntoolchains = []\ncache_dir = \"{}\"\n[dist.auth]\ntype = \"token\"\ntoken = \"fatkit-test-client\"\n",
            dir.join("client-toolchains").display()
        ),
    )
    .unwrap();
    let scheduler = Server::start(
        "sccache-dist scheduler",
        Command::new(&dist)
            .args(["scheduler", "--config"])
            .arg(dir.join("scheduler.conf"))
            .env("SCCACHE_NO_DAEMON", "1"),
        scheduler_port,
        &dir.join("scheduler.log"),
    );
    let server = Server::start(
        "sccache-dist server",
        Command::new(&dist)
            .args(["server", "--config"])
            .arg(dir.join("server.conf"))
            .env("SCCACHE_NO_DAEMON", "1"),
        server_port,
        &dir.join("server.log"),
    );
    Cluster {
        scheduler,
        server,
        client_conf,
    }
}

#[test]
fn sccache_dist_builds_the_same_bytes_and_survives_its_build_server_dying() {
    let (Some(_tc), Some(sccache), Some(bwrap)) = (
        toolchain(),
        sccache(),
        debian_program("bwrap", "bubblewrap", ".ci/install-debian-servers"),
    ) else {
        return;
    };
    let root = temp_dir("launcher-dist");
    let mut cluster = cluster(&sccache, &bwrap, &root);
    // One checkout (nvcc's output depends on where the source is: see the redis test), built
    // three times, each with its own fatkit cache: locally, through sccache-dist, and through
    // sccache-dist while its build server dies.
    let dir = root.join("project");
    checkout(&dir);
    std::fs::copy(&cluster.client_conf, dir.join("sccache-client.toml")).unwrap();
    build_to(&dir, "-local", None, &[]);
    let expected = images(&dir.join("out-local"));
    // A client whose own cache is empty sends the cicc and ptxas steps out.
    let client = |name: &str| {
        Daemon::new(
            &sccache,
            &dir,
            vec![("SCCACHE_DIR".into(), root.join(name).display().to_string())],
        )
    };
    let daemon = client("sccache-first");
    daemon.wait_for_build_server();
    let (_, seconds) = build_to(&dir, "-dist", Some(&sccache), &daemon.env);
    let stats = daemon.stats();
    let distributed = dist_compiles(&stats);
    eprintln!(
        "sccache-dist build {seconds:.2}s: {distributed} distributed compiles, {} errors",
        stats["dist_errors"]
    );
    assert!(distributed > 0, "no distributed compiles: {stats}");
    assert_eq!(images(&dir.join("out-dist")), expected);
    drop(daemon);

    // The build server dies once the build has sent it work: sccache compiles the rest here.
    let daemon = client("sccache-second");
    daemon.wait_for_build_server();
    let mut child = build_command_to(&dir, "-killed", Some(&sccache), &daemon.env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    while dist_compiles(&daemon.stats()) == 0 {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "the build ended before any compile was distributed: {}\n{}",
                daemon.stats(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(Instant::now() < deadline, "nothing distributed in 300 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    cluster.server.kill();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the build failed when its build server died ({}):\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stats = daemon.stats();
    eprintln!(
        "build server killed mid-build: {} compiles distributed, {} distributed compiles failed and ran here; build exit 0",
        dist_compiles(&stats),
        stats["dist_errors"]
    );
    assert_eq!(finished(&stdout)["jobs_failed"], 0);
    assert_eq!(images(&dir.join("out-killed")), expected);
    drop(cluster.scheduler);
}
