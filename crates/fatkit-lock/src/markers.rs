//! PEP 508 environment markers (`sys_platform == 'linux' and python_version >= '3.10'`),
//! evaluated for the target a lock is judged for, not for the machine fatkit runs on.
//!
//! The grammar is PEP 508's: `or` of `and` of comparisons or parenthesised markers; a
//! comparison is two values (a variable or a quoted string) and an operator (`==`, `!=`, `<`,
//! `<=`, `>`, `>=`, `~=`, `===`, `in`, `not in`). Where both sides read as versions an ordering
//! operator compares versions (release numbers, `==` and `!=` with a trailing `.*`, `~=`), else
//! strings, as PEP 508 says. The variables `extras` and `dependency_groups` (PEP 751) are sets,
//! asked with `in`; `extra` (PEP 508) is equal to any one extra asked. A marker that does not
//! parse is an error, never true or false.

use std::collections::BTreeSet;

/// The environment markers are evaluated in: the target's platform and Python, and the
/// extras and dependency groups asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Environment {
    /// `3.12`.
    pub python_version: String,
    /// `3.12.0`.
    pub python_full_version: String,
    /// `linux`.
    pub sys_platform: String,
    /// `x86_64`, `aarch64`.
    pub platform_machine: String,
    /// `Linux`.
    pub platform_system: String,
    pub extras: BTreeSet<String>,
    pub groups: BTreeSet<String>,
}

impl Environment {
    fn value(&self, name: &str) -> Option<Value<'_>> {
        Some(Value::One(match name {
            "python_version" => &self.python_version,
            "python_full_version" | "implementation_version" => &self.python_full_version,
            "sys_platform" => &self.sys_platform,
            "platform_machine" => &self.platform_machine,
            "platform_system" => &self.platform_system,
            "os_name" => "posix",
            "implementation_name" => "cpython",
            "platform_python_implementation" => "CPython",
            // Not known of a target that is not this machine: no marker of a lock names them
            // in practice, and an empty string compares as PEP 508 compares it.
            "platform_release" | "platform_version" => "",
            "extra" => return Some(Value::AnyOf(&self.extras)),
            "extras" => return Some(Value::Set(&self.extras)),
            "dependency_groups" => return Some(Value::Set(&self.groups)),
            _ => return None,
        }))
    }
}

#[derive(Clone, Copy, Debug)]
enum Value<'a> {
    One(&'a str),
    /// `extra`: equal to any one of them.
    AnyOf(&'a BTreeSet<String>),
    /// `extras`, `dependency_groups`: asked with `in`.
    Set(&'a BTreeSet<String>),
}

/// Why a marker could not be evaluated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("marker `{marker}`: {why}")]
pub struct MarkerError {
    pub marker: String,
    pub why: String,
}

/// Whether `marker` holds in `env`. The empty marker holds.
pub fn holds(marker: &str, env: &Environment) -> Result<bool, MarkerError> {
    let fail = |why: String| MarkerError {
        marker: marker.to_owned(),
        why,
    };
    let tokens = tokens(marker).map_err(fail)?;
    if tokens.is_empty() {
        return Ok(true);
    }
    let mut parser = Parser {
        tokens: &tokens,
        at: 0,
        env,
    };
    let value = parser.or().map_err(fail)?;
    match parser.tokens.get(parser.at) {
        None => Ok(value),
        Some(t) => Err(fail(format!("unexpected {t:?} after a whole marker"))),
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Word(String),
    Quoted(String),
    Op(&'static str),
    Open,
    Close,
}

/// Markers a lock holds are short; a longer one is refused rather than parsed.
const MAX_MARKER: usize = 64 << 10;

fn tokens(text: &str) -> Result<Vec<Token>, String> {
    if text.len() > MAX_MARKER {
        return Err(format!("longer than {MAX_MARKER} bytes"));
    }
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let after = rest.get(c.len_utf8()..).unwrap_or_default();
        if c.is_whitespace() {
            rest = after;
            continue;
        }
        if c == '(' || c == ')' {
            out.push(if c == '(' { Token::Open } else { Token::Close });
            rest = after;
            continue;
        }
        if c == '\'' || c == '"' {
            let (body, tail) = after.split_once(c).ok_or("a string is not closed")?;
            out.push(Token::Quoted(body.to_owned()));
            rest = tail;
            continue;
        }
        if let Some(op) = ["===", "==", "!=", "<=", ">=", "~=", "<", ">"]
            .into_iter()
            .find(|op| rest.starts_with(op))
        {
            out.push(Token::Op(op));
            rest = rest.get(op.len()..).unwrap_or_default();
            continue;
        }
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(rest.len());
        let (word, tail) = rest.split_at_checked(len).unwrap_or((rest, ""));
        if word.is_empty() {
            return Err(format!("unexpected character {c:?}"));
        }
        out.push(Token::Word(word.to_owned()));
        rest = tail;
    }
    Ok(out)
}

/// Nesting deeper than this is refused: no marker needs it, and recursion is bounded.
const MAX_DEPTH: usize = 64;

struct Parser<'t> {
    tokens: &'t [Token],
    at: usize,
    env: &'t Environment,
}

impl<'t> Parser<'t> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<&Token> {
        let t = self.tokens.get(self.at);
        self.at += 1;
        t
    }

    fn word(&self, w: &str) -> bool {
        matches!(self.peek(), Some(Token::Word(x)) if x == w)
    }

    fn or(&mut self) -> Result<bool, String> {
        self.or_at(0)
    }

    fn or_at(&mut self, depth: usize) -> Result<bool, String> {
        let mut value = self.and_at(depth)?;
        while self.word("or") {
            self.at += 1;
            // Both sides are parsed: a malformed right side is an error even where the left
            // decides.
            let right = self.and_at(depth)?;
            value = value || right;
        }
        Ok(value)
    }

    fn and_at(&mut self, depth: usize) -> Result<bool, String> {
        let mut value = self.atom(depth)?;
        while self.word("and") {
            self.at += 1;
            let right = self.atom(depth)?;
            value = value && right;
        }
        Ok(value)
    }

    fn atom(&mut self, depth: usize) -> Result<bool, String> {
        if self.peek() == Some(&Token::Open) {
            if depth >= MAX_DEPTH {
                return Err(format!("nested deeper than {MAX_DEPTH}"));
            }
            self.at += 1;
            let value = self.or_at(depth + 1)?;
            return match self.next() {
                Some(Token::Close) => Ok(value),
                _ => Err("a parenthesis is not closed".to_owned()),
            };
        }
        let left = self.value()?;
        let op = match self.next() {
            Some(Token::Op(op)) => *op,
            Some(Token::Word(w)) if w == "in" => "in",
            Some(Token::Word(w)) if w == "not" => match self.next() {
                Some(Token::Word(w)) if w == "in" => "not in",
                _ => return Err("`not` without `in`".to_owned()),
            },
            other => return Err(format!("expected an operator, found {other:?}")),
        };
        let right = self.value()?;
        Ok(compare(left, op, right))
    }

    fn value(&mut self) -> Result<Value<'t>, String> {
        let env: &'t Environment = self.env;
        let tokens: &'t [Token] = self.tokens;
        let token = tokens.get(self.at);
        self.at += 1;
        match token {
            Some(Token::Quoted(s)) => {
                let s: &str = s;
                Ok(Value::One(s))
            }
            Some(Token::Word(w)) => env
                .value(w)
                .ok_or_else(|| format!("unknown variable `{w}`")),
            other => Err(format!("expected a variable or a string, found {other:?}")),
        }
    }
}

fn compare(left: Value<'_>, op: &str, right: Value<'_>) -> bool {
    match (left, right) {
        (Value::One(a), Value::One(b)) => compare_one(a, op, b),
        (Value::One(a), Value::Set(set)) => {
            let a = normalize(a);
            let inside = set.iter().any(|s| normalize(s) == a);
            match op {
                "in" => inside,
                "not in" => !inside,
                _ => false,
            }
        }
        (Value::AnyOf(set), Value::One(b)) | (Value::One(b), Value::AnyOf(set)) => {
            let b = normalize(b);
            let equal = set.iter().any(|s| normalize(s) == b);
            match op {
                "==" | "===" => equal,
                "!=" => !equal,
                _ => false,
            }
        }
        _ => false,
    }
}

/// A name as PEP 503 normalises it: lowercase, runs of `-_.` one `-`.
pub fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut sep = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            sep = true;
            continue;
        }
        if sep && !out.is_empty() {
            out.push('-');
        }
        sep = false;
        out.push(c.to_ascii_lowercase());
    }
    out
}

fn compare_one(a: &str, op: &str, b: &str) -> bool {
    match op {
        "in" => return b.contains(a),
        "not in" => return !b.contains(a),
        "===" => return a == b,
        _ => {}
    }
    let wildcard = b.strip_suffix(".*");
    match (release(a), release(wildcard.unwrap_or(b))) {
        (Some(x), Some(y)) => match (op, wildcard) {
            ("==", Some(_)) => x.starts_with(&y) || padded_prefix(&x, &y),
            ("!=", Some(_)) => !(x.starts_with(&y) || padded_prefix(&x, &y)),
            ("~=", None) if y.len() >= 2 => {
                ordered(&x, &y) != std::cmp::Ordering::Less
                    && padded_prefix(&x, y.get(..y.len() - 1).unwrap_or_default())
            }
            (_, None) => {
                let o = ordered(&x, &y);
                match op {
                    "==" => o.is_eq(),
                    "!=" => !o.is_eq(),
                    "<" => o.is_lt(),
                    "<=" => o.is_le(),
                    ">" => o.is_gt(),
                    ">=" => o.is_ge(),
                    _ => false,
                }
            }
            _ => false,
        },
        // Not versions: strings, of which only equality is defined.
        _ => match op {
            "==" => a == b,
            "!=" => a != b,
            _ => false,
        },
    }
}

/// `3.12.1` -> [3, 12, 1]; `None` where a part is not a number.
fn release(v: &str) -> Option<Vec<u64>> {
    v.split('.').map(|p| p.parse::<u64>().ok()).collect()
}

fn ordered(a: &[u64], b: &[u64]) -> std::cmp::Ordering {
    let n = a.len().max(b.len());
    let at = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
    (0..n)
        .map(|i| at(a, i).cmp(&at(b, i)))
        .find(|o| !o.is_eq())
        .unwrap_or(std::cmp::Ordering::Equal)
}

/// Whether `v` begins with `prefix`, `v` padded with zeros (`3` begins with `3.0`).
fn padded_prefix(v: &[u64], prefix: &[u64]) -> bool {
    prefix
        .iter()
        .enumerate()
        .all(|(i, p)| v.get(i).copied().unwrap_or(0) == *p)
}

#[cfg(test)]
mod tests;
