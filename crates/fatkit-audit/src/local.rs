//! The GPUs in front of you: what the NVIDIA driver of this machine lists (through
//! `nvidia-smi`, as `doctor` asks it), for `audit` with no `--gpu` (issue 44). `FATKIT_NVIDIA_SMI`
//! names another program to ask (a test's stand-in), or, empty, none: the answer is then that no
//! driver is visible.

use std::path::PathBuf;
use std::process::Command;

use fatkit_arch::driver::DriverVersion;
use fatkit_arch::products::{self, Gpu};
use fatkit_arch::Cc;

/// What this machine's driver shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Visible {
    /// No driver to ask (no `nvidia-smi`), or none lists a GPU.
    Nothing,
    /// The GPUs the driver lists (each distinct compute capability and name once) and its
    /// version, as `nvidia-smi` prints them.
    Gpus {
        gpus: Vec<Gpu>,
        driver: Option<DriverVersion>,
    },
}

/// The program asked: `FATKIT_NVIDIA_SMI`, else `nvidia-smi` on `PATH`; `None` when the
/// variable is set empty.
fn program() -> Option<PathBuf> {
    match std::env::var_os("FATKIT_NVIDIA_SMI") {
        Some(p) if p.is_empty() => None,
        Some(p) => Some(PathBuf::from(p)),
        None => Some(PathBuf::from("nvidia-smi")),
    }
}

/// What asking the driver gave (`audit` reads it, `doctor` shows it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Asked {
    /// No driver to ask: none named, or the program is not there or does not start.
    NoDriver,
    /// It ran and failed: the end of its output.
    Failed(String),
    /// Its answer: a line per GPU.
    Answered(String),
}

/// Asks the driver (`nvidia-smi --query-gpu=name,compute_cap,driver_version`) which GPUs this
/// machine has.
pub fn ask() -> Asked {
    let Some(program) = program() else {
        return Asked::NoDriver;
    };
    let mut smi = Command::new(program);
    smi.args([
        "--query-gpu=name,compute_cap,driver_version",
        "--format=csv,noheader",
    ]);
    match fatkit_run::run_with(&mut smi, fatkit_run::How::QUERY, "check the NVIDIA driver") {
        Ok(out) => Asked::Answered(fatkit_run::text_of(&out)),
        Err(e)
            if matches!(
                e.status,
                fatkit_run::ToolStatus::NotFound | fatkit_run::ToolStatus::CouldNotStart
            ) =>
        {
            Asked::NoDriver
        }
        Err(e) => Asked::Failed(e.output.trim().to_owned()),
    }
}

/// The GPUs the driver lists. A driver that cannot be asked, or answers with nothing fatkit
/// reads, is [`Visible::Nothing`]: the audit then answers as without a GPU.
pub fn visible() -> Visible {
    match ask() {
        Asked::Answered(text) => read(&text),
        Asked::NoDriver | Asked::Failed(_) => Visible::Nothing,
    }
}

/// `nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader` read: one
/// line per GPU, `NVIDIA H100 80GB HBM3, 9.0, 580.159.04`.
pub fn read(text: &str) -> Visible {
    let mut gpus: Vec<Gpu> = Vec::new();
    let mut driver = None;
    for line in text.lines() {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let [name, cc, version] = fields.as_slice() else {
            continue;
        };
        let Ok(cc) = cc.parse::<Cc>() else { continue };
        driver = driver.or_else(|| version.parse::<DriverVersion>().ok());
        // The product as the tables name it (`NVIDIA GeForce RTX 5090` is the RTX 5090), where
        // they know it at this compute capability; else the name the driver gives.
        let gpu = products::lookup(name)
            .ok()
            .filter(|g| g.cc == cc)
            .unwrap_or_else(|| Gpu {
                name: (*name).to_owned(),
                cc,
                products: Vec::new(),
            });
        if !gpus.iter().any(|g| g.cc == gpu.cc && g.name == gpu.name) {
            gpus.push(gpu);
        }
    }
    match gpus.is_empty() {
        true => Visible::Nothing,
        false => Visible::Gpus { gpus, driver },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_nvidia_smi_prints() {
        let v = read("NVIDIA H100 80GB HBM3, 9.0, 580.159.04\nNVIDIA H100 80GB HBM3, 9.0, 580.159.04\nNVIDIA GeForce RTX 5090, 12.0, 580.159.04\n");
        let Visible::Gpus { gpus, driver } = v else {
            panic!("no GPUs read")
        };
        let shown: Vec<(String, String)> = gpus
            .iter()
            .map(|g| (g.name.clone(), g.cc.to_string()))
            .collect();
        assert_eq!(
            shown,
            [
                ("H100".to_owned(), "9.0".to_owned()),
                ("GeForce RTX 5090".to_owned(), "12.0".to_owned())
            ]
        );
        assert_eq!(driver, "580.159.04".parse().ok());
        // No driver, an error text, a [N/A] capability: nothing visible.
        for text in [
            "",
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
            "Tesla K80, [N/A], 470.57.02",
        ] {
            assert_eq!(read(text), Visible::Nothing, "{text}");
        }
    }
}
