//! Hands engine work to threads that may block: invocations to the
//! scheduler, compilation at init to tokio's blocking pool.

use std::sync::Arc;
use std::time::{Duration, Instant};

use luge_core::{Outcome, Preemption, Termination};
use luge_openwhisk::PreparedRun;
use luge_sched::{Job, Scheduler};

/// A sandbox parked on I/O is not interrupted by its epoch deadline; this
/// bounds its wall-clock time, a little after the limit so that a running
/// sandbox is normally stopped by the engine first.
const PARKED_GRACE: Duration = Duration::from_millis(50);

/// Runs a prepared invocation under the scheduler and awaits its outcome.
pub async fn invoke(
    scheduler: &Scheduler,
    preemption: Preemption,
    prepared: PreparedRun,
) -> Outcome {
    let arrived = Instant::now();
    let deadline = prepared.deadline(arrived);
    let action = Arc::clone(&prepared.invocation.action);
    let timeout = action.limits.timeout;
    let sandbox = prepared.module.start(prepared.invocation, preemption);
    let (done, outcome) = tokio::sync::oneshot::channel();
    scheduler.submit(Job {
        function: Arc::from(action.name.as_str()),
        deadline,
        expected: action.sched.expected_execution,
        future: Box::pin(async move {
            let outcome = tokio::time::timeout(timeout + PARKED_GRACE, sandbox)
                .await
                .unwrap_or_else(|_| Outcome {
                    termination: Termination::TimedOut(timeout),
                    stdout: Vec::new(),
                    stderr: Vec::new(),
                    elapsed: arrived.elapsed(),
                });
            // The requester may have gone away; nothing else to tell.
            let _ = done.send(outcome);
        }),
    });
    outcome
        .await
        .unwrap_or_else(|_| Outcome::failed("internal executor error: the invocation was lost"))
}

/// Runs `work` on the blocking pool; a panic there becomes an error message
/// instead of taking the request task down with it.
pub async fn blocking<T, F>(work: F) -> Result<T, String>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| format!("internal executor error: {e}"))
}
