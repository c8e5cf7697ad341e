//! Activation logs, framed by OpenWhisk's sentinel.
//!
//! OpenWhisk reads a container's stdout and stderr after each activation
//! until it sees the sentinel line on both. `luge proxy` writes to its own
//! streams (the container's logs, as Docker would capture them);
//! `luge serve` keeps a buffer per container that the invoker drains with
//! `GET /{container}/logs`.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// Ends each activation's logs on stdout and on stderr.
pub const SENTINEL: &str = "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX";

/// Where an action's log lines go.
pub trait LogSink: Send + Sync {
    /// One activation's lines; the sink appends the sentinel to both streams.
    fn activation(&self, stdout: &[&str], stderr: &[&str]);
    /// A message from the proxy itself (e.g. an init error), on stderr,
    /// without a sentinel.
    fn proxy_message(&self, text: &str);
}

/// The executor process's own stdout and stderr.
#[derive(Debug, Default)]
pub struct ProcessStreams;

impl LogSink for ProcessStreams {
    fn activation(&self, stdout: &[&str], stderr: &[&str]) {
        // Log writes that fail (closed pipe) must not fail the activation.
        let mut out = std::io::stdout().lock();
        for line in stdout {
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(out, "{SENTINEL}");
        let _ = out.flush();
        let mut err = std::io::stderr().lock();
        for line in stderr {
            let _ = writeln!(err, "{line}");
        }
        let _ = writeln!(err, "{SENTINEL}");
        let _ = err.flush();
    }

    fn proxy_message(&self, text: &str) {
        let _ = writeln!(std::io::stderr().lock(), "{text}");
    }
}

/// One captured log line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogLine {
    /// Milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// `stdout` or `stderr`.
    pub stream: &'static str,
    /// The line, without its newline.
    pub log: String,
}

/// A bounded in-memory log per container, drained by the invoker.
#[derive(Debug)]
pub struct LogBuffer {
    lines: Mutex<Lines>,
    max_lines: usize,
}

/// The kept lines and their total size.
#[derive(Debug, Default)]
struct Lines {
    lines: VecDeque<LogLine>,
    bytes: usize,
}

/// Lines kept per container between two reads. OpenWhisk's default log limit
/// is 10 MB per activation and the invoker reads after every activation, so
/// this only bounds a container whose logs nobody collects.
pub const DEFAULT_MAX_LOG_LINES: usize = 100_000;
/// Bytes of log text kept per container between two reads: OpenWhisk's
/// 10 MB activation log limit with room to spare. Lines can be long (a
/// function's whole stderr may be one line), so lines alone bound nothing.
pub const MAX_LOG_BYTES: usize = 16 << 20;

impl Default for LogBuffer {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_LOG_LINES)
    }
}

impl LogBuffer {
    /// A buffer that keeps the newest `max_lines` lines.
    pub fn new(max_lines: usize) -> Self {
        Self {
            lines: Mutex::new(Lines::default()),
            max_lines,
        }
    }

    fn lines(&self) -> std::sync::MutexGuard<'_, Lines> {
        // Each push/drain leaves the deque consistent; ignore poisoning.
        self.lines.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(lines: &mut Lines, time_ms: u64, stream: &'static str, log: &str) {
        lines.bytes += log.len();
        lines.lines.push_back(LogLine {
            time_ms,
            stream,
            log: log.to_owned(),
        });
    }

    /// Drops the oldest lines past the line and byte bounds.
    fn trim(&self, lines: &mut Lines) {
        while lines.lines.len() > self.max_lines || lines.bytes > MAX_LOG_BYTES {
            match lines.lines.pop_front() {
                Some(line) => lines.bytes -= line.log.len(),
                None => break,
            }
        }
    }

    /// Takes every line logged since the last drain.
    pub fn drain(&self) -> Vec<LogLine> {
        let mut lines = self.lines();
        lines.bytes = 0;
        lines.lines.drain(..).collect()
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl LogSink for LogBuffer {
    fn activation(&self, stdout: &[&str], stderr: &[&str]) {
        let time = now_ms();
        let mut lines = self.lines();
        for line in stdout {
            Self::push(&mut lines, time, "stdout", line);
        }
        Self::push(&mut lines, time, "stdout", SENTINEL);
        for line in stderr {
            Self::push(&mut lines, time, "stderr", line);
        }
        Self::push(&mut lines, time, "stderr", SENTINEL);
        self.trim(&mut lines);
    }

    fn proxy_message(&self, text: &str) {
        let mut lines = self.lines();
        Self::push(&mut lines, now_ms(), "stderr", text);
        self.trim(&mut lines);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_frames_and_bounds() {
        let buffer = LogBuffer::new(5);
        buffer.activation(&["a"], &["b"]);
        let lines = buffer.drain();
        let text: Vec<_> = lines.iter().map(|l| (l.stream, l.log.as_str())).collect();
        assert_eq!(
            text,
            vec![
                ("stdout", "a"),
                ("stdout", SENTINEL),
                ("stderr", "b"),
                ("stderr", SENTINEL)
            ]
        );
        assert!(buffer.drain().is_empty());
        buffer.activation(&["1", "2", "3"], &["4"]);
        assert_eq!(buffer.drain().len(), 5);
    }

    #[test]
    fn long_lines_are_bounded_by_bytes() {
        let buffer = LogBuffer::new(1000);
        let line = "x".repeat(MAX_LOG_BYTES / 4);
        for _ in 0..10 {
            buffer.activation(&[], &[line.as_str()]);
        }
        let kept = buffer.drain();
        let bytes: usize = kept.iter().map(|l| l.log.len()).sum();
        assert!(bytes <= MAX_LOG_BYTES, "{bytes}");
        assert_eq!(kept.last().unwrap().log, SENTINEL, "the newest are kept");
    }
}
