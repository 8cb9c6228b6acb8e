//! `cargo xtask bench hostile`: every hostile shape the adversarial rounds found
//! (`fatkit_fuzz::hostile::SHAPES`) at large scales, each audited by the whole release
//! `fatkit audit` command at three sizes doubling each time: wall time (the least of two runs)
//! and peak memory (`/usr/bin/time`), its answer (exit 0 yes, 1 a finding, 2 UNKNOWN: over budget or
//! unreadable), and how each grows over 4x the input. The growth test
//! (`tests/tests/growth.rs`) runs the same shapes small in CI; this is the table the README
//! shows. A shape whose time or memory grows more than 8x over 4x the input is a finding.
//! The shapes that drive a build (`BUILD_SHAPES`: NVRTC's header discovery) run the whole
//! `fatkit build-kernels` the same way, each size in a fresh project and cache.

use std::path::Path;
use std::time::Duration;

use fatkit_cli::{Outcome, Result};

use crate::harness::{fatkit_binary, whole_status};

/// Over 4x the input, linear work takes about 4x: more than this is a finding.
const MAX_RATIO: f64 = 8.0;

fn size_of(path: &Path) -> u64 {
    if path.is_dir() {
        std::fs::read_dir(path).map_or(0, |d| d.flatten().map(|e| size_of(&e.path())).sum())
    } else {
        std::fs::metadata(path).map_or(0, |m| m.len())
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 20) as f64)
}

pub(crate) fn run(only: &[String]) -> Result<Outcome> {
    let fatkit = fatkit_binary()?;
    let dir = std::env::temp_dir().join(format!("fatkit-bench-hostile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "| shape | n | input MiB | seconds | peak MiB | exit | time x (4x input) | memory x (4x input) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut findings = Vec::new();
    let audits = fatkit_fuzz::hostile::SHAPES.iter().map(|s| (s, false));
    let builds = fatkit_fuzz::hostile::BUILD_SHAPES.iter().map(|s| (s, true));
    for (shape, builds) in audits.chain(builds) {
        if !only.is_empty() && !only.iter().any(|o| o == shape.name) {
            continue;
        }
        let mut rows: Vec<(usize, u64, Duration, u64, Option<i32>)> = Vec::new();
        for scale in [1, 2, 4] {
            let n = shape.large * scale;
            let case = dir.join(format!("{}-{n}", shape.name));
            let path = (shape.make)(n, &case);
            let mut words: Vec<String> = match builds {
                true => fatkit_fuzz::hostile::build_args(&path),
                false => vec!["audit".to_owned(), path.display().to_string()],
            };
            words.extend(shape.args.iter().map(|a| (*a).to_owned()));
            let args: Vec<&std::ffi::OsStr> = words.iter().map(std::ffi::OsStr::new).collect();
            let (t1, p1, code) = whole_status(&fatkit, &args)?;
            // A build's second run would be its cache's: it starts from nothing again.
            if builds {
                let _ = std::fs::remove_dir_all(path.join("cache"));
                let _ = std::fs::remove_dir_all(path.join("out"));
            }
            let (t2, p2, _) = whole_status(&fatkit, &args)?;
            let peak = p1.unwrap_or(0).max(p2.unwrap_or(0)) * 1024;
            rows.push((n, size_of(&path), t1.min(t2), peak, code));
            let _ = std::fs::remove_dir_all(&case);
        }
        let (Some(&first), Some(&last)) = (rows.first(), rows.last()) else {
            continue;
        };
        let time_x = last.2.as_secs_f64() / first.2.as_secs_f64().max(0.01);
        let mem_x = last.3 as f64 / first.3.max(1) as f64;
        for (i, (n, bytes, took, peak, code)) in rows.iter().enumerate() {
            let (tx, mx) = if i == 2 {
                (format!("{time_x:.1}"), format!("{mem_x:.1}"))
            } else {
                (String::new(), String::new())
            };
            let answer = match code {
                Some(0) => "yes",
                Some(1) => "finding",
                Some(2) => "UNKNOWN",
                _ => "?",
            };
            println!(
                "| {} | {n} | {} | {:.3} | {} | {answer} | {tx} | {mx} |",
                if i == 0 { shape.name } else { "" },
                mib(*bytes),
                took.as_secs_f64(),
                mib(*peak),
            );
        }
        if time_x > MAX_RATIO || mem_x > MAX_RATIO {
            findings.push(format!(
                "{}: 4x the input took {time_x:.1}x the time and {mem_x:.1}x the memory (before: {})",
                shape.name, shape.finding
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!();
    println!("before (the adversarial round's measurements):");
    for shape in fatkit_fuzz::hostile::SHAPES
        .iter()
        .chain(fatkit_fuzz::hostile::BUILD_SHAPES)
    {
        println!("  {}: {}", shape.name, shape.finding);
    }
    if findings.is_empty() {
        println!("every shape grows linearly (at most {MAX_RATIO}x over 4x the input)");
        Ok(Outcome::Ok)
    } else {
        for f in &findings {
            println!("superlinear: {f}");
        }
        Ok(Outcome::Finding)
    }
}
