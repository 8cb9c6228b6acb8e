use super::*;

/// Images as `sm_80 compute_90@9.0` (PTX with `@ISA`), device `12.0`, driver as the user
/// types it (or `-`). The outcome reads `sm_120` (cubin), `compute_120 jit` (PTX),
/// `compute_120 jit?` (driver unknown), `209` or `222`.
fn check(images: &str, cc: &str, driver: &str, strict_igpu: bool, expect: &str) {
    let images: Vec<Image> = images
        .split_whitespace()
        .map(|s| {
            let (name, isa) = s.split_once('@').map_or((s, None), |(n, i)| (n, Some(i)));
            let target: Target = name.parse().unwrap();
            match target.kind {
                ImageKind::Cubin => Image::cubin(target),
                ImageKind::Ptx => Image::ptx(target, isa.map(|i| i.parse().unwrap())),
            }
        })
        .collect();
    let driver = (driver != "-").then(|| driver.parse().unwrap());
    let device = Device::new(cc.parse().unwrap(), driver);
    let verdict = select(&images, &device, Policy { strict_igpu });
    let got = match verdict.selection {
        Ok(Selection::Cubin { image, .. }) => images[image].target.to_string(),
        Ok(Selection::Ptx { image, driver }) => {
            let unsure = matches!(driver, DriverCheck::Unknown(_) | DriverCheck::IsaUnknown);
            format!(
                "{} jit{}",
                images[image].target,
                if unsure { "?" } else { "" }
            )
        }
        Err(e) => e.code().to_string(),
    };
    assert_eq!(got, expect, "images [{images:?}] on {cc} driver {driver:?}");
}

#[test]
#[rustfmt::skip]
fn select_table() {
    let cases: &[(&str, &str, &str, bool, &str)] = &[
        // cubins: same major, minor at or above
        ("sm_89", "12.0", "-", false, "209"),
        ("sm_120", "12.1", "-", false, "sm_120"),
        ("sm_120", "12.0", "-", false, "sm_120"),
        ("sm_121", "12.0", "-", false, "209"),
        ("sm_80", "8.6", "-", false, "sm_80"),
        ("sm_86", "8.0", "-", false, "209"),
        ("sm_80 sm_86", "8.9", "-", false, "sm_86"),
        ("sm_80 sm_86 sm_89", "8.9", "-", false, "sm_89"),
        ("sm_70", "7.5", "-", false, "sm_70"),
        ("sm_75", "7.0", "-", false, "209"),
        ("sm_90", "10.0", "-", false, "209"),
        ("sm_100", "10.3", "-", false, "sm_100"),
        ("sm_100", "12.0", "-", false, "209"),
        // arch-specific
        ("sm_90a", "9.0", "-", false, "sm_90a"),
        ("sm_90a", "10.0", "-", false, "209"),
        ("sm_90a compute_90a@8.0", "10.0", "-", false, "209"),
        ("compute_90a@8.0", "9.0", "-", false, "compute_90a jit"),
        ("sm_100a", "10.3", "-", false, "209"),
        ("sm_90 sm_90a", "9.0", "-", false, "sm_90a"),
        // family-specific
        ("sm_100f", "10.3", "-", false, "sm_100f"),
        ("sm_100f", "10.0", "-", false, "sm_100f"),
        ("sm_100f", "12.0", "-", false, "209"),
        ("sm_103f", "10.0", "-", false, "209"),
        ("compute_100f@8.8", "10.3", "-", false, "compute_100f jit"),
        ("compute_100f@8.8", "12.0", "-", false, "209"),
        ("sm_120f", "12.1", "-", false, "sm_120f"),
        // PTX: forward to any later GPU, limited by the driver's ISA
        ("compute_80@7.8", "12.0", "-", false, "compute_80 jit"),
        ("compute_120@9.0", "9.0", "-", false, "209"),
        ("compute_120@9.0", "12.0", "575.51", false, "222"),
        ("compute_120@9.0", "12.0", "580.65", false, "compute_120 jit"),
        ("compute_120@9.0", "12.0", "580.65.06", false, "compute_120 jit"),
        ("compute_120@9.0", "12.0", "12090", false, "222"),
        ("compute_120@9.0", "12.0", "13000", false, "compute_120 jit"),
        ("compute_120@8.7", "12.0", "570.26", false, "compute_120 jit"),
        ("compute_90@9.3", "12.0", "600.1", false, "222"),
        ("compute_90@9.3", "12.0", "610.43.02", false, "compute_90 jit"),
        ("compute_90@9.4", "12.0", "620.1", false, "compute_90 jit?"),
        ("compute_90@9.4", "12.0", "590.44.01", false, "222"),
        ("compute_90", "12.0", "580.65", false, "compute_90 jit?"),
        ("compute_90", "12.0", "-", false, "compute_90 jit"),
        ("compute_70@7.8 compute_90@9.0", "12.0", "-", false, "compute_90 jit"),
        // highest PTX the driver takes is not refused because a newer one is
        ("compute_80@8.0 compute_90@9.0", "12.0", "575.51", false, "compute_80 jit"),
        // a cubin always wins over PTX
        ("sm_90 compute_90@9.0", "9.0", "575.51", false, "sm_90"),
        ("sm_86 compute_90@9.0", "9.0", "-", false, "compute_90 jit"),
        // fatbin with only sm_75..sm_90 cubins on an RTX 5090
        ("sm_75 sm_80 sm_86 sm_89 sm_90", "12.0", "-", false, "209"),
        ("sm_75 sm_80 sm_86 sm_89 sm_90 compute_90@9.0", "12.0", "575.51", false, "222"),
        ("sm_75 sm_80 sm_86 sm_89 sm_90 compute_90@9.0", "12.0", "580.65.06", false, "compute_90 jit"),
        // Thor: sm_101 (before CUDA 13) runs on a device reporting 11.0
        ("sm_101", "11.0", "-", false, "sm_101"),
        ("sm_110", "11.0", "-", false, "sm_110"),
        ("sm_101a", "11.0", "-", false, "sm_101a"),
        ("sm_100", "11.0", "-", false, "209"),
        // strict iGPU policy
        ("sm_86", "8.7", "-", false, "sm_86"),
        ("sm_86", "8.7", "-", true, "209"),
        ("sm_87", "8.7", "-", true, "sm_87"),
        ("sm_86 compute_86@7.8", "8.7", "-", true, "compute_86 jit"),
        ("sm_70", "7.2", "-", true, "209"),
        ("sm_86", "8.9", "-", true, "sm_86"),
        // nothing at all
        ("", "9.0", "-", false, "209"),
    ];
    assert!(cases.len() >= 40);
    for &(images, cc, driver, strict, expect) in cases {
        check(images, cc, driver, strict, expect);
    }
}

#[test]
fn rejections_name_every_image_not_chosen() {
    let images = [
        Image::cubin("sm_89".parse().unwrap()),
        Image::cubin("sm_90a".parse().unwrap()),
        Image::ptx("compute_120".parse().unwrap(), Some(PtxIsa::new(9, 0))),
    ];
    let device = Device::new(Cc::new(12, 0), Some("575.51".parse().unwrap()));
    let verdict = select(&images, &device, Policy::default());
    assert_eq!(verdict.selection, Err(LoadError::UnsupportedPtxVersion));
    assert_eq!(verdict.status(), Status::Fails);
    let reasons: Vec<String> = verdict
        .rejected
        .iter()
        .map(|r| match r.reason {
            Reason::Arch(m) => crate::explain::mismatch(images[r.image].target, device.cc, m),
            Reason::DriverTooOld(need) => need.to_string(),
        })
        .collect();
    expect_test::expect![[r#"
        [
            "sm_89 cubin runs only on CC 8.x at or above 8.9; a cubin never runs on another major",
            "sm_90a is arch-specific: it runs only on CC 9.0",
            "PTX ISA 9.0 needs driver >= 580.65.06 (CUDA 13.0)",
        ]
    "#]]
    .assert_debug_eq(&reasons);
}

#[test]
fn exact_cubin_reported() {
    let images = [
        Image::cubin(Target::cubin(8, 0)),
        Image::cubin(Target::cubin(8, 6)),
    ];
    let v = select(
        &images,
        &Device::new(Cc::new(8, 6), None),
        Policy::default(),
    );
    assert_eq!(
        v.selection,
        Ok(Selection::Cubin {
            image: 1,
            exact: true
        })
    );
    let v = select(
        &images,
        &Device::new(Cc::new(8, 9), None),
        Policy::default(),
    );
    assert_eq!(
        v.selection,
        Ok(Selection::Cubin {
            image: 1,
            exact: false
        })
    );
}
