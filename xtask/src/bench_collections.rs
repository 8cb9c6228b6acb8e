//! `cargo xtask bench collections`: inputs of thousands of files, fetched at run time into the
//! cache (never into the repository), answered on one screen (issue 44).
//!
//! - FlashInfer's `flashinfer-cubin` 0.6.13 from PyPI: 15,970 standalone cubins, each for one
//!   GPU family. On an RTX 5090 (CC 12.0) it holds none: at most 60 lines, exit 1, the headline
//!   "NO ... holds nothing for this GPU" and no "install a build made for sm_120". On a B200
//!   (CC 10.0): at most 60 lines, exit 0, the files built for other GPUs (sm_103a) named
//!   beside the answer. Each headline's counts are checked against `--json`'s libraries, and
//!   a sample of the cubins' targets against cuobjdump's.
//! - The same wheel installed by pip into a container image (umoci, then skopeo's `docker
//!   save` archive): the same answer as the wheel, and `audit image.tar` timed against what a
//!   user would do without it, unpacking the image (umoci) and auditing the directory.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use fatkit_cli::{Error, Outcome, Result};
use fatkit_toolchain as toolchain;

use crate::bench_env::{audit, check, fetch, print_checks, Check};
use crate::harness::fatkit_binary;

const WHEEL: &str = "flashinfer_cubin-0.6.13-py3-none-any.whl";

pub fn run() -> Result<Outcome> {
    let corpus = toolchain::cache_dir().map_err(Error::from)?.join("corpus");
    let dir = corpus.join("collections");
    fetch(
        "flashinfer-cubin==0.6.13",
        false,
        &dir,
        "flashinfer_cubin-0.6.13",
    )?;
    let wheel = dir.join(WHEEL);
    let fatkit = fatkit_binary()?;
    let mut checks = Vec::new();
    let counts = json_counts(&fatkit, &wheel)?;
    println!(
        "== {WHEEL}: {} libraries: {}",
        counts.values().sum::<usize>(),
        counts
            .iter()
            .map(|(t, n)| format!("{n} for {t}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    one_screen(&fatkit, &wheel, &counts, &mut checks)?;
    against_cuobjdump(&wheel, &dir, &mut checks)?;
    image(&fatkit, &wheel, &dir, &mut checks)?;
    let failed = print_checks(&checks);
    Ok(match failed {
        0 => Outcome::Ok,
        _ => Outcome::Finding,
    })
}

/// Libraries per target set (`sm_100`), from `audit --json`.
fn json_counts(fatkit: &Path, input: &Path) -> Result<BTreeMap<String, usize>> {
    let (_, json) = audit(fatkit, &[&input.to_string_lossy(), "--json"])?;
    let v: serde_json::Value = serde_json::from_str(&json)
        .map_err(|e| crate::harness::failed(format!("bench collections: audit --json: {e}")))?;
    let mut counts = BTreeMap::new();
    let list = |v: &serde_json::Value, key: &str| -> Vec<serde_json::Value> {
        v.get(key)
            .and_then(|x| x.as_array())
            .cloned()
            .unwrap_or_default()
    };
    for file in list(&v, "files") {
        for l in list(&file, "libraries") {
            let targets: Vec<String> = ["cubins", "ptx"]
                .iter()
                .flat_map(|k| list(&l, k))
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect();
            *counts.entry(targets.join(" ")).or_default() += 1;
        }
    }
    Ok(counts)
}

fn one_screen(
    fatkit: &Path,
    wheel: &Path,
    counts: &BTreeMap<String, usize>,
    checks: &mut Vec<Check>,
) -> Result<()> {
    let total: usize = counts.values().sum();
    for (gpu, code_wanted, word) in [
        ("RTX 5090", 1, "NO on GeForce RTX 5090"),
        ("B200", 0, "yes on B200"),
    ] {
        let out = Command::new(fatkit)
            .args(["audit", &wheel.to_string_lossy(), "--gpu", gpu])
            .output()?;
        let code = out.status.code().unwrap_or(-1);
        let text = String::from_utf8_lossy(&out.stdout);
        let lines = text.lines().count();
        let first = text.lines().next().unwrap_or_default();
        println!("\n== {WHEEL} on {gpu} ({lines} lines, exit {code})\n{text}");
        let named = |what: &str| format!("{WHEEL} on {gpu}: {what}");
        check(
            checks,
            &named("at most 60 lines"),
            lines <= 60,
            format!("{lines} lines"),
        );
        check(
            checks,
            &named(&format!("exit {code_wanted}")),
            code == code_wanted,
            format!("exit {code}"),
        );
        check(
            checks,
            &named(&format!("headline \"{word}\"")),
            first.contains(word),
            first,
        );
        check(
            checks,
            &named(&format!("headline counts its {total} libraries")),
            first.contains(&format!("in {total} libraries")),
            first,
        );
        check(
            checks,
            &named("no \"install a build made for\" it"),
            !text.contains("made for sm_120") && !text.contains("made for sm_100"),
            "",
        );
        // Every set of files built alike is one line with its count, as --json counts them.
        for (targets, n) in counts {
            let line = text
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{n} libraries like")))
                .unwrap_or_default();
            check(
                checks,
                &named(&format!("one line for the {n} files built for {targets}")),
                !line.is_empty(),
                line.trim(),
            );
        }
        if gpu == "RTX 5090" {
            let listed = counts
                .iter()
                .all(|(t, n)| first.contains(&format!("{n} for {t}")));
            check(
                checks,
                &named("headline: it holds nothing for this GPU, and what it holds"),
                first.contains("holds nothing for this GPU") && listed,
                first,
            );
        } else {
            let other: usize = counts
                .iter()
                .filter(|(t, _)| t.contains("sm_103a"))
                .map(|(_, n)| n)
                .sum();
            check(
                checks,
                &named("the sm_103a files are for other GPUs"),
                other > 0
                    && text.contains(&format!("{other} libraries like"))
                    && text.contains("for other GPUs"),
                "",
            );
        }
    }
    Ok(())
}

/// A sample of the cubins (every 200th): the target fatkit reads equals the one `cuobjdump
/// --list-elf` names.
fn against_cuobjdump(wheel: &Path, dir: &Path, checks: &mut Vec<Check>) -> Result<()> {
    let tc = toolchain::find_default().map_err(Error::from)?;
    let Some(cuobjdump) = tc.as_ref().and_then(|t| t.cuobjdump()) else {
        check(
            checks,
            "cuobjdump found (provision CUDA: cargo xtask build-kernels)",
            false,
            "",
        );
        return Ok(());
    };
    let unpacked = dir.join("flashinfer-cubin-unpacked");
    if !unpacked.is_dir() {
        let ok = Command::new("python3")
            .args(["-m", "zipfile", "-e"])
            .arg(wheel)
            .arg(&unpacked)
            .status()?
            .success();
        if !ok {
            return Err(crate::harness::failed(
                "bench collections: cannot unpack the wheel".to_owned(),
            ));
        }
    }
    let mut files = Vec::new();
    collect(&unpacked, &mut files)?;
    files.sort();
    let (mut same, mut differ) = (0, Vec::new());
    for f in files.iter().step_by(200) {
        let data = fatkit_cli::audit::read_file(f)?;
        let report = fatkit_fatbin::inspect::inspect(
            "bench",
            &data,
            fatkit_fatbin::inspect::Depth::Headers,
            &fatkit_fatbin::Limits::default(),
        );
        let ours: Vec<String> = report
            .images
            .iter()
            .filter_map(|i| i.image.target.map(|t| t.to_string()))
            .collect();
        let out = Command::new(&cuobjdump).arg("--list-elf").arg(f).output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        // `ELF file    1: NAME.sm_100a.cubin`: the target is the name's next-to-last part.
        let theirs: Vec<String> = text
            .lines()
            .filter_map(|l| l.split(": ").nth(1)?.rsplit('.').nth(1).map(str::to_owned))
            .collect();
        match ours == theirs {
            true => same += 1,
            false => differ.push(format!(
                "{}: ours {ours:?}, cuobjdump {theirs:?}",
                f.display()
            )),
        }
    }
    check(
        checks,
        &format!("{same} sampled cubins' targets read as cuobjdump reads them"),
        differ.is_empty(),
        differ.first().cloned().unwrap_or_default(),
    );
    Ok(())
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let t = e.file_type()?;
        if t.is_dir() {
            collect(&e.path(), out)?;
        } else if t.is_file() && e.path().extension().is_some_and(|x| x == "cubin") {
            out.push(e.path());
        }
    }
    Ok(())
}

/// The wheel installed into a container image: the image's answer is the wheel's, and reading
/// the image is timed against unpacking it with umoci and auditing the directory.
/// The wheel installed by pip into a one-layer image (umoci), saved as docker does (skopeo),
/// once: `WORK/flashinfer.tar`, beside the OCI layout `WORK/img`.
fn build_image(
    umoci: &Path,
    skopeo: &Path,
    wheel: &Path,
    work: &Path,
) -> Result<std::path::PathBuf> {
    let archive = work.join("flashinfer.tar");
    if !archive.is_file() {
        let _ = std::fs::remove_dir_all(work);
        std::fs::create_dir_all(work)?;
        let run = |program: &Path, args: &[&str]| -> Result<()> {
            let ok = Command::new(program)
                .current_dir(work)
                .args(args)
                .status()?
                .success();
            match ok {
                true => Ok(()),
                false => Err(crate::harness::failed(format!(
                    "bench collections: {} {args:?} failed",
                    program.display()
                ))),
            }
        };
        run(umoci, &["init", "--layout", "img"])?;
        run(umoci, &["new", "--image", "img:t"])?;
        run(umoci, &["unpack", "--rootless", "--image", "img:t", "b"])?;
        let site = work.join("b/rootfs/usr/local/lib/python3.12/site-packages");
        let pip = Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--no-compile",
                "--target",
            ])
            .arg(&site)
            .arg(wheel)
            .status()?;
        if !pip.success() {
            return Err(crate::harness::failed(
                "bench collections: pip install --target failed".to_owned(),
            ));
        }
        run(umoci, &["repack", "--image", "img:t", "b"])?;
        std::fs::remove_dir_all(work.join("b"))?;
        run(
            skopeo,
            &[
                "copy",
                "-q",
                "oci:img:t",
                "docker-archive:flashinfer.tar:flashinfer:t",
            ],
        )?;
    }
    Ok(archive)
}

fn image(fatkit: &Path, wheel: &Path, dir: &Path, checks: &mut Vec<Check>) -> Result<()> {
    let (Some(umoci), Some(skopeo)) = (tool("umoci"), tool("skopeo")) else {
        check(
            checks,
            "umoci and skopeo found (bash .ci/install-debian-image-tools)",
            false,
            "",
        );
        return Ok(());
    };
    let work = dir.join("image");
    let archive = build_image(&umoci, &skopeo, wheel, &work)?;
    let start = Instant::now();
    let (code, text) = audit(fatkit, &[&archive.to_string_lossy(), "--gpu", "RTX 5090"])?;
    let ours = start.elapsed();
    let first = text.lines().next().unwrap_or_default().to_owned();
    println!("\n== the wheel installed in a container image, on an RTX 5090 ({} lines, exit {code})\n{text}", text.lines().count());
    check(
        checks,
        "image: exit 1, holds nothing for the RTX 5090",
        code == 1 && first.contains("flashinfer_cubin 0.6.13: NO")
            || text.contains("flashinfer_cubin 0.6.13: NO"),
        &first,
    );
    check(
        checks,
        "image: at most 60 lines",
        text.lines().count() <= 60,
        format!("{} lines", text.lines().count()),
    );
    // What a user would do otherwise: unpack the image, audit the directory.
    let rootfs = work.join("unpacked");
    let _ = std::fs::remove_dir_all(&rootfs);
    let start = Instant::now();
    let ok = Command::new(&umoci)
        .current_dir(&work)
        .args(["unpack", "--rootless", "--image", "img:t", "unpacked"])
        .status()?
        .success();
    let (_, dir_text) = audit(
        fatkit,
        &[
            &rootfs.join("rootfs").to_string_lossy(),
            "--gpu",
            "RTX 5090",
        ],
    )?;
    let theirs = start.elapsed();
    let _ = std::fs::remove_dir_all(&rootfs);
    check(
        checks,
        "umoci unpack + audit of the directory ran",
        ok && !dir_text.is_empty(),
        "",
    );
    println!(
        "\n== speed: audit image.tar {:.1} s; umoci unpack + audit DIR {:.1} s: {:.2}x",
        ours.as_secs_f64(),
        theirs.as_secs_f64(),
        theirs.as_secs_f64() / ours.as_secs_f64().max(1e-9)
    );
    Ok(())
}

fn tool(name: &str) -> Option<std::path::PathBuf> {
    ["/usr/bin", "/usr/sbin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}
