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
    /// The sandbox could not be started (instantiation failed, resources).
    Failed(String),
}

impl Termination {
    /// Exited with status 0.
    pub fn is_success(&self) -> bool {
        matches!(self, Self::Exited(0))
    }
}

impl Outcome {
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
