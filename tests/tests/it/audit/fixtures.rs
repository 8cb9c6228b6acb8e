//! `audit` as a user runs it on the committed fixtures: text and JSON, verdicts and exit codes.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};

use expect_test::{expect, expect_file};

pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/small")
        .join(name)
}

/// `fatkit audit ARGS...` in process, with fixture paths shortened to their names.
pub(crate) fn audit(args: &[&str]) -> (i32, String, String) {
    let dir = fixture("");
    let mut argv = vec!["audit".to_owned()];
    argv.extend(args.iter().map(|a| {
        if a.ends_with(".fatbin") {
            fixture(a).display().to_string()
        } else {
            (*a).to_owned()
        }
    }));
    let (code, out, err) = fatkit_tests::cli::fatkit(&argv).parts();
    let clean = |s: String| s.replace(&dir.display().to_string(), "");
    (code, clean(out), clean(err))
}

#[test]
fn text_report_of_a_fatbin() {
    let (code, out, err) = audit(&["plain.fatbin"]);
    assert_eq!((code, err.as_str()), (0, ""));
    expect_file!["../../../snapshots/audit-plain.txt"].assert_eq(&out);
}

#[test]
fn json_report_with_require_and_gpu() {
    let (code, out, _) = audit(&[
        "plain.fatbin",
        "--require",
        "sm_80 sm_120",
        "--gpu",
        "RTX 5090",
        "--json",
    ]);
    assert_eq!(code, 1);
    expect_file!["../../../snapshots/audit-plain.json"].assert_eq(&out);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["exit_code"], 1);
    assert_eq!(
        json["files"][0]["require"]["gaps"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn require_a_profile_lists_every_gap() {
    // Turing to Hopper cubins and compute_90 PTX: the RTX 50 series runs on PTX JIT.
    let (code, out, _) = audit(&["ptx-jit.fatbin", "--require", "consumer"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("require sm_75 sm_86 sm_89 sm_120 compute_120: every kernel covered"),
        "{out}"
    );
    let (code, out, _) = audit(&["plain.fatbin", "--require", "full"]);
    assert_eq!(code, 1);
    // Grouped by target and reason, the kernels named.
    let gaps: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.contains("gap(s)"))
        .map(str::trim)
        .collect();
    expect![[r#"
        [
            "require sm_70 sm_75 sm_80 sm_86 sm_89 sm_90 sm_100 sm_120 compute_120: 8 gap(s):",
            "sm_70: 2 kernels: no cubin or PTX that runs on CC 7.0: a, b",
            "sm_75: 2 kernels: no cubin or PTX that runs on CC 7.5: a, b",
            "sm_100: 2 kernels: no cubin or PTX that runs on CC 10.0: a, b",
            "sm_120: 1 kernel: no cubin or PTX that runs on CC 12.0: b",
            "compute_120: 1 kernel: no PTX that JIT-compiles for CC 12.0: b",
            "",
        ]
    "#]]
    .assert_debug_eq(&gaps);
}

#[test]
fn gpu_verdicts_name_the_kernel_and_why() {
    let (code, out, _) = audit(&["plain.fatbin", "--gpu", "RTX 5090"]);
    assert_eq!(code, 1);
    assert!(
        out.starts_with("plain.fatbin: PARTLY on GeForce RTX 5090 (CC 12.0): 1 of 2 kernels run\n"),
        "{out}"
    );
    // The driver loads the sm_120 cubin for the whole module; b is only in the others.
    assert!(out.contains("  1 of 2 kernels do not run on GeForce RTX 5090, by reason:\n         1  the driver loads the sm_120 cubin of the module on CC 12.0, which does not hold it (sm_80 sm_90 do): cuModuleGetFunction returns CUDA_ERROR_NOT_FOUND (500)\n            b\n"), "{out}");
    let (code, out, _) = audit(&["ptx-jit.fatbin", "--gpu", "RTX 5090", "--driver", "575.51"]);
    assert_eq!(code, 1);
    assert!(
        out.contains("PTX ISA 9.2 needs driver >= 595.45.04 (CUDA 13.2); driver is 575.51"),
        "{out}"
    );
    let (code, out, _) = audit(&[
        "ptx-jit.fatbin",
        "--gpu",
        "RTX 5090",
        "--driver",
        "595.45.04",
    ]);
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = audit(&["ptx-jit.fatbin", "--gpu", "sm_90a-nonsense"]);
    assert_eq!((code, out.as_str()), (2, ""));
}

#[test]
fn invalid_input_exits_2_naming_file_and_offset() {
    let dir = std::env::temp_dir().join(format!("fatkit-audit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data = std::fs::read(fixture("size.fatbin")).unwrap();
    let truncated = dir.join("truncated.fatbin");
    std::fs::write(&truncated, &data[..1000]).unwrap();
    let (code, out, err) = audit(&[truncated.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.contains("truncated.fatbin: at offset 0x0: truncated fatbin container: needs 3952 bytes, 1000 left"), "{out}");
    assert!(
        err.starts_with("error: some input is unknown or corrupt"),
        "{err}"
    );
    let (code, _, err) = audit(&["/nonexistent/x.so"]);
    assert_eq!(code, 2);
    assert!(
        err.starts_with("error: /nonexistent/x.so: cannot read:"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn no_device_code_is_not_a_pass_when_something_is_required() {
    // A program with no device code (this test binary holds some: embedded.rs's fatbin).
    let exe = "/bin/sh";
    let (code, out, _) = audit(&[exe]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("no device code found"), "{out}");
    let (code, out, _) = audit(&[exe, "--gpu", "H100"]);
    assert_eq!(code, 1, "{out}");
}

#[test]
fn verbose_lists_every_image_and_kernel() {
    let (code, out, _) = audit(&["plain.fatbin", "--verbose"]);
    assert_eq!(code, 0);
    expect_file!["../../../snapshots/audit-plain-verbose.txt"].assert_eq(&out);
}

#[test]
fn a_gpu_verdict_answers_first_and_explains_the_driver_per_target() {
    // The PTX needs a newer driver than the cubins: both are said, per target.
    let (code, out, _) = audit(&["ptx-jit.fatbin", "--gpu", "RTX 5090", "--driver", "575.51"]);
    assert_eq!(code, 1);
    expect_file!["../../../snapshots/audit-ptx-jit-5090.txt"].assert_eq(&out);
    let (code, out, _) = audit(&["plain.fatbin", "--gpu", "V100"]);
    assert_eq!(code, 1);
    expect_file!["../../../snapshots/audit-plain-v100.txt"].assert_eq(&out);
    // The sm_120 cubin is chosen, but it was built by CUDA 13.2 and the driver is 12.9's:
    // the answer is NO, the driver first (docs/ARCH_RULES.md section 11); kernel by kernel
    // (--strict) the cubin's load is in doubt. b is not in that cubin: it fails either way (a
    // finding, exit 1, which an unknown does not hide).
    let (code, out, _) = audit(&["plain.fatbin", "--gpu", "RTX 5090", "--driver", "575.51"]);
    assert_eq!(code, 1);
    assert!(
        out.starts_with("plain.fatbin: NO on GeForce RTX 5090 (CC 12.0, driver 575.51): nothing of it runs: its cubins need a newer driver: it needs driver >= 580.65.06 (CUDA 13.0)")
            && out.contains("fix:        update the NVIDIA driver to >= 580.65.06"),
        "{out}"
    );
    let (code, out, _) = audit(&[
        "plain.fatbin",
        "--gpu",
        "RTX 5090",
        "--driver",
        "575.51",
        "--strict",
    ]);
    assert_eq!(code, 1);
    assert!(
        out.starts_with("plain.fatbin: UNKNOWN on GeForce RTX 5090 (CC 12.0, driver 575.51): ")
            && out.contains("the sm_120 cubin is from CUDA 13.2, which needs a CUDA 13.x driver; driver 575.51 is at the CUDA 12.9 level\n            a\n")
            && out.contains("cuModuleGetFunction returns CUDA_ERROR_NOT_FOUND (500)\n            b\n"),
        "{out}"
    );
    let (_, json, _) = audit(&[
        "plain.fatbin",
        "--gpu",
        "RTX 5090",
        "--gpu",
        "H100",
        "--driver",
        "580.65.06",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    // With a CUDA 13.0 driver the cubins load; b has no sm_120 image and its sm_90 runs on H100.
    assert_eq!(v["matrix"]["cells"][0][0]["by"], "no", "{json}");
    assert_eq!(v["matrix"]["cells"][1][0]["by"], "cubin", "{json}");
}

/// A scratch directory holding copies of fixtures and text that mentions PTX directives.
pub(crate) fn tree_with_decoys(name: &str) -> PathBuf {
    let dir = fatkit_tests::temp_dir(name);
    let lib = dir.join("pkg/lib");
    std::fs::create_dir_all(&lib).unwrap();
    for f in ["plain.fatbin", "ptx-jit.fatbin"] {
        std::fs::copy(fixture(f), lib.join(f)).unwrap();
    }
    // What fooled the first reader: a Python docstring (torch/_dynamo/bytecode_analysis.py
    // mentions the directives), a text file, a header.
    let decoy =
        "\"\"\"Reads PTX such as\n.version 8.0\n.target sm_80\n.visible .entry k(\n\"\"\"\n";
    std::fs::write(dir.join("pkg/bytecode_analysis.py"), decoy).unwrap();
    std::fs::write(dir.join("pkg/NOTES.txt"), &decoy[3..]).unwrap();
    std::fs::write(dir.join("pkg/kernels.cuh"), &decoy[3..]).unwrap();
    std::fs::write(
        dir.join("pkg/lib/real.ptx"),
        "//\n// Generated by NVIDIA NVVM Compiler\n//\n\n.version 8.0\n.target sm_80\n.address_size 64\n\n.visible .entry real_kernel()\n{\n\tret;\n}\n",
    )
    .unwrap();
    dir
}

/// `(name, verdict)` of every library: the package is left out, as a tree has none.
pub(crate) fn libraries(json: &str) -> Vec<(String, String)> {
    fatkit_tests::library_rows(json)
        .into_iter()
        .map(|(_, name, verdict)| (name, verdict))
        .collect()
}

#[test]
fn text_is_never_ptx_and_a_directory_reads_as_its_wheel() {
    let dir = tree_with_decoys("decoys");
    let tree = dir.to_str().unwrap();
    let (code, out, err) = audit(&[tree, "--gpu", "H100"]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert!(out.contains("3 libraries"), "{out}");
    for decoy in ["bytecode_analysis.py", "NOTES.txt", "kernels.cuh"] {
        assert!(
            !out.contains(decoy),
            "{decoy} reported as device code:\n{out}"
        );
    }
    assert!(out.contains("pkg/lib/real.ptx"), "{out}");

    // The same tree as a wheel: the same libraries, the same verdicts.
    let wheel = dir.with_extension("whl");
    let zip = std::process::Command::new("python3")
        .args(["-m", "zipfile", "-c"])
        .arg(&wheel)
        .arg(dir.join("pkg"))
        .status()
        .unwrap();
    assert!(zip.success());
    let gpus = [
        "--gpu", "V100", "--gpu", "H100", "--gpu", "RTX 5090", "--json",
    ];
    let mut args = vec![tree];
    args.extend(gpus);
    let (_, from_dir, _) = audit(&args);
    let mut args = vec![wheel.to_str().unwrap()];
    args.extend(gpus);
    let (code, from_wheel, _) = audit(&args);
    assert_eq!(code, 1);
    let from_dir = libraries(&from_dir);
    assert_eq!(from_dir.len(), 3, "{from_dir:?}");
    assert_eq!(from_dir, libraries(&from_wheel));
    std::fs::remove_file(&wheel).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_corrupt_compressed_entry_is_unknown_never_ok() {
    let dir = fatkit_tests::temp_dir("corrupt");
    // compress-all.fatbin: four ZSTD entries; the first's payload starts 64 bytes in.
    let mut data = std::fs::read(fixture("compress-all.fatbin")).unwrap();
    for b in &mut data[16 + 64 + 40..16 + 64 + 200] {
        *b ^= 0x5a;
    }
    let bad = dir.join("corrupt.fatbin");
    std::fs::write(&bad, &data).unwrap();
    for extra in [&[][..], &["--gpu", "H100"][..], &["--require", "sm_80"][..]] {
        let mut args = vec![bad.to_str().unwrap()];
        args.extend(extra);
        let (code, out, err) = audit(&args);
        assert_eq!(code, 2, "{extra:?}: {out}{err}");
        assert!(out.contains("UNKNOWN"), "{extra:?}: {out}");
        assert!(out.contains("error: ") && out.contains("ZSTD"), "{out}");
    }
    let (_, json, _) = audit(&[bad.to_str().unwrap(), "--matrix", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["exit_code"], 2);
    for row in v["matrix"]["cells"].as_array().unwrap() {
        assert_eq!(row[0]["by"], "corrupt", "{row}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_matrix_matches_each_gpu_cell_by_cell() {
    let paths: Vec<String> = ["plain.fatbin", "ptx-jit.fatbin", "speed.fatbin"]
        .iter()
        .map(|f| fixture(f).display().to_string())
        .collect();
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    assert_eq!(fatkit_tests::check_matrix_against_each_gpu(&paths), 8 * 3);
    let mut args = vec!["--matrix"];
    args.extend(["plain.fatbin", "ptx-jit.fatbin", "speed.fatbin"]);
    let (code, out, _) = audit(&args);
    assert_eq!(code, 1);
    expect_file!["../../../snapshots/audit-matrix.txt"].assert_eq(&out);
    let (code, _, err) = audit(&["plain.fatbin", "--matrix=retro"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no GPU set named 'retro'; use one of generations, datacenter, consumer"),
        "{err}"
    );
}

#[test]
fn an_environment_is_grouped_by_distribution() {
    // Two installed distributions, as pip lays them out: files and a RECORD naming them.
    let dir = fatkit_tests::temp_dir("site-packages");
    for (dist, file, fixture_name) in [
        ("alpha-1.0", "alpha/lib/plain.fatbin", "plain.fatbin"),
        ("beta_gpu-2.5", "beta/kernels.fatbin", "ptx-jit.fatbin"),
    ] {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::copy(fixture(fixture_name), &path).unwrap();
        let info = dir.join(format!("{dist}.dist-info"));
        std::fs::create_dir_all(&info).unwrap();
        std::fs::write(
            info.join("RECORD"),
            format!("{file},sha256=x,1\n{dist}.dist-info/RECORD,,\n"),
        )
        .unwrap();
    }
    let (code, out, _) = audit(&[dir.to_str().unwrap(), "--gpu", "T4"]);
    assert_eq!(code, 1, "{out}");
    let out = out.replace(&dir.display().to_string(), "site-packages");
    let head: Vec<&str> = out.lines().take(5).collect();
    expect![[r#"
        [
            "site-packages: NO on T4 (CC 7.5): 2 of 4 kernels in 2 libraries run",
            "  fix: this release of alpha is built for CC 8.0 and later, not for CC 7.5: use a GPU of CC 8.0 or later, or an earlier release of alpha built for CC 7.5, if one was",
            "  alpha 1.0: NO",
            "    alpha/lib/plain.fatbin  NO   0 of 2 kernels run",
            "  beta_gpu 2.5: yes (1 library)",
        ]
    "#]]
    .assert_debug_eq(&head);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The matrix says of each library what the package's answer says of it: a library of
/// `sm_90a` alone beside a core that runs on an RTX 5090 is for other GPUs there, in the text's
/// row, in the matrix's cell and in the JSON's, where the library alone would be "no".
#[test]
fn the_matrix_sets_aside_what_the_package_sets_aside() {
    let dir = fatkit_tests::temp_dir("matrix-aside");
    let gpu = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gpu");
    let files = [
        ("gamma/lib/core.fatbin", fixture("ptx-jit.fatbin")),
        ("gamma/lib/hopper.fatbin", gpu.join("sm_90a.fatbin")),
    ];
    let mut record = String::new();
    for (file, from) in &files {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::copy(from, &path).unwrap();
        record.push_str(&format!("{file},sha256=x,1\n"));
    }
    let info = dir.join("gamma-1.0.dist-info");
    std::fs::create_dir_all(&info).unwrap();
    std::fs::write(info.join("RECORD"), record).unwrap();
    let site = dir.to_str().unwrap();
    let (_, text, _) = audit(&[site, "--gpu", "RTX 5090", "--gpu", "H100"]);
    let row = |gpu: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(gpu))
            .unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(row("GeForce RTX 5090").ends_with("other GPUs"), "{text}");
    assert!(row("H100").ends_with("cubin"), "{text}");
    let (_, json, _) = audit(&[site, "--gpu", "RTX 5090", "--gpu", "H100", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let cells = &v["matrix"]["cells"];
    assert_eq!(cells[0][1]["by"], "other_gpus", "{cells}");
    assert_eq!(cells[1][1]["by"], "cubin", "{cells}");
    // --strict: the library alone, "no" on the RTX 5090.
    let (_, json, _) = audit(&[
        site, "--gpu", "RTX 5090", "--gpu", "H100", "--json", "--strict",
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["matrix"]["cells"][0][1]["by"], "no", "{json}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_crate_declaration_inside_a_wheel_is_read() {
    // A library as a crate using fatkit-runtime ships it: its kernels embedded, and the
    // record declaring `b` for sm_80 and sm_90 only (fatkit_arch::declared's format).
    let dir = fatkit_tests::temp_dir("declared-wheel");
    let mut lib = b"a host library, not an ELF for the test\0\0\0\0\0\0\0\0".to_vec();
    lib.extend(std::fs::read(fixture("plain.fatbin")).unwrap());
    // The record binds to the one fatbin it describes: its size and fingerprint.
    let fatbin = std::fs::read(fixture("plain.fatbin")).unwrap();
    lib.extend(
        format!(
            "\0fatkit:declared:v2;module=plain;fatbin={}:{:016x};b=sm_80,sm_90;end;\0",
            fatbin.len(),
            fatkit_arch::fingerprint::fingerprint(&fatbin)
        )
        .as_bytes(),
    );
    let pkg = dir.join("pkg/lib");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(pkg.join("libk.so"), &lib).unwrap();
    let wheel = dir.join("pkg-1.0-py3-none-any.whl");
    let zip = std::process::Command::new("python3")
        .args(["-m", "zipfile", "-c"])
        .arg(&wheel)
        .arg(dir.join("pkg"))
        .status()
        .unwrap();
    assert!(zip.success());
    for input in [pkg.join("libk.so"), wheel] {
        let (code, out, _) = audit(&[input.to_str().unwrap(), "--gpu", "RTX 5090"]);
        assert_eq!(code, 0, "{out}");
        assert!(
            out.contains("1 kernel not built for it, by their crate's declaration (not failures):")
                && out.contains("  b: declared for sm_80 sm_90\n"),
            "{out}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_empty_requirement_and_what_is_not_a_file_are_refused() {
    // An unset CI variable: `--require "$TARGETS"`.
    for empty in ["", "  "] {
        let (code, out, err) = audit(&["plain.fatbin", "--require", empty]);
        assert_eq!((code, out.as_str()), (2, ""), "{err}");
        assert!(
            err.contains("--require: empty; give a profile name"),
            "{err}"
        );
    }
    // A device never ends; a FIFO would block (on a system that has one).
    let (code, _, err) = audit(&["/dev/zero"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("/dev/zero: cannot read: not a regular file or directory"),
        "{err}"
    );
    let dir = fatkit_tests::temp_dir("fifo");
    let fifo = dir.join("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if made {
        let (code, _, err) = audit(&[fifo.to_str().unwrap()]);
        assert_eq!(code, 2, "{err}");
        // In a directory, it is passed over.
        std::fs::copy(fixture("plain.fatbin"), dir.join("plain.fatbin")).unwrap();
        let (code, out, _) = audit(&[dir.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--strict` is the kernel-level reading the snapshots of this file were made with before the
/// package's answer (docs/ARCH_RULES.md section 11): each case's first line and exit code as
/// they were, and the matrix's cells; only the words of the library blocks (the arch list in
/// the notations a build of it takes, driver floors another line exceeds, the fix) moved.
#[test]
fn strict_reproduces_the_kernel_level_answers() {
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["plain.fatbin", "--gpu", "V100"],
            1,
            "plain.fatbin: NO on V100 (CC 7.0): none of its 2 kernels runs",
        ),
        (
            &["ptx-jit.fatbin", "--gpu", "RTX 5090", "--driver", "575.51"],
            1,
            "ptx-jit.fatbin: NO on GeForce RTX 5090 (CC 12.0, driver 575.51): none of its 2 kernels runs",
        ),
        (
            &["plain.fatbin", "--gpu", "RTX 5090"],
            1,
            "plain.fatbin: PARTLY on GeForce RTX 5090 (CC 12.0): 1 of 2 kernels run",
        ),
        (
            &["plain.fatbin", "--gpu", "RTX 5090", "--driver", "575.51"],
            1,
            "plain.fatbin: UNKNOWN on GeForce RTX 5090 (CC 12.0, driver 575.51): 0 of 2 kernels run, if the driver loads them (below)",
        ),
    ];
    for (args, code, first) in cases {
        let mut argv = args.to_vec();
        argv.push("--strict");
        let (got, out, err) = audit(&argv);
        assert_eq!(
            (got, out.lines().next()),
            (*code, Some(*first)),
            "{args:?}: {out}{err}"
        );
    }
    // The matrix's cells, kernel by kernel, as its snapshot has them.
    let (_, out, _) = audit(&[
        "plain.fatbin",
        "ptx-jit.fatbin",
        "speed.fatbin",
        "--matrix",
        "--strict",
    ]);
    let snapshot = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("snapshots/audit-matrix.txt"),
    )
    .unwrap();
    let table = |s: &str| -> Vec<String> {
        s.lines()
            .skip_while(|l| !l.starts_with("GPU x library"))
            .map(str::to_owned)
            .collect()
    };
    assert!(!table(&snapshot).is_empty(), "{snapshot}");
    assert_eq!(table(&out), table(&snapshot));
}
