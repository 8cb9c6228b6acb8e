//! `cargo xtask bench shared-cache`: two checkouts of a real kernel crate (candle-kernels
//! 0.9.1 from crates.io) at different paths, each with its own fatkit cache and sccache
//! daemon, sharing one redis server on 127.0.0.1: the first cold build fills redis, the second
//! is served from it. Prints both times, sccache's hits and misses, and whether every cubin
//! of the second is the first's.

use std::path::Path;
use std::process::{Child, Command};
use std::time::Instant;

use fatkit_cli::{Error, Outcome, Result};
use fatkit_toolchain as toolchain;

use crate::real_crates::{fatbins_in, fetch, unpack, workspace, CRATES};

/// One checkout's cold build: seconds, and sccache's hits and misses.
struct Build {
    seconds: f64,
    hits: String,
    misses: String,
}

pub fn run(profile: &str) -> Result<Outcome> {
    let cache = toolchain::cache_dir().map_err(Error::from)?;
    toolchain::provision(toolchain::DEFAULT_CUDA, &mut |l| {
        eprintln!("toolchain: {l}")
    })
    .map_err(Error::from)?;
    let sccache =
        toolchain::provision_sccache(&mut |l| eprintln!("toolchain: {l}")).map_err(Error::from)?;
    let krate = CRATES
        .iter()
        .find(|c| c.version == "0.9.1")
        .ok_or_else(|| {
            crate::harness::failed("candle-kernels 0.9.1 is not in the list".to_owned())
        })?;
    let store = cache.join("corpus/crates");
    std::fs::create_dir_all(&store)?;
    let scratch = crate::harness::workspace_root().join("target/bench-shared-cache");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let redis = Redis::start(&scratch)?;
    let file = fetch(krate.name, krate.version, &store)?;
    unpack(&file, &scratch)?;
    let unpacked = scratch.join(format!("{}-{}", krate.name, krate.version));
    let checkouts = [scratch.join("alice"), scratch.join("ci/builds/42")];
    let mut workspaces = Vec::new();
    for dir in &checkouts {
        std::fs::create_dir_all(dir)?;
        workspaces.push(workspace(krate, &unpacked, dir, profile)?);
    }
    let mut builds = Vec::new();
    for (i, ws) in workspaces.iter().enumerate() {
        eprintln!(
            "bench: checkout {} of {}: cold build-kernels --launcher sccache",
            i + 1,
            ws.display()
        );
        builds.push(cold_build(ws, profile, &sccache, redis.port)?);
    }
    drop(redis);
    // Every cubin of the second checkout is the first's.
    let [first_ws, second_ws] = workspaces.as_slice() else {
        return Err(crate::harness::failed("two checkouts expected".to_owned()));
    };
    let (a, b) = (cubins(first_ws)?, cubins(second_ws)?);
    let same = a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| x.1 == y.1);
    println!(
        "{} {} for profile {profile}: two checkouts sharing one redis through sccache",
        krate.name, krate.version
    );
    for (i, (build, dir)) in builds.iter().zip(&checkouts).enumerate() {
        println!(
            "  build {} ({}): {:.1}s; sccache hits {}, misses {}",
            i + 1,
            dir.display(),
            build.seconds,
            build.hits,
            build.misses
        );
    }
    if let [first, second] = builds.as_slice() {
        println!(
            "  second build {:.1}x faster than the first (target >= 3x)",
            first.seconds / second.seconds
        );
    }
    println!(
        "  {} cubins; the second checkout's are the first's byte for byte: {}",
        a.len(),
        if same { "yes" } else { "NO" }
    );
    Ok(if same { Outcome::Ok } else { Outcome::Finding })
}

/// A redis server on a free port of 127.0.0.1, nothing saved, its files in `dir`; stopped
/// when dropped, so a failed run leaves no server behind.
struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    fn start(dir: &Path) -> Result<Redis> {
        let program = Path::new("/usr/bin/redis-server");
        if !program.is_file() {
            return Err(crate::harness::failed(
                "no /usr/bin/redis-server; `bash .ci/install-debian-servers` installs it"
                    .to_owned(),
            ));
        }
        let port = crate::harness::free_port()?;
        let child = Command::new(program)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .spawn()?;
        let redis = Redis { child, port };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(redis);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Err(crate::harness::failed(
            "redis-server did not start".to_owned(),
        ))
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `build-kernels --launcher sccache` of the workspace `ws` with its own empty fatkit cache
/// and its own sccache daemon, whose cache is the redis server on `port`.
fn cold_build(ws: &Path, profile: &str, sccache: &Path, port: u16) -> Result<Build> {
    let server = crate::harness::SccacheServer::new(
        sccache,
        ws,
        &[(
            "SCCACHE_REDIS_ENDPOINT",
            format!("redis://127.0.0.1:{port}"),
        )],
    )?;
    let start = Instant::now();
    let out = server
        .env(
            Command::new(std::env::current_exe()?)
                .args([
                    "build-kernels",
                    "--profile",
                    profile,
                    "--offline",
                    "--manifest-path",
                ])
                .arg(ws.join("Cargo.toml"))
                .arg("--cache-dir")
                .arg(ws.join("fatkit-cache"))
                .arg("--launcher")
                .arg(sccache),
        )
        .output()?;
    let seconds = start.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(crate::harness::failed(format!(
            "build-kernels in {} failed:\n{}{}",
            ws.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(Build {
        seconds,
        hits: server.counts("cache_hits")?,
        misses: server.counts("cache_misses")?,
    })
}

/// Every cubin of the workspace's modules, by file and target, in file order.
fn cubins(ws: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let limits = fatkit_fatbin::Limits::default();
    let mut found = Vec::new();
    for path in fatbins_in(&ws.join("kern/kernels/prebuilt"))? {
        let bytes = std::fs::read(&path)?;
        let c = fatkit_fatbin::Container::parse(&bytes, fatkit_fatbin::Strictness::AnyKind)
            .map_err(|e| crate::harness::failed(format!("{}: {e}", path.display())))?;
        for e in c.entries() {
            if e.target()
                .is_some_and(|t| t.kind == fatkit_arch::ImageKind::Cubin)
            {
                let image = e
                    .image(&limits)
                    .map_err(|e| crate::harness::failed(e.to_string()))?;
                found.push((
                    format!("{} {:?}", path.display(), e.target()),
                    image.into_owned(),
                ));
            }
        }
    }
    Ok(found)
}
