//! Luge's OpenTelemetry: a span per invocation with its phases as child
//! spans, W3C trace context in and out, function output lines as log
//! records, and FaaS metrics, all exported over OTLP (gRPC or
//! HTTP/protobuf) with the `opentelemetry` crates' exporters.
//!
//! What this narrows OpenTelemetry to:
//!
//! - **Off by default**, and then nothing here exists: the executor holds
//!   no [`Telemetry`] and builds no span. It is on once an OTLP endpoint is
//!   configured (`OTEL_EXPORTER_OTLP_ENDPOINT` or `[telemetry] endpoint`),
//!   as Spin's is.
//! - **No global provider and no `tracing` bridge**: the executor starts an
//!   invocation's span ([`Telemetry::start`]) where a request arrives; the
//!   engine and host calls record into it through
//!   [`luge_core::trace::Trace`], with times they measured themselves.
//! - **Export never costs a request more than a failed `try_send`**: each
//!   signal has a bounded queue and one export task on a thread of its
//!   own (the `luge-otel` thread); what is dropped or failed is counted
//!   ([`Telemetry::counts`]) for /metrics.
//! - **Sampling before building**: an unsampled invocation gets no span; if
//!   its client sent a trace context it gets a carrier that passes that
//!   context on to the requests it sends, and nothing else.

#![deny(missing_docs)]

#[cfg(feature = "component")]
pub mod component;
pub mod config;
pub mod export;
mod logs;
mod metrics;
mod span;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use opentelemetry::InstrumentationScope;
use opentelemetry::trace::TraceId;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SpanData};

pub use config::{ConfigError, Protocol, Settings, TelemetryTable};
pub use export::Counts;
pub use logs::Stream;
pub use metrics::Invoked;
pub use opentelemetry::KeyValue;
pub use span::{Entry, InvocationSpan, Parent};

use config::{Root, Sampler};
use export::Queue;

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A setting is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// An OTLP exporter could not be built (a bad endpoint).
    #[error("telemetry: the OTLP exporter could not be built: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// The export thread could not start.
    #[error("telemetry: the export thread could not start: {0}")]
    Thread(#[from] std::io::Error),
}

/// What every span and record of this process shares.
pub(crate) struct Inner {
    settings: Settings,
    pub(crate) scope: InstrumentationScope,
    pub(crate) spans: Option<Queue<SpanData>>,
    logs: Option<logs::Logs>,
    metrics: Option<metrics::Instruments>,
}

/// The process's telemetry, on (see the crate doc).
#[derive(Clone)]
pub struct Telemetry {
    inner: Arc<Inner>,
    span_counts: Arc<Counts>,
    log_counts: Arc<Counts>,
    shutdown: Arc<Shutdown>,
}

struct Shutdown {
    stop: tokio::sync::watch::Sender<bool>,
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Starts telemetry with `settings`: the export thread, its exporters
    /// and queues. Exporters connect lazily: a collector that is not up
    /// yet is no error here.
    pub fn start(settings: Settings) -> Result<Telemetry, TelemetryError> {
        let resource = Resource::builder()
            .with_service_name(settings.service_name.clone())
            .with_attribute(opentelemetry::KeyValue::new(
                "service.version",
                env!("CARGO_PKG_VERSION"),
            ))
            .build();
        let scope = InstrumentationScope::builder("luge")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let (span_queue, span_rx, span_counts) = export::queue(settings.max_queue);
        let (log_queue, log_rx, log_counts) = export::queue(settings.max_queue);
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread_settings = settings.clone();
        let thread_resource = resource.clone();
        let thread_span_counts = Arc::clone(&span_counts);
        let thread_log_counts = Arc::clone(&log_counts);
        let thread = std::thread::Builder::new()
            .name("luge-otel".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready_tx.send(Err(TelemetryError::Thread(e)));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let built = Exporters::build(&thread_settings, &thread_resource);
                    let exporters = match built {
                        Ok(exporters) => exporters,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let meters = exporters.metrics.map(|exporter| {
                        metrics::provider(exporter, &thread_settings, &thread_resource)
                    });
                    let _ = ready_tx.send(Ok(meters.clone()));
                    let spans = export_spans(
                        exporters.spans,
                        span_rx,
                        thread_span_counts,
                        &thread_settings,
                        stopped.clone(),
                    );
                    let logs = logs::export(
                        exporters.logs,
                        log_rx,
                        thread_log_counts,
                        &thread_settings,
                        stopped,
                    );
                    tokio::join!(spans, logs);
                    if let Some(meters) = meters {
                        // Its last export, bounded by the exporter's timeout.
                        let _ = meters.shutdown();
                    }
                });
            })?;
        let meters = ready_rx
            .recv()
            .map_err(|_| std::io::Error::other("the export thread ended while starting"))??;
        let logs = settings
            .logs
            .then(|| logs::Logs::new(log_queue, &resource, &settings));
        let inner = Inner {
            metrics: meters.map(|provider| metrics::Instruments::new(&provider)),
            spans: settings.traces.then_some(span_queue),
            logs,
            scope,
            settings,
        };
        Ok(Telemetry {
            inner: Arc::new(inner),
            span_counts,
            log_counts,
            shutdown: Arc::new(Shutdown {
                stop,
                thread: std::sync::Mutex::new(Some(thread)),
            }),
        })
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// Starts the span of an invocation of `function` that arrived at
    /// `arrived`, under its client's context if it sent one, named by
    /// `name` (called only if it is built): `None` when it is not sampled
    /// and has no context to pass on (then nothing is built).
    pub fn start_invocation<N: Into<Cow<'static, str>>>(
        &self,
        name: impl FnOnce() -> N,
        function: &str,
        entry: Entry,
        parent: Option<Parent>,
        arrived: Instant,
    ) -> Option<Arc<InvocationSpan>> {
        let trace_id = match &parent {
            Some(p) => p.context.trace_id(),
            None => RandomIdGenerator::default().new_trace_id(),
        };
        let sampled = self.inner.spans.is_some() && self.sample(parent.as_ref(), trace_id);
        if !sampled && parent.is_none() {
            return None;
        }
        Some(Arc::new(InvocationSpan::new(
            Arc::clone(&self.inner),
            name().into(),
            function,
            entry,
            parent,
            trace_id,
            sampled,
            arrived,
        )))
    }

    fn sample(&self, parent: Option<&Parent>, trace_id: TraceId) -> bool {
        let root = |root: Root| match root {
            Root::AlwaysOn => true,
            Root::AlwaysOff => false,
            Root::Ratio(r) => span::within_ratio(trace_id, r),
        };
        match self.inner.settings.sampler {
            Sampler::AlwaysOn => true,
            Sampler::AlwaysOff => false,
            Sampler::Ratio(r) => span::within_ratio(trace_id, r),
            Sampler::ParentBased(r) => match parent {
                Some(p) => p.is_sampled(),
                None => root(r),
            },
        }
    }

    /// Exports `text`'s lines (a function's output on `stream`) as log
    /// records of `function`, in `span`'s trace; bounded per function
    /// (`max_log_records_per_second`) and per invocation.
    pub fn function_log(
        &self,
        function: &str,
        stream: Stream,
        text: &[u8],
        span: Option<&InvocationSpan>,
    ) {
        if let Some(logs) = &self.inner.logs {
            logs.lines(&self.inner.scope, function, stream, text, span);
        }
    }

    /// Counts an invocation's end in the FaaS metrics.
    pub fn invoked(&self, invoked: Invoked<'_>) {
        if let Some(metrics) = &self.inner.metrics {
            metrics.record(invoked);
        }
    }

    /// What became of spans so far.
    pub fn span_counts(&self) -> &Counts {
        &self.span_counts
    }

    /// What became of log records so far.
    pub fn log_counts(&self) -> &Counts {
        &self.log_counts
    }

    /// Exports what is queued (within the export timeout) and stops the
    /// export thread. Later records are dropped and counted.
    pub fn shutdown(&self) {
        let _ = self.shutdown.stop.send(true);
        let thread = self
            .shutdown
            .thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

impl Inner {
    /// Exports a function's own log record, in `context` (trace, span,
    /// flags), bounded as its output lines are.
    pub(crate) fn guest_log(
        &self,
        function: &str,
        log: luge_core::trace::GuestLog,
        context: (
            opentelemetry::trace::TraceId,
            opentelemetry::trace::SpanId,
            opentelemetry::trace::TraceFlags,
        ),
    ) {
        if let Some(logs) = &self.logs {
            logs.guest(function, log, context);
        }
    }
}

/// The OTLP exporters of the signals that are on.
struct Exporters {
    spans: Option<opentelemetry_otlp::SpanExporter>,
    logs: Option<opentelemetry_otlp::LogExporter>,
    metrics: Option<opentelemetry_otlp::MetricExporter>,
}

impl Exporters {
    /// Built inside the export thread's runtime (tonic's channel spawns
    /// its worker there).
    fn build(settings: &Settings, resource: &Resource) -> Result<Exporters, TelemetryError> {
        use opentelemetry_sdk::logs::LogExporter as _;
        use opentelemetry_sdk::trace::SpanExporter as _;
        let timeout = settings.export_timeout;
        // A `[telemetry] endpoint` is the base URL for HTTP, as the
        // OTEL_EXPORTER_OTLP_ENDPOINT variable is: each signal's path is
        // appended.
        let endpoint = |path: &str| {
            settings
                .endpoint
                .as_ref()
                .map(|base| match settings.protocol {
                    Protocol::Grpc => base.clone(),
                    Protocol::HttpProtobuf | Protocol::HttpJson => {
                        format!("{}/v1/{path}", base.trim_end_matches('/'))
                    }
                })
        };
        macro_rules! build {
            ($builder:expr, $path:literal) => {{
                let builder = $builder;
                match settings.protocol {
                    Protocol::Grpc => {
                        let mut b = builder.with_tonic().with_timeout(timeout);
                        if let Some(endpoint) = endpoint($path) {
                            b = b.with_endpoint(endpoint);
                        }
                        b.build()?
                    }
                    Protocol::HttpProtobuf | Protocol::HttpJson => {
                        let wire = match settings.protocol {
                            Protocol::HttpJson => opentelemetry_otlp::Protocol::HttpJson,
                            _ => opentelemetry_otlp::Protocol::HttpBinary,
                        };
                        let mut b = builder
                            .with_http()
                            .with_protocol(wire)
                            .with_timeout(timeout)
                            // Bounded by the queue's batches; no retries
                            // past the export's time limit.
                            .with_headers(Default::default());
                        if let Some(endpoint) = endpoint($path) {
                            b = b.with_endpoint(endpoint);
                        }
                        b.build()?
                    }
                }
            }};
        }
        let mut spans = None;
        if settings.traces {
            let mut e = build!(opentelemetry_otlp::SpanExporter::builder(), "traces");
            e.set_resource(resource);
            spans = Some(e);
        }
        let mut logs = None;
        if settings.logs {
            let mut e = build!(opentelemetry_otlp::LogExporter::builder(), "logs");
            e.set_resource(resource);
            logs = Some(e);
        }
        let metrics = if settings.metrics {
            Some(build!(
                opentelemetry_otlp::MetricExporter::builder(),
                "metrics"
            ))
        } else {
            None
        };
        Ok(Exporters {
            spans,
            logs,
            metrics,
        })
    }
}

/// The span export loop (see [`export::run`]).
async fn export_spans(
    exporter: Option<opentelemetry_otlp::SpanExporter>,
    rx: tokio::sync::mpsc::Receiver<SpanData>,
    counts: Arc<Counts>,
    settings: &Settings,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    use opentelemetry_sdk::trace::SpanExporter as _;
    let Some(exporter) = exporter else {
        return;
    };
    let exporter = &exporter;
    export::run("traces", rx, counts, settings, stop, |batch| {
        exporter.export(batch)
    })
    .await;
}
