//! The end-to-end tests of fatkit, one test binary (a link per module would cost CI minutes):
//! each module is what was one `tests/*.rs` file, named for what it tests.

mod adversarial;
mod adversarial_build;
mod adversarial_outputs;
mod audit;
mod audit_driver;
mod boundaries;
mod build_boundaries;
mod build_kernels;
mod build_rs_api;
mod build_rs_library;
mod collections;
mod cuobjdump_oracle;
mod embedded;
mod here;
mod hostile_audit;
mod hostile_files;
mod hostile_inputs;
mod hostile_names;
mod images;
mod images_generated;
mod installed;
mod interrupted;
mod launcher;
mod layout;
mod multi_toolchain;
mod nvidia_libraries;
mod nvrtc_stage;
mod package;
mod plan;
mod profiles;
mod real_kernels;
mod stubs;
mod stubs_printf;
mod vendored;
mod wheel;
