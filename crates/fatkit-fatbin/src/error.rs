//! Errors: what is wrong, and at which byte offset of the buffer being read.

use std::fmt;

/// A malformed or over-limit input, at `offset` bytes into the buffer that was parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub offset: u64,
    pub kind: ErrorKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Fewer bytes than a header or payload needs.
    Truncated {
        what: &'static str,
        needed: u64,
        available: u64,
    },
    /// A field holds a value the format does not allow.
    Invalid { what: &'static str, value: u64 },
    /// The entries of a container do not add up to its size.
    SizeMismatch { declared: u64, found: u64 },
    /// A size read from the file is larger than the limit allows.
    TooLarge {
        what: &'static str,
        size: u64,
        limit: u64,
    },
    /// A compressed payload does not decompress to its declared size.
    Decompress { codec: &'static str, detail: String },
    /// A device ELF (cubin) that does not parse.
    Elf(String),
    /// An archive (ar, zip) that does not parse.
    Archive(String),
    /// A Windows PE image whose headers or section table do not parse (its bytes are then
    /// searched by the magic scan alone).
    Pe(String),
    /// Reading it would cost more than the input's budget ([`crate::Budget::spent`]).
    OverBudget(String),
}

impl Error {
    pub(crate) fn new(offset: impl TryInto<u64>, kind: ErrorKind) -> Error {
        Error {
            offset: offset.try_into().unwrap_or(u64::MAX),
            kind,
        }
    }

    pub(crate) fn truncated(
        offset: usize,
        what: &'static str,
        needed: u64,
        available: usize,
    ) -> Error {
        Error::new(
            offset,
            ErrorKind::Truncated {
                what,
                needed,
                available: available as u64,
            },
        )
    }

    pub(crate) fn invalid(offset: usize, what: &'static str, value: u64) -> Error {
        Error::new(offset, ErrorKind::Invalid { what, value })
    }

    /// The same error, at an offset further into an enclosing buffer.
    pub(crate) fn shifted(mut self, by: u64) -> Error {
        self.offset = self.offset.saturating_add(by);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at offset {:#x}: ", self.offset)?;
        match &self.kind {
            ErrorKind::Truncated {
                what,
                needed,
                available,
            } => {
                write!(
                    f,
                    "truncated {what}: needs {needed} bytes, {available} left"
                )
            }
            ErrorKind::Invalid { what, value } => write!(f, "invalid {what} {value:#x}"),
            ErrorKind::SizeMismatch { declared, found } => write!(
                f,
                "container declares {declared} bytes of entries, its entries take {found}"
            ),
            ErrorKind::TooLarge { what, size, limit } => {
                write!(f, "{what} of {size} bytes exceeds the limit of {limit}")
            }
            ErrorKind::Decompress { codec, detail } => {
                write!(f, "{codec} payload does not decompress: {detail}")
            }
            ErrorKind::Elf(detail) => write!(f, "malformed cubin: {detail}"),
            ErrorKind::Archive(detail) => write!(f, "malformed archive: {detail}"),
            ErrorKind::Pe(detail) => write!(
                f,
                "malformed PE image: {detail}; check that the file is whole (its sections were not read: only the magic scan looked for containers)"
            ),
            ErrorKind::OverBudget(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;
