//! Hands engine work to threads that may block: invocations to the
//! scheduler, compilation to tokio's blocking pool. Also the admission
//! bound that turns a flood into 503s instead of an unbounded queue.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use luge_core::{Invocation, LoadedModule, Outcome, Preemption, Termination};
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
    /// Time from submission until a worker first polled the sandbox.
    pub queue_delay: Duration,
}

/// Runs `invocation` on `module` under the scheduler with `deadline`, and
/// awaits its outcome.
pub async fn invoke(
    scheduler: &Scheduler,
    preemption: Preemption,
    module: Arc<dyn LoadedModule>,
    invocation: Invocation,
    deadline: Instant,
) -> Dispatched {
    let submitted = Instant::now();
    let action = Arc::clone(&invocation.action);
    let timeout = action.limits.timeout;
    let sandbox = module.start(invocation, preemption);
    let (done, outcome) = tokio::sync::oneshot::channel();
    scheduler.submit(Job {
        function: Arc::from(action.name.as_str()),
        deadline,
        expected: action.sched.expected_execution,
        future: Box::pin(async move {
            // First poll: a worker picked the job up.
            let queue_delay = submitted.elapsed();
            let outcome = tokio::time::timeout(timeout + PARKED_GRACE, sandbox)
                .await
                .unwrap_or_else(|_| Outcome {
                    termination: Termination::TimedOut(timeout),
                    stdout: Vec::new(),
                    stderr: Vec::new(),
                    elapsed: submitted.elapsed(),
                });
            // The requester may have gone away; nothing else to tell.
            let _ = done.send(Dispatched {
                outcome,
                queue_delay,
            });
        }),
    });
    outcome.await.unwrap_or_else(|_| Dispatched {
        outcome: Outcome::failed("internal executor error: the invocation was lost"),
        queue_delay: submitted.elapsed(),
    })
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

/// Bounds the invocations admitted and not yet finished. Past the bound a
/// request is refused at once (503) rather than queued without limit: a
/// client can retry elsewhere, while a queue that only grows makes every
/// deadline in it miss. Each admitted invocation holds a pool slot while it
/// runs, so the default bound is the pool size.
#[derive(Debug)]
pub struct Admission {
    pending: AtomicUsize,
    limit: usize,
}

/// One admitted invocation; dropping it frees the place.
#[derive(Debug)]
pub struct Admitted<'a>(&'a Admission);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Admission {
    /// Admits at most `limit` invocations at once.
    pub fn new(limit: usize) -> Self {
        Self {
            pending: AtomicUsize::new(0),
            limit,
        }
    }

    /// A place for one more invocation, or `None` when all are taken.
    pub fn try_admit(&self) -> Option<Admitted<'_>> {
        self.pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .ok()
            .map(|_| Admitted(self))
    }

    /// Invocations admitted and not finished.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// The bound.
    pub fn limit(&self) -> usize {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_is_bounded_and_released_on_drop() {
        let admission = Admission::new(2);
        let a = admission.try_admit().unwrap();
        let b = admission.try_admit().unwrap();
        assert!(admission.try_admit().is_none());
        assert_eq!(admission.pending(), 2);
        drop(a);
        let c = admission.try_admit().unwrap();
        drop((b, c));
        assert_eq!(admission.pending(), 0);
    }
}
