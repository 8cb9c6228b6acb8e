//! The check's answer: per kernel of a module, the image the driver will run on a device
//! ([`Selected`]) or why there is none ([`KernelFailure`]), as a [`Plan`]; and the one message
//! of a module whose kernels do not all run ([`CheckError`]).

use std::fmt;

use fatkit_arch::toolkit::PtxIsa;
use fatkit_arch::{load, Device, Target};

/// What the driver will run for one kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Selected {
    pub target: Target,
    /// The image is PTX, JIT-compiled at load.
    pub jit: bool,
    /// Set when the driver's support for the PTX ISA could not be established from the tables.
    pub unverified_ptx: Option<PtxIsa>,
}

/// Why one kernel has no image for a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelFailure {
    pub kernel: &'static str,
    /// The kernel as people read it: its C++ name demangled by the build (the generated
    /// `NAMES`), else `kernel`.
    pub shown: &'static str,
    /// CUDA's error number: 209 (no binary for the GPU), 222 (PTX too new for the driver),
    /// 500 (not in the image loaded); 0 for a kernel compiled out of it (the launch would
    /// succeed and do nothing: `error` is `FATKIT_KERNEL_COMPILED_OUT`).
    pub code: u32,
    pub error: &'static str,
    /// One line per image the kernel has, saying why it does not run.
    pub reasons: Vec<String>,
    /// What the PTX that fits the architecture needs of the driver, when the driver refused it.
    pub driver_needed: Option<fatkit_arch::driver::PtxRequirement>,
    /// The targets the kernel is declared for (`sm_80,sm_86,...`), when it is built for fewer
    /// than the module by design: this GPU is outside them, and the rest of the module runs.
    pub declared: Option<&'static str>,
}

/// `kernel 'k' cannot run on this GPU: CUDA_ERROR_NOT_FOUND (500): why; fix: ...`: what the
/// kernel's launch would return, why, and the fix its data points to.
impl fmt::Display for KernelFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kernel '{}' cannot run on this GPU: {} ({})",
            self.shown, self.error, self.code
        )?;
        if let Some(targets) = self.declared {
            write!(f, ": its source builds it for {targets} only")?;
        }
        for (i, reason) in self.reasons.iter().enumerate() {
            f.write_str(if i == 0 && self.declared.is_none() {
                ": "
            } else {
                ", "
            })?;
            f.write_str(reason)?;
        }
        f.write_str("; ")?;
        match (self.driver_needed, self.declared, self.code) {
            (Some(need), _, _) => write!(
                f,
                "update the NVIDIA driver ({need}), or use a build with a cubin for this GPU"
            ),
            (None, Some(targets), _) => write!(
                f,
                "launch it only on GPUs its targets ({targets}) serve; the rest of its module runs here"
            ),
            (None, None, code) if code == load::NOT_FOUND.0 => f.write_str(
                "use a build whose image for this GPU holds the kernel; if you build it, build the kernel for every target, or move it to a module of its own",
            ),
            (None, None, code) if code == load::COMPILED_OUT.0 => f.write_str(
                "use a build with the kernel's body for this GPU; if you build it, build the body for every target (the #if on __CUDA_ARCH__ around it), or declare the kernel for the targets that have it",
            ),
            (None, None, _) => f.write_str(
                "use a build made for this GPU's architecture; if you build it, add its sm_ target (or a lower compute_ PTX target) to the module's profile",
            ),
        }
    }
}

impl std::error::Error for KernelFailure {}

/// The check's answer for every kernel of a module on one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub module: &'static str,
    pub device: Device,
    /// In the order of the module's kernel list (sorted by name).
    pub kernels: Vec<(&'static str, Result<Selected, KernelFailure>)>,
}

impl Plan {
    /// The image for `kernel`, or why there is none.
    pub fn kernel(&self, kernel: &str) -> Option<&Result<Selected, KernelFailure>> {
        self.kernels
            .binary_search_by(|(k, _)| (*k).cmp(kernel))
            .ok()
            .and_then(|i| self.kernels.get(i))
            .map(|(_, r)| r)
    }

    /// The entry of the kernel at `index` (from [`Module::kernel_index`](crate::Module::kernel_index)): the per-launch path.
    #[inline]
    pub fn kernel_at(&self, index: usize) -> Option<&Result<Selected, KernelFailure>> {
        self.kernels.get(index).map(|(_, r)| r)
    }

    pub fn failures(&self) -> impl Iterator<Item = &KernelFailure> {
        self.kernels.iter().filter_map(|(_, r)| r.as_ref().err())
    }
}

/// A module whose kernels do not all run on a device: everything needed to understand and
/// fix it, in one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckError {
    pub plan: Plan,
    /// Every image of the module: `sm_80`, `compute_90 (PTX ISA 9.2)`.
    pub images: Vec<String>,
    pub fix: String,
}

impl fmt::Display for CheckError {
    /// One line that says what will not run where and why; then the kernels grouped by what
    /// their images say; then the fix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let failures: Vec<&KernelFailure> = self.plan.failures().collect();
        let n = self.plan.kernels.len();
        let what = if failures.len() == n {
            format!("any of its {n} kernel(s)")
        } else {
            format!("{} of its {n} kernel(s)", failures.len())
        };
        let need = failures.iter().find_map(|f| f.driver_needed);
        let not_found = failures.iter().all(|f| f.code == load::NOT_FOUND.0);
        let why = match need {
            _ if not_found => format!(
                "the driver loads one image of a module, and the one it loads on compute capability {} does not hold them",
                self.plan.device.cc
            ),
            Some(need) => format!("its driver is too old for the module's PTX ({need})"),
            None => format!(
                "the module was built for {}, none of which runs on compute capability {}",
                self.images.join(", "),
                self.plan.device.cc
            ),
        };
        writeln!(
            f,
            "module '{}' cannot run {what} on {}: {why}",
            self.plan.module,
            self.plan.device.describe()
        )?;
        // Kernels whose images fail alike are one group.
        let mut groups: Vec<(Vec<&str>, &KernelFailure)> = Vec::new();
        for fail in &failures {
            match groups.iter_mut().find(|(_, g)| {
                g.code == fail.code && g.reasons == fail.reasons && g.declared == fail.declared
            }) {
                Some((names, _)) => names.push(fail.shown),
                None => groups.push((vec![fail.shown], fail)),
            }
        }
        for (names, fail) in &groups {
            let shown: Vec<&str> = names.iter().take(6).copied().collect();
            let more = names.len().saturating_sub(shown.len());
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            writeln!(
                f,
                "  {}{more}: {} ({})",
                shown.join(", "),
                fail.error,
                fail.code
            )?;
            if let Some(targets) = fail.declared {
                writeln!(
                    f,
                    "    - declared for {targets} only by the kernel's source"
                )?;
            }
            for r in &fail.reasons {
                writeln!(f, "    - {r}")?;
            }
        }
        write!(f, "  fix: {}", self.fix)
    }
}

impl std::error::Error for CheckError {}
