//! What a NATS server may send the client, bounded.
//!
//! The NATS client buffers a protocol line until its end and a message
//! until its last byte, however long the server says it is: a hostile
//! server (a tenant's trigger names it) could make it hold gigabytes. So
//! the client talks to the server through this relay, one connection on
//! a loopback port of its own, which reads the server's side as NATS's
//! protocol defines it (lines; `MSG`/`HMSG` with their sizes and
//! payloads) and:
//!
//! - ends the connection at a line longer than [`MAX_LINE`] or a size
//!   that is not a number;
//! - passes a message of at most `max_message` bytes (headers included)
//!   on as it is;
//! - passes a longer one on without its headers and payload, which it
//!   reads off the socket and drops, as a header-only message carrying
//!   [`OVERSIZED`] and the size the server gave: the client holds its
//!   subject and acknowledgement subject only, and the source dead-letters
//!   it by those.
//!
//! What the client sends the server is copied as it is. The relay lives as
//! long as its [`Guard`]: dropping it ends both connections.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The longest protocol line a server may send (its `INFO` holds the
/// server's options and its cluster's URLs: a few KiB in practice).
pub const MAX_LINE: usize = 64 << 10;

/// The header an oversized message is passed on with, its value the size
/// the server gave (headers and payload).
pub const OVERSIZED: &str = "Luge-Oversized";

/// A relay to one server; dropping it ends it.
pub struct Guard {
    /// Where the client connects.
    pub local: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A relay to `server`: it accepts one connection on `local` (for
/// `wait`, then gives up), dials `server`, and relays until either side
/// ends or breaks the rules above.
pub async fn relay(
    server: SocketAddr,
    max_message: usize,
    wait: std::time::Duration,
) -> std::io::Result<Guard> {
    let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(async move {
        let Ok(Ok((client, _))) = tokio::time::timeout(wait, listener.accept()).await else {
            return;
        };
        drop(listener);
        let Ok(Ok(upstream)) = tokio::time::timeout(wait, TcpStream::connect(server)).await else {
            return;
        };
        let _ = client.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        let (mut client_read, client_write) = client.into_split();
        let (server_read, mut server_write) = upstream.into_split();
        let up = async {
            let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        };
        let down = async {
            if let Err(e) = down(server_read, client_write, max_message).await {
                tracing::warn!(%server, error = %e, "NATS server broke the protocol's bounds; connection ended");
            }
        };
        // Either side ending ends both.
        tokio::select! {
            () = up => {}
            () = down => {}
        }
    });
    Ok(Guard { local, task })
}

/// Why the relay ended a connection.
#[derive(Debug, thiserror::Error)]
pub enum Broken {
    /// The connection failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A line with no end within [`MAX_LINE`].
    #[error("a protocol line over {MAX_LINE} bytes")]
    LongLine,
    /// A message whose sizes are not numbers, or do not add up.
    #[error("a message with sizes that are not numbers: {0:?}")]
    Sizes(String),
}

/// What the relay is reading from the server.
enum Reading {
    /// A protocol line.
    Line,
    /// A message's headers and payload and their `\r\n`: how many bytes
    /// are left, and whether they are passed on or dropped.
    Body { left: usize, pass: bool },
}

/// Relays the server's side (`from`) to the client (`to`) under the
/// rules above.
async fn down(
    mut from: impl tokio::io::AsyncRead + Unpin,
    mut to: impl tokio::io::AsyncWrite + Unpin,
    max_message: usize,
) -> Result<(), Broken> {
    let mut buffer = Vec::with_capacity(16 << 10);
    let mut state = Reading::Line;
    let mut chunk = vec![0u8; 16 << 10];
    loop {
        let n = from.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buffer.extend_from_slice(&chunk[..n]);
        let mut out = Vec::new();
        let mut at = 0;
        loop {
            match state {
                Reading::Line => {
                    let rest = &buffer[at..];
                    let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else {
                        if rest.len() > MAX_LINE {
                            return Err(Broken::LongLine);
                        }
                        break;
                    };
                    if end > MAX_LINE {
                        return Err(Broken::LongLine);
                    }
                    let line = &rest[..end];
                    match message_sizes(line)? {
                        None => out.extend_from_slice(&rest[..end + 2]),
                        Some((size, _)) if size <= max_message => {
                            out.extend_from_slice(&rest[..end + 2]);
                            state = Reading::Body {
                                left: size.saturating_add(2),
                                pass: true,
                            };
                        }
                        Some((size, _)) => {
                            out.extend_from_slice(&oversized(line, size));
                            state = Reading::Body {
                                left: size.saturating_add(2),
                                pass: false,
                            };
                        }
                    }
                    at += end + 2;
                }
                Reading::Body { left, pass } => {
                    let take = left.min(buffer.len() - at);
                    if pass {
                        out.extend_from_slice(&buffer[at..at + take]);
                    }
                    at += take;
                    if take == left {
                        state = Reading::Line;
                    } else {
                        state = Reading::Body {
                            left: left - take,
                            pass,
                        };
                        break;
                    }
                }
            }
        }
        buffer.drain(..at);
        to.write_all(&out).await?;
    }
}

/// A `MSG`/`HMSG` line's total size (headers and payload) and its
/// headers' size; `None` for another line.
fn message_sizes(line: &[u8]) -> Result<Option<(usize, usize)>, Broken> {
    let header = line.starts_with(b"HMSG ");
    if !header && !line.starts_with(b"MSG ") {
        return Ok(None);
    }
    let text = String::from_utf8_lossy(line);
    let parts: Vec<&str> = text.split_ascii_whitespace().collect();
    let bad = || Broken::Sizes(text.chars().take(200).collect());
    let number = |s: Option<&&str>| s.and_then(|s| s.parse::<usize>().ok()).ok_or_else(bad);
    let n = parts.len();
    if header {
        // HMSG subject sid [reply] header-bytes total-bytes
        if !(5..=6).contains(&n) {
            return Err(bad());
        }
        let (headers, total) = (number(parts.get(n - 2))?, number(parts.get(n - 1))?);
        if headers > total {
            return Err(bad());
        }
        Ok(Some((total, headers)))
    } else {
        // MSG subject sid [reply] bytes
        if !(4..=5).contains(&n) {
            return Err(bad());
        }
        Ok(Some((number(parts.get(n - 1))?, 0)))
    }
}

/// The header-only message that stands for the message of `line`,
/// `size` bytes long, passed on without its body.
fn oversized(line: &[u8], size: usize) -> Vec<u8> {
    let text = String::from_utf8_lossy(line);
    let parts: Vec<&str> = text.split_ascii_whitespace().collect();
    let header = parts[0] == "HMSG";
    // subject, sid and the reply subject if any.
    let keep = &parts[1..parts.len() - if header { 2 } else { 1 }];
    let headers = format!("NATS/1.0\r\n{OVERSIZED}: {size}\r\n\r\n");
    let mut out = format!(
        "HMSG {} {} {}\r\n",
        keep.join(" "),
        headers.len(),
        headers.len()
    )
    .into_bytes();
    out.extend_from_slice(headers.as_bytes());
    out.extend_from_slice(b"\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the client gets for `sent` from the server, in reads of
    /// `step` bytes.
    async fn relayed(sent: &[u8], max: usize, step: usize) -> Result<Vec<u8>, Broken> {
        let (mut server, relay_side) = tokio::io::duplex(1 << 20);
        let (client_side, mut client) = tokio::io::duplex(1 << 20);
        let sent = sent.to_vec();
        let writer = tokio::spawn(async move {
            for piece in sent.chunks(step) {
                server.write_all(piece).await.unwrap();
            }
        });
        let result = down(relay_side, client_side, max).await;
        writer.await.unwrap();
        result?;
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        Ok(got)
    }

    #[tokio::test]
    async fn messages_within_the_bound_pass_unchanged_however_they_are_cut() {
        let sent = b"INFO {\"x\":1}\r\nPING\r\nMSG a.b 1 $JS.ACK.x 5\r\nhello\r\n\
                     HMSG a.b 2 r 12 14\r\nNATS/1.0\r\n\r\nhi\r\n+OK\r\n";
        for step in [1, 3, 7, sent.len()] {
            assert_eq!(relayed(sent, 100, step).await.unwrap(), sent, "{step}");
        }
    }

    #[tokio::test]
    async fn an_oversized_message_passes_as_its_headers_alone() {
        let body = vec![b'x'; 5000];
        let mut sent = b"MSG jobs 1 $JS.ACK.a 5000\r\n".to_vec();
        sent.extend_from_slice(&body);
        sent.extend_from_slice(b"\r\nMSG jobs 1 $JS.ACK.b 2\r\nok\r\n");
        let got = relayed(&sent, 1024, 999).await.unwrap();
        let expected = "HMSG jobs 1 $JS.ACK.a 34 34\r\nNATS/1.0\r\nLuge-Oversized: 5000\r\n\r\n\r\n\
                        MSG jobs 1 $JS.ACK.b 2\r\nok\r\n";
        assert_eq!(String::from_utf8(got).unwrap(), expected);
    }

    #[tokio::test]
    async fn endless_lines_and_bad_sizes_end_the_connection() {
        let long = vec![b'I'; MAX_LINE + 10];
        assert!(matches!(
            relayed(&long, 100, 4096).await,
            Err(Broken::LongLine)
        ));
        for bad in [
            &b"MSG a 1 lots\r\n"[..],
            b"MSG a 1 99999999999999999999999\r\n",
            b"HMSG a 1 10 5\r\n",
            b"MSG a\r\n",
        ] {
            assert!(
                matches!(relayed(bad, 100, 64).await, Err(Broken::Sizes(_))),
                "{bad:?}"
            );
        }
    }
}
