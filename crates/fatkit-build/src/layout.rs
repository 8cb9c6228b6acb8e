//! Structs shared by host and device: a C header turned into Rust types by bindgen (the host
//! view: clang, no `__CUDACC__`), and a generated check compiled by nvcc (the device view)
//! asserting every size, alignment and field offset bindgen computed. A struct nvcc lays out
//! differently (a member under `#ifdef __CUDACC__`, an `__align__` or vector type only the
//! device side sees) fails the build naming the struct and the field.
//!
//! bindgen loads libclang at run time: `LIBCLANG_PATH`, else PyPI's `libclang` wheel,
//! provisioned into the fatkit cache (no root).

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use fatkit_toolchain::{self as toolchain, Nvcc, Probe};

/// One fact bindgen computed on the host side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fact {
    pub struct_name: String,
    /// `None` for the struct's size and alignment.
    pub field: Option<String>,
    pub what: FactKind,
    pub value: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FactKind {
    Size,
    Align,
    Offset,
}

impl fmt::Display for Fact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.field, self.what) {
            (Some(field), _) => write!(
                f,
                "struct {}, field {field}: offset {} on the host",
                self.struct_name, self.value
            ),
            (None, FactKind::Size) => {
                write!(
                    f,
                    "struct {}: size {} on the host",
                    self.struct_name, self.value
                )
            }
            (None, _) => write!(
                f,
                "struct {}: alignment {} on the host",
                self.struct_name, self.value
            ),
        }
    }
}

/// A layout nvcc disagrees with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    pub fact: Fact,
    /// What nvcc's device side says, when the probe could tell.
    pub device_value: Option<u64>,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let device = self
            .device_value
            .map_or_else(|| "something else".to_owned(), |v| v.to_string());
        let (what, label) = match self.fact.what {
            FactKind::Size => ("size", "sizeof"),
            FactKind::Align => ("alignment", "alignof"),
            FactKind::Offset => ("offset", "offsetof"),
        };
        match &self.fact.field {
            Some(field) => write!(
                f,
                "struct {}, field {field}: {what} {} on the host (bindgen), {device} on the device (nvcc {label})",
                self.fact.struct_name, self.fact.value
            ),
            None => write!(
                f,
                "struct {}: {what} {} on the host (bindgen), {device} on the device (nvcc {label})",
                self.fact.struct_name, self.fact.value
            ),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("{}: bindgen failed: {message}", header.display())]
    Bindgen { header: PathBuf, message: String },
    #[error(transparent)]
    Toolchain(#[from] toolchain::ToolchainError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: host and device lay out the shared types differently:\n{}\nfix: make the header the same for both sides (no members, __align__ or vector types under #ifdef __CUDACC__ / __CUDA_ARCH__), or give the host the same alignment", header.display(), mismatches.iter().map(|m| format!("  {m}")).collect::<Vec<_>>().join("\n"))]
    Mismatch {
        header: PathBuf,
        mismatches: Vec<Mismatch>,
    },
    #[error("{}: nvcc could not compile the layout check:\n{output}", header.display())]
    Nvcc { header: PathBuf, output: String },
}

/// What [`check`] produces: the Rust types and the facts nvcc confirmed.
#[derive(Clone, Debug)]
pub struct SharedTypes {
    pub rust: String,
    pub facts: Vec<Fact>,
}

/// The facts of bindgen's layout assertions:
/// `["Offset of field: S::f"][::std::mem::offset_of!(S, f) - 8usize];`.
pub(crate) fn facts_of(rust: &str) -> Vec<Fact> {
    let mut out = Vec::new();
    for line in rust.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("[\"") else {
            continue;
        };
        let Some((label, expr)) = rest.split_once("\"]") else {
            continue;
        };
        let Some(value) = expr
            .rsplit(" - ")
            .next()
            .and_then(|v| v.split("usize").next())
            .and_then(|v| v.trim().parse::<u64>().ok())
        else {
            continue;
        };
        let fact = if let Some(name) = label.strip_prefix("Size of ") {
            (name.to_owned(), None, FactKind::Size)
        } else if let Some(name) = label.strip_prefix("Alignment of ") {
            (name.to_owned(), None, FactKind::Align)
        } else if let Some(path) = label.strip_prefix("Offset of field: ") {
            let Some((s, f)) = path.split_once("::") else {
                continue;
            };
            (s.to_owned(), Some(f.to_owned()), FactKind::Offset)
        } else {
            continue;
        };
        out.push(Fact {
            struct_name: fact.0,
            field: fact.1,
            what: fact.2,
            value,
        });
    }
    out
}

/// The C++ expression nvcc evaluates for a fact.
fn expression(fact: &Fact) -> String {
    match (&fact.field, fact.what) {
        (Some(field), _) => format!("offsetof({}, {field})", fact.struct_name),
        (None, FactKind::Size) => format!("sizeof({})", fact.struct_name),
        (None, _) => format!("alignof({})", fact.struct_name),
    }
}

/// The check nvcc compiles: one `static_assert` per fact, numbered so failures map back.
pub(crate) fn check_source(header: &Path, facts: &[Fact]) -> String {
    let mut cu = format!(
        "// @generated by fatkit: bindgen's host layout, asserted on nvcc's device side.\n#include <cstddef>\n#include \"{}\"\n",
        header.display()
    );
    for (i, fact) in facts.iter().enumerate() {
        cu.push_str(&format!(
            "static_assert({} == {}, \"fatkit-layout-{i}\");\n",
            expression(fact),
            fact.value
        ));
    }
    cu
}

/// A second compile that makes nvcc print the device values of `facts`:
/// `incomplete type "fatkit_value<3UL, 12UL>"`.
fn probe_source(header: &Path, facts: &[(usize, &Fact)]) -> String {
    let mut cu = format!(
        "#include <cstddef>\n#include \"{}\"\ntemplate <unsigned long I, unsigned long V> struct fatkit_value;\n",
        header.display()
    );
    for (i, fact) in facts {
        cu.push_str(&format!(
            "fatkit_value<{i}UL, {}> fatkit_probe_{i};\n",
            expression(fact)
        ));
    }
    cu
}

fn nvcc_compile(
    (tc, probe): (&Nvcc, &Probe),
    source: &str,
    dir: &Path,
) -> Result<(bool, String), LayoutError> {
    let file = dir.join("fatkit_layout_check.cu");
    fatkit_package::out::write_atomic(&file, source.as_bytes()).map_err(|e| LayoutError::Io {
        path: file.clone(),
        source: e,
    })?;
    let mut cmd = Command::new(tc.nvcc());
    // The device pass is what matters; -arch of the oldest SM the release builds.
    let arch = probe
        .targets
        .cubins()
        .find(|t| t.suffix == fatkit_arch::Suffix::None)
        .map_or_else(|| "sm_75".to_owned(), |t| t.to_string());
    cmd.arg("--fatbin")
        .arg(format!("-arch={arch}"))
        .arg("-std=c++17")
        .arg("-o")
        .arg(dir.join("fatkit_layout_check.fatbin"))
        .arg(&file);
    if let Some(ccbin) = probe.host.as_ref().and_then(|h| h.ccbin.as_ref()) {
        cmd.arg("-ccbin").arg(ccbin);
    }
    let out = fatkit_toolchain::command::output_of(
        &mut cmd,
        fatkit_toolchain::command::How::JOB,
        "check the toolkit",
    )
    .map_err(|e| LayoutError::Io {
        path: tc.nvcc(),
        source: std::io::Error::other(e),
    })?;
    Ok((
        out.status.success(),
        fatkit_toolchain::command::text_of(&out),
    ))
}

/// Runs bindgen on `header` (the types it declares, not those it includes), then has nvcc
/// check bindgen's layout on the device side. `nvcc` is the toolchain to ask, probed;
/// `scratch` a directory for the generated check.
pub fn check(
    header: &Path,
    clang_args: &[String],
    nvcc: (&Nvcc, &Probe),
    scratch: &Path,
    log: &mut dyn FnMut(&str),
) -> Result<SharedTypes, LayoutError> {
    let header = std::fs::canonicalize(header).map_err(|e| LayoutError::Io {
        path: header.to_owned(),
        source: e,
    })?;
    let libclang = toolchain::libclang_dir(false, log)?;
    // clang-sys reads it when bindgen first loads libclang (at run time: the `runtime`
    // feature), once per process; set it once, before that, and only when it differs.
    static SET_LIBCLANG_PATH: std::sync::Once = std::sync::Once::new();
    SET_LIBCLANG_PATH.call_once(|| {
        if std::env::var_os("LIBCLANG_PATH").as_deref() != Some(libclang.as_os_str()) {
            std::env::set_var("LIBCLANG_PATH", &libclang);
        }
    });
    let mut args: Vec<String> = clang_args.to_vec();
    // PyPI's libclang has no resource directory: gcc's stddef.h & co. stand in for clang's.
    if let Some(dir) = gcc_include_dir() {
        args.push(format!("-isystem{}", dir.display()));
    }
    let header_str = header.display().to_string();
    let builder = bindgen::Builder::default()
        .header(header_str.as_str())
        .allowlist_file(regex_escape(&header_str))
        .clang_args(&args)
        .layout_tests(true)
        .derive_default(true);
    // bindgen panics when libclang cannot be loaded: an error here, never a panic.
    let generated = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| builder.generate()))
        .map_err(|panic| LayoutError::Bindgen {
        header: header.clone(),
        message: format!(
            "{} (libclang from {}; set LIBCLANG_PATH to a directory holding a working libclang.so)",
            panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("bindgen panicked"),
            libclang.display()
        ),
    })?;
    let bindings = generated.map_err(|e| LayoutError::Bindgen {
        header: header.clone(),
        message: e.to_string(),
    })?;
    let rust = bindings.to_string();
    let facts = facts_of(&rust);
    std::fs::create_dir_all(scratch).map_err(|e| LayoutError::Io {
        path: scratch.to_owned(),
        source: e,
    })?;
    let (ok, output) = nvcc_compile(nvcc, &check_source(&header, &facts), scratch)?;
    if ok {
        return Ok(SharedTypes { rust, facts });
    }
    let failed: Vec<(usize, &Fact)> = facts
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            output.contains(&format!("\"fatkit-layout-{i}\""))
                || output.contains(&format!("fatkit-layout-{i}\n"))
        })
        .collect();
    if failed.is_empty() {
        return Err(LayoutError::Nvcc { header, output });
    }
    // Ask nvcc for the device values of what failed.
    let (_, probed) = nvcc_compile(nvcc, &probe_source(&header, &failed), scratch)?;
    let mismatches = failed
        .into_iter()
        .map(|(i, fact)| Mismatch {
            fact: fact.clone(),
            device_value: probed_value(&probed, i),
        })
        .collect();
    Err(LayoutError::Mismatch { header, mismatches })
}

/// `fatkit_value<3UL, 12UL>` in nvcc's errors -> 12 for probe 3.
fn probed_value(output: &str, i: usize) -> Option<u64> {
    let needle = format!("fatkit_value<{i}UL, ");
    let at = output.find(&needle)? + needle.len();
    let rest = output.get(at..)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// gcc's own include directory (stddef.h, stdint.h wrappers), if gcc is there.
fn gcc_include_dir() -> Option<PathBuf> {
    let out = fatkit_toolchain::command::run_with(
        Command::new("gcc").arg("-print-file-name=include"),
        fatkit_toolchain::command::How::QUERY,
        "",
    )
    .ok()?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    dir.is_dir().then_some(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bindgen_layout_assertions() {
        let rust = r#"
const _: () = {
    ["Size of Params"][::std::mem::size_of::<Params>() - 16usize];
    ["Alignment of Params"][::std::mem::align_of::<Params>() - 4usize];
    ["Offset of field: Params::alpha"][::std::mem::offset_of!(Params, alpha) - 0usize];
    ["Offset of field: Params::n"][::std::mem::offset_of!(Params, n) - 12usize];
};"#;
        let facts = facts_of(rust);
        let shown: Vec<String> = facts.iter().map(|f| f.to_string()).collect();
        assert_eq!(
            shown,
            [
                "struct Params: size 16 on the host",
                "struct Params: alignment 4 on the host",
                "struct Params, field alpha: offset 0 on the host",
                "struct Params, field n: offset 12 on the host"
            ]
        );
        let cu = check_source(Path::new("/h/p.h"), &facts);
        assert!(cu.contains("static_assert(offsetof(Params, n) == 12, \"fatkit-layout-3\");"));
        assert_eq!(
            probed_value(
                "error: incomplete type \"fatkit_value<3UL, 16UL>\" is not allowed",
                3
            ),
            Some(16)
        );
    }
}
