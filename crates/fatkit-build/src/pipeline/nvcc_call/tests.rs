use super::*;

#[test]
fn error_locations() {
    let out = "/src/bad.cu(12): error: expected an expression\n  int x = ;\n";
    assert_eq!(first_error_location(out).as_deref(), Some("/src/bad.cu:12"));
    assert_eq!(
        first_error_location("/src/ok.cu(3): warning: unused\n"),
        None
    );
    assert_eq!(
        first_error_location("nvcc fatal   : Unknown option '-x'"),
        None
    );
}

#[test]
fn line_markers() {
    let ii = b"# 1 \"/s/a.cu\"\n# 1 \"<built-in>\" 1\nint x;\n# 1 \"/cuda/include/cuda_runtime.h\" 1 3\n# 7 \"/s/include/r.cuh\" 1\n#pragma once\n";
    let files: Vec<String> = line_marker_files(ii)
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    assert_eq!(
        files,
        [
            "/s/a.cu",
            "/cuda/include/cuda_runtime.h",
            "/s/include/r.cuh"
        ]
    );
    assert!(is_toolchain_header(
        Path::new("/cuda/bin/../include/x.h"),
        Path::new("/cuda")
    ));
    assert!(is_toolchain_header(
        Path::new("/usr/include/c++/12/cmath"),
        Path::new("/cuda")
    ));
    assert!(!is_toolchain_header(
        Path::new("/s/include/r.cuh"),
        Path::new("/cuda")
    ));
}
