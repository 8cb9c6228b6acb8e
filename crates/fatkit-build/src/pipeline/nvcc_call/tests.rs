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

/// A toolkit reached through a link (`/usr/local/cuda` to `cuda-12.4`; a cache directory
/// linked to another), whose headers the compiler names by the resolved path: they are the
/// toolkit's, never the project's (whose probes would be read and refused).
#[test]
fn a_toolkit_reached_through_a_link_keeps_its_headers() {
    let dir = std::env::temp_dir().join(format!("fatkit-linked-toolkit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let real = dir.join("cuda-12.4");
    std::fs::create_dir_all(real.join("include")).unwrap();
    std::fs::write(real.join("include/__config"), "").unwrap();
    let link = dir.join("cuda");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let project = dir.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("k.cu"), "").unwrap();
    std::fs::write(project.join("r.cuh"), "").unwrap();
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let real = std::fs::canonicalize(&real).unwrap();
    let project = std::fs::canonicalize(&project).unwrap();
    std::fs::write(
        tmp.join("k.cpp1.ii"),
        format!(
            "# 1 \"{}\"\n# 1 \"{}\" 1 3\n# 1 \"{}\" 1\n",
            project.join("k.cu").display(),
            real.join("include/__config").display(),
            project.join("r.cuh").display()
        ),
    )
    .unwrap();
    let (deps, _, named) = preprocessed_deps(&tmp, &project.join("k.cu"), &link, None);
    assert_eq!(deps, [project.join("r.cuh")]);
    assert!(!named.contains(&real.join("include/__config")), "{named:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
