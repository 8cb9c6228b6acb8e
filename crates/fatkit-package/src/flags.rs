//! Compile options as one model: written in nvcc's spelling (by `[package.metadata.fatkit]
//! flags`, `Build::flag` and `build-kernels --flag`), parsed once into [`Flags`], then written
//! out for each compiler that builds a target ([`Flags::nvcc_args`], [`Flags::nvrtc_args`]).
//! A flag NVRTC cannot honour is an [`Untranslatable`], reported before anything compiles.
//!
//! | nvcc | NVRTC |
//! |---|---|
//! | `-std=c++17`, `--std c++17` | `--std=c++17` |
//! | `--expt-relaxed-constexpr` | nothing: NVRTC always gets `-default-device`, which lets device code call unannotated (constexpr) functions |
//! | `-O0`..`-O3`, `--optimize N` | nothing: nvcc's `-O` optimises host code; device code is optimised by default by both |
//! | `--use_fast_math`, `-lineinfo`, `-G`, `--restrict`, `-w` | the same |
//! | `--ftz`, `--prec-div`, `--prec-sqrt`, `--fmad` `=true/false` | the same |
//! | `-Xptxas A,B`, `--ptxas-options=A` | `--ptxas-options=A,B` |
//! | `-maxrregcount N` | `--maxrregcount=N` |
//! | `-D X`, `-U X`, `-I DIR` | `-DX`, `-UX`, `-IDIR` |
//! | `--diag-suppress N`, `-Wno-deprecated-declarations` | the same |
//! | `-Wno-deprecated-gpu-targets`, `-v`, `--verbose` | nothing: nvcc driver messages |
//! | `--extended-lambda`, `-Xcompiler`, `--default-stream`, anything else | refused: no NVRTC equivalent |
//!
//! Refused for every compiler, because fatkit sets them from the profile and the pipeline:
//! `-arch`, `-gencode`, `-code`, `-o`, `-c`, `--fatbin`, `--cubin`, `-ptx`, `-rdc`, `-ccbin`,
//! `--threads`; and every option that writes a file of its own, in each spelling: `-M`, `-MM`,
//! `-MD`, `-MMD`, `-MF` (`--dependency-output`), `-E`, `-odir` (`--output-directory`),
//! `--keep`, `--keep-dir`, `--save-temps`, `--lib`, `--link`, `--run`.

use std::fmt;

/// A flag's meaning, as far as fatkit needs to know it to write it for each compiler.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// The same spelling for nvcc and NVRTC (NVRTC accepts nvcc's).
    Same(String),
    /// nvcc's spelling, and NVRTC's.
    Both { nvcc: Vec<String>, nvrtc: String },
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

/// A flag fatkit refuses outright (it sets it itself), or one it cannot parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("flag '{flag}': {why}")]
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
    (&["-default-stream", "--default-stream"], "default-stream"),
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

impl Flags {
    /// Parses flags in nvcc's spelling. Each string may hold one flag or several separated by
    /// spaces (`"-Xptxas -v"`); an option's value may follow as the next string, after `=` or
    /// (for one-letter options) joined (`-DNAME`).
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
            if canonical == "managed" || MANAGED.contains(&tok) || MANAGED.contains(&name) {
                return Err(managed(&written_as));
            }
            let kind = match value {
                Some(v) => valued(canonical, &v, &written_as)?,
                None => plain(tok),
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
                Kind::Both { nvrtc, .. } => out.push(nvrtc.clone()),
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

/// A flag without a value.
fn plain(tok: &str) -> Kind {
    let long = tok.trim_start_matches('-');
    match long {
        "expt-relaxed-constexpr" => Kind::NvccOnly(vec!["--expt-relaxed-constexpr".to_owned()]),
        "O" | "O0" | "O1" | "O2" | "O3" => Kind::NvccOnly(vec![tok.to_owned()]),
        "use_fast_math" => Kind::Same("--use_fast_math".to_owned()),
        "lineinfo" | "generate-line-info" => Kind::Both {
            nvcc: vec!["-lineinfo".to_owned()],
            nvrtc: "--generate-line-info".to_owned(),
        },
        "G" | "device-debug" => Kind::Both {
            nvcc: vec!["-G".to_owned()],
            nvrtc: "--device-debug".to_owned(),
        },
        "restrict" => Kind::Same("--restrict".to_owned()),
        "w" | "disable-warnings" => Kind::Both {
            nvcc: vec!["-w".to_owned()],
            nvrtc: "--disable-warnings".to_owned(),
        },
        "Wno-deprecated-declarations" => Kind::Same("-Wno-deprecated-declarations".to_owned()),
        "Wno-deprecated-gpu-targets" | "v" | "verbose" => Kind::NvccOnly(vec![tok.to_owned()]),
        "extended-lambda" | "expt-extended-lambda" => Kind::NoNvrtc {
            args: vec![tok.to_owned()],
            why: "NVRTC has no extended (__device__-annotated) lambdas",
        },
        _ => Kind::NoNvrtc {
            args: vec![tok.to_owned()],
            why: "fatkit knows no NVRTC spelling of it",
        },
    }
}

/// A flag with a value, by canonical name.
fn valued(canonical: &str, value: &str, written: &str) -> Result<Kind, FlagError> {
    let bad = |why: &str| FlagError {
        flag: written.to_owned(),
        why: why.to_owned(),
    };
    Ok(match canonical {
        "std" => {
            if !value.starts_with("c++") {
                return Err(bad("expected a C++ standard such as c++17"));
            }
            Kind::Same(format!("--std={value}"))
        }
        "ptxas" => Kind::Both {
            nvcc: vec![format!("--ptxas-options={value}")],
            nvrtc: format!("--ptxas-options={value}"),
        },
        "maxrregcount" => {
            value
                .parse::<u32>()
                .map_err(|_| bad("expected a register count, e.g. -maxrregcount=64"))?;
            Kind::Same(format!("--maxrregcount={value}"))
        }
        "define" => Kind::Same(format!("-D{value}")),
        "undefine" => Kind::Same(format!("-U{value}")),
        "include" => Kind::Same(format!("-I{value}")),
        "ftz" | "prec-div" | "prec-sqrt" | "fmad" => {
            if value != "true" && value != "false" {
                return Err(bad("expected true or false"));
            }
            Kind::Same(format!("--{canonical}={value}"))
        }
        "diag-suppress" => Kind::Same(format!("--diag-suppress={value}")),
        "optimize" => Kind::NvccOnly(vec![format!("--optimize={value}")]),
        "xcompiler" => Kind::NoNvrtc {
            args: vec![format!("-Xcompiler={value}")],
            why: "NVRTC runs no host compiler",
        },
        "default-stream" => Kind::NoNvrtc {
            args: vec![format!("--default-stream={value}")],
            why: "the default stream is a host-code setting and NVRTC compiles no host code",
        },
        _ => return Err(bad("unknown option")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(written: &[&str]) -> (String, String) {
        let f = Flags::parse(written).unwrap();
        let nvrtc = match f.nvrtc_args() {
            Ok(a) => a.join(" "),
            Err(u) => format!("refused {}: {}", u.flag, u.why),
        };
        (f.nvcc_args().join(" "), nvrtc)
    }

    #[test]
    fn real_kernel_flags_translate() {
        assert_eq!(
            both(&[
                "-std=c++17",
                "--expt-relaxed-constexpr",
                "-O3",
                "--use_fast_math"
            ]),
            (
                "--std=c++17 --expt-relaxed-constexpr -O3 --use_fast_math".to_owned(),
                "--std=c++17 --use_fast_math".to_owned()
            )
        );
        assert_eq!(
            both(&[
                "-Xptxas -v,-warn-spills",
                "-maxrregcount",
                "64",
                "-lineinfo"
            ]),
            (
                "--ptxas-options=-v,-warn-spills --maxrregcount=64 -lineinfo".to_owned(),
                "--ptxas-options=-v,-warn-spills --maxrregcount=64 --generate-line-info".to_owned()
            )
        );
        assert_eq!(
            both(&[
                "-DUSE_BF16",
                "-D",
                "N=4",
                "--ftz=true",
                "-U__CUDA_NO_HALF_OPERATORS__"
            ]),
            (
                "-DUSE_BF16 -DN=4 --ftz=true -U__CUDA_NO_HALF_OPERATORS__".to_owned(),
                "-DUSE_BF16 -DN=4 --ftz=true -U__CUDA_NO_HALF_OPERATORS__".to_owned()
            )
        );
        assert_eq!(
            both(&["--extended-lambda"]),
            (
                "--extended-lambda".to_owned(),
                "refused --extended-lambda: NVRTC has no extended (__device__-annotated) lambdas"
                    .to_owned()
            )
        );
        assert_eq!(
            both(&["-Xcompiler", "-fopenmp"]).1,
            "refused -Xcompiler -fopenmp: NVRTC runs no host compiler"
        );
        assert_eq!(
            both(&["--some-future-flag"]),
            (
                "--some-future-flag".to_owned(),
                "refused --some-future-flag: fatkit knows no NVRTC spelling of it".to_owned()
            )
        );
    }

    #[test]
    fn managed_and_malformed_flags_are_refused() {
        for bad in [
            &["-arch=sm_80"][..],
            &["-gencode", "arch=compute_80,code=sm_80"],
            &["-o", "x"],
            &["--fatbin"],
            &["-rdc=true"],
            &["-ccbin", "g++-12"],
            // Issue 29: every option that makes nvcc write a file of its own, in every spelling.
            &["--dependency-output=/tmp/x.d"],
            &["--dependency-output", "/tmp/x.d"],
            &["-MF", "x.d"],
            &["-MF=x.d"],
            &["--generate-nonsystem-dependencies-with-compile"],
            &["--generate-dependencies-with-compile"],
            &["--generate-dependencies"],
            &["--generate-nonsystem-dependencies"],
            &["-M"],
            &["-MM"],
            &["-MD"],
            &["-MMD"],
            &["-E"],
            &["--preprocess"],
            &["-o=/tmp/x"],
            &["--output-file", "x"],
            &["--output-directory", "/tmp"],
            &["--output-directory=/tmp"],
            &["-odir", "/tmp"],
            &["--keep"],
            &["-keep"],
            &["--keep-dir", "/tmp"],
            &["--keep-dir=/tmp"],
            &["-keep-dir", "/tmp"],
            &["--save-temps"],
            &["-save-temps"],
            &["--keep=true"],
            &["-Xptxas -v --dependency-output=x.d"],
        ] {
            let e = Flags::parse(bad).unwrap_err();
            assert!(e.why.starts_with("fatkit sets this itself"), "{e}");
        }
        assert_eq!(
            Flags::parse(&["-maxrregcount"]).unwrap_err().to_string(),
            "flag '-maxrregcount': -maxrregcount takes a value; write -maxrregcount=VALUE"
        );
        assert_eq!(
            Flags::parse(&["-std=17"]).unwrap_err().to_string(),
            "flag '-std=17': expected a C++ standard such as c++17"
        );
        assert_eq!(
            Flags::parse(&["kernels.cu"]).unwrap_err().why,
            "not a flag (flags start with '-'); sources are given as files, not flags"
        );
        assert_eq!(
            Flags::parse(&["-Xptxas", "-v"]).unwrap().written(),
            ["-Xptxas -v"]
        );
    }
}
