//! The `component` feature: `wasi:otel@0.2.0-rc.2` (what spin-sdk 7 imports; experimental in Spin
//! and wasmCloud): a function's own spans and log records join its
//! invocation's trace. The WIT is spin-sdk 7.0.0's (Luge's WIT root,
//! deps/otel; Apache-2.0 WITH LLVM-exception).
//!
//! A function is a tenant, so what it hands in is checked, not trusted:
//!
//! - a span must be one it started (`on-start`) in the invocation's trace,
//!   never the invocation's own span or any other the host made, and its
//!   parent the invocation's span or one of its own: it cannot forge,
//!   replace or re-parent the host's spans, or write into another trace;
//! - at most [`MAX_SPANS`] spans and [`MAX_LOGS`] log records per
//!   invocation (then per function by the host's rate limit), each with
//!   bounded names, attributes and events; the rest is dropped;
//! - an untraced invocation (telemetry off or not sampled) gets an
//!   unsampled, all-zero context, and what it hands in is dropped.
//!
//! `metrics.export` answers an error: a function's metrics are not
//! forwarded (Prometheus and the host's FaaS metrics count it already).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::SystemTime;

use luge_core::trace::{Context, GuestKind, GuestLog, GuestSpan, SpanStatus, Trace, Value};
use wasmtime::component::HasData;

luge_binding::bindings!("luge:worlds/host-otel",
    imports: { default: trappable },
    with: {
        "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
    },
);

use generated::wasi::otel::{logs, metrics, tracing, types};
use wasmtime_wasi::p2::bindings::clocks::wall_clock::Datetime;

/// Spans one invocation may record.
pub const MAX_SPANS: usize = 128;
/// Log records one invocation may emit (the host's rate limit per
/// function applies on top).
pub const MAX_LOGS: usize = 256;
/// Spans it may have started and not ended.
const MAX_OPEN: usize = 256;
/// Attributes (or events) kept per span or record; the rest are dropped.
const MAX_ATTRIBUTES: usize = 64;
/// Bytes of a name, key or value kept; the rest is cut.
const MAX_TEXT: usize = 4096;

/// One invocation's wasi:otel: its trace, and what its function started.
#[derive(Default)]
pub struct OtelState {
    started: HashSet<u64>,
    ended: HashSet<u64>,
    logs: usize,
}

/// What the bindings work on.
pub struct OtelView<'a> {
    /// The invocation's trace (`None`: it is not recorded).
    pub trace: Option<&'a Arc<dyn Trace>>,
    /// What its function started and emitted so far.
    pub state: &'a mut OtelState,
}

/// The bindings' host state.
pub struct HasOtel;

impl HasData for HasOtel {
    type Data<'a> = OtelView<'a>;
}

luge_binding::add_to_linker! {
    /// Adds `wasi:otel`'s tracing, logs, metrics and types to `linker`.
    OtelView as HasOtel: types, tracing, logs, metrics
}

impl<'a> OtelView<'a> {
    /// The invocation's context, if it is recorded.
    fn recorded(&self) -> Option<(&'a Arc<dyn Trace>, Context)> {
        let trace = self.trace?;
        let context = trace.context();
        context.sampled.then_some((trace, context))
    }
}

fn cut(mut text: String) -> String {
    if text.len() > MAX_TEXT {
        let mut end = MAX_TEXT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

fn hex_u64(text: &str) -> Option<u64> {
    (text.len() == 16)
        .then(|| u64::from_str_radix(text, 16).ok())
        .flatten()
        .filter(|id| *id != 0)
}

fn hex_u128(text: &str) -> Option<u128> {
    (text.len() == 32)
        .then(|| u128::from_str_radix(text, 16).ok())
        .flatten()
}

/// A guest's time, clamped ([`luge_core::trace::guest_time`]).
fn time(datetime: &Datetime) -> SystemTime {
    luge_core::trace::guest_time(datetime.seconds, datetime.nanoseconds)
}

/// An attribute's value, which wasi:otel encodes as JSON: a string,
/// number or boolean as such, anything else as its JSON text.
fn value(json: String) -> Value {
    match serde_json::from_str::<serde_json::Value>(&json) {
        Ok(serde_json::Value::String(s)) => Value::from(cut(s)),
        Ok(serde_json::Value::Bool(b)) => Value::Bool(b),
        Ok(serde_json::Value::Number(n)) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or_default()),
        },
        _ => Value::from(cut(json)),
    }
}

fn attributes(list: Vec<types::KeyValue>) -> Vec<(String, Value)> {
    list.into_iter()
        .take(MAX_ATTRIBUTES)
        .map(|kv| (cut(kv.key), value(kv.value)))
        .collect()
}

impl types::Host for OtelView<'_> {}

impl tracing::Host for OtelView<'_> {
    fn on_start(&mut self, context: tracing::SpanContext) -> wasmtime::Result<()> {
        let Some((_, own)) = self.recorded() else {
            return Ok(());
        };
        let (Some(id), Some(trace)) = (hex_u64(&context.span_id), hex_u128(&context.trace_id))
        else {
            return Ok(());
        };
        if trace == own.trace_id && id != own.span_id && self.state.started.len() < MAX_OPEN {
            self.state.started.insert(id);
        }
        Ok(())
    }

    fn on_end(&mut self, span: tracing::SpanData) -> wasmtime::Result<()> {
        let Some((trace, own)) = self.recorded() else {
            return Ok(());
        };
        if self.state.ended.len() >= MAX_SPANS {
            return Ok(());
        }
        let context = &span.span_context;
        let Some(id) = hex_u64(&context.span_id) else {
            return Ok(());
        };
        let parent = hex_u64(&span.parent_span_id).unwrap_or(own.span_id);
        // Its own span, started here and ended once, in this trace, under
        // this invocation or another of its own spans.
        if hex_u128(&context.trace_id) != Some(own.trace_id)
            || !self.state.started.remove(&id)
            || (parent != own.span_id
                && !self.state.started.contains(&parent)
                && !self.state.ended.contains(&parent))
        {
            return Ok(());
        }
        self.state.ended.insert(id);
        trace.guest_span(GuestSpan {
            span_id: id,
            parent_span_id: parent,
            name: cut(span.name),
            kind: match span.span_kind {
                tracing::SpanKind::Client => GuestKind::Client,
                tracing::SpanKind::Server => GuestKind::Server,
                tracing::SpanKind::Producer => GuestKind::Producer,
                tracing::SpanKind::Consumer => GuestKind::Consumer,
                tracing::SpanKind::Internal => GuestKind::Internal,
            },
            start: time(&span.start_time),
            end: time(&span.end_time),
            attributes: attributes(span.attributes),
            events: span
                .events
                .into_iter()
                .take(MAX_ATTRIBUTES)
                .map(|e| (cut(e.name), time(&e.time), attributes(e.attributes)))
                .collect(),
            status: match span.status {
                tracing::Status::Unset => SpanStatus::Unset,
                tracing::Status::Ok => SpanStatus::Ok,
                tracing::Status::Error(why) => SpanStatus::Error(cut(why)),
            },
        });
        Ok(())
    }

    fn outer_span_context(&mut self) -> wasmtime::Result<tracing::SpanContext> {
        let (trace_id, span_id, sampled) = match self.trace {
            Some(trace) => {
                let c = trace.context();
                (c.trace_id, c.span_id, c.sampled)
            }
            None => (0, 0, false),
        };
        Ok(tracing::SpanContext {
            trace_id: format!("{trace_id:032x}"),
            span_id: format!("{span_id:016x}"),
            trace_flags: if sampled {
                tracing::TraceFlags::SAMPLED
            } else {
                tracing::TraceFlags::empty()
            },
            is_remote: false,
            trace_state: Vec::new(),
        })
    }
}

impl logs::Host for OtelView<'_> {
    fn on_emit(&mut self, data: logs::LogRecord) -> wasmtime::Result<()> {
        let Some(trace) = self.trace else {
            return Ok(());
        };
        if self.state.logs >= MAX_LOGS {
            return Ok(());
        }
        self.state.logs += 1;
        // Its own span's, if it names one it made; else the invocation's.
        let span_id = data
            .span_id
            .as_deref()
            .and_then(hex_u64)
            .filter(|id| self.state.started.contains(id) || self.state.ended.contains(id));
        trace.guest_log(GuestLog {
            time: data.timestamp.as_ref().map(time),
            severity_number: data.severity_number,
            severity_text: data.severity_text.map(cut),
            body: data.body.map(|body| match value(body) {
                Value::Str(s) => s.into_owned(),
                Value::Int(i) => i.to_string(),
                Value::Bool(b) => b.to_string(),
                Value::Float(f) => f.to_string(),
            }),
            attributes: data.attributes.map(attributes).unwrap_or_default(),
            span_id,
        });
        Ok(())
    }
}

impl metrics::Host for OtelView<'_> {
    fn export(
        &mut self,
        _metrics: metrics::ResourceMetrics,
    ) -> wasmtime::Result<Result<(), metrics::Error>> {
        Ok(Err(
            "this host does not forward a function's metrics (see its FaaS metrics)".to_owned(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(seconds: u64, nanoseconds: u32) -> Duration {
        time(&Datetime {
            seconds,
            nanoseconds,
        })
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
    }

    #[test]
    fn a_guests_times_are_clamped_never_an_overflow() {
        assert_eq!(at(1, 5), Duration::new(1, 5));
        // Nanoseconds past a second count as the second's last.
        assert_eq!(at(1, u32::MAX), Duration::new(1, 999_999_999));
        let end = Duration::from_nanos(u64::MAX);
        for (seconds, nanoseconds) in [
            (u64::MAX, 0),
            (u64::MAX, u32::MAX),
            (1 << 63, 0),
            (u64::MAX / 1_000_000_000, 999_999_999),
        ] {
            assert_eq!(at(seconds, nanoseconds), end, "{seconds} {nanoseconds}");
        }
    }
}
