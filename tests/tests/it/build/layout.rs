//! Toolchain tier: shared host/device structs. bindgen's host layout of a header, asserted by
//! a check nvcc compiles; a struct the device side lays out differently fails naming the
//! struct and the field (with both values).
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::PathBuf;

use fatkit_build::layout::{self, LayoutError};
use fatkit_tests::{temp_dir, toolchain};

fn header(name: &str, text: &str) -> (PathBuf, PathBuf) {
    let dir = temp_dir(name);
    let path = dir.join("shared.h");
    std::fs::write(&path, text).unwrap();
    (path, dir.join("scratch"))
}

fn check(name: &str, text: &str) -> Result<layout::SharedTypes, LayoutError> {
    let tc = toolchain().unwrap();
    let probe = fatkit_toolchain::probe(&tc.clone().into()).unwrap();
    let (path, scratch) = header(name, text);
    layout::check(&path, &[], (&tc, &probe), &scratch, &mut |l| {
        eprintln!("{l}")
    })
}

#[test]
fn identical_layouts_pass_and_give_rust_types() {
    if toolchain().is_none() {
        return;
    }
    let types = check(
        "layout-ok",
        "#pragma once\n#include <stdint.h>\ntypedef struct { float alpha; int32_t n; const float* x; } SaxpyParams;\nstruct Pair { double a; char tag; };\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        types.rust.contains("pub struct SaxpyParams"),
        "{}",
        types.rust
    );
    assert!(types.rust.contains("pub struct Pair"), "{}", types.rust);
    // Size, alignment and every field of both structs were asserted on the device side.
    let shown: Vec<String> = types.facts.iter().map(|f| f.to_string()).collect();
    for want in [
        "struct SaxpyParams: size 16 on the host",
        "struct SaxpyParams, field x: offset 8 on the host",
        "struct Pair, field tag: offset 8 on the host",
    ] {
        assert!(shown.iter().any(|s| s == want), "{want}: {shown:?}");
    }
    // Only the header's own types, not what it includes.
    assert!(!types.rust.contains("int_least8_t"), "{}", types.rust);
}

#[test]
fn a_member_only_nvcc_sees_names_struct_and_field() {
    if toolchain().is_none() {
        return;
    }
    let err = check(
        "layout-cudacc",
        "typedef struct {\n  float a;\n#ifdef __CUDACC__\n  int device_only;\n#endif\n  float b;\n} Drifts;\n",
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("struct Drifts, field b: offset 4 on the host (bindgen), 8 on the device (nvcc offsetof)"),
        "{text}"
    );
    assert!(
        text.contains(
            "struct Drifts: size 8 on the host (bindgen), 12 on the device (nvcc sizeof)"
        ),
        "{text}"
    );
    assert!(text.contains("fix: "), "{text}");
}

#[test]
fn an_alignment_only_nvcc_sees_names_struct_and_field() {
    if toolchain().is_none() {
        return;
    }
    let err = check(
        "layout-align",
        "#ifdef __CUDACC__\n#define ALIGN16 __align__(16)\n#else\n#define ALIGN16\n#endif\n\
         typedef struct ALIGN16 { float x, y, z; } Vec3;\n\
         typedef struct { char tag; Vec3 v; } Tagged;\n",
    )
    .unwrap_err();
    let LayoutError::Mismatch { mismatches, .. } = &err else {
        panic!("{err}")
    };
    let shown: Vec<String> = mismatches.iter().map(|m| m.to_string()).collect();
    assert!(
        shown.contains(&"struct Tagged, field v: offset 4 on the host (bindgen), 16 on the device (nvcc offsetof)".to_owned()),
        "{shown:#?}"
    );
    assert!(
        shown.contains(
            &"struct Vec3: alignment 4 on the host (bindgen), 16 on the device (nvcc alignof)"
                .to_owned()
        ),
        "{shown:#?}"
    );
}

#[test]
fn a_header_clang_cannot_parse_is_an_error_naming_it() {
    if toolchain().is_none() {
        return;
    }
    let err = check("layout-broken", "typedef struct { int a } Broken;\n").unwrap_err();
    // clang recovers and bindgen goes on; nvcc then names the line.
    let text = err.to_string();
    assert!(
        matches!(err, LayoutError::Bindgen { .. } | LayoutError::Nvcc { .. })
            && text.contains("shared.h(1): error: expected a \";\""),
        "{text}"
    );
}
