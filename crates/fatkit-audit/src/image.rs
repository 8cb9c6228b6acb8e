//! Container images as `audit` reads them: a `docker save` archive, an OCI image layout (a
//! directory) or an OCI archive (that layout in a tar). Each image in it is one input: its
//! layers applied in order (`image::layers`), every regular file of the final filesystem read as a
//! directory's files are, each library named by its path in the container, the Python
//! distribution (`*.dist-info/RECORD`) or Debian package (`var/lib/dpkg`) that installed it,
//! and the layer it came from. One budget for the whole file (docs/CONTAINER_IMAGES.md).

pub(crate) mod layers;
pub(crate) mod manifest;
pub(crate) mod store;
pub(crate) mod tar;

use std::collections::{BTreeMap, HashMap};
use std::sync::{mpsc, Mutex};

use fatkit_fatbin::inspect::FileReport;
use fatkit_fatbin::{Budget, Format, Limits};

use crate::input::{distribution, inspect_bytes, record_path};
use crate::record::Input;
use fatkit_fatbin::declarations::Declarations;

pub use store::Compression;
pub(crate) use store::{Found, Store};

/// The largest package record read (a RECORD, a dpkg `.list`, dpkg's `status`).
const MAX_RECORD: u64 = 256 << 20;

/// What a file of the final filesystem is to the audit.
enum Role {
    /// Its bytes are judged.
    Library,
    /// `NAME-VERSION.dist-info/RECORD`: the files of a Python distribution.
    Record,
    /// `var/lib/dpkg/info/NAME.list`: the files of a Debian package.
    DpkgList,
    /// `var/lib/dpkg/status`: the installed Debian packages' versions.
    DpkgStatus,
    /// A distribution's other metadata: no device code.
    Skip,
}

fn role(path: &str) -> Role {
    let (dir, leaf) = path.rsplit_once('/').unwrap_or(("", path));
    if dir.ends_with(".dist-info") {
        return match leaf {
            "RECORD" => Role::Record,
            _ => Role::Skip,
        };
    }
    match (dir, leaf) {
        ("var/lib/dpkg", "status") => Role::DpkgStatus,
        ("var/lib/dpkg/info", l) if l.ends_with(".list") => Role::DpkgList,
        ("var/lib/dpkg" | "var/lib/dpkg/info", _) => Role::Skip,
        _ => Role::Library,
    }
}

/// Who installed which file, from the records in the final filesystem.
#[derive(Default)]
struct Owners {
    /// Path -> `name version` of its Python distribution.
    python: HashMap<String, String>,
    /// Path -> Debian package name.
    deb: HashMap<String, String>,
    /// Debian package name -> version.
    deb_versions: HashMap<String, String>,
}

impl Owners {
    fn record(&mut self, path: &str, bytes: &[u8]) {
        let Some((info, _)) = path.rsplit_once('/') else {
            return;
        };
        let (base, dist) = info.rsplit_once('/').unwrap_or(("", info));
        let package = distribution(dist);
        for line in bytes.split(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(line);
            if let Some(full) = store::join(base, record_path(&line)) {
                self.python.entry(full).or_insert_with(|| package.clone());
            }
        }
    }

    fn dpkg_list(&mut self, path: &str, bytes: &[u8]) {
        let leaf = path.rsplit('/').next().unwrap_or_default();
        let name = leaf.trim_end_matches(".list");
        // `libfoo:amd64` (multi-arch) is the package `libfoo`.
        let name = name.split(':').next().unwrap_or(name);
        for line in bytes.split(|&b| b == b'\n') {
            if let Some(file) = store::normal(&String::from_utf8_lossy(line)) {
                self.deb.entry(file).or_insert_with(|| name.to_owned());
            }
        }
    }

    fn dpkg_status(&mut self, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        for stanza in text.split("\n\n") {
            let field = |key: &str| {
                stanza
                    .lines()
                    .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
                    .map(str::trim)
            };
            if let (Some(name), Some(version)) = (field("Package"), field("Version")) {
                self.deb_versions
                    .insert(name.to_owned(), version.to_owned());
            }
        }
    }

    /// A package record of the final filesystem, read within `budget`.
    fn read(&mut self, path: &str, bytes: &[u8], budget: &Budget) {
        if !budget.work("the package records", bytes.len() as u64) {
            return;
        }
        match role(path) {
            Role::Record => self.record(path, bytes),
            Role::DpkgList => self.dpkg_list(path, bytes),
            Role::DpkgStatus => self.dpkg_status(bytes),
            Role::Library | Role::Skip => {}
        }
    }

    /// The package that installed `path`: its Python distribution, else its Debian package.
    fn of(&self, path: &str) -> Option<String> {
        if let Some(p) = self.python.get(path) {
            return Some(p.clone());
        }
        let name = self.deb.get(path)?;
        Some(match self.deb_versions.get(name) {
            Some(v) => format!("{name} {v} (deb)"),
            None => format!("{name} (deb)"),
        })
    }
}

/// What one library file read gives: its report and declarations, and the order it was sent
/// in (a path written twice by a layer: the later wins).
struct Read {
    seq: usize,
    layer: usize,
    report: FileReport,
    declarations: Declarations,
}

/// The entries of a tar held in memory, read as an image's tar and its layers are read (each
/// regular file's data up to `max` bytes): how many, or why the tar is not one. The fuzz
/// harnesses' way into the tar reader (`crates/fatkit-fuzz`).
pub fn tar_entries(data: &[u8], max: u64) -> std::io::Result<usize> {
    let mut reader = tar::Reader::new(tar::Stream(data));
    let mut count = 0;
    let mut buf = Vec::new();
    while let Some(entry) = reader.next()? {
        count += 1;
        if entry.kind == tar::Kind::File && entry.size <= max {
            reader.read_data(entry.size, &mut buf)?;
        }
    }
    Ok(count)
}

/// Every image of `store` (the file shown as `label`), each an input, within `budget`.
pub(crate) fn read(label: &str, store: &Store, limits: &Limits, budget: &Budget) -> Vec<Input> {
    let images = match manifest::images(store, budget) {
        Ok(images) => images,
        Err(why) => {
            return vec![unreadable(
                label.to_owned(),
                format!("{label}: a container image that cannot be read: {why}"),
            )]
        }
    };
    images
        .iter()
        .map(|image| {
            one_image(
                format!("{label} ({})", image.name),
                store,
                image,
                limits,
                budget,
            )
        })
        .collect()
}

fn unreadable(label: String, why: String) -> Input {
    Input {
        report: report(label.clone(), vec![why]),
        label,
        declarations: Declarations::default(),
        package: None,
        owners: BTreeMap::new(),
        layers: BTreeMap::new(),
        unbuilt: Vec::new(),
        pinned: BTreeMap::new(),
    }
}

fn one_image(
    label: String,
    store: &Store,
    image: &manifest::Image,
    limits: &Limits,
    budget: &Budget,
) -> Input {
    let Libraries {
        found,
        owners,
        errors,
    } = libraries(&label, store, image, limits, budget);
    let mut report = report(label.clone(), errors);
    let mut declarations = Declarations::default();
    let mut package_of = BTreeMap::new();
    let mut layer_of = BTreeMap::new();
    let count = image.layers.len();
    for (path, read) in found {
        let name = format!("/{path}");
        if let Some(p) = owners.of(&path) {
            package_of.insert(name.clone(), p);
        }
        if let Some(layer) = image.layers.get(read.layer) {
            layer_of.insert(name, layers::layer_words(read.layer, count, layer));
        }
        declarations.extend(read.declarations);
        report.members.push(read.report);
    }
    Input {
        label,
        report,
        declarations,
        package: None,
        owners: package_of,
        layers: layer_of,
        unbuilt: Vec::new(),
        pinned: BTreeMap::new(),
    }
}

/// An image's report before its libraries: its name, format and errors.
fn report(label: String, errors: Vec<String>) -> FileReport {
    FileReport {
        errors,
        ..FileReport::empty(&label, Format::Image)
    }
}

/// The libraries of an image's final filesystem, by path, who installed what, and what could
/// not be read.
struct Libraries {
    found: BTreeMap<String, Read>,
    owners: Owners,
    errors: Vec<String>,
}

/// Reads the layers on this thread, one stream at a time, and judges the libraries on the
/// others as they come (at most one waiting per worker: memory is a few files).
fn libraries(
    label: &str,
    store: &Store,
    image: &manifest::Image,
    limits: &Limits,
    budget: &Budget,
) -> Libraries {
    let mut owners = Owners::default();
    // The last time each path was given: a result of an earlier one is not the container's.
    let mut latest: HashMap<String, usize> = HashMap::new();
    let mut errors = Vec::new();
    let threads = fatkit_fatbin::par::cores();
    let results = Mutex::new(Vec::new());
    let (send, receive) = mpsc::sync_channel::<(usize, usize, String, Vec<u8>)>(threads);
    let receive = Mutex::new(receive);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let job = receive.lock().map(|r| r.recv());
                let Ok(Ok((seq, layer, path, bytes))) = job else {
                    break;
                };
                let name = format!("{label}:/{path}");
                let leaf = format!("/{path}");
                let (report, declarations, _) = inspect_bytes(&name, &leaf, bytes, limits, budget);
                if report.has_device_code() || !report.errors.is_empty() {
                    if let Ok(mut r) = results.lock() {
                        let read = Read {
                            seq,
                            layer,
                            report,
                            declarations,
                        };
                        r.push((path, read));
                    }
                }
            });
        }
        let mut seq = 0;
        let mut too_large = Vec::new();
        errors = layers::apply(
            store,
            image,
            budget,
            |seen| wanted(seen, &mut too_large),
            |path, layer, bytes| {
                seq += 1;
                latest.insert(path.clone(), seq);
                let Some(bytes) = bytes else { return };
                match role(&path) {
                    Role::Library => {
                        let _ = send.send((seq, layer, path, bytes));
                    }
                    _ => owners.read(&path, &bytes, budget),
                }
            },
        );
        errors.extend(too_large);
        drop(send);
    });
    // What a layer wrote last at a path is what the container holds.
    let mut found = BTreeMap::new();
    for (path, read) in results.into_inner().unwrap_or_default() {
        if latest.get(&path) == Some(&read.seq) {
            found.insert(path, read);
        }
    }
    Libraries {
        found,
        owners,
        errors,
    }
}

/// Whether a file of the final filesystem is read: a library or a package record, within
/// what is read of each (else why not, into `too_large`).
fn wanted(seen: &layers::Seen<'_>, too_large: &mut Vec<String>) -> bool {
    match role(seen.path) {
        Role::Skip => false,
        Role::Record | Role::DpkgList | Role::DpkgStatus if seen.size > MAX_RECORD => {
            too_large.push(format!(
                "/{}: {} bytes, larger than a package record is read ({MAX_RECORD} at most); the packages of its files are unknown",
                seen.path, seen.size
            ));
            false
        }
        Role::Library if seen.size > crate::read::MAX_FILE => {
            too_large.push(format!(
                "/{}: {} bytes, larger than audit reads ({} at most); its answer is unknown",
                seen.path,
                seen.size,
                crate::read::MAX_FILE
            ));
            false
        }
        _ => true,
    }
}
