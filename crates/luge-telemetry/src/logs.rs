//! Functions' output lines as OTLP log records, each in its invocation's
//! trace (trace and span ids set), bounded per function by a rate limit
//! and per invocation by a line cap, then by the export queue.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::SystemTime;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use opentelemetry::InstrumentationScope;
use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry::trace::{SpanId, TraceFlags};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::logs::{
    LogBatch, LogExporter as _, LogProcessor, SdkLogRecord, SdkLogger, SdkLoggerProvider,
};

use crate::export::{self, Counts, Queue};
use crate::{InvocationSpan, Settings};

/// Which of a function's streams a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Its stdout (where stdout is not its answer).
    Stdout,
    /// Its stderr.
    Stderr,
}

/// Lines one invocation's stream gives at most (the executor's own log
/// takes as many).
const MAX_LINES: usize = 64;

/// Bytes of one line kept at most; the rest is cut.
const MAX_LINE_BYTES: usize = 4096;

pub(crate) struct Logs {
    logger: SdkLogger,
    limiter: DefaultKeyedRateLimiter<String>,
    _provider: SdkLoggerProvider,
}

impl Logs {
    pub(crate) fn new(
        queue: Queue<SdkLogRecord>,
        resource: &Resource,
        settings: &Settings,
    ) -> Logs {
        let provider = SdkLoggerProvider::builder()
            .with_resource(resource.clone())
            .with_log_processor(Enqueue(queue))
            .build();
        let per_second =
            NonZeroU32::new(settings.max_log_records_per_second.max(1)).unwrap_or(NonZeroU32::MIN);
        Logs {
            logger: provider.logger("luge"),
            limiter: RateLimiter::keyed(Quota::per_second(per_second)),
            _provider: provider,
        }
    }

    pub(crate) fn lines(
        &self,
        _scope: &InstrumentationScope,
        function: &str,
        stream: Stream,
        text: &[u8],
        span: Option<&InvocationSpan>,
    ) {
        if text.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(text);
        let now = SystemTime::now();
        for line in text.lines().take(MAX_LINES) {
            // The key is cloned only for a function's first line in a
            // while; the limiter's map is bounded by the functions loaded.
            if self.limiter.check_key(&function.to_owned()).is_err() {
                return;
            }
            let mut record = self.logger.create_log_record();
            record.set_timestamp(now);
            record.set_observed_timestamp(now);
            let (severity, text) = match stream {
                Stream::Stdout => (Severity::Info, "INFO"),
                Stream::Stderr => (Severity::Warn, "WARN"),
            };
            record.set_severity_number(severity);
            record.set_severity_text(text);
            let line = match line.char_indices().nth(MAX_LINE_BYTES) {
                Some((cut, _)) => &line[..cut],
                None => line,
            };
            record.set_body(AnyValue::from(line.to_owned()));
            record.add_attribute("faas.invoked_name", function.to_owned());
            record.add_attribute(
                "log.iostream",
                match stream {
                    Stream::Stdout => "stdout",
                    Stream::Stderr => "stderr",
                },
            );
            if let Some(span) = span {
                let context = span.context();
                record.set_trace_context(
                    context.trace_id(),
                    context.span_id(),
                    Some(context.trace_flags()),
                );
            }
            self.logger.emit(record);
        }
    }
}

impl Logs {
    /// A function's own log record (wasi:otel), under its rate limit.
    pub(crate) fn guest(
        &self,
        function: &str,
        log: luge_core::trace::GuestLog,
        (trace_id, span_id, flags): (opentelemetry::trace::TraceId, SpanId, TraceFlags),
    ) {
        if self.limiter.check_key(&function.to_owned()).is_err() {
            return;
        }
        let mut record = self.logger.create_log_record();
        let now = SystemTime::now();
        record.set_timestamp(log.time.unwrap_or(now));
        record.set_observed_timestamp(now);
        if let Some(n) = log.severity_number {
            record.set_severity_number(severity(n));
        }
        if let Some(text) = log.severity_text {
            // The API takes a static string: the standard names only.
            if let Some(name) = SEVERITIES.iter().find(|s| s.eq_ignore_ascii_case(&text)) {
                record.set_severity_text(name);
            }
        }
        if let Some(body) = log.body {
            record.set_body(AnyValue::from(body));
        }
        for (key, value) in log.attributes {
            let value: AnyValue = match value {
                luge_core::trace::Value::Str(s) => AnyValue::from(s.into_owned()),
                luge_core::trace::Value::Int(i) => AnyValue::from(i),
                luge_core::trace::Value::Bool(b) => AnyValue::from(b),
                luge_core::trace::Value::Float(f) => AnyValue::from(f),
            };
            record.add_attribute(key, value);
        }
        record.add_attribute("faas.invoked_name", function.to_owned());
        record.set_trace_context(trace_id, span_id, Some(flags));
        self.logger.emit(record);
    }
}

/// Severity names a record's text may take.
const SEVERITIES: [&str; 6] = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"];

/// OpenTelemetry's severity number (1-24) as the API's enum.
fn severity(n: u8) -> Severity {
    match n {
        0..=1 => Severity::Trace,
        2 => Severity::Trace2,
        3 => Severity::Trace3,
        4 => Severity::Trace4,
        5 => Severity::Debug,
        6 => Severity::Debug2,
        7 => Severity::Debug3,
        8 => Severity::Debug4,
        9 => Severity::Info,
        10 => Severity::Info2,
        11 => Severity::Info3,
        12 => Severity::Info4,
        13 => Severity::Warn,
        14 => Severity::Warn2,
        15 => Severity::Warn3,
        16 => Severity::Warn4,
        17 => Severity::Error,
        18 => Severity::Error2,
        19 => Severity::Error3,
        20 => Severity::Error4,
        21 => Severity::Fatal,
        22 => Severity::Fatal2,
        23 => Severity::Fatal3,
        _ => Severity::Fatal4,
    }
}

/// The processor the logger emits into: the bounded queue.
#[derive(Debug)]
struct Enqueue(Queue<SdkLogRecord>);

impl std::fmt::Debug for Queue<SdkLogRecord> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Queue")
    }
}

impl LogProcessor for Enqueue {
    fn emit(&self, data: &mut SdkLogRecord, _scope: &InstrumentationScope) {
        self.0.offer(data.clone());
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: std::time::Duration) -> OTelSdkResult {
        // The export thread drains the queue (Telemetry::shutdown).
        Ok(())
    }
}

/// The log export loop (see [`export::run`]).
pub(crate) async fn export(
    exporter: Option<opentelemetry_otlp::LogExporter>,
    rx: tokio::sync::mpsc::Receiver<SdkLogRecord>,
    counts: Arc<Counts>,
    settings: &Settings,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let Some(exporter) = exporter else {
        return;
    };
    let scope = InstrumentationScope::builder("luge")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let (exporter, scope) = (&exporter, &scope);
    export::run("logs", rx, counts, settings, stop, |batch| async move {
        let refs: Vec<(&SdkLogRecord, &InstrumentationScope)> =
            batch.iter().map(|record| (record, scope)).collect();
        // `LogBatch::new` is public but documented as not meant for
        // callers; it is the only way to hand an exporter records kept
        // outside the SDK's own processors (pinned at 0.33).
        exporter.export(LogBatch::new(&refs)).await
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TelemetryTable;

    /// A function printing in a loop: at most 64 lines an invocation, each
    /// cut at 4 KiB, and 100 records a second for the function; another
    /// function's records are not held back by it.
    #[test]
    fn a_flood_of_lines_is_bounded_per_invocation_and_per_function() {
        let table = TelemetryTable {
            enabled: Some(true),
            ..TelemetryTable::default()
        };
        let settings = Settings::resolve(Some(&table), |_| None).unwrap().unwrap();
        let (queue, mut rx, counts) = export::queue(100_000);
        let logs = Logs::new(queue, &Resource::builder_empty().build(), &settings);
        let scope = InstrumentationScope::builder("test").build();
        let long = "x".repeat(10_000);
        let text: String = (0..1000).map(|_| format!("{long}\n")).collect();
        // The quota refills at 100 a second while this runs; a loaded
        // machine (CI, a debug build) may take most of a second.
        let start = std::time::Instant::now();
        logs.lines(&scope, "flood", Stream::Stderr, text.as_bytes(), None);
        let mut first = Vec::new();
        while let Ok(record) = rx.try_recv() {
            first.push(record);
        }
        assert_eq!(first.len(), MAX_LINES);
        for record in &first {
            let Some(AnyValue::String(body)) = record.body() else {
                panic!("no body");
            };
            assert_eq!(body.as_str().len(), MAX_LINE_BYTES);
        }
        for _ in 0..100 {
            logs.lines(&scope, "flood", Stream::Stderr, text.as_bytes(), None);
        }
        let mut more = 0;
        while rx.try_recv().is_ok() {
            more += 1;
        }
        // The quota's burst (100) less the first 64, and what refilled
        // while this ran (100 a second, plus one for the partial cell).
        let refilled = (start.elapsed().as_secs_f64() * 100.0).ceil() as usize + 1;
        let bound = 100 - MAX_LINES + refilled;
        assert!(
            more <= bound,
            "{more} more records, over {bound} for {:?}",
            start.elapsed()
        );
        // Without the limit, the loop would have given 64 a call.
        assert!(bound < 100 * MAX_LINES, "the test ran too slowly to tell");
        logs.lines(&scope, "quiet", Stream::Stdout, b"one line\n", None);
        assert!(
            rx.try_recv().is_ok(),
            "another function's line was held back"
        );
        assert_eq!(counts.snapshot().1, 0);
    }
}
