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
