//! What fatkit lets reach nvcc, by allowlist: the characters of every value (nvcc runs its
//! steps through `sh -c` and quotes nothing, so a `$(...)`, a backquote or a space in a value
//! would be read by a shell), and the options passed on to ptxas, cudafe and the host compiler
//! (each item of `-Xptxas`, `-Xcudafe` and `-Xcompiler` lists). An option that is not here is
//! refused: fatkit cannot tell whether a tool it does not know writes a file or runs a program.

pub use fatkit_run::{shell_safe, SAFE_CHARACTERS};

/// Whether `s` may be a path nvcc is given: [`shell_safe`] without `,` (which splits nvcc's
/// `-X...` and `-I` lists into several values).
pub fn path_safe(s: &str) -> bool {
    shell_safe(s) && !s.contains(',')
}

/// The characters [`path_safe`] accepts, for messages.
pub const PATH_CHARACTERS: &str = "only ASCII letters, digits and _ @ % + = : . / -";

/// Whether `s` is a C identifier: an ASCII letter or `_`, then letters, digits and `_`.
pub(crate) fn is_identifier(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Why a `-D` value cannot be given to nvcc, if it cannot: `NAME` or `NAME=VALUE`, the name a
/// C identifier, the value [`shell_safe`] (or empty) and without `,` (nvcc reads `-DA,B` as
/// two macros).
pub fn define_refusal(define: &str) -> Option<String> {
    let (name, value) = match define.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (define, None),
    };
    if !is_identifier(name) {
        return Some(format!(
            "the macro name {name:?} is not a C identifier (a letter or _, then letters, digits and _)"
        ));
    }
    match value {
        Some(v) if v.contains(',') => Some(
            "nvcc reads a comma in -D as the start of another macro; give each macro its own -D"
                .to_owned(),
        ),
        Some(v) if !v.is_empty() && !shell_safe(v) => Some(format!(
            "the value {v:?} holds characters nvcc's shell would interpret (it quotes nothing); fatkit passes values of {SAFE_CHARACTERS} only: write the value in the source, behind a macro"
        )),
        _ => None,
    }
}

/// The ptxas options an `-Xptxas` list may hold: reports, warnings and optimisation choices;
/// none writes a file or reads one.
pub fn ptxas_item(item: &str) -> bool {
    const PLAIN: &[&str] = &[
        "-v",
        "--verbose",
        "-warn-spills",
        "--warn-on-spills",
        "-warn-lmem-usage",
        "--warn-on-local-memory-usage",
        "-warn-double-usage",
        "--warn-on-double-precision-use",
        "-Werror",
        "--warning-as-error",
        "-suppress-stack-size-warning",
        "--suppress-stack-size-warning",
        "-lineinfo",
        "--generate-line-info",
        "-disable-optimizer-consts",
        "--disable-optimizer-constants",
        "-sp-bounds-check",
        "--sp-bounds-check",
        "-allow-expensive-optimizations",
        "--allow-expensive-optimizations",
        "-O0",
        "-O1",
        "-O2",
        "-O3",
    ];
    if PLAIN.contains(&item) {
        return true;
    }
    let Some((name, value)) = item.split_once('=') else {
        return false;
    };
    match name {
        "-O" | "--opt-level" => matches!(value, "0" | "1" | "2" | "3"),
        "-dlcm" | "--def-load-cache" => matches!(value, "ca" | "cg" | "cs" | "lu" | "cv"),
        "-dscm" | "--def-store-cache" => matches!(value, "wb" | "cg" | "cs" | "wt"),
        "-maxrregcount" | "--maxrregcount" => value.parse::<u32>().is_ok(),
        "-fmad"
        | "--fmad"
        | "-allow-expensive-optimizations"
        | "--allow-expensive-optimizations" => matches!(value, "true" | "false"),
        _ => false,
    }
}

/// The host compiler options an `-Xcompiler` list may hold: code generation, warnings and
/// macros; none that writes a file (`-MD`, `-save-temps`, `-fdump-*`), reads one (`-specs`,
/// `@file`, `-include`) or runs a program (`-B`, `-wrapper`, `-fplugin`), and no `-Wp,`, `-Wa,`
/// or `-Wl,`, which pass anything on.
pub fn host_item(item: &str) -> bool {
    const PLAIN: &[&str] = &[
        "-fPIC",
        "-fpic",
        "-fPIE",
        "-fpie",
        "-fopenmp",
        "-pthread",
        "-fno-strict-aliasing",
        "-ffast-math",
        "-fno-exceptions",
        "-fvisibility-inlines-hidden",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-w",
        "-g",
        "-g0",
        "-Os",
        "-O0",
        "-O1",
        "-O2",
        "-O3",
    ];
    if PLAIN.contains(&item) {
        return true;
    }
    let word = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
    };
    if let Some(v) = item.strip_prefix("-fvisibility=") {
        return matches!(v, "hidden" | "default" | "protected");
    }
    if let Some(v) = item
        .strip_prefix("-march=")
        .or_else(|| item.strip_prefix("-mtune="))
    {
        return word(v);
    }
    if let Some(v) = item.strip_prefix("-std=") {
        return matches!(
            v,
            "c++11" | "c++14" | "c++17" | "c++20" | "gnu++11" | "gnu++14" | "gnu++17" | "gnu++20"
        );
    }
    if let Some(d) = item.strip_prefix("-D") {
        return define_refusal(d).is_none();
    }
    if let Some(u) = item.strip_prefix("-U") {
        return is_identifier(u);
    }
    // Warnings by name (`-Wno-unused-function`, `-Werror=return-type`): three letters at
    // least, so that `-Wp`, `-Wa` and `-Wl` (which pass the rest of the list on) are not.
    if let Some(w) = item.strip_prefix("-W") {
        let w = w.strip_prefix("no-").unwrap_or(w);
        let w = w
            .strip_prefix("error=")
            .or_else(|| w.strip_prefix("no-error="))
            .unwrap_or(w);
        return w.len() >= 3 && word(w);
    }
    false
}

/// The cudafe options an `-Xcudafe` list may hold: diagnostics by number or name. Returns
/// NVRTC's spelling, or `None` for another.
pub fn cudafe_item(item: &str) -> Option<String> {
    if item == "--display_error_number" {
        return Some("--display-error-number".to_owned());
    }
    let value = item
        .strip_prefix("--diag_suppress=")
        .or_else(|| item.strip_prefix("--diag-suppress="))?;
    diagnostics(value).then(|| format!("--diag-suppress={value}"))
}

/// Diagnostic numbers or names: letters, digits and `_` (a list is comma-separated).
pub fn diagnostics(value: &str) -> bool {
    value
        .split(',')
        .all(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
}
