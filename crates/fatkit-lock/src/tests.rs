use std::path::Path;

use super::*;

const H: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn files(locked: &Locked) -> Vec<&str> {
    locked.pins.iter().map(|p| p.file_name.as_str()).collect()
}

#[test]
fn the_best_wheel_for_the_target_is_the_one_chosen() {
    let t = Target::default();
    let wheels = [
        "torch-2.9.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torch-2.9.0-cp312-cp312-manylinux_2_28_aarch64.whl",
        "torch-2.9.0-cp312-cp312-win_amd64.whl",
        "torch-2.9.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl",
        "torch-2.9.0-cp312-cp312-manylinux_2_39_x86_64.whl",
    ];
    let lock = (Path::new("pylock.toml"), "torch");
    let best = best(lock, &t, &wheels, |w| Some(*w)).unwrap();
    assert_eq!(
        best,
        Some(&"torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl")
    );
    assert!(t.fit("six-1.16.0-py2.py3-none-any.whl").is_some());
    assert!(t.fit("x-1-cp39-abi3-manylinux2014_x86_64.whl").is_some());
    assert!(t.fit("x-1-cp313-abi3-manylinux2014_x86_64.whl").is_none());
    assert!(t.fit("x-1-cp312-cp312-musllinux_1_2_x86_64.whl").is_none());
    let arm = t.clone().with_platform("manylinux_2_28_aarch64").unwrap();
    assert!(arm.fit(wheels[1]).is_some());
    assert!(arm.fit(wheels[4]).is_none());
    assert!(Target::default().with_platform("win_amd64").is_err());
    assert!(Target::default().with_python("2.7").is_err());
}

#[test]
fn a_wheel_name_that_could_be_a_path_is_no_wheel_name() {
    for bad in [
        "../../etc/x-1-py3-none-any.whl",
        "x-1-py3-none-any.whl/..",
        ".x-1-py3-none-any.whl",
        "x 1-py3-none-any.whl",
        "x-1-py3-none.whl",
        "x-1-py3-none-any.zip",
        "x-1-py3-none-any\n.whl",
    ] {
        assert_eq!(target::WheelName::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn a_pylock_answers_with_the_wheels_whose_marker_holds() {
    let text = format!(
        r#"
lock-version = "1.0"
created-by = "hand"
[[packages]]
name = "torch"
version = "2.9.0"
wheels = [
  {{ name = "torch-2.9.0-cp312-cp312-win_amd64.whl", url = "https://x/torch-2.9.0-cp312-cp312-win_amd64.whl", hashes = {{ sha256 = "{h}" }} }},
  {{ url = "https://x/torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl", hashes = {{ sha256 = "{h}" }} }},
]
[[packages]]
name = "pywin32"
version = "311"
marker = "sys_platform == 'win32'"
wheels = [{{ url = "https://x/pywin32-311-cp312-cp312-win_amd64.whl", hashes = {{ sha256 = "{h}" }} }}]
[[packages]]
name = "flash-attn"
version = "2.8.3"
sdist = {{ url = "https://x/flash_attn-2.8.3.tar.gz", hashes = {{ sha256 = "{h}" }} }}
[[packages]]
name = "local"
version = "1"
wheels = [{{ path = "wheels/local-1-py3-none-any.whl", hashes = {{ sha256 = "{h}" }} }}]
[[packages]]
name = "given-by-path"
archive = {{ url = "file:///w/given_by_path-0.3-cp310-abi3-manylinux2014_x86_64.whl", hashes = {{ sha256 = "{h}" }} }}
[[packages]]
name = "source-archive"
version = "1"
archive = {{ url = "https://x/source_archive-1.tar.gz", hashes = {{ sha256 = "{h}" }} }}
"#,
        h = H.trim_start_matches("sha256:")
    );
    let locked = pylock::resolve(
        Path::new("pylock.toml"),
        Path::new("/l"),
        &text,
        &Target::default(),
    )
    .unwrap();
    // An archive that is a wheel (`pip lock` of a wheel given by path) is one, its version
    // from its name; one that is not is a source to build.
    assert_eq!(
        files(&locked),
        [
            "torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl",
            "local-1-py3-none-any.whl",
            "given_by_path-0.3-cp310-abi3-manylinux2014_x86_64.whl"
        ]
    );
    assert_eq!(
        locked.pins[1].at,
        Location::Path(Path::new("/l/wheels/local-1-py3-none-any.whl").to_path_buf())
    );
    assert_eq!(
        (
            locked.pins[2].name.as_str(),
            locked.pins[2].version.as_str()
        ),
        ("given-by-path", "0.3")
    );
    assert_eq!(locked.skipped.len(), 2);
    assert!(
        locked.skipped[1].why.contains("from source"),
        "{:?}",
        locked.skipped
    );
    assert!(
        locked.skipped[0].why.contains("from source"),
        "{:?}",
        locked.skipped
    );
}

#[test]
fn a_lock_that_names_no_hash_or_a_strange_url_is_refused() {
    let no_hash = r#"
lock-version = "1.0"
[[packages]]
name = "x"
version = "1"
wheels = [{ url = "https://x/x-1-py3-none-any.whl" }]
"#;
    let e = pylock::resolve(
        Path::new("pylock.toml"),
        Path::new("."),
        no_hash,
        &Target::default(),
    );
    assert!(matches!(e, Err(LockError::NoHash { .. })), "{e:?}");
    for url in ["ftp://x/x-1-py3-none-any.whl", "/etc/x-1-py3-none-any.whl"] {
        let text = no_hash
            .replace("https://x/x-1-py3-none-any.whl", url)
            .replace(
                " }]",
                &format!(
                    ", hashes = {{ sha256 = \"{}\" }} }}]",
                    H.trim_start_matches("sha256:")
                ),
            );
        let e = pylock::resolve(
            Path::new("pylock.toml"),
            Path::new("."),
            &text,
            &Target::default(),
        );
        assert!(matches!(e, Err(LockError::Parse { .. })), "{url}: {e:?}");
    }
    let dotdot = no_hash.replace(
        "url = \"https://x/x-1-py3-none-any.whl\" }",
        &format!(
            "name = \"../../x-1-py3-none-any.whl\", url = \"https://x/x-1-py3-none-any.whl\", hashes = {{ sha256 = \"{}\" }} }}",
            H.trim_start_matches("sha256:")
        ),
    );
    let e = pylock::resolve(
        Path::new("pylock.toml"),
        Path::new("."),
        &dotdot,
        &Target::default(),
    );
    assert!(
        matches!(&e, Err(LockError::Parse { why, .. }) if why.contains("is not a wheel's file name")),
        "{e:?}"
    );
    let v2 = "lock-version = \"2.0\"\n";
    assert!(pylock::resolve(Path::new("p"), Path::new("."), v2, &Target::default()).is_err());
}

#[test]
fn a_uv_lock_is_walked_from_its_members_on_the_target() {
    let text = format!(
        r#"
version = 1
revision = 3
requires-python = ">=3.10"
resolution-markers = ["python_full_version >= '3.12'", "python_full_version < '3.12'"]

[[package]]
name = "app"
version = "0.1.0"
source = {{ editable = "." }}
dependencies = [
  {{ name = "torch", version = "2.9.0", source = {{ registry = "https://pypi.org/simple" }}, marker = "python_full_version >= '3.12'" }},
  {{ name = "torch", version = "2.4.0", source = {{ registry = "https://pypi.org/simple" }}, marker = "python_full_version < '3.12'" }},
  {{ name = "colorama", marker = "sys_platform == 'win32'" }},
  {{ name = "vllm", extra = ["flash"] }},
]
[package.optional-dependencies]
docs = [{{ name = "sphinx" }}]
[package.dev-dependencies]
dev = [{{ name = "pytest" }}]

[[package]]
name = "torch"
version = "2.9.0"
source = {{ registry = "https://pypi.org/simple" }}
resolution-markers = ["python_full_version >= '3.12'"]
wheels = [{{ url = "https://x/torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl", hash = "{H}", size = 1 }}]

[[package]]
name = "torch"
version = "2.4.0"
source = {{ registry = "https://pypi.org/simple" }}
resolution-markers = ["python_full_version < '3.12'"]
wheels = [{{ url = "https://x/torch-2.4.0-cp311-cp311-manylinux1_x86_64.whl", hash = "{H}" }}]

[[package]]
name = "colorama"
version = "0.4.6"
source = {{ registry = "https://pypi.org/simple" }}
wheels = [{{ url = "https://x/colorama-0.4.6-py2.py3-none-any.whl", hash = "{H}" }}]

[[package]]
name = "vllm"
version = "0.11.0"
source = {{ registry = "https://pypi.org/simple" }}
dependencies = [{{ name = "torch", version = "2.9.0", source = {{ registry = "https://pypi.org/simple" }} }}]
wheels = [{{ url = "https://x/vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl", hash = "{H}" }}]
[package.optional-dependencies]
flash = [{{ name = "flash-attn" }}]

[[package]]
name = "flash-attn"
version = "2.8.3"
source = {{ registry = "https://pypi.org/simple" }}
sdist = {{ url = "https://x/flash_attn-2.8.3.tar.gz", hash = "{H}" }}

[[package]]
name = "pytest"
version = "8.4.2"
source = {{ registry = "https://pypi.org/simple" }}
wheels = [{{ url = "https://x/pytest-8.4.2-py3-none-any.whl", hash = "{H}" }}]

[[package]]
name = "sphinx"
version = "8.0.0"
source = {{ registry = "https://pypi.org/simple" }}
wheels = [{{ url = "https://x/sphinx-8.0.0-py3-none-any.whl", hash = "{H}" }}]
"#
    );
    let lock = Path::new("uv.lock");
    let locked = uvlock::resolve(lock, Path::new("."), &text, &Target::default()).unwrap();
    assert_eq!(
        files(&locked),
        [
            "torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl",
            "vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl",
            "pytest-8.4.2-py3-none-any.whl",
        ]
    );
    assert_eq!(
        locked
            .skipped
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        ["flash-attn"]
    );
    let py311 = Target::default().with_python("3.11").unwrap();
    let older = uvlock::resolve(lock, Path::new("."), &text, &py311).unwrap();
    assert_eq!(
        files(&older)[0],
        "torch-2.4.0-cp311-cp311-manylinux1_x86_64.whl"
    );
}

#[test]
fn pips_report_names_the_wheels_and_refuses_one_without_a_hash() {
    let report = br#"{"version": "1", "install": [
      {"download_info": {"url": "http://127.0.0.1:1/x/a-1-py3-none-any.whl",
        "archive_info": {"hash": "sha256=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}},
       "metadata": {"name": "a", "version": "1"}},
      {"download_info": {"url": "file:///src/b", "dir_info": {}},
       "metadata": {"name": "b", "version": "2"}}
    ]}"#;
    let locked = pip::report_for_tests(Path::new("requirements.txt"), report).unwrap();
    assert_eq!(files(&locked), ["a-1-py3-none-any.whl"]);
    assert_eq!(locked.skipped[0].name, "b");
    let no_hash = br#"{"install": [{"download_info": {"url": "https://x/a-1-py3-none-any.whl"},
        "metadata": {"name": "a", "version": "1"}}]}"#;
    assert!(matches!(
        pip::report_for_tests(Path::new("r.txt"), no_hash),
        Err(LockError::NoHash { .. })
    ));
}

#[test]
fn kinds_are_told_by_file_name() {
    for (name, kind) in [
        ("pylock.toml", Some(Kind::Pylock)),
        ("pylock.gpu.toml", Some(Kind::Pylock)),
        ("uv.lock", Some(Kind::UvLock)),
        ("requirements.txt", Some(Kind::Requirements)),
        ("requirements-cu128.txt", Some(Kind::Requirements)),
        ("notes.txt", None),
        ("requirements.in", Some(Kind::Requirements)),
        ("requirements/base.txt", Some(Kind::Requirements)),
        ("requirements/README.md", None),
        ("deps.txt", None),
        ("torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl", None),
        ("Cargo.lock", None),
    ] {
        assert_eq!(Kind::of(Path::new(name)), kind, "{name}");
    }
}

#[test]
fn a_wheel_enters_the_store_only_verified_and_a_mismatch_is_deleted() {
    let dir = std::env::temp_dir().join(format!("fatkit-lock-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let wheel = dir.join("x-1-py3-none-any.whl");
    std::fs::write(&wheel, b"PK\x03\x04 not really").unwrap();
    let right = store::hash_for_tests(&wheel).unwrap();
    let settings = Settings {
        offline: true,
        ..Settings::new(Some(dir.join("store")))
    };
    let pin = |sha256: &str| Pin {
        name: "x".into(),
        version: "1".into(),
        file_name: "x-1-py3-none-any.whl".into(),
        at: Location::Path(wheel.clone()),
        sha256: Some(sha256.into()),
        line: None,
    };
    let wrong = "f".repeat(64);
    let bad = store::fetch(
        &Locked {
            pins: vec![pin(&wrong)],
            skipped: vec![],
        },
        &settings,
    );
    assert!(
        matches!(bad, Err(store::StoreError::Mismatch { .. })),
        "{bad:?}"
    );
    let partial: Vec<_> = std::fs::read_dir(dir.join("store/partial"))
        .unwrap()
        .collect();
    assert!(partial.is_empty(), "a refused wheel left {partial:?}");
    let good = store::fetch(
        &Locked {
            pins: vec![pin(&right)],
            skipped: vec![],
        },
        &settings,
    )
    .unwrap();
    assert_eq!(good[0].path, dir.join(format!("store/sha256/{right}.whl")));
    assert_eq!(
        std::fs::read(&good[0].path).unwrap(),
        std::fs::read(&wheel).unwrap()
    );
    let remote = Pin {
        at: Location::Url("https://x/y-1-py3-none-any.whl".into()),
        file_name: "y-1-py3-none-any.whl".into(),
        ..pin(&wrong)
    };
    let offline = store::fetch(
        &Locked {
            pins: vec![remote],
            skipped: vec![],
        },
        &settings,
    );
    assert!(
        matches!(offline, Err(store::StoreError::Offline { .. })),
        "{offline:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn offline_a_requirements_file_is_refused_with_the_way_to_lock_it() {
    let dir = std::env::temp_dir().join(format!("fatkit-lock-offline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("requirements.txt");
    std::fs::write(&file, "torch\n").unwrap();
    let settings = Settings {
        offline: true,
        // A Python that does not exist: nothing may be run.
        python: dir.join("no-python"),
        ..Settings::new(Some(dir.join("store")))
    };
    let e = resolve(&file, Kind::Requirements, &settings).unwrap_err();
    assert!(matches!(e, LockError::OfflineRequirements { .. }), "{e}");
    assert!(e.to_string().contains("pip lock"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_package_with_no_wheel_and_no_source_cannot_be_installed_one_with_a_source_is_built() {
    let text = format!(
        r#"
lock-version = "1.0"
[[packages]]
name = "x86-only"
version = "1"
wheels = [{{ url = "https://x/x86_only-1-py3-none-manylinux_2_17_x86_64.whl", hashes = {{ sha256 = "{h}" }} }}]
[[packages]]
name = "from-source"
version = "2"
sdist = {{ url = "https://x/from_source-2.tar.gz", hashes = {{ sha256 = "{h}" }} }}
wheels = [{{ url = "https://x/from_source-2-py3-none-manylinux_2_17_x86_64.whl", hashes = {{ sha256 = "{h}" }} }}]
"#,
        h = H.trim_start_matches("sha256:")
    );
    let arm = Target::default().with_platform("linux_aarch64").unwrap();
    let locked = pylock::resolve(Path::new("pylock.toml"), Path::new("."), &text, &arm).unwrap();
    let built: Vec<(&str, bool)> = locked
        .skipped
        .iter()
        .map(|s| (s.name.as_str(), s.built))
        .collect();
    assert_eq!(built, [("x86-only", false), ("from-source", true)]);
    assert!(locked.skipped[0]
        .why
        .contains("installing the lock there fails"));
}
