//! CUDA 12.4's nvcc without root: Debian's build of it (the packages of Debian 13's non-free
//! and main components, pinned by name and SHA-256 below), with the CUDA headers of the same
//! release from NVIDIA's wheels. NVIDIA publishes no CUDA 12 nvcc as wheels, CUDA 13 dropped
//! sm_70 and sm_72, and NVRTC compiles no host code: this is the one nvcc fatkit can provision
//! for the Volta targets of a host-code library (`Build::compile_library`). docs/BUILDS.md
//! ("Host-code libraries") says when it is installed and what it holds.
//!
//! The packages are downloaded and unpacked by Python (the one already needed for pip; its
//! `tarfile` reads the packages' xz-compressed data), their hashes checked before anything is
//! unpacked. Only regular files are taken: the packages' links point into `/usr` and `/etc`.

use std::fs;
use std::path::Path;
use std::process::Command;

use fatkit_arch::toolkit::CudaVersion;

use super::{io_err, ToolchainError};
use crate::command::{self, ToolError};

/// The release: Debian 13's `nvidia-cuda-toolkit`.
pub const DEBIAN_CUDA: CudaVersion = CudaVersion::new(12, 4);

/// Where the packages come from.
const MIRROR: &str = "https://deb.debian.org/debian/";

/// A package of Debian's archive: its path under [`MIRROR`] and its SHA-256, as Debian 13's
/// `Packages` index gives them.
struct DebPackage {
    path: &'static str,
    sha256: &'static str,
}

/// nvcc, cicc, cudafe++, ptxas, fatbinary, nvlink and libdevice (non-free); the CCCL headers
/// of the release (libcu++, CUB, Thrust; main), which `cuda_fp16.h` includes (`<nv/target>`).
const PACKAGES: [DebPackage; 4] = [
    DebPackage {
        path: "pool/non-free/n/nvidia-cuda-toolkit/nvidia-cuda-toolkit_12.4.131~12.4.1-2_amd64.deb",
        sha256: "cd5fe85aee38d108b315f408a688641478f2402622a10c677478eb7a6c4e5319",
    },
    DebPackage {
        path: "pool/main/c/cccl/libcu++-dev_2.3.2-2_all.deb",
        sha256: "30e911c1909265591b5ea793df0e49e56bed631238b68b3e75c97590c4985686",
    },
    DebPackage {
        path: "pool/main/c/cccl/libcub-dev_2.3.2-2_all.deb",
        sha256: "4a7e7c24ef2994140e47dba59507db60e281f968f17c18cf1cadc9c27c17c26b",
    },
    DebPackage {
        path: "pool/main/c/cccl/libthrust-dev_2.3.2-2_all.deb",
        sha256: "61fe44b65834efad9b079452ebec7396d4b37712d251421f4218b3bc652a3147",
    },
];

/// The release's headers from NVIDIA's wheels: the runtime's (`cuda_runtime.h`, `cuda_bf16.h`,
/// ...) and nvcc's own (`crt/`), which Debian ships in a 900 MB package with every library.
pub(crate) const HEADER_WHEELS: [&str; 2] = [
    "nvidia-cuda-runtime-cu12==12.4.127",
    "nvidia-cuda-nvcc-cu12==12.4.131",
];

/// Downloads, checks and unpacks every package into `dir/deb`, one after another.
const FETCH: &str = r#"
import hashlib, io, os, sys, tarfile, urllib.request
out = sys.argv[1]
for url, want in zip(sys.argv[2::2], sys.argv[3::2]):
    with urllib.request.urlopen(url, timeout=120) as r:
        data = r.read()
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        sys.exit(f"{url}: sha256 {got}, expected {want}")
    if data[:8] != b"!<arch>\n":
        sys.exit(f"{url}: not a Debian package")
    at = 8
    while at + 60 <= len(data):
        name = data[at:at + 16].decode().strip().rstrip("/")
        size = int(data[at + 48:at + 58])
        body = data[at + 60:at + 60 + size]
        at += 60 + size + (size & 1)
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(body)) as t:
                for m in t.getmembers():
                    parts = m.name.split("/")
                    if not m.isfile() or m.name.startswith("/") or ".." in parts:
                        continue
                    dest = os.path.join(out, *parts)
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    with t.extractfile(m) as src, open(dest, "wb") as dst:
                        dst.write(src.read())
                    os.chmod(dest, 0o755 if m.mode & 0o111 else 0o644)
"#;

/// The programs of Debian's package that nvcc runs, and where the package keeps them.
const PROGRAMS: [(&str, &str); 9] = [
    ("usr/lib/nvidia-cuda-toolkit/bin", "nvcc"),
    ("usr/lib/nvidia-cuda-toolkit/bin", "cicc"),
    ("usr/bin", "cudafe++"),
    ("usr/bin", "ptxas"),
    ("usr/bin", "fatbinary"),
    ("usr/bin", "nvlink"),
    ("usr/bin", "bin2c"),
    ("usr/bin", "nvprune"),
    ("usr/bin", "cuobjdump"),
];

/// nvcc reads `nvcc.profile` beside itself: Debian's names `/usr` paths; this one names the
/// install's own directories (`_HERE_` is nvcc's directory).
const PROFILE: &str = "TOP = $(_HERE_)/..\n\
NVVMIR_LIBRARY_DIR = $(TOP)/libdevice\n\
PATH += $(_HERE_):\n\
INCLUDES += \"-I$(TOP)/include\" $(_SPACE_)\n\
LIBRARIES =+ $(_SPACE_) \"-L$(TOP)/lib\"\n\
CUDAFE_FLAGS +=\n\
PTXAS_FLAGS +=\n";

/// Fills `tmp` with CUDA 12.4's nvcc under `tmp/cuda` (`bin/`, `include/`, `libdevice/`).
/// `pip` installs `HEADER_WHEELS` into a directory it is given.
pub fn fill(
    tmp: &Path,
    python: &Path,
    pip: &dyn Fn(&Path) -> Result<(), ToolchainError>,
) -> Result<(), ToolchainError> {
    if std::env::consts::ARCH != "x86_64" {
        return Err(ToolchainError::Unsupported(format!(
            "nvcc {DEBIAN_CUDA} on {} (Debian's build is provisioned for x86_64 only)",
            std::env::consts::ARCH
        )));
    }
    let deb = tmp.join("deb");
    let packages: Vec<(String, &str)> = PACKAGES
        .iter()
        .map(|p| (format!("{MIRROR}{}", p.path), p.sha256))
        .collect();
    command::run(
        &mut fetch_command(python, &deb, &packages),
        "downloading CUDA 12.4's nvcc needs network access to deb.debian.org; or install a CUDA 12.x toolkit and set CUDA_HOME",
    )?;
    let wheels = tmp.join("wheels");
    pip(&wheels)?;
    let root = tmp.join("cuda");
    let bin = root.join("bin");
    fs::create_dir_all(&bin).map_err(io_err(&bin))?;
    for (dir, name) in PROGRAMS {
        move_into(&deb.join(dir).join(name), &bin.join(name))?;
    }
    move_into(
        &deb.join("usr/lib/nvidia-cuda-toolkit/bin/crt"),
        &bin.join("crt"),
    )?;
    move_into(
        &deb.join("usr/lib/nvidia-cuda-toolkit/libdevice"),
        &root.join("libdevice"),
    )?;
    let profile = bin.join("nvcc.profile");
    fatkit_package::out::write_atomic(&profile, PROFILE.as_bytes()).map_err(io_err(&profile))?;
    // One include directory, as a toolkit has it: the wheels' headers and the CCCL packages'.
    let include = root.join("include");
    fs::create_dir_all(&include).map_err(io_err(&include))?;
    for dir in [
        wheels.join("nvidia/cuda_runtime/include"),
        wheels.join("nvidia/cuda_nvcc/include"),
        deb.join("usr/include"),
    ] {
        let read = fs::read_dir(&dir).map_err(io_err(&dir))?;
        for entry in read.flatten() {
            let name = entry.file_name();
            if name == "__init__.py" || name == "__pycache__" {
                continue;
            }
            move_into(&entry.path(), &include.join(&name))?;
        }
    }
    for gone in [&deb, &wheels] {
        fs::remove_dir_all(gone).map_err(io_err(gone))?;
    }
    Ok(())
}

/// Python downloading each `(url, sha256)` package, checking it and unpacking its regular
/// files into `into`.
fn fetch_command(python: &Path, into: &Path, packages: &[(String, &str)]) -> Command {
    let mut fetch = Command::new(python);
    fetch.arg("-c").arg(FETCH).arg(into);
    for (url, sha256) in packages {
        fetch.arg(url).arg(sha256);
    }
    fetch
}

/// Checks the install in `tmp`: nvcc runs and is release 12.4, and the header every kernel
/// with half-precision types needs is found.
pub fn verify(tmp: &Path) -> Result<(), ToolchainError> {
    let root = tmp.join("cuda");
    for needed in [
        root.join("include/cuda_runtime.h"),
        root.join("include/crt/host_config.h"),
        root.join("include/nv/target"),
        root.join("libdevice/libdevice.10.bc"),
    ] {
        if !needed.is_file() {
            return Err(ToolchainError::Tool(ToolError {
                command: format!("installing nvcc {DEBIAN_CUDA} from Debian's packages"),
                status: crate::command::ToolStatus::IncompleteInstall,
                output: format!("{} is missing", needed.display()),
                hint: "the packages' layout changed; report it".to_owned(),
            }));
        }
    }
    command::expect_version(
        &root.join("bin/nvcc"),
        &format!("release {DEBIAN_CUDA}"),
        &format!("CUDA {DEBIAN_CUDA}"),
    )?;
    Ok(())
}

/// Renames `from` to `to`, which must not exist yet (two packages never give one name).
fn move_into(from: &Path, to: &Path) -> Result<(), ToolchainError> {
    if to.exists() {
        return Err(io_err(to)(std::io::Error::other(format!(
            "two of the packages give {}",
            to.display()
        ))));
    }
    fatkit_package::out::rename_into_place(from, to).map_err(io_err(from))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A package made here (an `ar` archive with an xz-compressed `data.tar.xz`, as Debian
    /// makes them) is unpacked: its regular files, not its link nor a name climbing out of the
    /// directory; a package whose hash is not the pinned one is refused before anything is
    /// unpacked, naming it.
    #[test]
    fn packages_are_checked_then_only_their_files_unpacked() {
        let dir = std::env::temp_dir().join(format!("fatkit-debian-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let make = r##"
import io, sys, tarfile
def add(t, name, data=b"", kind=tarfile.REGTYPE, link="", mode=0o755):
    info = tarfile.TarInfo(name); info.type = kind; info.linkname = link
    info.size = len(data); info.mode = mode
    t.addfile(info, io.BytesIO(data))
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w:xz") as t:
    add(t, "./usr/bin/nvcc", b"#!/bin/sh\necho nvcc\n")
    add(t, "./usr/include/nv/target", b"// target\n", mode=0o644)
    add(t, "./usr/bin/nvcc.profile", kind=tarfile.SYMTYPE, link="/etc/nvcc.profile")
    add(t, "../escaped", b"no")
data = buf.getvalue()
def member(name, body):
    head = f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode()
    return head + body + (b"\n" if len(body) % 2 else b"")
open(sys.argv[1], "wb").write(b"!<arch>\n" + member("debian-binary", b"2.0\n") + member("data.tar.xz", data))
"##;
        let deb = dir.join("pkg.deb");
        let made = Command::new("python3")
            .arg("-c")
            .arg(make)
            .arg(&deb)
            .output()
            .unwrap();
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
        let bytes = fs::read(&deb).unwrap();
        let sha = {
            use sha2::Digest;
            sha2::Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        let url = format!("file://{}", deb.display());
        let out = dir.join("out");
        let wrong = "0".repeat(64);
        let refused = command::run(
            &mut fetch_command(Path::new("python3"), &out, &[(url.clone(), &wrong)]),
            "",
        )
        .unwrap_err();
        assert!(
            refused
                .output
                .contains(&format!("{url}: sha256 {sha}, expected {wrong}")),
            "{}",
            refused.output
        );
        assert!(!out.exists());
        command::run(
            &mut fetch_command(Path::new("python3"), &out, &[(url, &sha)]),
            "",
        )
        .unwrap();
        assert_eq!(
            fs::read_to_string(out.join("usr/bin/nvcc")).unwrap(),
            "#!/bin/sh\necho nvcc\n"
        );
        assert!(out.join("usr/include/nv/target").is_file());
        assert!(!out.join("usr/bin/nvcc.profile").exists());
        assert!(!dir.join("escaped").exists());
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(out.join("usr/bin/nvcc"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111);
        let _ = fs::remove_dir_all(&dir);
    }
}
