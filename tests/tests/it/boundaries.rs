//! Issue 53, trust at the boundaries, on the audit side: reading an input never runs it,
//! nothing it names is printed raw, what cannot be read decides nothing and every `FAILS`
//! fails.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::{Path, PathBuf};

use fatkit_fuzz::hostile::container;
use fatkit_tests::{fatkit_in_process, temp_dir};

/// A container with one PTX kernel for compute_70: runs on a V100 by JIT.
fn ptx_kernel_file(dir: &Path, name: &str) -> PathBuf {
    let text = ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry k()\n{\nret;\n}\n";
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, container(&[(1, 70, 0, text.as_bytes().to_vec(), 0)])).unwrap();
    path
}

/// `audit --python ENV` ran the environment's interpreter (`-I -c ...`), which processed its
/// `.pth` files' `import` lines and its `sitecustomize.py`; an interpreter that is a script
/// was run and what it printed was audited. The environment is read from its layout now:
/// nothing of it runs, and its site-packages are found all the same.
#[test]
fn auditing_an_environment_runs_none_of_its_code() {
    let dir = temp_dir("boundaries-env-runs-nothing");
    let env = dir.join("env");
    let site = env.join("lib/python3.12/site-packages");
    let marker = |what: &str| dir.join(format!("ran-{what}"));
    std::fs::create_dir_all(env.join("bin")).unwrap();
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(
        env.join("pyvenv.cfg"),
        "home = /usr/bin\nversion = 3.12.1\n",
    )
    .unwrap();
    let script = format!(
        "#!/bin/sh\ntouch {}\necho {}\n",
        marker("interpreter").display(),
        dir.display()
    );
    for name in ["python3", "python"] {
        let python = env.join("bin").join(name);
        std::fs::write(&python, &script).unwrap();
        let mut perms = std::fs::metadata(&python).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&python, perms).unwrap();
    }
    std::fs::write(
        site.join("evil.pth"),
        format!(
            "import os; open({:?}, 'w')\n",
            marker("pth").display().to_string()
        ),
    )
    .unwrap();
    std::fs::write(
        site.join("sitecustomize.py"),
        format!(
            "open({:?}, 'w')\n",
            marker("sitecustomize").display().to_string()
        ),
    )
    .unwrap();
    ptx_kernel_file(&site, "pkg/kernels.fatbin");
    // A file the script's output would name: audited only if the script ran.
    ptx_kernel_file(&dir, "decoy/printed.fatbin");

    for python in [env.clone(), env.join("bin/python3")] {
        let (code, out, err) = fatkit_in_process(&[
            "audit",
            "--python",
            python.to_str().unwrap(),
            "--gpu",
            "V100",
        ]);
        for what in ["interpreter", "pth", "sitecustomize"] {
            assert!(
                !marker(what).exists(),
                "{python:?} ran its {what}: {out}{err}"
            );
        }
        assert_eq!(code, 0, "{python:?}: {out}{err}");
        assert!(out.contains("kernels.fatbin"), "{python:?}: {out}");
        assert!(!out.contains("printed.fatbin"), "{python:?}: {out}");
    }
}

/// `[package.metadata.fatkit] launcher = "kernels/tool.sh"` ran a file of the crate for every
/// cubin job. A crate's metadata names a known launcher or none: a path, or a program that is
/// not a launcher, is refused before anything runs, in the package's table and the
/// workspace's, naming the manifest and the way to run it on purpose.
#[test]
fn a_crates_metadata_names_no_program_of_its_own() {
    let dir = temp_dir("boundaries-metadata-launcher");
    let kernel = "__global__ void k(float *x) { x[0] = 1.0f; }\n";
    for (i, (table, value)) in [
        ("package", "kernels/tool.sh"),
        ("package", "sh"),
        ("workspace", "./kernels/tool.sh"),
        ("workspace", "/bin/true"),
    ]
    .iter()
    .enumerate()
    {
        let case = dir.join(format!("case-{i}"));
        let marker = case.join("ran");
        std::fs::create_dir_all(case.join("src")).unwrap();
        std::fs::create_dir_all(case.join("kernels")).unwrap();
        std::fs::write(case.join("src/lib.rs"), "").unwrap();
        std::fs::write(case.join("k.cu"), kernel).unwrap();
        let tool = case.join("kernels/tool.sh");
        std::fs::write(
            &tool,
            format!("#!/bin/sh\ntouch {}\nexec \"$@\"\n", marker.display()),
        )
        .unwrap();
        let mut perms = std::fs::metadata(&tool).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&tool, perms).unwrap();
        let (package_line, workspace_line) = match *table {
            "package" => (format!("launcher = {value:?}\n"), String::new()),
            _ => (
                String::new(),
                format!("[workspace.metadata.fatkit]\nlauncher = {value:?}\n"),
            ),
        };
        let manifest = case.join("Cargo.toml");
        std::fs::write(
            &manifest,
            format!(
                "[package]\nname = \"victim\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[package.metadata.fatkit]\nprofile = \"dev\"\nsources = [\"k.cu\"]\n{package_line}\n[workspace]\n\n{workspace_line}"
            ),
        )
        .unwrap();
        let (code, out, err) = fatkit_in_process(&[
            "build-kernels",
            "--offline",
            "--manifest-path",
            manifest.to_str().unwrap(),
        ]);
        assert_eq!(code, 2, "{table} launcher = {value:?}: {out}{err}");
        assert!(
            err.contains(&format!("[{table}.metadata.fatkit]"))
                && err.contains("Cargo.toml")
                && err.contains("known launcher")
                && err.contains("FATKIT_LAUNCHER"),
            "{table} launcher = {value:?}: {err}"
        );
        assert!(!marker.exists(), "{table} launcher = {value:?} ran");
    }
}

/// `fatkit plan DIR --write X` renamed over whatever X was: a FIFO or a device node became a
/// regular file (as root, `--write /dev/null` replaced the machine's `/dev/null`), and an
/// existing `Cargo.toml` was overwritten with a profile. The one writer refuses anything
/// there that is not a regular file, and `--write` replaces only a profile `plan` wrote. The
/// device node is made here, in a scratch directory (never a system path).
#[test]
fn plan_write_replaces_only_a_profile_it_wrote() {
    let dir = temp_dir("boundaries-plan-write");
    let modules = dir.join("modules");
    std::fs::create_dir_all(&modules).unwrap();
    let prebuilt = fatkit_tests::repo_root().join("crates/fatkit-example-kernels/kernels/prebuilt");
    for file in std::fs::read_dir(prebuilt).unwrap() {
        let file = file.unwrap().path();
        std::fs::copy(&file, modules.join(file.file_name().unwrap())).unwrap();
    }
    let plan = |to: &Path| {
        fatkit_in_process(&[
            "plan",
            modules.to_str().unwrap(),
            "--budget",
            "1MiB",
            "--write",
            to.to_str().unwrap(),
        ])
    };
    let fifo = dir.join("fifo.toml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let mut cases: Vec<(PathBuf, &str)> = vec![(fifo, "a FIFO")];
    let device = dir.join("null.toml");
    let mknod = std::process::Command::new("mknod")
        .arg(&device)
        .args(["c", "1", "3"])
        .status();
    if mknod.is_ok_and(|s| s.success()) {
        cases.push((device, "a device"));
    }
    let target = dir.join("target.toml");
    std::fs::write(&target, "# someone's file\n").unwrap();
    let link = dir.join("link.toml");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    cases.push((link.clone(), "a symbolic link"));
    let subdir = dir.join("subdir.toml");
    std::fs::create_dir_all(&subdir).unwrap();
    cases.push((subdir, "a directory"));
    for (path, kind) in &cases {
        let kind_before = std::fs::symlink_metadata(path).unwrap().file_type();
        let (code, out, err) = plan(path);
        assert_ne!(code, 0, "{kind}: {out}{err}");
        assert!(
            err.contains(&format!("{} is {kind}, not a regular file", path.display())),
            "{kind}: {err}"
        );
        assert_eq!(
            std::fs::symlink_metadata(path).unwrap().file_type(),
            kind_before,
            "{kind}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "# someone's file\n"
    );

    let manifest = dir.join("Cargo.toml");
    let cargo = "[package]\nname = \"mine\"\nversion = \"0.1.0\"\n";
    std::fs::write(&manifest, cargo).unwrap();
    let (code, out, err) = plan(&manifest);
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        err.contains("is not a profile `fatkit plan` wrote"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), cargo);

    // A new file, then the same file again: plan's own profile is replaced.
    let profile = dir.join("planned.toml");
    for _ in 0..2 {
        let (code, out, err) = plan(&profile);
        assert_eq!(code, 0, "{out}{err}");
    }
    assert!(std::fs::read_to_string(&profile)
        .unwrap()
        .starts_with("# Written by `fatkit plan`"));
    // No temporary is left behind by any refusal.
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("fatkit-tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A cubin whose ELF ABI byte fatkit did not know was "no readable image", answered "no
/// kernels", exit 0 (the H200's driver loads and runs it); one with flag bits fatkit did not
/// know was read as the SM it named. Any header fatkit cannot read makes the input UNKNOWN
/// (exit 2); and `--require` over a real cubin without kernels printed `FAILS` with exit 0:
/// every FAILS is a finding now.
#[test]
fn a_cubin_header_fatkit_cannot_read_decides_nothing_and_every_fails_fails() {
    let dir = temp_dir("boundaries-cubin-abi");
    let prebuilt = fatkit_tests::repo_root()
        .join("crates/fatkit-example-kernels/kernels/prebuilt/saxpy.fatbin");
    let real = fatkit_tests::image_of(&prebuilt, "sm_90");
    let patched = |name: &str, at: usize, byte: u8| {
        let mut bytes = real.clone();
        bytes[at] = byte;
        let path = dir.join(format!("{name}.cubin"));
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let cases = [
        (
            patched("os-abi", 7, 0x42),
            "an ELF ABI fatkit does not know",
        ),
        (
            patched("abi-version", 8, 9),
            "an ELF ABI fatkit does not know",
        ),
        (patched("flags", 50, 0x01), "set bits fatkit does not know"),
        (patched("sm", 49, 0x00), "which is no compute capability"),
    ];
    for (path, why) in &cases {
        for extra in [&[][..], &["--require", "sm_90"][..]] {
            let mut args = vec!["audit", path.to_str().unwrap(), "--gpu", "H100"];
            args.extend_from_slice(extra);
            let (code, out, err) = fatkit_in_process(&args);
            assert_eq!(code, 2, "{path:?} {extra:?}: {out}{err}");
            assert!(out.contains(why), "{path:?}: {out}");
            assert!(
                !out.contains(": yes") && !out.contains("no kernels on"),
                "{out}"
            );
        }
    }
    // The real one still reads.
    let fine = dir.join("real.cubin");
    std::fs::write(&fine, &real).unwrap();
    let (code, out, err) = fatkit_in_process(&["audit", fine.to_str().unwrap(), "--gpu", "H100"]);
    assert_eq!(code, 0, "{out}{err}");

    let Some(tc) = fatkit_tests::toolchain() else {
        return;
    };
    let source = dir.join("none.cu");
    std::fs::write(&source, "__device__ int x;\n").unwrap();
    let cubin = dir.join("none.cubin");
    let made = std::process::Command::new(tc.nvcc())
        .args(["-cubin", "-arch", "sm_90", "-o"])
        .arg(&cubin)
        .arg(&source)
        .status()
        .unwrap();
    assert!(made.success());
    let (code, out, err) =
        fatkit_in_process(&["audit", cubin.to_str().unwrap(), "--require", "sm_90"]);
    assert!(out.contains("FAILS"), "{out}{err}");
    assert_eq!(code, 1, "a FAILS that exits 0: {out}{err}");
}
