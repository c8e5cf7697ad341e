//! One request to run an action in a fresh sandbox.

use std::sync::Arc;

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
}

impl Invocation {
    /// An invocation of `action` with `stdin` and no extra environment.
    pub fn new(action: Arc<Action>, stdin: impl Into<Vec<u8>>) -> Self {
        Self {
            action,
            stdin: stdin.into(),
            env: Vec::new(),
        }
    }
}
