//! The package's answer on generated libraries: modules of chosen images, kernels with bodies
//! or compiled out, in distributions of one or several libraries; the rules of
//! docs/ARCH_RULES.md section 11 checked on shapes written here and on shapes generated.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;

use fatkit_arch::load::Stub;
use fatkit_arch::rules::{Device, Policy};
use fatkit_arch::{Cc, Compression, ImageKind, Target};
use fatkit_fatbin::container::EntryKind;
use fatkit_fatbin::host::Machine;
use fatkit_fatbin::inspect::{ContainerReport, FileReport, ImageReport};
use fatkit_fatbin::{Format, Origin};

use super::*;
use crate::coverage::Declarations;
use crate::fix::Who;
use crate::summary::{self, Held};

/// A module: its targets, with the kernels it holds, each with a body or compiled out.
struct Module {
    targets: Vec<&'static str>,
    /// Kernel name, and the targets (of `targets`) whose image holds it only as a stub.
    kernels: Vec<(String, Vec<&'static str>)>,
}

fn image(target: &str, kernels: &[(String, Vec<&'static str>)], offset: u64) -> ImageReport {
    let t = Target::parse_name(target).unwrap();
    let kind = match t.kind {
        ImageKind::Cubin => EntryKind::Cubin,
        ImageKind::Ptx => EntryKind::Ptx,
    };
    ImageReport {
        offset,
        kind,
        target: Some(t),
        arch: 0,
        code_version: [8, 5],
        ptx_isa: t.is_ptx().then(|| "8.5".parse().unwrap()),
        compression: Compression::None,
        flags: 0,
        stored_size: 64,
        image_size: None,
        identifier: None,
        toolkit: (!t.is_ptx()).then(|| "12.8".to_owned()),
        image_target: None,
        kernels: kernels.iter().map(|(k, _)| k.clone()).collect(),
        empty_bodies: kernels
            .iter()
            .filter(|(_, stubs)| stubs.contains(&target))
            .map(|(k, _)| (k.clone(), Stub::Returns))
            .collect(),
        code_read: true,
        error: None,
    }
}

/// A host library `name` of `modules`, built for x86-64.
fn report(name: &str, modules: &[Module]) -> FileReport {
    FileReport {
        name: name.to_owned(),
        format: Format::Elf,
        containers: modules
            .iter()
            .enumerate()
            .map(|(m, module)| ContainerReport {
                offset: (m as u64 + 1) << 20,
                origin: Origin::Section(".nv_fatbin".to_owned()),
                size: 1 << 16,
                fingerprint: m as u64,
                entries: module
                    .targets
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        image(t, &module.kernels, ((m as u64 + 1) << 20) + i as u64 * 256)
                    })
                    .collect(),
            })
            .collect(),
        images: Vec::new(),
        members: Vec::new(),
        errors: Vec::new(),
        refused: None,
        runtimes: Vec::new(),
        machine: Some(Machine::X86_64),
        unnamed: None,
        sources: Vec::new(),
        compilers: Vec::new(),
        nvrtc_sources: Vec::new(),
        torch: false,
    }
}

fn module(targets: &'static str, kernels: usize, prefix: &str, stubs: &[&'static str]) -> Module {
    Module {
        targets: targets.split(' ').collect(),
        kernels: (0..kernels)
            .map(|k| {
                let t: Vec<&'static str> = stubs.to_vec();
                (format!("{prefix}{k}"), t)
            })
            .collect(),
    }
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_owned().into_boxed_str())
}

/// The libraries `libs` (name, modules) of distribution `package`, answered on `gpu`.
fn answer(
    package: Option<&str>,
    libs: Vec<(&str, Vec<Module>)>,
    gpu: &str,
    strict: bool,
) -> (Vec<Library>, InputAnswer) {
    let device = Device::new(gpu.parse::<Cc>().unwrap(), None).named(format!("CC {gpu}"));
    let reports: Vec<FileReport> = libs.iter().map(|(n, m)| report(n, m)).collect();
    let declarations = Declarations::default();
    let mut libraries: Vec<Library> = reports
        .iter()
        .zip(&libs)
        .map(|(r, (n, _))| {
            summary::library(
                (*n).to_owned(),
                package.map(str::to_owned),
                r,
                &declarations,
                std::slice::from_ref(&device),
                Policy::default(),
                match strict {
                    true => Held::Strict,
                    false => Held::General,
                },
            )
        })
        .collect();
    let devices = [device];
    let answer = of(
        &mut libraries,
        &[],
        (&BTreeMap::new(), strict),
        (&super::RunTime::default(), &devices, false),
        &[],
    );
    (libraries, answer)
}

const GENERAL: &str = "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120";

#[test]
fn a_stub_in_the_image_built_for_the_gpu_is_the_builds_intent() {
    // torch's shape: CUTLASS kernels for sm_100 only, compiled out of every other image.
    let torch = || {
        let stubs = &["sm_75", "sm_80", "sm_86", "sm_90", "sm_120"];
        vec![(
            "libtorch_cuda.so",
            vec![
                module(GENERAL, 40, "add", &[]),
                module(GENERAL, 3, "enable_3x_kernel_for_sm10_", stubs),
            ],
        )]
    };
    let (_, a) = answer(Some("torch 2.15.0"), torch(), "12.0", false);
    let w = &a.on[0];
    assert_eq!(w.verdict, Verdict::Yes, "{w:?}");
    assert_eq!(w.aside.compiled_out, 3);
    assert!(w.fixes.is_empty(), "{:?}", w.fixes);
    // --strict: today's kernel-level reading, the stubs fail, and the fix says the build
    // meant them for other GPUs.
    let (libs, a) = answer(Some("torch 2.15.0"), torch(), "12.0", true);
    assert_eq!(a.on[0].verdict, Verdict::Partly);
    assert!(matches!(libs[0].on[0].fix, Some(Fix::CompiledOut { .. })));
}

#[test]
fn a_stub_reached_through_a_fallback_fails() {
    // xformers' FA3: 8.0+PTX and 9.0a; on CC 12.0 only compute_80 PTX loads, and the
    // Hopper kernels are empty in it.
    let libs = vec![(
        "flash_attn_3/_C.so",
        vec![
            module("sm_80 sm_90a compute_80", 10, "fwd_sm80_", &[]),
            module(
                "sm_80 sm_90a compute_80",
                15,
                "enable_sm90_or_later_",
                &["sm_80", "compute_80"],
            ),
        ],
    )];
    let (libs, a) = answer(Some("xformers 0.0.34"), libs, "12.0", false);
    let w = &a.on[0];
    assert_eq!(w.verdict, Verdict::Partly, "{w:?}");
    assert_eq!(w.compiled_out, 15);
    assert!(matches!(libs[0].on[0].fix, Some(Fix::Bodies { .. })));
}

#[test]
fn an_arch_specific_library_beside_a_core_that_runs_is_aside() {
    let libs = vec![
        ("_C.abi3.so", vec![module(GENERAL, 50, "k", &[])]),
        (
            "_vllm_fa3_C.abi3.so",
            vec![module("sm_90a", 20, "fa3_", &[])],
        ),
        ("_qutlass_C.abi3.so", vec![module("sm_100f", 5, "q", &[])]),
        // Built for one generation (Ampere), beside the core.
        (
            "flash_ops.abi3.so",
            vec![module("sm_80 sm_86", 7, "fa2_", &[])],
        ),
    ];
    let (_, a) = answer(Some("vllm 0.33.0"), libs, "12.0", false);
    let w = &a.on[0];
    assert_eq!(w.verdict, Verdict::Yes, "{w:?}");
    assert_eq!(w.aside.libraries.len(), 3);
    assert!(w.fixes.is_empty(), "{:?}", w.fixes);
}

#[test]
fn a_general_list_that_leaves_the_gpu_out_fails_with_a_build_that_can_exist() {
    // torch 2.7.1 cu126 on an RTX 5090: sm_50 to sm_90, no PTX.
    let libs = vec![(
        "libtorch_cuda.so",
        vec![module(
            "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90",
            30,
            "k",
            &[],
        )],
    )];
    let (_, a) = answer(Some("torch 2.7.1"), libs, "12.0", false);
    let w = &a.on[0];
    assert_eq!(w.verdict, Verdict::No);
    assert_eq!(
        w.fixes,
        [Fix::Build {
            who: Who::Package("torch".to_owned()),
            cc: "12.0".parse().unwrap()
        }]
    );
}

#[test]
fn a_core_built_for_newer_gpus_only_is_no_with_no_rebuild() {
    // sgl-kernel on a T4: its core starts at CC 8.0.
    let libs = vec![
        (
            "common_ops.abi3.so",
            vec![module("sm_80 sm_89 sm_90 sm_100 sm_120", 30, "k", &[])],
        ),
        ("flash_ops.abi3.so", vec![module("sm_90a", 10, "f", &[])]),
    ];
    let (_, a) = answer(Some("sgl_kernel 0.3.21"), libs, "7.5", false);
    let w = &a.on[0];
    assert_eq!(w.verdict, Verdict::No, "{w:?}");
    assert!(
        w.fixes.iter().all(|f| matches!(f, Fix::Older { .. })),
        "{:?}",
        w.fixes
    );
}

#[test]
fn extensions_for_other_gpus_only_are_no_failure_of_their_package() {
    // torchao on a T4: a Hopper CUTLASS extension and a Blackwell MX one, nothing general.
    let libs = vec![
        (
            "_C_cutlass_90a.abi3.so",
            vec![module("sm_90a", 14, "c", &[])],
        ),
        (
            "_C_mxfp8.so",
            vec![module("sm_100 compute_120", 4, "m", &[])],
        ),
    ];
    let (_, a) = answer(Some("torchao 0.18.0"), libs, "7.5", false);
    assert_eq!(a.on[0].verdict, Verdict::ExtensionsElsewhere);
    // One such library alone is what its distribution is: nothing for this GPU.
    let libs = vec![("fa3.so", vec![module("sm_90a", 14, "c", &[])])];
    let (_, a) = answer(Some("flash_attn_3 3.0"), libs, "12.0", false);
    assert_eq!(a.on[0].verdict, Verdict::No);
}

/// A small deterministic generator (xorshift): shapes no one wrote.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[(self.next() % from.len() as u64) as usize]
    }
}

const TARGETS: &[&str] = &[
    "sm_50",
    "sm_61",
    "sm_70",
    "sm_75",
    "sm_80",
    "sm_86",
    "sm_89",
    "sm_90",
    "sm_90a",
    "sm_100",
    "sm_100a",
    "sm_100f",
    "sm_120",
    "sm_120f",
    "compute_75",
    "compute_80",
    "compute_90",
    "compute_120",
];
const GPUS: &[&str] = &[
    "6.1", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0", "12.1",
];

/// Generated libraries and distributions, checked against what holds of every shape: a fix
/// never names a build for a GPU its library already has a cubin built for; `--strict` sets
/// nothing aside and never passes what the default reading fails; a library set aside whole
/// never speaks; the kernels counted add up.
#[test]
fn generated_packages_keep_the_rules() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for case in 0..400 {
        let n_libs = 1 + (rng.next() % 4) as usize;
        let mut libs: Vec<(String, Vec<Module>)> = Vec::new();
        for l in 0..n_libs {
            let n_mods = 1 + (rng.next() % 3) as usize;
            let mut mods = Vec::new();
            for m in 0..n_mods {
                let n_targets = 1 + (rng.next() % 4) as usize;
                let mut targets: Vec<&'static str> =
                    (0..n_targets).map(|_| rng.pick(TARGETS)).collect();
                targets.sort();
                targets.dedup();
                let stubbed: Vec<&'static str> = targets
                    .iter()
                    .copied()
                    .filter(|_| rng.next().is_multiple_of(3))
                    .collect();
                let with_stubs = stubbed.len() < targets.len() && !stubbed.is_empty();
                let name = leak(&format!("l{l}m{m}k"));
                mods.push(module(
                    leak(&targets.join(" ")),
                    1 + (rng.next() % 5) as usize,
                    name,
                    if with_stubs { &stubbed } else { &[] },
                ));
            }
            libs.push((format!("lib{l}.so"), mods));
        }
        let gpu = rng.pick(GPUS);
        let shaped = |libs: &[(String, Vec<Module>)]| -> Vec<(&'static str, Vec<Module>)> {
            libs.iter()
                .map(|(n, mods)| {
                    (
                        leak(n),
                        mods.iter()
                            .map(|m| Module {
                                targets: m.targets.clone(),
                                kernels: m.kernels.clone(),
                            })
                            .collect(),
                    )
                })
                .collect()
        };
        let (by_default, a) = answer(Some("pkg 1.0"), shaped(&libs), gpu, false);
        let (_, strict) = answer(Some("pkg 1.0"), shaped(&libs), gpu, true);
        let (w, s) = (&a.on[0], &strict.on[0]);
        let what = format!("case {case} on {gpu}: {w:?}");
        assert_eq!(s.aside.kernels(&by_default), 0, "{what}");
        assert!(
            !s.verdict.passes() || w.verdict.passes(),
            "{what} / strict {s:?}"
        );
        let cc: Cc = gpu.parse().unwrap();
        for l in &by_default {
            let has_own = l
                .cubins
                .iter()
                .any(|t| t.suffix == fatkit_arch::Suffix::None && t.cc == cc);
            if let Some(Fix::Build { cc: c, .. }) = &l.on[0].fix {
                assert!(
                    !(has_own && *c == cc),
                    "a build it has: {what}\n{:?} {:?} {:?} {:?}",
                    l.cubins,
                    l.ptx,
                    l.on[0].narrow,
                    l.on[0].failing
                );
            }
        }
        for (i, _) in &w.aside.libraries {
            assert!(!w.failing_libraries.contains(i), "{what}");
        }
        let total: usize = by_default.iter().map(|l| l.kernels).sum();
        assert!(w.kernels <= total, "{what}");
    }
}

/// Every GPU of the product tables whose first driver the tables give, on a library of low
/// PTX (compute_75, ISA 8.5: a CUDA 12.5 driver JITs it): without a driver, the floor said is
/// never below the first driver that knows the GPU; with the driver of the CUDA release just
/// before that one (`DriverVersion::Cuda`), nothing runs, the blocker is that the driver
/// predates the GPU, and the one fix is to update it (no older build can run there).
#[test]
fn no_floor_is_below_the_driver_that_knows_the_gpu() {
    use fatkit_arch::driver::DriverVersion;
    use fatkit_arch::toolkit::TOOLKITS;
    let mut dated = 0;
    let mut ccs: Vec<Cc> = fatkit_arch::products::PRODUCTS
        .iter()
        .map(|p| p.cc)
        .collect();
    ccs.sort();
    ccs.dedup();
    for cc in ccs {
        let Some(first) = fatkit_arch::toolkit::first_cuda(cc) else {
            continue;
        };
        dated += 1;
        let modules = vec![Module {
            targets: vec!["compute_75"],
            kernels: vec![("k".to_owned(), Vec::new())],
        }];
        let r = report("libk.so", &modules);
        let on = |driver: Option<DriverVersion>| {
            let device = Device::new(cc, driver).named(format!("CC {cc}"));
            let mut libraries = vec![summary::library(
                "libk.so".to_owned(),
                Some("k 1.0".to_owned()),
                &r,
                &Declarations::default(),
                std::slice::from_ref(&device),
                Policy::default(),
                Held::General,
            )];
            let a = of(
                &mut libraries,
                &[],
                (&BTreeMap::new(), false),
                (&super::RunTime::default(), &[device], false),
                &[],
            );
            (libraries, a)
        };
        let (libs, _) = on(None);
        let floor = libs[0].on[0].floor.as_ref().map(|f| f.cuda);
        assert!(
            floor >= Some(first),
            "CC {cc}: floor {floor:?} below CUDA {first}"
        );
        let needs = libs[0].on[0].needs.as_ref().map(|f| f.cuda);
        assert!(
            needs >= Some(first),
            "CC {cc}: needs {needs:?} below CUDA {first}"
        );
        let before = TOOLKITS
            .iter()
            .map(|t| t.version)
            .filter(|v| *v < first)
            .max()
            .unwrap();
        let (_, a) = on(Some(DriverVersion::Cuda(before)));
        let whole = &a.on[0];
        assert_eq!(
            whole.verdict,
            Verdict::No,
            "CC {cc} on a CUDA {before} driver"
        );
        let Some(Blocker::Driver { need, .. }) = &whole.blocker else {
            panic!("CC {cc}: no driver blocker: {:?}", whole.blocker);
        };
        assert!(
            matches!(need.what, crate::summary::Needs::Gpu(c) if c == cc),
            "{need:?}"
        );
        let fixes: Vec<String> = whole.fixes.iter().map(ToString::to_string).collect();
        assert!(
            fixes.len() == 1
                && fixes[0].starts_with("update the NVIDIA driver to")
                && !fixes[0].contains(", or "),
            "CC {cc}: {fixes:?}"
        );
    }
    assert!(dated >= 5, "only {dated} GPUs dated by the tables");
}
