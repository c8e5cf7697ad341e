//! Records its own spans and a log record through `wasi:otel`
//! (0.2.0-rc.2), then tries what a hostile function would, and prints
//! what it did as one JSON line:
//!
//! - `guest work`, a child of the invocation's span (`outer-span-context`),
//!   with attributes and an event, and `guest step`, its child;
//! - a log record (`hello from wasi:otel`) in `guest work`;
//! - `forged`: a span claiming the invocation's own span id;
//! - `foreign`: a span of another trace;
//! - `unstarted`: a span never announced by `on-start`;
//! - `far`: a span that starts at 2^63 seconds and ends, with an event, at
//!   `u64::MAX` seconds, and a log record stamped `u64::MAX` seconds and
//!   4,294,967,295 nanoseconds (the host clamps such times, and never
//!   overflows on them);
//! - `flood`: 300 more spans, past the host's bound per invocation.

mod bindings {
    wit_bindgen::generate!({
        world: "luge:worlds/otel-imports",
        path: "../../../wit",
        generate_all,
    });
}

// Versioned: the WIT root holds two versions of wasi:clocks (0.2.10 and
// 0.2.0-rc-2023-10-18), so wit-bindgen names each module with its version.
use bindings::wasi::clocks0_2_10::wall_clock;
use bindings::wasi::otel::{logs, tracing, types};

/// A fresh span id: the clock's nanoseconds mixed with a counter.
fn span_id(n: u64) -> String {
    let now = wall_clock::now();
    let seed = now.seconds ^ (u64::from(now.nanoseconds) << 20);
    format!(
        "{:016x}",
        (seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1
    )
}

fn context(trace: &str, span: &str) -> tracing::SpanContext {
    tracing::SpanContext {
        trace_id: trace.to_owned(),
        span_id: span.to_owned(),
        trace_flags: tracing::TraceFlags::SAMPLED,
        is_remote: false,
        trace_state: Vec::new(),
    }
}

fn scope() -> types::InstrumentationScope {
    types::InstrumentationScope {
        name: "luge-spin-otel".to_owned(),
        version: None,
        schema_url: None,
        attributes: Vec::new(),
    }
}

/// Starts and ends a span `name` with id `id` under `parent`.
fn span(trace: &str, id: &str, parent: &str, name: &str, attributes: Vec<types::KeyValue>) {
    let ctx = context(trace, id);
    let start = wall_clock::now();
    tracing::on_start(&ctx);
    tracing::on_end(&tracing::SpanData {
        span_context: ctx,
        parent_span_id: parent.to_owned(),
        span_kind: tracing::SpanKind::Internal,
        name: name.to_owned(),
        start_time: start,
        end_time: wall_clock::now(),
        attributes,
        events: vec![tracing::Event {
            name: "checkpoint".to_owned(),
            time: wall_clock::now(),
            attributes: Vec::new(),
        }],
        links: Vec::new(),
        status: tracing::Status::Ok,
        instrumentation_scope: scope(),
        dropped_attributes: 0,
        dropped_events: 0,
        dropped_links: 0,
    });
}

fn main() {
    let outer = tracing::outer_span_context();
    let trace = outer.trace_id.clone();
    let work = span_id(1);
    let step = span_id(2);
    // `guest step` ends first, inside `guest work`.
    let work_ctx = context(&trace, &work);
    let start = wall_clock::now();
    tracing::on_start(&work_ctx);
    span(&trace, &step, &work, "guest step", Vec::new());
    logs::on_emit(&logs::LogRecord {
        timestamp: Some(wall_clock::now()),
        observed_timestamp: None,
        severity_text: Some("INFO".to_owned()),
        severity_number: Some(9),
        body: Some("\"hello from wasi:otel\"".to_owned()),
        attributes: Some(vec![types::KeyValue {
            key: "guest.answer".to_owned(),
            value: "42".to_owned(),
        }]),
        event_name: None,
        resource: None,
        instrumentation_scope: None,
        trace_id: Some(trace.clone()),
        span_id: Some(work.clone()),
        trace_flags: None,
    });
    tracing::on_end(&tracing::SpanData {
        span_context: work_ctx,
        parent_span_id: outer.span_id.clone(),
        span_kind: tracing::SpanKind::Internal,
        name: "guest work".to_owned(),
        start_time: start,
        end_time: wall_clock::now(),
        attributes: vec![
            types::KeyValue {
                key: "guest.answer".to_owned(),
                value: "42".to_owned(),
            },
            types::KeyValue {
                key: "guest.who".to_owned(),
                value: "\"a function\"".to_owned(),
            },
        ],
        events: Vec::new(),
        links: Vec::new(),
        status: tracing::Status::Unset,
        instrumentation_scope: scope(),
        dropped_attributes: 0,
        dropped_events: 0,
        dropped_links: 0,
    });
    // What a hostile function tries.
    span(&trace, &outer.span_id, &outer.span_id, "forged", Vec::new());
    span(
        "0123456789abcdef0123456789abcdef",
        &span_id(3),
        &outer.span_id,
        "foreign",
        Vec::new(),
    );
    let unstarted = span_id(4);
    tracing::on_end(&tracing::SpanData {
        span_context: context(&trace, &unstarted),
        parent_span_id: outer.span_id.clone(),
        span_kind: tracing::SpanKind::Internal,
        name: "unstarted".to_owned(),
        start_time: wall_clock::now(),
        end_time: wall_clock::now(),
        attributes: Vec::new(),
        events: Vec::new(),
        links: Vec::new(),
        status: tracing::Status::Unset,
        instrumentation_scope: scope(),
        dropped_attributes: 0,
        dropped_events: 0,
        dropped_links: 0,
    });
    let far = context(&trace, &span_id(5));
    let end_of_time = wall_clock::Datetime {
        seconds: u64::MAX,
        nanoseconds: u32::MAX,
    };
    tracing::on_start(&far);
    tracing::on_end(&tracing::SpanData {
        span_context: far,
        parent_span_id: outer.span_id.clone(),
        span_kind: tracing::SpanKind::Internal,
        name: "far".to_owned(),
        start_time: wall_clock::Datetime {
            seconds: 1 << 63,
            nanoseconds: 0,
        },
        end_time: end_of_time,
        attributes: Vec::new(),
        events: vec![tracing::Event {
            name: "at the end of time".to_owned(),
            time: end_of_time,
            attributes: Vec::new(),
        }],
        links: Vec::new(),
        status: tracing::Status::Unset,
        instrumentation_scope: scope(),
        dropped_attributes: 0,
        dropped_events: 0,
        dropped_links: 0,
    });
    logs::on_emit(&logs::LogRecord {
        timestamp: Some(end_of_time),
        observed_timestamp: Some(end_of_time),
        severity_text: None,
        severity_number: None,
        body: Some("\"a record from the end of time\"".to_owned()),
        attributes: None,
        event_name: None,
        resource: None,
        instrumentation_scope: None,
        trace_id: None,
        span_id: None,
        trace_flags: None,
    });
    for n in 0..300 {
        span(
            &trace,
            &span_id(100 + n),
            &outer.span_id,
            "flood",
            Vec::new(),
        );
    }
    println!(
        "{{\"trace_id\":\"{}\",\"span_id\":\"{}\",\"sampled\":{}}}",
        outer.trace_id,
        outer.span_id,
        outer.trace_flags.contains(tracing::TraceFlags::SAMPLED)
    );
}
