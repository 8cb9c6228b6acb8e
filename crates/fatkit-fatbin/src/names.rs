//! Kernel names as people read them: the one demangler of every message fatkit writes (build
//! errors and warnings, the declarations it suggests, audit text). Machine output (JSON,
//! manifests, records) keeps the symbol; these are words made from it.

/// A kernel's name as people read it: a C++ symbol demangled, without its parameters
/// (`_ZN4vllm18convert_fp8_kernelIfhLNS_18Fp8KVCacheDataTypeE0EEEvPT0_PKT_PKfll` ->
/// `vllm::convert_fp8_kernel<float, unsigned char, (vllm::Fp8KVCacheDataType)0>`); any other
/// name, or one the demangler refuses, as it is.
pub fn demangled(name: &str) -> String {
    let options = cpp_demangle::DemangleOptions::new()
        .no_params()
        .no_return_type()
        .recursion_limit(64);
    // Only a mangled symbol: `b` alone would demangle as the type `bool`.
    if !name.starts_with("_Z") {
        return name.to_owned();
    }
    cpp_demangle::Symbol::new(name)
        .ok()
        .and_then(|s| s.demangle_with_options(&options).ok())
        .unwrap_or_else(|| name.to_owned())
}

/// The template a demangled name instantiates, without its arguments
/// (`marlin::Marlin<256, 4, true>` -> `marlin::Marlin`); the name itself when it is no
/// template instantiation. Instantiations (and overloads, which demangle alike without their
/// parameters) of one kernel share it.
pub fn template_of(demangled: &str) -> &str {
    let Some(body) = demangled.strip_suffix('>') else {
        return demangled;
    };
    // The `<` that opens the last argument list: scan back, counting nested lists.
    let mut depth = 1usize;
    for (at, c) in body.char_indices().rev() {
        match c {
            '>' => depth += 1,
            '<' => {
                depth -= 1;
                if depth == 0 {
                    return body
                        .get(..at)
                        .filter(|s| !s.is_empty())
                        .unwrap_or(demangled);
                }
            }
            _ => {}
        }
    }
    demangled
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_demangle_and_others_stay() {
        assert_eq!(demangled("_Z12cswap_kerneliP6float2iS0_i"), "cswap_kernel");
        assert_eq!(
            demangled(
                "_ZN4vllm25fused_add_rms_norm_kernelIN3c108BFloat16ELi8ELb0EEEvPT_S4_PKS3_fii"
            ),
            "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8, false>"
        );
        assert_eq!(demangled("vectorAdd"), "vectorAdd");
        assert_eq!(demangled("b"), "b");
        assert_eq!(demangled("_Z"), "_Z");
    }

    #[test]
    fn templates_of_instantiations() {
        for (name, template) in [
            ("marlin::Marlin<256, 4, true>", "marlin::Marlin"),
            (
                "vllm::convert_fp8_kernel<float, unsigned char, (vllm::Fp8KVCacheDataType)0>",
                "vllm::convert_fp8_kernel",
            ),
            ("k<a<b<c>>, d>", "k"),
            ("cswap_kernel", "cswap_kernel"),
            ("ns::f<>", "ns::f"),
            // Unbalanced or empty before the list: the name as it is.
            ("a>", "a>"),
            ("<int>", "<int>"),
            ("", ""),
        ] {
            assert_eq!(template_of(name), template, "{name}");
        }
    }
}
