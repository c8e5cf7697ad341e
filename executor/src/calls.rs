//! Calls between functions on the standalone host (host API v1): the
//! [`Calls`] an invocation of a function gets. A callee is found by name
//! among the host's functions, must be listed in the caller's `calls`,
//! takes an admission place like any invocation (so a flood of fan-outs
//! meets the same 503 bound), and runs in a fresh sandbox under the
//! caller's absolute deadline, tightened by its own route deadline.

use std::sync::Arc;
use std::time::Instant;

use luge_core::Invocation;
use luge_core::calls::{
    CallError, CallMode, CallResult, CallStatus, Calls, MAX_CALL_DEPTH, PendingCall,
};
use luge_host::{Function, FunctionHost};

use crate::routes::App;

/// One invocation's calls.
pub(crate) struct HostCalls {
    pub app: Arc<App>,
    pub host: Arc<FunctionHost>,
    /// The calling function: its `calls` are the grants.
    pub caller: Arc<Function>,
    /// Nesting of the calling invocation (0 for one a client made).
    pub depth: u32,
    /// The calling invocation's absolute deadline.
    pub deadline: Instant,
    /// The request id of the client request at the root of the call graph.
    pub request_id: u64,
    /// Where callees are started: they run at once, not when awaited.
    pub runtime: tokio::runtime::Handle,
}

impl Calls for HostCalls {
    fn start(&self, name: &str, input: Vec<u8>, mode: CallMode) -> Result<PendingCall, CallError> {
        self.start_granted(name, input, mode).inspect_err(|e| {
            // Label only with a granted name: an ungranted one is the
            // guest's own string and would let it grow the metrics.
            let granted = self.caller.spec.calls.iter().any(|g| g == name);
            let label = if granted { name } else { "-" };
            self.app
                .metrics
                .observe_call(&self.caller.name, label, e.name());
        })
    }
}

impl HostCalls {
    fn start_granted(
        &self,
        name: &str,
        input: Vec<u8>,
        mode: CallMode,
    ) -> Result<PendingCall, CallError> {
        if !self.caller.spec.calls.iter().any(|granted| granted == name) {
            return Err(CallError::NotGranted);
        }
        if self.depth + 1 > MAX_CALL_DEPTH {
            return Err(CallError::Depth);
        }
        let callee = self.host.by_name(name).ok_or(CallError::NotFound)?;
        let place = self.app.admit(&callee.name).ok_or(CallError::Busy)?;
        let arrived = Instant::now();
        let deadline = self
            .deadline
            .min(arrived + callee.action.sched.relative_deadline_or_default());
        let invocation = Invocation {
            env: vec![
                ("LUGE_REQUEST_ID".to_owned(), self.request_id.to_string()),
                ("LUGE_CALLER".to_owned(), self.caller.name.clone()),
            ],
            calls: Some(Arc::new(HostCalls {
                app: Arc::clone(&self.app),
                host: Arc::clone(&self.host),
                caller: Arc::clone(&callee),
                depth: self.depth + 1,
                deadline,
                request_id: self.request_id,
                runtime: self.runtime.clone(),
            })),
            ..Invocation::new(Arc::clone(&callee.action), input)
        };
        let app = Arc::clone(&self.app);
        let (caller, request_id) = (self.caller.name.clone(), self.request_id);
        let metrics_app = Arc::clone(&app);
        let report = move |callee: &Function, outcome: luge_core::Outcome| {
            crate::standalone::log_stderr(&callee.name, request_id, &outcome.stderr);
            let status = CallStatus::of(&outcome.termination);
            metrics_app
                .metrics
                .observe_call(&caller, &callee.name, status.name());
            if status != CallStatus::Success {
                tracing::warn!(
                    request_id,
                    %caller,
                    callee = %callee.name,
                    status = status.name(),
                    termination = ?outcome.termination,
                    "call failed"
                );
            }
            CallResult {
                status,
                output: outcome.stdout,
            }
        };
        if mode == CallMode::Fused {
            // Run on the thread that waits for it, when it waits: no worker
            // is needed, so callers blocking every worker cannot deadlock.
            return Ok(Box::pin(async move {
                let outcome = callee.module.run(invocation);
                app.observe_fused(&callee.name, &outcome.termination, arrived.elapsed());
                drop(place);
                report(&callee, outcome)
            }));
        }
        let running = self.runtime.spawn(async move {
            let outcome = app
                .execute_admitted(
                    Arc::clone(&callee.module),
                    invocation,
                    arrived,
                    deadline,
                    place,
                )
                .await;
            report(&callee, outcome)
        });
        // A call nobody can wait for any more (its caller ended, trapped
        // or was cancelled first) is cancelled with it: dropping the task's
        // future stops the callee's sandbox and frees its admission place.
        let mut running = AbortOnDrop(running);
        Ok(Box::pin(async move {
            (&mut running.0).await.unwrap_or_else(|_| CallResult {
                status: CallStatus::Failed,
                output: Vec::new(),
            })
        }))
    }
}

/// Aborts a spawned callee when its [`PendingCall`] is dropped unfinished.
struct AbortOnDrop(tokio::task::JoinHandle<CallResult>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        // A no-op once the task has finished.
        self.0.abort();
    }
}
