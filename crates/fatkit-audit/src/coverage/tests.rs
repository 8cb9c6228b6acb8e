#![allow(clippy::unwrap_used)]
use super::*;

fn set(names: &str) -> TargetSet {
    names
        .split(' ')
        .map(|n| Target::parse_name(n).unwrap())
        .collect()
}

/// A kernel alone in a module of `targets`, bound to fatbin `(100, 7)`.
fn kernel(name: &str, targets: &str) -> KernelImages {
    KernelImages {
        fatbin: Some((100, 7)),
        ..as_images(name, &set(targets))
    }
}

#[test]
fn declarations_excuse_only_what_they_leave_out() {
    let full = set("sm_70 sm_75 sm_80 sm_86 sm_90 sm_120 compute_120");
    let mut bytes = b"\x7fELF..".to_vec();
    bytes.extend_from_slice(
        b"fatkit:declared:v2;module=norm;fatbin=100:0000000000000007;rmsnorm_bf16=sm_80,sm_86,sm_90,sm_120,compute_120;end;",
    );
    let declarations = Declarations::scan(&bytes);
    assert_eq!(declarations.records().len(), 1);
    let kernels = vec![
        kernel(
            "rmsnorm",
            "sm_70 sm_75 sm_80 sm_86 sm_90 sm_120 compute_120",
        ),
        // Declared for sm_80+, and lacking sm_90 too: that one stays a gap.
        kernel("rmsnorm_bf16", "sm_80 sm_86 sm_120 compute_120"),
        // Not declared at all.
        kernel("softmax", "sm_75 sm_80 sm_86 sm_90 sm_120 compute_120"),
    ];
    let policy = Policy::default();
    let (gaps, declared) = declarations.split_exact(exact_gaps(&kernels, &full, policy));
    let pairs = |g: &[Gap]| -> Vec<String> {
        g.iter()
            .map(|g| format!("{} {}", g.kernel, g.target))
            .collect()
    };
    assert_eq!(pairs(&gaps), ["rmsnorm_bf16 sm_90", "softmax sm_70"]);
    assert_eq!(
        pairs(&declared),
        ["rmsnorm_bf16 sm_70", "rmsnorm_bf16 sm_75"]
    );

    let v100 = Device::new("7.0".parse().unwrap(), None);
    let verdicts = on_device(&kernels, &declarations, &Roles::strict(), &v100, policy);
    let failing: Vec<(&str, bool)> = verdicts
        .iter()
        .filter(|v| v.status != Status::Runs)
        .map(|v| (v.kernel.as_str(), v.declared.is_some()))
        .collect();
    assert_eq!(failing, [("rmsnorm_bf16", true), ("softmax", false)]);

    // The same kernel in another module of the file: the record does not speak for it.
    let other = KernelImages {
        fatbin: Some((200, 9)),
        ..kernel("rmsnorm_bf16", "sm_80 sm_86 sm_120 compute_120")
    };
    let verdicts = on_device(&[other], &declarations, &Roles::strict(), &v100, policy);
    assert_eq!(verdicts[0].declared, None);
    assert!(!declarations.excuses(
        Some((200, 9)),
        "rmsnorm_bf16",
        full.iter().next().unwrap(),
        policy
    ));
}
