//! CUDA C++ a program compiles at run time with NVRTC (docs/ARCH_RULES.md section 12): a host
//! ELF file that links NVRTC (`DT_NEEDED libnvrtc.so.12`) or names it to load it
//! (`"libnvrtc.so"`, as cudarc and CuPy do), and holds kernel source as text (`__global__ void
//! name(`). What it runs is made on the user's machine by that NVRTC; the kernels are named, and
//! the NVRTC with them. Read in one pass of the file's bytes, never run.

use serde::Serialize;

/// CUDA C++ source held by a program that compiles it with NVRTC.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
pub struct NvrtcSource {
    /// The file (a path inside the input once hoisted).
    pub name: String,
    /// How it reaches NVRTC: `DT_NEEDED libnvrtc.so.12`, or `loads libnvrtc.so`.
    pub nvrtc: String,
    /// The CUDA major of the NVRTC it links, where its name says it.
    pub major: Option<u8>,
    /// The kernels its source text defines, each once, sorted.
    pub kernels: Vec<String>,
}

/// At most this many kernel names are kept of one file: the rest are counted by the set's
/// growth stopping there (a crafted file of a million `__global__`s costs one pass).
const MAX_KERNELS: usize = 4096;

/// The CUDA C++ source `data` (a host ELF file named `name`, whose libraries are `needed`:
/// `host::needed`) compiles with NVRTC, if it links or loads NVRTC and holds at least one
/// `__global__` definition.
pub fn read(name: &str, data: &[u8], needed: &[String]) -> Option<NvrtcSource> {
    let (nvrtc, major) = nvrtc_of(data, needed)?;
    let mut kernels = std::collections::BTreeSet::new();
    for at in memchr::memmem::find_iter(data, b"__global__") {
        if kernels.len() >= MAX_KERNELS {
            break;
        }
        if let Some(k) = kernel_after(data.get(at + b"__global__".len()..).unwrap_or_default()) {
            kernels.insert(k);
        }
    }
    (!kernels.is_empty()).then(|| NvrtcSource {
        name: name.to_owned(),
        nvrtc,
        major,
        kernels: kernels.into_iter().collect(),
    })
}

/// How a host file reaches NVRTC: a `DT_NEEDED` entry, else a name of it among its strings.
fn nvrtc_of(data: &[u8], needed: &[String]) -> Option<(String, Option<u8>)> {
    if let Some(lib) = needed.iter().find(|n| n.starts_with("libnvrtc.so")) {
        let major = lib
            .strip_prefix("libnvrtc.so.")
            .and_then(|v| v.parse().ok());
        return Some((format!("DT_NEEDED {lib}"), major));
    }
    if !data.starts_with(b"\x7fELF") {
        return None;
    }
    let at = memchr::memmem::find(data, b"libnvrtc.so")?;
    let rest = data.get(at..).unwrap_or_default();
    let end = rest
        .iter()
        .take(32)
        .position(|b| !(b.is_ascii_alphanumeric() || b"._-".contains(b)))
        .unwrap_or(rest.len().min(32));
    // `libnvrtc.so.` followed by a version made at run time: the name without its dot.
    let lib = String::from_utf8_lossy(rest.get(..end).unwrap_or_default())
        .trim_end_matches('.')
        .to_owned();
    let major = lib
        .strip_prefix("libnvrtc.so.")
        .and_then(|v| v.split('.').next()?.parse().ok());
    Some((format!("loads {lib}"), major))
}

/// The kernel name after `__global__`: optional qualifiers and a return type `void`, then an
/// identifier and `(`.
fn kernel_after(rest: &[u8]) -> Option<String> {
    let mut words = Vec::new();
    let mut at = 0usize;
    // At most a few words (`__launch_bounds__(..)` is skipped as one word), in 256 bytes.
    let text = rest.get(..256).unwrap_or(rest);
    while words.len() < 6 {
        while text.get(at).is_some_and(|b| b.is_ascii_whitespace()) {
            at += 1;
        }
        let start = at;
        while text
            .get(at)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
        {
            at += 1;
        }
        let word = text.get(start..at)?;
        if word.is_empty() {
            return None;
        }
        while text.get(at).is_some_and(|b| b.is_ascii_whitespace()) {
            at += 1;
        }
        // `__launch_bounds__(256)`, `__cluster_dims__(2, 1, 1)`: attributes, not the name.
        let attribute = word.starts_with(b"__") && word.ends_with(b"__");
        match text.get(at) {
            Some(b'(') if !attribute && words.contains(&b"void".as_slice()) => {
                return String::from_utf8(word.to_vec()).ok();
            }
            // `__launch_bounds__(256)`: its parentheses are skipped.
            Some(b'(') => at += text.get(at..)?.iter().position(|&b| b == b')')? + 1,
            _ => {}
        }
        words.push(word);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_in_source_text() {
        for (text, want) in [
            (" void saxpy(float a)", Some("saxpy")),
            (
                "\n  void __launch_bounds__(256) scale(float *x)",
                Some("scale"),
            ),
            (
                " __launch_bounds__(128) void scale(float *x)",
                Some("scale"),
            ),
            (" static void k2 (int n)", Some("k2")),
            (" void k3(int n)", Some("k3")),
            (" int not_a_kernel(", None),
            ("", None),
        ] {
            assert_eq!(kernel_after(text.as_bytes()).as_deref(), want, "{text:?}");
        }
    }

    #[test]
    fn a_program_that_loads_nvrtc() {
        let data = b"\x7fELF....libnvrtc.so.12\0...extern \"C\" __global__ void add(float *x) {}\0__global__ void mul(float *x)\0";
        let s = read("app", data, &[]).unwrap();
        assert_eq!(s.nvrtc, "loads libnvrtc.so.12");
        assert_eq!(s.major, Some(12));
        assert_eq!(s.kernels, ["add", "mul"]);
        // A name whose version is made at run time (`"libnvrtc.so." + version`): no dot left.
        let dotted = b"\x7fELF....libnvrtc.so.\0...__global__ void add(float *x)\0";
        assert_eq!(read("app", dotted, &[]).unwrap().nvrtc, "loads libnvrtc.so");
        // Source without NVRTC, or NVRTC without source: nothing.
        assert!(read("app", b"\x7fELF __global__ void add(float *x)", &[]).is_none());
        assert!(read("app", b"\x7fELF libnvrtc.so", &[]).is_none());
    }
}
