//! OpenTelemetry end to end, against a real Jaeger (v1.76.0, started on
//! free loopback ports): a chain of three functions, a fan-out of calls,
//! service chaining and an OpenWhisk activation each read back as one
//! trace with the right parents and every phase; the phases add up to the
//! invocation's time; a sampling ratio holds; function output lines and
//! FaaS metrics arrive over OTLP; a collector that is down or stalls costs
//! requests nothing, its losses counted in /metrics.

use crate::common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::*;
use luge_testkit::jaeger::JaegerServer;
use serde_json::{Value, json};

/// A site with a three-stage chain, a fan-out and its callees, and two
/// HTTP handlers (one chaining to the other), exporting to `jaeger` as
/// `service` over `protocol`.
fn traced_site(
    jaeger: &JaegerServer,
    service: &str,
    protocol: &str,
    extra_env: &[(&str, &str)],
) -> (Luge, Site) {
    traced_site_with(jaeger, service, protocol, extra_env, "")
}

/// [`traced_site`] with `extra` routes.
fn traced_site_with(
    jaeger: &JaegerServer,
    service: &str,
    protocol: &str,
    extra_env: &[(&str, &str)],
    extra: &str,
) -> (Luge, Site) {
    let site = Site::new(
        &[
            "fanout",
            "fib",
            "echo",
            "http-handler",
            "spin-otel",
            "counter",
        ],
        &(extra.to_owned() + include_str!("sites/telemetry-traced.toml")),
    );
    let endpoint = match protocol {
        "grpc" => jaeger.grpc_endpoint(),
        _ => jaeger.http_endpoint(),
    };
    let mut env = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
        ("OTEL_SERVICE_NAME", service),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "500"),
    ];
    env.extend_from_slice(extra_env);
    let luge = site.start_with_env(&[], &env);
    (luge, site)
}

/// A W3C traceparent of a fresh trace, sampled: (header, trace id, the
/// client's span id).
fn traceparent(n: u64) -> (String, String, String) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let trace = format!("{:016x}{:016x}", nanos as u64, n + 1);
    let span = format!("{:016x}", 0xabc0 + n);
    (format!("00-{trace}-{span}-01"), trace, span)
}

/// A trace's spans by id: (name, parent id, start µs, duration µs, tags).
struct Spans(HashMap<String, Value>);

impl Spans {
    fn of(trace: &Value) -> Self {
        Spans(
            trace["spans"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| (s["spanID"].as_str().unwrap().to_owned(), s.clone()))
                .collect(),
        )
    }

    fn parent(span: &Value) -> Option<&str> {
        span["references"]
            .as_array()?
            .iter()
            .find(|r| r["refType"] == "CHILD_OF")?["spanID"]
            .as_str()
    }

    fn named(&self, name: &str) -> Vec<&Value> {
        self.0
            .values()
            .filter(|s| s["operationName"] == name)
            .collect()
    }

    fn children(&self, id: &str) -> Vec<&Value> {
        self.0
            .values()
            .filter(|s| Spans::parent(s) == Some(id))
            .collect()
    }

    fn tag<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
        span["tags"]
            .as_array()?
            .iter()
            .find(|t| t["key"] == key)
            .map(|t| &t["value"])
    }

    fn id(span: &Value) -> &str {
        span["spanID"].as_str().unwrap()
    }

    /// Checks `span` is an invocation with the five phases as children,
    /// which cover its time: admission + queue + instantiate + run +
    /// teardown are within its duration and account for nearly all of it.
    fn assert_phases(&self, span: &Value) {
        let children = self.children(Spans::id(span));
        let phase = |name: &str| {
            children
                .iter()
                .find(|c| c["operationName"] == name)
                .unwrap_or_else(|| {
                    panic!(
                        "{} has no {name}: {:?}",
                        span["operationName"],
                        children
                            .iter()
                            .map(|c| &c["operationName"])
                            .collect::<Vec<_>>()
                    )
                })
        };
        let phases = [
            "luge.admission",
            "luge.queue",
            "luge.instantiate",
            "luge.run",
        ];
        let sum: i64 = phases
            .iter()
            .map(|p| phase(p)["duration"].as_i64().unwrap())
            .sum();
        let total = span["duration"].as_i64().unwrap();
        // Each phase starts where the last ended (to the µs Jaeger keeps).
        for pair in phases.windows(2) {
            let end = phase(pair[0])["startTime"].as_i64().unwrap()
                + phase(pair[0])["duration"].as_i64().unwrap();
            let next = phase(pair[1])["startTime"].as_i64().unwrap();
            assert!(
                (next - end).abs() <= 2 || pair[0] == "luge.queue",
                "{} then {}: {end} vs {next}",
                pair[0],
                pair[1]
            );
        }
        assert!(sum <= total + 4, "phases {sum} µs > span {total} µs");
        // What is outside the phases: the hand-off from the sandbox's end
        // to its requester (a channel, a wakeup: long only on a loaded
        // machine) and the µs each timestamp is rounded to.
        assert!(
            total - sum <= 50_000.max(total / 4),
            "phases {sum} µs of span {total} µs"
        );
    }
}

#[test]
fn a_chain_a_fan_out_service_chaining_and_an_activation_each_read_back_as_one_trace() {
    // Components (the HTTP handlers) run on Wasmtime, and only it records
    // the instantiate and run phases.
    wasmtime_only!();
    let jaeger = JaegerServer::start().unwrap();
    let (luge, _dir) = traced_site(&jaeger, "luge-e2e-traces", "grpc", &[]);

    // A chain of three functions: the chain's span under the client's,
    // each stage's invocation under the chain's, each with its phases.
    let (header, trace, client) = traceparent(1);
    let reply = luge.send("POST", "/pipeline", &[("traceparent", &header)], b"{}");
    assert_eq!(reply.status, 200);
    let spans = Spans::of(
        &jaeger
            .wait_for_trace(&trace, 19, Duration::from_secs(20))
            .unwrap(),
    );
    let root = spans.named("POST /pipeline");
    assert_eq!(root.len(), 1);
    assert_eq!(Spans::parent(root[0]), Some(client.as_str()));
    assert_eq!(Spans::tag(root[0], "faas.trigger"), Some(&json!("http")));
    let stages = spans.named("echo");
    assert_eq!(stages.len(), 3);
    for stage in &stages {
        assert_eq!(Spans::parent(stage), Some(Spans::id(root[0])));
        assert_eq!(
            Spans::tag(stage, "luge.termination"),
            Some(&json!("exited"))
        );
        spans.assert_phases(stage);
    }

    // A fan-out: three calls in the caller's trace, each callee's
    // invocation the child of its call.
    let (header, trace, _) = traceparent(2);
    let calls = json!({ "calls": [
        { "name": "fib", "input": { "n": 5 } },
        { "name": "fib", "input": { "n": 6 } },
        { "name": "fib", "input": { "n": 7 } },
    ]});
    let reply = luge.send(
        "POST",
        "/fanout",
        &[("traceparent", &header)],
        calls.to_string().as_bytes(),
    );
    assert_eq!(reply.status, 200);
    let spans = Spans::of(
        &jaeger
            .wait_for_trace(&trace, 27, Duration::from_secs(20))
            .unwrap(),
    );
    let root = spans.named("POST /fanout");
    assert_eq!(root.len(), 1);
    spans.assert_phases(root[0]);
    let calls = spans.named("call fib");
    assert_eq!(calls.len(), 3);
    for call in &calls {
        assert_eq!(Spans::parent(call), Some(Spans::id(root[0])));
        assert_eq!(Spans::tag(call, "span.kind"), Some(&json!("client")));
        let callee = spans.children(Spans::id(call));
        assert_eq!(callee.len(), 1, "{callee:?}");
        assert_eq!(callee[0]["operationName"], "fib");
        assert_eq!(Spans::tag(callee[0], "luge.caller"), Some(&json!("fanout")));
        spans.assert_phases(callee[0]);
    }

    // Service chaining: the outgoing request a client span, carrying the
    // host's context (not the guest's), the callee under the call.
    let (header, trace, _) = traceparent(3);
    let reply = luge.send(
        "GET",
        "/a/fetch",
        &[
            ("traceparent", &header),
            ("x-fetch", "http://b.luge.internal/b/hello"),
        ],
        b"",
    );
    assert_eq!(reply.status, 200);
    let spans = Spans::of(
        &jaeger
            .wait_for_trace(&trace, 13, Duration::from_secs(20))
            .unwrap(),
    );
    let root = spans.named("GET /a/...");
    assert_eq!(root.len(), 1);
    assert_eq!(
        Spans::tag(root[0], "http.response.status_code"),
        Some(&json!(200))
    );
    let call = spans.named("call b");
    assert_eq!(call.len(), 1);
    let callee = spans.children(Spans::id(call[0]));
    assert_eq!(callee.len(), 1);
    assert_eq!(callee[0]["operationName"], "b");
    spans.assert_phases(callee[0]);

    // An OpenWhisk activation: its span named by the action, the
    // activation id its faas.invocation_id, the first run a cold start.
    let container = "wsk0_1_guest_echo";
    let (status, body) = luge.post(
        &format!("/{container}/init"),
        &json!({ "value": { "name": "echo", "main": "main", "binary": true,
                            "code": luge_testkit::b64(&wasm("echo")) } }),
    );
    assert_eq!(status, 200, "{body}");
    let (header, trace, client) = traceparent(4);
    let reply = luge.send(
        "POST",
        &format!("/{container}/run"),
        &[
            ("traceparent", &header),
            ("content-type", "application/json"),
        ],
        json!({ "value": { "x": 1 }, "activation_id": "a1b2c3", "action_name": "/guest/echo",
                "namespace": "guest" })
        .to_string()
        .as_bytes(),
    );
    assert_eq!(reply.status, 200);
    let spans = Spans::of(
        &jaeger
            .wait_for_trace(&trace, 6, Duration::from_secs(20))
            .unwrap(),
    );
    let activation = spans.named("/guest/echo");
    assert_eq!(activation.len(), 1);
    assert_eq!(Spans::parent(activation[0]), Some(client.as_str()));
    assert_eq!(
        Spans::tag(activation[0], "faas.invocation_id"),
        Some(&json!("a1b2c3"))
    );
    assert_eq!(
        Spans::tag(activation[0], "faas.coldstart"),
        Some(&json!(true))
    );
    spans.assert_phases(activation[0]);

    // Its output lines arrived as log records in its trace, and the FaaS
    // metrics as metrics.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let received = jaeger.received();
        if received.contains("hello stderr")
            && received.contains(&trace)
            && received.contains("faas.invocations")
        {
            break;
        }
        assert!(Instant::now() < until, "not received: {received}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        luge.metric(r#"luge_telemetry_records_total{signal="traces",result="exported"}"#) >= 40.0
    );
}

/// The same over OTLP/HTTP with protobuf bodies, and a sampling ratio:
/// a quarter of the traces, by trace id, is what arrives.
#[test]
fn over_http_protobuf_a_sampling_ratio_holds() {
    // Components (the HTTP handlers) run on Wasmtime, and only it records
    // the instantiate and run phases.
    wasmtime_only!();
    let jaeger = JaegerServer::start().unwrap();
    let (luge, _dir) = traced_site(
        &jaeger,
        "luge-e2e-ratio",
        "http/protobuf",
        &[
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ],
    );
    const REQUESTS: usize = 400;
    for _ in 0..REQUESTS {
        assert_eq!(luge.send("POST", "/fib", &[], b"{\"n\": 3}").status, 200);
    }
    // Each sampled request is one trace of six spans (its own and five
    // phases); binomial(400, 0.25): 100 expected, sd 8.7.
    let until = Instant::now() + Duration::from_secs(20);
    let mut exported = 0.0;
    while Instant::now() < until {
        exported =
            luge.metric(r#"luge_telemetry_records_total{signal="traces",result="exported"}"#);
        let pending = luge
            .metric(r#"luge_telemetry_records_total{signal="traces",result="dropped"}"#)
            + luge.metric(r#"luge_telemetry_records_total{signal="traces",result="failed"}"#);
        assert_eq!(pending, 0.0);
        std::thread::sleep(Duration::from_millis(300));
        if exported
            == luge.metric(r#"luge_telemetry_records_total{signal="traces",result="exported"}"#)
            && exported > 0.0
        {
            break;
        }
    }
    let traces = exported / 6.0;
    assert!(
        (55.0..=145.0).contains(&traces),
        "{traces} of {REQUESTS} traces sampled at 0.25"
    );
    // Jaeger holds as many.
    let held = jaeger.traces("luge-e2e-ratio", 1000).unwrap().len() as f64;
    assert!(
        (held - traces).abs() <= 1.0,
        "{held} held, {traces} exported"
    );
}

/// A collector that stalls (SIGSTOP: connections accepted, never answered)
/// or is gone: requests go on at full speed, the spans that cannot go out
/// are dropped at the bounded queue or failed at the export's time limit,
/// each counted in /metrics; when it is back, export resumes.
#[test]
fn a_collector_stalled_or_down_costs_requests_nothing() {
    // Components (the HTTP handlers) run on Wasmtime, and only it records
    // the instantiate and run phases.
    wasmtime_only!();
    let jaeger = JaegerServer::start().unwrap();
    let (luge, _dir) = traced_site(
        &jaeger,
        "luge-e2e-down",
        "grpc",
        &[
            ("OTEL_BSP_MAX_QUEUE_SIZE", "64"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "16"),
            // Long: a request that waited for an export would show it.
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "3000"),
        ],
    );
    assert_eq!(luge.send("POST", "/fib", &[], b"{\"n\": 3}").status, 200);
    jaeger.pause();
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    for _ in 0..300 {
        let t = Instant::now();
        assert_eq!(luge.send("POST", "/fib", &[], b"{\"n\": 3}").status, 200);
        slowest = slowest.max(t.elapsed());
    }
    let took = started.elapsed();
    // 1500 spans into a queue of 64 behind a stalled collector: dropped,
    // and the requests never waited for it.
    assert!(
        luge.metric(r#"luge_telemetry_records_total{signal="traces",result="dropped"}"#) > 500.0
    );
    assert!(
        slowest < Duration::from_millis(250),
        "slowest request {slowest:?}"
    );
    assert!(took < Duration::from_secs(15), "{took:?}");
    let until = Instant::now() + Duration::from_secs(20);
    while luge.metric(r#"luge_telemetry_records_total{signal="traces",result="failed"}"#) == 0.0 {
        assert!(Instant::now() < until, "no export timed out");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Back: what is sent now arrives.
    jaeger.resume();
    let (header, trace, _) = traceparent(5);
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        assert_eq!(
            luge.send("POST", "/fib", &[("traceparent", &header)], b"{\"n\": 3}")
                .status,
            200
        );
        if jaeger
            .wait_for_trace(&trace, 6, Duration::from_secs(1))
            .is_ok()
        {
            break;
        }
        assert!(Instant::now() < until, "export did not resume");
    }
    // Gone: the same, export failing fast (connection refused).
    drop(jaeger);
    for _ in 0..50 {
        assert_eq!(luge.send("POST", "/fib", &[], b"{\"n\": 3}").status, 200);
    }
}

/// An HTTP server on 127.0.0.1 that answers each request with the
/// `traceparent` it carried (or `none`).
fn traceparent_echo() -> u16 {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(16) {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut seen = String::from("none");
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("traceparent:") {
                    seen = value.trim().to_owned();
                }
                line.clear();
            }
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{seen}",
                seen.len()
            );
        }
    });
    port
}

/// A traced function's outgoing request is a client span of its trace and
/// carries that span's context: a `traceparent` the function set itself is
/// replaced, so it cannot attach its requests to another trace.
#[test]
fn outgoing_requests_carry_the_hosts_trace_context_not_the_functions() {
    // Components (the HTTP handlers) run on Wasmtime, and only it records
    // the instantiate and run phases.
    wasmtime_only!();
    let jaeger = JaegerServer::start().unwrap();
    let port = traceparent_echo();
    let (luge, _dir) = traced_site_with(
        &jaeger,
        "luge-e2e-outgoing",
        "grpc",
        &[],
        &format!(
            "[[routes]]\npath = \"/out/...\"\nmodule = \"http-handler.wasm\"\n\
             allowed_outbound_hosts = [\"http://127.0.0.1:{port}\"]\n"
        ),
    );
    let (header, trace, _) = traceparent(6);
    let forged = "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01";
    let url = format!("http://127.0.0.1:{port}/x?secret=1");
    let reply = luge.send(
        "GET",
        "/out/fetch",
        &[
            ("traceparent", &header),
            ("x-fetch", &url),
            ("x-fetch-traceparent", forged),
        ],
        b"",
    );
    assert_eq!(reply.status, 200);
    let sent = String::from_utf8(reply.body).unwrap();
    assert!(sent.starts_with(&format!("00-{trace}-")), "{sent}");
    assert!(sent.ends_with("-01"), "{sent}");
    let spans = Spans::of(
        &jaeger
            .wait_for_trace(&trace, 7, Duration::from_secs(20))
            .unwrap(),
    );
    let client = spans.named("GET");
    assert_eq!(client.len(), 1);
    let span_id = Spans::id(client[0]);
    assert_eq!(sent, format!("00-{trace}-{span_id}-01"));
    assert_eq!(Spans::tag(client[0], "span.kind"), Some(&json!("client")));
    assert_eq!(Spans::tag(client[0], "server.port"), Some(&json!(port)));
    assert_eq!(
        Spans::tag(client[0], "http.response.status_code"),
        Some(&json!(200))
    );
    // The URL (its query may hold a secret) is recorded nowhere.
    assert!(!client[0].to_string().contains("secret"));
    let root = spans.named("GET /out/...");
    assert_eq!(Spans::parent(client[0]), Some(Spans::id(root[0])));

    // Untraced (telemetry off): the host leaves the function's headers be.
    let plain = Site::new(
        &["http-handler"],
        &format!(
            "[[routes]]\npath = \"/out/...\"\nmodule = \"http-handler.wasm\"\n\
             allowed_outbound_hosts = [\"http://127.0.0.1:{port}\"]\n"
        ),
    );
    let luge = plain.start(&[]);
    let reply = luge.send(
        "GET",
        "/out/fetch",
        &[("x-fetch", &url), ("x-fetch-traceparent", forged)],
        b"",
    );
    assert_eq!(String::from_utf8(reply.body).unwrap(), forged);
}

/// wasi:otel: a function's own spans join its invocation's trace under the
/// host's span, its log record carries its span; what a hostile function
/// hands in is dropped: a span claiming the invocation's id, one of
/// another trace, one never started, and spans past the bound; times at
/// the end of `u64` are clamped, never an overflow that loses the
/// invocation.
#[test]
fn a_functions_own_spans_join_its_trace_within_bounds() {
    // Components run on Wasmtime, and only it records
    // the instantiate and run phases.
    wasmtime_only!();
    let jaeger = JaegerServer::start().unwrap();
    let (luge, _dir) = traced_site_with(
        &jaeger,
        "luge-e2e-wasi-otel",
        "grpc",
        &[],
        "[[routes]]\npath = \"/otel\"\nmodule = \"spin-otel.wasm\"\n",
    );
    let (header, trace, client) = traceparent(7);
    let reply = luge.send("POST", "/otel", &[("traceparent", &header)], b"");
    reply.expect(200);
    let seen: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(seen["trace_id"], trace);
    assert_eq!(seen["sampled"], true);
    // Its invocation, five phases, three spans of its own and the flood
    // up to the bound (128 of its own in all).
    let spans = Spans::of(
        &jaeger
            .wait_for_trace(&trace, 134, Duration::from_secs(20))
            .unwrap(),
    );
    let root = spans.named("POST /otel");
    assert_eq!(root.len(), 1);
    assert_eq!(Spans::id(root[0]), seen["span_id"].as_str().unwrap());
    assert_eq!(Spans::parent(root[0]), Some(client.as_str()));
    let work = spans.named("guest work");
    assert_eq!(work.len(), 1);
    assert_eq!(Spans::parent(work[0]), Some(Spans::id(root[0])));
    assert_eq!(Spans::tag(work[0], "guest.answer"), Some(&json!(42)));
    assert_eq!(Spans::tag(work[0], "guest.who"), Some(&json!("a function")));
    assert_eq!(Spans::tag(work[0], "luge.guest"), Some(&json!(true)));
    let step = spans.named("guest step");
    assert_eq!(step.len(), 1);
    assert_eq!(Spans::parent(step[0]), Some(Spans::id(work[0])));
    for refused in ["forged", "foreign", "unstarted"] {
        assert!(spans.named(refused).is_empty(), "{refused} recorded");
    }
    assert_eq!(spans.named("far").len(), 1);
    assert_eq!(spans.named("flood").len(), 125);
    assert_eq!(spans.0.len(), 134);
    // Nothing of it went to another trace.
    assert!(
        jaeger
            .wait_for_trace("0123456789abcdef0123456789abcdef", 1, Duration::ZERO)
            .is_err()
    );
    // Its log record, in its span.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let received = jaeger.received();
        if received.contains("hello from wasi:otel") && received.contains(Spans::id(work[0])) {
            break;
        }
        assert!(Instant::now() < until, "not received: {received}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Each state operation of a traced invocation is a host call span under
/// it, its tier named and its key not.
#[test]
fn state_operations_are_host_call_spans() {
    // Only Wasmtime records the instantiate and run phases counted here.
    wasmtime_only!();
    let jaeger = JaegerServer::start().unwrap();
    let (luge, _dir) = traced_site(&jaeger, "luge-e2e-state", "grpc", &[]);
    let (header, trace, _) = traceparent(10);
    let reply = luge.send(
        "POST",
        "/counter",
        &[("traceparent", &header)],
        br#"{"key": "counters/secret-key", "n": 2}"#,
    );
    reply.expect(200);
    // The invocation, five phases, two reads and two swaps.
    let spans = Spans::of(
        &jaeger
            .wait_for_trace(&trace, 10, Duration::from_secs(20))
            .unwrap(),
    );
    let root = spans.named("POST /counter");
    assert_eq!(root.len(), 1);
    for (name, count) in [("state.get", 2), ("state.cas", 2)] {
        let ops = spans.named(name);
        assert_eq!(ops.len(), count, "{name}");
        for op in ops {
            assert_eq!(Spans::parent(op), Some(Spans::id(root[0])));
            assert_eq!(Spans::tag(op, "luge.host_call"), Some(&json!("state")));
            assert_eq!(Spans::tag(op, "luge.state.tier"), Some(&json!("local")));
            assert!(!op.to_string().contains("secret-key"), "{op}");
        }
    }
}

/// An HTTP handler's sandbox made ahead of its request (by an idle
/// worker) reads back as such: its `luge.instantiate` phase is empty, with
/// `luge.instance` `ahead`, and the phases still line up and fit in the
/// request's span; the first request's instance is `fresh`.
#[test]
fn a_sandbox_made_ahead_has_an_empty_instantiate_phase() {
    wasmtime_only!();
    let jaeger = JaegerServer::start().unwrap();
    // Two preparations that used more than 200 µs (2 ms in this debug
    // build) of their thread's CPU turn making ahead off for the module, and a
    // machine loaded enough (a vCPU descheduled under it, say) makes one
    // do so now and then: a fresh server then, three at most.
    for attempt in 0..3u64 {
        let kinds = traced_kinds(&jaeger, 40 + 10 * attempt);
        assert_eq!(kinds[0], Some(json!("fresh")));
        // Each worker's first request instantiates on demand; after it, the
        // worker is idle between one request and the next (most are made
        // ahead; fewer on a loaded machine).
        let ahead = kinds.iter().filter(|k| **k == Some(json!("ahead"))).count();
        if ahead >= 1 {
            return;
        }
        eprintln!("attempt {attempt}: none made ahead: {kinds:?}");
    }
    panic!("no sandbox was made ahead in three servers");
}

/// The `luge.instance` of the `luge.instantiate` phase of eight requests
/// in a row to a fresh traced server, each checked as the test above says.
fn traced_kinds(jaeger: &JaegerServer, first_trace: u64) -> Vec<Option<Value>> {
    let (luge, _dir) = traced_site(jaeger, "luge-e2e-ahead", "grpc", &[]);
    let mut kinds = Vec::new();
    for n in 0..8 {
        let (header, trace, _) = traceparent(first_trace + n);
        let reply = luge.send("GET", "/b/hello", &[("traceparent", &header)], b"");
        assert_eq!(reply.status, 200);
        // The request's span and its five phases.
        let spans = Spans::of(
            &jaeger
                .wait_for_trace(&trace, 6, Duration::from_secs(20))
                .unwrap(),
        );
        let root = spans.named("GET /b/...");
        assert_eq!(root.len(), 1);
        spans.assert_phases(root[0]);
        let instantiate = spans.named("luge.instantiate");
        assert_eq!(instantiate.len(), 1);
        let kind = Spans::tag(instantiate[0], "luge.instance").cloned();
        if kind == Some(json!("ahead")) {
            assert!(instantiate[0]["duration"].as_i64().unwrap() <= 2);
        }
        kinds.push(kind);
    }
    kinds
}
