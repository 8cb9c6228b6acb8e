//! The end-to-end tests of fatkit, one test binary (a link per module would cost CI minutes):
//! a module per area (`audit`, `build`, `ship`, `hostile`), and in each a module per subject:
//! `cargo test -p fatkit-tests --test it build::` runs one area.

mod audit;
mod build;
mod hostile;
mod ship;
