//! A sandbox's stdio as in-memory files WASIX reads and writes.
//!
//! stdin is the invocation's bytes. stdout and stderr collect into buffers
//! the sandbox shares with the host, capped at the action's output limit:
//! a write past the cap fails (the guest sees an I/O error), it never grows
//! host memory.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};
use virtual_fs::VirtualFile;

/// 1 s after the epoch: WASIX treats zero times as unset.
const FILE_TIME: u64 = 1_000_000_000;

/// The invocation's input, read once from the start.
#[derive(Debug)]
pub struct Input {
    bytes: Vec<u8>,
    position: usize,
}

impl Input {
    /// stdin holding `bytes`.
    pub fn new(bytes: Vec<u8>) -> Self {
        Self { bytes, position: 0 }
    }
}

/// A capped output stream; clones share the buffer, so the host keeps one
/// to read after the run.
#[derive(Debug, Clone)]
pub struct Output {
    buffer: Arc<Mutex<Vec<u8>>>,
    cap: usize,
}

impl Output {
    /// An empty stream that holds at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Self {
            buffer: Arc::default(),
            cap,
        }
    }

    /// Everything written so far.
    pub fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        // Appends leave the buffer consistent even if a writer panicked.
        self.buffer.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn append(&self, bytes: &[u8]) -> io::Result<usize> {
        let mut buffer = self.lock();
        let room = self.cap.saturating_sub(buffer.len());
        if room == 0 && !bytes.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "output limit reached",
            ));
        }
        let taken = bytes.len().min(room);
        buffer.extend_from_slice(&bytes[..taken]);
        Ok(taken)
    }
}

impl AsyncRead for Input {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let rest = &self.bytes[self.position.min(self.bytes.len())..];
        let n = rest.len().min(buf.remaining());
        buf.put_slice(&rest[..n]);
        self.position += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Input {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, _: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(Err(io::ErrorKind::PermissionDenied.into()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for Output {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Ready(Err(io::ErrorKind::PermissionDenied.into()))
    }
}

impl AsyncWrite for Output {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(self.append(buf))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Streams cannot seek (as pipes cannot).
macro_rules! unseekable {
    ($t:ty) => {
        impl AsyncSeek for $t {
            fn start_seek(self: Pin<&mut Self>, _: io::SeekFrom) -> io::Result<()> {
                Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "stdio cannot seek",
                ))
            }

            fn poll_complete(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<u64>> {
                Poll::Ready(Ok(0))
            }
        }
    };
}

unseekable!(Input);
unseekable!(Output);

/// The parts of [`VirtualFile`] both streams answer alike.
macro_rules! stream_file {
    ($t:ty, $size:expr, $readable:expr) => {
        impl VirtualFile for $t {
            fn last_accessed(&self) -> u64 {
                FILE_TIME
            }

            fn last_modified(&self) -> u64 {
                FILE_TIME
            }

            fn created_time(&self) -> u64 {
                FILE_TIME
            }

            fn size(&self) -> u64 {
                let size: fn(&$t) -> usize = $size;
                size(self) as u64
            }

            fn set_len(&mut self, _: u64) -> virtual_fs::Result<()> {
                Err(virtual_fs::FsError::PermissionDenied)
            }

            fn unlink(&mut self) -> virtual_fs::Result<()> {
                Ok(())
            }

            fn poll_read_ready(
                self: Pin<&mut Self>,
                _: &mut Context<'_>,
            ) -> Poll<io::Result<usize>> {
                let readable: fn(&$t) -> usize = $readable;
                Poll::Ready(Ok(readable(&self)))
            }

            fn poll_write_ready(
                self: Pin<&mut Self>,
                _: &mut Context<'_>,
            ) -> Poll<io::Result<usize>> {
                Poll::Ready(Ok(8192))
            }
        }
    };
}

stream_file!(Input, |i| i.bytes.len(), |i| i
    .bytes
    .len()
    .saturating_sub(i.position));
stream_file!(Output, |o| o.lock().len(), |_| 0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_keeps_what_fits_and_refuses_the_rest() {
        let out = Output::new(5);
        assert_eq!(out.append(b"abc").ok(), Some(3));
        assert_eq!(out.append(b"defg").ok(), Some(2));
        assert!(out.append(b"h").is_err());
        assert_eq!(out.clone().take(), b"abcde");
    }
}
