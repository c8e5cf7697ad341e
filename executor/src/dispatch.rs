//! Hands engine work to threads that may block: invocations to the
//! scheduler, compilation to tokio's blocking pool.

use std::sync::Arc;
use std::time::{Duration, Instant};

use luge_core::{Outcome, Termination};
use luge_sched::{Job, Scheduler};

/// A sandbox parked on I/O is not interrupted by its epoch deadline; this
/// bounds its wall-clock time, a little after the limit so that a running
/// sandbox is normally stopped by the engine first.
const PARKED_GRACE: Duration = Duration::from_millis(50);

/// What came back from the scheduler.
#[derive(Debug)]
pub struct Dispatched {
    /// The sandbox's outcome.
    pub outcome: Outcome,
    /// When it was submitted to the scheduler.
    pub submitted: Instant,
    /// Time from submission until a worker first polled the sandbox.
    pub queue_delay: Duration,
    /// What the scheduler knew of it as it ended (preemptions, CPU).
    pub progress: Option<luge_sched::JobProgress>,
}

/// Runs `sandbox` (its invocation's future, from `LoadedModule::start` or
/// `start_http`) under the scheduler with `deadline`, and awaits its
/// outcome; `cancel` is its invocation's cancellation.
///
/// The job holds `place` until the sandbox has really ended, not until this
/// future is dropped: a client that goes away frees nothing early, so the
/// admission bound counts every sandbox that exists. Dropping this future
/// (the client disconnected) cancels the invocation twice over: it raises
/// the invocation's [`Cancellation`](luge_core::Cancellation), which the
/// engine checks where it checks the time limit (Wasmtime's epoch ticks,
/// the WAMR and Wasmer watchdog), and the job, seeing its receiver closed
/// at its next poll, drops a sandbox that is parked or has yielded.
pub async fn run(
    scheduler: &Scheduler,
    action: &luge_core::Action,
    cancel: luge_core::Cancellation,
    sandbox: luge_core::SandboxFuture,
    deadline: Instant,
    place: crate::admission::Admitted,
) -> Dispatched {
    let submitted = Instant::now();
    let timeout = action.limits.timeout;
    // The request that awaits this went away if it is dropped first.
    let cancel_on_drop = UnlessDisarmed::new(move || cancel.cancel());
    let (mut done, outcome) = tokio::sync::oneshot::channel();
    scheduler.submit(Job {
        function: Arc::from(action.name.as_str()),
        deadline,
        expected: action.sched.expected_execution,
        // The engine ends a run at the time limit: no poll holds a
        // worker longer unless something else holds its thread.
        longest_poll: timeout + PARKED_GRACE,
        tenant: Some(Arc::clone(place.runs_as())),
        future: Box::pin(async move {
            // First poll: a worker picked the job up.
            let queue_delay = submitted.elapsed();
            let outcome = tokio::select! {
                // Checked first at every poll: a job whose requester left
                // is not run any further.
                biased;
                () = done.closed() => return,
                outcome = tokio::time::timeout(timeout + PARKED_GRACE, sandbox) => {
                    outcome.unwrap_or_else(|_| Outcome {
                        termination: Termination::TimedOut(timeout),
                        stdout: Vec::new(),
                        stderr: Vec::new(),
                        elapsed: submitted.elapsed(),
                    })
                }
            };
            let progress = luge_sched::current_job();
            // The sandbox is gone (the select dropped it): its place is
            // free before its requester hears, so that requester's next
            // request finds it free.
            drop(place);
            // The requester may have gone away meanwhile; nothing to tell.
            let _ = done.send(Dispatched {
                outcome,
                submitted,
                queue_delay,
                progress,
            });
        }),
    });
    let dispatched = outcome.await.unwrap_or_else(|_| Dispatched {
        outcome: Outcome::failed("internal executor error: the invocation was lost"),
        submitted,
        queue_delay: submitted.elapsed(),
        progress: None,
    });
    cancel_on_drop.disarm();
    dispatched
}

/// Runs its action when dropped before it is disarmed: what a request
/// future does (cancel its invocation, abort its handler) if its client
/// goes away while it waits.
pub(crate) struct UnlessDisarmed<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> UnlessDisarmed<F> {
    /// Arms `action`.
    pub(crate) fn new(action: F) -> Self {
        Self(Some(action))
    }

    /// Drops the action unrun.
    pub(crate) fn disarm(mut self) {
        self.0 = None;
    }
}

impl<F: FnOnce()> Drop for UnlessDisarmed<F> {
    fn drop(&mut self) {
        if let Some(action) = self.0.take() {
            action();
        }
    }
}

/// Work sent to the blocking pool that did not finish: it panicked, or the
/// runtime shut down under it.
#[derive(Debug, thiserror::Error)]
#[error("internal executor error: {0}")]
pub struct BlockingError(#[from] tokio::task::JoinError);

/// Runs `work` on `runtime`'s blocking pool (the ambient runtime's: one
/// pool for the process, whichever thread serves the request); a panic
/// there becomes an error instead of taking the request task down with it.
pub async fn blocking<T, F>(runtime: &tokio::runtime::Handle, work: F) -> Result<T, BlockingError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    runtime.spawn_blocking(work).await.map_err(BlockingError)
}
