//! Builds the repository's `cuda-src/` with fatkit into `OUT_DIR` (profile `full`, or
//! `FATKIT_PROFILE`), provisioning CUDA from NVIDIA's wheels when no toolchain can.

fn main() {
    let src = std::path::Path::new("../../cuda-src");
    let sources = fatkit_build::pipeline::sources_in(src).unwrap_or_default();
    fatkit_build::Build::new()
        .profile("full")
        .files(&sources)
        .include(src)
        .shared_types(src.join("include/params.h"))
        .compile("kernels");
}
