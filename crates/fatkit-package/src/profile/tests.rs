use super::*;

/// Parses `text` as `arch-profiles/t.toml`; renders the profile or the error.
fn check(text: &str, expect: expect_test::Expect) {
    let got = match parse(Path::new("arch-profiles/t.toml"), text) {
        Ok(p) => {
            let mut out = format!("targets: {}\n", p.targets);
            if !p.extra.is_empty() {
                out.push_str(&format!("extra: {}\n", p.extra));
            }
            out.push_str(&format!("compress: {}\n", p.compress.name()));
            if let Some(v) = p.min_cuda {
                out.push_str(&format!("min_cuda: {v}\n"));
            }
            out
        }
        Err(e) => format!("{e}\n"),
    };
    expect.assert_eq(&got);
}

use expect_test::expect;

#[test]
fn defaults_ptx_to_the_highest_target() {
    check(
        r#"targets = ["sm_80", "sm_90", "sm_120"]"#,
        expect![[r#"
            targets: sm_80 sm_90 sm_120 compute_120
            compress: none
        "#]],
    );
    check(
        r#"targets = ["sm_80", "sm_90"]
ptx = []"#,
        expect![[r#"
            targets: sm_80 sm_90
            compress: none
        "#]],
    );
    check(
        r#"targets = ["7.5", "8.6+PTX"]"#,
        expect![[r#"
            targets: sm_75 sm_86 compute_86
            compress: none
        "#]],
    );
}

#[test]
fn accepts_every_notation_and_keys() {
    check(
        r#"
description = "mixed"
targets = ["sm_70", "7.5", "80-real", "-gencode arch=compute_86,code=sm_86"]
ptx = ["12.0"]
extra = ["sm_90a"]
compress = "lz4"
min_cuda = "12.8"
"#,
        expect![[r#"
            targets: sm_70 sm_75 sm_80 sm_86 compute_120
            extra: sm_90a
            compress: lz4
            min_cuda: 12.8
        "#]],
    );
    check(
        r#"targets = ["all-major"]
min_cuda = "13.0""#,
        expect![[r#"
            targets: sm_75 sm_80 sm_90 sm_100 sm_110 sm_120 compute_120
            compress: none
            min_cuda: 13.0
        "#]],
    );
}

#[test]
fn errors_name_file_line_column_and_fix() {
    check(
        r#"description = "x"
targets = ["sm_80", "sm_91"]"#,
        expect![[r#"
            arch-profiles/t.toml:2:22: 'sm_91': unknown target sm_91: no CUDA toolkit builds it; did you mean sm_90 or sm_90a?
        "#]],
    );
    check(
        r#"targets = ["sm_80 sm_91"]"#,
        expect![[r#"
            arch-profiles/t.toml:1:19: 'sm_91': unknown target sm_91: no CUDA toolkit builds it; did you mean sm_90 or sm_90a?
        "#]],
    );
    check(
        r#"targets = ["7.0;8.x"]"#,
        expect![[r#"
            arch-profiles/t.toml:1:17: '8.x': expected MAJOR.MINOR with an optional a/f suffix and +PTX, e.g. 8.6, 9.0a or 12.0+PTX
        "#]],
    );
    check(
        r#"tragets = ["sm_80"]"#,
        expect![[r#"
            arch-profiles/t.toml:1:1: unknown field `tragets`, expected one of `description`, `targets`, `ptx`, `extra`, `compress`, `min_cuda`, `budget`, `for`, `toolchain`; a profile takes description, targets, ptx, extra, compress, min_cuda, budget, for and [toolchain]
        "#]],
    );
    check(
        r#"targets = "sm_80""#,
        expect![[r#"
            arch-profiles/t.toml:1:11: invalid type: string "sm_80", expected a sequence; write a list, e.g. targets = ["sm_80", "sm_90"]
        "#]],
    );
    check(
        r#"description = "no targets""#,
        expect![[r#"
            arch-profiles/t.toml:1:1: missing field `targets`
        "#]],
    );
    check(
        r#"targets = []"#,
        expect![[r#"
            arch-profiles/t.toml:1:11: the profile lists no targets; add at least one, e.g. targets = ["sm_90"]
        "#]],
    );
    check(
        r#"targets = ["sm_80", "8.0"]"#,
        expect![[r#"
            arch-profiles/t.toml:1:22: sm_80 is listed twice (first at 1:13); remove one
        "#]],
    );
    check(
        r#"targets = ["sm_70", "sm_90"]
[toolchain]
sm_75 = "nvcc 11.8""#,
        expect![[r#"
            arch-profiles/t.toml:3:1: [toolchain] pins 'sm_75', which is not a target of this profile; name one of sm_70 sm_90 compute_90
        "#]],
    );
    check(
        r#"targets = ["sm_70", "sm_90"]
[toolchain]
sm_70 = "gcc 12""#,
        expect![[r#"
            arch-profiles/t.toml:3:9: 'gcc 12': not a toolchain; write a compiler, a CUDA version or both: "nvcc 11.8", "nvrtc 12.9", "nvcc", "13"
        "#]],
    );
    check(
        r#"targets = ["sm_70", "sm_90"]
[toolchain]
sm_70 = "nvcc 13""#,
        expect![[r#"
            arch-profiles/t.toml:3:9: nvcc 13 cannot build sm_70: CUDA 11.0 to 12.9 build it; change the pin or remove it
        "#]],
    );
    check(
        r#"targets = ["sm_80"]
budget = "ten""#,
        expect![[r#"
            arch-profiles/t.toml:2:10: 'ten' is not a size; write bytes, or a number with KiB, MiB, GiB (e.g. "10 MiB")
        "#]],
    );
    check(
        r#"targets = ["sm_80"]
budget = "10 MiB"
for = "tarball""#,
        expect![[r#"
            arch-profiles/t.toml:3:7: for = 'tarball' is not a way a build ships; use one of crate, wheel, fatbin
        "#]],
    );
    check(
        r#"targets = ["sm_80"]
for = "crate""#,
        expect![[r#"
            arch-profiles/t.toml:2:7: for = ... without a budget; add budget = "10 MiB" beside it, or leave for out
        "#]],
    );
    check(
        r#"targets = ["sm_80"]
compress = "gzip""#,
        expect![[r#"
            arch-profiles/t.toml:2:12: unknown compression 'gzip'; use one of none, lz4, zstd
        "#]],
    );
    check(
        r#"targets = ["sm_70", "sm_90"]
min_cuda = "13.0""#,
        expect![[r#"
            arch-profiles/t.toml:1:13: sm_70 cannot be built by CUDA 13.0 or later (the last to build it is CUDA 12.9); lower min_cuda or drop sm_70
        "#]],
    );
    check(
        r#"targets = ["sm_80"]
min_cuda = "thirteen""#,
        expect![[r#"
            arch-profiles/t.toml:2:12: 'thirteen': not a CUDA version; write it as MAJOR.MINOR, e.g. 12.8
        "#]],
    );
    check(
        r#"targets = ["all"]"#,
        expect![[r#"
            arch-profiles/t.toml:1:13: 'all': 'all' depends on the toolkit; say which CUDA version to expand it for (e.g. min_cuda = "13.0" in a profile)
        "#]],
    );
    check(
        r#"targets = ["sm_80",
"#,
        expect![[r#"
            arch-profiles/t.toml:1:20: unclosed array, expected `]`
        "#]],
    );
}

/// No input makes the loader panic: every prefix of a valid profile, and every single-byte
/// substitution from a set of troublesome bytes.
#[test]
fn malformed_profiles_never_panic() {
    let valid = r#"
description = "Volta to Blackwell"
targets = ["sm_70", "8.6+PTX", "90a-real", "-gencode arch=compute_100,code=[sm_100,compute_100]"]
ptx = ["compute_120"]
extra = ["sm_100a"]
compress = "zstd"
min_cuda = "12.9"
"#;
    assert!(parse(Path::new("v.toml"), valid).is_ok());
    let mut n_errors = 0;
    for cut in 0..=valid.len() {
        if let Some(prefix) = valid.get(..cut) {
            n_errors += usize::from(parse(Path::new("v.toml"), prefix).is_err());
        }
    }
    let bytes = valid.as_bytes();
    for idx in 0..bytes.len() {
        for replacement in [
            b'"', b'[', b']', b'=', b'\n', b'\\', b'#', b'9', b'a', b',', b'\'',
        ] {
            let mut mutated = bytes.to_vec();
            mutated[idx] = replacement;
            if let Ok(text) = String::from_utf8(mutated) {
                if let Err(e) = parse(Path::new("v.toml"), &text) {
                    n_errors += 1;
                    assert!(e.to_string().starts_with("v.toml:"), "{e}");
                }
            }
        }
    }
    assert!(n_errors > 1000, "{n_errors}");
}

#[test]
fn discovers_and_resolves_profiles() {
    let dir = std::env::temp_dir().join(format!("fatkit-profiles-{}", std::process::id()));
    let profiles = dir.join(PROFILES_DIR);
    std::fs::create_dir_all(profiles.join("nested")).unwrap();
    std::fs::write(profiles.join("full.toml"), "targets = [\"sm_80\"]\n").unwrap();
    std::fs::write(
        profiles.join("dev.toml"),
        "targets = [\"sm_90\"]\nptx = []\n",
    )
    .unwrap();
    std::fs::write(profiles.join("bad.toml"), [0x74, 0xff, 0xfe]).unwrap();
    let set = ProfileSet::discover(&profiles.join("nested")).unwrap();
    let names: Vec<String> = set
        .entries
        .iter()
        .map(|(n, o)| {
            format!(
                "{n}={}",
                if o.path().is_some() {
                    "local"
                } else {
                    "built-in"
                }
            )
        })
        .collect();
    // The local files add (bad) and override (dev, full); the other built-ins stay.
    assert_eq!(
        names,
        [
            "bad=local",
            "consumer=built-in",
            "datacenter=built-in",
            "dev=local",
            "full=local",
            "jetson=built-in",
            "modern=built-in"
        ]
    );
    assert_eq!(set.load("dev").unwrap().targets.to_string(), "sm_90");
    assert_eq!(
        set.load("full").unwrap().targets.to_string(),
        "sm_80 compute_80"
    );
    assert!(set
        .load("modern")
        .unwrap()
        .targets
        .contains("sm_121".parse().unwrap()));
    let err = set.load("ful").unwrap_err().to_string();
    assert!(
        err.contains("unknown profile 'ful'") && err.contains("did you mean 'full'?"),
        "{err}"
    );
    let err = set.load("bad").unwrap_err().to_string();
    assert!(
        err.ends_with("bad.toml:1:2: the profile is not valid UTF-8"),
        "{err}"
    );
    let err = set.load("missing/x.toml").unwrap_err().to_string();
    assert!(
        err.starts_with("missing/x.toml: cannot read the profile"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    // No arch-profiles/ anywhere: the built-ins, by name, from any directory.
    let set = ProfileSet::discover(Path::new("/")).unwrap();
    assert_eq!(set.dir, None);
    assert_eq!(set.entries.len(), BUILT_IN.len());
    let full = load_spec("full", Path::new("/"), None).unwrap();
    assert_eq!(
        full.targets.to_string(),
        "sm_70 sm_75 sm_80 sm_86 sm_89 sm_90 sm_100 sm_120 compute_120"
    );
    let err = load_spec("fulll", Path::new("/"), None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("did you mean 'full'?"), "{err}");
}

/// Every built-in profile parses, and its name is its file's.
#[test]
fn built_in_profiles_parse() {
    for (name, _) in BUILT_IN {
        let p = Origin::built_in(name).unwrap().load().unwrap();
        assert_eq!(p.name, *name);
        assert!(!p.description.is_empty(), "{name}");
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles");
    let on_disk = ProfileSet::open(&dir).unwrap();
    let files: Vec<&String> = on_disk
        .entries
        .iter()
        .filter(|(_, o)| o.path().is_some())
        .map(|(n, _)| n)
        .collect();
    let names: Vec<&str> = BUILT_IN.iter().map(|(n, _)| *n).collect();
    assert_eq!(files, names, "BUILT_IN must list every file of profiles/");
}
