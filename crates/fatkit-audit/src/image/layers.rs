//! An image's layers applied as a container's filesystem is: each layer over those below it,
//! a whiteout (`.wh.NAME`) deleting NAME below, an opaque directory (`.wh..wh..opq`) hiding
//! everything below it, and any entry hiding what lower layers hold at its path (a file or
//! link also what they hold under it). Read top layer first, so that each file is known to be
//! the final one when it is read, and read once, in one pass over each layer's stream
//! (docs/CONTAINER_IMAGES.md).

use std::collections::HashSet;
use std::io::{self, Read};

use fatkit_fatbin::Budget;

use super::manifest::{Image, Layer};
use super::store::{normal, Store};
use super::tar::{Kind, Reader, Stream};

/// What lower layers cannot show.
#[derive(Default)]
struct Above {
    /// Paths an upper layer has an entry at (a directory, a file, a link).
    taken: HashSet<String>,
    /// Paths deleted with everything under them: a whiteout, or a file or link above.
    gone: HashSet<String>,
    /// Directories whose lower contents are hidden (opaque).
    emptied: HashSet<String>,
}

impl Above {
    fn hides(&self, path: &str) -> bool {
        if self.taken.contains(path) || self.gone.contains(path) {
            return true;
        }
        let mut p = path;
        while let Some((parent, _)) = p.rsplit_once('/') {
            if self.gone.contains(parent) || self.emptied.contains(parent) {
                return true;
            }
            p = parent;
        }
        false
    }

    fn absorb(&mut self, layer: Above) {
        self.taken.extend(layer.taken);
        self.gone.extend(layer.gone);
        self.emptied.extend(layer.emptied);
    }
}

/// A regular file of the final filesystem, before its bytes are read.
pub(crate) struct Seen<'a> {
    /// Normalised (`usr/lib/x.so`).
    pub path: &'a str,
    pub size: u64,
}

/// Applies `image`'s layers; `want` is asked of each regular file of the final filesystem
/// whether to read it (it is given the path and size), and `file` given what was read, with
/// the index of its layer (0 the bottom). A path a layer writes twice is given twice (the
/// later wins): as `None` where the later entry is not one read (a link, a directory). Returns what could not be read, each naming its layer; after a layer that
/// cannot be read, the layers below it are not read (what they show is unknown).
pub(crate) fn apply(
    store: &Store,
    image: &Image,
    budget: &Budget,
    mut want: impl FnMut(&Seen<'_>) -> bool,
    mut file: impl FnMut(String, usize, Option<Vec<u8>>),
) -> Vec<String> {
    let mut above = Above::default();
    let count = image.layers.len();
    for (index, layer) in image.layers.iter().enumerate().rev() {
        let words = layer_words(index, count, layer);
        let mut refused = Vec::new();
        let read = one_layer(
            store,
            layer,
            (&above, budget),
            &mut refused,
            &mut want,
            &mut |p, b| file(p, index, b),
        )
        .and_then(|(this, links)| {
            linked_files(store, layer, budget, links, &mut want, &mut |p, b| {
                file(p, index, b)
            })?;
            Ok(this)
        });
        let this = match read {
            Ok(this) => this,
            Err(e) => {
                if budget.spent().is_some() {
                    return Vec::new();
                }
                let below = match index {
                    0 => String::new(),
                    n => format!("; the {n} below it were not read"),
                };
                return vec![format!("{words}: cannot read: {e}{below}")];
            }
        };
        // An entry no runtime would unpack: the image does not start as read here.
        if let Some(first) = refused.first() {
            let more = match refused.len() {
                1 => String::new(),
                n => format!(" (and {} more)", n - 1),
            };
            return vec![format!(
                "{words}: {first}{more}: no container runtime unpacks such a layer"
            )];
        }
        above.absorb(this);
    }
    Vec::new()
}

/// The longest path a container's filesystem holds: Linux's `PATH_MAX`.
const MAX_PATH: usize = 4096;

/// `layer 2 of 3 (sha256:0123456789ab)`.
pub(crate) fn layer_words(index: usize, count: usize, layer: &Layer) -> String {
    format!("layer {} of {count} ({})", index + 1, layer.id)
}

/// The hard links of a layer that the final filesystem shows and whose target this layer did
/// not give as a file (it is hidden above, a whiteout deleted its first name): target -> the
/// first name shown.
type Links = std::collections::BTreeMap<String, String>;

fn one_layer(
    store: &Store,
    layer: &Layer,
    (above, budget): (&Above, &Budget),
    refused: &mut Vec<String>,
    want: &mut impl FnMut(&Seen<'_>) -> bool,
    file: &mut impl FnMut(String, Option<Vec<u8>>),
) -> io::Result<(Above, Links)> {
    let mut links = Links::new();
    let mut reader = layer_reader(store, layer, budget)?;
    let mut this = Above::default();
    // The paths this layer gave `file`.
    let mut given: HashSet<String> = HashSet::new();
    while let Some(entry) = reader.next()? {
        if !budget.items("the image's layers", 1) {
            return Err(spent());
        }
        // A path that climbs out of the root, or longer than any path, is no path of the
        // container's filesystem.
        let path = match normal(&entry.path) {
            Some(p) if p.len() <= MAX_PATH => p,
            Some(_) => {
                refused.push(format!("an entry's path is longer than {MAX_PATH} bytes"));
                continue;
            }
            None if entry.path.trim_matches(['/', '.']).is_empty() => continue,
            None => {
                refused.push(format!(
                    "entry {:?} climbs out of the root",
                    fatkit_fatbin::printable(&entry.path)
                ));
                continue;
            }
        };
        // Looking a path up hashes each of its parents: work as long as the path times its
        // depth.
        let depth = path.bytes().filter(|&b| b == b'/').count() as u64 + 1;
        if !budget.work("the image's paths", depth.saturating_mul(path.len() as u64)) {
            return Err(spent());
        }
        let (parent, leaf) = match path.rsplit_once('/') {
            Some((p, l)) => (Some(p), l),
            None => (None, path.as_str()),
        };
        if let Some(deleted) = leaf.strip_prefix(".wh.") {
            if deleted == ".wh..opq" {
                if let Some(p) = parent {
                    this.emptied.insert(p.to_owned());
                }
            } else if !deleted.starts_with(".wh.") {
                let gone = match parent {
                    Some(p) => format!("{p}/{deleted}"),
                    None => deleted.to_owned(),
                };
                this.gone.insert(gone);
            }
            continue;
        }
        if above.hides(&path) {
            continue;
        }
        if entry.kind != Kind::Directory {
            this.gone.insert(path.clone());
        }
        if entry.kind == Kind::File
            && want(&Seen {
                path: &path,
                size: entry.size,
            })
        {
            let mut bytes = Vec::new();
            reader.read_data(entry.size, &mut bytes)?;
            this.taken.insert(path.clone());
            given.insert(path.clone());
            file(path, Some(bytes));
            continue;
        }
        // A hard link is the file it names: read under this name when the target itself is
        // not shown (its first name deleted above), in a second pass over the layer.
        if entry.kind == Kind::HardLink {
            if let Some(target) = normal(&entry.link).filter(|t| !given.contains(t)) {
                links.entry(target).or_insert_with(|| path.clone());
            }
        }
        // Written again by this layer as something not read: what was read is not there.
        if given.remove(&path) {
            file(path.clone(), None);
        }
        this.taken.insert(path);
    }
    Ok((this, links))
}

/// Reads, in one more pass over `layer` (charged to the budget as the first), the files the
/// hard links of `links` name, each given under the link's name.
fn linked_files(
    store: &Store,
    layer: &Layer,
    budget: &Budget,
    mut links: Links,
    want: &mut impl FnMut(&Seen<'_>) -> bool,
    file: &mut impl FnMut(String, Option<Vec<u8>>),
) -> io::Result<()> {
    if links.is_empty() {
        return Ok(());
    }
    let mut reader = layer_reader(store, layer, budget)?;
    while let Some(entry) = reader.next()? {
        if !budget.items("the image's layers", 1) {
            return Err(spent());
        }
        if entry.kind != Kind::File {
            continue;
        }
        let Some(name) = normal(&entry.path).and_then(|p| links.remove(&p)) else {
            continue;
        };
        if want(&Seen {
            path: &name,
            size: entry.size,
        }) {
            let mut bytes = Vec::new();
            reader.read_data(entry.size, &mut bytes)?;
            file(name, Some(bytes));
        }
        if links.is_empty() {
            break;
        }
    }
    Ok(())
}

/// The tar entries of a layer, decompressed, every byte charged to the input's budget.
type LayerReader<'a> = Reader<Stream<Counted<'a, Box<dyn Read + Send>>>>;

/// A reader of `layer`'s tar entries, every decompressed byte charged to `budget`.
fn layer_reader<'a>(
    store: &Store,
    layer: &Layer,
    budget: &'a Budget,
) -> io::Result<LayerReader<'a>> {
    Ok(Reader::new(Stream(Counted {
        inner: decompressed(store.open(&layer.blob)?)?,
        budget,
    })))
}

/// A layer's stream decompressed by what its first bytes say it is (gzip, zstd, or a tar as
/// it is): the media type names the same, and the bytes are what is read.
fn decompressed(raw: Box<dyn Read + Send>) -> io::Result<Box<dyn Read + Send>> {
    let mut raw = io::BufReader::new(raw);
    let head = io::BufRead::fill_buf(&mut raw)?;
    Ok(match head {
        [0x1f, 0x8b, ..] => Box::new(flate2::bufread::MultiGzDecoder::new(raw)),
        [0x28, 0xb5, 0x2f, 0xfd, ..] => Box::new(zstd::stream::read::Decoder::with_buffer(raw)?),
        _ => Box::new(raw),
    })
}

/// A decompressed stream whose every byte is charged to the input's budget.
struct Counted<'a, R> {
    inner: R,
    budget: &'a Budget,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        match self.budget.inflate("the image's layers", n as u64) {
            true => Ok(n),
            false => Err(spent()),
        }
    }
}

fn spent() -> io::Error {
    io::Error::other("the input's budget is spent")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_above_hides_what_is_below() {
        let mut above = Above::default();
        above.taken.insert("usr/lib".into());
        above.gone.insert("opt/a.so".into());
        above.gone.insert("lib64".into());
        above.emptied.insert("srv/d".into());
        assert!(above.hides("opt/a.so"));
        assert!(above.hides("lib64/x.so"));
        assert!(above.hides("srv/d/x.so"));
        assert!(above.hides("srv/d/e/x.so"));
        assert!(above.hides("usr/lib"));
        assert!(!above.hides("usr/lib/x.so"));
        assert!(!above.hides("srv/d"));
        assert!(!above.hides("opt/a.so.1"));
    }
}
