//! Refuses to build with kernels that are missing or stale (a source, a header, the
//! `[package.metadata.fatkit]` table or the profile changed since `cargo xtask build-kernels`),
//! and sets FATKIT_KERNELS_DIR to where they are, `CARGO_TARGET_DIR` included.

fn main() {
    fatkit_package::prebuilt::check_or_exit();
}
