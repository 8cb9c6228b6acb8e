//! The fingerprint a generated module records of its fatbin (`FATBIN_FINGERPRINT` in
//! `<module>.rs`, written by fatkit-build) and `fatkit_runtime::Module` checks the embedded
//! fatbin against: the three files of a module are written one after the other, so a build
//! killed between them, or a full disk, could otherwise leave a `.rs` describing one fatbin
//! beside another. Not a cryptographic hash: it tells a build's output from another build's,
//! it does not resist a forger (who could edit the `.rs` as well).

/// FNV-1a over the bytes' little-endian 64-bit words, then the tail bytes and the length:
/// a few GB/s, so checking a module at start-up costs microseconds per MB.
pub fn fingerprint(bytes: &[u8]) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01B3;
    let mut hash: u64 = 0xCBF2_9CE4_8422_2325;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        hash = (hash ^ u64::from_le_bytes(w)).wrapping_mul(PRIME);
    }
    for &b in words.remainder() {
        hash = (hash ^ u64::from(b)).wrapping_mul(PRIME);
    }
    (hash ^ bytes.len() as u64).wrapping_mul(PRIME)
}

#[cfg(test)]
mod tests {
    use super::fingerprint;

    #[test]
    fn differs_for_any_byte_and_length() {
        let a = fingerprint(b"0123456789abcdef-");
        assert_ne!(a, fingerprint(b"0123456789abcdef+"));
        assert_ne!(a, fingerprint(b"1123456789abcdef-"));
        assert_ne!(fingerprint(b""), fingerprint(b"\0"));
        assert_ne!(fingerprint(&[0; 8]), fingerprint(&[0; 16]));
        assert_eq!(a, fingerprint(b"0123456789abcdef-"));
    }
}
