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

/// A kernel's name as people read it: fatkit-fatbin's one demangler.
pub use fatkit_fatbin::names::demangled;
