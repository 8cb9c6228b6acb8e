//! Which files are sources and what their modules are called: one module per `.cu` file,
//! named after its stem as a Rust identifier. Shared by the build and the build-script check.

use std::path::{Path, PathBuf};

/// A Rust identifier from any text: non-alphanumerics become `_`, a leading digit gets `_`.
pub(crate) fn rust_identifier(text: &str, upper: bool) -> String {
    let mut name: String = text
        .chars()
        .map(|c| match (c.is_ascii_alphanumeric(), upper) {
            (true, true) => c.to_ascii_uppercase(),
            (true, false) => c.to_ascii_lowercase(),
            (false, _) => '_',
        })
        .collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) || name.is_empty() {
        name.insert(0, '_');
    }
    name
}

/// Whether `name` can name a module: a Rust identifier of ASCII letters, digits and `_`, not
/// starting with a digit, at most 64 bytes. A module's name is a file name in the output
/// directory and a string in generated Rust, so nothing else (`/`, `..`, quotes) may pass.
pub fn is_module_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Module names are Rust identifiers: `softmax-v2.cu` -> `softmax_v2`.
pub fn module_name(source: &Path) -> String {
    let stem = source
        .file_stem()
        .map_or_else(|| "kernels".into(), |s| s.to_string_lossy().into_owned());
    rust_identifier(&stem, false)
}

/// The `.cu` files of a directory (not its subdirectories), sorted: one module each.
pub fn sources_in(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut sources: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "cu"))
        .collect();
    sources.sort();
    Ok(sources)
}
