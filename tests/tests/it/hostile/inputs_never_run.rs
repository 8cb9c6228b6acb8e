//! Issue 53, trust at the boundaries, on the audit side: reading an input never runs it,
//! nothing it names is printed raw, what cannot be read decides nothing and every `FAILS`
//! fails.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::{Path, PathBuf};

use fatkit_fuzz::hostile::container;
use fatkit_tests::{fatkit_in_process, temp_dir, Rng};

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

/// Hostile names from the shared generator.
trait Hostile {
    /// A hostile name: letters mixed with line breaks, terminal escapes (clear line, conceal,
    /// cursor up), bells, DEL and C1 controls, and a forged line of fatkit's.
    fn hostile(&mut self) -> String;
}

impl Hostile for Rng {
    fn hostile(&mut self) -> String {
        const PARTS: &[&str] = &[
            "lib",
            "x",
            "\n",
            "\r",
            "\u{1b}[2K",
            "\u{1b}[8m",
            "\u{1b}[1A",
            "\u{7}",
            "\u{7f}",
            "\u{9b}31m",
            "\u{85}",
            "\nFORGED: yes on H100 (CC 9.0)\n",
            "\t",
            "-1.0",
        ];
        (0..1 + self.next_u64() % 6)
            .map(|_| PARTS[(self.next_u64() % PARTS.len() as u64) as usize])
            .collect::<String>()
            .replace(['/', '\0'], "_")
    }
}

/// Whether `text` is fatkit's own: no control character but line breaks, and no line a name
/// from the input forged.
fn only_fatkits(text: &str) -> Result<(), String> {
    if let Some(c) = text.chars().find(|&c| c.is_control() && c != '\n') {
        return Err(format!("a raw control character {c:?}"));
    }
    match text.lines().find(|l| l.trim_start().starts_with("FORGED")) {
        Some(line) => Err(format!("a forged line {line:?}")),
        None => Ok(()),
    }
}

/// A `docker save` archive of one layer, tagged `tag`, holding `files`.
fn docker_save(path: &Path, tag: &str, files: &[(String, Vec<u8>)]) {
    let mut layer = tar::Builder::new(Vec::new());
    for (name, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        layer.append_data(&mut h, name, &data[..]).unwrap();
    }
    let layer = layer.into_inner().unwrap();
    let mut b = tar::Builder::new(std::fs::File::create(path).unwrap());
    let manifest =
        serde_json::json!([{"Config": "c.json", "RepoTags": [tag], "Layers": ["l.tar"]}])
            .to_string();
    for (name, data) in [("l.tar", layer), ("manifest.json", manifest.into_bytes())] {
        let mut h = tar::Header::new_ustar();
        h.set_mode(0o444);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, name, &data[..]).unwrap();
    }
    b.finish().unwrap();
}

/// Names from inputs were printed raw: an image tag forged a first line `... yes on CC 9.0`,
/// and escape sequences from layer paths, dist-info names and dpkg versions reached the
/// terminal. Every input leaves the readers through one escaper now. Generated hostile names
/// go through every kind of input (a file's path, a directory's member, a distribution's name
/// and version, an image's tag, a layer's path, a Debian package and version, a kernel's
/// name), in the text report, `--require`, `--matrix` and `-v`: nothing but fatkit's lines.
#[test]
fn no_name_from_an_input_reaches_the_terminal_raw() {
    let dir = temp_dir("boundaries-hostile-names");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for case in 0..12 {
        let case_dir = dir.join(format!("case-{case}"));
        std::fs::create_dir_all(&case_dir).unwrap();
        let kernel = rng.hostile();
        let ptx = format!(
            ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry {}()\n{{\nret;\n}}\n",
            kernel.replace(['\n', '\r', '(', ' ', '\t'], "_")
        );
        let library = container(&[(1, 70, 0, ptx.into_bytes(), 0)]);
        let file = format!("{}.fatbin", rng.hostile());
        let (dist, version) = (rng.hostile(), rng.hostile());
        let (deb, deb_version) = (rng.hostile().replace([':', '\n'], "_"), rng.hostile());

        // A directory: a file, and a distribution's RECORD naming it.
        let site = case_dir.join("site");
        let info = format!(
            "{}-{}.dist-info",
            dist.replace('-', "_"),
            version.replace('-', "_")
        );
        std::fs::create_dir_all(site.join(&info)).unwrap();
        std::fs::create_dir_all(site.join("pkg")).unwrap();
        std::fs::write(site.join("pkg").join(&file), &library).unwrap();
        std::fs::write(site.join(&info).join("RECORD"), format!("pkg/{file},,\n")).unwrap();

        // An image: its tag, a layer path, a Debian package and version owning it.
        let image = case_dir.join("image.tar");
        let in_image = format!("usr/lib/{file}");
        docker_save(
            &image,
            &rng.hostile(),
            &[
                (in_image.clone(), library.clone()),
                (
                    "var/lib/dpkg/status".to_owned(),
                    format!("Package: {deb}\nVersion: {deb_version}\n\n").into_bytes(),
                ),
                (
                    format!("var/lib/dpkg/info/{deb}.list"),
                    format!("/{in_image}\n").into_bytes(),
                ),
            ],
        );

        let plain = case_dir.join(&file);
        std::fs::write(&plain, &library).unwrap();
        for input in [&plain, &site, &image] {
            for extra in [
                &["--gpu", "H100"][..],
                &["--gpu", "T4", "-v"][..],
                &["--require", "sm_80"][..],
                &["--matrix"][..],
            ] {
                let mut args = vec!["audit", input.to_str().unwrap()];
                args.extend_from_slice(extra);
                let (_, out, err) = fatkit_in_process(&args);
                if let Err(why) = only_fatkits(&format!("{out}{err}")) {
                    panic!("case {case}, {input:?} {extra:?}: {why}:\n{out}{err}");
                }
            }
        }
    }
}

/// A compile error quotes the crate's source, which may hold terminal escapes: the build's
/// report prints them escaped, each line of the compiler's output marked as its.
#[test]
fn a_compilers_diagnostic_quoting_the_source_is_printed_escaped() {
    if fatkit_tests::toolchain().is_none() {
        return;
    }
    let dir = temp_dir("boundaries-diagnostic");
    std::fs::create_dir_all(dir.join("cuda-src")).unwrap();
    std::fs::write(
        dir.join("cuda-src/k.cu"),
        "#error \"\u{1b}[8mhidden\u{1b}[2K\r\nFORGED: yes\"\n__global__ void k(float *x) { x[0] = 1.0f; }\n",
    )
    .unwrap();
    let all = fatkit_tests::build_kernels_args(&dir, "dev");
    // Text progress, and the built-in profile.
    let dropped = |i: usize| {
        let flag = |j: usize| all.get(j).map(String::as_str);
        matches!(flag(i), Some("--message-format" | "--profiles-dir"))
            || matches!(
                i.checked_sub(1).and_then(flag),
                Some("--message-format" | "--profiles-dir")
            )
    };
    let args: Vec<&String> = (0..all.len())
        .filter(|&i| !dropped(i))
        .map(|i| &all[i])
        .collect();
    let (code, out, err) = fatkit_in_process(&args);
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        err.contains("hidden") || out.contains("hidden"),
        "{out}{err}"
    );
    if let Err(why) = only_fatkits(&format!("{out}{err}")) {
        panic!("{why}:\n{out}{err}");
    }
    assert!(
        format!("{out}{err}").contains("\\u{1b}[8mhidden"),
        "{out}{err}"
    );
}
