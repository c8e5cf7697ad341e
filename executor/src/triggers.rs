//! Triggers: the events of luge-trigger's sources (Redis messages, cron
//! ticks), each an invocation like any other.
//!
//! Each trigger is a [`luge_trigger::Sink`] over its function. An event
//! it is offered is taken only while the trigger has fewer than its
//! `max_in_flight` events running (else the source loses it: dropped,
//! or a tick skipped), then admitted under the function's tenant share
//! exactly as a request is (a flood on one channel holds at most its
//! bound of places, and over its share only what others leave free),
//! scheduled under the trigger's deadline (or the function's) with the
//! function's limits, logged with the trigger's name and event id, and
//! counted in `/metrics` (`luge_trigger_events_total`,
//! `luge_trigger_lag_seconds`, and a queue's
//! `luge_trigger_message_age_seconds`).
//!
//! The function gets the event as its code can take it: a component with
//! an export for the event's kind (`luge_core::event::EventExport`) there;
//! an HTTP handler as a `POST /` with the payload as body and the metadata
//! as CloudEvents' binary-mode headers (`ce-specversion`, `ce-id`,
//! `ce-source`, `ce-type`, `ce-subject`, `ce-time`), a 2xx answer its
//! success; a core module or command on stdin, the metadata in its
//! environment (`luge_core::event::environment`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use hyper::header::{self, HeaderValue};
use luge_core::event::{Event, EventKind};
use luge_core::{Invocation, Termination};
use luge_host::{ConfiguredTrigger, Function, FunctionHost};
use luge_trigger::{EventSource, Handled, Handling, Sink};

use crate::admission::Tree;
use crate::app::{App, log_stderr};
use crate::telemetry::{self, Span};
use luge_telemetry::KeyValue;

/// A trigger's side of its source.
struct Trigger(Arc<Inner>);

struct Inner {
    app: Arc<App>,
    name: String,
    function: Arc<Function>,
    relative_deadline: Duration,
    /// Places for its events in flight.
    room: Arc<tokio::sync::Semaphore>,
    next_id: AtomicU64,
}

/// Why a trigger cannot be served.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TriggerError {
    /// No function of that name.
    #[error("trigger {trigger}: no function {function:?}")]
    NoFunction {
        /// The trigger.
        trigger: String,
        /// The function it names.
        function: String,
    },
    /// A component whose export takes other events.
    #[error("trigger {trigger}: {function:?} exports {export}, which takes no {kind} events")]
    WrongExport {
        /// The trigger.
        trigger: String,
        /// The function it names.
        function: String,
        /// What the function exports.
        export: &'static str,
        /// The trigger's kind.
        kind: &'static str,
    },
}

/// The sources of `app`'s configured triggers as futures to spawn (none
/// but in `luge serve`); the triggers were checked when the app was built
/// ([`check`]). Uploaded functions' triggers start too, on tasks of
/// their own ([`restart_uploaded`]), and follow their uploads from now on.
pub(crate) fn start(app: &Arc<App>) -> Vec<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>> {
    let crate::app::Mode::Serve { host, triggers, .. } = &app.mode else {
        return Vec::new();
    };
    let weak = Arc::downgrade(app);
    let _ = app.uploads_changed.set(Box::new(move |name: &str| {
        if let Some(app) = weak.upgrade() {
            restart_uploaded(&app, name);
        }
    }));
    for function in host.list_uploaded() {
        restart_uploaded(app, &function.name);
    }
    match sources(app, host, triggers) {
        Ok(sources) => sources
            .into_iter()
            .map(|source| {
                tracing::info!(source = %source.describe(), "event source started");
                source.run()
            })
            .collect(),
        Err(error) => {
            tracing::error!(%error, "triggers not started");
            Vec::new()
        }
    }
}

/// Checks that each of `triggers` names a function on `host` that can take
/// its events.
pub(crate) fn check(
    host: &FunctionHost,
    triggers: &[ConfiguredTrigger],
) -> Result<(), TriggerError> {
    for trigger in triggers {
        function(host, trigger)?;
    }
    Ok(())
}

/// The function `trigger` wakes.
fn function(
    host: &FunctionHost,
    trigger: &ConfiguredTrigger,
) -> Result<Arc<Function>, TriggerError> {
    let function = host
        .triggered(&trigger.function)
        .ok_or_else(|| TriggerError::NoFunction {
            trigger: trigger.name.clone(),
            function: trigger.function.clone(),
        })?;
    if let Some(export) = function.module.event_export() {
        let kind = trigger.source.kind().events();
        if export.trigger != kind {
            return Err(TriggerError::WrongExport {
                trigger: trigger.name.clone(),
                function: trigger.function.clone(),
                export: export.name,
                kind,
            });
        }
    }
    Ok(function)
}

/// The sources of `triggers`, each event going to its function on `host`.
fn sources(
    app: &Arc<App>,
    host: &FunctionHost,
    triggers: &[ConfiguredTrigger],
) -> Result<Vec<Box<dyn EventSource>>, TriggerError> {
    let mut sinks: Vec<(luge_trigger::Source, Arc<dyn Sink>)> = Vec::new();
    for trigger in triggers {
        let function = function(host, trigger)?;
        sinks.push((trigger.source.clone(), sink(app, trigger, function)));
    }
    Ok(luge_trigger::sources(sinks))
}

/// `trigger`'s side of its source, waking `function`.
fn sink(app: &Arc<App>, trigger: &ConfiguredTrigger, function: Arc<Function>) -> Arc<dyn Sink> {
    let relative_deadline = trigger
        .relative_deadline
        .unwrap_or_else(|| function.action.sched.relative_deadline_or_default());
    Arc::new(Trigger(Arc::new(Inner {
        app: Arc::clone(app),
        name: trigger.name.clone(),
        function,
        relative_deadline,
        room: Arc::new(tokio::sync::Semaphore::new(trigger.max_in_flight)),
        next_id: AtomicU64::new(1),
    })))
}

/// How long resolving and checking an uploaded trigger's server may take,
/// and the longest wait before trying again.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_CHECK_BACKOFF: Duration = Duration::from_secs(30);

/// (Re)starts the triggers of the uploaded function `name` after it was
/// uploaded, replaced or deleted (or restored at start): the old ones
/// stop, the new ones start. An upload's broker is the tenant's, not the
/// operator's: its name is resolved and every answer checked as the
/// function's own connections are (`luge_outbound::permitted_addresses`:
/// the grant, the address rule, blocked networks), and the source
/// connects to a checked address; an MQTT session of its own.
pub(crate) fn restart_uploaded(app: &Arc<App>, name: &str) {
    let mut running = app
        .uploaded_triggers
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    for task in running.remove(name).unwrap_or_default() {
        task.abort();
    }
    let Some(function) = app.function_host().and_then(|host| host.uploaded(name)) else {
        return;
    };
    let triggers = match luge_host::trigger::uploaded(&function) {
        Ok(triggers) => triggers,
        Err(error) => {
            tracing::warn!(function = %name, %error, "triggers not started");
            return;
        }
    };
    let mut tasks = Vec::with_capacity(triggers.len());
    for trigger in triggers {
        let sink = sink(app, &trigger, Arc::clone(&function));
        let function = Arc::clone(&function);
        let task = tokio::spawn(async move {
            let mut backoff = Duration::from_secs(1);
            let source = loop {
                match checked(&trigger, &function).await {
                    Ok(source) => break source,
                    Err(error) => {
                        tracing::warn!(trigger = %trigger.name, %error, retry_in = ?backoff, "trigger's server refused");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(MAX_CHECK_BACKOFF);
                    }
                }
            };
            for source in luge_trigger::sources(vec![(source, sink)]) {
                tracing::info!(trigger = %trigger.name, source = %source.describe(), "event source started");
                source.run().await;
            }
        });
        tasks.push(task.abort_handle());
    }
    running.insert(name.to_owned(), tasks);
}

/// `trigger`'s source, its server's name resolved and checked under
/// `function`'s grants.
async fn checked(
    trigger: &ConfiguredTrigger,
    function: &Function,
) -> Result<luge_trigger::Source, luge_outbound::SendError> {
    let Some(luge_trigger::Endpoint { scheme, host, port }) = trigger.source.endpoint() else {
        return Ok(trigger.source.clone());
    };
    let grants = &function.action.capabilities.outbound;
    let addresses = luge_outbound::permitted_addresses(
        grants,
        scheme,
        &host,
        port,
        Instant::now() + CHECK_TIMEOUT,
    )
    .await?;
    match addresses.first() {
        Some(address) => Ok(trigger.source.at(address.ip(), &function.name, grants)),
        None => Err(luge_outbound::SendError::Denied(format!(
            "{scheme}://{host}:{port}"
        ))),
    }
}

impl Sink for Trigger {
    fn offer(&self, event: Event) -> Result<Handling, Event> {
        let inner = &self.0;
        inner.app.metrics.observe_event(&inner.name, "received");
        let limit = inner.app.settings.max_body_bytes;
        if event.payload.len() > limit {
            tracing::warn!(trigger = %inner.name, bytes = event.payload.len(), limit, "event larger than --max-body-bytes");
            return Err(event);
        }
        let Ok(permit) = Arc::clone(&inner.room).try_acquire_owned() else {
            return Err(event);
        };
        let inner = Arc::clone(inner);
        Ok(Box::pin(async move {
            let handled = inner.handle(event).await;
            drop(permit);
            handled
        }))
    }

    fn queue(&self, event: Event) -> Handling {
        let inner = Arc::clone(&self.0);
        inner.app.metrics.observe_event(&inner.name, "received");
        Box::pin(async move {
            if event.payload.len() > inner.app.settings.max_body_bytes {
                tracing::warn!(trigger = %inner.name, bytes = event.payload.len(), "event larger than --max-body-bytes");
                inner.app.metrics.observe_event(&inner.name, "refused");
                return Handled::Refused;
            }
            // Waits for room: the broker bounds what it has unacknowledged.
            let Ok(permit) = Arc::clone(&inner.room).acquire_owned().await else {
                return Handled::Refused;
            };
            let handled = inner.handle(event).await;
            drop(permit);
            handled
        })
    }

    fn redelivered(&self) {
        self.0
            .app
            .metrics
            .observe_event(&self.0.name, "redelivered");
    }

    fn lost(&self, event: &Event) {
        let result = match event.kind {
            EventKind::Cron { .. } => "skipped",
            _ => "dropped",
        };
        self.0.app.metrics.observe_event(&self.0.name, result);
        tracing::debug!(trigger = %self.0.name, result, "event lost");
    }
}

impl Inner {
    /// Runs the function on `event`: admitted, scheduled and recorded as
    /// every invocation is.
    async fn handle(&self, event: Event) -> Handled {
        let arrived = Instant::now();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let handled = self.run(&event, id, arrived).await;
        let result = match handled {
            Handled::Succeeded => "handled",
            Handled::Failed => "failed",
            Handled::Refused => "refused",
        };
        self.app.metrics.observe_event(&self.name, result);
        handled
    }

    async fn run(&self, event: &Event, id: u64, arrived: Instant) -> Handled {
        let app = &self.app;
        let function = &self.function;
        let span = self.span(event, id, arrived);
        let tree = Tree::new(&function.name);
        let place = match app.admit(&tree, &function.name) {
            Ok(place) => place,
            Err(refused) => {
                tracing::warn!(trigger = %self.name, event = id, %refused, "event refused");
                span.refused("admission refused");
                return Handled::Refused;
            }
        };
        let deadline = arrived + self.relative_deadline;
        let action = Arc::clone(&function.action);
        let module = Arc::clone(&function.module);
        // As on a route: calls (and a handler's service chaining).
        let calls = crate::calls::HostCalls::root(app, function, &tree, deadline, id, &span);
        let mut env = luge_core::event::environment(event, id);
        env.push(("LUGE_TRIGGER_NAME".to_owned(), self.name.clone()));
        let takes_export = module.event_export().is_some();
        let http = !takes_export && module.serves_http();
        let invocation = Invocation {
            env,
            calls,
            state: app.state_session(function, arrived),
            trace: span.trace(),
            ..Invocation::new(
                Arc::clone(&action),
                if takes_export || http {
                    Vec::new()
                } else {
                    event.payload.clone()
                },
            )
        };
        let cancel = invocation.cancel.clone();
        let preemption = app.settings.preemption;
        let (sandbox, answer) = if takes_export {
            (
                module.start_event(invocation.with_traced_state(), event.clone(), preemption),
                None,
            )
        } else if http {
            let request = self.request(event, id);
            let (sandbox, head) =
                crate::invocation::start_http(&module, invocation, request, preemption);
            // Only the status is wanted: the response is dropped as it
            // comes, its body unread (a handler streaming a body would
            // otherwise wait for a reader).
            let status =
                tokio::spawn(async move { head.await.ok().map(|head| head.map(|r| r.status())) });
            (sandbox, Some(status))
        } else {
            (
                module.start(invocation.with_traced_state(), preemption),
                None,
            )
        };
        let outcome = app
            .execute_started(&action, cancel, sandbox, arrived, deadline, place, &span)
            .await;
        app.metrics
            .observe_lag(&self.name, lag(event, arrived, outcome.elapsed));
        if let Some(stored) = event.stored {
            // The broker's clock: a message stamped later than now is 0 old.
            let age = SystemTime::now().duration_since(stored).unwrap_or_default();
            app.metrics
                .observe_message_age(&self.name, age.saturating_sub(outcome.elapsed));
        }
        // Its log lines name the trigger and the event.
        tracing::info_span!("event", trigger = %self.name, event = id)
            .in_scope(|| log_stderr(&function.name, id, &outcome.stderr));
        let status = match answer {
            Some(status) => status.await.ok().flatten(),
            None => None,
        };
        self.verdict(id, &outcome.termination, http, status)
    }

    /// The span of event `id`, which `arrived` then: a FaaS invocation of
    /// the trigger's function, by a timer or a message.
    fn span(&self, event: &Event, id: u64, arrived: Instant) -> Span {
        let span = Span::start(
            self.app.settings.telemetry.as_ref(),
            || format!("{} process", self.name),
            &self.function.name,
            match event.kind {
                EventKind::Cron { .. } => telemetry::Trigger::Timer,
                _ => telemetry::Trigger::PubSub,
            },
            None,
            arrived,
        )
        // No one reads an event's stdout as an answer: it is its log.
        .stdout_is_log(true);
        span.set(|| {
            let mut attributes = vec![
                KeyValue::new("faas.invocation_id", id.to_string()),
                KeyValue::new("luge.trigger", self.name.clone()),
            ];
            match &event.kind {
                EventKind::Cron { timestamp } => {
                    attributes.push(KeyValue::new("faas.cron", self.name.clone()));
                    attributes.push(KeyValue::new("faas.time", *timestamp as i64));
                }
                kind => {
                    attributes.push(KeyValue::new("messaging.system", kind.system()));
                    attributes.push(KeyValue::new(
                        "messaging.destination.name",
                        kind.subject().to_owned(),
                    ));
                }
            }
            attributes
        });
        span
    }

    /// Whether event `id` was handled: its function exited 0 and, for an
    /// HTTP handler, answered a success `status`; a failure is logged with
    /// why.
    fn verdict(
        &self,
        id: u64,
        termination: &Termination,
        http: bool,
        status: Option<Result<hyper::StatusCode, luge_core::handler::HandlerError>>,
    ) -> Handled {
        let function = &self.function.name;
        let succeeded = *termination == Termination::Exited(0)
            && (!http || matches!(status, Some(Ok(s)) if s.is_success()));
        if succeeded {
            tracing::debug!(trigger = %self.name, event = id, %function, "event handled");
            return Handled::Succeeded;
        }
        let message = match (termination, status) {
            (Termination::Exited(0), Some(Ok(status))) => format!("the handler answered {status}"),
            (Termination::Exited(0), Some(Err(error))) => error.to_string(),
            (Termination::Exited(0), _) => "the handler answered no response".to_owned(),
            (termination, _) => crate::invocation::failure_message(termination),
        };
        tracing::warn!(trigger = %self.name, event = id, %function, %message, "event failed");
        Handled::Failed
    }

    /// The `POST /` an HTTP handler gets for `event`: CloudEvents'
    /// binary mode (its attributes as `ce-` headers, the payload as body).
    fn request(&self, event: &Event, id: u64) -> luge_core::handler::Request {
        use http_body_util::BodyExt;
        let body = http_body_util::Full::new(bytes::Bytes::from(event.payload.clone()))
            .map_err(|never| match never {})
            .boxed_unsync();
        let mut request = hyper::Request::new(body);
        *request.method_mut() = hyper::Method::POST;
        *request.uri_mut() = hyper::Uri::from_static("/");
        let headers = request.headers_mut();
        headers.insert(header::HOST, HeaderValue::from_static("localhost"));
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        headers.insert("ce-specversion", HeaderValue::from_static("1.0"));
        headers.insert("ce-id", HeaderValue::from(id));
        let kind = event.kind.trigger();
        if let Ok(source) = HeaderValue::from_str(&format!("/luge/triggers/{}", self.name)) {
            headers.insert("ce-source", source);
        }
        if let Ok(kind) = HeaderValue::from_str(&format!("dev.luge.{kind}")) {
            headers.insert("ce-type", kind);
        }
        if let Ok(subject) = HeaderValue::from_str(event.kind.subject())
            && !event.kind.subject().is_empty()
        {
            headers.insert("ce-subject", subject);
        }
        if let EventKind::Cron { timestamp } = event.kind
            && let Some(time) = rfc3339(timestamp)
        {
            headers.insert("ce-time", time);
        }
        request
    }
}

/// `timestamp` (Unix seconds) as RFC 3339, for `ce-time`.
fn rfc3339(timestamp: u64) -> Option<HeaderValue> {
    HeaderValue::from_str(&luge_trigger::cron::rfc3339(timestamp)?).ok()
}

/// How long `event`, which `arrived` then, waited before its function ran
/// for `ran`: from its arrival, or for a tick from when it was due.
fn lag(event: &Event, arrived: Instant, ran: Duration) -> Duration {
    match event.kind {
        EventKind::Cron { timestamp } => SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH + Duration::from_secs(timestamp))
            .unwrap_or_default()
            .saturating_sub(ran),
        _ => arrived.elapsed().saturating_sub(ran),
    }
}
