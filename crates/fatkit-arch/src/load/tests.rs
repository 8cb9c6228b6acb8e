//! The driver model against the cases measured on real inputs (issue: one image per module).

use super::*;
use crate::rules::Doubt;
use crate::{Cc, Target};

fn t(name: &str) -> Target {
    name.parse().unwrap()
}

fn image(name: &str) -> Image {
    let target = t(name);
    match target.kind {
        crate::ImageKind::Cubin => Image::cubin(target),
        crate::ImageKind::Ptx => Image::ptx(target, Some("9.2".parse().unwrap())),
    }
}

/// `"sm_80:k,k_x sm_86:k"`: images with the kernels each holds.
fn module(spec: &str) -> Module<String> {
    let parsed: Vec<(Image, Vec<String>)> = spec
        .split_whitespace()
        .map(|s| {
            let (name, ks) = s.split_once(':').unwrap_or((s, ""));
            let ks = ks.split(',').filter(|k| !k.is_empty()).map(str::to_owned);
            (image(name), ks.collect())
        })
        .collect();
    Module::of(parsed.iter().map(|(i, ks)| (*i, ks.iter())))
}

fn device(cc: &str, driver: Option<&str>) -> Device {
    Device::new(
        cc.parse::<Cc>().unwrap(),
        driver.map(|d| d.parse().unwrap()),
    )
}

/// Each kernel as `name=status/fate`, e.g. `k=runs/loaded k_x=fails/absent`.
fn answer(m: &Module<String>, d: &Device) -> String {
    let a = m.on(d, Policy::default());
    a.kernels
        .iter()
        .map(|(k, fate, status)| {
            let fate = match fate {
                Fate::Loaded { .. } => "loaded".to_owned(),
                Fate::Absent { elsewhere, .. } => format!("absent({})", elsewhere.len()),
                Fate::NoLoad(e) => e.code().to_string(),
                Fate::Stub { kind, .. } => format!("stub({kind:?})"),
            };
            format!("{k}={status:?}/{fate}").to_lowercase()
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn a_kernel_missing_from_the_loaded_image_is_not_found_though_a_lower_image_has_it() {
    // k_x = { exclude = ["sm_86"] } on sm_80 + sm_86: an RTX 3090 (8.6) loads the sm_86 cubin.
    let m = module("sm_80:k,k_x sm_86:k");
    assert_eq!(
        answer(&m, &device("8.6", None)),
        "k=runs/loaded k_x=fails/absent(1)"
    );
    assert_eq!(
        answer(&m, &device("8.9", None)),
        "k=runs/loaded k_x=fails/absent(1)"
    );
    assert_eq!(
        answer(&m, &device("8.0", None)),
        "k=runs/loaded k_x=runs/loaded"
    );
    assert_eq!(
        answer(&m, &device("9.0", None)),
        "k=fails/209 k_x=fails/209"
    );
}

#[test]
fn ptx_holding_a_kernel_does_not_serve_it_where_a_cubin_loads() {
    // exclude = ["sm_120"] with full: compute_120 PTX has k_x, the sm_120 cubin does not.
    let m = module("sm_90:k,k_x sm_120:k compute_120:k,k_x");
    assert_eq!(
        answer(&m, &device("12.0", None)),
        "k=runs/loaded k_x=fails/absent(2)"
    );
    assert_eq!(
        answer(&m, &device("12.1", None)),
        "k=runs/loaded k_x=fails/absent(2)"
    );
    // No cubin for 13.0... there is none in the tables; a CC the PTX alone serves finds both.
    let ptx_only = module("sm_90:k compute_100:k,k_x");
    assert_eq!(
        answer(&ptx_only, &device("10.0", None)),
        "k=runs/loaded k_x=runs/loaded"
    );
}

#[test]
fn an_image_with_no_kernels_is_found() {
    let m = module("sm_75 sm_80:k");
    assert_eq!(m.empty_images(), vec![0]);
    assert_eq!(answer(&m, &device("7.5", None)), "k=fails/absent(1)");
    assert_eq!(answer(&m, &device("8.0", None)), "k=runs/loaded");
}

/// Issue 46, settled on an H100 (CC 9.0, driver 580.159.04): an sm_80 entry header around an
/// sm_90 cubin gave 209 there, where the cubin's own target would have fit: the driver chooses
/// a cubin by its entry header.
#[test]
fn a_cubin_is_chosen_by_its_entry_header() {
    let lying = Image::cubin(t("sm_90")).headed(Some(t("sm_80")));
    assert_eq!(lying.header, Some(t("sm_80")));
    let m: Module<String> = Module::of([(lying, [&"k".to_owned()])]);
    // CC 9.0: the header does not fit, so nothing is chosen: 209, as the H100 said.
    assert_eq!(answer(&m, &device("9.0", None)), "k=fails/209");
    // CC 8.0: chosen by its header, but its own ELF is sm_90: what the load does is unknown.
    let a100 = m.on(&device("8.0", None), Policy::default());
    assert_eq!(a100.kernels[0].2, Status::Unknown);
    assert!(matches!(
        a100.verdict.doubts[..],
        [Doubt::CubinHeaderDisagrees { image: 0, .. }]
    ));
    assert_eq!(
        m.on(&device("7.0", None), Policy::default()).kernels[0].2,
        Status::Fails
    );
    // A family header around a plain cubin of the same CC agrees: the `f` is not in the ELF.
    assert_eq!(
        Image::cubin(t("sm_100")).headed(Some(t("sm_100f"))).header,
        None
    );
    assert_eq!(
        Image::cubin(t("sm_90a")).headed(Some(t("sm_90"))).header,
        Some(t("sm_90"))
    );
}

/// Issue 46: `.target sm_90a` PTX of ISA 9.2 in a plain compute_90 entry gave 222 on an H100
/// with a CUDA 13.0 driver: whichever target the driver reads, it refuses that ISA, so the
/// disagreement decides nothing there.
#[test]
fn a_header_dispute_that_changes_nothing_is_no_doubt() {
    let ptx =
        Image::ptx(t("compute_90a"), Some("9.2".parse().unwrap())).headed(Some(t("compute_90")));
    let m: Module<String> = Module::of([(ptx, [&"k".to_owned()])]);
    assert_eq!(
        answer(&m, &device("9.0", Some("580.159.04"))),
        "k=fails/222"
    );
    // A driver that takes the ISA: the two readings differ no more on 9.0 (both run there)...
    assert_eq!(
        m.on(&device("9.0", Some("595.45.04")), Policy::default())
            .kernels[0]
            .2,
        Status::Runs
    );
    // ...but on 10.0 plain PTX would JIT and `a` PTX would not: unknown.
    assert_eq!(
        m.on(&device("10.0", Some("595.45.04")), Policy::default())
            .kernels[0]
            .2,
        Status::Unknown
    );
}

#[test]
fn arch_specific_ptx_in_a_plain_entry_is_not_jit_compiled_elsewhere() {
    // `.target sm_90a` PTX in an entry without the arch-specific flag.
    let ptx =
        Image::ptx(t("compute_90a"), Some("8.0".parse().unwrap())).headed(Some(t("compute_90")));
    let m: Module<String> = Module::of([(ptx, [&"k".to_owned()])]);
    for cc in ["10.0", "12.0"] {
        let a = m.on(&device(cc, None), Policy::default());
        assert_ne!(a.kernels[0].2, Status::Runs, "CC {cc}");
    }
    // Read as the image says, with no header dispute, it fails there outright.
    let honest: Module<String> =
        Module::of([(Image::ptx(t("compute_90a"), None), [&"k".to_owned()])]);
    assert_eq!(answer(&honest, &device("10.0", None)), "k=fails/209");
}

#[test]
fn a_cubin_newer_than_the_tables_or_the_driver_is_unknown() {
    let v = |s: &str| s.parse::<crate::CudaVersion>().unwrap();
    let cubin = |tk: &str| {
        Module::<String>::of([(
            Image::cubin(t("sm_90")).built_by(Some(v(tk))),
            [&"k".to_owned()],
        )])
    };
    let status = |m: &Module<String>, d: Option<&str>| {
        m.on(&device("9.0", d), Policy::default()).kernels[0].2
    };
    // CUDA 19.9: no driver given, and on driver 580 (CUDA 13.0).
    assert_eq!(status(&cubin("19.9"), None), Status::Unknown);
    assert_eq!(status(&cubin("19.9"), Some("580.65.06")), Status::Unknown);
    // A driver of CUDA 19.9's level settles it.
    assert_eq!(status(&cubin("19.9"), Some("19090")), Status::Runs);
    // CUDA 13.2 on a 12.9 driver: a newer major; 12.8 cubins on a 12.0 driver: same major.
    assert_eq!(status(&cubin("13.2"), Some("575.51.03")), Status::Unknown);
    assert_eq!(status(&cubin("12.8"), Some("525.60.13")), Status::Runs);
    assert_eq!(status(&cubin("13.2"), None), Status::Runs);
}

#[test]
fn ptx_of_an_isa_no_known_driver_takes_is_unknown_without_a_driver() {
    let m: Module<String> = Module::of([(
        Image::ptx(t("compute_90"), Some("9.9".parse().unwrap())),
        [&"k".to_owned()],
    )]);
    assert_eq!(
        m.on(&device("9.0", None), Policy::default()).kernels[0].2,
        Status::Unknown
    );
    // A driver the tables place settles it: CUDA 12.9's refuses ISA 9.9 (222).
    assert_eq!(answer(&m, &device("9.0", Some("575.51.03"))), "k=fails/222");
}

#[test]
fn a_driver_older_than_the_gpu_does_not_see_it() {
    let m = module("sm_120:k compute_120:k");
    // No R555 driver runs Blackwell: CUDA 12.8 (570.26) is the first that knows CC 12.0.
    assert_eq!(
        answer(&m, &device("12.0", Some("555.42.02"))),
        "k=fails/100"
    );
    assert_eq!(answer(&m, &device("12.0", Some("12050"))), "k=fails/100");
    assert_eq!(answer(&m, &device("12.0", Some("570.26"))), "k=runs/loaded");
    // Volta predates the tables (CUDA 11.0): nothing is said of older drivers.
    let v = module("sm_70:k");
    assert_eq!(
        answer(&v, &device("7.0", Some("450.36.06"))),
        "k=runs/loaded"
    );
    // Hopper arrived with CUDA 11.8 (520.61.05).
    let h = module("sm_90:k");
    assert_eq!(answer(&h, &device("9.0", Some("515.43.04"))), "k=fails/100");
    let why = crate::explain::explain(
        &h.images,
        &device("9.0", Some("515.43.04")),
        Policy::default(),
    );
    assert_eq!(
        why.fix.as_deref(),
        Some("install a driver of CUDA 11.8 or later (>= 520.61.05): older ones do not know compute capability 9.0")
    );
}

#[test]
fn a_kernel_compiled_out_of_the_loaded_image_does_not_run_where_another_image_has_its_body() {
    use crate::load::Stub;
    // sm_75 + sm_80 + compute_75: `x` returns at once in sm_75 and the PTX, `t` traps in
    // sm_75, `e` is empty in every image (written so), `k` has a body everywhere.
    let m = module("sm_75:k,x,t,e sm_80:k,x,t,e compute_75:k,x,t,e");
    let x = "x".to_owned();
    let t = "t".to_owned();
    let e = "e".to_owned();
    let m = m.with_stubs(&[
        (
            0,
            &[
                (x.clone(), Stub::Returns),
                (t.clone(), Stub::Traps),
                (e.clone(), Stub::Returns),
            ][..],
        ),
        (1, &[(e.clone(), Stub::Returns)][..]),
        (
            2,
            &[(x.clone(), Stub::Returns), (e.clone(), Stub::Returns)][..],
        ),
    ]);
    assert_eq!(
        answer(&m, &device("7.5", None)),
        "e=runs/loaded k=runs/loaded t=fails/stub(traps) x=fails/stub(returns)"
    );
    assert_eq!(
        answer(&m, &device("8.0", None)),
        "e=runs/loaded k=runs/loaded t=runs/loaded x=runs/loaded"
    );
    // An image whose code was not read corroborates nothing: with sm_80 unread, `t` (a trap
    // in sm_75, unread in sm_80, a body in the PTX) is still a stub; `x` has no body anywhere
    // read, so it is not one.
    let m = module("sm_75:k,x,t sm_80:k,x,t compute_75:k,x,t").with_stubs(&[
        (
            0,
            &[(x.clone(), Stub::Returns), (t.clone(), Stub::Traps)][..],
        ),
        (2, &[(x.clone(), Stub::Returns)][..]),
    ]);
    assert_eq!(
        answer(&m, &device("7.5", None)),
        "k=runs/loaded t=fails/stub(traps) x=runs/loaded"
    );
}
