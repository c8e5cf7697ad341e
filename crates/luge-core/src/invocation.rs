//! One request to run an action in a fresh sandbox.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::action::Action;
use crate::calls::Calls;
use crate::state::State;
use crate::trace::Trace;

/// The per-invocation input; the action's configuration is shared.
#[derive(Clone)]
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
    /// How this invocation's calls to other functions reach the host;
    /// `None` where the host offers none (every call is then refused).
    pub calls: Option<Arc<dyn Calls>>,
    /// This invocation's shared state (`None`: every state import is
    /// refused as not granted). Dropped when the invocation ends, which
    /// releases its locks.
    pub state: Option<Arc<dyn State>>,
    /// This invocation's trace, where the engine and host calls record
    /// their spans (`None`: not traced, nothing recorded).
    pub trace: Option<Arc<dyn Trace>>,
    /// Whether the guest writes to this process's own stdout and stderr as
    /// it goes (`luge run`, as `wasmtime run`: a server announcing its
    /// port, a long job's progress) instead of into the outcome, which then
    /// holds none of it. `false`, every front end's: output is captured,
    /// bounded by the action's limit. Engines that only capture (WAMR,
    /// Wasmer) leave it in the outcome either way.
    pub inherit_stdio: bool,
    /// Whether the guest reads this process's own stdin as it goes (`luge
    /// run --stdin -` on Wasmtime, as `wasmtime run`: an interactive
    /// program, a test that answers what it printed) instead of
    /// [`Invocation::stdin`]. `false`, every front end's.
    pub inherit_stdin: bool,
}

impl std::fmt::Debug for Invocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Invocation")
            .field("action", &self.action.name)
            .field("stdin_bytes", &self.stdin.len())
            .field("env", &self.env)
            .field("calls", &self.calls.is_some())
            .field("state", &self.state.is_some())
            .field("traced", &self.trace.is_some())
            .field("inherit_stdio", &self.inherit_stdio)
            .field("inherit_stdin", &self.inherit_stdin)
            .finish_non_exhaustive()
    }
}

/// A flag the front end raises when an invocation's outcome is no longer
/// wanted. Engines check it where they check their time limit (Wasmtime at
/// its epoch ticks; WAMR and Wasmer through the watchdog (`luge-watchdog`)),
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
    /// This invocation with its state session traced in its trace (each
    /// state operation a host call span), when it has both and its trace
    /// records.
    pub fn with_traced_state(mut self) -> Self {
        if let Some(trace) = self.trace.clone() {
            self.state = self
                .state
                .take()
                .map(|state| crate::trace::TracedState::wrap(state, &trace));
        }
        self
    }

    /// The guest's `argv`, the same on every engine: the action's name as
    /// `argv[0]`, then its `wasi.args`.
    pub fn argv(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.action.name.as_str())
            .chain(self.action.capabilities.args.iter().map(String::as_str))
    }

    /// The guest's environment, the same on every engine: the action's
    /// (init `env`, then `wasi.env`), then this invocation's, one entry per
    /// name, the later value winning, in order of first appearance.
    pub fn env(&self) -> Vec<(&str, &str)> {
        let mut env: Vec<(&str, &str)> = Vec::with_capacity(self.action.env.len() + self.env.len());
        for (key, value) in self.action.env.iter().chain(&self.env) {
            match env.iter_mut().find(|(k, _)| *k == key.as_str()) {
                Some(entry) => entry.1 = value,
                None => env.push((key, value)),
            }
        }
        env
    }

    /// An invocation of `action` with `stdin` and no extra environment.
    pub fn new(action: Arc<Action>, stdin: impl Into<Vec<u8>>) -> Self {
        Self {
            action,
            stdin: stdin.into(),
            env: Vec::new(),
            cancel: Cancellation::default(),
            calls: None,
            state: None,
            trace: None,
            inherit_stdio: false,
            inherit_stdin: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_and_env_are_built_once() {
        let mut action = Action::command("hello");
        action.capabilities.args = vec!["--flag".into()];
        action.env = vec![("A".into(), "action".into()), ("B".into(), "b".into())];
        let mut invocation = Invocation::new(Arc::new(action), "");
        invocation.env = vec![("C".into(), "c".into()), ("A".into(), "run".into())];
        assert_eq!(invocation.argv().collect::<Vec<_>>(), ["hello", "--flag"]);
        assert_eq!(invocation.env(), [("A", "run"), ("B", "b"), ("C", "c")]);
    }
}
