//! What makes a library of the host objects: the kernels each stub registers, the CUDA runtime
//! to link, and binutils' `objcopy` (the module's fatbin in each object) and `ar`.

use std::path::{Path, PathBuf};
use std::process::Command;

use fatkit_arch::toolkit::CudaVersion;

use super::Cudart;
use crate::pipeline::{self, BuildError};
use fatkit_toolchain::command;
use fatkit_toolchain::Nvcc;

/// The kernels the host stub of `object` registers: those of the one fatbin in its
/// `.nv_fatbin` section, read as `audit` reads them (every loadable image's).
pub(super) fn registered_kernels(object: &Path) -> Result<Vec<String>, BuildError> {
    let data = fatkit_read::read_limited(object, fatkit_read::MAX_FILE)
        .map_err(pipeline::io_err(object))?;
    let report = fatkit_fatbin::inspect::inspect(
        &object.display().to_string(),
        &data,
        fatkit_fatbin::inspect::Depth::Kernels,
        &fatkit_fatbin::Limits::default(),
    );
    if let Some(err) = report.all_errors().first() {
        return Err(crate::refused::Refused::HostFatbin {
            object: object.to_owned(),
            error: err.to_string(),
        }
        .into());
    }
    if report.containers.len() != 1 {
        return Err(crate::refused::Refused::FatbinCount {
            object: object.to_owned(),
            count: report.containers.len(),
        }
        .into());
    }
    // The images the driver may load, read whole and with a target, as `audit` takes them.
    let mut kernels: Vec<String> = report
        .loaded_images()
        .into_iter()
        .map(|(_, _, e)| e)
        .filter(|e| e.error.is_none() && e.target.is_some())
        .flat_map(|e| e.kernels.iter().cloned())
        .collect();
    kernels.sort();
    kernels.dedup();
    Ok(kernels)
}

/// The directory and the `cargo:rustc-link-lib` line of the runtime `cudart` of `nvcc`
/// (release `version`): `libcudart_static.a`, or the shared `libcudart.so` (where only the
/// versioned `libcudart.so.13` is there, as in NVIDIA's wheels, that file by name).
pub(super) fn runtime_library(
    nvcc: &Nvcc,
    version: CudaVersion,
    cudart: Cudart,
) -> Result<(PathBuf, String), BuildError> {
    let dirs = runtime_dirs(nvcc);
    let versioned = format!("libcudart.so.{}", version.major);
    let files: Vec<&str> = match cudart {
        Cudart::Static => vec!["libcudart_static.a"],
        Cudart::Shared => vec!["libcudart.so", versioned.as_str()],
    };
    let line = |file: &str| match file {
        "libcudart_static.a" => "cargo:rustc-link-lib=static=cudart_static".to_owned(),
        "libcudart.so" => "cargo:rustc-link-lib=dylib=cudart".to_owned(),
        _ => format!("cargo:rustc-link-lib=dylib:+verbatim={file}"),
    };
    for d in &dirs {
        for f in &files {
            if d.join(f).is_file() {
                return Ok((d.clone(), line(f)));
            }
        }
    }
    Err(crate::refused::Refused::NoCudart {
        files: files.join(" or "),
        nvcc: nvcc.nvcc(),
        dirs: dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    }
    .into())
}

/// Where an nvcc installation keeps its runtime libraries.
fn runtime_dirs(nvcc: &Nvcc) -> Vec<PathBuf> {
    let mut dirs = vec![
        nvcc.root.join("lib64"),
        nvcc.root.join("lib"),
        nvcc.root.join("targets/x86_64-linux/lib"),
        nvcc.root.join("targets/sbsa-linux/lib"),
        nvcc.root.join("targets/aarch64-linux/lib"),
    ];
    // Debian's and Ubuntu's nvidia-cuda-toolkit put it with the system's libraries.
    if nvcc.root.starts_with("/usr") {
        dirs.push(PathBuf::from("/usr/lib/x86_64-linux-gnu"));
        dirs.push(PathBuf::from("/usr/lib/aarch64-linux-gnu"));
    }
    dirs
}

/// The section of a host object holding its module's declaration record
/// (`fatkit_arch::declared`): `audit` and `package` find the record in the final binary by its
/// text, wherever it lies.
pub(crate) const DECLARED_SECTION: &str = ".fatkit.declared";

/// binutils' `objcopy` and `ar`, found before anything compiles.
pub(super) struct BinTools {
    objcopy: PathBuf,
    ar: PathBuf,
}

impl BinTools {
    pub(super) fn find() -> Result<BinTools, BuildError> {
        let find = |var: &'static str, name: &'static str, job: &'static str| {
            std::env::var_os(var)
                .map(PathBuf::from)
                .or_else(|| command::on_path(name))
                .ok_or_else(|| {
                    BuildError::from(crate::refused::Refused::NoBinTool { name, job, var })
                })
        };
        Ok(BinTools {
            objcopy: find(
                "OBJCOPY",
                "objcopy",
                "put every target's images into the host object",
            )?,
            ar: find("AR", "ar", "archive the host objects")?,
        })
    }

    /// Replaces `object`'s `.nv_fatbin` section with `fatbin`, defines the global `symbol` at
    /// its start (the generated module's `FATBIN`), and adds the runtime `record`
    /// ([`fatkit_fatbin::runtime::RECORD_SECTION`]) and the module's `declared` record
    /// ([`DECLARED_SECTION`]): sections not loaded, which linking and `strip` keep, so the
    /// final binary carries both whether or not the crate includes the generated module.
    pub(super) fn replace_fatbin(
        &self,
        object: &Path,
        fatbin: &Path,
        symbol: &str,
        (record, declared): (&Path, &Path),
    ) -> Result<(), BuildError> {
        let mut cmd = Command::new(&self.objcopy);
        cmd.arg(format!("--update-section=.nv_fatbin={}", fatbin.display()))
            .arg(format!("--add-symbol={symbol}=.nv_fatbin:0,global,object"))
            .arg(format!(
                "--add-section={}={}",
                fatkit_fatbin::runtime::RECORD_SECTION,
                record.display()
            ))
            .arg(format!(
                "--add-section={DECLARED_SECTION}={}",
                declared.display()
            ))
            .arg(object);
        command::run(
            &mut cmd,
            "objcopy could not replace the host object's fatbin",
        )
        .map_err(|source| BuildError::ToolOn {
            path: object.to_owned(),
            source,
        })?;
        Ok(())
    }

    /// Writes `path` from `objects`: a temporary archive, renamed into place.
    pub(super) fn archive(&self, path: &Path, objects: &[PathBuf]) -> Result<(), BuildError> {
        let tmp = fatkit_package::out::temporary_path(path);
        let _ = std::fs::remove_file(&tmp);
        let mut cmd = Command::new(&self.ar);
        cmd.arg("crs").arg(&tmp).args(objects);
        let res = command::run(&mut cmd, "ar could not write the library");
        if let Err(e) = res {
            let _ = std::fs::remove_file(&tmp);
            return Err(BuildError::ToolOn {
                path: path.to_owned(),
                source: e,
            });
        }
        fatkit_package::out::rename_into_place(&tmp, path).map_err(pipeline::io_err(path))
    }
}
