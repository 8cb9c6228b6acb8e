//! The CUDA runtime a host ELF file links, which needs a driver of its own major release before
//! any image is chosen (docs/ARCH_RULES.md section 3): the system's `libcudart.so.N` among the
//! file's `DT_NEEDED` entries, or the record fatkit writes into each object of a host-code
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Linking {
    /// Linked into the file (`libcudart_static.a`): its release is the one that built it.
    Static,
    /// Loaded at run time (`libcudart.so.N`): any CUDA N.x runtime the system has.
    Shared,
}

/// One CUDA runtime a file links.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct LinkedRuntime {
    pub linking: Linking,
    /// The release (`13.2`); for a shared runtime, its major alone (`13.0`).
    pub cuda: CudaVersion,
    /// Where it was read: `fatkit's record`, `DT_NEEDED libcudart.so.12`.
    pub from: String,
}

impl LinkedRuntime {
    /// Whether fatkit wrote it (read from [`RECORD_SECTION`]): the file was built with fatkit.
    pub fn by_fatkit(&self) -> bool {
        self.from == RECORD
    }

    /// The CUDA level of driver it needs: its major's first (minor version compatibility).
    pub fn needs(&self) -> CudaVersion {
        CudaVersion::new(self.cuda.major, 0)
    }

    /// `the CUDA 13.2 runtime, linked statically`, `the system's CUDA 12 runtime (libcudart.so.12)`.
    pub fn describe(&self) -> String {
        match self.linking {
            Linking::Static => format!("the CUDA {} runtime, linked statically", self.cuda),
            Linking::Shared => format!(
                "the system's CUDA {} runtime (libcudart.so.{})",
                self.cuda.major, self.cuda.major
            ),
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

/// The runtimes `data` (a host ELF file or object) links, sorted, each once. Anything
/// unreadable reads as no runtime.
pub fn linked(data: &[u8]) -> Vec<LinkedRuntime> {
    let mut out = Vec::new();
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
        crate::host::needed(data)
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
        assert!(linked(b"not an ELF file").is_empty());
    }
}
