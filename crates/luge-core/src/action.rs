//! An [`Action`]: everything about a deployed function except its code.

use std::time::Duration;

use crate::capabilities::Capabilities;
use crate::limits::Limits;

/// The entry point of a WASI command module.
pub const COMMAND_ENTRY: &str = "_start";

/// A function as configured at init (or from a route), shared by every
/// invocation of it.
#[derive(Debug, Clone)]
pub struct Action {
    /// Name, used as `argv[0]` and in logs and metrics.
    pub name: String,
    /// The exported function to call: [`COMMAND_ENTRY`] or a named export.
    pub entry: String,
    /// Environment set in every invocation (init `env`, `wasi.env`).
    pub env: Vec<(String, String)>,
    /// Granted directories and argv.
    pub capabilities: Capabilities,
    /// Enforced limits.
    pub limits: Limits,
    /// Scheduling hints.
    pub sched: SchedHints,
}

/// What an action tells the scheduler about itself (`sched.*` annotations).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedHints {
    /// Deadline of an invocation relative to its arrival.
    pub relative_deadline: Option<Duration>,
    /// Expected execution time, seeding estimates before any run is measured.
    pub expected_execution: Option<Duration>,
}

/// The relative deadline of work no one gave one (no `deadline` from
/// OpenWhisk, no `sched.relative_deadline_us`). Not the time limit: a
/// function with a short limit would then outrank every other function
/// for as long as it runs. 100 ms, the latency an interactive request
/// expects, keeps unannotated work in arrival order among itself and lets
/// deadline-annotated work go ahead of it only by their stated urgency.
pub const DEFAULT_RELATIVE_DEADLINE: Duration = Duration::from_millis(100);

impl SchedHints {
    /// The relative deadline to schedule by: the annotated one, else
    /// [`DEFAULT_RELATIVE_DEADLINE`].
    pub fn relative_deadline_or_default(&self) -> Duration {
        self.relative_deadline.unwrap_or(DEFAULT_RELATIVE_DEADLINE)
    }
}

impl Action {
    /// An action running `_start` with default limits and no capabilities.
    pub fn command(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            entry: COMMAND_ENTRY.to_owned(),
            env: Vec::new(),
            capabilities: Capabilities::default(),
            limits: Limits::default(),
            sched: SchedHints::default(),
        }
    }
}
