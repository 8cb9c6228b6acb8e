//! Where an image's files are: an OCI image layout directory, or the members of a tar (a
//! `docker save` archive, an OCI archive), indexed once by their headers. A blob is named by
//! a path inside the store that fatkit makes (from a checked digest) or that the image's own
//! manifest gives; either is looked up, never joined onto a path outside the store.

use std::collections::BTreeMap;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use fatkit_fatbin::Budget;

use super::tar::{Kind, Reader};
use crate::read::open_regular;

/// The largest manifest or index read (real ones are a few kilobytes).
pub(crate) const MAX_JSON: u64 = 4 << 20;

#[derive(Debug)]
pub(crate) enum Store {
    /// An OCI image layout: `oci-layout`, `index.json`, `blobs/<algorithm>/<hex>`.
    Dir(PathBuf),
    /// A tar: each regular member's data, symbolic and hard links resolved to it.
    Tar {
        file: PathBuf,
        members: BTreeMap<String, Member>,
    },
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Member {
    at: u64,
    size: u64,
}

/// What a file given to `audit` is, as far as images go.
#[derive(Debug)]
pub(crate) enum Found {
    Image(Store),
    /// A tar compressed as a whole (`docker save | gzip`): its members cannot be reached
    /// without reading it through.
    Compressed(Compression),
    NotAnImage,
}

/// How a whole tar is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    Gzip,
    Zstd,
}

impl Compression {
    /// The command that decompresses FILE beside itself.
    pub fn undo(self) -> &'static str {
        match self {
            Compression::Gzip => "gunzip -k FILE",
            Compression::Zstd => "zstd -d FILE",
        }
    }
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        })
    }
}

impl Store {
    /// Whether `path` is a container image, and where its files are. A tar is indexed by its
    /// headers (an item of `budget` each); it is an image if it holds `manifest.json` (docker)
    /// or `oci-layout` (OCI).
    pub(crate) fn find(path: &Path, budget: &Budget) -> io::Result<Found> {
        if path.is_dir() {
            let layout = path.join("oci-layout").is_file() && path.join("index.json").is_file();
            return Ok(match layout {
                true => Found::Image(Store::Dir(path.to_owned())),
                false => Found::NotAnImage,
            });
        }
        let (mut file, len) = open_regular(path)?;
        let mut head = Vec::new();
        (&mut file).take(512).read_to_end(&mut head)?;
        if let Some(how) = compressed_tar(&head) {
            return Ok(Found::Compressed(how));
        }
        if !is_tar(&head) {
            return Ok(Found::NotAnImage);
        }
        file.seek(SeekFrom::Start(0))?;
        let mut links = Vec::new();
        let mut members = BTreeMap::new();
        let mut reader = Reader::new(file);
        while let Some(entry) = reader.next()? {
            if !budget.items("the image's tar headers", 1) {
                break;
            }
            let Some(name) = normal(&entry.path) else {
                continue;
            };
            match entry.kind {
                Kind::File => {
                    let end = entry.data_at.saturating_add(entry.size);
                    if end > len {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!("{name}: the tar ends inside it"),
                        ));
                    }
                    members.insert(
                        name,
                        Member {
                            at: entry.data_at,
                            size: entry.size,
                        },
                    );
                }
                Kind::SymLink => {
                    let parent = name.rsplit_once('/').map_or("", |(p, _)| p);
                    links.push((name.clone(), join(parent, &entry.link)));
                }
                Kind::HardLink => links.push((name.clone(), normal(&entry.link))),
                Kind::Directory | Kind::Other => {}
            }
        }
        // Links resolve to members (a docker archive's `ID/layer.tar -> ../SHA.tar`); a chain
        // of links is followed as far as there are links.
        for _ in 0..links.len().min(8) {
            for (name, target) in &links {
                if let Some(m) = target.as_ref().and_then(|t| members.get(t)).copied() {
                    members.entry(name.clone()).or_insert(m);
                }
            }
        }
        let image = members.contains_key("manifest.json")
            || (members.contains_key("oci-layout") && members.contains_key("index.json"));
        Ok(match image {
            true => Found::Image(Store::Tar {
                file: path.to_owned(),
                members,
            }),
            false => Found::NotAnImage,
        })
    }

    /// Whether the store holds `name`.
    pub(crate) fn has(&self, name: &str) -> bool {
        match self {
            Store::Dir(dir) => dir.join(name).is_file(),
            Store::Tar { members, .. } => members.contains_key(name),
        }
    }

    /// The size of `name`, if the store holds it.
    pub(crate) fn len(&self, name: &str) -> Option<u64> {
        match self {
            Store::Dir(dir) => std::fs::metadata(dir.join(name)).ok().map(|m| m.len()),
            Store::Tar { members, .. } => members.get(name).map(|m| m.size),
        }
    }

    /// `name`'s bytes as a stream.
    pub(crate) fn open(&self, name: &str) -> io::Result<Box<dyn Read + Send>> {
        match self {
            Store::Dir(dir) => {
                let (file, _) = open_regular(&dir.join(name))?;
                Ok(Box::new(io::BufReader::new(file)))
            }
            Store::Tar { file, members } => {
                let m = members.get(name).ok_or_else(|| missing(name))?;
                let (mut f, _) = open_regular(file)?;
                f.seek(SeekFrom::Start(m.at))?;
                Ok(Box::new(io::BufReader::new(f.take(m.size))))
            }
        }
    }

    /// `name` whole, at most [`MAX_JSON`] bytes.
    pub(crate) fn small(&self, name: &str) -> io::Result<Vec<u8>> {
        let len = self.len(name).ok_or_else(|| missing(name))?;
        if len > MAX_JSON {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{name}: {len} bytes, larger than any manifest ({MAX_JSON} at most)"),
            ));
        }
        let mut out = Vec::new();
        self.open(name)?.take(MAX_JSON).read_to_end(&mut out)?;
        Ok(out)
    }

    /// The bytes of the whole store: what its budget is proportional to.
    pub(crate) fn size(&self) -> u64 {
        match self {
            Store::Dir(dir) => dir_size(&dir.join("blobs")),
            Store::Tar { file, .. } => std::fs::metadata(file).map_or(0, |m| m.len()),
        }
    }
}

fn missing(name: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{name} is not in the image"),
    )
}

fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

/// A tar's first header: `ustar` at byte 257 (POSIX and GNU both write it).
fn is_tar(head: &[u8]) -> bool {
    head.get(257..262) == Some(b"ustar")
}

/// A gzip or zstd stream whose first block is a tar header.
fn compressed_tar(head: &[u8]) -> Option<Compression> {
    let mut block = Vec::new();
    let how = match head {
        [0x1f, 0x8b, ..] => {
            let _ = flate2::read::GzDecoder::new(head)
                .take(512)
                .read_to_end(&mut block);
            Compression::Gzip
        }
        [0x28, 0xb5, 0x2f, 0xfd, ..] => {
            let _ = zstd::stream::read::Decoder::new(head)
                .ok()?
                .take(512)
                .read_to_end(&mut block);
            Compression::Zstd
        }
        _ => return None,
    };
    is_tar(&block).then_some(how)
}

/// A path inside an image as fatkit names it: `/`-separated, relative, no `.` or empty
/// parts; `None` for one that climbs out (`..`) or names nothing.
pub(crate) fn normal(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            p => parts.push(p),
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// `target` read from directory `dir` (relative to the store's root): `..` climbs, and may
/// not climb out.
pub(crate) fn join(dir: &str, target: &str) -> Option<String> {
    let mut parts: Vec<&str> = match target.starts_with('/') {
        true => Vec::new(),
        false => dir.split('/').filter(|p| !p.is_empty()).collect(),
    };
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_never_leave_the_store() {
        assert_eq!(normal("./usr//lib/"), Some("usr/lib".into()));
        assert_eq!(normal("/etc/x"), Some("etc/x".into()));
        assert_eq!(normal("a/../../etc"), None);
        assert_eq!(normal("."), None);
        assert_eq!(join("abc", "../def.tar"), Some("def.tar".into()));
        assert_eq!(join("abc", "../../def.tar"), None);
        assert_eq!(join("a/b", "/x"), Some("x".into()));
    }
}
