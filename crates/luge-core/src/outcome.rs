//! What came out of one sandbox run.

use std::time::Duration;

/// Captured streams and how the run ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// How the sandbox ended.
    pub termination: Termination,
    /// Everything the guest wrote to stdout.
    pub stdout: Vec<u8>,
    /// Everything the guest wrote to stderr.
    pub stderr: Vec<u8>,
    /// Time from instantiation to teardown.
    pub elapsed: Duration,
}

/// How a sandbox run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Termination {
    /// The entry point returned or called `proc_exit` with this code.
    Exited(i32),
    /// The guest trapped (unreachable, out-of-bounds access, ...).
    Trapped(String),
    /// Stopped at its time limit.
    TimedOut(Duration),
    /// A memory growth beyond the limit was refused and the guest failed.
    OutOfMemory {
        /// The limit in bytes.
        limit_bytes: u64,
    },
    /// Ran out of fuel.
    OutOfFuel,
    /// Wrote more to stdout than its cap.
    OutputTooLarge {
        /// The cap in bytes.
        limit_bytes: usize,
    },
    /// The sandbox could not be started (instantiation failed, resources).
    Failed(String),
}

impl Termination {
    /// The end of a guest that called `proc_exit(status)`, as every engine
    /// reports it: the low 8 bits of `status`, the exit status a POSIX
    /// parent sees of `exit(status)`. Written once because the engines
    /// differ on the rest (found by luge-diff): WAMR kept all 32 bits,
    /// Wasmer's WASI keeps `status % 256` as a signed 16-bit value (-1
    /// became 65535), and Wasmtime's preview 1 traps on statuses of 126
    /// and more. 8 bits is what every engine can report the same way.
    pub fn exit(status: i32) -> Self {
        Self::Exited(status & 0xFF)
    }
}

/// Why an engine could not run a sandbox at all, in the words every
/// engine uses: the invocation fails with it ([`Termination::Failed`],
/// through `From`, with its causes on one line).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A granted directory could not be given to the sandbox.
    #[error("granted directory {guest}")]
    Grant {
        /// The directory as the guest sees it.
        guest: String,
        /// The engine's or the system's reason.
        #[source]
        source: crate::error::Cause,
    },
    /// An argument or environment variable holds a NUL byte.
    #[error("a WASI argument or variable contains NUL")]
    Nul,
    /// The engine could not instantiate the module.
    #[error("instantiation failed")]
    Instantiate(#[source] crate::error::Cause),
    /// The entry is not an exported function taking and returning nothing,
    /// `() -> ()` (admission checks it first): every engine answers so.
    #[error("the module exports no function {0:?} taking and returning nothing")]
    NoEntry(String),
    /// The engine itself could not set the sandbox up.
    #[error("the engine could not set up the sandbox: {0}")]
    Engine(&'static str),
    /// Every sandbox slot of the engine is in use: overload, not the
    /// function's fault (answered like a refused admission, 503).
    #[error("every sandbox slot is in use; retry later")]
    Busy,
}

impl From<SandboxError> for Termination {
    fn from(error: SandboxError) -> Self {
        Self::Failed(crate::error::error_line(&error))
    }
}

impl Termination {
    /// Exited with status 0.
    pub fn is_success(&self) -> bool {
        matches!(self, Self::Exited(0))
    }
}

/// Appended to stderr cut at its cap.
pub const STDERR_CUT: &[u8] = b"\n[luge: stderr cut at its cap]\n";

impl Outcome {
    /// Applies the output cap to streams captured with
    /// [`Limits::capture_bytes`](crate::Limits::capture_bytes): stdout past
    /// `cap` ends the run as [`Termination::OutputTooLarge`] (a truncated
    /// result must never pass for the whole one); stderr past it is cut
    /// and says so. Every engine ends its outcome with this.
    pub fn cap_output(mut self, cap: usize) -> Self {
        if self.stdout.len() > cap {
            self.stdout.truncate(cap);
            // Its failed write may have made the guest exit or trap; a time
            // or memory limit it also hit stays the reason given.
            if matches!(
                self.termination,
                Termination::Exited(_) | Termination::Trapped(_)
            ) {
                self.termination = Termination::OutputTooLarge { limit_bytes: cap };
            }
        }
        if self.stderr.len() > cap {
            self.stderr.truncate(cap);
            self.stderr.extend_from_slice(STDERR_CUT);
        }
        self
    }

    /// An outcome for a sandbox that never started.
    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            termination: Termination::Failed(message.into()),
            stdout: Vec::new(),
            stderr: Vec::new(),
            elapsed: Duration::ZERO,
        }
    }
}
