//! The executor's side of OpenTelemetry (luge-telemetry): starting it from
//! the environment and `[telemetry]`, an invocation's span as each
//! protocol starts it, and what the pipeline adds to it (the host's
//! phases, the outcome, the FaaS attributes) when the invocation ends.
//! With telemetry off every [`Span`] is empty and each method returns at
//! its first line.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use luge_core::{Outcome, Termination};
use luge_telemetry::{Entry, InvocationSpan, KeyValue, Parent, Settings, Telemetry};

/// Starts telemetry if the environment or `[telemetry]` (from `file`)
/// turns it on.
pub(crate) fn start(
    table: Option<&toml::Table>,
    file: Option<&Path>,
) -> anyhow::Result<Option<Telemetry>> {
    let table = table
        .map(|t| t.clone().try_into::<luge_telemetry::TelemetryTable>())
        .transpose()
        .with_context(|| {
            format!(
                "{}: [telemetry]",
                file.map_or_else(String::new, |f| f.display().to_string())
            )
        })?;
    let Some(settings) = Settings::resolve(table.as_ref(), |name| std::env::var(name).ok())? else {
        return Ok(None);
    };
    let telemetry = Telemetry::start(settings)?;
    let s = telemetry.settings();
    tracing::info!(
        protocol = ?s.protocol,
        sampler = ?s.sampler,
        service = %s.service_name,
        traces = s.traces,
        logs = s.logs,
        metrics = s.metrics,
        "OpenTelemetry export on"
    );
    Ok(Some(telemetry))
}

/// An invocation's span, or nothing (telemetry off, or not sampled and
/// no context to pass on), and what started it.
#[derive(Clone)]
pub(crate) struct Span {
    span: Option<Arc<InvocationSpan>>,
    trigger: Trigger,
    cold: bool,
    stdout_is_log: bool,
}

/// What started an invocation, as `faas.trigger` names it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Trigger {
    /// An HTTP request (routes, OpenWhisk's `/run`).
    Http,
    /// A message from a broker.
    PubSub,
    /// A schedule.
    Timer,
    /// Another function (a call, a chain's stage).
    Other,
}

impl Trigger {
    fn as_str(self) -> &'static str {
        match self {
            Trigger::Http => "http",
            Trigger::PubSub => "pubsub",
            Trigger::Timer => "timer",
            Trigger::Other => "other",
        }
    }
}

impl Span {
    /// Starts the span of an invocation of `function` (span `name`) that
    /// arrived at `arrived`, under `parent` (its client's context).
    pub(crate) fn start(
        telemetry: Option<&Telemetry>,
        name: impl FnOnce() -> String,
        function: &str,
        trigger: Trigger,
        parent: Option<Parent>,
        arrived: Instant,
    ) -> Span {
        let Some(telemetry) = telemetry else {
            return Span {
                span: None,
                trigger,
                cold: false,
                stdout_is_log: false,
            };
        };
        let entry = match trigger {
            Trigger::PubSub | Trigger::Timer => Entry::Consumer,
            Trigger::Http | Trigger::Other => Entry::Server,
        };
        let span = telemetry.start_invocation(name, function, entry, parent, arrived);
        if let Some(span) = &span {
            span.set([
                KeyValue::new("faas.invoked_name", function.to_owned()),
                KeyValue::new("faas.trigger", trigger.as_str()),
            ]);
        }
        Span {
            span,
            trigger,
            cold: false,
            stdout_is_log: false,
        }
    }

    /// Marks its function's stdout a log (an HTTP handler's, an event
    /// handler's), not its answer: exported as log records as its stderr is.
    pub(crate) fn stdout_is_log(mut self, log: bool) -> Self {
        self.stdout_is_log = log;
        self
    }

    /// Exports its function's output lines as log records (stderr, and
    /// stdout where it is a log), in its trace.
    pub(crate) fn logs(&self, telemetry: &Telemetry, function: &str, outcome: &Outcome) {
        use luge_telemetry::Stream;
        if self.stdout_is_log {
            telemetry.function_log(function, Stream::Stdout, &outcome.stdout, self.get());
        }
        telemetry.function_log(function, Stream::Stderr, &outcome.stderr, self.get());
    }

    /// Marks it a cold start (`faas.coldstart`, and the `faas.coldstarts`
    /// metric): an OpenWhisk container's first run.
    pub(crate) fn cold_start(mut self, cold: bool) -> Self {
        self.cold = cold;
        self.set(|| vec![KeyValue::new("faas.coldstart", cold)]);
        self
    }

    /// Whether it is a cold start.
    pub(crate) fn is_cold(&self) -> bool {
        self.cold
    }

    /// What started it, as `faas.trigger` names it.
    pub(crate) fn trigger(&self) -> &'static str {
        self.trigger.as_str()
    }

    /// The engine's view of it (`Invocation::trace`).
    pub(crate) fn trace(&self) -> Option<Arc<dyn luge_core::trace::Trace>> {
        self.span
            .as_ref()
            .map(|s| Arc::clone(s) as Arc<dyn luge_core::trace::Trace>)
    }

    /// The context an invocation started from this one runs under.
    pub(crate) fn parent(&self) -> Option<Parent> {
        self.span.as_ref().map(|s| s.as_parent())
    }

    /// Adds attributes, built only when it records.
    pub(crate) fn set(&self, attributes: impl FnOnce() -> Vec<KeyValue>) {
        if let Some(span) = self.span.as_ref().filter(|s| s.is_recording()) {
            span.set(attributes());
        }
    }

    /// The invocation's span itself.
    pub(crate) fn get(&self) -> Option<&InvocationSpan> {
        self.span.as_deref()
    }

    /// Records the host's phases of a dispatched invocation and ends its
    /// span with `outcome`: `luge.admission` from arrival until the
    /// scheduler had it (admission and starting the sandbox), `luge.queue`
    /// until a worker first ran it; the engine recorded the rest.
    pub(crate) fn dispatched(&self, arrived: Instant, dispatched: &crate::dispatch::Dispatched) {
        let Some(span) = self.span.as_ref().filter(|s| s.is_recording()) else {
            return;
        };
        let submitted = dispatched.submitted;
        span.phase("luge.admission", arrived, submitted);
        span.phase("luge.queue", submitted, submitted + dispatched.queue_delay);
        if let Some(progress) = dispatched.progress {
            span.set([
                KeyValue::new("luge.preemptions", progress.preemptions as i64),
                KeyValue::new("luge.cpu_us", progress.cpu.as_micros() as i64),
            ]);
        }
        self.end(&dispatched.outcome);
    }

    /// Ends the span with `outcome`.
    pub(crate) fn end(&self, outcome: &Outcome) {
        let Some(span) = self.span.as_ref().filter(|s| s.is_recording()) else {
            return;
        };
        let termination = termination(&outcome.termination);
        let mut attributes = vec![KeyValue::new("luge.termination", termination)];
        if let Termination::Exited(code) = outcome.termination {
            attributes.push(KeyValue::new("luge.exit_code", i64::from(code)));
        }
        span.set(attributes);
        let error = (outcome.termination != Termination::Exited(0))
            .then(|| crate::invocation::failure_message(&outcome.termination));
        span.end(error);
    }

    /// Ends the span of an invocation refused before it ran.
    pub(crate) fn refused(&self, why: &str) {
        if let Some(span) = self.span.as_ref().filter(|s| s.is_recording()) {
            span.set([KeyValue::new("luge.termination", "refused")]);
            span.end(Some(why.to_owned()));
        }
    }
}

/// The termination reason's attribute value.
fn termination(termination: &Termination) -> &'static str {
    match termination {
        Termination::Exited(0) => "exited",
        Termination::Exited(_) => "failed",
        Termination::Trapped(_) => "trap",
        Termination::TimedOut(_) => "timeout",
        Termination::OutOfMemory { .. } => "memory",
        Termination::OutOfFuel => "fuel",
        Termination::OutputTooLarge { .. } => "output",
        Termination::Failed(_) => "not_started",
    }
}
