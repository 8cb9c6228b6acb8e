//! `audit` as a user runs it on the committed fixtures: text and JSON, verdicts and exit codes.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};

use expect_test::{expect, expect_file};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/small")
        .join(name)
}

/// `fatkit audit ARGS...` in process, with fixture paths shortened to their names.
fn audit(args: &[&str]) -> (u8, String, String) {
    let dir = fixture("");
    let mut argv = vec!["audit".to_owned()];
    argv.extend(args.iter().map(|a| {
        if a.ends_with(".fatbin") {
            fixture(a).display().to_string()
        } else {
            (*a).to_owned()
        }
    }));
    let (code, out, err) = fatkit_tests::fatkit_in_process(&argv);
    let clean = |s: String| s.replace(&dir.display().to_string(), "");
    (code, clean(out), clean(err))
}

#[test]
fn text_report_of_a_fatbin() {
    let (code, out, err) = audit(&["plain.fatbin"]);
    assert_eq!((code, err.as_str()), (0, ""));
    expect_file!["../../snapshots/audit-plain.txt"].assert_eq(&out);
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
    expect_file!["../../snapshots/audit-plain.json"].assert_eq(&out);
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
    expect_file!["../../snapshots/audit-plain-verbose.txt"].assert_eq(&out);
}

#[test]
fn a_gpu_verdict_answers_first_and_explains_the_driver_per_target() {
    // The PTX needs a newer driver than the cubins: both are said, per target.
    let (code, out, _) = audit(&["ptx-jit.fatbin", "--gpu", "RTX 5090", "--driver", "575.51"]);
    assert_eq!(code, 1);
    expect_file!["../../snapshots/audit-ptx-jit-5090.txt"].assert_eq(&out);
    let (code, out, _) = audit(&["plain.fatbin", "--gpu", "V100"]);
    assert_eq!(code, 1);
    expect_file!["../../snapshots/audit-plain-v100.txt"].assert_eq(&out);
    // The sm_120 cubin is chosen, but it was built by CUDA 13.2 and the driver is 12.9's:
    // not "runs", and not silently. b is not in that cubin: it fails either way (a finding,
    // exit 1, which an unknown does not hide).
    let (code, out, _) = audit(&["plain.fatbin", "--gpu", "RTX 5090", "--driver", "575.51"]);
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
fn tree_with_decoys(name: &str) -> PathBuf {
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
fn libraries(json: &str) -> Vec<(String, String)> {
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
    expect_file!["../../snapshots/audit-matrix.txt"].assert_eq(&out);
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
            "site-packages: PARTLY on T4 (CC 7.5): 2 of 4 kernels in 2 libraries run",
            "  alpha 1.0: NO",
            "    alpha/lib/plain.fatbin  NO   0 of 2 kernels run",
            "  beta_gpu 2.5: yes (1 library)",
            "  alpha 1.0 (alpha/lib/plain.fatbin):",
        ]
    "#]]
    .assert_debug_eq(&head);
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

/// `fatkit audit PATH ARGS...` of a file anywhere: exit code and the headline.
fn headline(path: &Path, args: &[&str]) -> (u8, String) {
    let mut argv = vec!["audit".to_owned(), path.display().to_string()];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    let (code, out, err) = fatkit_tests::fatkit_in_process(&argv);
    let first = out.lines().next().unwrap_or_default().to_owned();
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    (
        code,
        format!(
            "{}\n{err}",
            first.replace(&path.display().to_string(), &name)
        ),
    )
}

/// A fixture of tests/fixtures/gpu, read.
fn gpu(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/gpu")
            .join(name),
    )
    .unwrap()
}

/// `fatkit audit PATH ARGS...` in process, with `PATH` shown as `shown`: the exit code and
/// standard output.
fn audit_as(path: &Path, shown: &str, args: &[&str]) -> (u8, String) {
    let mut argv = vec!["audit".to_owned(), path.display().to_string()];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    let (code, out, _) = fatkit_tests::fatkit_in_process(&argv);
    (code, out.replace(&path.display().to_string(), shown))
}

fn one_image(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/gpu/one-image")
        .join(name)
}

/// The driver loads one image of a module and finds a kernel only there: the fixtures of
/// tests/fixtures/gpu/build-one-image.sh (NVIDIA's own nvcc and fatbinary), each judged as the
/// driver would, with its exit code (0 runs, 1 a finding, 2 unknown).
#[test]
fn one_image_per_module_as_the_driver_loads_it() {
    let cases: &[(&str, &[&str], u8, &str)] = &[
        // An RTX 3090 loads the sm_86 cubin, which lacks b; the sm_80 cubin's b is not found.
        (
            "sm_86-lacks-b.fatbin",
            &["--gpu", "RTX 3090"],
            1,
            "PARTLY on GeForce RTX 3090 (CC 8.6): 1 of 2 kernels run",
        ),
        (
            "sm_86-lacks-b.fatbin",
            &["--gpu", "A100"],
            0,
            "yes on A100 (CC 8.0): 2 of 2 kernels run",
        ),
        // b is in the sm_80 cubin, not in the sm_90 one an H100 loads.
        (
            "lower-cubin-has-b.fatbin",
            &["--gpu", "H100"],
            1,
            "PARTLY on H100 (CC 9.0): 1 of 2 kernels run",
        ),
        (
            "lower-cubin-has-b.fatbin",
            &["--gpu", "A100"],
            0,
            "yes on A100 (CC 8.0): 2 of 2 kernels run",
        ),
        // b is in the PTX, not in the sm_90 cubin the driver prefers.
        (
            "ptx-has-b.fatbin",
            &["--gpu", "H100"],
            1,
            "PARTLY on H100 (CC 9.0): 1 of 2 kernels run",
        ),
        (
            "ptx-has-b.fatbin",
            &["--gpu", "B200"],
            0,
            "yes, by PTX JIT on B200 (CC 10.0): 2 of 2 kernels run",
        ),
        // An sm_90 image without kernels: an H100 loads it and finds nothing.
        (
            "empty-sm_90.fatbin",
            &["--gpu", "H100"],
            1,
            "NO on H100 (CC 9.0): none of its 2 kernels runs",
        ),
        // The sm_90a cubin (a only) is preferred on CC 9.0 over the plain sm_90 one.
        (
            "sm_90a-lacks-b.fatbin",
            &["--gpu", "H100"],
            1,
            "PARTLY on H100 (CC 9.0): 1 of 2 kernels run",
        ),
        // PTX of ISA 9.9: no driver in the tables is known to take it.
        (
            "ptx-isa-9.9.fatbin",
            &["--gpu", "H100"],
            2,
            "UNKNOWN on H100 (CC 9.0): ",
        ),
        (
            "ptx-isa-9.9.fatbin",
            &["--gpu", "H100", "--driver", "580.65.06"],
            1,
            "NO on H100 (CC 9.0, driver 580.65.06): none of its 2 kernels runs",
        ),
        // An sm_80 entry header around an sm_90 cubin: cuobjdump says sm_90; the driver's
        // choice is not established, so not "yes" on A100.
        (
            "header-sm_80-holds-sm_90.fatbin",
            &["--gpu", "A100"],
            2,
            "UNKNOWN on A100 (CC 8.0): ",
        ),
        (
            "header-sm_80-holds-sm_90.fatbin",
            &["--gpu", "T4"],
            1,
            "NO on T4 (CC 7.5): none of its 2 kernels runs",
        ),
    ];
    for (file, args, code, head) in cases {
        let (got, out) = headline(&one_image(file), args);
        assert!(
            got == *code && out.starts_with(&format!("{file}: {head}")),
            "{file} {args:?}: exit {got}, want {code}: {out}"
        );
    }
    // What the header hides is said.
    let (_, json, _) = fatkit_tests::fatkit_in_process(&[
        "audit",
        &one_image("header-sm_80-holds-sm_90.fatbin")
            .display()
            .to_string(),
        "--gpu",
        "A100",
        "--json",
    ]);
    assert!(
        json.contains("the fatbin entry says sm_80 but holds sm_90 cubin")
            && json.contains("\"image_target\": \"sm_90\""),
        "{json}"
    );
}

/// Kernels are known by their module: two containers with same-named kernels do not cover
/// each other, and a declaration record excuses only the container it is bound to.
#[test]
fn kernels_and_declarations_are_known_by_their_module() {
    let dir = fatkit_tests::temp_dir("by-module");
    // An application module for sm_80 + sm_90 + sm_120 and a dependency's for sm_90 only,
    // both with kernels a and b, in one binary.
    let mut lib = b"a host binary, not an ELF for the test\0\0\0\0\0\0\0\0".to_vec();
    lib.extend(std::fs::read(fixture("plain.fatbin")).unwrap());
    let at = lib.len();
    lib.extend(gpu("sm_90.fatbin"));
    let two = dir.join("two-modules.so");
    std::fs::write(&two, &lib).unwrap();
    let (code, out) = headline(&two, &["--require", "sm_80 sm_90"]);
    assert_eq!(code, 1, "{out}");
    let (_, json, _) = fatkit_tests::fatkit_in_process(&[
        "audit",
        &two.display().to_string(),
        "--require",
        "sm_80 sm_90",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let gaps: Vec<String> = v["files"][0]["require"]["gaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            format!(
                "{} {} {}",
                g["module"].as_str().unwrap(),
                g["kernel"],
                g["target"]
            )
        })
        .collect();
    let module = format!("{}@{at:#x}", two.display());
    assert_eq!(
        gaps,
        [
            format!("{module} \"a\" \"sm_80\""),
            format!("{module} \"b\" \"sm_80\""),
        ],
        "{json}"
    );

    // An sm_80-only library with a record bound to another fatbin: still NO on H100.
    let sm80 = gpu("sm_80.fatbin");
    let record = |bound: &[u8]| {
        format!(
            "\0fatkit:declared:v2;module=k;fatbin={}:{:016x};a=sm_80;b=sm_80;end;\0",
            bound.len(),
            fatkit_arch::fingerprint::fingerprint(bound)
        )
    };
    let mut other = b"a host binary, not an ELF for the test\0\0\0\0\0\0\0\0".to_vec();
    other.extend(&sm80);
    other.extend(record(&std::fs::read(fixture("plain.fatbin")).unwrap()).as_bytes());
    let other_path = dir.join("bound-elsewhere.so");
    std::fs::write(&other_path, &other).unwrap();
    let (code, out) = headline(&other_path, &["--gpu", "H100"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.starts_with("bound-elsewhere.so: NO on H100"), "{out}");
    // Bound to its own fatbin, the crate's declaration stands: not failures.
    let mut own = b"a host binary, not an ELF for the test\0\0\0\0\0\0\0\0".to_vec();
    own.extend(&sm80);
    own.extend(record(&sm80).as_bytes());
    let own_path = dir.join("bound-here.so");
    std::fs::write(&own_path, &own).unwrap();
    let (code, out) = headline(&own_path, &["--gpu", "H100"]);
    assert_eq!(code, 0, "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A library with device code but no kernel (libcufftw, CUPTI's libnvperf) is said to have
/// none, and fails nothing; beside a library that runs, the answer is that library's.
#[test]
fn a_library_without_kernels_is_said_to_have_none() {
    let dir = fatkit_tests::temp_dir("no-kernels");
    // A container whose only image holds no kernel: no-kernels.cu's sm_90 cubin, alone.
    let empty = std::fs::read(one_image("empty-sm_90.fatbin")).unwrap();
    let report = fatkit_fatbin::inspect::inspect(
        "x",
        &empty,
        fatkit_fatbin::inspect::Depth::Headers,
        &fatkit_fatbin::Limits::default(),
    );
    let second = usize::try_from(report.containers[0].entries[1].offset).unwrap();
    // Keep the container header, then the second entry (sm_90, no kernels) alone.
    let mut lib = b"a host library, not an ELF for the test\0\0\0\0\0\0\0\0".to_vec();
    let mut container = empty[..16].to_vec();
    container.extend(&empty[second..]);
    let len = (container.len() - 16) as u64;
    container[8..16].copy_from_slice(&len.to_le_bytes());
    lib.extend(&container);
    let path = dir.join("libnokernels.so");
    std::fs::write(&path, &lib).unwrap();
    let (code, out) = headline(&path, &["--gpu", "H100"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.starts_with("libnokernels.so: no kernels on H100 (CC 9.0): it holds device code but no kernel to launch"),
        "{out}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A library like cuBLAS: a general build (here full's sm_75 to sm_120) and kernel families
/// built for one architecture, which the library chooses per GPU. Families for other GPUs
/// are named apart, not failures; `--strict` counts them; a GPU the general build misses is
/// NO whatever the families hold.
#[test]
fn families_for_other_gpus_are_named_apart_not_failures() {
    let dir = fatkit_tests::temp_dir("families");
    let mut lib = b"a host binary, not an ELF for the test\0\0\0\0\0\0\0\0".to_vec();
    for f in [
        "full.fatbin",
        "sm_80.fatbin",
        "sm_75.fatbin",
        "sm_90.fatbin",
    ] {
        lib.extend(gpu(f));
        lib.extend([0u8; 16]);
    }
    let path = dir.join("libblas-like.so");
    std::fs::write(&path, &lib).unwrap();
    let run = |args: &[&str]| audit_as(&path, "libblas-like.so", args);
    let (code, out) = run(&["--gpu", "H100"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("libblas-like.so: yes on H100 (CC 9.0): 4 of 8 kernels run; 4 are built for other GPUs only (below)\n"), "{out}");
    assert!(
        out.contains(
            "(its general build: 1 of 4 containers; 3 are families for fewer GPUs, chosen per GPU)"
        ),
        "{out}"
    );
    assert!(
        out.contains("4 kernels in 2 containers built only for other GPUs: sm_75 (2), sm_80 (2)\n"),
        "{out}"
    );
    // The arch list is the general build's, not a union with the families.
    assert!(
        out.contains(
            "CMAKE_CUDA_ARCHITECTURES=\"75-real;80-real;86-real;89-real;90-real;100-real;120\""
        ),
        "{out}"
    );
    let (code, out) = run(&["--gpu", "H100", "--strict"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.starts_with("libblas-like.so: PARTLY on H100 (CC 9.0): 4 of 8 kernels run\n"),
        "{out}"
    );
    // A V100: the general build has no sm_70 image, so nothing the library needs loads.
    let (code, out) = run(&["--gpu", "V100"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.starts_with("libblas-like.so: NO on V100 (CC 7.0): none of its 8 kernels runs; 6 are built for other GPUs only (below)\n"), "{out}");
    // The matrix agrees, cell by cell.
    let (code, out) = run(&["--gpu", "H100", "--gpu", "V100", "--gpu", "RTX 5090"]);
    assert_eq!(code, 1, "{out}");
    let (_, json, _) = fatkit_tests::fatkit_in_process(&[
        "audit",
        &path.display().to_string(),
        "--gpu",
        "H100",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let on = &v["files"][0]["libraries"][0]["on"][0];
    assert_eq!(on["answer"], "runs", "{json}");
    let other: Vec<String> = on["for_other_gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            format!(
                "{} {}",
                g["targets"][0],
                g["kernels"].as_array().unwrap().len()
            )
        })
        .collect();
    assert_eq!(other, ["\"sm_75\" 2", "\"sm_80\" 2"], "{json}");
    assert_eq!(
        v["files"][0]["libraries"][0]["general"]["families"], 3,
        "{json}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A directory of wheels (as `pip download` leaves them) is an environment: each wheel is its
/// own distribution, and its libraries are named, not the wheel.
#[test]
fn each_wheel_in_a_directory_is_its_own_distribution() {
    let dir = fatkit_tests::temp_dir("wheels");
    let wheels = dir.join("wheels");
    std::fs::create_dir_all(&wheels).unwrap();
    for (wheel, file, fixture_name) in [
        (
            "alpha-1.0-py3-none-any.whl",
            "alpha/lib/libk.so",
            "plain.fatbin",
        ),
        (
            "beta_gpu-2.5-py3-none-any.whl",
            "beta/kernels.fatbin",
            "ptx-jit.fatbin",
        ),
    ] {
        let tree = dir.join(wheel.split('-').next().unwrap());
        let path = tree.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::copy(fixture(fixture_name), &path).unwrap();
        let top = tree.join(file.split('/').next().unwrap());
        let ok = std::process::Command::new("python3")
            .args(["-m", "zipfile", "-c"])
            .arg(wheels.join(wheel))
            .arg(&top)
            .status()
            .unwrap()
            .success();
        assert!(ok, "python3 -m zipfile could not make {wheel}");
    }
    let (code, out, _) = audit(&[wheels.to_str().unwrap(), "--gpu", "T4"]);
    assert_eq!(code, 1, "{out}");
    let out = out.replace(&wheels.display().to_string(), "wheels");
    let head: Vec<&str> = out.lines().take(4).collect();
    expect![[r#"
        [
            "wheels: PARTLY on T4 (CC 7.5): 2 of 4 kernels in 2 libraries run",
            "  alpha 1.0: NO",
            "    alpha/lib/libk.so    NO   0 of 2 kernels run",
            "  beta_gpu 2.5: yes (1 library)",
        ]
    "#]]
    .assert_debug_eq(&head);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Libraries that are variants of one another (bitsandbytes' one per CUDA release) are
/// alternatives: judged by the one loaded where that is known (torch's CUDA), UNKNOWN where
/// they differ and it is not, never as if all were loaded.
#[test]
fn variants_are_judged_by_the_one_loaded() {
    let dir = fatkit_tests::temp_dir("variants");
    let lib = |bytes: Vec<u8>| {
        let mut lib = b"a host library, not an ELF for the test\0\0\0\0\0\0\0\0".to_vec();
        lib.extend(bytes);
        lib
    };
    let site = dir.join("site");
    let bnb = site.join("bitsandbytes");
    std::fs::create_dir_all(&bnb).unwrap();
    std::fs::write(
        bnb.join("libbitsandbytes_cuda118.so"),
        lib(gpu("sm_80.fatbin")),
    )
    .unwrap();
    std::fs::write(
        bnb.join("libbitsandbytes_cuda132.so"),
        lib(gpu("sm_90.fatbin")),
    )
    .unwrap();
    let run = |args: &[&str]| audit_as(&site, "site", args);
    // Which one is loaded is not known, and they differ on an A100: UNKNOWN, not PARTLY.
    let (code, out) = run(&["--gpu", "A100"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.starts_with("site: UNKNOWN on A100 (CC 8.0): 2 of 4 kernels in 2 libraries run, and whether it does depends on which variant is loaded (below)\n"), "{out}");
    assert!(out.contains("  bitsandbytes/libbitsandbytes_cuda{118,132}.so: 2 variants, of which one is loaded\n    on A100: run: CUDA 11.8; do not: CUDA 13.2\n    loaded: not known ("), "{out}");
    assert!(
        out.contains("    fix:    have the CUDA 11.8 variant loaded: a torch built with CUDA 11.8, or BNB_CUDA_VERSION=118\n"),
        "{out}"
    );
    // Where all agree, that is the answer.
    let (code, out) = run(&["--gpu", "RTX 5090"]);
    assert_eq!(code, 1, "{out}");
    // With torch beside it, built by CUDA 13.2: bitsandbytes loads the cuda132 variant.
    let torch = site.join("torch/lib");
    std::fs::create_dir_all(&torch).unwrap();
    std::fs::write(torch.join("libtorch_cuda.so"), lib(gpu("full.fatbin"))).unwrap();
    let (code, out) = run(&["--gpu", "A100"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("    loaded: bitsandbytes/libbitsandbytes_cuda132.so (bitsandbytes loads the variant of torch's CUDA (13.2, "), "{out}");
    let (code, out) = run(&["--gpu", "H100"]);
    assert_eq!(code, 0, "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The CUDA runtime a host file links needs a driver of its own major before any image is
/// chosen (docs/ARCH_RULES.md section 3). Built here as a linker leaves it, with gcc: a shared
/// library holding `plain.fatbin` in `.nv_fatbin` and linked against a `libcudart.so.12`
/// (its `DT_NEEDED`), and an executable whose object carries fatkit's `.fatkit.cudart` record
/// (`static 13.2`), linked with `--gc-sections` and stripped. audit says each runtime and its
/// driver, and answers NO on a GPU whose driver is older, naming the runtime's error.
#[test]
fn the_runtime_a_file_links_decides_before_its_images() {
    let dir = std::env::temp_dir().join(format!("fatkit-audit-runtime-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let run = |cmd: &mut std::process::Command| {
        let out = cmd.current_dir(&dir).output().unwrap();
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    std::fs::write(
        dir.join("rt.c"),
        "int cudaFree(void* p) { (void)p; return 0; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("k.c"),
        "int cudaFree(void*);\nint k(void) { return cudaFree(0); }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("m.c"),
        "int k(void);\nint main(void) { return k(); }\n",
    )
    .unwrap();
    run(std::process::Command::new("gcc").args([
        "-shared",
        "-fPIC",
        "-Wl,-soname,libcudart.so.12",
        "rt.c",
        "-o",
        "libcudart.so.12",
    ]));
    run(std::process::Command::new("gcc").args(["-c", "-fPIC", "k.c", "-o", "k.o"]));
    run(std::process::Command::new("objcopy")
        .arg(format!(
            "--add-section=.nv_fatbin={}",
            fixture("plain.fatbin").display()
        ))
        .arg("k.o"));
    run(std::process::Command::new("gcc").args([
        "-shared",
        "k.o",
        "-o",
        "libk.so",
        "-L.",
        "-l:libcudart.so.12",
    ]));
    std::fs::write(dir.join("record"), "static 13.2\n").unwrap();
    run(std::process::Command::new("objcopy")
        .arg("--add-section=.fatkit.cudart=record")
        .arg("k.o"));
    run(std::process::Command::new("ar").args(["crs", "libk.a", "k.o"]));
    run(std::process::Command::new("gcc").args([
        "-Wl,--gc-sections",
        "m.c",
        "-o",
        "app",
        "-L.",
        "-l:libk.a",
        "-l:libcudart.so.12",
    ]));
    run(std::process::Command::new("strip").arg("app"));

    let shared = dir.join("libk.so").display().to_string();
    let (code, out, _) = fatkit_tests::fatkit_in_process(&["audit".to_owned(), shared.clone()]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("\n  runtime:    the system's CUDA 12 runtime (libcudart.so.12) (DT_NEEDED libcudart.so.12): driver >= 525.60.13 (CUDA 12.0)\n"),
        "{out}"
    );
    let (code, out, _) = fatkit_tests::fatkit_in_process(
        &["audit", &shared, "--gpu", "H100", "--driver", "11.8"].map(str::to_owned),
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(": NO on H100 ")
            && out.contains("none of its 2 kernels runs: the CUDA runtime it links needs a newer driver (below)")
            && out.contains("2 of 2 kernels do not run on H100, by reason:\n         2  driver CUDA 11.8 level (11080) is older than the system's CUDA 12 runtime (libcudart.so.12) (DT_NEEDED libcudart.so.12) needs (525.60.13): its first runtime call fails with cudaErrorInsufficientDriver (35), before any kernel loads\n            a, b\n")
            && !out.contains("cubin is from CUDA 13.2"),
        "{out}"
    );

    // Both runtimes in the stripped executable: the record survived linking and strip.
    let app = dir.join("app").display().to_string();
    let (code, out, _) = fatkit_tests::fatkit_in_process(
        &["audit", &app, "--gpu", "H100", "--driver", "12.8"].map(str::to_owned),
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("the CUDA 13.2 runtime, linked statically (fatkit's record)")
            && out.contains("is older than the CUDA 13.2 runtime, linked statically (fatkit's record) needs (580.65.06): its first runtime call fails"),
        "{out}"
    );
    let (code, out, _) = fatkit_tests::fatkit_in_process(
        &["audit", &app, "--gpu", "H100", "--driver", "13.0"].map(str::to_owned),
    );
    assert_eq!(code, 0, "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
