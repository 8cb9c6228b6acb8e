//! Standard output for a reader that may leave: what the command line writes its answer to.

use std::io::Write;

/// Standard output whose reader may go away (`fatkit diff A B | head`): once a write finds
/// the pipe closed, the rest is discarded as written, so that the command still finishes and
/// exits with its own answer (1 for a finding) rather than 0 or an error.
#[derive(Debug)]
pub struct ReaderMayLeave<W> {
    inner: W,
    gone: bool,
}

impl<W: Write> ReaderMayLeave<W> {
    pub fn new(inner: W) -> ReaderMayLeave<W> {
        ReaderMayLeave { inner, gone: false }
    }
}

impl<W: Write> Write for ReaderMayLeave<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.gone {
            return Ok(buf.len());
        }
        match self.inner.write(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.gone = true;
                Ok(buf.len())
            }
            other => other,
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self.inner.flush() {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.gone = true;
                Ok(())
            }
            _ if self.gone => Ok(()),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pipe whose reader left after `keep` bytes.
    struct Closing {
        keep: usize,
        got: Vec<u8>,
    }

    impl Write for Closing {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.got.len() >= self.keep {
                return Err(std::io::ErrorKind::BrokenPipe.into());
            }
            self.got.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_pipe_is_written_past_and_other_errors_are_not() {
        let mut out = ReaderMayLeave::new(Closing {
            keep: 4,
            got: Vec::new(),
        });
        for _ in 0..10 {
            assert!(out.write_all(b"line\n").is_ok());
        }
        assert!(out.flush().is_ok());
        assert_eq!(out.inner.got, b"line\n");
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::StorageFull.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        assert!(ReaderMayLeave::new(Full).write_all(b"x").is_err());
    }
}
