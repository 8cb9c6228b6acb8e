//! The real device: compute capability, driver and name through cudarc, and loading and
//! launching after the check has passed.
//!
//! Loading gives cudarc's own types: a [`LoadedModule`] holds an `Arc<CudaModule>` (`Send +
//! Sync`, unloaded when its last clone and function drop), [`LoadedModule::function`] a
//! `CudaFunction` for cudarc's `launch_builder`, and [`LoadedModule::kernel`] a [`Kernel`] whose
//! `launch` checks the arguments against the parameters recorded at build time.
//!
//! The only `unsafe` of fatkit lives here: CUDA driver calls, and the launch of a kernel whose
//! arguments were checked.
#![allow(unsafe_code)]

use std::fmt;
use std::sync::{Arc, OnceLock};

use cudarc::driver::{
    result, sys, CudaContext, CudaFunction, CudaModule, CudaStream, DriverError, LaunchConfig,
};
use cudarc::nvrtc::Ptx;
use fatkit_arch::toolkit::CudaVersion;

use crate::launch::{ArgumentMismatch, KernelArgs};
use crate::{CheckError, Device, DriverVersion, KernelFailure, Module, Plan, Selected};

/// A kernel without an image for a device.
#[derive(Debug, Clone)]
pub struct NotCovered {
    pub module: &'static str,
    pub device: Device,
    pub failure: KernelFailure,
}

/// `module 'm' on <GPU>: kernel 'k' cannot run on this GPU: ...; fix`.
impl fmt::Display for NotCovered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "module '{}' on {}: {}",
            self.module,
            self.device.describe(),
            self.failure
        )
    }
}

impl std::error::Error for NotCovered {}

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
    /// A launch's arguments do not fit the kernel's parameters; nothing reached the driver.
    Arguments(Box<ArgumentMismatch>),
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
            RuntimeError::KernelNotCovered(nc) => write!(f, "{nc}"),
            RuntimeError::UnknownKernel { module, kernel } => write!(f, "module '{module}' has no kernel '{kernel}'; the module's kernels are listed in its manifest"),
            RuntimeError::Arguments(e) => write!(f, "{e}"),
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

/// Every CUDA device: compute capability, driver, name. Asked of the driver once per process
/// (the devices a process sees do not change); later calls return the same list.
pub fn devices() -> Result<&'static [Device], RuntimeError> {
    static DEVICES: OnceLock<Vec<Device>> = OnceLock::new();
    if let Some(d) = DEVICES.get() {
        return Ok(d);
    }
    let found = enumerate()?;
    Ok(DEVICES.get_or_init(|| found))
}

fn enumerate() -> Result<Vec<Device>, RuntimeError> {
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
    for device in devices {
        for m in modules {
            m.check(device).map_err(RuntimeError::Check)?;
        }
    }
    Ok(devices.to_vec())
}

/// The device of a context.
pub fn device_of(ctx: &CudaContext) -> Result<&'static Device, RuntimeError> {
    devices()?
        .iter()
        .find(|d| d.ordinal == Some(ctx.ordinal()))
        .ok_or(RuntimeError::NoDevice)
}

/// A module loaded on one context, after its check passed for that device: cudarc's
/// `Arc<CudaModule>` with the plan. `Clone`, `Send` and `Sync`: keep it in a device struct or a
/// static; the module stays loaded while any clone, or any function taken from it, lives.
#[derive(Clone, Debug)]
pub struct LoadedModule {
    name: &'static str,
    cuda: Arc<CudaModule>,
    plan: Arc<Plan>,
    params: &'static [crate::ParamRow],
}

impl Module {
    /// Whether a launch of `kernel` with arguments `A` would be accepted: the check
    /// [`Kernel::launch`] makes, with no GPU needed (for a test of every launch a program makes).
    pub fn check_args<A: KernelArgs>(&self, kernel: &str) -> Result<(), RuntimeError> {
        if self.kernel_index(kernel).is_none() {
            return Err(RuntimeError::UnknownKernel {
                module: self.name(),
                kernel: kernel.to_owned(),
            });
        }
        crate::launch::check::<A>(self.name(), kernel, self.params(kernel))
            .map_err(RuntimeError::Arguments)
    }

    /// Checks the context's device, then loads the fatbin (validated when the [`Module`] was
    /// made) with cudarc. Refused when no kernel of the module runs there; a module some of
    /// whose kernels run loads, and [`LoadedModule::function`] refuses the others.
    ///
    /// The fatbin is copied once, for the duration of the call: cudarc makes a `CudaModule`
    /// only from an owned image, and the driver keeps its own copy of what it loads.
    pub fn load(&self, ctx: &Arc<CudaContext>) -> Result<LoadedModule, RuntimeError> {
        let device = device_of(ctx)?;
        let plan = self.plan(device);
        if plan.kernels.iter().all(|(_, r)| r.is_err()) {
            return Err(RuntimeError::Check(
                self.check(device).err().unwrap_or_else(|| {
                    Box::new(CheckError {
                        plan: (*plan).clone(),
                        images: self.image_names(),
                        // Every kernel is declared for other GPUs: nothing to load here.
                        fix: format!(
                            "module '{}' is built for other GPUs only, by its crate's declaration; load it only where `Module::check`'s plan says a kernel runs",
                            self.name()
                        ),
                    })
                }),
            ));
        }
        let cuda = ctx
            .load_module(Ptx::from_binary(self.fatbin().to_vec()))
            .map_err(cuda(format!("cuModuleLoadData(module '{}')", self.name())))?;
        Ok(LoadedModule {
            name: self.name(),
            cuda,
            plan,
            params: self.params,
        })
    }
}

impl LoadedModule {
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// cudarc's module.
    pub fn cuda_module(&self) -> &Arc<CudaModule> {
        &self.cuda
    }

    /// The image the check chose for `name`, or the error that says why it has none here.
    fn selected(&self, name: &str) -> Result<Selected, RuntimeError> {
        match self.plan.kernel(name) {
            Some(Ok(s)) => Ok(*s),
            Some(Err(failure)) => Err(RuntimeError::KernelNotCovered(Box::new(NotCovered {
                module: self.name,
                device: self.plan.device.clone(),
                failure: failure.clone(),
            }))),
            None => Err(RuntimeError::UnknownKernel {
                module: self.name,
                kernel: name.to_owned(),
            }),
        }
    }

    /// cudarc's function for `name`, if the check found an image for it on this device; its
    /// error otherwise. Launch it with `stream.launch_builder(&f)`, or take [`Self::kernel`]
    /// for a launch whose arguments are checked.
    pub fn function(&self, name: &str) -> Result<CudaFunction, RuntimeError> {
        self.checked_function(name).map(|(_, f)| f)
    }

    /// The image the check chose for `name` and cudarc's function for it.
    fn checked_function(&self, name: &str) -> Result<(Selected, CudaFunction), RuntimeError> {
        let selected = self.selected(name)?;
        let function = self
            .cuda
            .load_function(name)
            .map_err(cuda(format!("cuModuleGetFunction({name})")))?;
        Ok((selected, function))
    }

    /// The kernel `name`, checked for this device, with the parameters the build recorded:
    /// [`Kernel::launch`] takes a tuple of device buffers and scalars, and refuses one whose
    /// count or sizes do not fit before anything reaches the driver.
    pub fn kernel(&self, name: &str) -> Result<Kernel, RuntimeError> {
        let (selected, function) = self.checked_function(name)?;
        Ok(Kernel {
            module: self.name,
            name: name.to_owned(),
            function,
            params: crate::params_of(self.params, name),
            selected,
        })
    }
}

/// A kernel ready to launch: cudarc's function, the image the check said the driver would use,
/// and the parameters its images declare. `Clone`, `Send` and `Sync`.
#[derive(Clone, Debug)]
pub struct Kernel {
    module: &'static str,
    name: String,
    function: CudaFunction,
    params: Option<&'static [(u32, u32)]>,
    pub selected: Selected,
}

impl Kernel {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// cudarc's function, for its `launch_builder` (an `unsafe` launch, unchecked).
    pub fn function(&self) -> &CudaFunction {
        &self.function
    }

    /// The parameters, (offset, size) in bytes; `None` for a module that does not record them.
    pub fn params(&self) -> Option<&'static [(u32, u32)]> {
        self.params
    }

    /// Whether `A` fits the kernel's parameters: the error [`Self::launch`] would give, without
    /// launching.
    #[inline]
    pub fn check_args<A: KernelArgs>(&self) -> Result<(), RuntimeError> {
        crate::launch::check::<A>(self.module, &self.name, self.params)
            .map_err(RuntimeError::Arguments)
    }

    /// Launches the kernel on `stream` with `args`, a tuple of device buffers (`&CudaSlice`,
    /// `&mut CudaSlice`, views) and scalars (`i32`, `f32`, `usize`, ..., [`crate::launch::ByValue`]
    /// for a struct), after checking that their count and sizes are the kernel's parameters:
    /// a mismatch is [`RuntimeError::Arguments`], naming kernel, parameter and both sizes, and
    /// nothing reaches the driver.
    ///
    /// Safe because every argument is a value of the size the kernel reads, or a device buffer
    /// cudarc keeps alive and orders on `stream`; what the kernel does inside the buffers it is
    /// given (staying within their bounds) is the kernel's own contract, as with any launch.
    #[inline]
    pub fn launch<A: KernelArgs>(
        &self,
        stream: &CudaStream,
        cfg: LaunchConfig,
        mut args: A,
    ) -> Result<(), RuntimeError> {
        self.check_args::<A>()?;
        let mut builder = stream.launch_builder(&self.function);
        args.push_all(&mut builder);
        // SAFETY: the arguments are as many as the kernel's parameters and each is the size of
        // its parameter (checked above against the layout every image of the kernel shares);
        // each points at a value or a device pointer borrowed for the whole call.
        unsafe { builder.launch(cfg) }
            .map(|_| ())
            .map_err(cuda(format!("cuLaunchKernel({})", self.name)))
    }
}
