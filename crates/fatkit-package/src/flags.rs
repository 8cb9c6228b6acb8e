//! Compile options as one model: written in nvcc's spelling (by `[package.metadata.fatkit]
//! flags`, `Build::flag` and `build-kernels --flag`), parsed once into [`Flags`], then written
//! out for each compiler that builds a target ([`Flags::nvcc_args`], [`Flags::nvrtc_args`]).
//! A flag NVRTC cannot honour is an [`Untranslatable`], reported before anything compiles.
//!
//! **An allowlist.** Only the options below are accepted, each with the values it may take
//! ([`allow`]): nvcc hands its steps to `sh -c` without quoting, and passes `-X...` lists on
//! to tools that write files and run programs, so an option fatkit does not know, an options
//! file (`--options-file`, `-optf`), or a value holding a character a shell would read (a
//! space, a quote, `$`, a backquote, `;`, `(`, ...) is refused before anything compiles,
//! naming the flag and why.
//!
//! | nvcc | NVRTC |
//! |---|---|
//! | `-std=c++17`, `--std c++17` | `--std=c++17` |
//! | `--expt-relaxed-constexpr` | nothing: NVRTC always gets `-default-device`, which lets device code call unannotated (constexpr) functions |
//! | `-O`, `-O0`..`-O3`, `--optimize N` | nothing: nvcc's `-O` optimises host code; device code is optimised by default by both |
//! | `--use_fast_math`, `-lineinfo`, `-G`, `--restrict`, `-w` | the same |
//! | `--ftz`, `--prec-div`, `--prec-sqrt`, `--fmad` `=true/false` | the same |
//! | `-Xptxas A,B`, `--ptxas-options=A` (each of `allow::ptxas_item`) | `--ptxas-options=A,B` |
//! | `-maxrregcount N` | `--maxrregcount=N` |
//! | `-D X[=V]`, `-U X`, `-I DIR` | `-DX`, `-UX`, `-IDIR` |
//! | `--diag-suppress N`, `-Xcudafe --diag_suppress=N`, `-Wno-deprecated-declarations` | `--diag-suppress=N`, the same |
//! | `-Wno-deprecated-gpu-targets`, `-v`, `--verbose`, `--resource-usage` | nothing: nvcc driver messages |
//! | `--extended-lambda`, `-Xcompiler A,B` (each of `allow::host_item`), `--default-stream` | refused: no NVRTC equivalent |
//!
//! Refused for every compiler, because fatkit sets them from the profile and the pipeline:
//! `-arch`, `-gencode`, `-code`, `-o`, `-c`, `--fatbin`, `--cubin`, `-ptx`, `-rdc`, `-ccbin`,
//! `--threads`; and every option that writes a file of its own, in each spelling: `-M`, `-MM`,
//! `-MD`, `-MMD`, `-MF` (`--dependency-output`), `-E`, `-odir` (`--output-directory`),
//! `--keep`, `--keep-dir`, `--save-temps`, `--lib`, `--link`, `--run`. Anything else is refused
//! as unknown.

use std::fmt;

pub mod allow;

pub(crate) use allow::is_identifier;
pub use allow::{define_refusal, path_safe, shell_safe, PATH_CHARACTERS, SAFE_CHARACTERS};

/// A flag's meaning, as far as fatkit needs to know it to write it for each compiler.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// The same spelling for nvcc and NVRTC (NVRTC accepts nvcc's).
    Same(String),
    /// nvcc's spelling, and NVRTC's.
    Both {
        nvcc: Vec<String>,
        nvrtc: Vec<String>,
    },
    /// Meaningful to nvcc only, with no effect on device code NVRTC could reproduce or lack.
    NvccOnly(Vec<String>),
    /// No NVRTC equivalent: why, for the message.
    NoNvrtc {
        args: Vec<String>,
        why: &'static str,
    },
}

/// One flag as the user wrote it and what it means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flag {
    /// As written (`-Xptxas -v`).
    pub written: String,
    kind: Kind,
}

/// The compile options of a build, parsed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    flags: Vec<Flag>,
}

/// A flag fatkit refuses: one it sets itself, one it does not know, a value it will not pass.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("flag '{}': {why}", flag.escape_debug())]
pub struct FlagError {
    pub flag: String,
    pub why: String,
}

/// A flag that NVRTC, which builds some targets, cannot honour.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Untranslatable {
    pub flag: String,
    pub why: &'static str,
}

/// Options that take a value, in every spelling nvcc accepts, with the canonical name.
const WITH_VALUE: &[(&[&str], &str)] = &[
    (&["-std", "--std"], "std"),
    (&["-Xptxas", "--ptxas-options"], "ptxas"),
    (&["-maxrregcount", "--maxrregcount"], "maxrregcount"),
    (&["-D", "--define-macro"], "define"),
    (&["-U", "--undefine-macro"], "undefine"),
    (&["-I", "--include-path"], "include"),
    (&["-ftz", "--ftz"], "ftz"),
    (&["-prec-div", "--prec-div"], "prec-div"),
    (&["-prec-sqrt", "--prec-sqrt"], "prec-sqrt"),
    (&["-fmad", "--fmad"], "fmad"),
    (&["-diag-suppress", "--diag-suppress"], "diag-suppress"),
    (&["--optimize"], "optimize"),
    (&["-Xcompiler", "--compiler-options"], "xcompiler"),
    (&["-Xcudafe"], "xcudafe"),
    (&["-default-stream", "--default-stream"], "default-stream"),
    (&["--options-file", "-optf"], "options-file"),
    (&["-arch", "--gpu-architecture"], "managed"),
    (&["-code", "--gpu-code"], "managed"),
    (&["-gencode", "--generate-code"], "managed"),
    (&["-o", "--output-file"], "managed"),
    (&["-ccbin", "--compiler-bindir"], "managed"),
    (&["-t", "--threads"], "managed"),
    (&["-rdc", "--relocatable-device-code"], "managed"),
    (&["--keep-dir", "-keep-dir"], "managed"),
    (&["-x", "--x"], "managed"),
    // Options that write files of their own, where fatkit would not know them.
    (&["-MF", "--dependency-output"], "managed"),
    (&["-MT", "--dependency-target-name"], "managed"),
    (&["-odir", "--output-directory"], "managed"),
    (&["--run-args", "-run-args"], "managed"),
];

/// Options without a value that fatkit sets itself.
const MANAGED: &[&str] = &[
    "-c",
    "--compile",
    "--fatbin",
    "-fatbin",
    "--cubin",
    "-cubin",
    "-ptx",
    "--ptx",
    "-dc",
    "--device-c",
    "-dlink",
    "--device-link",
    "--keep",
    "-keep",
    "-E",
    "--preprocess",
    "-M",
    "--generate-dependencies",
    "-MM",
    "--generate-nonsystem-dependencies",
    "-MD",
    "--generate-dependencies-with-compile",
    "-MMD",
    "--generate-nonsystem-dependencies-with-compile",
    "-MP",
    "--generate-dependency-targets",
    "-save-temps",
    "--save-temps",
    "-cuda",
    "--cuda",
    "-lib",
    "--lib",
    "-link",
    "--link",
    "-run",
    "--run",
    "-dryrun",
    "--dryrun",
    "-optix-ir",
    "--optix-ir",
];

fn managed(flag: &str) -> FlagError {
    FlagError {
        flag: flag.to_owned(),
        why: "fatkit sets this itself (targets from the profile, whole-program cubins and PTX per target, its own outputs and host compiler); remove it".to_owned(),
    }
}

/// The options [`Flags::parse`] accepts, for the message that refuses another.
const KNOWN: &str = "-std, --expt-relaxed-constexpr, --extended-lambda, -O0..-O3, --use_fast_math, -lineinfo, -G, --restrict, -w, -Wno-deprecated-declarations, -Wno-deprecated-gpu-targets, -v, --resource-usage, --ftz, --prec-div, --prec-sqrt, --fmad, -Xptxas, -maxrregcount, -D, -U, -I, --diag-suppress, -Xcudafe --diag_suppress, -Xcompiler, --default-stream";

impl Flags {
    /// Parses flags in nvcc's spelling. Each string may hold one flag or several separated by
    /// spaces (`"-Xptxas -v"`); an option's value may follow as the next string, after `=` or
    /// (for one-letter options) joined (`-DNAME`). Every flag is checked against the allowlist
    /// ([`allow`]); the first that is not on it is the error.
    pub fn parse<S: AsRef<str>>(written: &[S]) -> Result<Flags, FlagError> {
        let tokens: Vec<&str> = written
            .iter()
            .flat_map(|s| s.as_ref().split_whitespace())
            .collect();
        let mut flags = Vec::new();
        let mut i = 0;
        while let Some(&tok) = tokens.get(i) {
            i += 1;
            if !tok.starts_with('-') {
                return Err(FlagError {
                    flag: tok.to_owned(),
                    why: "not a flag (flags start with '-'); sources are given as files, not flags"
                        .to_owned(),
                });
            }
            // An option with a value: `-opt=v`, `-opt v`, or joined for -D/-U/-I.
            let (name, inline) = match tok.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (tok, None),
            };
            let joined = ["-D", "-U", "-I"]
                .into_iter()
                .find(|p| tok.len() > 2 && tok.starts_with(p) && !tok.starts_with("--"));
            let (canonical, value, written_as) = if let Some(prefix) = joined {
                let c = WITH_VALUE
                    .iter()
                    .find(|(s, _)| s.contains(&prefix))
                    .map_or("", |(_, c)| *c);
                (c, tok.get(2..).map(str::to_owned), tok.to_owned())
            } else if MANAGED.contains(&tok) || MANAGED.contains(&name) {
                return Err(managed(tok));
            } else if let Some((_, c)) = WITH_VALUE.iter().find(|(s, _)| s.contains(&name)) {
                let value = match inline {
                    Some(v) => v.to_owned(),
                    None => {
                        let v = tokens.get(i).ok_or_else(|| FlagError {
                            flag: tok.to_owned(),
                            why: format!("{name} takes a value; write {name}=VALUE"),
                        })?;
                        i += 1;
                        (*v).to_owned()
                    }
                };
                let written_as = match inline {
                    Some(_) => tok.to_owned(),
                    None => format!("{tok} {value}"),
                };
                (*c, Some(value), written_as)
            } else {
                ("", None, tok.to_owned())
            };
            if canonical == "managed" {
                return Err(managed(&written_as));
            }
            let kind = match value {
                Some(v) => valued(canonical, &v, &written_as)?,
                None => plain(tok)?,
            };
            flags.push(Flag {
                written: written_as,
                kind,
            });
        }
        Ok(Flags { flags })
    }

    /// These flags, then `more`.
    pub fn with(&self, more: &Flags) -> Flags {
        let mut flags = self.flags.clone();
        flags.extend(more.flags.iter().cloned());
        Flags { flags }
    }

    pub fn is_empty(&self) -> bool {
        self.flags.is_empty()
    }

    /// The flags as written, one string each.
    pub fn written(&self) -> Vec<String> {
        self.flags.iter().map(|f| f.written.clone()).collect()
    }

    /// These flags without their `-I`s, and the `-I` directories, made absolute against
    /// `base` (where they were written: the current directory for `--flag`, the package for
    /// its metadata), for the build's include directories: every compiler is then given them
    /// as it is given the others, whatever directory it runs in.
    pub fn split_includes(&self, base: &std::path::Path) -> (Flags, Vec<std::path::PathBuf>) {
        let mut dirs = Vec::new();
        let mut rest = Vec::new();
        for f in &self.flags {
            match &f.kind {
                Kind::Same(a) if a.starts_with("-I") => {
                    dirs.push(base.join(a.get(2..).unwrap_or_default()));
                }
                _ => rest.push(f.clone()),
            }
        }
        (Flags { flags: rest }, dirs)
    }

    /// The directories of `-I` flags, for finding the headers a source includes.
    pub fn include_dirs(&self) -> Vec<std::path::PathBuf> {
        self.flags
            .iter()
            .filter_map(|f| match &f.kind {
                Kind::Same(a) => a.strip_prefix("-I").map(std::path::PathBuf::from),
                _ => None,
            })
            .collect()
    }

    /// The arguments for nvcc.
    pub fn nvcc_args(&self) -> Vec<String> {
        self.flags
            .iter()
            .flat_map(|f| match &f.kind {
                Kind::Same(a) => vec![a.clone()],
                Kind::Both { nvcc, .. } => nvcc.clone(),
                Kind::NvccOnly(args) | Kind::NoNvrtc { args, .. } => args.clone(),
            })
            .collect()
    }

    /// The options for NVRTC, or the first flag it cannot honour.
    pub fn nvrtc_args(&self) -> Result<Vec<String>, Untranslatable> {
        let mut out = Vec::new();
        for f in &self.flags {
            match &f.kind {
                Kind::Same(a) => out.push(a.clone()),
                Kind::Both { nvrtc, .. } => out.extend(nvrtc.iter().cloned()),
                Kind::NvccOnly(_) => {}
                Kind::NoNvrtc { why, .. } => {
                    return Err(Untranslatable {
                        flag: f.written.clone(),
                        why,
                    })
                }
            }
        }
        Ok(out)
    }
}

impl fmt::Display for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.written().join(" "))
    }
}

/// A flag without a value, if fatkit knows it.
fn plain(tok: &str) -> Result<Kind, FlagError> {
    // One dash or two, as nvcc spells its options.
    let long = tok
        .strip_prefix("--")
        .or_else(|| tok.strip_prefix('-'))
        .unwrap_or(tok);
    Ok(match long {
        "expt-relaxed-constexpr" => Kind::NvccOnly(vec!["--expt-relaxed-constexpr".to_owned()]),
        "O" | "O0" | "O1" | "O2" | "O3" if !tok.starts_with("--") => {
            Kind::NvccOnly(vec![tok.to_owned()])
        }
        "use_fast_math" => Kind::Same("--use_fast_math".to_owned()),
        "lineinfo" | "generate-line-info" => Kind::Both {
            nvcc: vec!["-lineinfo".to_owned()],
            nvrtc: vec!["--generate-line-info".to_owned()],
        },
        "G" | "device-debug" => Kind::Both {
            nvcc: vec!["-G".to_owned()],
            nvrtc: vec!["--device-debug".to_owned()],
        },
        "restrict" => Kind::Same("--restrict".to_owned()),
        "w" | "disable-warnings" => Kind::Both {
            nvcc: vec!["-w".to_owned()],
            nvrtc: vec!["--disable-warnings".to_owned()],
        },
        "Wno-deprecated-declarations" => Kind::Same("-Wno-deprecated-declarations".to_owned()),
        "Wno-deprecated-gpu-targets" | "v" | "verbose" | "resource-usage" | "res-usage" => {
            Kind::NvccOnly(vec![tok.to_owned()])
        }
        "extended-lambda" | "expt-extended-lambda" => Kind::NoNvrtc {
            args: vec![tok.to_owned()],
            why: "NVRTC has no extended (__device__-annotated) lambdas",
        },
        _ => {
            return Err(FlagError {
                flag: tok.to_owned(),
                why: format!(
                    "fatkit does not know this option, so it cannot tell whether it writes a file or runs a program (nvcc passes options on to a shell and to other tools); remove it, or use one fatkit knows: {KNOWN}"
                ),
            })
        }
    })
}

/// Each item of an `-X...` list (`-Xptxas -v,-O3`) accepted by `ok`, or the refusal naming the
/// first that is not.
fn list_items(
    value: &str,
    written: &str,
    tool: &str,
    ok: impl Fn(&str) -> bool,
) -> Result<(), FlagError> {
    for item in value.split(',') {
        if !ok(item) {
            return Err(FlagError {
                flag: written.to_owned(),
                why: format!(
                    "fatkit does not pass {:?} on to {tool}: only options that neither write nor read a file nor run a program are (docs/GUARANTEES.md); remove it",
                    item
                ),
            });
        }
    }
    Ok(())
}

/// A flag with a value, by canonical name, if the value is one fatkit passes.
fn valued(canonical: &str, value: &str, written: &str) -> Result<Kind, FlagError> {
    let bad = |why: &str| FlagError {
        flag: written.to_owned(),
        why: why.to_owned(),
    };
    Ok(match canonical {
        "std" => {
            if !matches!(value, "c++03" | "c++11" | "c++14" | "c++17" | "c++20") {
                return Err(bad("expected a C++ standard such as c++17"));
            }
            Kind::Same(format!("--std={value}"))
        }
        "ptxas" => {
            list_items(value, written, "ptxas", allow::ptxas_item)?;
            Kind::Both {
                nvcc: vec![format!("--ptxas-options={value}")],
                nvrtc: vec![format!("--ptxas-options={value}")],
            }
        }
        "maxrregcount" => {
            value
                .parse::<u32>()
                .map_err(|_| bad("expected a register count, e.g. -maxrregcount=64"))?;
            Kind::Same(format!("--maxrregcount={value}"))
        }
        "define" => {
            if let Some(why) = define_refusal(value) {
                return Err(bad(&why));
            }
            Kind::Same(format!("-D{value}"))
        }
        "undefine" => {
            if !is_identifier(value) {
                return Err(bad("expected a macro name (a C identifier)"));
            }
            Kind::Same(format!("-U{value}"))
        }
        "include" => {
            if !path_safe(value) {
                return Err(bad(&format!(
                    "nvcc hands include directories to a shell without quoting; name one with {PATH_CHARACTERS}"
                )));
            }
            // `-I./-x`, never `-I-x`: a directory is never read as an option.
            let dir = if value.starts_with('-') {
                format!("./{value}")
            } else {
                value.to_owned()
            };
            Kind::Same(format!("-I{dir}"))
        }
        "ftz" | "prec-div" | "prec-sqrt" | "fmad" => {
            if value != "true" && value != "false" {
                return Err(bad("expected true or false"));
            }
            Kind::Same(format!("--{canonical}={value}"))
        }
        "diag-suppress" => {
            if !allow::diagnostics(value) {
                return Err(bad("expected diagnostic numbers or names, e.g. 177,550"));
            }
            Kind::Same(format!("--diag-suppress={value}"))
        }
        "optimize" => {
            if !matches!(value, "0" | "1" | "2" | "3") {
                return Err(bad("expected an optimisation level, 0 to 3"));
            }
            Kind::NvccOnly(vec![format!("--optimize={value}")])
        }
        "xcompiler" => {
            list_items(value, written, "the host compiler", allow::host_item)?;
            Kind::NoNvrtc {
                args: vec![format!("-Xcompiler={value}")],
                why: "NVRTC runs no host compiler",
            }
        }
        "xcudafe" => {
            list_items(value, written, "cudafe", |i| allow::cudafe_item(i).is_some())?;
            Kind::Both {
                nvcc: vec![format!("-Xcudafe={value}")],
                nvrtc: value.split(',').filter_map(allow::cudafe_item).collect(),
            }
        }
        "default-stream" => {
            if !matches!(value, "legacy" | "per-thread" | "null") {
                return Err(bad("expected legacy, per-thread or null"));
            }
            Kind::NoNvrtc {
                args: vec![format!("--default-stream={value}")],
                why: "the default stream is a host-code setting and NVRTC compiles no host code",
            }
        }
        "options-file" => {
            return Err(bad(
                "an options file is refused: fatkit cannot check the options it holds, nor key the cache on them; write them in flags",
            ))
        }
        _ => return Err(bad("unknown option")),
    })
}

#[cfg(test)]
mod tests;
