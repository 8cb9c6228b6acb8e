//! Scales an array on the GPU through runtime-API host code in `libscale.a`, built by
//! `fatkit_build::Build::compile_library` for every target of the `full` profile. Without a GPU
//! or driver: one line, exit 1.
//!
//! `fatkit-cc-demo --check GPU...` is the check before the first launch, for simulated GPUs
//! (names as nvidia-smi prints them, or compute capabilities): whether the driver would find
//! every kernel of the library in the image it loads there, from the library's own fatbin.
#![allow(unsafe_code)] // the FFI call below

use std::ffi::{c_char, c_int, CStr};
use std::process::ExitCode;

extern "C" {
    fn fatkit_scale(host: *mut f32, n: c_int, s: f32, message: *mut *const c_char) -> c_int;
}

/// The library's one module, over the fatbin its host code registers.
fn module() -> Result<fatkit_runtime::Module, fatkit_runtime::ModuleError> {
    fatkit_runtime::include_module!(concat!(env!("OUT_DIR"), "/scale.rs"))
}

/// For each GPU named: every kernel runs there, or the check's error. Exit 1 if any fails.
fn check(gpus: &[String]) -> ExitCode {
    let module = match module() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("fatkit-cc-demo: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut ok = true;
    for gpu in gpus {
        let product = match fatkit_arch::products::lookup(gpu) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("fatkit-cc-demo: --check {gpu:?}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let device = fatkit_runtime::Device::new(product.cc, None).named(product.name.clone());
        match module.check(&device) {
            Ok(_) => println!(
                "{} (CC {}): every kernel of {} runs",
                product.name,
                product.cc,
                module.name()
            ),
            Err(e) => {
                ok = false;
                println!("{} (CC {}): {e}", product.name, product.cc);
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(("--check", gpus)) = args.split_first().map(|(a, rest)| (a.as_str(), rest)) {
        return check(gpus);
    }
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
