//! A package's `.crate` as `cargo package` makes it, for weighing: the files `cargo package
//! --list` names, and what cargo writes that is on no disk: the original manifest (as
//! `Cargo.toml.orig`, beside a normalised `Cargo.toml` of about its size) and the lock file
//! of the package alone, which is its workspace's lock cut to what the package depends on.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use super::{is_module, weigh_files, Shipped};

/// What a package's `.crate` holds: files on disk, and bytes cargo makes (its lock).
pub(super) struct Listed {
    pub(super) files: Vec<PathBuf>,
    pub(super) made: Vec<Vec<u8>>,
}

/// The package at `dir` as `cargo package --list` names it; `None` where cargo cannot list it.
pub(super) fn list(dir: &Path) -> Option<Listed> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = fatkit_toolchain::command::output_of(
        std::process::Command::new(cargo)
            .args(["package", "--list", "--allow-dirty", "--offline", "--quiet"])
            .current_dir(dir),
        fatkit_toolchain::command::How::QUERY,
        "cargo package --list",
    )
    .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut listed = Listed {
        files: Vec::new(),
        made: Vec::new(),
    };
    for name in text.lines().map(str::trim) {
        let here = dir.join(name);
        match name {
            _ if here.is_file() => listed.files.push(here),
            "Cargo.toml.orig" => listed.files.push(dir.join("Cargo.toml")),
            // Where the workspace has no lock, cargo resolves one: not counted.
            "Cargo.lock" => listed.made.extend(package_lock(dir)),
            // `.cargo_vcs_info.json`: a hundred bytes.
            _ => {}
        }
    }
    Some(listed)
}

/// The largest file of a package read to weigh its `.crate`.
pub(super) const MAX_PACKAGE_FILE: u64 = 4 << 30;

/// `files` and the bytes cargo `made` as a `.crate` holds them ([`weigh_files`](super::weigh_files)); or the file that
/// cannot be read.
pub(super) fn crate_bytes(
    files: &[PathBuf],
    made: &[Vec<u8>],
) -> Result<u64, (PathBuf, std::io::Error)> {
    let data = files
        .iter()
        .map(|p| fatkit_read::read_limited(p, MAX_PACKAGE_FILE).map_err(|e| (p.clone(), e)))
        .collect::<Result<Vec<_>, _>>()?;
    let files = data.iter().chain(made).map(|f| vec![f.as_slice()]);
    Ok(weigh_files(Shipped::Crate, files))
}

/// For modules in `dir` that a package ships (a vendor directory): everything else its `.crate`
/// holds, as `cargo package --list` names it, weighed as a `.crate` holds it, and the files
/// set aside unweighed ([`set_aside`]); `None` where `dir` is in no package cargo can list.
pub(super) fn package_base(dir: &Path) -> Option<(u64, Vec<PathBuf>)> {
    let dir = dir.canonicalize().ok()?;
    let package = dir.ancestors().find(|d| {
        fatkit_read::read_limited(&d.join("Cargo.toml"), 1 << 20)
            .is_ok_and(|t| String::from_utf8_lossy(&t).contains("[package]"))
    })?;
    let listed = list(package)?;
    let (aside, files): (Vec<PathBuf>, Vec<PathBuf>) = listed
        .files
        .into_iter()
        .filter(|p| {
            !(is_module(p)
                && p.parent().and_then(|d| d.canonicalize().ok()).as_deref() == Some(&dir))
        })
        .partition(|p| set_aside(package, p));
    Some((crate_bytes(&files, &listed.made).ok()?, aside))
}

/// Whether `cargo package --list` names `file` of the package at `package` only because no
/// ignore file keeps it out: a build output (under `target/`) or fatkit's own release archive
/// (`dist/*.tar.gz`, what `package` writes). Such a file is no part of what the package is:
/// it is named to the user, not weighed.
fn set_aside(package: &Path, file: &Path) -> bool {
    let Ok(rel) = file.strip_prefix(package) else {
        return false;
    };
    let mut parts = rel.components().map(|c| c.as_os_str());
    match parts.next().and_then(|c| c.to_str()) {
        Some("target") => true,
        Some("dist") => rel
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".tar.gz") || n.ends_with(".tar.gz.tmp")),
        _ => false,
    }
}

/// The lock cargo writes into the package's `.crate`: the workspace's, cut to the package
/// and what it depends on (normal, build and dev: cargo resolves the package as a workspace
/// of its own); the whole lock where it cannot be cut (an upper bound).
fn package_lock(dir: &Path) -> Option<Vec<u8>> {
    let lock = workspace_lock(dir)?;
    let text = fatkit_read::read_limited(&lock, 64 << 20).ok()?;
    let text = String::from_utf8_lossy(&text);
    let manifest = fatkit_read::read_limited(&dir.join("Cargo.toml"), 1 << 20).ok()?;
    let manifest: toml::Table = toml::from_str(&String::from_utf8_lossy(&manifest)).ok()?;
    let name = manifest.get("package")?.get("name")?.as_str()?;
    Some(
        cut_lock(&text, name)
            .unwrap_or_else(|| text.clone().into_owned())
            .into_bytes(),
    )
}

/// The lock file of the workspace the package at `dir` is in: the first one met going up
/// from it, no higher than the first manifest declaring `[workspace]` (where cargo stops).
fn workspace_lock(dir: &Path) -> Option<PathBuf> {
    for d in dir.ancestors() {
        let lock = d.join("Cargo.lock");
        if lock.is_file() {
            return Some(lock);
        }
        let manifest = fatkit_read::read_limited(&d.join("Cargo.toml"), 1 << 20);
        if manifest.is_ok_and(|t| String::from_utf8_lossy(&t).contains("[workspace]")) {
            return None;
        }
    }
    None
}

/// `lock` (a `Cargo.lock`) with only the package `root` (the one from a path: no `source`)
/// and the packages it reaches through `dependencies`, each block as it was written; `None`
/// where a block does not read as the lock format says.
pub(super) fn cut_lock(lock: &str, root: &str) -> Option<String> {
    const BLOCK: &str = "[[package]]\n";
    let mut parts = lock.split(BLOCK);
    let header = parts.next()?;
    let blocks: Vec<&str> = parts.collect();
    struct Package {
        name: String,
        version: String,
        path: bool,
        deps: Vec<String>,
    }
    let mut packages = Vec::with_capacity(blocks.len());
    for block in &blocks {
        let table: toml::Table = toml::from_str(block).ok()?;
        let text = |key: &str| table.get(key).and_then(|v| v.as_str()).map(str::to_owned);
        let deps = match table.get("dependencies") {
            Some(d) => d
                .as_array()?
                .iter()
                .map(|d| d.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()?,
            None => Vec::new(),
        };
        packages.push(Package {
            name: text("name")?,
            version: text("version")?,
            path: !table.contains_key("source"),
            deps,
        });
    }
    let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, p) in packages.iter().enumerate() {
        by_name.entry(p.name.as_str()).or_default().push(i);
    }
    // A dependency is "name", "name version" or "name version (source)".
    let find = |dep: &str| -> Option<usize> {
        let mut words = dep.split(' ');
        let candidates = by_name.get(words.next()?)?;
        match words.next() {
            None => candidates.first().copied(),
            Some(v) => candidates
                .iter()
                .copied()
                .find(|&i| packages.get(i).is_some_and(|p| p.version == v)),
        }
    };
    let start = packages.iter().position(|p| p.name == root && p.path)?;
    let mut kept = BTreeSet::from([start]);
    let mut todo = vec![start];
    while let Some(i) = todo.pop() {
        for dep in packages.get(i).map_or(&[][..], |p| &p.deps) {
            let j = find(dep)?;
            if kept.insert(j) {
                todo.push(j);
            }
        }
    }
    let mut out = header.to_owned();
    for i in kept {
        out.push_str(BLOCK);
        out.push_str(blocks.get(i).copied().unwrap_or_default());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::{cut_lock, set_aside};

    #[test]
    fn build_outputs_and_release_archives_are_set_aside() {
        let package = std::path::Path::new("/ws/relapp");
        let aside = |f: &str| set_aside(package, &package.join(f));
        assert!(aside("target/fatkit/relapp/scale.rs"));
        assert!(aside("dist/relapp-0.1.0-x86_64-unknown-linux-gnu.tar.gz"));
        assert!(!aside("dist/README.md"));
        assert!(!aside("src/main.rs"));
        assert!(!aside("kernels/prebuilt/target.fatbin"));
        assert!(!set_aside(
            package,
            std::path::Path::new("/elsewhere/target/x")
        ));
    }

    const LOCK: &str = "# This file is automatically @generated by Cargo.\nversion = 4\n\n\
        [[package]]\nname = \"a\"\nversion = \"1.0.0\"\nsource = \"registry+x\"\n\n\
        [[package]]\nname = \"app\"\nversion = \"0.1.0\"\ndependencies = [\n \"lib\",\n]\n\n\
        [[package]]\nname = \"b\"\nversion = \"1.0.0\"\nsource = \"registry+x\"\n\n\
        [[package]]\nname = \"b\"\nversion = \"2.0.0\"\nsource = \"registry+x\"\ndependencies = [\n \"a\",\n]\n\n\
        [[package]]\nname = \"lib\"\nversion = \"0.1.0\"\ndependencies = [\n \"b 2.0.0\",\n]\n";

    /// The (name, version) of each package in `lock`, in order.
    fn packages(lock: &str) -> Vec<String> {
        let lines: Vec<&str> = lock.lines().collect();
        lines
            .windows(2)
            .filter_map(|w| {
                Some(format!(
                    "{} {}",
                    w[0].strip_prefix("name = ")?,
                    w[1].strip_prefix("version = ")?
                ))
            })
            .collect()
    }

    #[test]
    fn a_lock_is_cut_to_what_the_package_reaches() {
        let cut = cut_lock(LOCK, "lib").unwrap();
        assert_eq!(
            packages(&cut),
            ["\"a\" \"1.0.0\"", "\"b\" \"2.0.0\"", "\"lib\" \"0.1.0\""],
            "{cut}"
        );
        assert!(cut.starts_with("# This file is automatically @generated by Cargo.\nversion = 4\n\n[[package]]\nname = \"a\""), "{cut}");
        // Each kept block as written: the whole lock less b 1.0.0.
        let app = cut_lock(LOCK, "app").unwrap();
        let without = LOCK.replace(
            "[[package]]\nname = \"b\"\nversion = \"1.0.0\"\nsource = \"registry+x\"\n\n",
            "",
        );
        assert_eq!(app, without);
        // No such package, or a block that is not the lock format: not cut.
        assert_eq!(cut_lock(LOCK, "absent"), None);
        assert_eq!(
            cut_lock("version = 4\n\n[[package]]\nname = 3\n", "a"),
            None
        );
    }
}
