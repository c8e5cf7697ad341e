//! The trace of one invocation: where the engine and the host calls
//! record what happened inside it (instantiation, the run, each host call)
//! and where an outgoing request finds the W3C trace context to carry.
//!
//! The host makes one ([`Invocation::trace`](crate::Invocation::trace))
//! only when telemetry is on and the invocation is sampled; otherwise there
//! is none, and nothing below is built. This crate knows no exporter: the
//! executor's implementation (luge-telemetry) turns records into
//! OpenTelemetry spans.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// How the instance an invocation ran in came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceKind {
    /// Instantiated for this invocation in a fresh store.
    Fresh,
    /// Instantiated in a store taken from a pool of reset ones.
    Pooled,
    /// An instance kept from an earlier invocation (a warm container, a
    /// Proto-Faaslet restore).
    Reused,
    /// Instantiated in a fresh store by an idle worker before the
    /// invocation arrived (`crate::teardown::prepare_when_idle`): its
    /// instantiation is no part of the invocation's time on the worker.
    Ahead,
}

impl InstanceKind {
    /// Its name as a span attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceKind::Fresh => "fresh",
            InstanceKind::Pooled => "pooled",
            InstanceKind::Reused => "reused",
            InstanceKind::Ahead => "ahead",
        }
    }
}

/// A family of host calls, one span name prefix each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostCall {
    /// Shared state (`luge:state`, `wasi:keyvalue` over it).
    State,
    /// A call of another function (`luge:calls`, service chaining).
    Call,
    /// An outgoing HTTP request.
    Http,
    /// A database query (PostgreSQL, MySQL, SQLite).
    Database,
    /// A key-value or Redis operation.
    KeyValue,
    /// A message published to a broker (MQTT).
    Messaging,
}

impl HostCall {
    /// Its name as a span attribute value (`luge.host_call`).
    pub fn as_str(self) -> &'static str {
        match self {
            HostCall::State => "state",
            HostCall::Call => "call",
            HostCall::Http => "http",
            HostCall::Database => "database",
            HostCall::KeyValue => "key_value",
            HostCall::Messaging => "messaging",
        }
    }
}

/// A value of a span attribute.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string.
    Str(Cow<'static, str>),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// A floating-point number.
    Float(f64),
}

impl From<&'static str> for Value {
    fn from(value: &'static str) -> Self {
        Value::Str(Cow::Borrowed(value))
    }
}

impl From<String> for Value {
    fn from(value: String) -> Self {
        Value::Str(Cow::Owned(value))
    }
}

impl From<i64> for Value {
    fn from(value: i64) -> Self {
        Value::Int(value)
    }
}

impl From<bool> for Value {
    fn from(value: bool) -> Self {
        Value::Bool(value)
    }
}

/// Whether a span is one the host served, one it sent, or work inside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Work inside the invocation (a phase).
    Internal,
    /// A request the invocation sent (outgoing HTTP, a query, a call).
    Client,
}

/// One finished span inside an invocation, as recorded.
#[derive(Debug, Clone)]
pub struct Record {
    /// Its name (OpenTelemetry's span name).
    pub name: Cow<'static, str>,
    /// Internal or client.
    pub kind: Kind,
    /// Its id, from [`Trace::span_id`] (taken before it started where its
    /// context was sent on a request).
    pub span_id: u64,
    /// When it started.
    pub start: Instant,
    /// When it ended.
    pub end: Instant,
    /// Its attributes.
    pub attributes: Vec<(&'static str, Value)>,
    /// Why it failed; `None` when it did not.
    pub error: Option<String>,
}

/// An invocation's trace (see the module doc).
pub trait Trace: Send + Sync {
    /// A fresh span id for a span of this invocation.
    fn span_id(&self) -> u64;
    /// Records a finished span whose parent is the invocation's own.
    fn record(&self, record: Record);
    /// The `traceparent` header value for a request sent from the span
    /// `span_id` of this trace (W3C Trace Context).
    fn traceparent(&self, span_id: u64) -> String;
    /// The `tracestate` the invocation's client sent, to pass on.
    fn tracestate(&self) -> Option<&str>;
    /// The invocation's own span: what a function's spans descend from
    /// (wasi:otel's `outer-span-context`).
    fn context(&self) -> Context;
    /// Records a span the function made itself, already checked by the
    /// engine's binding (in this trace, under this invocation's span or
    /// one of its own, within the bounds).
    fn guest_span(&self, span: GuestSpan);
    /// Records a log record the function emitted itself, in this trace.
    fn guest_log(&self, log: GuestLog);
}

/// A span's identity in its trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Context {
    /// The trace's id.
    pub trace_id: u128,
    /// The span's id.
    pub span_id: u64,
    /// Whether the trace is sampled (recorded).
    pub sampled: bool,
}

/// What a span is to its trace, as OpenTelemetry's span kinds name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestKind {
    /// Work inside the function.
    Internal,
    /// A request it sent.
    Client,
    /// A request it served.
    Server,
    /// A message it sent.
    Producer,
    /// A message it took.
    Consumer,
}

/// A span a function recorded itself (wasi:otel), after the binding's
/// checks.
#[derive(Debug, Clone)]
pub struct GuestSpan {
    /// Its id: one the function started, never a host span's.
    pub span_id: u64,
    /// The invocation's span or another span of the function's.
    pub parent_span_id: u64,
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: GuestKind,
    /// When it started, on the function's wall clock.
    pub start: SystemTime,
    /// When it ended.
    pub end: SystemTime,
    /// Its attributes.
    pub attributes: Vec<(String, Value)>,
    /// Its events.
    pub events: Vec<GuestEvent>,
    /// Its status, as the guest set it.
    pub status: SpanStatus,
}

/// A guest span's status, as OpenTelemetry's (`wasi:otel`'s) three.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SpanStatus {
    /// Not set.
    #[default]
    Unset,
    /// Set to ok.
    Ok,
    /// Failed, with the guest's description.
    Error(String),
}

/// An event of a function's span: its name, when, its attributes.
pub type GuestEvent = (String, SystemTime, Vec<(String, Value)>);

/// A time a guest hands over (seconds and nanoseconds since the Unix
/// epoch, any `u64` and `u32` it likes: `wasi:clocks`' datetime), clamped
/// to what OTLP carries: nanoseconds since the epoch in a `u64` (until the
/// year 2554). Checked arithmetic: no time a guest gives overflows.
pub fn guest_time(seconds: u64, nanoseconds: u32) -> SystemTime {
    let nanos = seconds
        .checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(u64::from(nanoseconds.min(999_999_999))))
        .unwrap_or(u64::MAX);
    // Representable on every target Luge builds for (64-bit seconds);
    // checked all the same.
    SystemTime::UNIX_EPOCH
        .checked_add(Duration::from_nanos(nanos))
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// A log record a function emitted itself (wasi:otel), after the
/// binding's checks.
#[derive(Debug, Clone)]
pub struct GuestLog {
    /// When it happened, if the function said.
    pub time: Option<SystemTime>,
    /// Its severity, 1 to 24.
    pub severity_number: Option<u8>,
    /// Its severity's name.
    pub severity_text: Option<String>,
    /// Its body.
    pub body: Option<String>,
    /// Its attributes.
    pub attributes: Vec<(String, Value)>,
    /// The function's span it belongs to, else the invocation's.
    pub span_id: Option<u64>,
}

/// The W3C trace context headers a host sets on every request it sends
/// for a traced invocation: a function's own values are replaced, so it
/// cannot attach its requests to another trace.
pub const TRACEPARENT: &str = "traceparent";
/// See [`TRACEPARENT`].
pub const TRACESTATE: &str = "tracestate";

/// A host call in progress, recorded when it ends (dropped).
pub struct HostSpan {
    trace: Arc<dyn Trace>,
    family: HostCall,
    name: Cow<'static, str>,
    span_id: u64,
    start: Instant,
    attributes: Vec<(&'static str, Value)>,
    error: Option<String>,
}

impl HostSpan {
    /// Starts a host call of `family` named `name` in `trace`, if any.
    pub fn start(
        trace: Option<&Arc<dyn Trace>>,
        family: HostCall,
        name: impl Into<Cow<'static, str>>,
    ) -> Option<HostSpan> {
        let trace = trace?;
        Some(HostSpan {
            family,
            name: name.into(),
            span_id: trace.span_id(),
            start: Instant::now(),
            attributes: Vec::new(),
            error: None,
            trace: Arc::clone(trace),
        })
    }

    /// The `traceparent` of a request sent under this span.
    pub fn traceparent(&self) -> String {
        self.trace.traceparent(self.span_id)
    }

    /// The `tracestate` to pass on with it.
    pub fn tracestate(&self) -> Option<&str> {
        self.trace.tracestate()
    }

    /// Adds an attribute.
    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        self.attributes.push((key, value.into()));
    }

    /// Marks the call failed, with why.
    pub fn fail(&mut self, error: impl std::fmt::Display) {
        self.error = Some(error.to_string());
    }
}

impl Drop for HostSpan {
    fn drop(&mut self) {
        let mut attributes = std::mem::take(&mut self.attributes);
        attributes.push(("luge.host_call", Value::from(self.family.as_str())));
        self.trace.record(Record {
            name: std::mem::take(&mut self.name),
            kind: Kind::Client,
            span_id: self.span_id,
            start: self.start,
            end: Instant::now(),
            attributes,
            error: self.error.take(),
        });
    }
}

/// Records a phase (instantiation, the run) of `trace`'s invocation, if
/// it is traced.
pub fn phase(
    trace: Option<&Arc<dyn Trace>>,
    name: &'static str,
    start: Instant,
    end: Instant,
    attributes: Vec<(&'static str, Value)>,
) {
    if let Some(trace) = trace {
        trace.record(Record {
            name: Cow::Borrowed(name),
            kind: Kind::Internal,
            span_id: trace.span_id(),
            start,
            end,
            attributes,
            error: None,
        });
    }
}

/// Records the engine's three phases of a sandbox in an instance of
/// `kind` (fresh, or made ahead): `luge.instantiate` from `started` until
/// the instance was `ready`, `luge.run` until its entry returned (`ran`),
/// `luge.teardown` until its store was freed and its output taken
/// (`ended`).
pub fn phases(
    trace: &Arc<dyn Trace>,
    kind: InstanceKind,
    started: Instant,
    ready: Instant,
    ran: Instant,
    ended: Instant,
) {
    let trace = Some(trace);
    phase(
        trace,
        "luge.instantiate",
        started,
        ready,
        vec![("luge.instance", kind.as_str().into())],
    );
    phase(trace, "luge.run", ready, ran, Vec::new());
    phase(trace, "luge.teardown", ran, ended, Vec::new());
}

/// A state session whose every operation is a host call span of `trace`
/// (`state.get`, `state.set`...: the key is not recorded, it may be a
/// tenant's data).
pub struct TracedState {
    inner: Arc<dyn crate::state::State>,
    trace: Arc<dyn Trace>,
}

impl TracedState {
    /// `inner`, traced in `trace` when it records; else `inner` itself.
    pub fn wrap(
        inner: Arc<dyn crate::state::State>,
        trace: &Arc<dyn Trace>,
    ) -> Arc<dyn crate::state::State> {
        if !trace.context().sampled {
            return inner;
        }
        Arc::new(TracedState {
            inner,
            trace: Arc::clone(trace),
        })
    }

    fn call<T>(
        &self,
        operation: &'static str,
        tier: Option<crate::state::Tier>,
        run: impl FnOnce(&dyn crate::state::State) -> Result<T, crate::state::StateError>,
    ) -> Result<T, crate::state::StateError> {
        let mut span = HostSpan::start(Some(&self.trace), HostCall::State, operation);
        let result = run(&*self.inner);
        if let Some(span) = span.as_mut() {
            if let Some(tier) = tier {
                let tier = match tier {
                    crate::state::Tier::Local => "local",
                    crate::state::Tier::Global => "global",
                };
                span.set("luge.state.tier", tier);
            }
            if let Err(e) = &result {
                span.fail(e);
            }
        }
        result
    }
}

impl crate::state::State for TracedState {
    fn get(
        &self,
        key: &str,
        tier: crate::state::Tier,
    ) -> Result<Arc<[u8]>, crate::state::StateError> {
        self.call("state.get", Some(tier), |s| s.get(key, tier))
    }

    fn set(
        &self,
        key: &str,
        value: &[u8],
        tier: crate::state::Tier,
    ) -> Result<(), crate::state::StateError> {
        self.call("state.set", Some(tier), |s| s.set(key, value, tier))
    }

    fn delete(&self, key: &str, tier: crate::state::Tier) -> Result<(), crate::state::StateError> {
        self.call("state.delete", Some(tier), |s| s.delete(key, tier))
    }

    fn append(
        &self,
        key: &str,
        value: &[u8],
        tier: crate::state::Tier,
    ) -> Result<u64, crate::state::StateError> {
        self.call("state.append", Some(tier), |s| s.append(key, value, tier))
    }

    fn cas(
        &self,
        key: &str,
        old: Option<&[u8]>,
        new: &[u8],
        tier: crate::state::Tier,
    ) -> Result<bool, crate::state::StateError> {
        self.call("state.cas", Some(tier), |s| s.cas(key, old, new, tier))
    }

    fn add(
        &self,
        key: &str,
        delta: i64,
        tier: crate::state::Tier,
    ) -> Result<i64, crate::state::StateError> {
        self.call("state.add", Some(tier), |s| s.add(key, delta, tier))
    }

    fn pull(&self, key: &str) -> Result<(), crate::state::StateError> {
        self.call("state.pull", None, |s| s.pull(key))
    }

    fn push(&self, key: &str) -> Result<(), crate::state::StateError> {
        self.call("state.push", None, |s| s.push(key))
    }

    fn try_lock(
        &self,
        key: &str,
        lease: std::time::Duration,
    ) -> Result<bool, crate::state::StateError> {
        self.call("state.lock", None, |s| s.try_lock(key, lease))
    }

    fn unlock(&self, key: &str) -> Result<(), crate::state::StateError> {
        self.call("state.unlock", None, |s| s.unlock(key))
    }

    fn wait_until(&self) -> Instant {
        self.inner.wait_until()
    }

    fn keys(
        &self,
        prefix: &str,
        tier: crate::state::Tier,
        cursor: u64,
        limit: usize,
    ) -> Result<crate::state::KeyPage, crate::state::StateError> {
        self.call("state.keys", Some(tier), |s| {
            s.keys(prefix, tier, cursor, limit)
        })
    }
}
