//! Data serialised as its words: the JSON holds what the text says, made by the data's
//! `Display` once.

/// A value that has words (`Display`) serialised as them, or null.
pub(crate) fn as_words<T: std::fmt::Display, S: serde::Serializer>(
    value: &Option<T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(v) => s.collect_str(v),
        None => s.serialize_none(),
    }
}

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
}
