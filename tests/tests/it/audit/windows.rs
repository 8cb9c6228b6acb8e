//! Windows binaries (issue 54, item 4): a DLL built as nvcc and the MSVC linker lay one out
//! (`fatkit_fuzz::pe`: the fatbin in `.nv_fatb`, its wrapper in `.nvFatBi`, an import of
//! `cudart64_12.dll`) is audited as its Linux twin is (the same fatbin in `.nv_fatbin` of a
//! shared library whose `DT_NEEDED` names `libcudart.so.12`, linked here with gcc): the same
//! targets, kernels and answers, its containers in section `.nv_fatb`, its machine, and the
//! driver floor of the runtime it imports. The ARM64 kinds the same; a truncated or malformed
//! image is an error naming the file, never a panic.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

use fatkit_fatbin::host::Machine;
use fatkit_fatbin::inspect::{inspect, Depth, FileReport};
use fatkit_fatbin::runtime::{LinkedRuntime, Linking};
use fatkit_fatbin::{Format, Limits, Origin};
use fatkit_fuzz::pe::{Dll, ARM64, X64};
use fatkit_tests::{fatkit_in_process, library_rows, repo_root, temp_dir, Rng};

/// Seven cubins (sm_75 to sm_120) and compute_120 PTX of two kernels, built by CUDA 13.2.
fn fatbin() -> Vec<u8> {
    std::fs::read(repo_root().join("tests/fixtures/gpu/full.fatbin")).unwrap()
}

/// The Linux twin: `full.fatbin` in `.nv_fatbin` of `libk.so`, linked against a
/// `libcudart.so.12` (its `DT_NEEDED`), as `audit_driver` builds one.
fn linux_twin(dir: &Path) -> PathBuf {
    let run = |args: &[&str]| {
        let (program, args) = args.split_first().unwrap();
        let out = Command::new(program)
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
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
    std::fs::write(dir.join("full.fatbin"), fatbin()).unwrap();
    run(&[
        "gcc",
        "-shared",
        "-fPIC",
        "-Wl,-soname,libcudart.so.12",
        "rt.c",
        "-o",
        "libcudart.so.12",
    ]);
    run(&["gcc", "-c", "-fPIC", "k.c", "-o", "k.o"]);
    run(&["objcopy", "--add-section=.nv_fatbin=full.fatbin", "k.o"]);
    run(&[
        "gcc",
        "-shared",
        "k.o",
        "-o",
        "libk.so",
        "-L.",
        "-l:libcudart.so.12",
    ]);
    dir.join("libk.so")
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.display().to_string()
}

/// `audit --json ARGS` of `file`: the verdict of each library, its name left out.
fn verdicts(file: &str, args: &[&str]) -> Vec<String> {
    let mut argv = vec!["audit", "--json", file];
    argv.extend(args);
    let (_, out, err) = fatkit_in_process(&argv);
    assert!(err.is_empty(), "{err}");
    library_rows(&out).into_iter().map(|(_, _, v)| v).collect()
}

/// Each entry of a container: its target and kernels.
type Entries = Vec<(String, Vec<String>)>;

/// Each container's origin, and each entry's target and kernels.
fn device_code(report: &FileReport) -> Vec<(Origin, Entries)> {
    report
        .containers
        .iter()
        .map(|c| {
            let entries = c.entries.iter().map(|e| {
                (
                    e.target.map(|t| t.to_string()).unwrap_or_default(),
                    e.kernels.clone(),
                )
            });
            (c.origin.clone(), entries.collect())
        })
        .collect()
}

#[test]
fn a_dll_is_audited_as_its_linux_twin() {
    let dir = temp_dir("windows-twin");
    let linux = linux_twin(&dir);
    let fatbin = fatbin();
    let dll = Dll::x64(&fatbin, &["KERNEL32.dll", "cudart64_12.dll"]).write();
    let path = write(&dir, "kernels.dll", &dll);

    let report = inspect("kernels.dll", &dll, Depth::Kernels, &Limits::default());
    let twin = inspect(
        "libk.so",
        &std::fs::read(&linux).unwrap(),
        Depth::Kernels,
        &Limits::default(),
    );
    assert_eq!((report.format, twin.format), (Format::Pe, Format::Elf));
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let (ours, theirs) = (device_code(&report), device_code(&twin));
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert_eq!(ours[0].0, Origin::Section(".nv_fatb".to_owned()));
    assert_eq!(theirs[0].0, Origin::Section(".nv_fatbin".to_owned()));
    assert_eq!(ours[0].1, theirs[0].1);
    assert_eq!(ours[0].1.len(), 8, "{ours:?}");
    assert_eq!(
        (report.machine, twin.machine),
        (Some(Machine::X86_64), Some(Machine::X86_64))
    );
    assert_eq!(
        report.runtimes,
        [LinkedRuntime {
            linking: Linking::Shared,
            cuda: fatkit_arch::toolkit::CudaVersion::new(12, 0),
            from: "import cudart64_12.dll".to_owned(),
        }]
    );
    assert_eq!(twin.runtimes[0].needs(), report.runtimes[0].needs());

    // The whole answer, on GPUs each image kind decides, and below the runtime's floor.
    let linux = linux.display().to_string();
    for args in [
        &["--gpu", "H100"][..],
        &["--gpu", "RTX 5090"],
        &["--gpu", "T4", "--driver", "11.8"],
        &["--gpu", "RTX 6000 Ada", "--driver", "12.8"],
    ] {
        assert_eq!(verdicts(&path, args), verdicts(&linux, args), "{args:?}");
    }
    let (code, out, _) = fatkit_in_process(&["audit", &path]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("\n  runtime:    the system's CUDA 12 runtime (cudart64_12.dll) (import cudart64_12.dll): driver >= 525.60.13 (CUDA 12.0)\n"),
        "{out}"
    );
    let (code, out, _) = fatkit_in_process(&["audit", &path, "--gpu", "H100", "--driver", "11.8"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(": NO on H100 ")
            && out.contains("the system's CUDA 12 runtime (cudart64_12.dll) (import cudart64_12.dll) needs (525.60.13): its first runtime call fails with cudaErrorInsufficientDriver (35)"),
        "{out}"
    );
    let (_, json, _) = fatkit_in_process(&["audit", "--json", &path]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let file = &v["files"][0];
    assert_eq!(file["report"]["format"], "pe");
    assert_eq!(
        file["report"]["containers"][0]["origin"]["section"],
        ".nv_fatb"
    );
    assert_eq!(file["libraries"][0]["machine"], "x86_64");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What stops `file` first on `gpu` (`answer.on[0].blocker`), null for nothing.
fn blocker(file: &str, gpu: &str) -> serde_json::Value {
    let (_, out, _) = fatkit_in_process(&["audit", "--json", file, "--gpu", gpu]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["files"][0]["answer"]["on"][0]["blocker"].clone()
}

/// ARM64, and the hybrid kinds told apart by their CHPE metadata: each reports its machine,
/// and is otherwise the x64 DLL's answer; on a GPU that lives only in aarch64 machines (GB10)
/// the x64 DLL is refused for its machine and the Arm ones are not.
#[test]
fn arm64_dlls_report_their_machine() {
    let dir = temp_dir("windows-arm64");
    let fatbin = fatbin();
    let imports = ["cudart64_12.dll"];
    let x64 = write(&dir, "x64.dll", &Dll::x64(&fatbin, &imports).write());
    for (machine, hybrid, expected, json) in [
        (ARM64, false, Machine::Aarch64, "aarch64"),
        (X64, true, Machine::Arm64ec, "arm64ec"),
        (ARM64, true, Machine::Arm64x, "arm64x"),
    ] {
        let bytes = Dll {
            machine,
            hybrid,
            ..Dll::x64(&fatbin, &imports)
        }
        .write();
        let report = inspect("arm.dll", &bytes, Depth::Kernels, &Limits::default());
        assert_eq!(report.machine, Some(expected), "{json}");
        assert_eq!(
            report.containers[0].origin,
            Origin::Section(".nv_fatb".to_owned())
        );
        assert_eq!(report.runtimes[0].from, "import cudart64_12.dll");
        let path = write(&dir, &format!("{json}.dll"), &bytes);
        assert_eq!(
            verdicts(&path, &["--gpu", "H100"]),
            verdicts(&x64, &["--gpu", "H100"])
        );
        let (_, out, _) = fatkit_in_process(&["audit", "--json", &path]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["files"][0]["libraries"][0]["machine"], json);
        assert_eq!(blocker(&path, "GB10"), serde_json::Value::Null, "{json}");
    }
    assert_eq!(blocker(&x64, "GB10")["kind"], "platform");
    assert_eq!(blocker(&x64, "GB10")["machine"], "x86_64");
    let (code, out, _) = fatkit_in_process(&["audit", &x64, "--gpu", "GB10"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("built for x86-64 machines, and GB10 lives only in aarch64 ones"),
        "{out}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A runtime delay-loaded counts as one imported; an 11.x DLL says 11, a 10.1 DLL its release.
#[test]
fn a_delay_loaded_or_older_runtime_sets_the_floor_too() {
    let fatbin = fatbin();
    let bytes = Dll {
        delayed: &["cudart64_110.dll"],
        ..Dll::x64(&fatbin, &["KERNEL32.dll", "cudart64_101.dll"])
    }
    .write();
    let report = inspect("old.dll", &bytes, Depth::Headers, &Limits::default());
    let runtimes: Vec<(String, String, String)> = report
        .runtimes
        .iter()
        .map(|r| (r.from.clone(), r.cuda.to_string(), r.needs().to_string()))
        .collect();
    let row =
        |from: &str, cuda: &str, needs: &str| (from.to_owned(), cuda.to_owned(), needs.to_owned());
    assert_eq!(
        runtimes,
        [
            row("import cudart64_101.dll", "10.1", "10.1"),
            row("delay-load import cudart64_110.dll", "11.0", "11.0"),
        ]
    );
}

/// Every cut of the image, and bytes flipped over its headers: never a panic. A cut through
/// the headers is a malformed image, one through `.nv_fatb` a truncated section; `audit` names
/// the file and exits 2, and what the scan still finds whole it reports.
#[test]
fn a_truncated_or_malformed_dll_is_an_error_naming_the_file() {
    let dir = temp_dir("windows-malformed");
    let fatbin = fatbin();
    let dll = Dll::x64(&fatbin, &["cudart64_12.dll"]).write();
    let limits = Limits::default();
    for len in (0..dll.len()).step_by(61) {
        let _ = inspect("cut.dll", &dll[..len], Depth::Kernels, &limits);
    }
    let mut rng = Rng(0x5EED_0000_0054);
    for _ in 0..2000 {
        let mut bytes = dll.clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(0x400);
            bytes[at] = rng.next_u64() as u8;
        }
        let _ = inspect("flipped.dll", &bytes, Depth::Kernels, &limits);
    }

    // Cut in the section table: the headers do not parse.
    let headers = write(&dir, "headers.dll", &dll[..0x1c0]);
    let report = inspect("headers.dll", &dll[..0x1c0], Depth::Headers, &limits);
    assert_eq!(report.format, Format::Pe);
    assert!(
        report
            .errors
            .iter()
            .any(|e| e.contains("malformed PE image: ")),
        "{:?}",
        report.errors
    );
    let (code, out, err) = fatkit_in_process(&["audit", &headers]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        out.contains("headers.dll") && out.contains("malformed PE image: "),
        "{out}{err}"
    );

    // Cut inside `.nv_fatb`.
    let section = dll.windows(8).position(|w| w == b".nv_fatb").unwrap();
    let start = u32::from_le_bytes(dll[section + 20..section + 24].try_into().unwrap()) as usize;
    let cut = &dll[..start + fatbin.len() / 2];
    let path = write(&dir, "cut.dll", cut);
    let report = inspect("cut.dll", cut, Depth::Headers, &limits);
    assert!(
        report
            .errors
            .iter()
            .any(|e| e.contains("truncated PE section")),
        "{:?}",
        report.errors
    );
    let (code, out, err) = fatkit_in_process(&["audit", &path]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        out.contains("cut.dll") && out.contains("truncated PE section"),
        "{out}{err}"
    );

    // An MS-DOS program that is no PE image is read as any file.
    let dos = inspect("a.exe", b"MZ\x90\0 not a PE image", Depth::Headers, &limits);
    assert_eq!((dos.format, dos.machine), (Format::Other, None));
    assert!(dos.errors.is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}
