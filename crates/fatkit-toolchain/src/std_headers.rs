//! The C and C++ standard headers NVRTC lacks, shipped with fatkit
//! (`crates/fatkit-toolchain/nvrtc-include/`, whose README.md says what each provides and why).
//! They are written once per content to `<build cache>/nvrtc-include/<hash>/`: a change to
//! them is a new directory, so a new `-I` in every NVRTC job's cache key.

use std::path::{Path, PathBuf};

/// `(file name, contents)` of every header.
pub(crate) const HEADERS: &[(&str, &str)] = &[
    (
        "__fatkit_std.h",
        include_str!("../nvrtc-include/__fatkit_std.h"),
    ),
    ("algorithm", include_str!("../nvrtc-include/algorithm")),
    ("array", include_str!("../nvrtc-include/array")),
    ("assert.h", include_str!("../nvrtc-include/assert.h")),
    ("atomic", include_str!("../nvrtc-include/atomic")),
    ("bit", include_str!("../nvrtc-include/bit")),
    ("cassert", include_str!("../nvrtc-include/cassert")),
    ("cfloat", include_str!("../nvrtc-include/cfloat")),
    ("cinttypes", include_str!("../nvrtc-include/cinttypes")),
    ("climits", include_str!("../nvrtc-include/climits")),
    ("cmath", include_str!("../nvrtc-include/cmath")),
    ("complex", include_str!("../nvrtc-include/complex")),
    ("cstddef", include_str!("../nvrtc-include/cstddef")),
    ("cstdint", include_str!("../nvrtc-include/cstdint")),
    ("cstdio", include_str!("../nvrtc-include/cstdio")),
    ("cstdlib", include_str!("../nvrtc-include/cstdlib")),
    ("cstring", include_str!("../nvrtc-include/cstring")),
    ("float.h", include_str!("../nvrtc-include/float.h")),
    ("functional", include_str!("../nvrtc-include/functional")),
    (
        "initializer_list",
        include_str!("../nvrtc-include/initializer_list"),
    ),
    ("inttypes.h", include_str!("../nvrtc-include/inttypes.h")),
    ("iterator", include_str!("../nvrtc-include/iterator")),
    ("limits", include_str!("../nvrtc-include/limits")),
    ("limits.h", include_str!("../nvrtc-include/limits.h")),
    ("math.h", include_str!("../nvrtc-include/math.h")),
    ("numeric", include_str!("../nvrtc-include/numeric")),
    ("optional", include_str!("../nvrtc-include/optional")),
    ("ratio", include_str!("../nvrtc-include/ratio")),
    ("span", include_str!("../nvrtc-include/span")),
    ("stdbool.h", include_str!("../nvrtc-include/stdbool.h")),
    ("stddef.h", include_str!("../nvrtc-include/stddef.h")),
    ("stdint.h", include_str!("../nvrtc-include/stdint.h")),
    ("stdio.h", include_str!("../nvrtc-include/stdio.h")),
    ("stdlib.h", include_str!("../nvrtc-include/stdlib.h")),
    ("string.h", include_str!("../nvrtc-include/string.h")),
    ("tuple", include_str!("../nvrtc-include/tuple")),
    ("type_traits", include_str!("../nvrtc-include/type_traits")),
    ("utility", include_str!("../nvrtc-include/utility")),
    ("variant", include_str!("../nvrtc-include/variant")),
];

/// The directory holding the headers under `cache_root`, written (atomically) if missing.
pub fn dir(cache_root: &Path) -> std::io::Result<PathBuf> {
    let mut hasher = blake3::Hasher::new();
    for (name, text) in HEADERS {
        hasher.update(name.as_bytes());
        hasher.update(&[0]);
        hasher.update(text.as_bytes());
        hasher.update(&[0]);
    }
    let hash = hasher.finalize().to_hex();
    let parent = cache_root.join("nvrtc-include");
    let dir = parent.join(hash.get(..16).unwrap_or(&hash));
    if dir.is_dir() {
        return Ok(dir);
    }
    std::fs::create_dir_all(&parent)?;
    let tmp = parent.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        hash.get(..8).unwrap_or("")
    ));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    for (name, text) in HEADERS {
        fatkit_package::out::write_atomic(&tmp.join(name), text.as_bytes())?;
    }
    match fatkit_package::out::rename_into_place(&tmp, &dir) {
        Ok(()) => Ok(dir),
        // Another process wrote the same contents first.
        Err(_) if dir.is_dir() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(dir)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file of nvrtc-include/ is shipped, and nothing else.
    #[test]
    fn every_header_is_listed() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("nvrtc-include");
        let mut on_disk: Vec<String> = std::fs::read_dir(&src)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "README.md")
            .collect();
        on_disk.sort();
        let listed: Vec<&str> = HEADERS.iter().map(|(n, _)| *n).collect();
        assert_eq!(on_disk, listed);
        let tmp = std::env::temp_dir().join(format!("fatkit-std-headers-{}", std::process::id()));
        let d = dir(&tmp).unwrap();
        assert_eq!(dir(&tmp).unwrap(), d);
        assert_eq!(
            std::fs::read_to_string(d.join("cstdint")).unwrap(),
            HEADERS.iter().find(|(n, _)| *n == "cstdint").unwrap().1
        );
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
