//! The one shape of every parse error in fatkit-arch: the text that does not parse, where it
//! stands in the whole input, what is wrong with it and how to write it, and the targets it
//! may have meant. Displayed as `'INPUT': REASON; did you mean ...?`.

use std::fmt;

use crate::Target;

/// Text that is not a compute capability, a driver or CUDA version, a target, a target list
/// or a toolchain pin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// The text that does not parse (one element of a list, or the whole value).
    pub input: String,
    /// Its byte offset in the whole input: 0 for a single value.
    pub offset: usize,
    /// What is wrong, and how to write it: `not a CUDA version; write it as MAJOR.MINOR, ...`.
    pub reason: String,
    /// Targets the input may have meant.
    pub suggestions: Vec<Target>,
}

impl ParseError {
    pub fn new(input: &str, reason: impl Into<String>) -> ParseError {
        ParseError::at(input, 0, reason)
    }

    pub fn at(input: &str, offset: usize, reason: impl Into<String>) -> ParseError {
        ParseError {
            input: input.to_owned(),
            offset,
            reason: reason.into(),
            suggestions: Vec::new(),
        }
    }

    /// `; did you mean sm_90 or sm_90a?`, or nothing.
    pub fn hint(&self) -> String {
        let names: Vec<String> = self.suggestions.iter().map(|t| t.to_string()).collect();
        match names.as_slice() {
            [] => String::new(),
            [one] => format!("; did you mean {one}?"),
            [init @ .., last] => format!("; did you mean {} or {last}?", init.join(", ")),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "'{}': {}{}", self.input, self.reason, self.hint())
    }
}

impl std::error::Error for ParseError {}
