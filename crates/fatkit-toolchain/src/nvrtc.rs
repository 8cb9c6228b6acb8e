//! NVRTC, NVIDIA's runtime compiler library, as a device compiler beside nvcc.
//!
//! The library is opened by absolute path with `libloading` and kept for the life of the
//! process (NVRTC is not meant to be unloaded, and a build uses it from many threads). cudarc's
//! own NVRTC loader is one process-wide library found by soname, which would pick whichever
//! `libnvrtc.so` the system has (Debian's CUDA 11.8 one, say) instead of the one a route names.
//!
//! The calls: version, supported architectures, and one program per (source, target):
//! create, compile, log, cubin or PTX, destroy. NVRTC is thread-safe for separate programs.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use fatkit_arch::ImageKind;

type Program = *mut std::ffi::c_void;
type Status = c_int;

type VersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> Status;
type NumArchsFn = unsafe extern "C" fn(*mut c_int) -> Status;
type ArchsFn = unsafe extern "C" fn(*mut c_int) -> Status;
type CreateFn = unsafe extern "C" fn(
    *mut Program,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> Status;
type DestroyFn = unsafe extern "C" fn(*mut Program) -> Status;
type CompileFn = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Status;
type SizeFn = unsafe extern "C" fn(Program, *mut usize) -> Status;
type GetFn = unsafe extern "C" fn(Program, *mut c_char) -> Status;
type ErrorStringFn = unsafe extern "C" fn(Status) -> *const c_char;

/// Why NVRTC could not be used or a compile failed.
#[derive(Debug, thiserror::Error)]
pub enum NvrtcError {
    #[error("{}: cannot load NVRTC: {message}; reinstall it with `cargo xtask toolchain install --nvrtc` or point FATKIT_NVRTC at a libnvrtc.so", path.display())]
    Load { path: PathBuf, message: String },
    #[error("{}: {call} failed: {status}", path.display())]
    Call {
        path: PathBuf,
        call: &'static str,
        status: String,
    },
    /// What fatkit would hand NVRTC holds a NUL byte (`what`: the source, the file name, an
    /// option), which a C string cannot carry.
    #[error("{name}: {what} holds a NUL byte")]
    Nul { name: String, what: &'static str },
    #[error("{0}: too many options")]
    TooManyOptions(String),
}

/// A loaded NVRTC library.
pub struct Nvrtc {
    path: PathBuf,
    // Never dropped while the function pointers below are in use: `Nvrtc`s live in a
    // process-wide table and are never removed from it.
    _lib: libloading::Library,
    version: VersionFn,
    num_archs: NumArchsFn,
    archs: ArchsFn,
    create: CreateFn,
    destroy: DestroyFn,
    compile: CompileFn,
    log_size: SizeFn,
    log: GetFn,
    cubin_size: SizeFn,
    cubin: GetFn,
    ptx_size: SizeFn,
    ptx: GetFn,
    error_string: ErrorStringFn,
}

impl std::fmt::Debug for Nvrtc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvrtc").field("path", &self.path).finish()
    }
}

/// A successful compile: the image, and NVRTC's log (warnings).
#[derive(Debug)]
pub struct Compiled {
    pub image: Vec<u8>,
    pub log: String,
}

/// A failed compile: NVRTC's status and its log (the diagnostics, nvcc-style
/// `file(line): error: ...`).
#[derive(Debug)]
pub struct CompileFailure {
    pub status: String,
    pub log: String,
}

fn loaded() -> &'static Mutex<HashMap<PathBuf, Arc<Nvrtc>>> {
    static LOADED: OnceLock<Mutex<HashMap<PathBuf, Arc<Nvrtc>>>> = OnceLock::new();
    LOADED.get_or_init(|| Mutex::new(HashMap::new()))
}

impl Nvrtc {
    /// Opens the library at `path` (once per process).
    pub fn open(path: &Path) -> Result<Arc<Nvrtc>, NvrtcError> {
        let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        let mut table = loaded().lock().map_err(|_| NvrtcError::Load {
            path: path.to_owned(),
            message: "the NVRTC table was poisoned by a panic".to_owned(),
        })?;
        if let Some(n) = table.get(&key) {
            return Ok(Arc::clone(n));
        }
        let n = Arc::new(Self::load(&key)?);
        table.insert(key, Arc::clone(&n));
        Ok(n)
    }

    fn load(path: &Path) -> Result<Nvrtc, NvrtcError> {
        let err = |message: String| NvrtcError::Load {
            path: path.to_owned(),
            message,
        };
        // SAFETY: loading NVRTC runs its initialisers, which only set up the library itself.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| err(e.to_string()))?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the types above are NVRTC's documented C signatures (nvrtc.h).
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| err(format!("missing {}: {e}", $name)))?
            };
        }
        Ok(Nvrtc {
            path: path.to_owned(),
            version: sym!("nvrtcVersion"),
            num_archs: sym!("nvrtcGetNumSupportedArchs"),
            archs: sym!("nvrtcGetSupportedArchs"),
            create: sym!("nvrtcCreateProgram"),
            destroy: sym!("nvrtcDestroyProgram"),
            compile: sym!("nvrtcCompileProgram"),
            log_size: sym!("nvrtcGetProgramLogSize"),
            log: sym!("nvrtcGetProgramLog"),
            cubin_size: sym!("nvrtcGetCUBINSize"),
            cubin: sym!("nvrtcGetCUBIN"),
            ptx_size: sym!("nvrtcGetPTXSize"),
            ptx: sym!("nvrtcGetPTX"),
            error_string: sym!("nvrtcGetErrorString"),
            _lib: lib,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn status(&self, status: Status) -> String {
        // SAFETY: nvrtcGetErrorString returns a static string for any status value.
        let text = unsafe { (self.error_string)(status) };
        if text.is_null() {
            return format!("NVRTC status {status}");
        }
        // SAFETY: non-null, NUL-terminated, static.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }

    fn check(&self, call: &'static str, status: Status) -> Result<(), NvrtcError> {
        if status == 0 {
            return Ok(());
        }
        Err(NvrtcError::Call {
            path: self.path.clone(),
            call,
            status: self.status(status),
        })
    }

    /// `(major, minor)`, e.g. `(12, 9)`.
    pub fn version(&self) -> Result<(i32, i32), NvrtcError> {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers.
        let status = unsafe { (self.version)(&mut major, &mut minor) };
        self.check("nvrtcVersion", status)?;
        Ok((major, minor))
    }

    /// The SM numbers it compiles for (`[50, 52, ..., 121]`).
    pub fn supported_archs(&self) -> Result<Vec<u32>, NvrtcError> {
        let mut n: c_int = 0;
        // SAFETY: valid out-pointer.
        let status = unsafe { (self.num_archs)(&mut n) };
        self.check("nvrtcGetNumSupportedArchs", status)?;
        let len = usize::try_from(n).unwrap_or(0).min(1024);
        let mut archs: Vec<c_int> = vec![0; len];
        if len > 0 {
            // SAFETY: the buffer holds the number of entries NVRTC just reported.
            let status = unsafe { (self.archs)(archs.as_mut_ptr()) };
            self.check("nvrtcGetSupportedArchs", status)?;
        }
        Ok(archs
            .into_iter()
            .filter_map(|a| u32::try_from(a).ok())
            .collect())
    }

    /// Compiles `source` (named `name` in diagnostics) with `options` into a cubin or PTX.
    pub fn compile(
        &self,
        name: &str,
        source: &[u8],
        options: &[String],
        kind: ImageKind,
    ) -> Result<Result<Compiled, CompileFailure>, NvrtcError> {
        let input = |what: &'static str| NvrtcError::Nul {
            name: name.to_owned(),
            what,
        };
        let source = CString::new(source).map_err(|_| input("the source"))?;
        let c_name = CString::new(name).map_err(|_| input("the file name"))?;
        let c_options = options
            .iter()
            .map(|o| CString::new(o.as_str()).map_err(|_| input("an option")))
            .collect::<Result<Vec<_>, _>>()?;
        let option_ptrs: Vec<*const c_char> = c_options.iter().map(|o| o.as_ptr()).collect();
        let n_options = c_int::try_from(option_ptrs.len())
            .map_err(|_| NvrtcError::TooManyOptions(name.to_owned()))?;
        let mut program: Program = std::ptr::null_mut();
        // SAFETY: NUL-terminated strings that outlive the call; no in-memory headers.
        let status = unsafe {
            (self.create)(
                &mut program,
                source.as_ptr(),
                c_name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        self.check("nvrtcCreateProgram", status)?;
        let guard = ProgramGuard {
            nvrtc: self,
            program,
        };
        // SAFETY: a live program; `option_ptrs` points into `c_options`, alive until return.
        let compile_status =
            unsafe { (self.compile)(guard.program, n_options, option_ptrs.as_ptr()) };
        let log = self.read(guard.program, self.log_size, self.log, "nvrtcGetProgramLog")?;
        let log = String::from_utf8_lossy(&log)
            .trim_end_matches('\0')
            .trim_end()
            .to_owned();
        if compile_status != 0 {
            return Ok(Err(CompileFailure {
                status: self.status(compile_status),
                log,
            }));
        }
        let mut image = match kind {
            ImageKind::Cubin => {
                self.read(guard.program, self.cubin_size, self.cubin, "nvrtcGetCUBIN")?
            }
            ImageKind::Ptx => self.read(guard.program, self.ptx_size, self.ptx, "nvrtcGetPTX")?,
        };
        if kind == ImageKind::Ptx {
            // PTX comes NUL-terminated; the fatbin writer stores text as nvcc's does.
            while image.last() == Some(&0) {
                image.pop();
            }
        }
        Ok(Ok(Compiled { image, log }))
    }

    fn read(
        &self,
        program: Program,
        size: SizeFn,
        get: GetFn,
        call: &'static str,
    ) -> Result<Vec<u8>, NvrtcError> {
        let mut len = 0usize;
        // SAFETY: a live program and a valid out-pointer.
        let status = unsafe { size(program, &mut len) };
        self.check(call, status)?;
        let mut buf = vec![0u8; len];
        if len > 0 {
            // SAFETY: the buffer is as long as NVRTC said the result is.
            let status = unsafe { get(program, buf.as_mut_ptr().cast()) };
            self.check(call, status)?;
        }
        Ok(buf)
    }
}

/// Destroys the program however `compile` returns.
struct ProgramGuard<'a> {
    nvrtc: &'a Nvrtc,
    program: Program,
}

impl Drop for ProgramGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram and destroyed only here.
        let _ = unsafe { (self.nvrtc.destroy)(&mut self.program) };
    }
}

/// The headers a source may read, found the way NVRTC finds them: a quoted name next to the
/// including file first, then every include directory in order. The names are those of
/// `include_names_in`: every `#include` (comments and continued lines read as the
/// preprocessor reads them), `__has_include`, and quoted names in `#define`s (`#define HDR
/// "a.cuh"` for `#include HDR`). Lines under inactive `#if`s count too, so the list may hold
/// headers a compile did not read (a cache keyed on it rebuilds too often, never too rarely).
/// A build takes it as the headers to read before compiling, not as what a compile read: that
/// comes from the compiler (nvcc's line markers; NVRTC compiles only what fatkit staged for it).
/// Names found in no directory (NVRTC's built-in headers, a macro's string) are skipped; a
/// name that resolves to something other than a regular file is kept, for the caller to refuse.
pub fn scan_includes(source: &Path, include_dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut stack = vec![source.to_owned()];
    while let Some(file) = stack.pop() {
        // Read through, a line at a time: a header of any size costs a buffer, not its size.
        let Ok((handle, _)) = fatkit_read::open_regular(&file) else {
            continue;
        };
        let here = file.parent().map(Path::to_path_buf);
        for (name, quoted) in include_names_in(handle) {
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
            if found != source && !seen.contains(&found) {
                seen.push(found.clone());
                if file {
                    stack.push(found);
                }
            }
        }
        if seen.len() > 10_000 {
            break;
        }
    }
    seen.sort();
    seen
}

/// How much of a line the include scan holds: a directive is far shorter, and of a longer
/// line (minified data, a generated table) only its start is looked at.
const MAX_LINE: usize = 4096;

/// `include_names` of what `reader` yields, read through a buffer a logical line at a time
/// (a line ending in `\` continues on the next): memory stays bounded whatever the file's
/// size or line lengths.
pub(crate) fn include_names_in(reader: impl std::io::Read) -> Vec<(String, bool)> {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::with_capacity(64 << 10, reader);
    let mut out = Vec::new();
    let mut line: Vec<u8> = Vec::new();
    // Inside a `/* */` comment that began on an earlier line.
    let mut in_comment = false;
    let mut end_line = |line: &mut Vec<u8>, in_comment: &mut bool| {
        // A continued line goes on: the backslash and the newline are not there.
        let continued = line.last() == Some(&b'\\');
        if continued {
            line.pop();
            return;
        }
        let code = strip_comments(line, in_comment);
        out.extend(include_names(&code));
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
            end_line(&mut line, &mut in_comment);
        }
    }
    let code = strip_comments(&line, &mut in_comment);
    out.extend(include_names(&code));
    out
}

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

/// The file names a preprocessor line may make the compiler read: `#include "a.cuh"` ->
/// `("a.cuh", true)`, `#include <b.h>` (and `#include_next`) -> `("b.h", false)`, each
/// `__has_include(..)` of a directive, and each string of a `#define` (a name `#include MACRO`
/// may expand to), taken as quoted.
fn include_names(line: &[u8]) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let line = String::from_utf8_lossy(line);
    let Some(rest) = line.trim_start().strip_prefix('#') else {
        return out;
    };
    let rest = rest.trim_start();
    let directive: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let args = rest.get(directive.len()..).unwrap_or_default().trim_start();
    let delimited = |text: &str| -> Option<(String, bool)> {
        let (close, quoted) = match text.chars().next() {
            Some('"') => ('"', true),
            Some('<') => ('>', false),
            _ => return None,
        };
        let name = text.get(1..)?.split(close).next()?;
        (!name.is_empty() && !name.contains('\n')).then(|| (name.to_owned(), quoted))
    };
    match directive.as_str() {
        "include" | "include_next" => out.extend(delimited(args)),
        "define" => {
            for (i, piece) in args.split('"').enumerate() {
                // The odd pieces are inside quotes.
                if i % 2 == 1 && !piece.is_empty() && !piece.contains(char::is_whitespace) {
                    out.push((piece.to_owned(), true));
                }
            }
        }
        _ => {}
    }
    for (at, _) in args.match_indices("__has_include") {
        let after = args.get(at + "__has_include".len()..).unwrap_or_default();
        let after = after.strip_prefix("_next").unwrap_or(after).trim_start();
        if let Some(inner) = after.strip_prefix('(') {
            out.extend(delimited(inner.trim_start()));
        }
    }
    out
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
        let found = scan_includes(&dir.join("a.cu"), &[dir.join("other")]);
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
