//! The images a store holds and their layers, bottom first: from docker's `manifest.json`
//! (`docker save`), else from the OCI `index.json`, its nested indexes and image manifests
//! (docs/CONTAINER_IMAGES.md). Digests are checked before they name a blob.

use std::collections::HashSet;

use fatkit_fatbin::Budget;
use serde::Deserialize;

use super::store::{normal, Store};

/// One image: what it is called and its layers, bottom first.
#[derive(Debug)]
pub(crate) struct Image {
    /// Its tag (`docker.io/library/x:1`), its OCI ref name, or its manifest's digest; with
    /// its platform where the index names one.
    pub name: String,
    pub layers: Vec<Layer>,
}

#[derive(Debug)]
pub(crate) struct Layer {
    /// The blob's name in the store.
    pub blob: String,
    /// As shown: `sha256:` and the first 12 hex digits of its digest, else its blob name.
    pub id: String,
}

/// How deep OCI indexes may nest (real ones: an index of per-platform manifests, one level).
const MAX_NESTING: usize = 4;
/// The most images and layers one store may list (real images: a few, and up to 127 layers,
/// the overlay filesystem's limit).
const MAX_IMAGES: usize = 1024;
const MAX_LAYERS: usize = 1024;

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerEntry {
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    #[serde(default)]
    media_type: Option<String>,
    digest: String,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Deserialize)]
struct Platform {
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    os: String,
    #[serde(default)]
    variant: Option<String>,
}

/// An index or a manifest: which it is, by what it holds.
#[derive(Deserialize)]
struct Listing {
    #[serde(default)]
    manifests: Option<Vec<Descriptor>>,
    #[serde(default)]
    layers: Option<Vec<Descriptor>>,
}

/// The images of `store`; an error names the file that is wrong and how. Every index and
/// manifest is parsed once, by its digest (a blob listed again, on any path to it, adds
/// nothing), and every descriptor and byte parsed is charged to the input's `budget`: the
/// walk is linear in the store, however the indexes nest and repeat.
pub(crate) fn images(store: &Store, budget: &Budget) -> Result<Vec<Image>, String> {
    let mut out = match store.has("manifest.json") {
        true => docker(store)?,
        false => {
            let index = store
                .small("index.json")
                .map_err(|e| format!("index.json: {e}"))?;
            let mut out = Vec::new();
            let mut walk = Walk {
                store,
                budget,
                seen: HashSet::new(),
            };
            walk.oci("index.json", &index, None, 0, &mut out)?;
            out
        }
    };
    if out.is_empty() {
        return Err("it lists no image (an empty manifest.json or index.json)".to_owned());
    }
    if out.len() > MAX_IMAGES {
        return Err(format!(
            "it lists {} images (at most {MAX_IMAGES})",
            out.len()
        ));
    }
    // Two tags of one image are one image to judge.
    out.dedup_by(|b, a| {
        let same = a
            .layers
            .iter()
            .map(|l| &l.blob)
            .eq(b.layers.iter().map(|l| &l.blob));
        if same {
            a.name = format!("{}, {}", a.name, b.name);
        }
        same
    });
    Ok(out)
}

fn docker(store: &Store) -> Result<Vec<Image>, String> {
    let bytes = store
        .small("manifest.json")
        .map_err(|e| format!("manifest.json: {e}"))?;
    let entries: Vec<DockerEntry> =
        serde_json::from_slice(&bytes).map_err(|e| format!("manifest.json: {e}"))?;
    entries
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            if e.layers.len() > MAX_LAYERS {
                return Err(format!(
                    "manifest.json: image {}: {} layers (at most {MAX_LAYERS})",
                    i + 1,
                    e.layers.len()
                ));
            }
            let layers = e
                .layers
                .iter()
                .map(|l| {
                    let blob = normal(l).ok_or_else(|| {
                        format!("manifest.json: layer {l:?} is no path in the archive")
                    })?;
                    Ok(Layer {
                        id: short_id(&blob),
                        blob,
                    })
                })
                .collect::<Result<_, String>>()?;
            let name = match e.repo_tags.as_deref() {
                Some([only]) => only.clone(),
                Some(tags @ [_, ..]) => tags.join(", "),
                _ => format!("image {} (untagged)", i + 1),
            };
            Ok(Image { name, layers })
        })
        .collect()
}

/// The walk of an OCI layout's indexes: the blobs parsed so far, and the budget it charges.
struct Walk<'a> {
    store: &'a Store,
    budget: &'a Budget,
    seen: HashSet<String>,
}

impl Walk<'_> {
    fn oci(
        &mut self,
        file: &str,
        bytes: &[u8],
        name: Option<String>,
        depth: usize,
        out: &mut Vec<Image>,
    ) -> Result<(), String> {
        if depth > MAX_NESTING {
            return Err(format!("{file}: indexes nested deeper than {MAX_NESTING}"));
        }
        if !self.budget.work("the image's indexes", bytes.len() as u64) {
            return Err(format!("{file}: {}", spent(self.budget)));
        }
        let listing: Listing = serde_json::from_slice(bytes).map_err(|e| format!("{file}: {e}"))?;
        if let Some(layers) = listing.layers {
            if layers.len() > MAX_LAYERS {
                return Err(format!(
                    "{file}: {} layers (at most {MAX_LAYERS})",
                    layers.len()
                ));
            }
            let layers = layers
                .iter()
                .map(|d| {
                    let blob = blob_of(&d.digest).map_err(|e| format!("{file}: {e}"))?;
                    Ok(Layer {
                        id: short_id(&blob),
                        blob,
                    })
                })
                .collect::<Result<_, String>>()?;
            out.push(Image {
                name: name.unwrap_or_else(|| short_id(file)),
                layers,
            });
            return Ok(());
        }
        for d in listing.manifests.unwrap_or_default() {
            if out.len() > MAX_IMAGES {
                break;
            }
            if !self.budget.items("the image's indexes", 1) {
                return Err(format!("{file}: {}", spent(self.budget)));
            }
            // Build attestations and other artifacts are manifests of no platform.
            let artifact = d.annotations.contains_key("vnd.docker.reference.type")
                || d.platform.as_ref().is_some_and(|p| p.os == "unknown");
            if artifact {
                continue;
            }
            let blob = blob_of(&d.digest).map_err(|e| format!("{file}: {e}"))?;
            let is_layer = d
                .media_type
                .as_deref()
                .is_some_and(|m| m.contains("layer") || m.contains("rootfs"));
            if is_layer {
                continue;
            }
            let mut named = d
                .annotations
                .get("io.containerd.image.name")
                .or_else(|| d.annotations.get("org.opencontainers.image.ref.name"))
                .cloned()
                .or_else(|| name.clone());
            if let Some(p) = &d.platform {
                let platform = match &p.variant {
                    Some(v) => format!("{}/{}/{v}", p.os, p.architecture),
                    None => format!("{}/{}", p.os, p.architecture),
                };
                named = Some(match named {
                    Some(n) => format!("{n} {platform}"),
                    None => format!("{} {platform}", short_id(&blob)),
                });
            }
            let named = named.or_else(|| Some(short_id(&blob)));
            // Listed again (on this path or another): its images are in `out` already.
            if !self.seen.insert(blob.clone()) {
                continue;
            }
            let bytes = self
                .store
                .small(&blob)
                .map_err(|e| format!("{file}: {e}"))?;
            self.oci(&blob, &bytes, named, depth + 1, out)?;
        }
        Ok(())
    }
}

/// Why a walk stopped: the budget spent, naming on what.
fn spent(budget: &Budget) -> String {
    budget
        .spent()
        .unwrap_or_else(|| "the input's budget is spent".to_owned())
}

/// `sha256:<64 hex>` -> `blobs/sha256/<hex>`; any other shape is refused (a digest names a
/// blob, never a path).
fn blob_of(digest: &str) -> Result<String, String> {
    let bad = || format!("digest {digest:?} is not ALGORITHM:HEX");
    let (algorithm, hex) = digest.split_once(':').ok_or_else(bad)?;
    let lengths = match algorithm {
        "sha256" => 64,
        "sha512" => 128,
        _ => {
            return Err(format!(
                "digest {digest:?}: algorithm {algorithm:?} is not sha256 or sha512"
            ))
        }
    };
    let hex_ok =
        hex.len() == lengths && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    match hex_ok {
        true => Ok(format!("blobs/{algorithm}/{hex}")),
        false => Err(bad()),
    }
}

/// A blob as people read it: `sha256:0123456789ab` where its name holds a digest (the OCI
/// `blobs/sha256/HEX`, docker's `HEX.tar` and `HEX/layer.tar`), else its name.
fn short_id(blob: &str) -> String {
    let hex = blob
        .split(['/', '.'])
        .find(|p| p.len() == 64 && p.bytes().all(|b| b.is_ascii_hexdigit()));
    match hex {
        Some(h) => format!("sha256:{}", &h[..12]),
        None => blob.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_name_blobs_never_paths() {
        let hex = "a".repeat(64);
        assert_eq!(
            blob_of(&format!("sha256:{hex}")),
            Ok(format!("blobs/sha256/{hex}"))
        );
        for bad in [
            "sha256:../../etc/passwd".to_owned(),
            format!("sha256:{}", "A".repeat(64)),
            format!("md5:{hex}"),
            "sha256".to_owned(),
            format!("sha256:{hex}/.."),
        ] {
            assert!(blob_of(&bad).is_err(), "{bad}");
        }
        assert_eq!(short_id(&format!("{hex}/layer.tar")), "sha256:aaaaaaaaaaaa");
        assert_eq!(short_id("layer.tar"), "layer.tar");
    }
}
