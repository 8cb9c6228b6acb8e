//! Scales an array on the GPU through runtime-API host code built by `cc` with the `-gencode`
//! flags of a fatkit profile. Without a GPU or driver: one line, exit 1.
#![allow(unsafe_code)] // the FFI call below

use std::ffi::{c_char, c_int, CStr};
use std::process::ExitCode;

extern "C" {
    fn fatkit_scale(host: *mut f32, n: c_int, s: f32, message: *mut *const c_char) -> c_int;
}

fn main() -> ExitCode {
    let mut data: Vec<f32> = (0..1000).map(|i| i as f32).collect();
    let mut message: *const c_char = std::ptr::null();
    let n = c_int::try_from(data.len()).unwrap_or(0);
    // SAFETY: `data` holds `n` floats for the call's duration; `message` receives a static
    // string from the CUDA runtime.
    let err = unsafe { fatkit_scale(data.as_mut_ptr(), n, 2.0, &mut message) };
    if err != 0 {
        // SAFETY: cudaGetErrorString returns a static NUL-terminated string (or null).
        let text = if message.is_null() {
            "unknown".into()
        } else {
            unsafe { CStr::from_ptr(message) }.to_string_lossy()
        };
        eprintln!("fatkit-cc-demo: CUDA error {err}: {text}");
        return ExitCode::FAILURE;
    }
    let ok = data.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32);
    println!(
        "scaled 1000 floats on the GPU: {}",
        if ok { "ok" } else { "WRONG" }
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
