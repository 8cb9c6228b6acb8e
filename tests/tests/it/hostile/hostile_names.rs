//! Issue 41, names and flags: nothing from a crate reaches nvcc's shell or its option parser
//! as written. Source names with shell syntax, names that read as options, flags and defines
//! with shell syntax, options files and tool options that write files, in every spelling the
//! adversarial round measured, from the command line and from `[package.metadata.fatkit]`;
//! with real nvcc.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::{Path, PathBuf};

use fatkit_tests::{fatkit_in_process, temp_dir, toolchain};

const KERNEL: &str = "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }\n";

/// A `cuda-src/` of `files` (name, contents) with a one-target profile: the build's args.
fn source_dir(dir: &Path, files: &[(&str, &str)]) -> Vec<String> {
    source_files(dir, "cuda-src", files)
}

/// `files` in `dir/sub` (`sub` empty: in the project root itself, as `sources = ["."]` or
/// `--src .` build them), with a one-target profile: the build's args.
fn source_files(dir: &Path, sub: &str, files: &[(&str, &str)]) -> Vec<String> {
    let src = dir.join(sub);
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(dir.join("arch-profiles")).unwrap();
    std::fs::write(
        dir.join("arch-profiles/one.toml"),
        "targets = [\"sm_90\"]\nptx = []\n",
    )
    .unwrap();
    for (name, text) in files {
        std::fs::write(src.join(name), text).unwrap();
    }
    let mut args = fatkit_tests::build_kernels_args(dir, "one");
    let at = args.iter().position(|a| a == "--src").unwrap();
    args[at + 1] = src.display().to_string();
    args
}

/// Every file under `dir`, for "nothing was written anywhere else".
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// A source whose name a shell would read runs nothing: the build stops before compiling
/// (exit 2), naming the file and the fix. The names measured, then names a generator makes of
/// shell syntax.
#[test]
fn a_source_named_with_shell_syntax_runs_nothing() {
    if toolchain().is_none() {
        return;
    }
    let mut names: Vec<String> = vec![
        "$(touch PWNED).cu".to_owned(),
        "`touch PWNED`.cu".to_owned(),
    ];
    // Each piece a shell acts on, in a name of its own.
    for piece in [
        "$(touch PWNED)",
        "`touch PWNED`",
        ";touch PWNED;",
        "&&touch PWNED&&",
        "|touch PWNED|",
        ">PWNED",
        "$IFS",
        "{a,b}",
        " x",
        "'q'",
        "\"q\"",
        "\\",
        "*",
        "?",
        "~",
        "#",
        "!",
        "\n",
    ] {
        names.push(format!("k{piece}k.cu"));
    }
    for (i, name) in names.iter().enumerate() {
        let dir = temp_dir(&format!("hostile-source-name-{i}"));
        let args = source_dir(&dir, &[(name, KERNEL)]);
        let (code, out, err) = fatkit_in_process(&args);
        assert_eq!(code, 2, "{name:?}: {out}{err}");
        assert!(
            err.contains("its shell would read") && err.contains("rename it"),
            "{name:?}: {err}"
        );
        let mut written = Vec::new();
        files_under(&dir, &mut written);
        assert!(
            !written.iter().any(|p| p.ends_with("PWNED")),
            "{name:?} ran a command: {written:?}"
        );
        assert!(!dir.join("out").exists() || !dir.join("out/k.fatbin").exists());
    }
}

/// A source named like an option, at the project root, is a file to nvcc
/// (`./--options-file=o.cu`), never an option: `o.cu` holding `-MD -MF <path>` is not read as
/// options (it made nvcc write outside every output directory), and `--compiler-bindir=bin.cu`
/// does not make nvcc run the crate's `bin/gcc`. Sources named after nvcc's options build as
/// kernels.
#[test]
fn a_source_named_like_an_option_is_a_file_to_nvcc() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("hostile-option-names");
    let outside = dir.join("outside.d");
    let ran = dir.join("ran-the-crates-compiler");
    let options = format!("-MD -MF {}\n", outside.display());
    let mut files: Vec<(String, String)> = vec![("o.cu".to_owned(), options)];
    let mut modules = Vec::new();
    for (i, option) in [
        "--options-file=o",
        "-optf=o",
        "--compiler-bindir=bin",
        "-ccbin=bin",
        "--output-file=elsewhere",
        "-odir=.",
        "--dependency-output=dep",
        "-E",
        "--run",
        "-Xcompiler=-MD",
    ]
    .iter()
    .enumerate()
    {
        files.push((
            format!("{option}.cu"),
            KERNEL.replace("void k(", &format!("void k{i}(")),
        ));
        modules.push(fatkit_package::sources::module_name(Path::new(&format!(
            "{option}.cu"
        ))));
    }
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let args = source_files(&dir, "", &borrowed);
    // A compiler in the crate, where `--compiler-bindir=bin` would send nvcc.
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for name in ["gcc", "g++", "cc", "c++"] {
        let script = bin.join(name);
        std::fs::write(
            &script,
            format!("#!/bin/sh\ntouch {}\nexit 1\n", ran.display()),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let (code, out, err) = fatkit_in_process(&args);
    // `o.cu` is not CUDA, so its module fails (exit 1); every option-named module builds.
    assert_eq!(code, 1, "{out}{err}");
    assert!(!outside.exists(), "nvcc read o.cu as options: {out}{err}");
    assert!(!ran.exists(), "nvcc ran the crate's compiler: {out}{err}");
    for m in &modules {
        assert!(
            dir.join(format!("out/{m}.fatbin")).is_file(),
            "{m} was not built: {out}{err}"
        );
    }
}

/// Flags and defines holding shell syntax, options files, and `-X...` options that write
/// files: refused before anything compiles (exit 2), naming the flag and where it came from,
/// from `--flag` and from `[package.metadata.fatkit]` alike; nothing is run or written.
#[test]
fn hostile_flags_from_the_command_line_and_the_metadata_are_refused() {
    if toolchain().is_none() {
        return;
    }
    let dir = temp_dir("hostile-flags");
    let outside = dir.join("outside.d");
    let options = dir.join("opts.txt");
    std::fs::write(&options, format!("-MD -MF {}\n", outside.display())).unwrap();
    let flags = [
        "-DX=$(touch${IFS}PWNED)".to_owned(),
        "-DX=`touch PWNED`".to_owned(),
        format!("--options-file={}", options.display()),
        format!("-optf={}", options.display()),
        format!("-Xcompiler=-MD,-MF,{}", outside.display()),
        format!("--compiler-options=-MD,-MF,{}", outside.display()),
        format!("-Xptxas=-o,{}", outside.display()),
        "-Xcompiler=-B.".to_owned(),
    ];
    for (i, flag) in flags.iter().enumerate() {
        let case = dir.join(format!("cli-{i}"));
        let mut args = source_dir(&case, &[("k.cu", KERNEL)]);
        args.push(format!("--flag={flag}"));
        let (code, out, err) = fatkit_in_process(&args);
        assert_eq!(code, 2, "{flag}: {out}{err}");
        assert!(err.contains("--flag: flag '"), "{flag}: {err}");
        assert!(!case.join("out/k.fatbin").exists(), "{flag}");
    }
    for (i, (key, value)) in flags
        .iter()
        .map(|f| ("flags", f.clone()))
        .chain([
            ("defines", "X=$(touch PWNED)".to_owned()),
            ("defines", "X=a,Y=b".to_owned()),
        ])
        .enumerate()
    {
        let case = dir.join(format!("metadata-{i}"));
        std::fs::create_dir_all(case.join("src")).unwrap();
        std::fs::write(case.join("src/lib.rs"), "").unwrap();
        std::fs::write(case.join("k.cu"), KERNEL).unwrap();
        let manifest = case.join("Cargo.toml");
        std::fs::write(
            &manifest,
            format!(
                "[package]\nname = \"victim\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[package.metadata.fatkit]\nprofile = \"dev\"\nsources = [\"k.cu\"]\n{key} = [{value:?}]\n\n[workspace]\n"
            ),
        )
        .unwrap();
        let (code, out, err) = fatkit_in_process(&[
            "build-kernels",
            "--offline",
            "--manifest-path",
            manifest.to_str().unwrap(),
        ]);
        assert_eq!(code, 2, "{key} = {value:?}: {out}{err}");
        assert!(
            err.contains("[package.metadata.fatkit]") && err.contains(key),
            "{key} = {value:?}: {err}"
        );
    }
    let mut written = Vec::new();
    files_under(&dir, &mut written);
    assert!(!outside.exists());
    assert!(!written.iter().any(|p| p.ends_with("PWNED")), "{written:?}");
}

/// `[package.metadata.fatkit.kernels]` names became `-DFATKIT_SKIP_<name>` unchecked: a comma
/// started another macro there, a NUL or shell syntax reached nvcc. A name is a C identifier,
/// or a glob of one.
#[test]
fn a_declared_kernel_name_is_an_identifier_or_a_glob() {
    for (i, name) in ["a,b", "k$(touch PWNED)", "k`id`", "k;x", "k b", "k\\u0000x"]
        .iter()
        .enumerate()
    {
        let dir = temp_dir(&format!("hostile-kernel-name-{i}"));
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::write(dir.join("src/lib.rs"), "").unwrap();
        std::fs::write(dir.join("k.cu"), KERNEL).unwrap();
        let manifest = dir.join("Cargo.toml");
        std::fs::write(
            &manifest,
            format!(
                "[package]\nname = \"victim\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[package.metadata.fatkit]\nprofile = \"dev\"\nsources = [\"k.cu\"]\n\n[package.metadata.fatkit.kernels]\n\"{name}\" = {{ exclude = [\"sm_90\"] }}\n\n[workspace]\n"
            ),
        )
        .unwrap();
        let (code, out, err) = fatkit_in_process(&[
            "build-kernels",
            "--offline",
            "--manifest-path",
            manifest.to_str().unwrap(),
        ]);
        assert_eq!(code, 2, "{name:?}: {out}{err}");
        assert!(err.contains("is not a kernel name"), "{name:?}: {err}");
    }
}
