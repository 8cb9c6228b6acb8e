use super::*;

/// An error line of each compiler, with the location and words the report must show.
const ERRORS: &[(&str, Option<&str>, &str)] = &[
    (
        "marlin_kernel.cuh(121): error: identifier \"x\" is undefined",
        Some("marlin_kernel.cuh:121"),
        "error: identifier \"x\" is undefined",
    ),
    (
        "/src/a.cu(3): catastrophic error: cannot open source file \"b.h\"",
        Some("/src/a.cu:3"),
        "catastrophic error: cannot open source file \"b.h\"",
    ),
    (
        "a.cu(7): error #20-D: identifier \"y\" is undefined",
        Some("a.cu:7"),
        "error #20-D: identifier \"y\" is undefined",
    ),
    (
        "/src/pp.cu:2:2: error: #error NEEDED_FLAG must be set",
        Some("/src/pp.cu:2"),
        "error: #error NEEDED_FLAG must be set",
    ),
    (
        "C:\\src\\a.cu:9: fatal error: b.h: No such file or directory",
        Some("C:\\src\\a.cu:9"),
        "fatal error: b.h: No such file or directory",
    ),
    (
        "ptxas error   : Entry function '_Z1kPf' uses too much shared data",
        None,
        "ptxas error: Entry function '_Z1kPf' uses too much shared data",
    ),
    (
        "ptxas fatal   : Unresolved extern function 'f'",
        None,
        "ptxas fatal: Unresolved extern function 'f'",
    ),
    (
        "ptxas /tmp/a.ptx, line 5; error   : Unknown symbol 'x'",
        Some("/tmp/a.ptx:5"),
        "ptxas error: Unknown symbol 'x'",
    ),
    (
        "nvcc fatal   : Unknown option '-foo'",
        None,
        "nvcc fatal: Unknown option '-foo'",
    ),
    (
        "nvrtc: error: invalid value for --gpu-architecture (-arch)",
        None,
        "nvrtc error: invalid value for --gpu-architecture (-arch)",
    ),
    (
        "kernel.cu(4): error: expected a \";\"",
        Some("kernel.cu:4"),
        "error: expected a \";\"",
    ),
];

/// What comes before an error and must never stand for it: command echoes that mention
/// errors, notes, `ptxas info`, warnings of each shape.
const NOISE: &[&str] = &[
    "#$ cicc --c++17 --display_error_number --orig_src_file_name \"a.cu\" -o \"/tmp/a.ptx\"",
    "#$ _NVVM_BRANCH_=nvvm",
    "ptxas info    : Compiling entry function '_Z1kPf' for 'sm_70'",
    "ptxas info    : Used 8 registers, 360 bytes cmem[0]",
    "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads",
    "a.cu(2): warning #177-D: variable \"z\" was declared but never referenced",
    "a.cu:1:5: warning: unused variable 'w' [-Wunused-variable]",
    "ptxas warning : Registers are spilled to local memory",
    "a.cu:1:5: note: declared here",
    "a.cu(9): remark: the error below is a consequence",
    "",
];

fn coloured(line: &str) -> String {
    line.replacen("error", "\u{1b}[01;31m\u{1b}[Kerror\u{1b}[m\u{1b}[K", 1)
}

/// Every error shape behind every amount of noise, with echoes after it, in LF and CRLF, with
/// and without colour: the report is the error's location and words.
#[test]
fn the_first_error_is_found_behind_any_noise() {
    let mut checked = 0;
    for (error, location, words) in ERRORS {
        for before in [0, 1, 3, 40, 2300] {
            for after in [0, 5] {
                for eol in ["\n", "\r\n"] {
                    for colour in [false, true] {
                        let mut lines: Vec<String> = NOISE
                            .iter()
                            .cycle()
                            .take(before)
                            .map(|l| l.to_string())
                            .collect();
                        lines.push(if colour {
                            coloured(error)
                        } else {
                            error.to_string()
                        });
                        lines.push("      int x = ;".to_owned());
                        lines.extend(NOISE.iter().take(after).map(|l| l.to_string()));
                        lines.push("1 error detected in the compilation of \"a.cu\".".into());
                        lines.push("# --error 0x1 --".into());
                        let output = lines.join(eol);
                        let found = first(&output);
                        assert_eq!(found.to_string(), *words, "{output}");
                        assert_eq!(found.location().as_deref(), *location, "{output}");
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, ERRORS.len() * 5 * 2 * 2 * 2);
}

/// Of two errors the first is the one reported, whatever their shapes.
#[test]
fn the_first_of_two_errors_wins() {
    for (a, _, a_words) in ERRORS {
        for (b, _, _) in ERRORS {
            let output = format!("{}\n{a}\n{}\n{b}\n", NOISE[0], NOISE[5]);
            assert_eq!(first(&output).to_string(), *a_words, "{output}");
        }
    }
}

/// No error: a line that is no diagnostic (a crash), else the first warning, else plainly
/// nothing.
#[test]
fn without_an_error_it_says_what_there_is() {
    assert_eq!(first(""), First::Nothing { lines: 0 });
    assert_eq!(first("").to_string(), "no output at all");
    let echoes = NOISE
        .iter()
        .filter(|l| !l.contains("warning"))
        .copied()
        .collect::<Vec<_>>()
        .join("\n");
    let n = echoes.lines().count();
    assert_eq!(first(&echoes), First::Nothing { lines: n });
    assert_eq!(
        first(&echoes).to_string(),
        format!("no error message in its output ({n} lines of echoed commands and notes)")
    );
    let crashed = format!("{echoes}\n{}\nSegmentation fault (core dumped)\n", NOISE[5]);
    assert_eq!(
        first(&crashed).to_string(),
        "Segmentation fault (core dumped)"
    );
    assert_eq!(first(&crashed).location(), None);
    let warned = format!("{echoes}\n{}\n", NOISE[6]);
    assert_eq!(
        first(&warned).to_string(),
        "warning: unused variable 'w' [-Wunused-variable]"
    );
    // A warning's location is not an error's.
    assert_eq!(first(&warned).location(), None);
}

/// Real nvcc 12.4 `--verbose` output (`capture.sh` made these files): the front end's error,
/// ptxas's under `-Xptxas -v`, the host preprocessor's.
#[test]
fn real_nvcc_verbose_output() {
    for (output, location, words) in [
        (
            include_str!("nvcc-verbose-edg.txt"),
            Some("bad.cu:4"),
            "error: identifier \"undefined_name\" is undefined",
        ),
        (
            include_str!("nvcc-verbose-ptxas.txt"),
            None,
            "ptxas error: Entry function '_Z10big_kernelPf' uses too much shared data (0xc3500 bytes, 0x18000 max)",
        ),
        (
            include_str!("nvcc-verbose-gcc.txt"),
            Some("pp.cu:2"),
            "error: #error NEEDED_FLAG must be set",
        ),
    ] {
        assert!(output.lines().count() > 15, "{output}");
        assert!(output.starts_with("#$ "), "{output}");
        let found = first(output);
        assert_eq!(found.to_string(), words);
        assert_eq!(found.location().as_deref(), location);
    }
}
