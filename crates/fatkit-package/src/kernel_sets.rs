//! Kernels present only for some targets by the source's own design (a bf16 kernel under
//! `#if __CUDA_ARCH__ >= 800`), declared by the crate author:
//!
//! - per kernel or glob pattern, the targets it is built for: `[package.metadata.fatkit.kernels]
//!   "*_bf16" = { targets = "sm_80+" }` or `legacy = { exclude = ["sm_70"] }`;
//!   `Build::kernel_targets("*_bf16", "sm_80+")`;
//! - module-wide "as built": `kernel_sets = "as-built"`, `Build::kernel_sets_as_built()`: each
//!   kernel's targets are whatever the compilers produced.
//!
//! The build checks every image against the declarations ([`KernelSets::check`]); a declared
//! set travels in the manifest and the generated module ([`record`]), where the runtime check,
//! `audit --require` and `package` read it.

use std::collections::BTreeMap;
use std::fmt;

use fatkit_arch::{Cc, Target, TargetSet};

mod files;
pub use files::{rule_for, FileRule};

/// One declaration: the kernels matching `pattern` are built for `targets` only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelRule {
    /// A kernel name, or a glob with `*` (any run of characters) and `?` (one character):
    /// its symbol (a C identifier) or its demangled C++ name, whole
    /// (`marlin::Marlin<256, 4, true>`) or without template arguments (`marlin::Marlin`: every
    /// instantiation), matched as [`KernelSets::rule`] says.
    pub pattern: String,
    /// The targets of the profile the kernel is built for.
    pub targets: TargetSet,
    /// As the author wrote it, for messages: `targets = "sm_80+"`.
    pub written: String,
    /// An `exclude` of one kernel by name: compiles of the excluded targets get
    /// `-DFATKIT_SKIP_<name>`, for sources that guard the kernel with `#ifndef`.
    pub skip_define: bool,
}

/// The declarations of one build.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelSets {
    /// `kernel_sets = "as-built"`: an undeclared kernel's targets are what was built.
    pub as_built: bool,
    pub rules: Vec<KernelRule>,
    /// Sources built for some targets only ([`FileRule`]).
    pub files: Vec<FileRule>,
}

/// A kernel whose declared targets are not all of the module's: what the manifest records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Declared {
    pub targets: TargetSet,
    /// `targets = "sm_80+" (*_bf16)`, `exclude = ["sm_70"]`, or `as built`.
    pub how: String,
}

/// A kernel whose images disagree with its declaration, or with the others when undeclared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    pub kernel: String,
    /// Its name as people read it: the first of its `forms` (demangled), else the symbol.
    pub shown: String,
    /// The targets whose images hold it.
    pub built: TargetSet,
    /// The targets that should: its declaration's, or every target.
    pub expected: TargetSet,
    /// The declaration, if any.
    pub rule: Option<String>,
    /// Whether that declaration is its source's (a [`FileRule`]), not the kernel's own: the
    /// kernel may then be declared for fewer of the source's targets.
    pub by_source: bool,
}

/// Why a kernel declaration does not read against the profile; its words are the `Display`.
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    /// The pattern is not a kernel name or a glob of one.
    #[error("{0:?} is not a kernel name: write its symbol (a C identifier: letters, digits and _), its demangled C++ name (`ns::kernel<float, 4>`, or `ns::kernel` for every instantiation), or a glob of either with * and ?")]
    Pattern(String),
    /// A target list, a target or a compute capability that does not parse.
    #[error(transparent)]
    Parse(#[from] fatkit_arch::ParseError),
    /// `sm_XY+` where the profile has no target from that compute capability up.
    #[error("'{spec}': the profile has no target from CC {cc} up ({profile})")]
    NoneFrom {
        spec: String,
        cc: Cc,
        profile: TargetSet,
    },
    /// A source pattern that is not a relative path or a glob of one.
    #[error("{0:?} is not a source of the package: write a file name or a path relative to the package (`/`-separated, no `..`), or a glob of one with * and ?, such as \"marlin*.cu\"")]
    FilePattern(String),
    /// A target the profile does not build.
    #[error("'{spec}': {target} is not a target of the profile; name some of {profile}, or write \"sm_80+\"")]
    NotInProfile {
        spec: String,
        target: Target,
        profile: TargetSet,
    },
}

impl KernelRule {
    /// `targets = SPEC`: `"sm_80+"` / `"8.0+"` (every target of the profile from that compute
    /// capability up, PTX included) or a list of targets in any notation.
    pub fn targets(
        pattern: &str,
        spec: &str,
        profile: &TargetSet,
    ) -> Result<KernelRule, RuleError> {
        check_pattern(pattern)?;
        let targets = targets_spec(spec, profile)?;
        Ok(KernelRule {
            pattern: pattern.to_owned(),
            targets,
            written: format!("targets = \"{spec}\""),
            skip_define: false,
        })
    }

    /// `exclude = [..]`: every target of the profile but those.
    pub fn exclude(
        pattern: &str,
        excluded: &[String],
        profile: &TargetSet,
    ) -> Result<KernelRule, RuleError> {
        check_pattern(pattern)?;
        let mut targets = profile.clone();
        for spec in excluded {
            for t in targets_spec(spec, profile)?.iter() {
                targets.remove(t);
            }
        }
        Ok(KernelRule {
            pattern: pattern.to_owned(),
            targets,
            written: format!(
                "exclude = [{}]",
                excluded
                    .iter()
                    .map(|e| format!("\"{e}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            skip_define: is_identifier(pattern),
        })
    }
}

/// Parses a `targets` value against the profile's targets.
fn targets_spec(spec: &str, profile: &TargetSet) -> Result<TargetSet, RuleError> {
    let spec = spec.trim();
    if let Some(from) = spec.strip_suffix('+').filter(|s| !s.contains("PTX")) {
        let cc: Cc = match from
            .strip_prefix("sm_")
            .or_else(|| from.strip_prefix("compute_"))
        {
            Some(digits) => format!("sm_{digits}").parse::<Target>().map(|t| t.cc)?,
            None => from.parse::<Cc>()?,
        };
        let set: TargetSet = profile.iter().filter(|t| t.cc >= cc).collect();
        if set.is_empty() {
            return Err(RuleError::NoneFrom {
                spec: spec.to_owned(),
                cc,
                profile: profile.clone(),
            });
        }
        return Ok(set);
    }
    let ctx = fatkit_arch::notation::Context::default();
    let set = fatkit_arch::notation::parse_any(spec, &ctx)?;
    for t in set.iter() {
        if !profile.contains(t) {
            return Err(RuleError::NotInProfile {
                spec: spec.to_owned(),
                target: t,
                profile: profile.clone(),
            });
        }
    }
    Ok(set)
}

/// A kernel name is a C identifier (mangled names are too) or a demangled C++ name, and a
/// pattern one with `*` and `?` in it: anything else could match no kernel. Only a C identifier
/// ever reaches nvcc (as `-DFATKIT_SKIP_<name>`, where a comma would start another macro and a
/// quote or `$` be read by its shell).
fn check_pattern(pattern: &str) -> Result<(), RuleError> {
    let ok = !pattern.is_empty()
        && pattern.len() <= 1024
        && (is_identifier_or_glob(pattern) || is_cpp_name(pattern));
    if ok {
        return Ok(());
    }
    Err(RuleError::Pattern(pattern.to_owned()))
}

/// Letters, digits, `_` (and `*`, `?`), not starting with a digit unless a glob.
fn is_identifier_or_glob(pattern: &str) -> bool {
    pattern
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_*?".contains(&b))
        && (is_glob(pattern) || !pattern.starts_with(|c: char| c.is_ascii_digit()))
}

/// A C identifier: what `-DFATKIT_SKIP_<name>` may carry.
fn is_identifier(pattern: &str) -> bool {
    !is_glob(pattern) && is_identifier_or_glob(pattern)
}

/// A demangled C++ name as cpp_demangle writes it (without parameters): qualified (`::`) or a
/// template instantiation (`<...>`), of the characters such names hold (`unsigned char`,
/// `(ns::Kind)0`, `-1`, `{lambda()#1}`, `[abi:cxx11]`), its brackets balanced, no space at
/// either end.
fn is_cpp_name(pattern: &str) -> bool {
    let chars_ok = pattern
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_*?:<>,()&-[]{}#~. ".contains(&b));
    let balanced = [(b'<', b'>'), (b'(', b')'), (b'[', b']'), (b'{', b'}')]
        .iter()
        .all(|(open, close)| {
            let mut depth = 0i64;
            pattern.bytes().all(|b| {
                depth += i64::from(b == *open) - i64::from(b == *close);
                depth >= 0
            }) && depth == 0
        });
    chars_ok
        && balanced
        && (pattern.contains("::") || pattern.contains('<'))
        && pattern.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '*')
        && !pattern.ends_with(' ')
}

fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?'])
}

/// Whether `name` matches a glob of `*` and `?`.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Iterative matching with one backtrack point for the last `*`.
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some(pi);
                mark = ni;
                pi += 1;
            }
            Some(c) if *c == '?' || Some(c) == n.get(ni) => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some(s) => {
                    pi = s + 1;
                    mark += 1;
                    ni = mark;
                }
                None => return false,
            },
        }
    }
    p.get(pi..)
        .is_some_and(|rest| rest.iter().all(|c| *c == '*'))
}

impl KernelSets {
    /// The declaration of `kernel`, whose other names (`forms`: its demangled name, and that
    /// name without template arguments) a pattern may also be written in: a rule naming one of
    /// them exactly (the symbol first), else the first glob matching one of them.
    pub fn rule(&self, kernel: &str, forms: &[String]) -> Option<&KernelRule> {
        let names = || std::iter::once(kernel).chain(forms.iter().map(String::as_str));
        names()
            .find_map(|name| self.rules.iter().find(|r| r.pattern == name))
            .or_else(|| {
                self.rules.iter().find(|r| {
                    is_glob(&r.pattern) && names().any(|name| glob_match(&r.pattern, name))
                })
            })
    }

    /// `-DFATKIT_SKIP_<name>` for every kernel excluded by name from `target`.
    pub fn skip_defines(&self, target: Target) -> Vec<String> {
        self.rules
            .iter()
            .filter(|r| r.skip_define && !r.targets.contains(target))
            .map(|r| format!("-DFATKIT_SKIP_{}", r.pattern))
            .collect()
    }

    /// Checks which images hold each kernel (`kernels`: kernel -> targets of the images
    /// holding it) against the declarations, with `all` the module's targets, `profile` the
    /// profile's, `file` the declaration of the module's source, if any (its kernels are
    /// then declared for the source's targets, or their own declaration's among those), and
    /// `forms` the other names of a kernel ([`KernelSets::rule`]; fatkit-build gives its
    /// demangled ones). Returns the kernels declared for fewer targets than the profile's, or
    /// every kernel that disagrees.
    pub fn check(
        &self,
        kernels: &BTreeMap<String, TargetSet>,
        all: &TargetSet,
        (profile, file): (&TargetSet, Option<&FileRule>),
        forms: &dyn Fn(&str) -> Vec<String>,
    ) -> Result<BTreeMap<String, Declared>, Vec<Mismatch>> {
        let mut declared = BTreeMap::new();
        let mut mismatches = Vec::new();
        for (kernel, built) in kernels {
            let forms = forms(kernel);
            // Whether images may hold the kernel beyond its declared targets: a declaration
            // of targets may narrow what the compilers built (a kernel whose stores alone are
            // compiled out for older GPUs is a kernel its author does not support there; the
            // runtime check and `audit` refuse it on those GPUs); an exclude by name promises
            // the source drops it there (`FATKIT_SKIP_`), so an image holding it is a guard
            // that is missing.
            let rule = self.rule(kernel, &forms);
            let by_source = rule.is_none() && !self.as_built && file.is_some();
            let (expected, how, narrows) = match rule {
                Some(rule) => {
                    let expected: TargetSet =
                        rule.targets.iter().filter(|t| all.contains(*t)).collect();
                    let how = match rule.pattern == *kernel {
                        true => rule.written.clone(),
                        false => format!("{} ({})", rule.written, rule.pattern),
                    };
                    (expected, Some(how), !rule.skip_define)
                }
                None if self.as_built => (built.clone(), Some("as built".to_owned()), false),
                None => (all.clone(), file.map(|f| f.written.clone()), false),
            };
            let agrees = match narrows {
                true => expected.iter().all(|t| built.contains(t)),
                false => *built == expected,
            };
            if !agrees {
                mismatches.push(Mismatch {
                    kernel: kernel.clone(),
                    shown: forms.first().unwrap_or(kernel).clone(),
                    built: built.clone(),
                    expected,
                    rule: how,
                    by_source,
                });
            } else if let (true, Some(how)) = (expected != *profile, how) {
                declared.insert(
                    kernel.clone(),
                    Declared {
                        targets: expected,
                        how,
                    },
                );
            }
        }
        match mismatches.is_empty() {
            true => Ok(declared),
            false => Err(mismatches),
        }
    }

    /// Each source's declaration ([`Self::files`]), by the source's path as given: `base` is
    /// the directory patterns with `/` are relative to. Err: a declaration that matches none
    /// of `sources` (a misspelt name would otherwise build the source for every target).
    pub fn files_of(
        &self,
        sources: &[std::path::PathBuf],
        base: &std::path::Path,
    ) -> Result<BTreeMap<std::path::PathBuf, FileRule>, &FileRule> {
        let mut found = BTreeMap::new();
        let mut used = vec![false; self.files.len()];
        for source in sources {
            let relative = source.strip_prefix(base).unwrap_or(source);
            let Some(rule) = rule_for(&self.files, relative) else {
                continue;
            };
            if let Some(at) = self.files.iter().position(|r| r == rule) {
                if let Some(u) = used.get_mut(at) {
                    *u = true;
                }
            }
            found.insert(source.clone(), rule.clone());
        }
        match self.files.iter().zip(&used).find(|(_, used)| !**used) {
            Some((unused, _)) => Err(unused),
            None => Ok(found),
        }
    }
}

/// The smallest way to write a set of the module's targets: `sm_80+` when it is every target
/// from some compute capability up, else the list.
pub fn suggest(set: &TargetSet, all: &TargetSet) -> String {
    if let Some(min) = set.iter().map(|t| t.cc).min() {
        let from: TargetSet = all.iter().filter(|t| t.cc >= min).collect();
        if from == *set {
            return format!("sm_{}+", min.digits());
        }
    }
    set.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

impl Mismatch {
    /// The targets that should hold the kernel and do not.
    pub fn missing(&self) -> Vec<Target> {
        self.expected
            .iter()
            .filter(|t| !self.built.contains(*t))
            .collect()
    }

    /// The targets that hold the kernel and should not.
    pub fn extra(&self) -> Vec<Target> {
        self.built
            .iter()
            .filter(|t| !self.expected.contains(*t))
            .collect()
    }
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = |ts: Vec<Target>| ts.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        let (missing, extra) = (names(self.missing()), names(self.extra()));
        if !missing.is_empty() {
            write!(
                f,
                "kernel {} is in the {} images but missing from {}",
                self.shown,
                self.built,
                missing.join(" ")
            )?;
            if let Some(rule) = &self.rule {
                write!(f, ", which its declaration `{rule}` does not say")?;
            }
        }
        if !extra.is_empty() {
            if !missing.is_empty() {
                f.write_str("; ")?;
            }
            write!(
                f,
                "the {} images hold kernel {}",
                extra.join(" "),
                self.shown
            )?;
            if let Some(rule) = &self.rule {
                write!(f, ", which its declaration `{rule}` leaves out")?;
            }
        }
        Ok(())
    }
}

/// A kernel the driver would not find on some GPUs the profile covers, though its declaration
/// says (or, undeclared, the module's targets say) it runs there: the image the driver loads
/// for the whole module on those GPUs lacks it (docs/ARCH_RULES.md section 2, one image per
/// module).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vanishes {
    pub kernel: String,
    /// The image the driver loads there.
    pub loaded: Target,
    /// The compute capabilities where it vanishes, lowest first.
    pub ccs: Vec<Cc>,
}

/// What the driver view of a module finds wrong: kernels that vanish where their declaration
/// says they run, and images holding no kernel at all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverView {
    pub vanishes: Vec<Vanishes>,
    /// Images that hold no kernel: wherever the driver loads one, nothing of the module runs.
    pub empty: Vec<Target>,
}

/// Checks a module as the driver will load it: on every GPU the profile covers (each known
/// product's compute capability and each target's), the one image the driver loads must hold
/// every kernel whose declaration (its declared targets, judged as images on their own; every
/// target of the module when undeclared) runs there. `images`: each image's target, PTX ISA
/// and kernels.
pub fn driver_view(
    images: &[(Target, Option<fatkit_arch::PtxIsa>, Vec<String>)],
    declared: &BTreeMap<String, Declared>,
    policy: fatkit_arch::Policy,
) -> DriverView {
    use fatkit_arch::load::{Fate, Module};
    use fatkit_arch::rules::{self, Device, Image};
    let as_image = Image::of;
    let module: Module<String> = Module::of(
        images
            .iter()
            .map(|(t, isa, ks)| (as_image(*t, *isa), ks.iter())),
    );
    let mut ccs: std::collections::BTreeSet<Cc> = fatkit_arch::products::PRODUCTS
        .iter()
        .map(|p| p.cc)
        .collect();
    ccs.extend(images.iter().map(|(t, _, _)| t.cc));
    let mut vanishes: BTreeMap<(String, Target), Vec<Cc>> = BTreeMap::new();
    for cc in ccs {
        let device = Device::new(cc, None);
        let answer = module.on(&device, policy);
        for (kernel, fate, _) in &answer.kernels {
            let Fate::Absent { loaded, .. } = fate else {
                continue;
            };
            // Where the kernel's own declared targets would run, the author expects it to.
            let expected = match declared.get(kernel.as_str()) {
                Some(d) => {
                    let own: Vec<Image> = d.targets.iter().map(|t| as_image(t, None)).collect();
                    rules::select(&own, &device, policy).selection.is_ok()
                }
                None => true,
            };
            if let (true, Some(loaded)) = (expected, module.images.get(*loaded)) {
                vanishes
                    .entry(((*kernel).clone(), loaded.target))
                    .or_default()
                    .push(cc);
            }
        }
    }
    DriverView {
        vanishes: vanishes
            .into_iter()
            .map(|((kernel, loaded), ccs)| Vanishes {
                kernel,
                loaded,
                ccs,
            })
            .collect(),
        empty: module
            .empty_images()
            .into_iter()
            .filter_map(|i| module.images.get(i).map(|i| i.target))
            .collect(),
    }
}

/// The record of a module's declared sets ([`fatkit_arch::declared`]), embedded in the
/// generated module and read by the runtime (so it stays in the final binary, where `audit`
/// and `package` find it).
/// `fatbin`: the module's fatbin, which the record binds to by size and fingerprint.
pub fn record(module: &str, fatbin: &[u8], declared: &BTreeMap<String, Declared>) -> String {
    fatkit_arch::declared::Record {
        module: module.to_owned(),
        fatbin: (
            fatbin.len() as u64,
            fatkit_arch::fingerprint::fingerprint(fatbin),
        ),
        kernels: declared
            .iter()
            .map(|(k, d)| (k.clone(), d.targets.clone()))
            .collect(),
    }
    .write()
}

#[cfg(test)]
mod tests;
