//! `cargo xtask bench lock`: a real lock judged before install (issue 57). vLLM 0.33.0 for
//! Linux x86_64 and CPython 3.12, resolved by pip against PyPI (`requirements.txt`), and the
//! same resolution as a `pylock.toml` (made from pip's installation report, as `pip lock`
//! writes one), each gated on an RTX 5090, a T4 and an H100: cold (an empty wheel store and
//! readings cache: pip's resolution, the download and the reading of every wheel), with the
//! wheels stored but no readings (the reading alone), and warm (readings kept). Times and peak
//! memory; the checks: every run of one lock gives one answer, and the pylock's answer is the
//! requirements file's.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use fatkit_cli::{Outcome, Result};

use crate::harness::{at, failed, fatkit_binary};

const GPUS: [&str; 3] = ["RTX 5090", "T4", "H100"];

/// One run: its wall time, peak memory (KiB), exit code and output.
struct Run {
    took: Duration,
    peak: Option<u64>,
    code: Option<i32>,
    out: String,
}

/// `fatkit audit LOCK --gpu ...` with its cache in `cache`.
fn audit(fatkit: &Path, cache: &Path, lock: &Path) -> Result<Run> {
    let time = Path::new("/usr/bin/time");
    let mut cmd = if time.is_file() {
        let mut c = Command::new(time);
        c.args(["-f", "%M"]).arg(fatkit);
        c
    } else {
        Command::new(fatkit)
    };
    cmd.arg("audit").arg(lock).env("FATKIT_CACHE_DIR", cache);
    for g in GPUS {
        cmd.args(["--gpu", g]);
    }
    let start = Instant::now();
    let out = cmd.output()?;
    let took = start.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    Ok(Run {
        took,
        peak: err.lines().last().and_then(|l| l.trim().parse().ok()),
        code: out.status.code(),
        out: String::from_utf8_lossy(&out.stdout).into_owned(),
    })
}

/// A `pylock.toml` of what pip's installation report `report` installs.
fn pylock_of(report: &Path, into: &Path) -> Result<()> {
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(report)?)
        .map_err(|e| failed(format!("pip's report: {e}")))?;
    let mut text =
        String::from("lock-version = \"1.0\"\ncreated-by = \"cargo xtask bench lock\"\n");
    for item in at(&report, "/install").as_array().into_iter().flatten() {
        let (name, version) = (at(item, "/metadata/name"), at(item, "/metadata/version"));
        let url = at(item, "/download_info/url");
        let sha = at(item, "/download_info/archive_info/hashes/sha256");
        text.push_str(&format!(
            "\n[[packages]]\nname = {name}\nversion = {version}\nwheels = [{{ url = {url}, hashes = {{ sha256 = {sha} }} }}]\n"
        ));
    }
    std::fs::write(into, text)?;
    Ok(())
}

/// The first line of each GPU's answer, for the table.
fn headlines(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| !l.starts_with(' ') && (l.contains(" on ") || l.contains("GPU x library")))
        .map(|l| l.chars().take(150).collect())
        .collect()
}

/// The table of runs, the cold run's headlines and the store's size.
fn print_rows(rows: &[(String, Run)], cache: &Path) {
    println!(
        "{:<55} {:>9} {:>10} {:>5}",
        "vLLM 0.33.0 on RTX 5090, T4, H100", "wall s", "peak MiB", "exit"
    );
    for (name, r) in rows {
        let peak = r
            .peak
            .map_or_else(|| "-".to_owned(), |k| (k / 1024).to_string());
        let code = r.code.map_or_else(|| "-".to_owned(), |c| c.to_string());
        println!(
            "{name:<55} {:>9.2} {peak:>10} {code:>5}",
            r.took.as_secs_f64()
        );
    }
    let first = &rows.first().map(|(_, r)| r.out.clone()).unwrap_or_default();
    for line in headlines(first) {
        println!("  {line}");
    }
    let wheels = std::fs::read_dir(cache.join("wheels/sha256")).map_or(0, |d| d.count());
    println!("{wheels} wheels in the store");
}

pub fn run() -> Result<Outcome> {
    let fatkit = fatkit_binary()?;
    let root = fatkit_toolchain::cache_dir()?.join("bench/lock");
    let cache = root.join("cache");
    std::fs::create_dir_all(&root)?;
    let requirements = root.join("requirements.txt");
    std::fs::write(&requirements, "vllm==0.33.0\n")?;
    // The report pip writes of the same resolution, for the pylock.
    let report = root.join("report.json");
    let settings = fatkit_lock::Settings::new(None);
    let bytes = fatkit_lock::pip::report(&requirements, &settings)
        .map_err(|e| failed(format!("{e} (no network?)")))?;
    std::fs::write(&report, bytes)?;
    let pylock = root.join("pylock.toml");
    pylock_of(&report, &pylock)?;
    let readings = cache.join("readings");
    let mut rows: Vec<(String, Run)> = Vec::new();
    let _ = std::fs::remove_dir_all(&cache);
    rows.push((
        "requirements.txt, cold (resolve, download, read)".into(),
        audit(&fatkit, &cache, &requirements)?,
    ));
    let _ = std::fs::remove_dir_all(&readings);
    rows.push((
        "requirements.txt, wheels stored (resolve, read)".into(),
        audit(&fatkit, &cache, &requirements)?,
    ));
    rows.push((
        "requirements.txt, warm (resolve, readings)".into(),
        audit(&fatkit, &cache, &requirements)?,
    ));
    let _ = std::fs::remove_dir_all(&readings);
    rows.push((
        "pylock.toml, wheels stored (read)".into(),
        audit(&fatkit, &cache, &pylock)?,
    ));
    for n in 1..=3 {
        rows.push((
            format!("pylock.toml, warm (readings), run {n}"),
            audit(&fatkit, &cache, &pylock)?,
        ));
    }
    print_rows(&rows, &cache);
    // Every run of one lock says the same; the pylock says what the requirements file says
    // (its first line names the lock).
    let body = |r: &Run| r.out.lines().skip(1).collect::<Vec<_>>().join("\n");
    let cold = rows.first().map(|(_, r)| body(r)).unwrap_or_default();
    let bad: Vec<&String> = rows
        .iter()
        .filter(|(_, r)| body(r) != cold)
        .map(|(name, _)| name)
        .collect();
    if !bad.is_empty() {
        return Err(failed(format!(
            "answers differ from the cold run's: {bad:?} (outputs under {})",
            root.display()
        )));
    }
    Ok(Outcome::Ok)
}
