//! The hostile shapes that drive a build rather than an audit (`cargo xtask bench hostile`
//! runs them through the whole `fatkit build-kernels`).

use std::path::{Path, PathBuf};

use super::Shape;

/// Shapes that drive a build rather than an audit: `make(n, dir)` writes a project into `dir`
/// and returns it; the command is `build-kernels` with [`build_args`] and the shape's `args`.
pub const BUILD_SHAPES: &[Shape] = &[Shape {
    name: "nvrtc-headers-through-macros",
    finding: "(issue 53) headers named through macros in an -I directory, which the include scan cannot see, each found by running NVRTC again: 320 / 640 / 1280 headers took 4.0 / 9.2 / 26.2 s (nvcc: 0.6 s for 1280)",
    small: 300,
    large: 300,
    args: &[],
    make: headers_through_macros,
}];

/// `build-kernels` of a project [`BUILD_SHAPES`] made in `dir`: its profile (`sm_70`, which
/// fatkit's CUDA 13 nvcc cannot build, so NVRTC 12.9 does), sources, include directory, its
/// own output and cache, offline.
pub fn build_args(dir: &Path) -> Vec<String> {
    let d = |p: &str| dir.join(p).display().to_string();
    let mut args: Vec<String> = ["build-kernels", "--profile", "seventy", "--offline"]
        .map(str::to_owned)
        .to_vec();
    for (flag, path) in [
        ("--profiles-dir", "arch-profiles"),
        ("--src", "cuda-src"),
        ("--out", "out"),
        ("--cache-dir", "cache"),
    ] {
        args.push(flag.to_owned());
        args.push(d(path));
    }
    args.push(format!("--flag=-I{}", d("inc")));
    args
}

/// A source including `n` headers of an `-I` directory by names only macros make (`H(7)` is
/// `"h7.cuh"`): the include scan sees none of them, the compiler all.
fn headers_through_macros(n: usize, dir: &Path) -> PathBuf {
    let inc = dir.join("inc");
    let _ = std::fs::create_dir_all(&inc);
    let _ = std::fs::create_dir_all(dir.join("cuda-src"));
    let _ = std::fs::create_dir_all(dir.join("arch-profiles"));
    let _ = std::fs::write(
        dir.join("arch-profiles/seventy.toml"),
        "targets = [\"sm_70\"]\nptx = []\n",
    );
    let mut source =
        "#define STR_(x) #x\n#define STR(x) STR_(x)\n#define H(n) STR(h##n.cuh)\n".to_owned();
    for i in 0..n {
        let _ = std::fs::write(inc.join(format!("h{i}.cuh")), format!("#define V{i} {i}\n"));
        source.push_str(&format!("#include H({i})\n"));
    }
    source.push_str(&format!(
        "extern \"C\" __global__ void k(int* x) {{ x[0] = V{}; }}\n",
        n.saturating_sub(1)
    ));
    let _ = std::fs::write(dir.join("cuda-src/k.cu"), source);
    dir.to_owned()
}
