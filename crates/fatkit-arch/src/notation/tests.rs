use super::*;

fn ctx13() -> Context<'static> {
    Context {
        toolkit: Some(CudaVersion::new(13, 0)),
        ..Context::default()
    }
}

/// Parses `input` in `notation` and compares the names, or the error, with `expect`.
fn check(notation: Notation, input: &str, expect: &str) {
    let got = match parse_list(input, notation, &ctx13()) {
        Ok(set) => set.to_string(),
        Err(e) => format!("error at {}: {e}", e.offset),
    };
    assert_eq!(got, expect, "{notation:?} {input:?}");
}

#[test]
#[rustfmt::skip]
fn parses_every_notation() {
    use Notation::*;
    let cases: &[(Notation, &str, &str)] = &[
        (Names, "sm_80 sm_90a compute_120", "sm_80 sm_90a compute_120"),
        (Names, "sm_100f,compute_120f; sm_70", "sm_70 sm_100f compute_120f"),
        (Names, "", ""),
        (Torch, "9.0", "sm_90"),
        (Torch, "8.6+PTX", "sm_86 compute_86"),
        (Torch, "7.0;7.5;8.0;8.6;9.0;10.0;12.0+PTX", "sm_70 sm_75 sm_80 sm_86 sm_90 sm_100 sm_120 compute_120"),
        (Torch, "7.0 7.5 8.0", "sm_70 sm_75 sm_80"),
        (Torch, "9.0a;10.0a", "sm_90a sm_100a"),
        (Torch, "12.0+ptx", "sm_120 compute_120"),
        (Cmake, "75-real;86;120-virtual", "sm_75 sm_86 compute_86 compute_120"),
        (Cmake, "90a-real", "sm_90a"),
        (Cmake, "100f", "sm_100f compute_100f"),
        (Cmake, "all-major", "sm_75 sm_80 sm_90 sm_100 sm_110 sm_120 compute_120"),
        (Cmake, "all", "sm_75 sm_80 sm_86 sm_87 sm_88 sm_89 sm_90 sm_100 sm_103 sm_110 sm_120 sm_121 compute_121"),
        (Nvcc, "-gencode arch=compute_80,code=[sm_80,compute_80]", "sm_80 compute_80"),
        (Nvcc, "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a", "sm_80 sm_90a"),
        (Nvcc, "--generate-code arch=compute_75,code=\"sm_75,compute_75\"", "sm_75 compute_75"),
        (Nvcc, "-gencode arch=compute_80,code=sm_86", "sm_86"),
        (Nvcc, "-arch=sm_90", "sm_90 compute_90"),
        (Nvcc, "-arch sm_90", "sm_90 compute_90"),
        (Nvcc, "-arch=compute_120", "compute_120"),
        (Nvcc, "-arch=compute_80 -code=sm_80,sm_86", "sm_80 sm_86"),
        (Nvcc, "--gpu-architecture=all-major", "sm_75 sm_80 sm_90 sm_100 sm_110 sm_120 compute_120"),
        // malformed lists name the bad element and where it is
        (Names, "sm_80 sm_91 sm_90", "error at 6: 'sm_91': unknown target sm_91: no CUDA toolkit builds it; did you mean sm_90 or sm_90a?"),
        (Names, "sm_80 sm80", "error at 6: 'sm80': expected sm_XY or compute_XY"),
        (Names, "sm_80a", "error at 0: 'sm_80a': arch-specific ('a') targets exist only for sm_90 and later"),
        (Torch, "7.0;8.x;9.0", "error at 4: '8.x': expected MAJOR.MINOR with an optional a/f suffix and +PTX, e.g. 8.6, 9.0a or 12.0+PTX"),
        (Torch, "8.6+PTX;9.1", "error at 8: '9.1': unknown target sm_91: no CUDA toolkit builds it; did you mean sm_90 or sm_90a?"),
        (Cmake, "75-real;86-rea", "error at 8: '86-rea': expected a CMake architecture such as 86, 86-real, 120-virtual, 90a, all, all-major or native"),
        (Cmake, "native", "error at 0: 'native': 'native' means the GPUs of this machine, and none is known here; list the targets instead"),
        (Nvcc, "-gencode arch=sm_80,code=sm_80", "error at 9: 'arch=sm_80,code=sm_80': arch= takes a virtual architecture; write compute_80"),
        (Nvcc, "-gencode arch=compute_90,code=sm_80", "error at 9: 'arch=compute_90,code=sm_80': code=sm_80 cannot be generated from arch=compute_90"),
        (Nvcc, "-gencode", "error at 0: '-gencode': -gencode needs a value"),
        (Nvcc, "-O3 -arch=sm_80", "error at 0: '-O3': not a target flag; expected -gencode, --generate-code, -arch, --gpu-architecture, -code or --gpu-code"),
        (Nvcc, "-code=sm_80", "error at 6: 'sm_80': -code needs an -arch to go with it"),
    ];
    for &(notation, input, expect) in cases {
        check(notation, input, expect);
    }
}

#[test]
fn all_needs_a_toolkit() {
    let err = parse_list("all", Notation::Cmake, &Context::default()).unwrap_err();
    assert!(err.reason.contains("depends on the toolkit"), "{err}");
}

#[test]
fn native_uses_the_gpus_given() {
    let native = [Cc::new(9, 0), Cc::new(12, 0)];
    let ctx = Context {
        native: Some(&native),
        ..Context::default()
    };
    assert_eq!(
        parse_list("native", Notation::Cmake, &ctx)
            .unwrap()
            .to_string(),
        "sm_90 sm_120"
    );
    assert_eq!(
        parse_list("-arch=native", Notation::Nvcc, &ctx)
            .unwrap()
            .to_string(),
        "sm_90 sm_120"
    );
}

#[test]
fn any_notation_mixes_elements() {
    let set = parse_any("sm_70 8.6+PTX 90-real compute_120", &ctx13()).unwrap();
    assert_eq!(set.to_string(), "sm_70 sm_86 compute_86 sm_90 compute_120");
    let set = parse_any("-gencode arch=compute_80,code=sm_80 -arch=sm_90", &ctx13()).unwrap();
    assert_eq!(set.to_string(), "sm_80 sm_90 compute_90");
    let err = parse_any("sm_80 ampere", &ctx13()).unwrap_err();
    assert_eq!(err.input, "ampere");
}

#[test]
fn renders_canonical_strings() {
    for (notation, canonical) in [
        (Notation::Names, "sm_70 sm_86 compute_86 sm_90a compute_120"),
        (Notation::Torch, "7.0;8.6+PTX;9.0a;12.0+PTX"),
        (Notation::Cmake, "75-real;86;90a-real;100f;120-virtual"),
        (
            Notation::Nvcc,
            "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90] -gencode arch=compute_120,code=compute_120",
        ),
    ] {
        let set = parse_list(canonical, notation, &ctx13()).unwrap();
        assert_eq!(render(&set, notation).unwrap(), canonical, "{notation:?}");
    }
}

/// Every notation round-trips every set it can express, over sets built from all known targets.
#[test]
fn round_trips_known_targets() {
    let known: Vec<Target> = toolkit::known_targets().iter().collect();
    // A small deterministic generator: the sets are windows and strides over the known targets.
    let mut sets = Vec::new();
    for stride in 1..=5 {
        for start in 0..known.len() {
            sets.push(
                known
                    .iter()
                    .skip(start)
                    .step_by(stride)
                    .take(7)
                    .copied()
                    .collect::<TargetSet>(),
            );
        }
    }
    let mut rendered = 0;
    for set in &sets {
        for notation in Notation::ALL {
            match render(set, notation) {
                Ok(text) => {
                    rendered += 1;
                    let back = parse_list(&text, notation, &ctx13())
                        .unwrap_or_else(|e| panic!("{notation:?} {text:?}: {e}"));
                    assert_eq!(&back, set, "{notation:?} {text:?}");
                }
                Err(e) => {
                    assert_eq!(notation, Notation::Torch, "{e}");
                    assert!(set.iter().any(|t| t.is_ptx()));
                }
            }
        }
    }
    assert!(rendered > 3 * sets.len());
}

#[test]
fn torch_cannot_write_ptx_alone() {
    let set: TargetSet = [Target::ptx(8, 6)].into_iter().collect();
    let err = render(&set, Notation::Torch).unwrap_err();
    assert_eq!(
        err.to_string(),
        "compute_86: TORCH_CUDA_ARCH_LIST cannot ask for PTX alone; 8.6+PTX adds the cubin too"
    );
}
