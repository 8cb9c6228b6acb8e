//! `audit` judged as the driver loads a module: one image per module, a kernel found only in
//! it, declarations bound to their module, variants and runtimes, on the GPU fixtures.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};

use expect_test::expect;

use crate::audit::fixtures::{audit, fixture};

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
        // An sm_80 entry header around an sm_90 cubin: cuobjdump says sm_90, but the driver
        // chooses by the entry header (an H100 returned 209, docs/ARCH_RULES.md section 9):
        // no on H100; on A100 the driver takes the cubin, whose load is not established.
        (
            "header-sm_80-holds-sm_90.fatbin",
            &["--gpu", "A100"],
            2,
            "UNKNOWN on A100 (CC 8.0): ",
        ),
        (
            "header-sm_80-holds-sm_90.fatbin",
            &["--gpu", "H100"],
            1,
            "NO on H100 (CC 9.0): none of its 2 kernels runs",
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
    // Kernels whose fate is unknown are listed apart from those that do not run.
    let path = one_image("header-sm_80-holds-sm_90.fatbin");
    let (_, text, _) =
        fatkit_tests::fatkit_in_process(&["audit", &path.display().to_string(), "--gpu", "A100"]);
    assert!(
        text.contains("on A100: no kernel is known to run")
            && text.contains("2 of 2 kernels may or may not run on A100, because:")
            && !text.contains("do not run on A100")
            && !text.contains("no kernel runs"),
        "{text}"
    );
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
        json.contains("the driver chooses the cubin by its entry, which says sm_80, but the cubin itself is sm_90")
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
    // Bound to its own fatbin, the crate's declaration stands: its kernels are not failures
    // (no gap for sm_90 under --require), and still nothing of it runs on an H100: NO, the
    // kernels named as declared.
    let mut own = b"a host binary, not an ELF for the test\0\0\0\0\0\0\0\0".to_vec();
    own.extend(&sm80);
    own.extend(record(&sm80).as_bytes());
    let own_path = dir.join("bound-here.so");
    std::fs::write(&own_path, &own).unwrap();
    let own_arg = own_path.display().to_string();
    let (code, out, _) = fatkit_tests::fatkit_in_process(&["audit", &own_arg, "--gpu", "H100"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(": NO on H100") && out.contains("by their crate's declaration"),
        "{out}"
    );
    let (code, out, _) =
        fatkit_tests::fatkit_in_process(&["audit", &own_arg, "--require", "sm_80,sm_90"]);
    assert_eq!(code, 0, "declared, sm_90 is no gap: {out}");
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
            "wheels: NO on T4 (CC 7.5): 2 of 4 kernels in 2 libraries run",
            "  fix: this release of alpha is built for CC 8.0 and later, not for CC 7.5: use a GPU of CC 8.0 or later, or an earlier release of alpha built for CC 7.5, if one was",
            "  alpha 1.0: NO",
            "    alpha/lib/libk.so    NO   0 of 2 kernels run",
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
            && out.contains("nothing of it runs: the CUDA runtime it links needs a newer driver: it needs driver >= 525.60.13 (CUDA 12.0) (the system's CUDA 12 runtime (libcudart.so.12) (DT_NEEDED libcudart.so.12)), and driver CUDA 11.8 level (11080) is older; to run, it needs driver >= 580.65.06 (cubins from CUDA 13.2)")
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
