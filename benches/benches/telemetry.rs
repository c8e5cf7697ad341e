//! What OpenTelemetry adds to one invocation on the request path, without
//! the noise of a server: the calls the executor makes per request, with
//! telemetry on (an OTLP/gRPC endpoint where nothing listens: export
//! fails on the `luge-otel` thread, off this one).
//!
//! `cargo bench -p luge-benches --bench telemetry`
//!
//! - `unsampled at 1 %`: starting an invocation's span that the ratio
//!   does not sample (nothing is built), the FaaS metrics' record of its
//!   end, and an empty stderr's log export: what 99 % of requests pay;
//! - `metrics only`: the FaaS metrics' record alone;
//! - `sampled`: a span and its five phases, built and queued (their
//!   encoding and export happen on the export thread).

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use luge_core::trace::Trace;
use luge_telemetry::{Entry, Invoked, Settings, Stream, Telemetry, TelemetryTable};

fn telemetry(sampler: &str, arg: f64) -> Telemetry {
    let table = TelemetryTable {
        endpoint: Some("http://127.0.0.1:9".to_owned()),
        sampler: Some(sampler.to_owned()),
        sampler_arg: Some(arg),
        ..TelemetryTable::default()
    };
    let settings = Settings::resolve(Some(&table), |_| None)
        .expect("settings")
        .expect("on");
    Telemetry::start(settings).expect("telemetry")
}

fn invoked(telemetry: &Telemetry) {
    telemetry.invoked(Invoked {
        function: "c-ping",
        trigger: "http",
        duration: Duration::from_micros(30),
        failed: false,
        timed_out: false,
        cold: false,
    });
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("telemetry");
    let ratio = telemetry("parentbased_traceidratio", 0.01);
    group.bench_function("unsampled at 1 %", |b| {
        b.iter(|| {
            let span = ratio.start_invocation(
                || "GET /ping",
                "c-ping",
                Entry::Server,
                None,
                Instant::now(),
            );
            if let Some(span) = &span {
                span.end(None);
            }
            invoked(&ratio);
            ratio.function_log("c-ping", Stream::Stderr, b"", span.as_deref());
        })
    });
    group.bench_function("metrics only", |b| b.iter(|| invoked(&ratio)));
    let all = telemetry("always_on", 1.0);
    group.bench_function("sampled: a span and five phases", |b| {
        b.iter(|| {
            let arrived = Instant::now();
            let span = all
                .start_invocation(|| "GET /ping", "c-ping", Entry::Server, None, arrived)
                .expect("sampled");
            let now = Instant::now();
            span.phase("luge.admission", arrived, now);
            span.phase("luge.queue", now, now);
            luge_core::trace::phases(
                &(std::sync::Arc::clone(&span) as std::sync::Arc<dyn Trace>),
                luge_core::trace::InstanceKind::Fresh,
                now,
                now,
                now,
                now,
            );
            span.end(None);
        })
    });
    group.finish();
    ratio.shutdown();
    all.shutdown();
}

criterion_group!(benches, bench);
criterion_main!(benches);
