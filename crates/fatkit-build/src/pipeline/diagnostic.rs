//! The compiler's own first error, read from whatever it wrote: nvcc with or without
//! `--verbose` (its `#$` command echoes), `-Xptxas -v` (`ptxas info` lines), the host
//! compiler's gcc-style lines, NVRTC's log. One reading for every compiler, so the one-line
//! report of a failed compile says what the compiler said, never an echoed command line.
//! The shapes read are listed in docs/BUILDS.md ("What a failed compile says first").

/// How grave a diagnostic is, as the compiler words it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Severity {
    /// `error`, `fatal error`, `catastrophic error`, `fatal`.
    Error,
    /// `warning`.
    Warning,
    /// `note`, `remark`, `info`: never the cause.
    Note,
}

/// One diagnostic line of a compiler: where (a file and line, when it names one), which tool
/// said it (`ptxas`, `nvlink`, `nvrtc`, `cc1plus`; when it names itself rather than a file),
/// its severity as written (`error`, `catastrophic error`, `error #20-D`) and its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Diagnostic {
    pub file: Option<String>,
    pub line: Option<u32>,
    pub tool: Option<String>,
    pub severity: Severity,
    pub severity_words: String,
    pub message: String,
}

impl Diagnostic {
    /// `file:line`, when the compiler names both.
    pub(crate) fn location(&self) -> Option<String> {
        Some(format!("{}:{}", self.file.as_ref()?, self.line?))
    }
}

/// What a compiler's output says first: its first error; else its first line that is no
/// echo, note or warning (a crash, `Killed`); else its first warning; else nothing at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum First {
    Diagnostic(Diagnostic),
    Other(String),
    /// No diagnostic and no other line: `lines` lines of command echoes, notes and blanks.
    Nothing {
        lines: usize,
    },
}

impl First {
    /// `file:line` of the first error, when it names one.
    pub(crate) fn location(&self) -> Option<String> {
        match self {
            First::Diagnostic(d) if d.severity == Severity::Error => d.location(),
            _ => None,
        }
    }
}

/// The words, without the location ([`First::location`] says it apart): `error: identifier
/// "x" is undefined`, `ptxas error: Entry function ...`, or plainly that there is none.
impl std::fmt::Display for First {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            First::Diagnostic(d) => {
                if let Some(tool) = &d.tool {
                    write!(f, "{tool} ")?;
                }
                write!(f, "{}: {}", d.severity_words, d.message)
            }
            First::Other(line) => f.write_str(line),
            First::Nothing { lines: 0 } => f.write_str("no output at all"),
            First::Nothing { lines } => write!(
                f,
                "no error message in its output ({lines} lines of echoed commands and notes)"
            ),
        }
    }
}

/// The first error of `output` (any compiler's), or what stands for it ([`First`]).
pub(crate) fn first(output: &str) -> First {
    let mut other = None;
    let mut warning = None;
    let mut lines = 0;
    for raw in output.lines() {
        lines += 1;
        let line = without_escapes(raw);
        let line = line.trim_end();
        if line.is_empty() || is_echo(line) || line.starts_with(char::is_whitespace) {
            continue;
        }
        match diagnostic(line) {
            Some(d) if d.severity == Severity::Error => return First::Diagnostic(d),
            Some(d) if d.severity == Severity::Warning => {
                warning.get_or_insert(d);
            }
            Some(_) => {}
            None if is_tally(line) => {}
            None => {
                other.get_or_insert_with(|| line.to_owned());
            }
        }
    }
    match (other, warning) {
        (Some(line), _) => First::Other(line),
        (None, Some(d)) => First::Diagnostic(d),
        (None, None) => First::Nothing { lines },
    }
}

/// `s` without terminal escape sequences (colours: `ESC [ ... m`, any `ESC [` sequence up to
/// its final byte) and carriage returns.
fn without_escapes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                if chars.peek() == Some(&'[') {
                    chars.next();
                    for c in chars.by_ref() {
                        if ('\u{40}'..='\u{7e}').contains(&c) {
                            break;
                        }
                    }
                }
            }
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}

/// nvcc's `--verbose` echo of a command (`#$ cicc ...`) or its closing `# --error 0x1 --`.
fn is_echo(line: &str) -> bool {
    line.starts_with("#$") || line.starts_with("# --")
}

/// EDG's count closing its output: `1 error detected in the compilation of "a.cu".`, and
/// gcc's `compilation terminated.`.
fn is_tally(line: &str) -> bool {
    line.contains(" detected in the compilation of ") || line == "compilation terminated."
}

/// `error`, `fatal error`, `catastrophic error`, `error #20-D`, `warning #177-D`, `fatal`,
/// `note`, `remark`, `info`: the severity the words name, if they are one.
fn severity_of(words: &str) -> Option<Severity> {
    let words = words.trim();
    let head = words.split(" #").next().unwrap_or(words);
    match head {
        "error" | "fatal error" | "catastrophic error" | "fatal" | "internal error" => {
            Some(Severity::Error)
        }
        "warning" => Some(Severity::Warning),
        "note" | "remark" | "info" => Some(Severity::Note),
        _ => None,
    }
}

/// One line as a diagnostic, in any of the shapes compilers write:
/// `file(line): error: msg` (EDG: nvcc's front end, NVRTC), `file:line[:col]: error: msg`
/// (gcc, clang), `tool error   : msg` (ptxas, nvlink, nvcc, fatbinary),
/// `ptxas file, line N; error   : msg`, `tool: error: msg` (nvrtc, cc1plus) and
/// `error: msg`.
fn diagnostic(line: &str) -> Option<Diagnostic> {
    let make =
        |file: Option<&str>, line_no: Option<u32>, tool: Option<&str>, sev: &str, msg: &str| {
            Some(Diagnostic {
                file: file.map(str::to_owned),
                line: line_no,
                tool: tool.map(str::to_owned),
                severity: severity_of(sev)?,
                severity_words: sev.trim().to_owned(),
                message: msg.trim().to_owned(),
            })
        };
    // EDG: `file(line): severity: message`.
    if let Some((head, rest)) = line.split_once("): ") {
        if let Some((file, n)) = head.rsplit_once('(').filter(|(f, _)| !f.contains(": ")) {
            if let (Ok(n), Some((sev, msg))) = (n.parse::<u32>(), rest.split_once(": ")) {
                return make(Some(file), Some(n), None, sev, msg);
            }
        }
    }
    // ptxas naming its input: `ptxas /tmp/a.ptx, line 5; error   : message`.
    if let Some((head, rest)) = line.split_once("; ") {
        if let (Some((tool_file, n)), Some((sev, msg))) =
            (head.rsplit_once(", line "), rest.split_once(':'))
        {
            if let (Ok(n), Some((tool, file))) = (n.parse::<u32>(), tool_file.split_once(' ')) {
                return make(Some(file), Some(n), Some(tool), sev, msg);
            }
        }
    }
    // `tool severity   : message` (ptxas, nvlink, nvcc, fatbinary): no colon before the
    // severity, spaces before the colon after it.
    if let Some((head, msg)) = line.split_once(" : ").or_else(|| line.split_once("\t: ")) {
        if let Some((tool, sev)) = head.trim_end().split_once(' ') {
            if !tool.contains(':') && severity_of(sev).is_some() {
                return make(None, None, Some(tool), sev, msg);
            }
        }
    }
    colon_separated(line, &make)
}

/// What makes a [`Diagnostic`] of its parts: file, line, tool, severity words, message.
type Make<'a> =
    dyn Fn(Option<&str>, Option<u32>, Option<&str>, &str, &str) -> Option<Diagnostic> + 'a;

/// gcc's shapes, split at `: `: `file:line[:col]: severity: msg`, `tool: severity: msg`,
/// `severity: msg`.
fn colon_separated(line: &str, make: &Make<'_>) -> Option<Diagnostic> {
    let parts: Vec<&str> = line.splitn(3, ": ").collect();
    match parts.as_slice() {
        [sev, msg] => make(None, None, None, sev, msg),
        [head, sev, msg] if severity_of(sev).is_some() => match head.rsplit_once(':') {
            None => make(None, None, Some(head), sev, msg),
            Some(_) => {
                let (file, n) = file_and_line(head)?;
                make(Some(file), Some(n), None, sev, msg)
            }
        },
        [sev, msg, more] => make(None, None, None, sev, &format!("{msg}: {more}")),
        _ => None,
    }
}

/// `file:line` or `file:line:col` (a Windows path's drive letter kept in the file): the file
/// and line.
fn file_and_line(head: &str) -> Option<(&str, u32)> {
    let (rest, last) = head.rsplit_once(':')?;
    let last = last.parse::<u32>().ok()?;
    match rest.rsplit_once(':') {
        Some((file, n)) => match n.parse::<u32>() {
            Ok(n) => Some((file, n)),
            Err(_) => Some((rest, last)),
        },
        None => Some((rest, last)),
    }
}

#[cfg(test)]
mod tests;
