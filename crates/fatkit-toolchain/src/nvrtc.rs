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

pub use crate::scan::{scan_includes, TooManyHeaders, MAX_HEADERS};
