//! Kernel arguments for [`crate::cuda::Kernel::launch`]: a tuple of device buffers and scalars,
//! whose count and sizes are checked against the parameters the build read from the kernel's
//! images before anything reaches the driver.
//!
//! ```ignore
//! let saxpy = loaded.kernel("saxpy")?;                 // saxpy(int n, float a, const float* x, float* y)
//! saxpy.launch(&stream, cfg, (n, 2.0f32, &x, &mut y))?; // checked: 4 parameters of 4, 4, 8, 8 bytes
//! ```

use std::fmt;

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, DeviceRepr, LaunchArgs, PushKernelArg};

/// One kernel argument: what it occupies in the kernel's parameter buffer, and how it is handed
/// to cudarc's launch builder.
pub trait KernelArg {
    /// Bytes the argument occupies: what the kernel's parameter must be.
    const SIZE: usize;
    /// Pushes the argument onto cudarc's builder (which records, for a device buffer, the
    /// events that order the launch after earlier writes).
    fn push<'a>(&'a mut self, builder: &mut LaunchArgs<'a>);
    /// For messages: the argument's Rust type.
    fn type_name() -> &'static str {
        std::any::type_name::<Self>()
    }
}

macro_rules! scalar {
    ($($t:ty),*) => {$(
        impl KernelArg for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn push<'a>(&'a mut self, builder: &mut LaunchArgs<'a>) {
                builder.arg(&*self);
            }
        }
    )*};
}
scalar!(bool, i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize, f32, f64);

/// A device pointer in the parameter buffer.
const POINTER: usize = std::mem::size_of::<cudarc::driver::sys::CUdeviceptr>();

impl<T> KernelArg for &CudaSlice<T> {
    const SIZE: usize = POINTER;
    #[inline(always)]
    fn push<'a>(&'a mut self, builder: &mut LaunchArgs<'a>) {
        builder.arg(*self);
    }
}

impl<T> KernelArg for &mut CudaSlice<T> {
    const SIZE: usize = POINTER;
    #[inline(always)]
    fn push<'a>(&'a mut self, builder: &mut LaunchArgs<'a>) {
        builder.arg(&mut **self);
    }
}

impl<T> KernelArg for &CudaView<'_, T> {
    const SIZE: usize = POINTER;
    #[inline(always)]
    fn push<'a>(&'a mut self, builder: &mut LaunchArgs<'a>) {
        builder.arg(*self);
    }
}

impl<T> KernelArg for &mut CudaViewMut<'_, T> {
    const SIZE: usize = POINTER;
    #[inline(always)]
    fn push<'a>(&'a mut self, builder: &mut LaunchArgs<'a>) {
        builder.arg(&mut **self);
    }
}

/// A plain-data value passed by value, such as a parameter struct shared with the kernel
/// through a header (`SaxpyParams`): `ByValue(params)`. `T` implements cudarc's `DeviceRepr`,
/// whose contract (the type has the layout the kernel expects) its author vouches for once, at
/// the type's definition.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ByValue<T>(pub T);

impl<T: DeviceRepr> KernelArg for ByValue<T> {
    const SIZE: usize = std::mem::size_of::<T>();
    #[inline(always)]
    fn push<'a>(&'a mut self, builder: &mut LaunchArgs<'a>) {
        builder.arg(&self.0);
    }
    fn type_name() -> &'static str {
        std::any::type_name::<T>()
    }
}

/// The arguments of one launch: a tuple of [`KernelArg`]s (`()` for none).
pub trait KernelArgs {
    /// Each argument's size, in order.
    const SIZES: &'static [usize];
    /// Each argument's Rust type, for messages.
    fn type_names() -> Vec<&'static str>;
    fn push_all<'a>(&'a mut self, builder: &mut LaunchArgs<'a>);
}

impl KernelArgs for () {
    const SIZES: &'static [usize] = &[];
    fn type_names() -> Vec<&'static str> {
        Vec::new()
    }
    #[inline(always)]
    fn push_all<'a>(&'a mut self, _: &mut LaunchArgs<'a>) {}
}

macro_rules! tuple {
    ($($name:ident $idx:tt),+) => {
        impl<$($name: KernelArg),+> KernelArgs for ($($name,)+) {
            const SIZES: &'static [usize] = &[$($name::SIZE),+];
            fn type_names() -> Vec<&'static str> {
                vec![$($name::type_name()),+]
            }
            #[inline(always)]
            fn push_all<'a>(&'a mut self, builder: &mut LaunchArgs<'a>) {
                $(self.$idx.push(builder);)+
            }
        }
    };
}
tuple!(A 0);
tuple!(A 0, B 1);
tuple!(A 0, B 1, C 2);
tuple!(A 0, B 1, C 2, D 3);
tuple!(A 0, B 1, C 2, D 3, E 4);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14);
tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15);

/// A launch whose arguments do not fit the kernel's parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgumentMismatch {
    pub module: &'static str,
    pub kernel: String,
    /// The kernel's parameters, (offset, size); `None` when the module does not record them.
    pub expected: Option<&'static [(u32, u32)]>,
    /// The launch's arguments: (size, Rust type).
    pub given: Vec<(usize, &'static str)>,
}

/// Whether `A` fits the parameters `params` of `kernel`: `Ok`, or the mismatch that names
/// kernel, parameter and both sizes. `None` (parameters not recorded) never fits.
#[inline]
pub fn check<A: KernelArgs>(
    module: &'static str,
    kernel: &str,
    params: Option<&'static [(u32, u32)]>,
) -> Result<(), Box<ArgumentMismatch>> {
    match params {
        Some(p) if ArgumentMismatch::fits::<A>(p) => Ok(()),
        expected => Err(Box::new(ArgumentMismatch {
            module,
            kernel: kernel.to_owned(),
            expected,
            given: A::SIZES.iter().copied().zip(A::type_names()).collect(),
        })),
    }
}

impl ArgumentMismatch {
    /// Whether `A` fits `params`: the same count, each of the same size. Only the sizes
    /// matter: the driver copies each parameter's size from the pointer it is handed.
    #[inline]
    pub fn fits<A: KernelArgs>(params: &[(u32, u32)]) -> bool {
        A::SIZES.len() == params.len()
            && A::SIZES
                .iter()
                .zip(params)
                .all(|(&given, &(_, size))| given == size as usize)
    }
}

impl fmt::Display for ArgumentMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (m, k) = (self.module, &self.kernel);
        let Some(expected) = self.expected else {
            return write!(
                f,
                "kernel '{k}' of module '{m}': its parameters are not recorded (the module was built by an older fatkit), so the launch cannot be checked; rebuild the module's kernels"
            );
        };
        let sizes = |v: Vec<String>| {
            if v.is_empty() {
                "none".to_owned()
            } else {
                v.join(", ")
            }
        };
        let want = sizes(expected.iter().map(|(_, s)| s.to_string()).collect());
        let got = sizes(
            self.given
                .iter()
                .map(|(s, t)| format!("{s} ({t})"))
                .collect(),
        );
        if expected.len() != self.given.len() {
            return write!(
                f,
                "kernel '{k}' of module '{m}' takes {} parameter(s), the launch gives {}: expected sizes {want}; given {got}",
                expected.len(),
                self.given.len()
            );
        }
        let first = expected
            .iter()
            .zip(&self.given)
            .position(|((_, want), (got, _))| *want as usize != *got)
            .unwrap_or(0);
        let ((offset, size), (got_size, got_type)) = (
            expected.get(first).copied().unwrap_or_default(),
            self.given.get(first).copied().unwrap_or((0, "?")),
        );
        write!(
            f,
            "kernel '{k}' of module '{m}': parameter {first} (at byte {offset}) is {size} bytes, the launch gives {got_size} ({got_type}); expected sizes {want}; given {}",
            sizes(self.given.iter().map(|(s, _)| s.to_string()).collect())
        )
    }
}

impl std::error::Error for ArgumentMismatch {}
