//! `audit PATH...`: which GPUs each kernel of a binary, wheel, directory, container image or Python environment
//! runs on, answered first per library, with the detail behind `--verbose`.
//!
//! Parse the arguments and resolve them once ([`Options`]), read and analyse the inputs with
//! [`fatkit_audit::analyse`] into one [`Audited`], render it as text (`text`) or as its JSON
//! data ([`Audited::json`]).

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use fatkit_arch::driver::DriverVersion;
use fatkit_arch::products::{self, Gpu};
use fatkit_arch::rules::Policy;
use fatkit_arch::TargetSet;

pub use fatkit_audit::read::read_file;
pub use fatkit_audit::{analyse, matrix_cells, Audited, AuditedInput, Options};

use crate::{Error, Outcome, Result};

#[derive(Debug, Args)]
pub struct Audit {
    /// What to read: fatbins, cubins, PTX, executables, shared libraries, objects, .a archives,
    /// wheels, directories (every file under them that holds device code), container images
    /// (a `docker save` tar, an OCI image layout or OCI archive: the filesystem their layers
    /// make), and locks before install (pylock.toml, uv.lock, requirements*.txt: the wheels
    /// they would install, fetched by hash into fatkit's wheel store)
    #[arg(value_name = "PATH", required_unless_present = "python")]
    files: Vec<PathBuf>,
    /// Audit an installed Python environment: its site-packages, NVIDIA's nvidia-* wheels
    /// included, found from its layout: nothing of the environment runs. PYTHON is an
    /// interpreter or an environment's directory [default: the Python fatkit was installed with
    /// (pip install fatkit), else python3 on PATH]
    #[arg(long, value_name = "PYTHON", num_args = 0..=1)]
    python: Option<Option<PathBuf>>,
    /// Require every kernel to run on these targets: a profile name or .toml, or a target list
    /// in any notation ("sm_80 sm_90 compute_90", "8.0;9.0+PTX")
    #[arg(long, value_name = "PROFILE|LIST")]
    require: Option<String>,
    /// Check against a GPU: a product name ("RTX 5090") or a compute capability ("12.0");
    /// given several times or comma-separated, a GPU x library matrix
    #[arg(long, value_name = "NAME|X.Y", value_delimiter = ',')]
    gpu: Vec<String>,
    /// A GPU x library matrix over a named set of GPUs (--matrix=SET): generations (Volta to
    /// Blackwell), datacenter, consumer [default: generations]
    #[arg(
        long,
        value_name = "SET",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "generations"
    )]
    matrix: Option<String>,
    /// The driver of the GPUs: as nvidia-smi prints it (570.86.10) or cuDriverGetVersion's integer (12080)
    #[arg(long, value_name = "VER")]
    driver: Option<String>,
    /// Count Jetson minors (7.2, 8.7, 11.0) as covered only by their own cubin
    #[arg(long)]
    strict_igpu: bool,
    /// Hold each library to every kernel: its architecture-specific parts built for other GPUs
    /// (kernel families a library like cuBLAS selects per GPU) fail it too
    #[arg(long)]
    strict: bool,
    /// Also list every image and the kernel x compute capability table of each file
    #[arg(long, short)]
    verbose: bool,
    /// Name every kernel that does not run, and every row of the kernel table
    #[arg(long)]
    all_kernels: bool,
    /// Local profiles that add to or override the built-ins, for --require [default: arch-profiles/ here or in a parent]
    #[arg(long, env = "FATKIT_PROFILES_DIR", value_name = "DIR")]
    profiles_dir: Option<PathBuf>,
    /// Print JSON for machines instead of text (schema: crates/fatkit-cli/docs/audit-json.md)
    #[arg(long)]
    json: bool,
    /// Print another document instead: cyclonedx, a kernel bill of materials (CycloneDX 1.6:
    /// distributions, libraries, targets, driver needs and each GPU's answer); sarif, the
    /// answers that are not a pass as SARIF 2.1.0 code-scanning results (a lock's at its lines)
    #[arg(long, value_name = "FORMAT", conflicts_with = "json")]
    format: Option<fatkit_audit::sarif::Document>,
    #[command(flatten)]
    lock: fatkit_lock::LockArgs,
}

/// The GPUs `--gpu` names, then those of the `--matrix` set.
pub(crate) fn gpus_of(gpu: &[String], matrix: Option<&str>) -> Result<Vec<Gpu>> {
    let mut gpus = gpu
        .iter()
        .map(|g| products::lookup(g))
        .collect::<Result<Vec<Gpu>, _>>()?;
    if let Some(set) = matrix {
        let names: Vec<&str> = products::SETS.iter().map(|(n, _, _)| *n).collect();
        gpus.extend(products::set(set).ok_or_else(|| Error::NoGpuSet {
            set: set.to_owned(),
            known: names.join(", "),
        })?);
    }
    // A GPU named twice (`--gpu H100 --matrix`) is asked about once.
    let mut seen = std::collections::HashSet::new();
    gpus.retain(|g| seen.insert(g.name.clone()));
    Ok(gpus)
}

impl Audit {
    pub fn run(self, out: &mut (dyn Write + Send)) -> Result<Outcome> {
        let options = self.options()?;
        let mut paths = self.files.clone();
        if let Some(python) = &self.python {
            let python = python
                .clone()
                .unwrap_or_else(fatkit_audit::environment::default_python);
            paths.extend(fatkit_audit::environment::site_packages(&python)?);
        }
        let audited = analyse(&paths, &options)?;
        let mut buffered = std::io::BufWriter::new(&mut *out);
        if let Some(document) = self.format {
            let here = std::env::current_dir().ok();
            serde_json::to_writer_pretty(&mut buffered, &document.of(&audited, here.as_deref()))
                .map_err(std::io::Error::from)?;
            writeln!(buffered)?;
        } else if self.json {
            serde_json::to_writer_pretty(&mut buffered, &audited.json(&options))
                .map_err(std::io::Error::from)?;
            writeln!(buffered)?;
        } else {
            fatkit_audit::text::write(&mut buffered, &audited, &options)?;
        }
        buffered.flush()?;
        match audited.exit() {
            fatkit_audit::Exit::Pass => Ok(Outcome::Ok),
            fatkit_audit::Exit::Finding => Ok(Outcome::Finding),
            fatkit_audit::Exit::Unknown => Err(Error::AuditUnknown),
            fatkit_audit::Exit::Invalid => Err(Error::AuditInvalid),
        }
    }

    fn options(&self) -> Result<Options> {
        let mut gpus = gpus_of(&self.gpu, self.matrix.as_deref())?;
        let mut driver: Option<DriverVersion> =
            crate::parse_option("--driver", self.driver.as_deref())?;
        if driver.is_some() && gpus.is_empty() {
            return Err(Error::DriverWithoutGpu);
        }
        // No GPU asked about: the ones in front of you, where a driver lists them.
        let mut here = false;
        if gpus.is_empty() {
            if let fatkit_audit::local::Visible::Gpus {
                gpus: found,
                driver: d,
            } = fatkit_audit::local::visible()
            {
                (gpus, driver, here) = (found, d, true);
            }
        }
        Ok(Options {
            policy: Policy {
                strict_igpu: self.strict_igpu,
            },
            required: self.required_targets()?,
            matrix: self.matrix.is_some() || gpus.len() > 1,
            gpus,
            driver,
            here,
            verbose: self.verbose,
            all_kernels: self.all_kernels,
            strict: self.strict,
            lock: self.lock.settings().map_err(fatkit_audit::Error::from)?,
            kernel_table: self.json || self.verbose || self.all_kernels,
        })
    }

    /// `--require`: a profile (by name or path) or a target list.
    fn required_targets(&self) -> Result<Option<TargetSet>> {
        let Some(spec) = self.require.as_deref() else {
            return Ok(None);
        };
        let cwd = std::env::current_dir()?;
        let dir = self.profiles_dir.as_deref();
        Ok(Some(fatkit_package::profile::required(spec, &cwd, dir)?))
    }
}
