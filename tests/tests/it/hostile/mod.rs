//! The tests of hostile inputs and projects: what reading or building them may never do.

mod adversarial;
pub(crate) mod adversarial_build;
pub(crate) mod adversarial_outputs;
mod hostile_audit;
mod hostile_files;
mod hostile_inputs;
mod hostile_names;
mod inputs_never_run;
