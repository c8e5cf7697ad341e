//! HTTP handlers (`wasi:http/proxy` components) on routes: the request goes
//! to the function as it arrives, its body streamed and bounded by
//! `--max-body-bytes`, and the response streams back as the handler writes
//! it. Admission, deadlines, scheduling and time limits are those of every
//! invocation; the sandbox keeps its admission place until it has ended,
//! which for a streamed response is after its last byte.

use std::sync::Arc;
use std::time::Instant;

use http_body_util::{BodyExt, Limited};
use hyper::{StatusCode, header};
use luge_core::{Invocation, Termination};
use luge_host::RouteMatch;

use crate::admission::Tree;
use crate::app::{App, log_stderr};
use crate::dispatch::UnlessDisarmed;
use crate::http::{self, Request, Response};
use crate::invocation::{failure_message, failure_status, relative_deadline};
use crate::protocol::Handler;
use crate::telemetry::{Span, Trigger};
use luge_telemetry::KeyValue;

/// A function that is an HTTP handler, on the route a request matched.
pub(crate) struct HttpHandler(pub(crate) RouteMatch);

impl Handler for HttpHandler {
    /// Serves the request with the handler, its body streamed to it and
    /// its response streamed back.
    async fn serve(self, app: &Arc<App>, mut request: Request, request_id: u64) -> Response {
        crate::route_headers::set(&mut request, &self.0);
        let arrived = Instant::now();
        let span = http_span(app, &request, &self.0, request_id, arrived);
        let function = self.0.function;
        let action = Arc::clone(&function.action);
        let relative = match relative_deadline(
            request.headers(),
            action.sched.relative_deadline_or_default(),
        ) {
            Ok(relative) => relative,
            Err((status, message)) => return http::json_error(status, message),
        };
        // wasi:http gives the handler the request's authority.
        if request.uri().authority().is_none() && !request.headers().contains_key(header::HOST) {
            return http::json_error(StatusCode::BAD_REQUEST, "The request has no Host header.");
        }
        let limit = app.settings.max_body_bytes;
        if http::declared_length(request.headers()).is_some_and(|len| len > limit) {
            return http::too_large(limit);
        }
        let tree = Tree::new(&function.name);
        let place = match app.admit(&tree, &action.name) {
            Ok(place) => place,
            Err(refused) => {
                span.refused("admission refused");
                return app.overloaded(refused);
            }
        };
        // Its outgoing requests to other functions (service chaining) are
        // calls of this request's tree.
        let calls = crate::calls::HostCalls::root(
            app,
            &function,
            &tree,
            arrived + relative,
            request_id,
            &span,
        );
        let invocation = Invocation {
            env: vec![("LUGE_REQUEST_ID".to_owned(), request_id.to_string())],
            state: app.state_session(&function, arrived),
            calls,
            trace: span.trace(),
            ..Invocation::new(Arc::clone(&action), Vec::new())
        };
        let cancel = invocation.cancel.clone();
        // The body streams to the handler, cut off past the bound (the
        // handler reads an error there).
        let request = request.map(|body| Limited::new(body, limit).boxed_unsync());
        let (sandbox, answered) = crate::invocation::start_http(
            &function.module,
            invocation,
            request,
            app.settings.preemption,
        );
        let app = Arc::clone(app);
        let deadline = arrived + relative;
        // The sandbox outlives this request future when its response
        // streams: it runs in a task of its own, aborted (and so cancelled,
        // see dispatch::run) only if the client leaves before the head.
        // It reports its own outcome (stderr, a failure) as it ends,
        // whether or not its response was answered by then.
        let reporter = Arc::clone(&function);
        let run_span = span.clone();
        let run = tokio::spawn(async move {
            let outcome = app
                .execute_started(
                    &action, cancel, sandbox, arrived, deadline, place, &run_span,
                )
                .await;
            report(&reporter.name, request_id, &outcome);
            outcome
        });
        let handle = run.abort_handle();
        let abort = UnlessDisarmed::new(move || handle.abort());
        let answered = answered.await;
        abort.disarm();
        match answered {
            Ok(answer) => {
                // Its task runs on to the end of the body and reports.
                drop(run);
                if let Ok(response) = &answer {
                    let status = i64::from(response.status().as_u16());
                    span.set(|| vec![KeyValue::new("http.response.status_code", status)]);
                }
                answer.unwrap_or_else(|error| {
                    tracing::warn!(function = %function.name, %error, "handler answered an error");
                    http::json_error(StatusCode::INTERNAL_SERVER_ERROR, &error.to_string())
                })
            }
            // The handler ended without answering: its outcome says why.
            Err(_) => match run.await {
                Ok(outcome) => match outcome.termination {
                    Termination::Exited(0) => http::json_error(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "The handler returned without a response.",
                    ),
                    termination => http::json_error(
                        failure_status(&termination),
                        &failure_message(&termination),
                    ),
                },
                Err(e) => http::json_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("internal executor error: {e}"),
                ),
            },
        }
    }
}

/// The span of a request to a handler on `route`: `{method} {route}`, in
/// its client's trace, with OpenTelemetry's HTTP server attributes.
fn http_span(app: &App, request: &Request, route: &RouteMatch, id: u64, arrived: Instant) -> Span {
    let method = request.method().as_str();
    let span = Span::start(
        app.settings.telemetry.as_ref(),
        || format!("{method} {}", route.route),
        &route.function.name,
        Trigger::Http,
        luge_telemetry::Parent::from_headers(request.headers()),
        arrived,
    )
    // A handler answers through wasi:http: what it prints is its log.
    .stdout_is_log(true);
    span.set(|| {
        vec![
            KeyValue::new("http.request.method", method.to_owned()),
            KeyValue::new("http.route", route.route.to_string()),
            KeyValue::new("url.path", request.uri().path().to_owned()),
            KeyValue::new("faas.invocation_id", id.to_string()),
        ]
    });
    span
}

/// Logs a handler's stderr and, when it failed, why.
fn report(function: &str, request_id: u64, outcome: &luge_core::Outcome) {
    log_stderr(function, request_id, &outcome.stderr);
    if outcome.termination != Termination::Exited(0) {
        let message = failure_message(&outcome.termination);
        tracing::warn!(function, request_id, %message, "handler failed");
    }
}
