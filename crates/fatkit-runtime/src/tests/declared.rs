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

/// A kernel the sm_75 image still holds (its stores alone compiled out there) but which its
/// crate declared for sm_80 and newer: the driver would find it on a T4, and the check refuses
/// it there as declared, saying so, while the rest of the module runs; on an A100 it runs.
#[test]
fn a_kernel_declared_narrower_than_its_images_is_refused_outside_its_targets() {
    let images: &[ImageRow] = &[
        ("sm_75", None, &["gemv_bf16", "gemv_f16"]),
        ("sm_80", None, &["gemv_bf16", "gemv_f16"]),
    ];
    let m = module(images)
        .with_declared("fatkit:declared:v2;module=test;fatbin=1:1;gemv_bf16=sm_80;end;");
    let plan = m.check(&device("7.5", Some("580.65"), "T4")).unwrap();
    let failure = plan.kernel("gemv_bf16").unwrap().clone().unwrap_err();
    assert_eq!(
        (failure.code, failure.error),
        (load::DECLARED_AWAY.0, load::DECLARED_AWAY.1)
    );
    let words = failure.to_string();
    assert!(
        words.contains("its source builds it for sm_80 only")
            && words.contains("launch it only on GPUs its targets (sm_80) serve"),
        "{words}"
    );
    assert!(matches!(plan.kernel("gemv_f16"), Some(Ok(_))));
    let a100 = m.check(&device("8.0", Some("580.65"), "A100")).unwrap();
    assert!(a100.failures().next().is_none());
}
