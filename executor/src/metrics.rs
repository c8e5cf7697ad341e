//! `GET /metrics`: Prometheus (OpenMetrics) text.
//!
//! Invocation outcomes and latencies are counted on the request path; what
//! other components already count (module loads, scheduler preemptions,
//! steals, worker busy time, per-function deadline misses) is read from them
//! at scrape time by a collector, so there is one source of truth for each.

use std::sync::Arc;
use std::time::Duration;

use luge_core::Termination;
use luge_registry::ModuleRegistry;
use luge_sched::Scheduler;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Content type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    function: String,
    outcome: &'static str,
}

/// One edge of a call graph and how the call ended. `callee` is always a
/// name the caller was granted (or `-`), never a name a guest made up, so a
/// tenant cannot grow the label set without bound.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    caller: String,
    callee: String,
    /// `scheduled`, `fused`, or `refused`.
    how: &'static str,
    result: &'static str,
}

/// A tenant (a function route's name, an OpenWhisk namespace) and what
/// admission answered it: `admitted`, or why not (`full`, `over_share`,
/// `tree`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdmissionLabels {
    tenant: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FunctionLabels {
    function: String,
}

/// The executor's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    invocations: Family<OutcomeLabels, Counter>,
    latency: Family<FunctionLabels, Histogram>,
    queue_delay: Family<FunctionLabels, Histogram>,
    calls: Family<CallLabels, Counter>,
    admissions: Family<AdmissionLabels, Counter>,
}

/// Buckets from 50 µs to about 1.6 s, doubling: sandboxes take tens of
/// microseconds, functions up to seconds.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(50e-6, 2.0, 16))
}

/// Buckets from 5 µs to about 0.3 s, doubling: an idle worker picks a job
/// up in microseconds, a loaded one after other jobs' quanta.
fn queue_histogram() -> Histogram {
    Histogram::new(exponential_buckets(5e-6, 2.0, 16))
}

impl Metrics {
    /// Metrics over `registry` and `scheduler`.
    pub fn new(
        modules: Arc<ModuleRegistry>,
        scheduler: Arc<Scheduler>,
        state: Option<Arc<luge_state::StateStore>>,
    ) -> Self {
        let mut registry = Registry::with_prefix("luge");
        let invocations = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "invocations",
            "Invocations by function and how they ended",
            invocations.clone(),
        );
        let latency = Family::<FunctionLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register(
            "invocation_seconds",
            "Time from a parsed run request to its outcome, queueing included",
            latency.clone(),
        );
        let queue_delay = Family::<FunctionLabels, Histogram>::new_with_constructor(
            queue_histogram as fn() -> Histogram,
        );
        registry.register(
            "queue_delay_seconds",
            "Time from submission to the scheduler until a worker first ran the sandbox",
            queue_delay.clone(),
        );
        let calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "calls",
            "Calls between functions by caller, callee and result (a status, or why refused)",
            calls.clone(),
        );
        let admissions = Family::<AdmissionLabels, Counter>::default();
        registry.register(
            "admissions",
            "Admission decisions by tenant: admitted, or refused (full, over_share, tree)",
            admissions.clone(),
        );
        registry.register_collector(Box::new(Pulled {
            modules,
            scheduler,
            state,
        }));
        Self {
            registry,
            invocations,
            latency,
            queue_delay,
            calls,
            admissions,
        }
    }

    /// Records one invocation of `function` that waited `queue_delay` for a
    /// worker and took `latency` in all.
    pub fn observe(
        &self,
        function: &str,
        termination: &Termination,
        latency: Duration,
        queue_delay: Duration,
    ) {
        let outcome = match termination {
            Termination::Exited(0) => "success",
            Termination::Exited(_) => "exit_error",
            Termination::Trapped(_) => "trap",
            Termination::TimedOut(_) => "timeout",
            Termination::OutOfMemory { .. } => "memory_limit",
            Termination::OutOfFuel => "fuel_limit",
            Termination::OutputTooLarge { .. } => "output_limit",
            Termination::Failed(_) => "failed",
        };
        let function = function.to_owned();
        self.invocations
            .get_or_create(&OutcomeLabels {
                function: function.clone(),
                outcome,
            })
            .inc();
        let labels = FunctionLabels { function };
        self.latency
            .get_or_create(&labels)
            .observe(latency.as_secs_f64());
        self.queue_delay
            .get_or_create(&labels)
            .observe(queue_delay.as_secs_f64());
    }

    /// Records an invocation of `function` refused because too many were
    /// pending (outcome `overloaded`).
    pub fn observe_overload(&self, function: &str) {
        self.count(function, "overloaded");
    }

    /// Counts an admission decision for `tenant`: `None` admitted, else
    /// why it was refused.
    pub fn observe_admission(&self, tenant: &str, refused: Option<crate::admission::Refused>) {
        use crate::admission::Refused;
        let result = match refused {
            None => "admitted",
            Some(Refused::Full) => "full",
            Some(Refused::OverShare) => "over_share",
            Some(Refused::Tree) => "tree",
        };
        self.admissions
            .get_or_create(&AdmissionLabels {
                tenant: tenant.to_owned(),
                result,
            })
            .inc();
    }

    /// Counts an invocation whose client went away before it ended (it is
    /// cancelled, and its sandbox keeps its admission place until it has
    /// really stopped).
    pub fn observe_client_gone(&self, function: &str) {
        self.count(function, "client_gone");
    }

    /// Counts a call from `caller` to `callee`, run `how`, that ended as
    /// `result` (`callee`: a granted name, or `-` for a refused unknown one).
    pub fn observe_call(
        &self,
        caller: &str,
        callee: &str,
        how: &'static str,
        result: &'static str,
    ) {
        self.calls
            .get_or_create(&CallLabels {
                caller: caller.to_owned(),
                callee: callee.to_owned(),
                how,
                result,
            })
            .inc();
    }

    fn count(&self, function: &str, outcome: &'static str) {
        self.invocations
            .get_or_create(&OutcomeLabels {
                function: function.to_owned(),
                outcome,
            })
            .inc();
    }

    /// The exposition text.
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

/// Reads other components' counters at scrape time.
#[derive(Debug)]
struct Pulled {
    modules: Arc<ModuleRegistry>,
    scheduler: Arc<Scheduler>,
    state: Option<Arc<luge_state::StateStore>>,
}

fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let metric = ConstCounter::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: i64,
) -> Result<(), std::fmt::Error> {
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

impl Collector for Pulled {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let modules = self.modules.stats();
        counter(
            &mut encoder,
            "cold_starts",
            "Modules loaded (from an artifact, the disk cache or a compile).",
            modules.loads,
        )?;
        counter(
            &mut encoder,
            "compiles",
            "Wasm modules compiled.",
            modules.compiles,
        )?;
        counter(
            &mut encoder,
            "module_cache_hits",
            "Loads served by the on-disk cache.",
            modules.disk_hits,
        )?;
        gauge(
            &mut encoder,
            "modules_loaded",
            "Modules loaded and in use.",
            self.modules.live_modules() as i64,
        )?;
        gauge(
            &mut encoder,
            "module_code_bytes",
            "Engine code of the loaded modules, in bytes.",
            self.modules.live_code_bytes() as i64,
        )?;

        if let Some(state) = &self.state {
            counter(
                &mut encoder,
                "state_global_failures",
                "Global-tier (Redis) state operations that failed: server down or slow.",
                state.global_failures(),
            )?;
        }

        let sched = self.scheduler.stats();
        counter(
            &mut encoder,
            "preemptions",
            "Sandboxes that yielded at the end of a quantum.",
            sched.preemptions,
        )?;
        counter(
            &mut encoder,
            "early_preemptions",
            "Running sandboxes asked to yield before their quantum ended by a more urgent arrival.",
            sched.early_preemptions,
        )?;
        counter(
            &mut encoder,
            "deadline_renewals",
            "Sandboxes that ran a whole relative deadline without ending and were re-queued as new arrivals.",
            sched.renewals,
        )?;
        counter(
            &mut encoder,
            "steals",
            "Jobs a worker took from another worker's queue.",
            sched.steals,
        )?;
        counter(
            &mut encoder,
            "local_submits",
            "Invocations submitted by the worker that received the request, into its own queue (--front-end workers): run where they arrived unless stolen.",
            sched.local_submits,
        )?;
        let busy = ConstCounter::new(0.0f64);
        let mut family = encoder.encode_descriptor(
            "worker_busy_seconds",
            "Time each worker spent running sandboxes.",
            None,
            busy.metric_type(),
        )?;
        for (worker, ns) in sched.busy_ns.iter().enumerate() {
            let labels = [("worker", worker.to_string())];
            ConstCounter::new(*ns as f64 / 1e9).encode(family.encode_family(&labels)?)?;
        }

        let functions = self.scheduler.execution_stats().all();
        let misses = ConstCounter::new(0u64);
        let mut family = encoder.encode_descriptor(
            "deadline_misses",
            "Invocations that completed after their deadline.",
            None,
            misses.metric_type(),
        )?;
        for (function, stats) in &functions {
            let labels = [("function", function.as_str())];
            ConstCounter::new(stats.deadline_misses).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}
