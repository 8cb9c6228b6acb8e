//! `fatkit audit` of locks before install (issue 57): a package index served on 127.0.0.1 by
//! a real HTTP server (Python's, over a PEP 503 tree) holds wheels built here with fatbins of
//! known targets; pip resolves a requirements file against it, and a `pylock.toml` and a
//! `uv.lock` pin its wheels by URL and hash. Nothing is installed: the answer comes from the
//! wheels fetched into fatkit's store, a wheel whose hash is not the lock's is refused, and
//! with the wheels stored the answer needs no server.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use fatkit_tests::{cli, free_port, in_ci, repo_root, temp_dir, Server};
use sha2::{Digest, Sha256};

const FATKIT: &str = env!("CARGO_BIN_EXE_fatkit-e2e");

/// A fatbin of the images `targets` (`sm_80`, `compute_90`) of the fixture `ptx-jit.fatbin`
/// (two kernels, cubins sm_75 to sm_90, PTX compute_90).
fn fatbin_of(targets: &[&str]) -> Vec<u8> {
    let fixture = repo_root().join("tests/fixtures/small/ptx-jit.fatbin");
    let images: Vec<(String, Vec<u8>)> = targets
        .iter()
        .map(|t| ((*t).to_owned(), fatkit_tests::image_of(&fixture, t)))
        .collect();
    let inputs: Vec<fatkit_fatbin::write::Input<'_>> = images
        .iter()
        .map(|(t, data)| fatkit_fatbin::write::Input {
            target: t.parse().unwrap(),
            data,
            identifier: Some("k.cu"),
            compression: fatkit_fatbin::Compression::None,
        })
        .collect();
    fatkit_fatbin::write::write(&inputs).unwrap()
}

/// A wheel of distribution `name` `version` for Linux x86_64 (any Python 3), requiring
/// `requires`, holding `fatbin` (if any) as `<name>/kernels.fatbin`, written into `dir`.
fn wheel(
    dir: &Path,
    name: &str,
    version: &str,
    requires: &[&str],
    fatbin: Option<&[u8]>,
) -> PathBuf {
    let module = name.replace('-', "_");
    let file = format!("{module}-{version}-py3-none-manylinux_2_17_x86_64.whl");
    let path = dir.join(&file);
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    let options = zip::write::SimpleFileOptions::default();
    let info = format!("{module}-{version}.dist-info");
    let mut metadata = format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n");
    for r in requires {
        metadata.push_str(&format!("Requires-Dist: {r}\n"));
    }
    let mut files: Vec<(String, Vec<u8>)> = vec![
        (format!("{module}/__init__.py"), b"".to_vec()),
        (format!("{info}/METADATA"), metadata.into_bytes()),
        (
            format!("{info}/WHEEL"),
            b"Wheel-Version: 1.0\nGenerator: fatkit-tests\nRoot-Is-Purelib: false\nTag: py3-none-manylinux_2_17_x86_64\n".to_vec(),
        ),
    ];
    if let Some(f) = fatbin {
        files.push((format!("{module}/kernels.fatbin"), f.to_vec()));
    }
    let mut record = String::new();
    for (n, bytes) in &files {
        zip.start_file(n.as_str(), options).unwrap();
        zip.write_all(bytes).unwrap();
        record.push_str(&format!("{n},,\n"));
    }
    record.push_str(&format!("{info}/RECORD,,\n"));
    zip.start_file(format!("{info}/RECORD"), options).unwrap();
    zip.write_all(record.as_bytes()).unwrap();
    zip.finish().unwrap();
    path
}

fn sha256(path: &Path) -> String {
    Sha256::digest(std::fs::read(path).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A PEP 503 index of `wheels` under `root`, served by Python's HTTP server on 127.0.0.1.
struct Index {
    _server: Server,
    url: String,
}

fn serve(root: &Path, wheels: &[&Path]) -> Option<Index> {
    let files = root.join("files");
    std::fs::create_dir_all(&files).unwrap();
    let mut projects: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for w in wheels {
        let name = w.file_name().unwrap().to_str().unwrap().to_owned();
        std::fs::copy(w, files.join(&name)).unwrap();
        let project = name
            .split('-')
            .next()
            .unwrap()
            .replace('_', "-")
            .to_lowercase();
        projects.entry(project).or_default().push(format!(
            "<a href=\"../../files/{name}#sha256={}\">{name}</a><br>",
            sha256(w)
        ));
    }
    for (project, links) in &projects {
        let dir = root.join("simple").join(project);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("index.html"),
            format!("<html><body>{}</body></html>", links.concat()),
        )
        .unwrap();
    }
    let python = std::env::var_os("FATKIT_PYTHON").unwrap_or_else(|| "python3".into());
    let port = free_port();
    let mut cmd = Command::new(python);
    cmd.args([
        "-m",
        "http.server",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--directory",
    ])
    .arg(root);
    if Command::new("python3").arg("--version").output().is_err() {
        assert!(
            !in_ci(),
            "CI=true and no python3 to serve the package index"
        );
        eprintln!("skipped: no python3 to serve the package index");
        return None;
    }
    let server = Server::start(
        "the package index",
        &mut cmd,
        port,
        &root.join("server.log"),
    );
    Some(Index {
        _server: server,
        url: format!("http://127.0.0.1:{port}"),
    })
}

/// `fatkit ARGS` with its cache in `cache`.
fn fatkit(cache: &Path, args: &[&str]) -> (i32, String) {
    let cache = cache.to_str().unwrap();
    cli::process(Path::new(FATKIT), args, &[("FATKIT_CACHE_DIR", cache)]).text()
}

/// The releases the index holds: `kernels` 1.0 (an sm_80 cubin alone: nothing for an RTX
/// 5090) and 2.0 (with compute_90 PTX beside it), and `app` 1.0, which requires kernels 1.0.
struct Releases {
    old: PathBuf,
    new: PathBuf,
    app: PathBuf,
}

fn releases(dir: &Path) -> Releases {
    let wheels = dir.join("built");
    std::fs::create_dir_all(&wheels).unwrap();
    Releases {
        old: wheel(&wheels, "kernels", "1.0", &[], Some(&fatbin_of(&["sm_80"]))),
        new: wheel(
            &wheels,
            "kernels",
            "2.0",
            &[],
            Some(&fatbin_of(&["sm_80", "compute_90"])),
        ),
        app: wheel(&wheels, "app", "1.0", &["kernels==1.0"], None),
    }
}

fn pylock(index: &Index, wheel: &Path, hash: &str) -> String {
    let file = wheel.file_name().unwrap().to_str().unwrap();
    let version = file.split('-').nth(1).unwrap();
    format!(
        "lock-version = \"1.0\"\ncreated-by = \"fatkit-tests\"\n\n[[packages]]\nname = \"kernels\"\nversion = \"{version}\"\nwheels = [{{ url = \"{}/files/{file}\", hashes = {{ sha256 = \"{hash}\" }} }}]\n\n[[packages]]\nname = \"colorama\"\nversion = \"0.4.6\"\nmarker = \"sys_platform == 'win32'\"\nwheels = [{{ url = \"{}/files/nothing-here-0.4.6-py3-none-any.whl\", hashes = {{ sha256 = \"{hash}\" }} }}]\n",
        index.url, index.url
    )
}

#[test]
fn a_lock_that_pins_a_wheel_without_the_gpus_image_is_no_before_any_install() {
    let dir = temp_dir("lock-pylock");
    let built = releases(&dir);
    let Some(index) = serve(&dir.join("index"), &[&built.old, &built.new, &built.app]) else {
        return;
    };
    let cache = dir.join("cache");
    let lock = dir.join("old/pylock.toml");
    std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
    std::fs::write(&lock, pylock(&index, &built.old, &sha256(&built.old))).unwrap();
    let lock_arg = lock.to_str().unwrap();
    let (code, text) = fatkit(&cache, &["audit", lock_arg, "--gpu", "RTX 5090"]);
    assert_eq!(code, 1, "{text}");
    // Read from the wheel: what the answers from its reading below must equal.
    let cold = text.clone();
    // As code-scanning results: an error at the line of the lock that pins the wheel.
    let (code, out) = fatkit(
        &cache,
        &["audit", lock_arg, "--gpu", "RTX 5090", "--format", "sarif"],
    );
    assert_eq!(code, 1, "{out}");
    let sarif: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(sarif["version"], "2.1.0");
    let results = sarif["runs"][0]["results"].as_array().unwrap();
    let rules = sarif["runs"][0]["tool"]["driver"]["rules"]
        .as_array()
        .unwrap();
    assert_eq!(results.len(), 1, "{out}");
    let r = &results[0];
    assert_eq!(r["level"], "error", "{out}");
    assert_eq!(
        rules[r["ruleIndex"].as_u64().unwrap() as usize]["id"],
        r["ruleId"]
    );
    assert!(
        r["message"]["text"]
            .as_str()
            .unwrap()
            .starts_with("kernels 1.0: NO on GeForce RTX 5090"),
        "{out}"
    );
    let location = &r["locations"][0]["physicalLocation"];
    // The lock lies outside the directory fatkit ran in: an absolute file URI, no base.
    let absolute = std::fs::canonicalize(&lock).unwrap();
    assert_eq!(
        location["artifactLocation"]["uri"],
        format!("file://{}", absolute.display()),
        "{out}"
    );
    assert!(
        location["artifactLocation"].get("uriBaseId").is_none(),
        "{out}"
    );
    assert!(
        sarif["runs"][0]["originalUriBaseIds"]["%SRCROOT%"]["uri"]
            .as_str()
            .is_some_and(|u| u.starts_with("file:///") && u.ends_with('/')),
        "{out}"
    );
    let pinned = std::fs::read_to_string(&lock).unwrap();
    let line = location["region"]["startLine"].as_u64().unwrap() as usize;
    let file = built.old.file_name().unwrap().to_str().unwrap();
    assert!(
        pinned.lines().nth(line - 1).unwrap().contains(file),
        "line {line} of:\n{pinned}"
    );
    assert!(
        text.starts_with(&format!("{lock_arg}: NO on GeForce RTX 5090")),
        "{text}"
    );
    assert!(text.contains("kernels 1.0"), "{text}");
    let (code, text) = fatkit(&cache, &["audit", lock_arg, "--gpu", "A100"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains(": yes on A100"), "{text}");
    // The wheel is in the store by its hash, and nothing partial is left.
    let stored = cache.join(format!("wheels/sha256/{}.whl", sha256(&built.old)));
    assert_eq!(
        std::fs::read(&stored).unwrap(),
        std::fs::read(&built.old).unwrap()
    );
    assert_eq!(
        std::fs::read_dir(cache.join("wheels/partial"))
            .unwrap()
            .count(),
        0
    );
    // The new release runs there, by PTX; `diff` of the two locks says the GPU was gained.
    let newer = dir.join("new/pylock.toml");
    std::fs::create_dir_all(newer.parent().unwrap()).unwrap();
    std::fs::write(&newer, pylock(&index, &built.new, &sha256(&built.new))).unwrap();
    let (code, text) = fatkit(
        &cache,
        &["audit", newer.to_str().unwrap(), "--gpu", "RTX 5090"],
    );
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("yes, by PTX JIT on GeForce RTX 5090"),
        "{text}"
    );
    let (code, text) = fatkit(
        &cache,
        &[
            "diff",
            newer.to_str().unwrap(),
            lock_arg,
            "--gpu",
            "RTX 5090",
        ],
    );
    assert_eq!(
        code, 1,
        "a release that loses the RTX 5090 is a regression:\n{text}"
    );
    assert!(text.contains("RTX 5090"), "{text}");
    // A lock is compared with a lock or an environment, and named as one when it is not.
    let (code, text) = fatkit(
        &cache,
        &[
            "diff",
            lock_arg,
            built.old.to_str().unwrap(),
            "--gpu",
            "RTX 5090",
        ],
    );
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("OLD is a lock and NEW a wheel"), "{text}");
    // As a bill of materials: the distribution identified by the wheel's hash, valid for the
    // CycloneDX project's own validator.
    let (code, bom) = fatkit(
        &cache,
        &[
            "audit",
            lock_arg,
            "--gpu",
            "RTX 5090",
            "--format",
            "cyclonedx",
        ],
    );
    assert_eq!(code, 1, "{bom}");
    let doc: serde_json::Value =
        serde_json::from_str(&bom).unwrap_or_else(|e| panic!("{e}: {bom}"));
    let kernels = doc["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "kernels")
        .unwrap_or_else(|| panic!("no kernels component: {bom}"));
    assert_eq!(kernels["hashes"][0]["alg"], "SHA-256");
    assert_eq!(kernels["hashes"][0]["content"], sha256(&built.old).as_str());
    if let Some(python) = fatkit_tests::cyclonedx_python() {
        assert_eq!(super::bom::validate(&python, &bom, &dir), None);
    }
    // Offline, with the server gone, the stored wheels answer alike.
    drop(index);
    let (code, text) = fatkit(
        &cache,
        &["audit", lock_arg, "--gpu", "RTX 5090", "--offline"],
    );
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("NO on GeForce RTX 5090"), "{text}");
    // The wheels' readings are kept by hash: with the wheels gone from the store, a lock whose
    // wheels were read before is answered from its readings, on any GPU, without a fetch.
    let readings: Vec<PathBuf> = std::fs::read_dir(cache.join("readings"))
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    let kept = format!("{}.json", sha256(&built.old));
    assert!(readings.iter().any(|r| r.ends_with(&kept)), "{readings:?}");
    std::fs::remove_dir_all(cache.join("wheels")).unwrap();
    let offline = ["audit", lock_arg, "--gpu", "RTX 5090", "--offline"];
    let (code, again) = fatkit(&cache, &offline);
    assert_eq!((code, again.as_str()), (1, cold.as_str()));
    let (code, text) = fatkit(&cache, &["audit", lock_arg, "--gpu", "V100", "--offline"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("NO on V100"), "{text}");
    let empty = dir.join("empty-cache");
    let (code, text) = fatkit(
        &empty,
        &["audit", lock_arg, "--gpu", "RTX 5090", "--offline"],
    );
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("--offline, and 1 wheel(s)") && text.contains("kernels-1.0-"),
        "{text}"
    );
    // A shared readings directory that cannot be written is said, not silently never filled.
    let not_a_dir = dir.join("a-file");
    std::fs::write(&not_a_dir, b"x").unwrap();
    let (code, text) = cli::process(
        Path::new(FATKIT),
        &offline,
        &[
            ("FATKIT_CACHE_DIR", cache.to_str().unwrap()),
            ("FATKIT_READINGS_DIR", not_a_dir.to_str().unwrap()),
        ],
    )
    .text();
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("FATKIT_READINGS_DIR=") && text.contains("readings cannot be kept there"),
        "{text}"
    );
}

#[test]
fn a_wheel_whose_hash_is_not_the_locks_is_refused_and_kept_nowhere() {
    let dir = temp_dir("lock-mismatch");
    let built = releases(&dir);
    let Some(index) = serve(&dir.join("index"), &[&built.old]) else {
        return;
    };
    let cache = dir.join("cache");
    let lock = dir.join("pylock.toml");
    // The hash of the other release: the index serves a file that is not the one locked.
    std::fs::write(&lock, pylock(&index, &built.old, &sha256(&built.new))).unwrap();
    let (code, text) = fatkit(
        &cache,
        &["audit", lock.to_str().unwrap(), "--gpu", "RTX 5090"],
    );
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("kernels-1.0-py3-none-manylinux_2_17_x86_64.whl")
            && text.contains(&sha256(&built.old))
            && text.contains("not the one locked"),
        "{text}"
    );
    assert!(
        !text.contains("NO on") && !text.contains("yes on"),
        "no verdict on a refused wheel:\n{text}"
    );
    let stored: Vec<_> = std::fs::read_dir(cache.join("wheels/sha256"))
        .unwrap()
        .collect();
    let partial: Vec<_> = std::fs::read_dir(cache.join("wheels/partial"))
        .unwrap()
        .collect();
    assert!(
        stored.is_empty() && partial.is_empty(),
        "{stored:?} {partial:?}"
    );
}

#[test]
fn pip_resolves_a_requirements_file_against_the_index_and_the_answer_follows_the_pins() {
    let dir = temp_dir("lock-requirements");
    let built = releases(&dir);
    let Some(index) = serve(&dir.join("index"), &[&built.old, &built.new, &built.app]) else {
        return;
    };
    let cache = dir.join("cache");
    let requirements = dir.join("requirements.txt");
    // `app` pins kernels 1.0 through its own requirement: pip's resolver finds it.
    std::fs::write(
        &requirements,
        format!("--index-url {}/simple/\napp==1.0\n", index.url),
    )
    .unwrap();
    let (code, text) = fatkit(
        &cache,
        &["audit", requirements.to_str().unwrap(), "--gpu", "RTX 5090"],
    );
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("NO on GeForce RTX 5090") && text.contains("kernels 1.0"),
        "{text}"
    );
    std::fs::write(
        &requirements,
        format!("--index-url {}/simple/\nkernels\n", index.url),
    )
    .unwrap();
    let (code, text) = fatkit(
        &cache,
        &["audit", requirements.to_str().unwrap(), "--gpu", "RTX 5090"],
    );
    assert_eq!(code, 0, "the newest kernels runs by PTX:\n{text}");
    assert!(text.contains("kernels 2.0"), "{text}");
    // A requirement the index cannot satisfy: pip's message, with the file and the target.
    std::fs::write(
        &requirements,
        format!("--index-url {}/simple/\nkernels==9.9\n", index.url),
    )
    .unwrap();
    let (code, text) = fatkit(
        &cache,
        &["audit", requirements.to_str().unwrap(), "--gpu", "RTX 5090"],
    );
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("requirements.txt: pip could not resolve it for Linux x86_64"),
        "{text}"
    );
}

#[test]
fn a_uv_lock_is_judged_for_the_platform_asked() {
    let dir = temp_dir("lock-uv");
    let built = releases(&dir);
    let Some(index) = serve(&dir.join("index"), &[&built.old, &built.new]) else {
        return;
    };
    let cache = dir.join("cache");
    let file = |w: &Path| w.file_name().unwrap().to_str().unwrap().to_owned();
    // On x86_64 the project gets kernels 1.0; on aarch64 the fork pins 2.0, whose wheel is
    // x86_64-only there: no wheel, so unknown, not a guess.
    let lock = format!(
        r#"version = 1
revision = 3
requires-python = ">=3.10"
resolution-markers = ["platform_machine == 'x86_64'", "platform_machine != 'x86_64'"]

[[package]]
name = "project"
version = "0.1.0"
source = {{ virtual = "." }}
dependencies = [
    {{ name = "kernels", version = "1.0", source = {{ registry = "{url}/simple" }}, marker = "platform_machine == 'x86_64'" }},
    {{ name = "kernels", version = "2.0", source = {{ registry = "{url}/simple" }}, marker = "platform_machine != 'x86_64'" }},
]

[[package]]
name = "kernels"
version = "1.0"
source = {{ registry = "{url}/simple" }}
resolution-markers = ["platform_machine == 'x86_64'"]
wheels = [{{ url = "{url}/files/{old}", hash = "sha256:{old_hash}" }}]

[[package]]
name = "kernels"
version = "2.0"
source = {{ registry = "{url}/simple" }}
resolution-markers = ["platform_machine != 'x86_64'"]
sdist = {{ url = "{url}/files/kernels-2.0.tar.gz", hash = "sha256:{old_hash}" }}
wheels = [{{ url = "{url}/files/{new}", hash = "sha256:{new_hash}" }}]
"#,
        url = index.url,
        old = file(&built.old),
        new = file(&built.new),
        old_hash = sha256(&built.old),
        new_hash = sha256(&built.new),
    );
    let path = dir.join("uv.lock");
    std::fs::write(&path, lock).unwrap();
    let arg = path.to_str().unwrap();
    let (code, text) = fatkit(&cache, &["audit", arg, "--gpu", "RTX 5090"]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("NO on GeForce RTX 5090") && text.contains("kernels 1.0"),
        "{text}"
    );
    let (code, text) = fatkit(
        &cache,
        &[
            "audit",
            arg,
            "--gpu",
            "GH200",
            "--platform",
            "manylinux_2_28_aarch64",
        ],
    );
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("kernels 2.0") && text.contains("built at install"),
        "{text}"
    );
}
