//! One invocation's span and the spans recorded inside it, as
//! OpenTelemetry `SpanData` with explicit times: a phase measured by the
//! scheduler or the engine is a child span from its own start to its own
//! end, so the phases line up under the invocation on one clock.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime};

use luge_core::trace::{
    Context, GuestKind, GuestLog, GuestSpan, Kind, Record, SpanStatus, Trace, Value,
};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{KeyValue, StringValue};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SpanData, SpanEvents, SpanLinks};

use crate::Inner;

/// How an invocation arrived (its span's kind, OpenTelemetry's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// A request the host served (HTTP, OpenWhisk `/run`, a call).
    Server,
    /// An event taken from a broker or a schedule.
    Consumer,
}

/// An invocation's span (see the module doc), shared with the engine as
/// its [`Trace`]. Recording only when sampled; otherwise it only carries
/// its client's context on to the requests the invocation sends.
pub struct InvocationSpan {
    inner: Arc<Inner>,
    context: SpanContext,
    parent: Option<SpanId>,
    tracestate: Option<String>,
    name: Cow<'static, str>,
    /// The function invoked (its log records' `faas.invoked_name`).
    function: Box<str>,
    entry: Entry,
    start: Instant,
    /// `start` on the wall clock, to place every instant of this trace.
    wall: SystemTime,
    attributes: std::sync::Mutex<Vec<KeyValue>>,
    ended: AtomicBool,
}

impl std::fmt::Debug for InvocationSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InvocationSpan")
            .field("trace_id", &self.context.trace_id())
            .field("span_id", &self.context.span_id())
            .field("recording", &self.is_recording())
            .finish_non_exhaustive()
    }
}

/// A client's W3C trace context.
#[derive(Debug, Clone)]
pub struct Parent {
    pub(crate) context: SpanContext,
    pub(crate) tracestate: Option<String>,
}

impl Parent {
    /// The context in `traceparent` (and `tracestate`), if it is a valid
    /// one; anything else is ignored, as W3C Trace Context asks.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<Parent> {
        use opentelemetry::propagation::TextMapPropagator;
        let mut carrier = std::collections::HashMap::with_capacity(2);
        carrier.insert(
            luge_core::trace::TRACEPARENT.to_owned(),
            traceparent.to_owned(),
        );
        if let Some(state) = tracestate {
            carrier.insert(luge_core::trace::TRACESTATE.to_owned(), state.to_owned());
        }
        let cx = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
        use opentelemetry::trace::TraceContextExt;
        let context = cx.span().span_context().clone();
        if !context.is_valid() {
            return None;
        }
        let tracestate = Some(context.trace_state().header()).filter(|s| !s.is_empty());
        Some(Parent {
            context,
            tracestate,
        })
    }

    /// From request headers.
    pub fn from_headers(headers: &http::HeaderMap) -> Option<Parent> {
        let traceparent = headers.get(luge_core::trace::TRACEPARENT)?.to_str().ok()?;
        let tracestate = headers
            .get(luge_core::trace::TRACESTATE)
            .and_then(|v| v.to_str().ok());
        Parent::parse(traceparent, tracestate)
    }

    /// Whether the client sampled it.
    pub fn is_sampled(&self) -> bool {
        self.context.is_sampled()
    }
}

impl InvocationSpan {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        inner: Arc<Inner>,
        name: Cow<'static, str>,
        function: &str,
        entry: Entry,
        parent: Option<Parent>,
        trace_id: TraceId,
        sampled: bool,
        start: Instant,
    ) -> InvocationSpan {
        let ids = RandomIdGenerator::default();
        let (parent_id, tracestate) = match parent {
            Some(p) => (Some(p.context.span_id()), p.tracestate),
            None => (None, None),
        };
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        // An unsampled span passes its parent's id on unchanged: it is no
        // span of its own, only a carrier.
        let span_id = match (sampled, parent_id) {
            (false, Some(parent)) => parent,
            _ => ids.new_span_id(),
        };
        let wall = SystemTime::now() - start.elapsed();
        InvocationSpan {
            context: SpanContext::new(trace_id, span_id, flags, false, TraceState::default()),
            parent: parent_id,
            tracestate,
            name,
            function: function.into(),
            entry,
            start,
            wall,
            inner,
            attributes: std::sync::Mutex::new(Vec::new()),
            ended: AtomicBool::new(!sampled),
        }
    }

    /// Whether this span is recorded (sampled).
    pub fn is_recording(&self) -> bool {
        self.context.is_sampled()
    }

    /// The context of an invocation this one starts (a call, a chain's
    /// stage): its child.
    pub fn as_parent(&self) -> Parent {
        Parent {
            context: SpanContext::new(
                self.context.trace_id(),
                self.context.span_id(),
                self.context.trace_flags(),
                true,
                TraceState::default(),
            ),
            tracestate: self.tracestate.clone(),
        }
    }

    /// Its trace id, as hex.
    pub fn trace_id(&self) -> String {
        self.context.trace_id().to_string()
    }

    /// Its span id, as hex.
    pub fn span_id(&self) -> String {
        self.context.span_id().to_string()
    }

    pub(crate) fn context(&self) -> &SpanContext {
        &self.context
    }

    /// Adds attributes to the invocation's span.
    pub fn set(&self, attributes: impl IntoIterator<Item = KeyValue>) {
        if self.is_recording() {
            self.attributes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(attributes);
        }
    }

    /// Records a phase the host measured (admission, the queue).
    pub fn phase(&self, name: &'static str, start: Instant, end: Instant) {
        if self.is_recording() {
            self.record(Record {
                name: Cow::Borrowed(name),
                kind: Kind::Internal,
                span_id: self.span_id_u64(),
                start,
                end,
                attributes: Vec::new(),
                error: None,
            });
        }
    }

    /// Ends the invocation's span now, failed with `error` if any. Later
    /// calls do nothing; a span dropped unended ends as cancelled.
    pub fn end(&self, error: Option<String>) {
        self.end_at(Instant::now(), error);
    }

    fn end_at(&self, end: Instant, error: Option<String>) {
        if self.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        let attributes =
            std::mem::take(&mut *self.attributes.lock().unwrap_or_else(|e| e.into_inner()));
        let kind = match self.entry {
            Entry::Server => SpanKind::Server,
            Entry::Consumer => SpanKind::Consumer,
        };
        self.export_at(
            self.context.span_id(),
            self.parent.unwrap_or(SpanId::INVALID),
            self.parent.is_some(),
            kind,
            self.name.clone(),
            (self.wall, self.at(end)),
            attributes,
            SpanEvents::default(),
            status(error),
        );
    }

    fn at(&self, instant: Instant) -> SystemTime {
        match instant.checked_duration_since(self.start) {
            Some(after) => self.wall + after,
            None => self.wall - self.start.duration_since(instant),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn export_at(
        &self,
        span_id: SpanId,
        parent: SpanId,
        parent_is_remote: bool,
        kind: SpanKind,
        name: Cow<'static, str>,
        (start_time, end_time): (SystemTime, SystemTime),
        attributes: Vec<KeyValue>,
        events: SpanEvents,
        status: Status,
    ) {
        let Some(spans) = &self.inner.spans else {
            return;
        };
        spans.offer(SpanData {
            span_context: SpanContext::new(
                self.context.trace_id(),
                span_id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: parent,
            parent_span_is_remote: parent_is_remote,
            span_kind: kind,
            name,
            start_time,
            end_time: end_time.max(start_time),
            attributes,
            dropped_attributes_count: 0,
            events,
            links: SpanLinks::default(),
            status,
            instrumentation_scope: self.inner.scope.clone(),
        });
    }
}

impl Drop for InvocationSpan {
    fn drop(&mut self) {
        if !self.ended.load(Ordering::Acquire) {
            self.set([KeyValue::new("luge.termination", "cancelled")]);
            self.end_at(Instant::now(), Some("cancelled".to_owned()));
        }
    }
}

impl InvocationSpan {
    fn span_id_u64(&self) -> u64 {
        u64::from_be_bytes(RandomIdGenerator::default().new_span_id().to_bytes())
    }
}

impl Trace for InvocationSpan {
    fn span_id(&self) -> u64 {
        if self.is_recording() {
            self.span_id_u64()
        } else {
            // Requests of an unsampled invocation carry its parent's id.
            u64::from_be_bytes(self.context.span_id().to_bytes())
        }
    }

    fn record(&self, record: Record) {
        if !self.is_recording() {
            return;
        }
        let mut attributes = key_values(record.attributes);
        if let Some(error) = &record.error {
            attributes.push(KeyValue::new("error.type", "_OTHER"));
            attributes.push(KeyValue::new("luge.error", error.clone()));
        }
        self.export_at(
            SpanId::from_bytes(record.span_id.to_be_bytes()),
            self.context.span_id(),
            false,
            match record.kind {
                Kind::Internal => SpanKind::Internal,
                Kind::Client => SpanKind::Client,
            },
            record.name,
            (self.at(record.start), self.at(record.end)),
            attributes,
            SpanEvents::default(),
            status(record.error),
        );
    }

    fn traceparent(&self, span_id: u64) -> String {
        format!(
            "00-{}-{:016x}-{:02x}",
            self.context.trace_id(),
            span_id,
            self.context.trace_flags().to_u8()
        )
    }

    fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    fn context(&self) -> Context {
        Context {
            trace_id: u128::from_be_bytes(self.context.trace_id().to_bytes()),
            span_id: u64::from_be_bytes(self.context.span_id().to_bytes()),
            sampled: self.is_recording(),
        }
    }

    fn guest_span(&self, span: GuestSpan) {
        if !self.is_recording() {
            return;
        }
        let kind = match span.kind {
            GuestKind::Internal => SpanKind::Internal,
            GuestKind::Client => SpanKind::Client,
            GuestKind::Server => SpanKind::Server,
            GuestKind::Producer => SpanKind::Producer,
            GuestKind::Consumer => SpanKind::Consumer,
        };
        let mut attributes = key_values(span.attributes);
        // Marked as the function's own, for whoever reads the trace.
        attributes.push(KeyValue::new("luge.guest", true));
        let mut events = SpanEvents::default();
        for (name, time, attributes) in span.events {
            events.events.push(opentelemetry::trace::Event::new(
                name,
                time,
                key_values(attributes),
                0,
            ));
        }
        let status = match span.status {
            SpanStatus::Unset => Status::Unset,
            SpanStatus::Ok => Status::Ok,
            SpanStatus::Error(message) => Status::error(message),
        };
        self.export_at(
            SpanId::from_bytes(span.span_id.to_be_bytes()),
            SpanId::from_bytes(span.parent_span_id.to_be_bytes()),
            false,
            kind,
            Cow::Owned(span.name),
            (span.start, span.end),
            attributes,
            events,
            status,
        );
    }

    fn guest_log(&self, log: GuestLog) {
        let span_id = log.span_id.map_or(self.context.span_id(), |id| {
            SpanId::from_bytes(id.to_be_bytes())
        });
        self.inner.guest_log(
            &self.function,
            log,
            (self.context.trace_id(), span_id, self.context.trace_flags()),
        );
    }
}

/// Attributes recorded in luge-core's terms, as OpenTelemetry's.
fn key_values<K: Into<opentelemetry::Key>>(attributes: Vec<(K, Value)>) -> Vec<KeyValue> {
    attributes
        .into_iter()
        .map(|(key, value)| KeyValue::new(key, otel_value(value)))
        .collect()
}

/// A span's status: failed with `error`, else unset.
fn status(error: Option<String>) -> Status {
    match error {
        None => Status::Unset,
        Some(message) => Status::error(message),
    }
}

fn otel_value(value: Value) -> opentelemetry::Value {
    match value {
        Value::Str(s) => opentelemetry::Value::String(StringValue::from(s)),
        Value::Int(i) => opentelemetry::Value::I64(i),
        Value::Bool(b) => opentelemetry::Value::Bool(b),
        Value::Float(f) => opentelemetry::Value::F64(f),
    }
}

/// A trace id's parent decision for [`crate::config::Sampler`]: whether
/// `trace_id` falls within `ratio` (the specification's
/// TraceIdRatioBased: the low 8 bytes against the ratio).
pub(crate) fn within_ratio(trace_id: TraceId, ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    if ratio <= 0.0 {
        return false;
    }
    let bytes = trace_id.to_bytes();
    let mut low = [0u8; 8];
    low.copy_from_slice(&bytes[8..]);
    let value = u64::from_be_bytes(low) >> 1;
    // `ratio` of the 63-bit range.
    (value as f64) < ratio * (1u64 << 63) as f64
}
