//! `--require`: the targets every kernel must run on, given as a profile (a name or a `.toml`)
//! or as a target list in any notation, resolved in one call.

use std::path::Path;

use fatkit_arch::notation::{self, Context};
use fatkit_arch::TargetSet;

use super::{load_spec, ProfileError};

/// Why a `--require` names no targets, worded for the person who gave it.
#[derive(Debug, thiserror::Error)]
pub enum RequireError {
    /// Empty or blank (`--require "$TARGETS"` with the variable unset must not pass
    /// everything).
    #[error("--require: empty; give a profile name (full) or a target list (\"sm_80 sm_90\"), or leave --require out")]
    Empty,
    /// A profile that could not be loaded.
    #[error(transparent)]
    Profile(ProfileError),
    /// A target list that did not parse.
    #[error("--require: {0}")]
    Notation(fatkit_arch::ParseError),
}

/// The targets `spec` names: a profile by name (letters, digits, `-` and `_`, not a target or
/// a notation's keyword) or by `.toml` path, loaded from `base` with the local profiles of
/// `dir`; else a target list in any notation ("sm_80 sm_90 compute_90", "8.0;9.0+PTX").
pub fn required(spec: &str, base: &Path, dir: Option<&Path>) -> Result<TargetSet, RequireError> {
    if spec.trim().is_empty() {
        return Err(RequireError::Empty);
    }
    let is_profile_name = spec
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !spec.starts_with(|c: char| c.is_ascii_digit())
        && !spec.starts_with("sm_")
        && !spec.starts_with("compute_")
        && !matches!(spec, "all" | "all-major" | "native");
    if spec.ends_with(".toml") || is_profile_name {
        return load_spec(spec, base, dir)
            .map(|p| p.targets)
            .map_err(RequireError::Profile);
    }
    notation::parse_any(spec, &Context::default()).map_err(RequireError::Notation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_by_name_or_a_list_in_any_notation() {
        let here = Path::new(".");
        let full = required("full", here, None).unwrap();
        assert_eq!(full, load_spec("full", here, None).unwrap().targets);
        let list = required("sm_80 sm_90 compute_90", here, None).unwrap();
        assert_eq!(list.to_string(), "sm_80 sm_90 compute_90");
        assert_eq!(required("8.0;9.0+PTX", here, None).unwrap(), list);
        assert!(matches!(
            required("  ", here, None),
            Err(RequireError::Empty)
        ));
        assert!(matches!(
            required("no-such-profile", here, None),
            Err(RequireError::Profile(_))
        ));
        assert!(matches!(
            required("sm_8x", here, None),
            Err(RequireError::Notation(_))
        ));
    }
}
