//! NVIDIA's device-code formats: fatbin containers and their entries, cubins (device ELF) and
//! PTX, plus a finder for them in any file.
//!
//! Zero-copy over `&[u8]`; nothing panics on malformed input; every size read from a file is
//! checked against the buffer and against [`Limits`] before use. No I/O: callers map or read
//! files and hand the bytes over.

pub mod body;
mod bytes;
pub mod compiler;
pub mod container;
pub mod cubin;
pub mod declarations;
mod error;
pub mod find;
pub mod host;
pub mod inspect;
pub mod names;
pub mod nvrtc_source;
pub mod par;
pub mod params;
pub(crate) mod pe;
pub mod printable;
pub mod ptx;
pub mod runtime;
pub(crate) mod work_budget;
pub mod write;

pub use container::{Compression, Container, Entry, EntryKind, Strictness};
pub use error::{Error, ErrorKind, Result};
pub use find::{find, Findings, Format, Hit, Item, Origin};
pub use printable::printable;
pub use work_budget::Budget;

/// Caps on what a hostile file can make the reader allocate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest decompressed entry payload.
    pub max_payload: u64,
    /// Largest zip member inflated into memory.
    pub max_member: u64,
    /// How deep archives inside archives are followed.
    pub max_depth: usize,
    /// What the zip members of one input may inflate to in all, nested zips included: this
    /// many times the input's size, and at least [`Limits::inflate_floor`]. A real wheel
    /// inflates to 1-4 times its size; a zip bomb to thousands.
    pub inflate_ratio: u64,
    pub inflate_floor: u64,
    /// What reading one input may cost in all ([`Budget`]): this many times its size in bytes
    /// searched, parsed and inflated (an item walked counts `work_budget::ITEM`), and at least
    /// [`Limits::work_floor`]. A real library costs a few times its size.
    pub work_ratio: u64,
    pub work_floor: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_payload: 1 << 30,
            max_member: 4 << 30,
            max_depth: 4,
            inflate_ratio: 32,
            inflate_floor: 1 << 30,
            work_ratio: 64,
            work_floor: 2 << 30,
        }
    }
}

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
