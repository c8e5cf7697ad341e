//! Calls between functions on the standalone host (host API v1): the
//! [`Calls`] an invocation of a function gets. A callee is found by name
//! among the host's functions, must be listed in the caller's `calls`,
//! takes an admission place like any invocation, charged to the tenant of
//! the client request at the root of its call tree and within that tree's
//! bound (so a flood of fan-outs meets the same 503 bound, and one request
//! cannot amplify itself into every place), and runs in a fresh sandbox under the
//! caller's absolute deadline, tightened by its own route deadline.

use std::sync::Arc;
use std::time::Instant;

use http_body_util::Limited;
use luge_core::calls::{
    CallError, CallMode, CallResult, CallStatus, Calls, MAX_CALL_DEPTH, PendingCall, PendingHttp,
};
use luge_core::{Invocation, handler};
use luge_host::{Function, FunctionHost};

use crate::admission::Tree;
use crate::app::{App, log_stderr};
use crate::telemetry::{Span, Trigger};
use luge_core::trace::{HostCall, HostSpan};
use luge_telemetry::{KeyValue, Parent};

/// One invocation's calls.
pub(crate) struct HostCalls {
    pub app: Arc<App>,
    pub host: Arc<FunctionHost>,
    /// The calling function: its `calls` are the grants.
    pub caller: Arc<Function>,
    /// Nesting of the calling invocation (0 for one a client made).
    pub depth: u32,
    /// The client request at the root of the call graph: every call takes
    /// its admission place there, charged to that request's tenant.
    pub tree: Arc<Tree>,
    /// The calling invocation's absolute deadline.
    pub deadline: Instant,
    /// The request id of the client request at the root of the call graph.
    pub request_id: u64,
    /// Where callees are started: they run at once, not when awaited.
    pub runtime: tokio::runtime::Handle,
    /// The calling invocation's span: each call is a client span in its
    /// trace, and the callee's span that call's child.
    pub span: Span,
}

impl Calls for HostCalls {
    fn start(&self, name: &str, input: Vec<u8>, mode: CallMode) -> Result<PendingCall, CallError> {
        self.start_granted(name, input, mode)
            .inspect_err(|e| self.refused(name, e))
    }

    fn start_http(&self, name: &str, request: handler::Request) -> Result<PendingHttp, CallError> {
        self.chain_granted(name, request)
            .inspect_err(|e| self.refused(name, e))
    }
}

impl HostCalls {
    /// The calls of an invocation at the root of a call tree (a client's
    /// request, an event): `caller` calling, under `deadline`, charged to
    /// `tree`; `None` where the app hosts no functions to call.
    pub(crate) fn root(
        app: &Arc<App>,
        caller: &Arc<Function>,
        tree: &Arc<Tree>,
        deadline: Instant,
        request_id: u64,
        span: &Span,
    ) -> Option<Arc<dyn Calls>> {
        let host = app.function_host()?;
        Some(Arc::new(Self {
            app: Arc::clone(app),
            host: Arc::clone(host),
            caller: Arc::clone(caller),
            depth: 0,
            tree: Arc::clone(tree),
            deadline,
            request_id,
            runtime: app.settings.runtime.clone(),
            span: span.clone(),
        }))
    }

    /// Whether the caller may call `name`: listed in its `calls`, or (a
    /// chained request) its internal origin in `allowed_outbound_hosts`.
    fn granted(&self, name: &str, chained: bool) -> bool {
        self.caller.spec.calls.iter().any(|g| g == name)
            || (chained && self.caller.action.capabilities.outbound.chains_to(name))
    }

    /// The callee `name`, granted (a chained request is also granted by
    /// its internal origin, and must reach an HTTP handler), within the
    /// nesting bound, holding its admission place in the caller's tree,
    /// under the caller's deadline tightened by its own.
    fn admit_callee(&self, name: &str, chained: bool) -> Result<Admitted, CallError> {
        if !self.granted(name, chained) {
            return Err(CallError::NotGranted);
        }
        if self.depth + 1 > MAX_CALL_DEPTH {
            return Err(CallError::Depth);
        }
        let callee = self.host.by_name(name).ok_or(CallError::NotFound)?;
        if chained && !callee.module.serves_http() {
            return Err(CallError::NotFound);
        }
        let place = self
            .app
            .admit(&self.tree, &callee.name)
            .map_err(|_| CallError::Busy)?;
        let arrived = Instant::now();
        let deadline = self
            .deadline
            .min(arrived + callee.action.sched.relative_deadline_or_default());
        // The call in the caller's trace, and the callee's invocation its
        // child (never from a header the caller set: a function cannot
        // attach a callee to another trace).
        let trace = self.span.trace();
        let call = HostSpan::start(trace.as_ref(), HostCall::Call, format!("call {name}"));
        let parent = call
            .as_ref()
            .and_then(|c| Parent::parse(&c.traceparent(), c.tracestate()));
        let span = Span::start(
            self.app.settings.telemetry.as_ref(),
            || callee.name.clone(),
            &callee.name,
            Trigger::Other,
            parent,
            arrived,
        )
        // A chained handler answers through wasi:http; its stdout is a log.
        .stdout_is_log(chained);
        span.set(|| {
            vec![
                KeyValue::new("faas.invocation_id", self.request_id.to_string()),
                KeyValue::new("luge.caller", self.caller.name.clone()),
            ]
        });
        Ok(Admitted {
            callee,
            place,
            arrived,
            deadline,
            call,
            span,
        })
    }

    /// The invocation of `callee` on `input`: its own state session, and
    /// calls of its own one level deeper in the same tree.
    fn callee_invocation(
        &self,
        callee: &Arc<Function>,
        arrived: Instant,
        deadline: Instant,
        input: Vec<u8>,
        span: &Span,
    ) -> Invocation {
        Invocation {
            trace: span.trace(),
            env: vec![
                ("LUGE_REQUEST_ID".to_owned(), self.request_id.to_string()),
                ("LUGE_CALLER".to_owned(), self.caller.name.clone()),
            ],
            state: self.app.state_session(callee, arrived),
            calls: Some(Arc::new(HostCalls {
                app: Arc::clone(&self.app),
                host: Arc::clone(&self.host),
                caller: Arc::clone(callee),
                depth: self.depth + 1,
                tree: Arc::clone(&self.tree),
                deadline,
                request_id: self.request_id,
                runtime: self.runtime.clone(),
                span: span.clone(),
            })),
            ..Invocation::new(Arc::clone(&callee.action), input)
        }
    }

    /// Counts a refused call.
    fn refused(&self, name: &str, error: &CallError) {
        // Label only with a granted name: an ungranted one is the guest's
        // own string and would let it grow the metrics.
        let label = if self.granted(name, true) { name } else { "-" };
        self.app
            .metrics
            .observe_call(&self.caller.name, label, "refused", error.name());
    }

    /// A chained request to the HTTP handler `name`: admitted in the
    /// caller's tree, under its deadline, a fresh sandbox that may chain on
    /// (one level deeper); the response head comes back as soon as the
    /// callee answers and its body streams on.
    fn chain_granted(
        &self,
        name: &str,
        request: handler::Request,
    ) -> Result<PendingHttp, CallError> {
        let Admitted {
            callee,
            place,
            arrived,
            deadline,
            call,
            span,
        } = self.admit_callee(name, true)?;
        let invocation = self.callee_invocation(&callee, arrived, deadline, Vec::new(), &span);
        let cancel = invocation.cancel.clone();
        let path = request.uri().path().to_owned();
        let limit = self.app.settings.max_body_bytes;
        let mut request =
            request.map(|body| http_body_util::BodyExt::boxed_unsync(Limited::new(body, limit)));
        crate::route_headers::set(
            &mut request,
            &luge_host::RouteMatch::by_name(Arc::clone(&callee), &path),
        );
        let (sandbox, answered) = crate::invocation::start_http(
            &callee.module,
            invocation,
            request,
            self.app.settings.preemption,
        );
        let app = Arc::clone(&self.app);
        let action = Arc::clone(&callee.action);
        let (caller, request_id) = (self.caller.name.clone(), self.request_id);
        let running = self.runtime.spawn(async move {
            let outcome = app
                .execute_started(&action, cancel, sandbox, arrived, deadline, place, &span)
                .await;
            drop(call);
            log_stderr(&callee.name, request_id, &outcome.stderr);
            let status = CallStatus::of(&outcome.termination);
            app.metrics
                .observe_call(&caller, &callee.name, "chained", status.name());
            outcome
        });
        // Dropped before the head (the caller ended or gave up): the callee
        // is cancelled. After it, its body streams on to the caller.
        let abort = running.abort_handle();
        let abort = crate::dispatch::UnlessDisarmed::new(move || abort.abort());
        Ok(Box::pin(async move {
            let answered = answered.await;
            abort.disarm();
            match answered {
                Ok(answer) => answer,
                Err(_) => {
                    let outcome = running.await.ok();
                    Err(handler::HandlerError {
                        code: outcome.map_or_else(
                            || "the chained function ended without a response".to_owned(),
                            |o| {
                                format!(
                                    "the chained function answered nothing: {:?}",
                                    o.termination
                                )
                            },
                        ),
                    })
                }
            }
        }))
    }

    /// Whether to fuse a call to `callee` on an engine that could schedule
    /// it: only a callee that calls nothing (a fused callee runs on its
    /// caller's stack, so fused calls never nest) and is known to be short.
    fn fuse(&self, callee: &Function) -> bool {
        let under = self.app.settings.fuse_calls_under;
        if under.is_zero() || !callee.spec.calls.is_empty() {
            return false;
        }
        let expected = self
            .app
            .settings
            .scheduler
            .execution_stats()
            .expected(&callee.action.name, None);
        // Zero: never measured yet; the first runs are scheduled.
        !expected.is_zero() && expected <= under
    }

    fn start_granted(
        &self,
        name: &str,
        input: Vec<u8>,
        mode: CallMode,
    ) -> Result<PendingCall, CallError> {
        let Admitted {
            callee,
            place,
            arrived,
            deadline,
            call,
            span,
        } = self.admit_callee(name, false)?;
        let invocation = self.callee_invocation(&callee, arrived, deadline, input, &span);
        let app = Arc::clone(&self.app);
        let (caller, request_id) = (self.caller.name.clone(), self.request_id);
        let metrics_app = Arc::clone(&app);
        let report = move |callee: &Function, how: &'static str, outcome: luge_core::Outcome| {
            log_stderr(&callee.name, request_id, &outcome.stderr);
            let status = CallStatus::of(&outcome.termination);
            metrics_app
                .metrics
                .observe_call(&caller, &callee.name, how, status.name());
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
        if mode == CallMode::Fused || self.fuse(&callee) {
            // Run on the thread that waits for it, when it waits: no worker
            // is needed, so callers blocking every worker cannot deadlock.
            // Started as a future, polled inside the caller's: on Wasmtime
            // it yields at quanta and parks on I/O with its caller (and never
            // blocks its thread on a runtime, which a worker front end's
            // thread must not); the other engines run it in one poll.
            let preemption = self.app.settings.preemption;
            return Ok(Box::pin(async move {
                let started = Instant::now();
                let outcome = Arc::clone(&callee.module)
                    .start(invocation, preemption)
                    .await;
                app.observe_fused(
                    &callee.action.name,
                    &outcome.termination,
                    arrived.elapsed(),
                    started.elapsed(),
                    deadline,
                );
                drop(place);
                span.end(&outcome);
                drop(call);
                report(&callee, "fused", outcome)
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
                    &span,
                )
                .await;
            drop(call);
            report(&callee, "scheduled", outcome)
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

/// A callee that may run now (see [`HostCalls::admit_callee`]).
struct Admitted {
    callee: Arc<Function>,
    place: crate::admission::Admitted,
    arrived: Instant,
    deadline: Instant,
    /// The call's span in the caller's trace (ended when the callee is).
    call: Option<HostSpan>,
    /// The callee's invocation span.
    span: Span,
}

/// Aborts a spawned callee when its [`PendingCall`] is dropped unfinished.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        // A no-op once the task has finished.
        self.0.abort();
    }
}
