//! Hands engine work to threads that may block.
//!
//! Instantiating and running a sandbox, and compiling at init, are blocking
//! CPU work; none of it may run on a tokio thread. Until the deadline
//! scheduler (luge-sched) takes over this seam, work runs on tokio's blocking
//! pool.

use luge_core::Outcome;
use luge_openwhisk::PreparedRun;

/// Runs a prepared invocation and returns its outcome.
pub async fn invoke(prepared: PreparedRun) -> Outcome {
    let PreparedRun {
        module, invocation, ..
    } = prepared;
    blocking(move || module.run(invocation))
        .await
        .unwrap_or_else(Outcome::failed)
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
