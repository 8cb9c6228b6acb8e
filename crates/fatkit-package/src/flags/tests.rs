use super::*;

fn both(written: &[&str]) -> (String, String) {
    let f = Flags::parse(written).unwrap();
    let nvrtc = match f.nvrtc_args() {
        Ok(a) => a.join(" "),
        Err(u) => format!("refused {}: {}", u.flag, u.why),
    };
    (f.nvcc_args().join(" "), nvrtc)
}

#[test]
fn real_kernel_flags_translate() {
    assert_eq!(
        both(&[
            "-std=c++17",
            "--expt-relaxed-constexpr",
            "-O3",
            "--use_fast_math"
        ]),
        (
            "--std=c++17 --expt-relaxed-constexpr -O3 --use_fast_math".to_owned(),
            "--std=c++17 --use_fast_math".to_owned()
        )
    );
    assert_eq!(
        both(&[
            "-Xptxas -v,-warn-spills",
            "-maxrregcount",
            "64",
            "-lineinfo"
        ]),
        (
            "--ptxas-options=-v,-warn-spills --maxrregcount=64 -lineinfo".to_owned(),
            "--ptxas-options=-v,-warn-spills --maxrregcount=64 --generate-line-info".to_owned()
        )
    );
    assert_eq!(
        both(&[
            "-DUSE_BF16",
            "-D",
            "N=4",
            "--ftz=true",
            "-U__CUDA_NO_HALF_OPERATORS__"
        ]),
        (
            "-DUSE_BF16 -DN=4 --ftz=true -U__CUDA_NO_HALF_OPERATORS__".to_owned(),
            "-DUSE_BF16 -DN=4 --ftz=true -U__CUDA_NO_HALF_OPERATORS__".to_owned()
        )
    );
    assert_eq!(
        both(&["--extended-lambda"]),
        (
            "--extended-lambda".to_owned(),
            "refused --extended-lambda: NVRTC has no extended (__device__-annotated) lambdas"
                .to_owned()
        )
    );
    assert_eq!(
        both(&["-Xcompiler", "-fopenmp"]).1,
        "refused -Xcompiler -fopenmp: NVRTC runs no host compiler"
    );
}

#[test]
fn managed_and_malformed_flags_are_refused() {
    for bad in [
        &["-arch=sm_80"][..],
        &["-gencode", "arch=compute_80,code=sm_80"],
        &["-o", "x"],
        &["--fatbin"],
        &["-rdc=true"],
        &["-ccbin", "g++-12"],
        // Issue 29: every option that makes nvcc write a file of its own, in every spelling.
        &["--dependency-output=/tmp/x.d"],
        &["--dependency-output", "/tmp/x.d"],
        &["-MF", "x.d"],
        &["-MF=x.d"],
        &["--generate-nonsystem-dependencies-with-compile"],
        &["--generate-dependencies-with-compile"],
        &["--generate-dependencies"],
        &["--generate-nonsystem-dependencies"],
        &["-M"],
        &["-MM"],
        &["-MD"],
        &["-MMD"],
        &["-E"],
        &["--preprocess"],
        &["-o=/tmp/x"],
        &["--output-file", "x"],
        &["--output-directory", "/tmp"],
        &["--output-directory=/tmp"],
        &["-odir", "/tmp"],
        &["--keep"],
        &["-keep"],
        &["--keep-dir", "/tmp"],
        &["--keep-dir=/tmp"],
        &["-keep-dir", "/tmp"],
        &["--save-temps"],
        &["-save-temps"],
        &["--keep=true"],
        &["-Xptxas -v --dependency-output=x.d"],
    ] {
        let e = Flags::parse(bad).unwrap_err();
        assert!(e.why.starts_with("fatkit sets this itself"), "{e}");
    }
    assert_eq!(
        Flags::parse(&["-maxrregcount"]).unwrap_err().to_string(),
        "flag '-maxrregcount': -maxrregcount takes a value; write -maxrregcount=VALUE"
    );
    assert_eq!(
        Flags::parse(&["-std=17"]).unwrap_err().to_string(),
        "flag '-std=17': expected a C++ standard such as c++17"
    );
    assert_eq!(
        Flags::parse(&["kernels.cu"]).unwrap_err().why,
        "not a flag (flags start with '-'); sources are given as files, not flags"
    );
    assert_eq!(
        Flags::parse(&["-Xptxas", "-v"]).unwrap().written(),
        ["-Xptxas -v"]
    );
}

/// Issue 41: what reached nvcc's shell or its option parser, in every spelling measured.
#[test]
fn values_a_shell_would_read_are_refused() {
    for bad in [
        &["-DX=$(touch${IFS}P)"][..],
        &["-D", "X=`id>x`"],
        &["--define-macro=X=a;b"],
        &["-DX=a|b"],
        &["-DX=\"quoted\""],
        &["-DX='q'"],
        &["-DX=a&&b"],
        &["-DX=~"],
        &["-DX=*"],
        &["-DX={a,b}"],
        &["-DX=1,Y=2"],
        &["-D$(x)"],
        &["-D1X"],
        &["-U$(x)"],
        &["-U", "a-b"],
        &["-I$(touch P)"],
        &["-I", "`id`"],
        &["-I/tmp/a,b"],
        &["--include-path=a;b"],
    ] {
        let e = Flags::parse(bad).unwrap_err();
        assert!(
            e.why.contains("shell")
                || e.why.contains("identifier")
                || e.why.contains("comma")
                || e.why.contains("macro name"),
            "{bad:?}: {e}"
        );
    }
    // Safe values pass, written as given; a directory starting with '-' is never an option.
    assert_eq!(
        both(&["-DN=4", "-DV=1.2.3", "-DP=a/b:c", "-UX", "-I-inc"]).0,
        "-DN=4 -DV=1.2.3 -DP=a/b:c -UX -I./-inc"
    );
}

#[test]
fn options_files_unknown_options_and_tools_options_that_write_are_refused() {
    for bad in [
        &["--options-file=o.txt"][..],
        &["--options-file", "o.txt"],
        &["-optf=o.txt"],
        &["-optf", "o.txt"],
    ] {
        let e = Flags::parse(bad).unwrap_err();
        assert!(e.why.contains("options file"), "{bad:?}: {e}");
    }
    for bad in [
        &["--some-future-flag"][..],
        &["---use_fast_math"],
        &["--O3"],
        &["-Xnvlink", "-x"],
        &["-Xfatbin=-compress-all"],
        &["--allow-unsupported-compiler"],
        &["-Xcicc", "-x"],
        &["--keep-device-functions"],
    ] {
        let e = Flags::parse(bad).unwrap_err();
        assert!(
            e.why.contains("does not know") || e.why.contains("unknown"),
            "{bad:?}: {e}"
        );
    }
    for bad in [
        &["-Xcompiler=-MD,-MF,/tmp/x.d"][..],
        &["--compiler-options=-MD,-MF,/tmp/x.d"],
        &["-Xcompiler", "-MD,-MF,/tmp/x.d"],
        &["-Xcompiler", "-save-temps"],
        &["-Xcompiler", "-Wp,-MD,/tmp/x.d"],
        &["-Xcompiler", "-Wl,-o,/tmp/x"],
        &["-Xcompiler=-B/tmp"],
        &["-Xcompiler", "-fplugin=/tmp/p.so"],
        &["-Xcompiler", "-specs=/tmp/s"],
        &["-Xcompiler", "@/tmp/opts"],
        &["-Xcompiler", "-wrapper,/bin/sh"],
        &["-Xcompiler", "-fdump-tree-all"],
        &["-Xcompiler", "-include,/etc/passwd"],
        &["-Xptxas", "-o,/tmp/x"],
        &["-Xptxas=--output-file=/tmp/x"],
        &["--ptxas-options=-v,--compile-only"],
        &["-Xcudafe", "--some-option"],
        &["-Xcudafe=--diag_suppress=1,/tmp/x"],
    ] {
        let e = Flags::parse(bad).unwrap_err();
        assert!(e.why.contains("does not pass"), "{bad:?}: {e}");
    }
    // What real crates pass is accepted.
    assert_eq!(
        both(&[
            "-Xcompiler",
            "-fPIC,-fopenmp,-Wno-unused-function,-O3",
            "-Xptxas=-v,-O3,--warn-on-spills,-dlcm=ca",
            "-Xcudafe",
            "--diag_suppress=177,--diag_suppress=550",
            "--resource-usage",
        ])
        .0,
        "-Xcompiler=-fPIC,-fopenmp,-Wno-unused-function,-O3 --ptxas-options=-v,-O3,--warn-on-spills,-dlcm=ca -Xcudafe=--diag_suppress=177,--diag_suppress=550 --resource-usage"
    );
    assert_eq!(
        both(&["-Xcudafe", "--diag_suppress=177,--display_error_number"]).1,
        "--diag-suppress=177 --display-error-number"
    );
}

/// The class, not the cases: flags made of pieces a shell or an option parser would act on,
/// put together by a generator. Whatever parses gives nvcc only arguments its shell reads
/// literally, and none that names a file for a tool to read or write.
#[test]
fn generated_flags_never_give_nvcc_a_shell_or_file_argument() {
    const PIECES: &[&str] = &[
        "-D",
        "-U",
        "-I",
        "-X",
        "-Xcompiler",
        "-Xptxas",
        "-Xcudafe",
        "--compiler-options",
        "--ptxas-options",
        "--options-file",
        "-optf",
        "-MD",
        "-MF",
        "-o",
        "-Wp",
        "-Wl",
        "-B",
        "-save-temps",
        "-fplugin",
        "-specs",
        "@",
        "$(",
        ")",
        "`",
        "'",
        "\"",
        ";",
        "&",
        "|",
        "<",
        ">",
        "*",
        "?",
        "[",
        "{",
        "}",
        "~",
        "#",
        "!",
        "\\",
        ",",
        "=",
        "/tmp/x",
        "..",
        "a",
        "X",
        "1",
        "-",
        "--",
        "-v",
        "-O3",
        "-fPIC",
        "--diag_suppress",
        "--output-file",
        "c++17",
        "-std",
        "true",
        "\u{0}",
        "\u{7f}",
        "é",
    ];
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut accepted = 0;
    for _ in 0..60_000 {
        let mut flags = Vec::new();
        for _ in 0..1 + next(3) {
            let mut flag = String::new();
            for _ in 0..1 + next(5) {
                flag.push_str(PIECES[next(PIECES.len())]);
            }
            flags.push(flag);
        }
        let Ok(parsed) = Flags::parse(&flags) else {
            continue;
        };
        accepted += 1;
        for arg in parsed.nvcc_args() {
            assert!(shell_safe(&arg), "{flags:?} gave nvcc {arg:?}");
            for item in arg.split([',', '=']) {
                assert!(
                    ![
                        "-MD",
                        "-MF",
                        "-o",
                        "-Wp",
                        "-Wl",
                        "-B",
                        "--options-file",
                        "-optf"
                    ]
                    .contains(&item)
                        && !item.starts_with('@')
                        && !item.starts_with("-fplugin")
                        && !item.starts_with("-specs")
                        && !item.starts_with("--output-file"),
                    "{flags:?} gave nvcc {arg:?}"
                );
            }
        }
    }
    // The generator reaches both sides: some flags parse.
    assert!(accepted > 100, "only {accepted} generated flags parsed");
}
