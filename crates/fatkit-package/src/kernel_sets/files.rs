//! Sources built for some targets of the profile only, by their author's declaration: a
//! source that needs sm_80 (`mma.sync` on bf16, `cp.async`, `ldmatrix` without an `#if` on
//! `__CUDA_ARCH__`) is compiled for the targets it is declared for and no others, and every
//! kernel of its module is declared for exactly those:
//!
//! - `[package.metadata.fatkit.files] "marlin*.cu" = { targets = "sm_80+" }`;
//! - `Build::file_targets("kernels/marlin*.cu", "sm_80+")`.
//!
//! A pattern without `/` is matched against the source's file name; with one, against its
//! path relative to the package (the crate, for a build script), `/`-separated.

use std::path::Path;

use fatkit_arch::TargetSet;

use super::{glob_match, targets_spec, RuleError};

/// One declaration: the sources matching `pattern` are built for `targets` only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRule {
    /// A file name or a path relative to the package, or a glob of one (`*` and `?`).
    pub pattern: String,
    /// The targets of the profile the sources are built for.
    pub targets: TargetSet,
    /// As the author wrote it, for messages and records: `targets = "sm_80+" (marlin*.cu)`.
    pub written: String,
}

impl FileRule {
    /// `pattern = { targets = SPEC }`, with SPEC as a kernel's: `"sm_80+"` or a list.
    pub fn targets(pattern: &str, spec: &str, profile: &TargetSet) -> Result<FileRule, RuleError> {
        check_file_pattern(pattern)?;
        let targets = targets_spec(spec, profile)?;
        Ok(FileRule {
            pattern: pattern.to_owned(),
            targets,
            written: format!("targets = \"{spec}\" ({pattern})"),
        })
    }

    /// Whether the rule speaks for `relative`, a source's path relative to the package.
    pub fn matches(&self, relative: &Path) -> bool {
        let whole: Vec<String> = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let subject = match self.pattern.contains('/') {
            true => whole.join("/"),
            false => whole.last().cloned().unwrap_or_default(),
        };
        let pattern = self.pattern.trim_start_matches("./");
        glob_match(pattern, &subject)
    }
}

/// A source pattern is a relative path (or a glob of one) of printable characters: it names
/// files, and is never passed to a compiler.
fn check_file_pattern(pattern: &str) -> Result<(), RuleError> {
    let ok = !pattern.trim().is_empty()
        && pattern.len() <= 1024
        && !pattern.starts_with('/')
        && !pattern.contains('\\')
        && !pattern.split('/').any(|part| part == "..")
        && pattern.chars().all(|c| !c.is_control());
    match ok {
        true => Ok(()),
        false => Err(RuleError::FilePattern(pattern.to_owned())),
    }
}

/// The one rule for `relative` among `rules`: the first matching it exactly, else the first
/// glob matching it.
pub fn rule_for<'a>(rules: &'a [FileRule], relative: &Path) -> Option<&'a FileRule> {
    let exact = |r: &&FileRule| !r.pattern.contains(['*', '?']);
    rules
        .iter()
        .filter(exact)
        .find(|r| r.matches(relative))
        .or_else(|| rules.iter().find(|r| r.matches(relative)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> TargetSet {
        fatkit_arch::notation::parse_any(
            "sm_70 sm_75 sm_80 sm_86 sm_90 compute_90",
            &Default::default(),
        )
        .unwrap()
    }

    #[test]
    fn names_match_file_names_and_paths_match_paths() {
        let p = profile();
        let by_name = FileRule::targets("marlin*.cu", "sm_80+", &p).unwrap();
        assert!(by_name.matches(Path::new("kernels/marlin/marlin_kernel.cu")));
        assert!(!by_name.matches(Path::new("kernels/hqq.cu")));
        let by_path = FileRule::targets("kernels/marlin/*.cu", "sm_80+", &p).unwrap();
        assert!(by_path.matches(Path::new("kernels/marlin/marlin_kernel.cu")));
        assert!(!by_path.matches(Path::new("other/marlin/marlin_kernel.cu")));
        let dotted = FileRule::targets("./kernels/*.cu", "sm_80+", &p).unwrap();
        assert!(dotted.matches(Path::new("kernels/a.cu")));
        assert_eq!(
            by_name.targets.to_string(),
            "sm_80 sm_86 sm_90 compute_90",
            "sm_80+ is every target of the profile from CC 8.0 up, PTX included"
        );
    }

    #[test]
    fn an_exact_name_wins_over_a_glob() {
        let p = profile();
        let rules = vec![
            FileRule::targets("*.cu", "sm_90+", &p).unwrap(),
            FileRule::targets("a.cu", "sm_80+", &p).unwrap(),
        ];
        assert_eq!(
            rule_for(&rules, Path::new("src/a.cu")).map(|r| r.pattern.as_str()),
            Some("a.cu")
        );
        assert_eq!(
            rule_for(&rules, Path::new("src/b.cu")).map(|r| r.pattern.as_str()),
            Some("*.cu")
        );
    }

    #[test]
    fn patterns_that_name_no_file_of_the_package_are_refused() {
        let p = profile();
        for bad in [
            "",
            " ",
            "/abs/a.cu",
            "../a.cu",
            "k/../a.cu",
            "a\\b.cu",
            "a\nb.cu",
        ] {
            assert!(
                matches!(
                    FileRule::targets(bad, "sm_80+", &p),
                    Err(RuleError::FilePattern(_))
                ),
                "{bad:?}"
            );
        }
        assert!(matches!(
            FileRule::targets("a.cu", "sm_100+", &p),
            Err(RuleError::NoneFrom { .. })
        ));
    }
}
