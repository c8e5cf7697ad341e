//! FaaS metrics after OpenTelemetry's semantic conventions
//! (`faas.invocations`, `faas.errors`, `faas.timeouts`, `faas.coldstarts`,
//! `faas.invoke_duration`), exported every `OTEL_METRIC_EXPORT_INTERVAL`
//! from the export thread. Prometheus's /metrics stays the full set; these
//! are what an OTLP-only backend needs to chart functions.

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, MeterProvider as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::metrics::periodic_reader_with_async_runtime::PeriodicReader;

use crate::Settings;

/// One invocation's end, as the metrics count it.
#[derive(Debug, Clone, Copy)]
pub struct Invoked<'a> {
    /// The function (`faas.invoked_name`).
    pub function: &'a str,
    /// `faas.trigger`: `http`, `pubsub`, `timer`, `other`.
    pub trigger: &'static str,
    /// Its time from arrival to end.
    pub duration: std::time::Duration,
    /// Whether it failed.
    pub failed: bool,
    /// Whether it ran past its time limit.
    pub timed_out: bool,
    /// Whether its module was compiled for it (a cold start).
    pub cold: bool,
}

pub(crate) struct Instruments {
    invocations: Counter<u64>,
    errors: Counter<u64>,
    timeouts: Counter<u64>,
    coldstarts: Counter<u64>,
    duration: Histogram<f64>,
    _provider: SdkMeterProvider,
}

/// The meter provider, its reader spawned on the export thread's runtime.
pub(crate) fn provider(
    exporter: opentelemetry_otlp::MetricExporter,
    settings: &Settings,
    resource: &Resource,
) -> SdkMeterProvider {
    let reader = PeriodicReader::builder(exporter, opentelemetry_sdk::runtime::Tokio)
        .with_interval(settings.metric_interval)
        .build();
    SdkMeterProvider::builder()
        .with_resource(resource.clone())
        .with_reader(reader)
        .build()
}

impl Instruments {
    pub(crate) fn new(provider: &SdkMeterProvider) -> Instruments {
        let meter = provider.meter("luge");
        Instruments {
            invocations: meter
                .u64_counter("faas.invocations")
                .with_unit("{invocation}")
                .build(),
            errors: meter
                .u64_counter("faas.errors")
                .with_unit("{error}")
                .build(),
            timeouts: meter
                .u64_counter("faas.timeouts")
                .with_unit("{timeout}")
                .build(),
            coldstarts: meter
                .u64_counter("faas.coldstarts")
                .with_unit("{coldstart}")
                .build(),
            duration: meter
                .f64_histogram("faas.invoke_duration")
                .with_unit("s")
                .build(),
            _provider: provider.clone(),
        }
    }

    pub(crate) fn record(&self, invoked: Invoked<'_>) {
        let attributes = [
            KeyValue::new("faas.invoked_name", invoked.function.to_owned()),
            KeyValue::new("faas.trigger", invoked.trigger),
        ];
        self.invocations.add(1, &attributes);
        self.duration
            .record(invoked.duration.as_secs_f64(), &attributes);
        if invoked.failed {
            self.errors.add(1, &attributes);
        }
        if invoked.timed_out {
            self.timeouts.add(1, &attributes);
        }
        if invoked.cold {
            self.coldstarts.add(1, &attributes);
        }
    }
}
