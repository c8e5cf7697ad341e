//! A read budget on a connection: what a hostile server can make the host
//! buffer for one answer.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A stream whose reads stop at a byte budget: an answer larger than the
/// budget ends the connection (a read error) instead of growing the
/// host's memory. The budget is set again before each request by its
/// [`Budget`] handle.
pub struct Budgeted<S> {
    stream: S,
    state: Arc<State>,
}

#[derive(Debug)]
struct State {
    /// Bytes the stream may still read.
    left: AtomicUsize,
    /// Whether a read went past the budget (the stream failed).
    spent: AtomicBool,
}

/// The handle that sets a [`Budgeted`] stream's budget.
#[derive(Debug, Clone)]
pub struct Budget(Arc<State>);

impl Budget {
    /// Lets the stream read `bytes` more, whatever was left.
    pub fn reset(&self, bytes: usize) {
        self.0.left.store(bytes, Ordering::Relaxed);
    }

    /// Whether a read went past the budget, so the stream failed (what a
    /// client library reports then is only "connection closed").
    pub fn spent(&self) -> bool {
        self.0.spent.load(Ordering::Relaxed)
    }
}

impl<S> Budgeted<S> {
    /// `stream`, allowed `bytes` of reads until its budget is reset.
    pub fn new(stream: S, bytes: usize) -> (Self, Budget) {
        let state = Arc::new(State {
            left: AtomicUsize::new(bytes),
            spent: AtomicBool::new(false),
        });
        (
            Self {
                stream,
                state: Arc::clone(&state),
            },
            Budget(state),
        )
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Budgeted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.stream).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read > 0
            && self
                .state
                .left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                    left.checked_sub(read)
                })
                .is_err()
        {
            self.state.spent.store(true, Ordering::Relaxed);
            return Poll::Ready(Err(std::io::Error::other(
                "the answer is larger than the function may receive",
            )));
        }
        poll
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Budgeted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn reads_stop_at_the_budget_until_reset() {
        let (mut server, client) = tokio::io::duplex(1 << 16);
        let (mut stream, budget) = Budgeted::new(client, 10);
        server.write_all(&[0; 8]).await.unwrap();
        let mut buf = [0; 64];
        assert_eq!(stream.read(&mut buf).await.unwrap(), 8);
        server.write_all(&[0; 8]).await.unwrap();
        assert!(stream.read(&mut buf).await.is_err());
        assert!(budget.spent());
        budget.reset(100);
        server.write_all(&[0; 8]).await.unwrap();
        assert_eq!(stream.read(&mut buf).await.unwrap(), 8);
    }
}
