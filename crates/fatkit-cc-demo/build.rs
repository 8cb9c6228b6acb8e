//! `src/scale.cu` (host code with a kernel launch) through `cc`, for every target of the
//! `consumer` profile.
fn main() {
    println!("cargo:rerun-if-changed=src/scale.cu");
    match fatkit_build::cuda_cc("consumer") {
        Ok(mut build) => build.file("src/scale.cu").compile("scale"),
        Err(e) => {
            eprintln!("error: fatkit-cc-demo: {e}");
            std::process::exit(1);
        }
    }
}
