//! `fatkit diff OLD NEW` (issue 57): what changed between two releases, per GPU and library,
//! over generated pairs of fatbins (a target dropped, PTX removed, a driver floor raised, a
//! stub added, nothing changed) and over random pairs, each held to what `audit` says of the
//! two releases alone.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use fatkit_arch::Target;
use fatkit_tests::{cli, temp_dir, Rng};

/// A PTX image for `target` (`compute_80`) of PTX ISA `isa` (`7.0`): each kernel stores to
/// its argument, or, where `stub`, only returns (its body compiled out).
fn ptx(target: &str, isa: &str, kernels: &[(&str, bool)]) -> String {
    let sm = target.replace("compute_", "sm_");
    let mut text = format!(".version {isa}\n.target {sm}\n.address_size 64\n\n");
    for (name, stub) in kernels {
        let body = match stub {
            true => "\tret;\n".to_owned(),
            false => "\t.reg .b64 %rd<2>;\n\tld.param.u64 %rd1, [p];\n\tst.global.u32 [%rd1], 1;\n\tret;\n".to_owned(),
        };
        text.push_str(&format!(
            ".visible .entry {name}(.param .u64 p)\n{{\n{body}}}\n\n"
        ));
    }
    text
}

/// A fatbin of `images` (target, PTX text or cubin bytes), written to `dir/name`.
fn fatbin<D: AsRef<[u8]>>(dir: &Path, name: &str, images: &[(&str, D)]) -> PathBuf {
    let inputs: Vec<fatkit_fatbin::write::Input<'_>> = images
        .iter()
        .map(|(t, data)| fatkit_fatbin::write::Input {
            target: t.parse::<Target>().unwrap(),
            data: data.as_ref(),
            identifier: Some("k.cu"),
            compression: fatkit_fatbin::Compression::None,
        })
        .collect();
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, fatkit_fatbin::write::write(&inputs).unwrap()).unwrap();
    path
}

const GPUS: [&str; 3] = ["V100", "A100", "H100"];

/// `fatkit diff OLD NEW` on [`GPUS`] with `extra` arguments: exit code and the JSON.
fn diff(old: &Path, new: &Path, extra: &[&str]) -> (i32, serde_json::Value) {
    let mut args = vec![
        "diff",
        old.to_str().unwrap(),
        new.to_str().unwrap(),
        "--json",
    ];
    for g in GPUS {
        args.extend(["--gpu", g]);
    }
    args.extend(extra);
    let (code, out, err) = cli::fatkit(&args).parts();
    let json = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    (code, json)
}

/// Each change as `kind` or `kind@GPU`.
fn kinds(json: &serde_json::Value) -> BTreeSet<String> {
    json["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|l| l["changes"].as_array().unwrap().iter())
        .map(|c| match c["gpu"].as_str() {
            Some(g) => format!("{}@{g}", c["kind"].as_str().unwrap()),
            None => c["kind"].as_str().unwrap().to_owned(),
        })
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

const AB: [(&str, bool); 2] = [("a", false), ("b", false)];

/// The old release: PTX for Volta and for Ampere on, kernels `a` and `b` in each.
fn old(dir: &Path) -> PathBuf {
    fatbin(
        dir,
        "old.fatbin",
        &[
            ("compute_70", ptx("compute_70", "6.3", &AB)),
            ("compute_80", ptx("compute_80", "7.0", &AB)),
        ],
    )
}

/// The old release with `b` compiled out of Ampere's PTX: a stub in the image the driver
/// loads from the A100 on.
fn stubbed(dir: &Path) -> PathBuf {
    fatbin(
        dir,
        "stubbed.fatbin",
        &[
            ("compute_70", ptx("compute_70", "6.3", &AB)),
            (
                "compute_80",
                ptx("compute_80", "7.0", &[("a", false), ("b", true)]),
            ),
        ],
    )
}

#[test]
fn each_kind_of_change_is_named_and_regressions_fail_the_run() {
    let dir = temp_dir("diff-kinds");
    let old = old(&dir);
    // Nothing changed (another file of the same bytes).
    let same = fatbin(
        &dir,
        "same.fatbin",
        &[
            ("compute_70", ptx("compute_70", "6.3", &AB)),
            ("compute_80", ptx("compute_80", "7.0", &AB)),
        ],
    );
    let (code, json) = diff(&old, &same, &[]);
    assert_eq!((code, kinds(&json)), (0, BTreeSet::new()), "{json}");
    assert_eq!(json["unchanged"], 1);

    // Volta's PTX dropped: the V100 runs nothing.
    let dropped = fatbin(
        &dir,
        "dropped.fatbin",
        &[("compute_80", ptx("compute_80", "7.0", &AB))],
    );
    let (code, json) = diff(&old, &dropped, &[]);
    assert_eq!(code, 1, "{json}");
    assert_eq!(
        kinds(&json),
        set(&["ptx-removed", "gpu-lost@V100", "kernels-lost@V100"]),
        "{json}"
    );
    assert_eq!(json["lost"][0]["gpu"], "V100", "{json}");
    assert_eq!(json["lost"][0]["libraries"], 1, "{json}");
    // The text answers first, per GPU lost.
    let (_, text) = cli::fatkit(&[
        "diff",
        old.to_str().unwrap(),
        dropped.to_str().unwrap(),
        "--gpu",
        "V100",
    ])
    .text();
    let mut lines = text.lines();
    assert!(lines.next().unwrap().contains("REGRESSES from"), "{text}");
    assert_eq!(
        lines.next(),
        Some(format!("  V100: 1 library no longer runs: {}", dropped.display()).as_str()),
        "{text}"
    );
    // Counting only a kind it does not have, it passes.
    assert_eq!(diff(&old, &dropped, &["--fail-on", "floor-raised"]).0, 0);

    // Ampere's PTX of a newer ISA: the driver it needs rises on the A100 and the H100.
    let newer = fatbin(
        &dir,
        "newer.fatbin",
        &[
            ("compute_70", ptx("compute_70", "6.3", &AB)),
            ("compute_80", ptx("compute_80", "8.7", &AB)),
        ],
    );
    let (code, json) = diff(&old, &newer, &[]);
    assert_eq!(code, 1, "{json}");
    assert_eq!(
        kinds(&json),
        set(&["floor-raised@A100", "floor-raised@H100"]),
        "{json}"
    );

    // `b` compiled out of Ampere's PTX: a stub in the image the driver loads there.
    let stubbed = stubbed(&dir);
    let (code, json) = diff(&old, &stubbed, &[]);
    assert_eq!(code, 1, "{json}");
    let got = kinds(&json);
    for want in ["stubs-added@A100", "stubs-added@H100", "kernels-lost@A100"] {
        assert!(got.contains(want), "{want}: {json}");
    }

    // The other way round, each is an improvement: nothing fails.
    let (code, json) = diff(&dropped, &old, &[]);
    assert_eq!(code, 0, "{json}");
    assert!(kinds(&json).contains("gpu-gained@V100"), "{json}");
}

/// A fatbin of the fixture `ptx-jit.fatbin`'s own images (nvcc's cubins and PTX, as cuobjdump
/// extracted them), those of `targets` only.
fn of_fixture_images(dir: &Path, name: &str, targets: &[&str]) -> PathBuf {
    let golden =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/small/golden/ptx-jit.fatbin.x");
    let file = |t: &str| match t {
        "sm_80" => "ptx-jit.2.sm_80.cubin",
        "sm_90" => "ptx-jit.5.sm_90.cubin",
        _ => "ptx-jit.1.sm_90.ptx",
    };
    let images: Vec<(&str, Vec<u8>)> = targets
        .iter()
        .map(|t| (*t, std::fs::read(golden.join(file(t))).unwrap()))
        .collect();
    fatbin(dir, name, &images)
}

/// Running both times, the how changes: an H100 that ran the kernels from its sm_90 cubin and
/// now has only compute_90 PTX to JIT-compile is a regression (`now-by-ptx`, exit 1); the other
/// way round an improvement (`now-from-cubin`, exit 0). Each as `audit` says of the two alone.
#[test]
fn a_gpu_moving_between_cubin_and_ptx_is_named() {
    let dir = temp_dir("diff-cubin-ptx");
    let cubin = of_fixture_images(&dir, "cubin/k.fatbin", &["sm_90", "compute_90"]);
    let by_ptx = of_fixture_images(&dir, "ptx/k.fatbin", &["sm_80", "compute_90"]);
    for (file, want) in [(&cubin, "runs"), (&by_ptx, "runs_by_ptx")] {
        let (_, out, _) = cli::audit(&[file.to_str().unwrap(), "--gpu", "H100", "--json"]).parts();
        let json: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            json["files"][0]["libraries"][0]["on"][0]["answer"], want,
            "{out}"
        );
    }
    let (code, json) = diff(&cubin, &by_ptx, &[]);
    assert_eq!(code, 1, "{json}");
    assert!(kinds(&json).contains("now-by-ptx@H100"), "{json}");
    assert_eq!(diff(&cubin, &by_ptx, &["--fail-on", "gpu-lost"]).0, 0);
    let (code, json) = diff(&by_ptx, &cubin, &["--fail-on", "now-by-ptx"]);
    assert_eq!(code, 0, "{json}");
    assert!(kinds(&json).contains("now-from-cubin@H100"), "{json}");
    assert!(!kinds(&json).contains("now-by-ptx@H100"), "{json}");
}

/// A release that adds a library that does not run on a GPU changes no library's answer
/// there, only the whole release's: `answer-worse`, exit 1; the other way round
/// `answer-better`.
#[test]
fn a_library_added_that_does_not_run_makes_the_answer_worse() {
    let dir = temp_dir("diff-added");
    for (side, libs) in [("old", &["a"][..]), ("new", &["a", "b"][..])] {
        std::fs::create_dir_all(dir.join(side)).unwrap();
        for lib in libs {
            let target = if *lib == "a" {
                "compute_70"
            } else {
                "compute_80"
            };
            fatbin(
                &dir.join(side),
                &format!("{lib}.fatbin"),
                &[(target, ptx(target, "6.3", &AB))],
            );
        }
    }
    let (old, new) = (dir.join("old"), dir.join("new"));
    let (code, json) = diff(&old, &new, &[]);
    assert_eq!(code, 1, "{json}");
    assert!(kinds(&json).contains("library-added"), "{json}");
    let worse: Vec<&serde_json::Value> = json["answers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "answer-worse")
        .collect();
    assert_eq!(worse.len(), 1, "{json}");
    assert_eq!(worse[0]["gpu"], "V100", "{json}");
    // The other way round the answer is better (library b is gone, a regression of its own).
    let (code, json) = diff(&new, &old, &["--fail-on", "answer-worse"]);
    assert_eq!(code, 0, "{json}");
    assert!(
        json["answers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["kind"] == "answer-better" && c["gpu"] == "V100"),
        "{json}"
    );
    // Counted only where asked.
    assert_eq!(diff(&old, &new, &["--fail-on", "gpu-lost"]).0, 0);
}

/// Under a driver that predates the GPU nothing runs in either release: no kernel is lost
/// or gained there, whatever changed.
#[test]
fn nothing_is_lost_where_nothing_ran() {
    let dir = temp_dir("diff-predates");
    let old = old(&dir);
    let stubbed = stubbed(&dir);
    let (_, json) = diff(&old, &stubbed, &["--driver", "450.80.02"]);
    let got = kinds(&json);
    assert!(!got.contains("kernels-lost@H100"), "{json}");
    assert!(
        got.contains("kernels-lost@A100") || got.contains("stubs-added@A100"),
        "{json}"
    );
}

#[test]
fn two_kinds_of_input_are_refused() {
    let dir = temp_dir("diff-two-kinds");
    let old = old(&dir);
    let (code, out, err) =
        cli::fatkit(&["diff", old.to_str().unwrap(), dir.to_str().unwrap()]).parts();
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("OLD is a binary and NEW a directory; compare two of a kind"),
        "{err}"
    );
    let (code, _, err) = cli::fatkit(&[
        "diff",
        old.to_str().unwrap(),
        old.to_str().unwrap(),
        "--fail-on",
        "gpu-gained",
    ])
    .parts();
    assert_eq!(code, 2);
    assert!(
        err.contains("--fail-on: 'gpu-gained' is not a kind of regression"),
        "{err}"
    );
    // It names every kind there is to count.
    for kind in fatkit_audit::diff::Kind::ALL
        .iter()
        .filter(|k| k.regression())
    {
        assert!(err.contains(kind.name()), "{}: {err}", kind.name());
    }
}

/// Random pairs of releases built from a pool of PTX targets and ISAs: a GPU is lost in the
/// diff exactly where `audit` says the old release runs there and the new one does not, and
/// gained the other way.
#[test]
fn a_gpu_lost_or_gained_is_what_the_two_audits_say() {
    let dir = temp_dir("diff-random");
    let pool = [
        "compute_70",
        "compute_75",
        "compute_80",
        "compute_86",
        "compute_90",
    ];
    let mut rng = Rng(0x5eed_d1ff);
    let release = |rng: &mut Rng, name: &str| -> PathBuf {
        let mut images = Vec::new();
        for t in pool {
            if rng.below(2) == 0 {
                images.push((t, ptx(t, ["6.3", "7.0", "7.8"][rng.below(3)], &AB)));
            }
        }
        if images.is_empty() {
            images.push(("compute_90", ptx("compute_90", "7.8", &AB)));
        }
        fatbin(&dir, name, &images)
    };
    let runs = |file: &Path, gpu: &str| -> bool {
        let (_, out, _) = cli::audit(&[file.to_str().unwrap(), "--gpu", gpu, "--json"]).parts();
        let json: serde_json::Value = serde_json::from_str(&out).unwrap();
        let answer = json["files"][0]["libraries"][0]["on"][0]["answer"].clone();
        answer == "runs" || answer == "runs_by_ptx"
    };
    for round in 0..8 {
        let old = release(&mut rng, &format!("old{round}.fatbin"));
        let new = release(&mut rng, &format!("new{round}.fatbin"));
        let (_, json) = diff(&old, &new, &[]);
        let got = kinds(&json);
        for gpu in GPUS {
            let (was, is) = (runs(&old, gpu), runs(&new, gpu));
            assert_eq!(
                got.contains(&format!("gpu-lost@{gpu}")),
                was && !is,
                "round {round} {gpu}: {json}"
            );
            assert_eq!(
                got.contains(&format!("gpu-gained@{gpu}")),
                !was && is,
                "round {round} {gpu}: {json}"
            );
        }
    }
}

/// A kernel is named as no longer running only where the old release had it, and as running
/// now only where the new one has it: a kernel added that fails on a GPU, or a failing kernel
/// removed, is neither (found on vLLM 0.32.0 -> 0.33.0, whose renamed kernels read as
/// thousands lost and gained).
#[test]
fn kernels_added_or_removed_are_neither_lost_nor_gained() {
    let dir = temp_dir("diff-added-removed");
    // Both releases run nowhere before Ampere; the new one drops `b` and adds `c`.
    let old = fatbin(
        &dir,
        "old.fatbin",
        &[("compute_80", ptx("compute_80", "7.0", &AB))],
    );
    let new = fatbin(
        &dir,
        "new.fatbin",
        &[(
            "compute_80",
            ptx("compute_80", "7.0", &[("a", false), ("c", false)]),
        )],
    );
    let (code, json) = diff(&old, &new, &[]);
    let got = kinds(&json);
    assert!(
        !got.contains("kernels-lost@V100"),
        "c was not there before: {json}"
    );
    assert!(
        !got.contains("kernels-gained@V100"),
        "b is not there now: {json}"
    );
    assert_eq!(code, 0, "{json}");
}

/// `fatkit diff A B | head` in a CI step with pipefail: a reader that leaves early does not
/// change the exit code. The pipe is closed before fatkit writes a byte; a regression still
/// exits 1 (it exited 0 when a closed pipe was taken for the end of the run).
#[test]
fn a_reader_that_leaves_early_does_not_change_the_answer() {
    let dir = temp_dir("diff-closed-pipe");
    let old = old(&dir);
    let new = fatbin(
        &dir,
        "new.fatbin",
        &[("compute_80", ptx("compute_80", "7.0", &AB))],
    );
    for (what, args) in [
        (
            "diff",
            vec!["diff", old.to_str().unwrap(), new.to_str().unwrap()],
        ),
        (
            "audit",
            vec!["audit", new.to_str().unwrap(), "--gpu", "V100", "-v"],
        ),
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_fatkit-e2e"))
            .args(&args)
            .stdout(writer)
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(1), "{what} with its reader gone");
    }
}
