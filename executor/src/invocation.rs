//! What every protocol does around an invocation, written once: its
//! deadline as a request tightens it, starting an HTTP handler with its
//! response head awaited apart from its run, and what a client is told
//! of a run that failed. The protocols (`handler`, `standalone`, `calls`,
//! `triggers`) sit above; this imports none of them.

use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;
use hyper::header::HeaderMap;
use luge_core::handler::{HandlerError, Request, Response};
use luge_core::{Invocation, LoadedModule, Preemption, SandboxFuture, Termination};

/// Header with a per-request deadline in ms, capped by the route's own.
pub const DEADLINE_HEADER: &str = "x-luge-deadline-ms";

/// `relative`, tightened by the request's `X-Luge-Deadline-Ms`; a
/// refusal is its status and message.
pub(crate) fn relative_deadline(
    headers: &HeaderMap,
    relative: Duration,
) -> Result<Duration, (StatusCode, &'static str)> {
    let Some(value) = headers.get(DEADLINE_HEADER) else {
        return Ok(relative);
    };
    match value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        Some(ms) => Ok(relative.min(Duration::from_millis(ms))),
        None => Err((
            StatusCode::BAD_REQUEST,
            "X-Luge-Deadline-Ms must be a whole number of milliseconds.",
        )),
    }
}

/// Where a started handler's response head arrives: dropped unsent when
/// the handler ended without answering (its outcome then says why).
pub(crate) type Head = tokio::sync::oneshot::Receiver<Result<Response, HandlerError>>;

/// Starts `request` on `module`, an HTTP handler, in a fresh sandbox: the
/// sandbox to schedule, and where its response head arrives.
pub(crate) fn start_http(
    module: &Arc<dyn LoadedModule>,
    invocation: Invocation,
    request: Request,
    preemption: Preemption,
) -> (SandboxFuture, Head) {
    let (head, answered) = tokio::sync::oneshot::channel();
    let sandbox = Arc::clone(module).start_http(
        invocation.with_traced_state(),
        request,
        Box::new(move |response| {
            // Whoever waited may have gone; nothing to answer then.
            let _ = head.send(response);
        }),
        preemption,
    );
    (sandbox, answered)
}

/// The status of a failed run: 504 past its time limit, 503 when it could
/// not start, 500 for what the function did (trap, exit, limits).
pub(crate) fn failure_status(termination: &Termination) -> StatusCode {
    match termination {
        Termination::TimedOut(_) => StatusCode::GATEWAY_TIMEOUT,
        Termination::Failed(_) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// What a client (or a trigger's log) is told about a failed run.
pub(crate) fn failure_message(termination: &Termination) -> String {
    match termination {
        Termination::Exited(0) => "The function succeeded.".to_owned(),
        Termination::Exited(code) => format!("The function exited with status {code}."),
        Termination::Trapped(reason) => {
            let first = reason.lines().next().unwrap_or(reason);
            format!("The function trapped: {first}")
        }
        Termination::TimedOut(limit) => format!(
            "The function exceeded its time limit of {} ms.",
            limit.as_millis()
        ),
        Termination::OutOfMemory { limit_bytes } => format!(
            "The function exceeded its memory limit of {} MiB.",
            limit_bytes >> 20
        ),
        Termination::OutOfFuel => "The function exceeded its fuel limit.".to_owned(),
        Termination::OutputTooLarge { limit_bytes } => {
            format!("The function's output exceeds its limit of {limit_bytes} bytes.")
        }
        Termination::Failed(reason) => format!("The function could not be started: {reason}"),
    }
}
