//! Modules declared for fewer targets, checked on GPUs outside them.

use super::*;

/// A module whose source is built for sm_80 and newer alone (`Build::file_targets`): every
/// kernel declared for those. On a T4 nothing of it runs, by declaration: the check passes and
/// the plan refuses each kernel, saying so; with one kernel undeclared, the check fails.
#[test]
fn a_module_declared_whole_for_newer_gpus_passes_the_check_on_older_ones() {
    let images: &[ImageRow] = &[
        ("sm_80", None, &["marlin_f16", "marlin_bf16"]),
        ("sm_90", None, &["marlin_f16", "marlin_bf16"]),
    ];
    let t4 = device("7.5", Some("580.65"), "T4");
    let whole = module(images).with_declared(
        "fatkit:declared:v2;module=test;fatbin=1:1;marlin_bf16=sm_80,sm_90;marlin_f16=sm_80,sm_90;end;",
    );
    let plan = whole.check(&t4).unwrap();
    assert_eq!(plan.failures().count(), 2);
    assert!(plan.failures().all(|f| f.declared == Some("sm_80,sm_90")));
    assert!(whole
        .check(&device("8.6", None, "A10"))
        .unwrap()
        .failures()
        .next()
        .is_none());
    let partly = module(images)
        .with_declared("fatkit:declared:v2;module=test;fatbin=1:1;marlin_bf16=sm_80,sm_90;end;");
    assert!(partly.check(&t4).is_err());
}
