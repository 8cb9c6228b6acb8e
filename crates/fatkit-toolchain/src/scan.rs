//! The include scan: the file names a source and its headers may make the preprocessor look
//! for, read as the preprocessor reads lines (comments, continued lines), through the bounded
//! reader. It finds the headers a build reads before compiling ([`scan_includes`]) and the
//! names each file probes ([`names_of`]: `#include`, `__has_include`, a macro's string), which
//! the cache records as negative dependencies where no such file exists.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The most headers one source may reach: past it the scan is an error, never a silent stop
/// (a header left unscanned could be a FIFO the compiler would wait on).
pub const MAX_HEADERS: usize = 10_000;

/// A source whose headers go past [`MAX_HEADERS`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{} reaches more than {cap} headers, the most a build scans for one source; include fewer headers (one generated header can hold many definitions)", file.display())]
pub struct TooManyHeaders {
    pub file: PathBuf,
    pub cap: usize,
}

/// The headers a source may read, found the way NVRTC finds them: a quoted name next to the
/// including file first, then every include directory in order. The names are those of
/// [`names_of`]: every `#include` (comments and continued lines read as the preprocessor reads
/// them), `__has_include`, and quoted names in `#define`s (`#define HDR "a.cuh"` for
/// `#include HDR`). Lines under inactive `#if`s count too, so the list may hold headers a
/// compile did not read (a cache keyed on it rebuilds too often, never too rarely). A build
/// takes it as the headers to read before compiling, not as what a compile read: that comes
/// from the compiler (nvcc's line markers; NVRTC compiles only what fatkit staged for it).
/// Names found in no directory (NVRTC's built-in headers, a macro's string) are skipped; a
/// name that resolves to something other than a regular file within
/// [`fatkit_read::MAX_SOURCE`] (a FIFO, a device, a file under `/proc`, a sparse giant) is kept
/// unread, for the caller to refuse. More than [`MAX_HEADERS`] is an error.
pub fn scan_includes(
    source: &Path,
    include_dirs: &[PathBuf],
) -> Result<Vec<PathBuf>, TooManyHeaders> {
    let mut seen: HashSet<PathBuf> = HashSet::new();
    let mut stack = vec![source.to_owned()];
    while let Some(file) = stack.pop() {
        let Ok(names) = names_of(&file) else {
            continue;
        };
        let here = file.parent().map(Path::to_path_buf);
        for (name, quoted) in names.names {
            let dirs = here.iter().filter(|_| quoted).chain(include_dirs.iter());
            let Some(found) = dirs.map(|d| d.join(&name)).find(|p| p.exists()) else {
                continue;
            };
            // A file by its real path; anything else (a FIFO, a link to a device) by the name
            // it was found under, for the message that refuses it.
            let file = found.is_file();
            let found = match file {
                true => std::fs::canonicalize(&found).unwrap_or(found),
                false => found,
            };
            if found != source && seen.insert(found.clone()) {
                if seen.len() > MAX_HEADERS {
                    return Err(TooManyHeaders {
                        file: source.to_owned(),
                        cap: MAX_HEADERS,
                    });
                }
                if file {
                    stack.push(found);
                }
            }
        }
    }
    let mut seen: Vec<PathBuf> = seen.into_iter().collect();
    seen.sort();
    Ok(seen)
}

/// What one file may make the preprocessor look for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Names {
    /// `(name, quoted)`: a quoted name is looked for next to the file first.
    pub names: Vec<(String, bool)>,
    /// The first line holding an include probe whose name the scan cannot read (`__has_include`
    /// of a macro, an alias `#define HAS __has_include`): a probe no cache key could cover.
    pub opaque_probe: Option<String>,
}

/// The names `file` may make the preprocessor look for ([`Names`]), read through the bounded
/// reader: a regular file of at most [`fatkit_read::MAX_SOURCE`] bytes, read no further than
/// its size, or an error (a FIFO, a device, a pseudo file, a sparse giant is never read).
pub fn names_of(file: &Path) -> std::io::Result<Names> {
    use std::io::Read;
    let (handle, len) = fatkit_read::open_regular(file)?;
    if len > fatkit_read::MAX_SOURCE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{len} bytes, over the {}-byte limit of a source or header",
                fatkit_read::MAX_SOURCE
            ),
        ));
    }
    Ok(names_in(handle.take(len)))
}

/// How much of a line the include scan holds: a directive is far shorter, and of a longer
/// line (minified data, a generated table) only its start is looked at.
const MAX_LINE: usize = 4096;

/// `line` without its comments (a comment is one space, as the preprocessor reads it);
/// `in_comment` carries a `/* */` comment over to the next line.
fn strip_comments(line: &[u8], in_comment: &mut bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len());
    let mut i = 0;
    let at = |i: usize| line.get(i).copied();
    while i < line.len() {
        if *in_comment {
            if at(i) == Some(b'*') && at(i + 1) == Some(b'/') {
                *in_comment = false;
                out.push(b' ');
                i += 2;
            } else {
                i += 1;
            }
            continue;
        }
        match (at(i), at(i + 1)) {
            (Some(b'/'), Some(b'*')) => {
                *in_comment = true;
                i += 2;
            }
            (Some(b'/'), Some(b'/')) => break,
            (Some(q @ (b'"' | b'\'')), _) => {
                // A literal is copied whole: `//` or `/*` inside it is no comment.
                out.push(q);
                i += 1;
                while let Some(c) = at(i) {
                    out.push(c);
                    i += 1;
                    if c == b'\\' {
                        if let Some(next) = at(i) {
                            out.push(next);
                            i += 1;
                        }
                    } else if c == q {
                        break;
                    }
                }
            }
            (Some(c), _) => {
                out.push(c);
                i += 1;
            }
            (None, _) => break,
        }
    }
    out
}

/// [`Names`] of what `reader` yields, read through a buffer a logical line at a time (a line
/// ending in `\` continues on the next): memory stays bounded whatever the file's size or line
/// lengths.
pub(crate) fn names_in(reader: impl std::io::Read) -> Names {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::with_capacity(64 << 10, reader);
    let mut out = Names::default();
    let mut line: Vec<u8> = Vec::new();
    // Inside a `/* */` comment that began on an earlier line.
    let mut in_comment = false;
    let end_line = |line: &mut Vec<u8>, in_comment: &mut bool, out: &mut Names| {
        // A continued line goes on: the backslash and the newline are not there.
        if line.last() == Some(&b'\\') {
            line.pop();
            return;
        }
        let code = strip_comments(line, in_comment);
        directive_names(&code, out);
        line.clear();
    };
    while let Ok(buf) = reader.fill_buf() {
        if buf.is_empty() {
            break;
        }
        let (part, end) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (buf.get(..i).unwrap_or_default(), Some(i + 1)),
            None => (buf, None),
        };
        let room = MAX_LINE.saturating_sub(line.len());
        line.extend_from_slice(part.get(..room.min(part.len())).unwrap_or_default());
        let used = end.unwrap_or(buf.len());
        reader.consume(used);
        if end.is_some() {
            // A `\r\n` line ending: the backslash of a continuation is before the `\r`.
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            end_line(&mut line, &mut in_comment, &mut out);
        }
    }
    let code = strip_comments(&line, &mut in_comment);
    directive_names(&code, &mut out);
    out
}

/// The `(name, quoted)` pairs of [`names_in`].
#[cfg(test)]
pub(crate) fn include_names_in(reader: impl std::io::Read) -> Vec<(String, bool)> {
    names_in(reader).names
}

/// `"a.cuh"` -> `("a.cuh", true)`, `<b.h>` -> `("b.h", false)`, at the start of `text`.
fn delimited(text: &str) -> Option<(String, bool)> {
    let (close, quoted) = match text.chars().next() {
        Some('"') => ('"', true),
        Some('<') => ('>', false),
        _ => return None,
    };
    let name = text.get(1..)?.split(close).next()?;
    (!name.is_empty() && !name.contains('\n')).then(|| (name.to_owned(), quoted))
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Adds to `out` the file names a preprocessor line may make the compiler look for:
/// `#include "a.cuh"` -> `("a.cuh", true)`, `#include <b.h>` (and `#include_next`) ->
/// `("b.h", false)`, each string of a `#define` (a name `#include MACRO` may expand to), taken
/// as quoted, and in `#if`, `#elif` and `#define` lines every literal argument of a call
/// (`__has_include("x")`, `__has_include_next(<y>)`, and the same through an alias macro
/// `HAS(<z>)`). An include probe whose name is not a literal is `out.opaque_probe`.
fn directive_names(line: &[u8], out: &mut Names) {
    let line = String::from_utf8_lossy(line);
    let Some(rest) = line.trim_start().strip_prefix('#') else {
        return;
    };
    let rest = rest.trim_start();
    let directive: String = rest.chars().take_while(|c| is_ident(*c)).collect();
    let args = rest.get(directive.len()..).unwrap_or_default().trim_start();
    match directive.as_str() {
        "include" | "include_next" => out.names.extend(delimited(args)),
        "define" => {
            for (i, piece) in args.split('"').enumerate() {
                // The odd pieces are inside quotes.
                if i % 2 == 1 && !piece.is_empty() && !piece.contains(char::is_whitespace) {
                    out.names.push((piece.to_owned(), true));
                }
            }
        }
        _ => {}
    }
    if !matches!(
        directive.as_str(),
        "if" | "elif" | "define" | "ifdef" | "ifndef" | "elifdef" | "elifndef"
    ) {
        return;
    }
    // Every call with a literal argument: a probe, directly or through an alias.
    for (at, _) in args.match_indices('(') {
        let before = args.get(..at).unwrap_or_default().trim_end();
        if before.ends_with(is_ident) {
            let inner = args.get(at + 1..).unwrap_or_default().trim_start();
            out.names.extend(delimited(inner));
        }
    }
    if out.opaque_probe.is_none() && has_opaque_probe(&directive, args) {
        out.opaque_probe = Some(line.trim().to_owned());
    }
}

/// Whether a directive's arguments hold `__has_include` or `__has_include_next` other than as
/// a call with a literal name, a test of whether it is defined (`defined(__has_include)`,
/// `#ifdef __has_include`), or an alias macro's call with one of its parameters (`#define
/// HAS(x) __has_include(x)`, whose calls with literal names are names themselves).
fn has_opaque_probe(directive: &str, args: &str) -> bool {
    const PROBE: &str = "__has_include";
    let params: Vec<&str> = match directive {
        "define" => {
            let name_len = args.chars().take_while(|c| is_ident(*c)).count();
            match args.get(name_len..).and_then(|r| r.strip_prefix('(')) {
                Some(r) => r
                    .split(')')
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(str::trim)
                    .collect(),
                None => Vec::new(),
            }
        }
        _ => Vec::new(),
    };
    for (at, _) in args.match_indices(PROBE) {
        let before = args.get(..at).unwrap_or_default();
        if before.ends_with(is_ident) {
            continue;
        }
        let after = args.get(at + PROBE.len()..).unwrap_or_default();
        let after = after.strip_prefix("_next").unwrap_or(after);
        if after.starts_with(is_ident) {
            continue;
        }
        let before = before.trim_end();
        let tested = before.ends_with("defined")
            || before
                .strip_suffix('(')
                .is_some_and(|b| b.trim_end().ends_with("defined"))
            || matches!(directive, "ifdef" | "ifndef" | "elifdef" | "elifndef");
        if tested {
            continue;
        }
        let Some(inner) = after.trim_start().strip_prefix('(') else {
            return true;
        };
        let inner = inner.trim_start();
        if delimited(inner).is_some() {
            continue;
        }
        let arg: String = inner.chars().take_while(|c| is_ident(*c)).collect();
        let closes = inner
            .get(arg.len()..)
            .is_some_and(|r| r.trim_start().starts_with(')'));
        if !(closes && params.contains(&arg.as_str())) {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scan_reads_through_and_passes_over_long_lines() {
        let mut text = b"#include \"a.h\"\n".to_vec();
        text.extend(std::iter::repeat_n(b'x', 3 * MAX_LINE));
        text.extend(b"#include \"hidden.h\"\n");
        text.extend(std::iter::repeat_n(b'y', 200_000));
        text.extend(b"\n#include <b.h> ");
        text.extend(std::iter::repeat_n(b'/', 200_000));
        text.extend(b"\n#include \"last.h\"");
        // One byte at a time, as a slow reader gives it: lines span buffer refills.
        struct Trickle<'a>(&'a [u8]);
        impl std::io::Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let Some((&b, rest)) = self.0.split_first() else {
                    return Ok(0);
                };
                match buf.first_mut() {
                    Some(slot) => *slot = b,
                    None => return Ok(0),
                }
                self.0 = rest;
                Ok(1)
            }
        }
        let want = [
            ("a.h".to_owned(), true),
            ("b.h".to_owned(), false),
            ("last.h".to_owned(), true),
        ];
        assert_eq!(include_names_in(text.as_slice()), want);
        assert_eq!(include_names_in(Trickle(&text)), want);
    }

    #[test]
    fn include_lines() {
        let text = b"#include \"include/r.cuh\"\n  #  include <cuda_fp16.h>\n// #include \"x\"\n#define A\n#include MACRO\n";
        assert_eq!(
            include_names_in(&text[..]),
            [
                ("include/r.cuh".to_owned(), true),
                ("cuda_fp16.h".to_owned(), false)
            ]
        );
        // Issue 41: the forms a literal scan missed, each a name the preprocessor reads.
        let text = b"#define HDR \"a.cuh\"\n#include HDR\n#include /* c */ \"b.cuh\"\n#include \\\n  \"c.cuh\"\n#if __has_include(<d.h>) && __has_include_next(\"e.h\")\n#endif\n/* #include \"in-comment.h\"\n#include \"also.h\" */\n#include \"f.cuh\" // \"not-this.h\"\n#define MSG \"not a file\"\n";
        assert_eq!(
            include_names_in(&text[..]),
            [
                ("a.cuh".to_owned(), true),
                ("b.cuh".to_owned(), true),
                ("c.cuh".to_owned(), true),
                ("d.h".to_owned(), false),
                ("e.h".to_owned(), true),
                ("f.cuh".to_owned(), true),
            ]
        );
    }

    #[test]
    fn an_include_probe_is_a_name_or_opaque() {
        let names = |text: &str| names_in(text.as_bytes());
        // Literal probes, directly, through an alias, tested for: names, none opaque.
        let read = names(
            "#if defined(__has_include) && __has_include(<a.h>)\n#endif\n#ifdef __has_include\n#endif\n#define HAS(x) __has_include(x)\n#elif HAS(\"b.cuh\") || __has_include_next ( \"c.h\" )\n",
        );
        assert_eq!(read.opaque_probe, None);
        for want in [("a.h", false), ("b.cuh", true), ("c.h", true)] {
            assert!(
                read.names.contains(&(want.0.to_owned(), want.1)),
                "{want:?}: {:?}",
                read.names
            );
        }
        // A name only the preprocessor makes, or an alias no call can be seen through.
        for line in [
            "#if __has_include(STR(x.h))",
            "#if __has_include(NAME)",
            "#define HI __has_include",
            "#define P(x) __has_include(OTHER)",
        ] {
            assert_eq!(names(line).opaque_probe.as_deref(), Some(line), "{line}");
        }
    }

    #[test]
    fn scans_through_headers() {
        let dir = std::env::temp_dir().join(format!("fatkit-scan-{}", std::process::id()));
        let inc = dir.join("include");
        std::fs::create_dir_all(&inc).unwrap();
        std::fs::write(
            dir.join("a.cu"),
            "#include \"include/b.cuh\"\n#include <nvrtc_builtin.h>\n",
        )
        .unwrap();
        std::fs::write(inc.join("b.cuh"), "#include \"c.cuh\"\n#include <d.h>\n").unwrap();
        std::fs::write(inc.join("c.cuh"), "#include \"b.cuh\"\n").unwrap();
        let other = dir.join("other");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("d.h"), "").unwrap();
        let dir = std::fs::canonicalize(&dir).unwrap();
        let found = scan_includes(&dir.join("a.cu"), &[dir.join("other")]).unwrap();
        assert_eq!(
            found,
            [
                dir.join("include/b.cuh"),
                dir.join("include/c.cuh"),
                dir.join("other/d.h")
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
