//! One request to run an action in a fresh sandbox.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::action::Action;

/// The per-invocation input; the action's configuration is shared.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The action being run.
    pub action: Arc<Action>,
    /// Bytes on the sandbox's stdin.
    pub stdin: Vec<u8>,
    /// Environment for this invocation only (e.g. `__OW_ACTIVATION_ID`),
    /// set after the action's own environment so it wins on conflicts.
    pub env: Vec<(String, String)>,
    /// Set when no one waits for the outcome any more (the client went
    /// away): the engine stops the sandbox at its next check.
    pub cancel: Cancellation,
}

/// A flag the front end raises when an invocation's outcome is no longer
/// wanted. Engines check it where they check their time limit (Wasmtime at
/// its epoch ticks; WAMR and Wasmer through the [`watchdog`](crate::watchdog)),
/// so a cancelled sandbox stops as soon as a timed-out one would.
#[derive(Debug, Clone, Default)]
pub struct Cancellation(Arc<AtomicBool>);

impl Cancellation {
    /// Asks the sandbox to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether [`Cancellation::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

impl Invocation {
    /// An invocation of `action` with `stdin` and no extra environment.
    pub fn new(action: Arc<Action>, stdin: impl Into<Vec<u8>>) -> Self {
        Self {
            action,
            stdin: stdin.into(),
            env: Vec::new(),
            cancel: Cancellation::default(),
        }
    }
}
