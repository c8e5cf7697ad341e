//! What an action tells the scheduler about itself: read from its
//! `sched.*` annotations (see [`crate::capabilities`]), carried by its
//! [`Action`](crate::Action).

use std::time::Duration;

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
