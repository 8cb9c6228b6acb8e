//! Container images of generated shapes (issue 44): layers of whiteouts, opaque directories,
//! links and rewrites, compressed or not, in a `docker save` archive or an OCI layout, each
//! read as the OCI image spec's bottom-first application leaves it; damaged images and layers
//! that inflate past the budget are errors, never answers.
#![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};

use fatkit_tests::{repo_root as root, temp_dir, Rng};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Made {
    Library,
    Junk,
    Link,
}

/// One layer's entries, in tar order: (path, what; `None` a whiteout or opaque marker).
type Entries = Vec<(String, Option<Made>)>;

/// Random layers over a few directories, whose paths are directories or files, never both:
/// libraries, other files, links, whiteouts of files and directories, opaque directories,
/// a path written twice in one layer, and in the top layer a directory replaced by a link.
fn random_layers(rng: &mut Rng) -> Vec<Entries> {
    const DIRS: [&str; 3] = ["a", "a/b", "c"];
    const FILES: [&str; 6] = ["a/x", "a/y", "a/b/x", "a/b/z", "c/x", "top"];
    let count = 1 + rng.below(4);
    (0..count)
        .map(|i| {
            let mut out: Entries = Vec::new();
            let mut deleted: Vec<String> = Vec::new();
            for _ in 0..1 + rng.below(7) {
                match rng.below(10) {
                    0..=3 => {
                        let f = FILES[rng.below(FILES.len())];
                        if deleted
                            .iter()
                            .any(|d| f == d || f.starts_with(&format!("{d}/")))
                        {
                            continue;
                        }
                        let made =
                            [Made::Library, Made::Library, Made::Junk, Made::Link][rng.below(4)];
                        out.push((f.to_owned(), Some(made)));
                    }
                    4..=5 => {
                        let all: Vec<&str> = FILES.iter().chain(DIRS.iter()).copied().collect();
                        let p = all[rng.below(all.len())];
                        let written = out
                            .iter()
                            .any(|(q, _)| q == p || q.starts_with(&format!("{p}/")));
                        if written {
                            continue;
                        }
                        let (dir, leaf) = p.rsplit_once('/').map_or(("", p), |(d, l)| (d, l));
                        let marker = match dir {
                            "" => format!(".wh.{leaf}"),
                            d => format!("{d}/.wh.{leaf}"),
                        };
                        out.insert(0, (marker, None));
                        deleted.push(p.to_owned());
                    }
                    6 => {
                        let d = DIRS[rng.below(DIRS.len())];
                        if deleted
                            .iter()
                            .any(|x| d == x || d.starts_with(&format!("{x}/")))
                        {
                            continue;
                        }
                        out.insert(0, (format!("{d}/.wh..wh..opq"), None));
                    }
                    7 if i + 1 == count && i > 0 => {
                        // The top layer: `c` (a directory below) becomes a link.
                        out.retain(|(p, _)| !p.starts_with("c/"));
                        deleted.push("c".to_owned());
                        out.push(("c".to_owned(), Some(Made::Link)));
                    }
                    _ => {
                        if let Some((p, _)) = out.last().cloned() {
                            if !p.contains(".wh.") && p != "c" {
                                out.push((p, Some(Made::Junk)));
                            }
                        }
                    }
                }
            }
            out
        })
        .collect()
}

/// What the container holds, applying the layers bottom first as the OCI image spec says: a
/// layer's whiteouts and opaque directories delete from the layers below it, then its
/// entries are written in order.
fn model(layers: &[Entries]) -> Vec<String> {
    let mut fs: std::collections::BTreeMap<String, Made> = Default::default();
    let under = |p: &str, d: &str| p.starts_with(&format!("{d}/"));
    for layer in layers {
        for (p, made) in layer {
            if made.is_some() {
                continue;
            }
            let (dir, leaf) = p.rsplit_once('/').map_or(("", p.as_str()), |(d, l)| (d, l));
            if leaf == ".wh..wh..opq" {
                fs.retain(|q, _| !under(q, dir));
            } else {
                let gone = match dir {
                    "" => leaf.trim_start_matches(".wh.").to_owned(),
                    d => format!("{d}/{}", leaf.trim_start_matches(".wh.")),
                };
                fs.retain(|q, _| q != &gone && !under(q, &gone));
            }
        }
        for (p, made) in layer {
            if let Some(m) = made {
                fs.retain(|q, _| !under(q, p));
                fs.insert(p.clone(), *m);
            }
        }
    }
    fs.into_iter()
        .filter(|(_, m)| *m == Made::Library)
        .map(|(p, _)| format!("/{p}"))
        .collect()
}

fn layer_tar(entries: &Entries, library: &[u8]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (p, made) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        match made {
            Some(Made::Link) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_size(0);
                b.append_link(&mut h, p, "elsewhere").unwrap();
            }
            Some(Made::Library) => {
                h.set_size(library.len() as u64);
                b.append_data(&mut h, p, library).unwrap();
            }
            Some(Made::Junk) | None => {
                h.set_size(4);
                b.append_data(&mut h, p, &b"junk"[..]).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

fn compressed(tar: Vec<u8>, how: usize) -> Vec<u8> {
    use std::io::Write;
    match how {
        0 => tar,
        1 => {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(&tar).unwrap();
            gz.finish().unwrap()
        }
        _ => zstd::bulk::compress(&tar, 1).unwrap(),
    }
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The image as a `docker save` archive (`ID/layer.tar` links to blobs, as docker writes
/// them) or an OCI layout directory.
fn write_image(dir: &Path, name: &str, layers: &[Vec<u8>], oci: bool) -> PathBuf {
    if oci {
        let root = dir.join(name);
        let blobs = root.join("blobs/sha256");
        std::fs::create_dir_all(&blobs).unwrap();
        let mut descriptors = Vec::new();
        for layer in layers {
            let digest = sha256(layer);
            std::fs::write(blobs.join(&digest), layer).unwrap();
            descriptors.push(serde_json::json!({
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": format!("sha256:{digest}"),
                "size": layer.len(),
            }));
        }
        let manifest = serde_json::json!({"schemaVersion": 2, "layers": descriptors}).to_string();
        let digest = sha256(manifest.as_bytes());
        std::fs::write(blobs.join(&digest), &manifest).unwrap();
        let index = serde_json::json!({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{digest}"),
            "size": manifest.len(),
            "annotations": {"org.opencontainers.image.ref.name": "gen"},
        }]});
        std::fs::write(root.join("index.json"), index.to_string()).unwrap();
        std::fs::write(root.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
        return root;
    }
    let path = dir.join(format!("{name}.tar"));
    let mut b = tar::Builder::new(std::fs::File::create(&path).unwrap());
    let mut names = Vec::new();
    for layer in layers {
        let digest = sha256(layer);
        append_file(&mut b, &format!("{digest}.tar"), layer);
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        b.append_link(
            &mut h,
            format!("{digest}/layer.tar"),
            format!("../{digest}.tar"),
        )
        .unwrap();
        names.push(format!("{digest}/layer.tar"));
    }
    let manifest =
        serde_json::json!([{"Config": "c.json", "RepoTags": ["gen:1"], "Layers": names}])
            .to_string();
    append_file(&mut b, "manifest.json", manifest.as_bytes());
    b.finish().unwrap();
    path
}

/// A read-only file `name` holding `data`, appended to an archive being written.
fn append_file(b: &mut tar::Builder<std::fs::File>, name: &str, data: &[u8]) {
    let mut h = tar::Header::new_ustar();
    h.set_size(data.len() as u64);
    h.set_mode(0o444);
    b.append_data(&mut h, name, data).unwrap();
}

/// Generated layer shapes, none written by hand: the libraries fatkit finds in each image
/// are those the OCI spec's bottom-up application leaves, whatever the mix of whiteouts,
/// opaque directories, links, rewrites, compressions and archive layouts.
#[test]
fn generated_layers_leave_what_the_spec_leaves() {
    let dir = temp_dir("images-generated");
    let library = std::fs::read(root().join("tests/fixtures/small/plain.fatbin")).unwrap();
    let limits = fatkit_fatbin::Limits::default();
    for seed in 1..=300u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let layers = random_layers(&mut rng);
        let blobs: Vec<Vec<u8>> = layers
            .iter()
            .map(|l| compressed(layer_tar(l, &library), rng.below(3)))
            .collect();
        let path = write_image(&dir, &format!("s{seed}"), &blobs, rng.below(2) == 1);
        let inputs = fatkit_audit::inputs::read(&path, &limits).unwrap();
        assert_eq!(inputs.len(), 1, "seed {seed}");
        let input = &inputs[0];
        assert!(
            input.report.errors.is_empty(),
            "seed {seed}: {:?}",
            input.report.errors
        );
        let mut got: Vec<String> = input.libraries().into_iter().map(|l| l.name).collect();
        got.sort();
        assert_eq!(got, model(&layers), "seed {seed}: {layers:?}");
    }
}

/// Damaged images (every cut, flipped bytes in headers and manifests) answer or say why,
/// never panic; a layer that inflates past the budget is unknown, naming it.
#[test]
fn damaged_and_inflating_images_are_errors_not_answers() {
    use std::io::Read;
    let dir = temp_dir("images-damaged");
    let library = std::fs::read(root().join("tests/fixtures/small/plain.fatbin")).unwrap();
    let layers = [vec![
        ("a/x".to_owned(), Some(Made::Library)),
        ("a/.wh.y".to_owned(), None),
    ]];
    let blob = compressed(layer_tar(&layers[0], &library), 1);
    let good = std::fs::read(write_image(&dir, "good", &[blob], false)).unwrap();
    let limits = fatkit_fatbin::Limits::default();
    let mut rng = Rng(7);
    for i in 0..400 {
        let mut bytes = good.clone();
        match i % 2 {
            0 => bytes.truncate(rng.below(good.len())),
            _ => {
                for _ in 0..4 {
                    let at = rng.below(bytes.len());
                    bytes[at] = rng.below(256) as u8;
                }
            }
        }
        let path = dir.join(format!("d{i}.tar"));
        std::fs::write(&path, &bytes).unwrap();
        // Either an error or inputs, never a panic; an image read without an error holds
        // what the image holds, or less where a flipped byte broke a library (never more).
        let Ok(inputs) = fatkit_audit::inputs::read(&path, &limits) else {
            continue;
        };
        for input in inputs {
            if input.report.format != fatkit_fatbin::Format::Image
                || !input.report.errors.is_empty()
            {
                continue;
            }
            for l in input.libraries() {
                assert_eq!(l.name, "/a/x", "damage {i}");
            }
        }
    }
    // A layer of zeros far larger than the image allows.
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(64 << 20);
    h.set_mode(0o644);
    b.append_data(&mut h, "big", std::io::repeat(0).take(64 << 20))
        .unwrap();
    let bomb = compressed(b.into_inner().unwrap(), 1);
    let path = write_image(&dir, "bomb", &[bomb], false);
    let small = fatkit_fatbin::Limits {
        inflate_floor: 1 << 20,
        ..fatkit_fatbin::Limits::default()
    };
    let inputs = fatkit_audit::inputs::read(&path, &small).unwrap();
    let why = inputs[0].report.refused.clone().unwrap_or_default();
    assert!(
        why.contains("the image's layers need more inflation than the input's budget allows"),
        "{why}"
    );
}

/// A layer below that cannot be read (named by the manifest, absent from the archive): what
/// the layers above hold runs, and the image's answer is still UNKNOWN, never "yes".
#[test]
fn an_unread_layer_makes_the_image_unknown() {
    let dir = temp_dir("images-unread-layer");
    let library = std::fs::read(root().join("tests/fixtures/small/plain.fatbin")).unwrap();
    let top = layer_tar(
        &vec![("opt/k.fatbin".to_owned(), Some(Made::Library))],
        &library,
    );
    let path = dir.join("image.tar");
    let mut b = tar::Builder::new(std::fs::File::create(&path).unwrap());
    append_file(&mut b, "top.tar", &top);
    let manifest = serde_json::json!([{"Config": "c.json", "RepoTags": ["gap:1"], "Layers": ["gone.tar", "top.tar"]}]).to_string();
    append_file(&mut b, "manifest.json", manifest.as_bytes());
    b.finish().unwrap();
    drop(b);
    let (code, out, err) =
        fatkit_tests::fatkit_in_process(&["audit", path.to_str().unwrap(), "--gpu", "H100"]);
    assert_eq!(code, 2, "{out}{err}");
    let first = out.lines().next().unwrap();
    assert!(first.contains("(gap:1): UNKNOWN on H100"), "{out}");
    assert!(
        out.contains("layer 1 of 2 (gone.tar): cannot read"),
        "{out}"
    );
}

/// A library kept only by a hard link (its first name whited out in a later layer) was never
/// read: the image was "yes on CC 9.0" while its filesystem holds an sm_75-only library. A
/// hard link is read as the file it names, under its own name.
#[test]
fn a_library_kept_by_a_hard_link_is_read() {
    let dir = temp_dir("images-hard-link");
    let old = fatkit_tests::image_of(
        &root().join("crates/fatkit-example-kernels/kernels/prebuilt/saxpy.fatbin"),
        "sm_75",
    );
    let good = std::fs::read(root().join("tests/fixtures/small/plain.fatbin")).unwrap();
    let mut bottom = tar::Builder::new(Vec::new());
    for (name, data) in [("usr/lib/libgood.so", &good), ("usr/lib/libold.so", &old)] {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        bottom.append_data(&mut h, name, &data[..]).unwrap();
    }
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Link);
    h.set_size(0);
    bottom
        .append_link(&mut h, "usr/lib/libkept.so", "usr/lib/libold.so")
        .unwrap();
    let bottom = bottom.into_inner().unwrap();
    let top = layer_tar(&vec![("usr/lib/.wh.libold.so".to_owned(), None)], &[]);
    for (oci, how) in [(false, 0), (true, 1)] {
        let image = write_image(
            &dir,
            &format!("linked-{oci}"),
            &[
                compressed(bottom.clone(), how),
                compressed(top.clone(), how),
            ],
            oci,
        );
        let (code, out, err) =
            fatkit_tests::fatkit_in_process(&["audit", image.to_str().unwrap(), "--gpu", "H100"]);
        assert!(out.contains("libkept.so"), "{out}{err}");
        assert!(!out.contains("libold.so"), "{out}");
        assert_ne!(code, 0, "an sm_75-only library in the image: {out}{err}");
        let (code, out, err) = fatkit_tests::fatkit_in_process(&[
            "audit",
            image.to_str().unwrap(),
            "--require",
            "sm_90",
        ]);
        assert_eq!(code, 1, "{out}{err}");
    }
}
