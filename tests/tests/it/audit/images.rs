//! Container images (issue 44): real images built offline with Debian's umoci and skopeo, read
//! by `fatkit audit` as a `docker save` archive, an OCI image layout and an OCI archive with
//! zstd layers. A base layer holds a CUDA library a Debian package installed, a second layer a
//! wheel's libraries installed by pip, a third deletes the first library by a whiteout, and
//! another image hides its directory by an opaque whiteout. umoci's own unpacking of each
//! image is the oracle for which files the final filesystem holds.
#![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::process::Command;

use fatkit_tests::{cli, curand_wheel, debian_program, output, repo_root as root, temp_dir};

const SCRIPT: &str = ".ci/install-debian-image-tools";

/// `fatkit audit ARGS` with no driver asked: (exit code, stdout, stderr).
/// The tests' fatkit binary, run as a process with the answers of a machine without a GPU.
const FATKIT: &str = env!("CARGO_BIN_EXE_fatkit-e2e");
const NO_SMI: &[(&str, &str)] = &[("FATKIT_NVIDIA_SMI", "")];

fn ok(cmd: &mut Command) {
    let (ok, text) = output(cmd);
    assert!(ok, "{cmd:?}: {text}");
}

/// The images: an OCI layout `img` with tags `before` (base + wheel), `t` (and the base's
/// library deleted) and `opaque` (`before` with its `/opt/app` made opaque).
struct Images {
    dir: PathBuf,
    umoci: PathBuf,
    skopeo: PathBuf,
}

impl Images {
    fn build() -> Option<Images> {
        let umoci = debian_program("umoci", "umoci", SCRIPT)?;
        let skopeo = debian_program("skopeo", "skopeo", SCRIPT)?;
        let wheel = curand_wheel()?;
        let dir = temp_dir("images");
        let images = Images { dir, umoci, skopeo };
        let d = &images.dir;
        images.umoci(&["init", "--layout", "img"]);
        images.umoci(&["new", "--image", "img:t"]);
        // Layer 1: a CUDA library installed by a Debian package.
        let b1 = images.unpack("img:t", "b1");
        std::fs::create_dir_all(b1.join("opt/app")).unwrap();
        std::fs::create_dir_all(b1.join("var/lib/dpkg/info")).unwrap();
        std::fs::copy(
            root().join("tests/fixtures/small/plain.fatbin"),
            b1.join("opt/app/kernels.fatbin"),
        )
        .unwrap();
        std::fs::write(
            b1.join("var/lib/dpkg/status"),
            "Package: app-kernels\nStatus: install ok installed\nVersion: 1.0-1\n\n",
        )
        .unwrap();
        std::fs::write(
            b1.join("var/lib/dpkg/info/app-kernels.list"),
            "/opt\n/opt/app\n/opt/app/kernels.fatbin\n",
        )
        .unwrap();
        images.umoci(&["repack", "--image", "img:t", "b1"]);
        // Layer 2: a wheel's libraries, installed by pip (its RECORD names them).
        let b2 = images.unpack("img:t", "b2");
        ok(Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--no-compile",
                "--target",
            ])
            .arg(b2.join("usr/local/lib/python3.11/site-packages"))
            .arg(&wheel));
        images.umoci(&["repack", "--image", "img:t", "b2"]);
        images.umoci(&["tag", "--image", "img:t", "before"]);
        // Layer 3: the first library deleted (umoci writes a `.wh.` file).
        let b3 = images.unpack("img:t", "b3");
        std::fs::remove_file(b3.join("opt/app/kernels.fatbin")).unwrap();
        images.umoci(&["repack", "--image", "img:t", "b3"]);
        // `before` with an opaque /opt/app (a layer made by hand: umoci writes none).
        let layer = d.join("opaque.tar");
        let mut b = tar::Builder::new(std::fs::File::create(&layer).unwrap());
        for (name, data) in [
            ("opt/app/.wh..wh..opq", &b""[..]),
            ("opt/app/README", &b"nothing here\n"[..]),
        ] {
            let mut h = tar::Header::new_ustar();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            b.append_data(&mut h, name, data).unwrap();
        }
        b.finish().unwrap();
        drop(b);
        images.umoci(&[
            "raw",
            "add-layer",
            "--image",
            "img:before",
            "--tag",
            "opaque",
            "opaque.tar",
        ]);
        Some(images)
    }

    fn umoci(&self, args: &[&str]) {
        ok(Command::new(&self.umoci).current_dir(&self.dir).args(args));
    }

    fn skopeo(&self, args: &[&str]) {
        ok(Command::new(&self.skopeo).current_dir(&self.dir).args(args));
    }

    /// umoci's unpacking of `image` (rootless): its rootfs, the final filesystem.
    fn unpack(&self, image: &str, bundle: &str) -> PathBuf {
        self.umoci(&["unpack", "--rootless", "--image", image, bundle]);
        self.dir.join(bundle).join("rootfs")
    }
}

/// Each input `audit --json` reports (its path) with the libraries it names, each with the
/// package and layer it gives it.
type Library = (String, Option<String>, Option<String>);

fn libraries(json: &str) -> Vec<(String, Vec<Library>)> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|file| {
            let libs = file["libraries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| {
                    (
                        l["name"].as_str().unwrap().to_owned(),
                        l["package"].as_str().map(str::to_owned),
                        l["layer"].as_str().map(str::to_owned),
                    )
                })
                .collect();
            (file["path"].as_str().unwrap().to_owned(), libs)
        })
        .collect()
}

fn json_of(path: &Path) -> String {
    let (code, json, err) = cli::process(
        Path::new(FATKIT),
        &[
            "audit",
            path.to_str().unwrap(),
            "--gpu",
            "RTX 5090",
            "--json",
        ],
        NO_SMI,
    )
    .parts();
    assert!(code == 0 || code == 1, "{code}: {err}");
    json
}

#[test]
fn images_are_read_as_their_containers_see_them() {
    let Some(images) = Images::build() else {
        return;
    };
    let d = &images.dir;
    // As `docker save` writes it (uncompressed layers, manifest.json), as an OCI archive with
    // zstd layers, and as the OCI layout itself (gzip layers, three tags).
    images.skopeo(&[
        "copy",
        "-q",
        "oci:img:before",
        "docker-archive:before.tar:x/app:before",
    ]);
    images.skopeo(&[
        "copy",
        "-q",
        "--dest-compress-format",
        "zstd",
        "oci:img:t",
        "oci-archive:after.tar:t",
    ]);
    // skopeo wrote zstd layers.
    let (ok_, index) = output(
        Command::new("tar")
            .arg("xOf")
            .arg(d.join("after.tar"))
            .arg("index.json"),
    );
    assert!(ok_, "{index}");
    let manifest: serde_json::Value = serde_json::from_str(&index).unwrap();
    let digest = manifest["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .replace(':', "/");
    let (ok_, manifest) = output(
        Command::new("tar")
            .arg("xOf")
            .arg(d.join("after.tar"))
            .arg(format!("blobs/{digest}")),
    );
    assert!(ok_ && manifest.contains("tar+zstd"), "{manifest}");

    // Before the whiteout: the base layer's library fails one kernel on an RTX 5090.
    let (code, text, err) = cli::process(
        Path::new(FATKIT),
        &[
            "audit",
            d.join("before.tar").to_str().unwrap(),
            "--gpu",
            "RTX 5090",
        ],
        NO_SMI,
    )
    .parts();
    assert_eq!(code, 1, "{text}{err}");
    let first = text.lines().next().unwrap();
    assert!(
        first.contains("before.tar (docker.io/x/app:before): PARTLY on GeForce RTX 5090"),
        "{text}"
    );
    assert!(text.contains("  app-kernels 1.0-1 (deb): PARTLY"), "{text}");
    assert!(text.contains("/opt/app/kernels.fatbin"), "{text}");
    assert!(text.contains("nvidia_curand 10.4.5.25"), "{text}");
    let (_, verbose, _) = cli::process(
        Path::new(FATKIT),
        &[
            "audit",
            d.join("before.tar").to_str().unwrap(),
            "--gpu",
            "RTX 5090",
            "-v",
        ],
        NO_SMI,
    )
    .parts();
    assert!(
        verbose.contains("from:       layer 1 of 2 (sha256:"),
        "{verbose}"
    );
    assert!(
        verbose.contains("from:       layer 2 of 2 (sha256:"),
        "{verbose}"
    );

    // After it: the library is gone and the image runs; the answer changed.
    let (code, text, err) = cli::process(
        Path::new(FATKIT),
        &[
            "audit",
            d.join("after.tar").to_str().unwrap(),
            "--gpu",
            "RTX 5090",
        ],
        NO_SMI,
    )
    .parts();
    assert_eq!(code, 0, "{text}{err}");
    assert!(!text.contains("kernels.fatbin"), "{text}");
    assert!(
        text.lines().next().unwrap().contains("after.tar (t): yes"),
        "{text}"
    );

    // Each image of the layout judged as umoci unpacks it: the same libraries as its rootfs
    // read as a directory, each with the package that installed it and its layer.
    let layout = libraries(&json_of(&d.join("img")));
    assert_eq!(layout.len(), 3, "{layout:?}");
    for (tag, layers, has_base) in [("before", 2, true), ("t", 3, false), ("opaque", 3, false)] {
        let rootfs = images.unpack(&format!("img:{tag}"), &format!("u-{tag}"));
        let mut want: Vec<String> = libraries(&json_of(&rootfs))
            .into_iter()
            .flat_map(|(_, libs)| libs)
            .map(|(name, _, _)| format!("/{name}"))
            .collect();
        want.sort();
        let (_, libs) = layout
            .iter()
            .find(|(path, _)| path.ends_with(&format!("img ({tag})")))
            .unwrap_or_else(|| panic!("no image {tag}: {layout:?}"));
        let mut got: Vec<String> = libs.iter().map(|(name, _, _)| name.clone()).collect();
        got.sort();
        assert_eq!(got, want, "{tag}");
        assert_eq!(
            got.iter().any(|n| n == "/opt/app/kernels.fatbin"),
            has_base,
            "{tag}: {got:?}"
        );
        for (name, package, layer) in libs {
            let layer = layer.as_deref().unwrap_or_default();
            assert!(
                layer.contains(&format!(" of {layers} (sha256:")),
                "{tag} {name}: {layer}"
            );
            let package = package.as_deref().unwrap_or_default();
            match name.as_str() {
                "/opt/app/kernels.fatbin" => assert_eq!(package, "app-kernels 1.0-1 (deb)"),
                _ => assert_eq!(package, "nvidia_curand 10.4.5.25", "{name}"),
            }
        }
    }

    // A compressed `docker save` is refused with how to read it.
    ok(Command::new("gzip").arg("-k").arg(d.join("before.tar")));
    let (code, text, err) = cli::process(
        Path::new(FATKIT),
        &["audit", d.join("before.tar.gz").to_str().unwrap()],
        NO_SMI,
    )
    .parts();
    assert_eq!(code, 2, "{text}");
    assert!(
        err.contains("a tar compressed with gzip; decompress it first (gunzip -k FILE)"),
        "{err}"
    );
    // The images hold a real wheel's libraries several times over: not left behind.
    let _ = std::fs::remove_dir_all(d);
}
