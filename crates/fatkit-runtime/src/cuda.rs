//! The real device: compute capability, driver and name through cudarc, and loading and
//! launching after the check has passed.
//!
//! The only `unsafe` of fatkit lives here: CUDA driver calls on handles this module owns. The
//! fatbin is handed to `cuModuleLoadData` where `include_bytes!` put it, without a copy.
#![allow(unsafe_code)]

use std::ffi::{c_void, CString};
use std::fmt;
use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext, CudaStream, DriverError};
use fatkit_arch::toolkit::CudaVersion;

use crate::{CheckError, Device, DriverVersion, KernelFailure, Module, Plan, Selected};

/// A kernel without an image for a device.
#[derive(Debug, Clone)]
pub struct NotCovered {
    pub module: &'static str,
    pub device: Device,
    pub failure: KernelFailure,
}

/// Why the GPU side could not do what was asked.
#[derive(Debug)]
pub enum RuntimeError {
    /// `libcuda.so` cannot be loaded: no NVIDIA driver on this machine.
    NoDriver,
    /// The driver sees no CUDA device.
    NoDevice,
    Cuda {
        what: String,
        source: DriverError,
    },
    /// No kernel of the module runs on the device.
    Check(Box<CheckError>),
    /// This kernel has no image for the device (others of its module may have).
    KernelNotCovered(Box<NotCovered>),
    UnknownKernel {
        module: &'static str,
        kernel: String,
    },
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuntimeError::NoDriver => f.write_str(
                "no NVIDIA driver: libcuda.so could not be loaded; run on a machine with an NVIDIA GPU and its driver (nvidia-smi should work)",
            ),
            RuntimeError::NoDevice => f.write_str("the NVIDIA driver reports no CUDA device; check nvidia-smi and CUDA_VISIBLE_DEVICES"),
            RuntimeError::Cuda { what, source } => write!(f, "{what}: {source}"),
            RuntimeError::Check(e) => write!(f, "{e}"),
            RuntimeError::KernelNotCovered(nc) => write!(
                f,
                "kernel '{}' of module '{module}' has no image for {}: {} ({}): {}",
                nc.failure.kernel,
                nc.device.describe(),
                nc.failure.error,
                nc.failure.code,
                nc.failure.reasons.join("; "),
                module = nc.module,
            ),
            RuntimeError::UnknownKernel { module, kernel } => write!(f, "module '{module}' has no kernel '{kernel}'"),
        }
    }
}

impl std::error::Error for RuntimeError {}

fn cuda(what: impl Into<String>) -> impl FnOnce(DriverError) -> RuntimeError {
    let what = what.into();
    move |source| RuntimeError::Cuda { what, source }
}

/// Whether the NVIDIA driver library can be loaded at all.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda; nothing is called through it.
    unsafe { sys::is_culib_present() }
}

/// The driver's CUDA level (`cuDriverGetVersion`).
pub fn driver_version() -> Result<DriverVersion, RuntimeError> {
    if !driver_present() {
        return Err(RuntimeError::NoDriver);
    }
    let mut v = 0;
    // SAFETY: `v` is a valid out-pointer for the duration of the call.
    unsafe { sys::cuDriverGetVersion(&mut v) }
        .result()
        .map_err(cuda("cuDriverGetVersion"))?;
    let v = u32::try_from(v).unwrap_or(0);
    Ok(CudaVersion::from_api(v).map_or(
        DriverVersion::Cuda(CudaVersion::new(0, 0)),
        DriverVersion::Cuda,
    ))
}

/// Every CUDA device: compute capability, driver, name.
pub fn devices() -> Result<Vec<Device>, RuntimeError> {
    let driver = driver_version()?;
    result::init().map_err(cuda("cuInit"))?;
    let n = result::device::get_count().map_err(cuda("cuDeviceGetCount"))?;
    let mut out = Vec::new();
    for ordinal in 0..n {
        let dev = result::device::get(ordinal).map_err(cuda(format!("cuDeviceGet({ordinal})")))?;
        let attr = |a| {
            // SAFETY: `dev` is a device handle the driver just returned.
            unsafe { result::device::get_attribute(dev, a) }.map_err(cuda("cuDeviceGetAttribute"))
        };
        let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let name = result::device::get_name(dev).map_err(cuda("cuDeviceGetName"))?;
        let cc = crate::Cc::new(
            u8::try_from(major).unwrap_or(0),
            u8::try_from(minor).unwrap_or(0),
        );
        out.push(Device {
            cc,
            driver: Some(driver),
            name,
            ordinal: usize::try_from(ordinal).ok(),
        });
    }
    if out.is_empty() {
        return Err(RuntimeError::NoDevice);
    }
    Ok(out)
}

/// For start-up: every device can run every kernel of every module, or the first error.
pub fn verify_all_devices(modules: &[&Module]) -> Result<Vec<Device>, RuntimeError> {
    let devices = devices()?;
    for device in &devices {
        for m in modules {
            m.check(device).map_err(RuntimeError::Check)?;
        }
    }
    Ok(devices)
}

/// The device of a context.
pub fn device_of(ctx: &CudaContext) -> Result<Device, RuntimeError> {
    devices()?
        .into_iter()
        .find(|d| d.ordinal == Some(ctx.ordinal()))
        .ok_or(RuntimeError::NoDevice)
}

/// A module loaded on one context, after its check passed for that device.
#[derive(Debug)]
pub struct LoadedModule<'m> {
    module: &'m Module,
    ctx: Arc<CudaContext>,
    cu_module: sys::CUmodule,
    plan: Arc<Plan>,
}

impl Module {
    /// Checks the context's device, then loads the embedded fatbin (`cuModuleLoadData`, no copy).
    /// Refused when no kernel of the module runs there; a module some of whose kernels run
    /// loads, and [`LoadedModule::function`] refuses the others.
    pub fn load(&self, ctx: &Arc<CudaContext>) -> Result<LoadedModule<'_>, RuntimeError> {
        let device = device_of(ctx)?;
        let plan = self.plan(&device);
        if plan.kernels.iter().all(|(_, r)| r.is_err()) {
            return Err(RuntimeError::Check(
                self.check(&device).err().unwrap_or_else(|| {
                    Box::new(CheckError {
                        plan: (*plan).clone(),
                        images: self.image_names(),
                        fix: String::new(),
                    })
                }),
            ));
        }
        ctx.bind_to_thread().map_err(cuda("binding the context"))?;
        // SAFETY: the fatbin is a 'static, 8-byte aligned image written by fatkit's writer and
        // validated by cuModuleLoadData; the context is current on this thread.
        let cu_module =
            unsafe { result::module::load_data(self.fatbin().as_ptr().cast::<c_void>()) }
                .map_err(cuda(format!("cuModuleLoadData(module '{}')", self.name())))?;
        Ok(LoadedModule {
            module: self,
            ctx: ctx.clone(),
            cu_module,
            plan,
        })
    }
}

/// A kernel ready to launch, with the image the check said the driver would use.
#[derive(Debug, Clone, Copy)]
pub struct Function {
    cu_function: sys::CUfunction,
    pub selected: Selected,
}

impl LoadedModule<'_> {
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The kernel, if the check found an image for it on this device; its error otherwise.
    pub fn function(&self, name: &str) -> Result<Function, RuntimeError> {
        let selected = match self.plan.kernel(name) {
            Some(Ok(s)) => *s,
            Some(Err(failure)) => {
                return Err(RuntimeError::KernelNotCovered(Box::new(NotCovered {
                    module: self.module.name(),
                    device: self.plan.device.clone(),
                    failure: failure.clone(),
                })))
            }
            None => {
                return Err(RuntimeError::UnknownKernel {
                    module: self.module.name(),
                    kernel: name.to_owned(),
                })
            }
        };
        let c_name = CString::new(name).map_err(|_| RuntimeError::UnknownKernel {
            module: self.module.name(),
            kernel: name.to_owned(),
        })?;
        self.ctx
            .bind_to_thread()
            .map_err(cuda("binding the context"))?;
        // SAFETY: `cu_module` is loaded and owned by `self`.
        let cu_function = unsafe { result::module::get_function(self.cu_module, c_name) }
            .map_err(cuda(format!("cuModuleGetFunction({name})")))?;
        Ok(Function {
            cu_function,
            selected,
        })
    }
}

impl Drop for LoadedModule<'_> {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: the module was loaded by `load` and is unloaded exactly once, here.
            let _ = unsafe { result::module::unload(self.cu_module) };
        }
    }
}

impl Function {
    /// Launches the kernel.
    ///
    /// # Safety
    /// `params` must point to one value per kernel parameter, of the kernel's parameter types,
    /// alive until the launch has been enqueued; device pointers among them must be valid for
    /// what the kernel does with them.
    pub unsafe fn launch(
        &self,
        stream: &CudaStream,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_mem_bytes: u32,
        params: &mut [*mut c_void],
    ) -> Result<(), RuntimeError> {
        // SAFETY: forwarded to the caller's contract above.
        unsafe {
            result::launch_kernel(
                self.cu_function,
                grid,
                block,
                shared_mem_bytes,
                stream.cu_stream(),
                params,
            )
        }
        .map_err(cuda("cuLaunchKernel"))
    }
}
