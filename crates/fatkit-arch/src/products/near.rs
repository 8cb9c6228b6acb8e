//! How far a name typed is from a GPU's name: a typo one slip from a name suggests it.

use super::{Product, PRODUCTS};

/// The products one slip from `query` (two for a longer one), letters and digits compared.
pub(super) fn one_slip(query: &str) -> Vec<&'static Product> {
    let typed = squeezed(query);
    let slips = if typed.len() >= 6 { 2 } else { 1 };
    PRODUCTS
        .iter()
        .filter(|p| edits(&typed, &squeezed(p.name)) <= slips)
        .collect()
}

/// A name's letters and digits, lowercase: what a typo is counted on.
fn squeezed(name: &str) -> Vec<u8> {
    name.bytes()
        .filter(u8::is_ascii_alphanumeric)
        .map(|b| b.to_ascii_lowercase())
        .collect()
}

/// The edit distance of two short names (insertions, deletions, substitutions).
fn edits(a: &[u8], b: &[u8]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row.first().copied().unwrap_or(0);
        if let Some(first) = row.first_mut() {
            *first = i + 1;
        }
        for (j, cb) in b.iter().enumerate() {
            let above = row.get(j + 1).copied().unwrap_or(usize::MAX);
            let left = row.get(j).copied().unwrap_or(usize::MAX);
            let best = (diagonal + usize::from(ca != cb))
                .min(above.saturating_add(1))
                .min(left.saturating_add(1));
            diagonal = above;
            if let Some(cell) = row.get_mut(j + 1) {
                *cell = best;
            }
        }
    }
    row.last().copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_of_a_name_suggests_the_names_it_is_one_slip_from() {
        let e = super::super::lookup("A10O").unwrap_err().to_string();
        assert!(e.contains("did you mean A10 (8.6), A100 (8.0)?"), "{e}");
        assert_eq!(edits(b"a10o", b"a100"), 1);
        assert_eq!(edits(b"kitten", b"sitting"), 3);
        assert_eq!(edits(b"", b"ab"), 2);
    }
}
