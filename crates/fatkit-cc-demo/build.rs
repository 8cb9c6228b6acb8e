//! `src/scale.cu` (host code with a kernel launch) into `libscale.a`, its device code for every
//! target of the `full` profile: sm_70 from a compiler other than the newest nvcc's when that
//! one has dropped it (NVRTC builds it from the device code: the host code is under
//! `#ifndef __CUDACC_RTC__`).
fn main() {
    fatkit_build::Build::new()
        .profile("full")
        .file("src/scale.cu")
        .compile_library("scale");
}
