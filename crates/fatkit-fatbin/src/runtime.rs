//! The CUDA runtime a host file links, which needs a driver of its own major release before
//! any image is chosen (docs/ARCH_RULES.md section 3): the system's `libcudart.so.N` among an
//! ELF file's `DT_NEEDED` entries, the `cudart64_N.dll` a Windows PE image imports
//! ([`dll_version`]), or the record fatkit writes into each object of a host-code
//! library (section [`RECORD_SECTION`], one line per runtime: `static 13.2` for the runtime
//! linked in, `shared 13` for the system's), which linking carries into the binary. A static
//! runtime linked by other tools leaves no version behind, and is not reported.

use fatkit_arch::toolkit::CudaVersion;
use object::read::elf::ElfFile64;
use object::{Object, ObjectSection};
use serde::Serialize;

/// The non-allocated section fatkit's host-code libraries carry their runtime in.
pub const RECORD_SECTION: &str = ".fatkit.cudart";

/// Where a runtime read from [`RECORD_SECTION`] says it was read.
pub const RECORD: &str = "fatkit's record";

/// How the runtime is linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Linking {
    /// Linked into the file (`libcudart_static.a`): its release is the one that built it.
    Static,
    /// Loaded at run time (`libcudart.so.N`, `cudart64_N.dll`): any CUDA N.x runtime the
    /// system has.
    Shared,
}

/// One CUDA runtime a file links.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
pub struct LinkedRuntime {
    pub linking: Linking,
    /// The release (`13.2`); for a shared runtime, its major alone (`13.0`), or what its DLL's
    /// name says before CUDA 11 (`cudart64_101.dll`: `10.1`).
    pub cuda: CudaVersion,
    /// Where it was read: `fatkit's record`, `DT_NEEDED libcudart.so.12`,
    /// `import cudart64_12.dll`, `delay-load import cudart64_12.dll`.
    pub from: String,
}

impl LinkedRuntime {
    /// Whether fatkit wrote it (read from [`RECORD_SECTION`]): the file was built with fatkit.
    pub fn by_fatkit(&self) -> bool {
        self.from == RECORD
    }

    /// The CUDA level of driver it needs: its major's first (minor version compatibility,
    /// from CUDA 11 on); before CUDA 11, its own release.
    pub fn needs(&self) -> CudaVersion {
        match self.cuda.major {
            ..=10 => self.cuda,
            major => CudaVersion::new(major, 0),
        }
    }

    /// `the CUDA 13.2 runtime, linked statically`, `the system's CUDA 12 runtime
    /// (libcudart.so.12)`, `the system's CUDA 12 runtime (cudart64_12.dll)`.
    pub fn describe(&self) -> String {
        match self.linking {
            Linking::Static => format!("the CUDA {} runtime, linked statically", self.cuda),
            Linking::Shared => {
                let release = match self.cuda.major {
                    ..=10 => self.cuda.to_string(),
                    major => major.to_string(),
                };
                // The library it was read from: the last word of `from`, but for the record.
                let library = match self.from.rsplit_once(' ') {
                    Some((_, name)) if !self.by_fatkit() => name.to_owned(),
                    _ => format!("libcudart.so.{}", self.cuda.major),
                };
                format!("the system's CUDA {release} runtime ({library})")
            }
        }
    }

    /// The line fatkit records for it in [`RECORD_SECTION`].
    pub fn record(&self) -> String {
        match self.linking {
            Linking::Static => format!("static {}\n", self.cuda),
            Linking::Shared => format!("shared {}\n", self.cuda.major),
        }
    }
}

/// The runtimes `data` (a host ELF file or object, a PE image, whose libraries are `needed`:
/// `host::needed`) links, sorted, each once.
/// Anything unreadable reads as no runtime.
pub fn linked(data: &[u8], needed: &[String]) -> Vec<LinkedRuntime> {
    let mut out = Vec::new();
    if crate::pe::nt_headers_offset(data).is_some() {
        out.extend(crate::pe::imports(data).iter().filter_map(|import| {
            Some(LinkedRuntime {
                linking: Linking::Shared,
                cuda: dll_version(&import.name)?,
                from: match import.delayed {
                    false => format!("import {}", import.name),
                    true => format!("delay-load import {}", import.name),
                },
            })
        }));
        out.sort();
        out.dedup();
        return out;
    }
    let Ok(file) = ElfFile64::<object::Endianness>::parse(data) else {
        return out;
    };
    if let Some(bytes) = file
        .section_by_name(RECORD_SECTION)
        .and_then(|s| s.data().ok())
    {
        out.extend(
            String::from_utf8_lossy(bytes)
                .lines()
                .filter_map(parse_record),
        );
    }
    out.extend(
        needed
            .iter()
            .filter_map(|name| shared_major(name))
            .map(|major| LinkedRuntime {
                linking: Linking::Shared,
                cuda: CudaVersion::new(major, 0),
                from: format!("DT_NEEDED libcudart.so.{major}"),
            }),
    );
    out.sort();
    out.dedup();
    out
}

/// `static 13.2` or `shared 13`, as fatkit records them.
fn parse_record(line: &str) -> Option<LinkedRuntime> {
    let (how, version) = line.trim().split_once(' ')?;
    let (linking, cuda) = match how {
        "static" => (Linking::Static, version.parse().ok()?),
        "shared" => (Linking::Shared, CudaVersion::new(version.parse().ok()?, 0)),
        _ => return None,
    };
    Some(LinkedRuntime {
        linking,
        cuda,
        from: RECORD.to_owned(),
    })
}

/// `libcudart.so.12` -> 12.
fn shared_major(name: &str) -> Option<u8> {
    let rest = name.strip_prefix("libcudart.so.")?;
    rest.split('.')
        .next()?
        .parse()
        .ok()
        .filter(|m| *m > 0 && *m < 100)
}

/// The CUDA release a Windows runtime DLL's name says (docs/ARCH_RULES.md section 3):
/// `cudart64_12.dll` and `cudart64_13.dll` name a major alone (any 12.x, 13.x), as the 11.x
/// runtimes shared `cudart64_110.dll`; before them the name carried the release,
/// `cudart64_101.dll` for 10.1, `cudart64_92.dll` for 9.2. `cudart32_N.dll` is the 32-bit
/// runtime of the same releases. Names compare without case, as Windows does.
pub fn dll_version(name: &str) -> Option<CudaVersion> {
    let name = name.to_ascii_lowercase();
    let digits = name
        .strip_prefix("cudart64_")
        .or_else(|| name.strip_prefix("cudart32_"))?
        .strip_suffix(".dll")?;
    if digits.is_empty() || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u16 = digits.parse().ok()?;
    let (major, minor) = match (digits.len(), n) {
        // A major alone: CUDA 12 and later.
        (2, 12..=49) => (n, 0),
        // Major and minor run together: 5.0 (50) to 9.2 (92), 10.0 (100) to 11.x (110).
        (2, 50..=99) | (3, 100..=119) => (n / 10, n % 10),
        _ => return None,
    };
    Some(CudaVersion::new(
        u8::try_from(major).ok()?,
        u8::try_from(minor).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_sonames_are_read_and_anything_else_is_not() {
        let r = parse_record("static 13.2").unwrap();
        assert_eq!(
            (r.linking, r.cuda),
            (Linking::Static, CudaVersion::new(13, 2))
        );
        assert_eq!(r.needs(), CudaVersion::new(13, 0));
        assert_eq!(r.record(), "static 13.2\n");
        assert_eq!(r.describe(), "the CUDA 13.2 runtime, linked statically");
        let s = parse_record("shared 12").unwrap();
        assert_eq!(
            (s.linking, s.cuda),
            (Linking::Shared, CudaVersion::new(12, 0))
        );
        assert_eq!(s.record(), "shared 12\n");
        for bad in ["", "static", "dynamic 12", "static twelve", "shared 12.x"] {
            assert_eq!(parse_record(bad), None, "{bad:?}");
        }
        assert_eq!(shared_major("libcudart.so.12"), Some(12));
        assert_eq!(shared_major("libcudart.so.11.0"), Some(11));
        for other in [
            "libcudart.so",
            "libcudart.so.0",
            "libcuda.so.1",
            "libcudart_static.a",
        ] {
            assert_eq!(shared_major(other), None, "{other}");
        }
        assert!(linked(b"not an ELF file", &[]).is_empty());
        assert!(linked(b"MZ not a PE image", &[]).is_empty());
    }

    #[test]
    fn a_runtime_dll_name_says_its_release() {
        let v = |name: &str| dll_version(name).map(|v| v.to_string());
        for (name, cuda) in [
            ("cudart64_12.dll", "12.0"),
            ("cudart64_13.dll", "13.0"),
            ("CUDART64_12.DLL", "12.0"),
            ("cudart64_110.dll", "11.0"),
            ("cudart64_101.dll", "10.1"),
            ("cudart64_100.dll", "10.0"),
            ("cudart64_92.dll", "9.2"),
            ("cudart32_80.dll", "8.0"),
        ] {
            assert_eq!(v(name).as_deref(), Some(cuda), "{name}");
        }
        for other in [
            "cudart64.dll",
            "cudart64_.dll",
            "cudart64_1.dll",
            "cudart64_120.dll",
            "cudart64_1100.dll",
            "cudart64_12.so",
            "cudart64_+1.dll",
            "cudart64_1x.dll",
            "cublas64_12.dll",
            "libcudart.so.12",
        ] {
            assert_eq!(v(other), None, "{other}");
        }
        let shared = |cuda: CudaVersion, from: &str| LinkedRuntime {
            linking: Linking::Shared,
            cuda,
            from: from.to_owned(),
        };
        let r = shared(CudaVersion::new(12, 0), "import cudart64_12.dll");
        assert_eq!(r.needs(), CudaVersion::new(12, 0));
        assert_eq!(
            r.describe(),
            "the system's CUDA 12 runtime (cudart64_12.dll)"
        );
        // Before CUDA 11 there was no minor version compatibility: the release itself.
        let old = shared(
            CudaVersion::new(10, 1),
            "delay-load import cudart64_101.dll",
        );
        assert_eq!(old.needs(), CudaVersion::new(10, 1));
        assert_eq!(
            old.describe(),
            "the system's CUDA 10.1 runtime (cudart64_101.dll)"
        );
        let elf = shared(CudaVersion::new(12, 0), "DT_NEEDED libcudart.so.12");
        assert_eq!(
            elf.describe(),
            "the system's CUDA 12 runtime (libcudart.so.12)"
        );
    }
}
