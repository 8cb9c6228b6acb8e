//! An entry's payload as the driver gets it: decompressed (LZ4, ZSTD) under the limits and
//! the input's budget, into buffers one thread reuses ([`Scratch`]), cut to the image.

use std::borrow::Cow;

use super::{Compression, Entry, EntryKind};
use crate::error::{Error, ErrorKind, Result};
use crate::{Budget, Limits};

impl<'data> Entry<'data> {
    /// The payload, decompressed if need be, with padding still on.
    pub fn data(&self, limits: &Limits) -> Result<Cow<'data, [u8]>> {
        if self.compression() == Compression::None {
            return Ok(Cow::Borrowed(self.payload));
        }
        let mut scratch = Scratch::default();
        let budget = Budget::for_input(limits, self.payload.len() as u64);
        self.data_in(limits, &mut scratch, &budget)
            .map(|d| Cow::Owned(d.to_vec()))
    }

    /// [`Entry::data`] into `scratch`, whose buffers the next entry reuses: no allocation, no
    /// page faults and no zeroing once they have grown to the largest payload. What it
    /// inflates is charged to `budget` before anything is allocated.
    pub(crate) fn data_in<'a>(
        &'a self,
        limits: &Limits,
        scratch: &'a mut Scratch,
        budget: &Budget,
    ) -> Result<&'a [u8]> {
        let expected = self.header.uncompressed_size;
        let codec = match self.compression() {
            Compression::None => return Ok(self.payload),
            Compression::Lz4 => "LZ4",
            Compression::Zstd => "ZSTD",
        };
        if expected > limits.max_payload {
            return Err(Error::new(
                self.offset + 0x38,
                ErrorKind::TooLarge {
                    what: "decompressed payload",
                    size: expected,
                    limit: limits.max_payload,
                },
            ));
        }
        let size = usize::try_from(expected)
            .map_err(|_| Error::invalid(self.offset + 0x38, "uncompressed size", expected))?;
        if !budget.inflate("the compressed entries", expected) {
            return Err(Error::new(
                self.offset + 0x38,
                ErrorKind::OverBudget(budget.spent().unwrap_or_default()),
            ));
        }
        let fail =
            |detail: String| Error::new(self.offset, ErrorKind::Decompress { codec, detail });
        let n = match self.compression() {
            Compression::Lz4 => {
                // Only grown, never cleared: LZ4 writes every byte it reports.
                if scratch.buf.len() < size {
                    scratch.buf.resize(size, 0);
                }
                let out = scratch.buf.get_mut(..size).unwrap_or_default();
                lz4_flex::block::decompress_into(self.stored(), out)
                    .map_err(|e| fail(e.to_string()))?
            }
            _ => {
                scratch.buf.clear();
                scratch.buf.reserve(size);
                let zstd = match &mut scratch.zstd {
                    Some(z) => z,
                    slot => slot
                        .insert(zstd::bulk::Decompressor::new().map_err(|e| fail(e.to_string()))?),
                };
                zstd.decompress_to_buffer(self.stored(), &mut scratch.buf)
                    .map_err(|e| fail(e.to_string()))?
            }
        };
        if n as u64 != expected {
            return Err(fail(format!("{n} bytes out, header says {expected}")));
        }
        Ok(scratch.buf.get(..n).unwrap_or_default())
    }

    /// [`Entry::image`] into `scratch`, charging `budget`.
    pub(crate) fn image_in<'a>(
        &'a self,
        limits: &Limits,
        scratch: &'a mut Scratch,
        budget: &Budget,
    ) -> Result<&'a [u8]> {
        let kind = self.kind();
        let data = self.data_in(limits, scratch, budget)?;
        Ok(data.get(..image_len(kind, data)).unwrap_or(data))
    }

    /// The image as a tool would extract it: a cubin cut to its ELF size, PTX text without the
    /// terminating NUL and padding.
    pub fn image(&self, limits: &Limits) -> Result<Cow<'data, [u8]>> {
        let data = self.data(limits)?;
        let len = image_len(self.kind(), &data);
        Ok(match data {
            Cow::Borrowed(b) => Cow::Borrowed(b.get(..len).unwrap_or(b)),
            Cow::Owned(mut v) => {
                v.truncate(len);
                Cow::Owned(v)
            }
        })
    }
}

/// How much of a payload is the image: a cubin its ELF size, PTX up to the NUL.
fn image_len(kind: EntryKind, data: &[u8]) -> usize {
    match kind {
        EntryKind::Cubin => crate::cubin::elf_size(data)
            .filter(|&n| n <= data.len())
            .unwrap_or(data.len()),
        EntryKind::Ptx | EntryKind::RelocatablePtx => memchr::memchr(0, data).unwrap_or(data.len()),
        _ => data.len(),
    }
}

/// Buffers for decompressing one entry after another on one thread.
#[derive(Default)]
pub struct Scratch {
    buf: Vec<u8>,
    zstd: Option<zstd::bulk::Decompressor<'static>>,
}

impl std::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scratch")
            .field("capacity", &self.buf.capacity())
            .finish_non_exhaustive()
    }
}
