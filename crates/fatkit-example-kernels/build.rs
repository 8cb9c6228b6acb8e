//! Refuses to build when kernels/prebuilt/ does not match the sources, the headers, the
//! `[package.metadata.fatkit]` table or the profile, and sets FATKIT_KERNELS_DIR to it.

fn main() {
    fatkit_package::prebuilt::check_or_exit();
}
