use super::*;

fn set(s: &str) -> TargetSet {
    fatkit_arch::notation::parse_any(s, &Default::default()).unwrap()
}

#[test]
fn kernel_names_are_identifiers_or_globs_of_them() {
    // Issue 41: a name reached nvcc as -DFATKIT_SKIP_<name>, a comma or a NUL in it too.
    let profile = set("sm_70 sm_80");
    for bad in [
        "a,b",
        "a\0b",
        "$(touch P)",
        "a b",
        "1abc",
        "",
        "a-b",
        "a\"b",
        "k;x",
    ] {
        let e = KernelRule::exclude(bad, &["sm_70".to_owned()], &profile).unwrap_err();
        assert!(matches!(e, RuleError::Pattern(_)), "{bad:?}: {e}");
        assert!(
            e.to_string().contains("is not a kernel name"),
            "{bad:?}: {e}"
        );
        assert!(KernelRule::targets(bad, "sm_80+", &profile).is_err());
    }
    for good in ["saxpy", "_Z5saxpyPfS_", "*_bf16", "gemm_?x?", "*"] {
        assert!(KernelRule::exclude(good, &["sm_70".to_owned()], &profile).is_ok());
    }
}

fn no_forms(_: &str) -> Vec<String> {
    Vec::new()
}

/// A declaration may name a kernel by its demangled C++ name, whole or without template
/// arguments (every instantiation), globs of either too; garbage is still refused, and only a
/// C identifier becomes a `-DFATKIT_SKIP_` define.
#[test]
fn demangled_names_declare_kernels() {
    let profile = set("sm_70 sm_80");
    for good in [
        "marlin::Marlin<256, 4, true>",
        "marlin::Marlin",
        "marlin::Marlin<*>",
        "vllm::convert_fp8_kernel<float, unsigned char, (vllm::Fp8KVCacheDataType)0>",
        "dequant_kernel<float>",
        "ns::k<-1>",
    ] {
        let rule = KernelRule::exclude(good, &["sm_70".to_owned()], &profile).unwrap();
        assert!(!rule.skip_define, "{good}");
    }
    for bad in [
        "a b",
        "marlin::Marlin<256",
        "k<float>>",
        " ns::k",
        "ns::k ",
        "ns::k<$(x)>",
        "ns::k<\"a\">",
        "ns::k;",
        "::",
        "1ns::k",
    ] {
        let e = KernelRule::targets(bad, "sm_80+", &profile).unwrap_err();
        assert!(matches!(e, RuleError::Pattern(_)), "{bad:?}: {e}");
    }
    assert!(
        KernelRule::exclude("saxpy", &["sm_70".to_owned()], &profile)
            .unwrap()
            .skip_define
    );

    let symbol = "_ZN6marlin6MarlinILi256ELi4ELb1EEEvPKv";
    let forms = |k: &str| match k {
        "_ZN6marlin6MarlinILi256ELi4ELb1EEEvPKv" => vec![
            "marlin::Marlin<256, 4, true>".to_owned(),
            "marlin::Marlin".to_owned(),
        ],
        _ => Vec::new(),
    };
    for pattern in [
        "marlin::Marlin",
        "marlin::Marlin<256, 4, true>",
        "marlin::*",
        symbol,
    ] {
        let sets = KernelSets {
            as_built: false,
            rules: vec![KernelRule::targets(pattern, "sm_80+", &profile).unwrap()],
            files: Vec::new(),
        };
        let kernels: BTreeMap<String, TargetSet> = [
            (symbol.to_owned(), set("sm_80")),
            ("other".to_owned(), set("sm_70 sm_80")),
        ]
        .into();
        let declared = sets
            .check(&kernels, &profile, (&profile, None), &forms)
            .unwrap();
        assert_eq!(declared.keys().collect::<Vec<_>>(), [symbol], "{pattern}");
        // Without its forms the symbol alone is matched.
        let plain = sets.check(&kernels, &profile, (&profile, None), &no_forms);
        assert_eq!(plain.is_ok(), pattern == symbol, "{pattern}");
        if let Err(mismatches) = plain {
            assert!(mismatches[0].to_string().starts_with("kernel _ZN6marlin"));
        }
    }
    // A mismatch names the kernel as people read it.
    let sets = KernelSets::default();
    let kernels: BTreeMap<String, TargetSet> = [(symbol.to_owned(), set("sm_80"))].into();
    let err = sets
        .check(&kernels, &profile, (&profile, None), &forms)
        .unwrap_err();
    assert_eq!(
        err[0].to_string(),
        "kernel marlin::Marlin<256, 4, true> is in the sm_80 images but missing from sm_70"
    );
}

#[test]
fn globs() {
    assert!(glob_match("*_bf16", "rmsnorm_bf16"));
    assert!(glob_match("*_bf16", "_bf16"));
    assert!(!glob_match("*_bf16", "rmsnorm_bf16x"));
    assert!(glob_match("gemm_*_f?", "gemm_tile_f8"));
    assert!(glob_match("*", "anything"));
    assert!(!glob_match("a*b*c", "a_b_d"));
}

#[test]
fn declarations_against_images() {
    let full = set("sm_70 sm_75 sm_80 sm_86 sm_90 sm_120 compute_120");
    let rule = KernelRule::targets("*_bf16", "sm_80+", &full).unwrap();
    assert_eq!(rule.targets, set("sm_80 sm_86 sm_90 sm_120 compute_120"));
    let excl = KernelRule::exclude("legacy", &["sm_70".into()], &full).unwrap();
    assert!(excl.skip_define && !excl.targets.contains("sm_70".parse().unwrap()));
    let sets = KernelSets {
        as_built: false,
        rules: vec![rule, excl],
        files: Vec::new(),
    };
    assert_eq!(
        sets.skip_defines("sm_70".parse().unwrap()),
        ["-DFATKIT_SKIP_legacy"]
    );
    let mut kernels = BTreeMap::new();
    kernels.insert("add".to_owned(), full.clone());
    kernels.insert(
        "rmsnorm_bf16".to_owned(),
        set("sm_80 sm_86 sm_90 sm_120 compute_120"),
    );
    let declared = sets
        .check(&kernels, &full, (&full, None), &no_forms)
        .unwrap();
    assert_eq!(declared.len(), 1);
    assert_eq!(
        declared["rmsnorm_bf16"].how,
        "targets = \"sm_80+\" (*_bf16)"
    );
    assert_eq!(
        record("norm", b"fatbin", &declared),
        format!(
            "fatkit:declared:v2;module=norm;fatbin=6:{:016x};rmsnorm_bf16=sm_80,sm_86,sm_90,sm_120,compute_120;end;",
            fatkit_arch::fingerprint::fingerprint(b"fatbin")
        )
    );
    // A guard that also drops sm_86: the declaration does not say so.
    kernels.insert(
        "rmsnorm_bf16".to_owned(),
        set("sm_80 sm_90 sm_120 compute_120"),
    );
    let err = sets
        .check(&kernels, &full, (&full, None), &no_forms)
        .unwrap_err();
    assert_eq!(
        err[0].to_string(),
        "kernel rmsnorm_bf16 is in the sm_80 sm_90 sm_120 compute_120 images but missing from sm_86, which its declaration `targets = \"sm_80+\" (*_bf16)` does not say"
    );
    // A declaration of targets may narrow what was built (a bf16 kernel whose stores alone
    // are compiled out for sm_70 and sm_75 still has a body there): declared for its targets.
    kernels.insert("rmsnorm_bf16".to_owned(), full.clone());
    let declared = sets
        .check(&kernels, &full, (&full, None), &no_forms)
        .unwrap();
    assert_eq!(
        declared["rmsnorm_bf16"].targets,
        set("sm_80 sm_86 sm_90 sm_120 compute_120")
    );
    // An exclude by name promises the source drops the kernel there: an image holding it is
    // the missing guard.
    kernels.insert("legacy".to_owned(), full.clone());
    let err = sets
        .check(&kernels, &full, (&full, None), &no_forms)
        .unwrap_err();
    assert_eq!(err.len(), 1);
    assert_eq!(err[0].kernel, "legacy");
    assert_eq!(err[0].extra(), ["sm_70".parse().unwrap()]);
    kernels.remove("legacy");
    // Undeclared: every target, unless as built.
    kernels.insert("fp8_gemm".to_owned(), set("sm_90 sm_120 compute_120"));
    kernels.remove("rmsnorm_bf16");
    let err = sets
        .check(&kernels, &full, (&full, None), &no_forms)
        .unwrap_err();
    assert_eq!(err[0].rule, None);
    assert_eq!(suggest(&err[0].built, &full), "sm_90+");
    let as_built = KernelSets {
        as_built: true,
        rules: Vec::new(),
        files: Vec::new(),
    };
    let declared = as_built
        .check(&kernels, &full, (&full, None), &no_forms)
        .unwrap();
    assert_eq!(declared["fp8_gemm"].how, "as built");
    assert!(KernelRule::targets("x", "sm_130+", &full).is_err());
    assert!(KernelRule::targets("x", "sm_61", &full)
        .unwrap_err()
        .to_string()
        .contains("not a target of the profile"));
}

#[test]
fn a_source_built_for_some_targets_declares_each_of_its_kernels_for_them() {
    let full = set("sm_70 sm_75 sm_80 sm_86 sm_90 sm_120 compute_120");
    let file = FileRule::targets("marlin*.cu", "sm_80+", &full).unwrap();
    let module = file.targets.clone();
    let bf16 = KernelRule::targets("*_bf16", "sm_90+", &full).unwrap();
    let sets = KernelSets {
        as_built: false,
        rules: vec![bf16],
        files: vec![file.clone()],
    };
    let mut kernels = BTreeMap::new();
    kernels.insert("marlin_f16".to_owned(), module.clone());
    kernels.insert("marlin_bf16".to_owned(), set("sm_90 sm_120 compute_120"));
    let declared = sets
        .check(&kernels, &module, (&full, Some(&file)), &no_forms)
        .unwrap();
    assert_eq!(declared["marlin_f16"].targets, module);
    assert_eq!(
        declared["marlin_f16"].how,
        "targets = \"sm_80+\" (marlin*.cu)"
    );
    // Its own declaration narrows the source's.
    assert_eq!(
        declared["marlin_bf16"].targets,
        set("sm_90 sm_120 compute_120")
    );
    // A source declared for every target declares nothing.
    let every = FileRule::targets("*.cu", "sm_70+", &full).unwrap();
    let mut plain = BTreeMap::new();
    plain.insert("add".to_owned(), full.clone());
    let none = KernelSets::default()
        .check(&plain, &full, (&full, Some(&every)), &no_forms)
        .unwrap();
    assert!(none.is_empty());
    // A kernel missing from a target of the source's is still a mismatch, naming it.
    kernels.insert(
        "marlin_f32".to_owned(),
        set("sm_86 sm_90 sm_120 compute_120"),
    );
    let err = sets
        .check(&kernels, &module, (&full, Some(&file)), &no_forms)
        .unwrap_err();
    assert_eq!(err[0].kernel, "marlin_f32");
    assert_eq!(err[0].missing(), vec!["sm_80".parse().unwrap()]);
    // ... by its source's declaration, which a declaration of its own may narrow.
    assert!(err[0].by_source);
    assert_eq!(
        err[0].rule.as_deref(),
        Some("targets = \"sm_80+\" (marlin*.cu)")
    );
}

/// The images of `spec`: `sm_80:k,k_x sm_86:k`.
fn images(spec: &str) -> Vec<(Target, Option<fatkit_arch::PtxIsa>, Vec<String>)> {
    spec.split_whitespace()
        .map(|s| {
            let (t, ks) = s.split_once(':').unwrap_or((s, ""));
            let ks = ks.split(',').filter(|k| !k.is_empty()).map(str::to_owned);
            (t.parse().unwrap(), None, ks.collect())
        })
        .collect()
}

fn declare(rule: KernelRule, kernel: &str) -> BTreeMap<String, Declared> {
    [(
        kernel.to_owned(),
        Declared {
            targets: rule.targets,
            how: rule.written,
        },
    )]
    .into_iter()
    .collect()
}

fn view(spec: &str, declared: &BTreeMap<String, Declared>) -> Vec<String> {
    let v = driver_view(&images(spec), declared, fatkit_arch::Policy::default());
    v.vanishes
        .iter()
        .map(|v| {
            let ccs: Vec<String> = v.ccs.iter().map(|c| c.to_string()).collect();
            format!("{} not in {} on {}", v.kernel, v.loaded, ccs.join(","))
        })
        .chain(v.empty.iter().map(|t| format!("{t} empty")))
        .collect()
}

#[test]
fn the_driver_view_refuses_what_the_declaration_does_not_say() {
    // exclude = ["sm_86"] on sm_80 + sm_86: an RTX 3090 loads sm_86, which lacks k_x.
    let profile = set("sm_80 sm_86");
    let rule = KernelRule::exclude("k_x", &["sm_86".into()], &profile).unwrap();
    assert_eq!(
        view("sm_80:k,k_x sm_86:k", &declare(rule, "k_x")),
        ["k_x not in sm_86 on 8.6,8.7,8.9"]
    );
    // exclude = ["sm_120"] with full: the compute_120 PTX holds it, the sm_120 cubin loads.
    let full = set("sm_70 sm_75 sm_80 sm_86 sm_90 sm_120 compute_120");
    let rule = KernelRule::exclude("k_x", &["sm_120".into()], &full).unwrap();
    let spec =
        "sm_70:k,k_x sm_75:k,k_x sm_80:k,k_x sm_86:k,k_x sm_90:k,k_x sm_120:k compute_120:k,k_x";
    assert_eq!(
        view(spec, &declare(rule, "k_x")),
        ["k_x not in sm_120 on 12.0,12.1"]
    );
    // The fix the message gives: exclude the PTX too. Then 12.x is declared away.
    let rule = KernelRule::exclude("k_x", &["sm_120".into(), "compute_120".into()], &full).unwrap();
    let spec = "sm_70:k,k_x sm_75:k,k_x sm_80:k,k_x sm_86:k,k_x sm_90:k,k_x sm_120:k compute_120:k";
    assert!(view(spec, &declare(rule, "k_x")).is_empty());
    // Declared for sm_80+ and lacking from sm_70 and sm_75 only: as said.
    let rule = KernelRule::targets("*_bf16", "sm_80+", &full).unwrap();
    let spec = "sm_70:k sm_75:k sm_80:k,n_bf16 sm_86:k,n_bf16 sm_90:k,n_bf16 sm_120:k,n_bf16 compute_120:k,n_bf16";
    assert!(view(spec, &declare(rule, "n_bf16")).is_empty());
}

#[test]
fn the_driver_view_refuses_an_image_without_kernels() {
    // targets = "sm_80+" for the module's only kernel, on sm_75 + sm_80.
    let profile = set("sm_75 sm_80");
    let rule = KernelRule::targets("k", "sm_80+", &profile).unwrap();
    assert_eq!(view("sm_75 sm_80:k", &declare(rule, "k")), ["sm_75 empty"]);
}
