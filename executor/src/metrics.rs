//! `GET /metrics`: Prometheus (OpenMetrics) text.
//!
//! Invocation outcomes and latencies are counted on the request path; what
//! other components already count (module loads, scheduler preemptions,
//! steals, worker busy time, per-function deadline misses) is read from them
//! at scrape time by a collector, so there is one source of truth for each.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use luge_core::Termination;
use luge_registry::ModuleRegistry;
use luge_sched::Scheduler;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};

/// How an invocation ended, as its `outcome` label; the index is its place
/// in a thread's [`FunctionHandles`].
const OUTCOMES: [&str; 10] = [
    "success",
    "exit_error",
    "trap",
    "timeout",
    "memory_limit",
    "fuel_limit",
    "output_limit",
    "failed",
    "overloaded",
    "client_gone",
];

/// [`OUTCOMES`]' `overloaded`.
const OVERLOADED: usize = 8;
/// [`OUTCOMES`]' `client_gone`.
const CLIENT_GONE: usize = 9;

/// What admission answered, as its `result` label (indexed likewise).
const ADMISSION_RESULTS: [&str; 4] = ["admitted", "full", "over_share", "tree"];

/// Names whose handles one thread keeps per [`Metrics`]; past this the
/// thread's cache starts again (a name only costs a lookup in the families
/// to come back).
const HANDLES_PER_THREAD: usize = 1024;

/// Executors ([`Metrics`]) whose handles one thread keeps: one in a
/// process that serves; a few where tests start several.
const EXECUTORS_PER_THREAD: usize = 8;

/// One thread's handles to one function's metrics: clones of what the
/// families hold, so that recording an invocation takes no family lock,
/// hashes no label set and allocates nothing.
#[derive(Default)]
struct FunctionHandles {
    outcomes: [Option<ShardedCounter>; OUTCOMES.len()],
    latency: Option<ShardedHistogram>,
    queue_delay: Option<ShardedHistogram>,
}

/// One thread's handles to one [`Metrics`]' per-name metrics.
#[derive(Default)]
struct ThreadHandles {
    functions: HashMap<Box<str>, FunctionHandles>,
    tenants: HashMap<Box<str>, [Option<ShardedCounter>; ADMISSION_RESULTS.len()]>,
}

thread_local! {
    /// Per [`Metrics`] (by its id), this thread's handles.
    static HANDLES: RefCell<HashMap<u64, ThreadHandles>> = RefCell::new(HashMap::new());
}
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;

mod sharded;
use sharded::{ShardedCounter, ShardedHistogram};

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

/// A trigger (its name in the config or manifest) and what became of one
/// of its events ([`TRIGGER_RESULTS`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TriggerLabels {
    trigger: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TriggerName {
    trigger: String,
}

/// What becomes of a trigger's event, as its `result` label: `received`
/// (every event the source offered), then one of `handled` (the function
/// succeeded), `failed` (it ran and failed), `refused` (admission had no
/// place, or it could not start), `dropped` (the trigger had no room: a
/// Redis message is lost, an MQTT message not acknowledged) or `skipped`
/// (a cron tick due while the last one ran); and `redelivered` (a broker
/// sent a message again).
pub const TRIGGER_RESULTS: [&str; 7] = [
    "received",
    "handled",
    "failed",
    "refused",
    "dropped",
    "skipped",
    "redelivered",
];

/// The executor's metrics.
#[derive(Debug)]
pub struct Metrics {
    /// Tells this instance's handles apart in a thread's cache (tests run
    /// several executors in one process).
    id: u64,
    registry: Registry,
    invocations: Family<OutcomeLabels, ShardedCounter>,
    latency: Family<FunctionLabels, ShardedHistogram>,
    queue_delay: Family<FunctionLabels, ShardedHistogram>,
    calls: Family<CallLabels, Counter>,
    admissions: Family<AdmissionLabels, ShardedCounter>,
    trigger_events: Family<TriggerLabels, Counter>,
    trigger_lag: Family<TriggerName, ShardedHistogram>,
    message_age: Family<TriggerName, ShardedHistogram>,
}

/// The families [`Metrics`] registers, which `/metrics` describes only
/// once they have a member: (name, type, help). The families read when
/// scraped (`Pulled`) describe themselves every time. The book's metrics
/// reference lists both.
pub const REGISTERED: &[(&str, &str, &str)] = &[
    (
        "invocations",
        "counter",
        "Invocations by function and how they ended",
    ),
    (
        "invocation_seconds",
        "histogram",
        "Time from a parsed run request to its outcome, queueing included",
    ),
    (
        "queue_delay_seconds",
        "histogram",
        "Time from submission to the scheduler until a worker first ran the sandbox",
    ),
    (
        "calls",
        "counter",
        "Calls between functions by caller, callee and result (a status, or why refused)",
    ),
    (
        "admissions",
        "counter",
        "Admission decisions by tenant: admitted, or refused (full, over_share, tree)",
    ),
    (
        "trigger_events",
        "counter",
        "Events of each trigger by what became of them (received, handled, failed, refused, dropped, skipped, redelivered)",
    ),
    (
        "trigger_lag_seconds",
        "histogram",
        "Time from an event's arrival (a tick's due time) until its function started: admission and the scheduler's queue",
    ),
    (
        "trigger_message_age_seconds",
        "histogram",
        "Time from a queued message's store at its broker (as the broker stamps it) until its function started: the queue's lag, what to scale on",
    ),
];

/// `metric` registered in `registry` as the family `name`, with its help
/// from [`REGISTERED`]; a handle to it.
/// A family of histograms, one per label set, each with the bounds
/// `buckets` makes.
fn histograms<L>(
    buckets: fn() -> ShardedHistogram,
) -> Family<L, ShardedHistogram, fn() -> ShardedHistogram>
where
    L: Clone + std::hash::Hash + Eq,
{
    Family::new_with_constructor(buckets)
}

fn registered<M: prometheus_client::registry::Metric + Clone>(
    registry: &mut Registry,
    name: &str,
    metric: M,
) -> M {
    let help = REGISTERED
        .iter()
        .find(|(n, ..)| *n == name)
        .map_or("", |(_, _, help)| help);
    debug_assert!(!help.is_empty(), "{name} is in REGISTERED");
    registry.register(name, help, metric.clone());
    metric
}

/// Buckets from 50 µs to about 1.6 s, doubling: sandboxes take tens of
/// microseconds, functions up to seconds.
fn latency_histogram() -> ShardedHistogram {
    ShardedHistogram::new(exponential_buckets(50e-6, 2.0, 16))
}

/// Buckets from 5 µs to about 0.3 s, doubling: an idle worker picks a job
/// up in microseconds, a loaded one after other jobs' quanta.
fn queue_histogram() -> ShardedHistogram {
    ShardedHistogram::new(exponential_buckets(5e-6, 2.0, 16))
}

/// Buckets from 100 µs to about 14 minutes, doubling: a queue's message
/// waits a few milliseconds on a reader keeping up, minutes behind a
/// backlog.
fn age_histogram() -> ShardedHistogram {
    ShardedHistogram::new(exponential_buckets(100e-6, 2.0, 24))
}

/// `name`'s handles in one of a thread's maps, made empty if missing (the
/// map started again when it holds [`HANDLES_PER_THREAD`]). The name is
/// copied only when it is new to the map. (Always `Some`: the lookup after
/// the insert keeps the common path free of a copy of the name.)
fn kept<'m, V: Default>(map: &'m mut HashMap<Box<str>, V>, name: &str) -> Option<&'m mut V> {
    if !map.contains_key(name) {
        if map.len() >= HANDLES_PER_THREAD {
            map.clear();
        }
        map.insert(name.into(), V::default());
    }
    map.get_mut(name)
}

/// The label set of `function`'s histograms.
fn labels(function: &str) -> FunctionLabels {
    FunctionLabels {
        function: function.to_owned(),
    }
}

impl Metrics {
    /// Metrics of the invocations observed, and of what `pulled` reads
    /// at scrape time.
    pub fn new(pulled: Pulled) -> Self {
        let mut registry = Registry::with_prefix("luge");
        let r = &mut registry;
        let invocations = registered(r, "invocations", Family::default());
        let latency = registered(r, "invocation_seconds", histograms(latency_histogram));
        let queue_delay = registered(r, "queue_delay_seconds", histograms(queue_histogram));
        let calls = registered(r, "calls", Family::default());
        let admissions = registered(r, "admissions", Family::default());
        let trigger_events = registered(r, "trigger_events", Family::default());
        let trigger_lag = registered(r, "trigger_lag_seconds", histograms(latency_histogram));
        let message_age = registered(r, "trigger_message_age_seconds", histograms(age_histogram));
        registry.register_collector(Box::new(pulled));
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            registry,
            invocations,
            latency,
            queue_delay,
            calls,
            admissions,
            trigger_events,
            trigger_lag,
            message_age,
        }
    }

    /// Counts an event of `trigger` as `result` (one of
    /// [`TRIGGER_RESULTS`]). Events are not the hot path of HTTP routes:
    /// the family's lock is taken per event.
    pub fn observe_event(&self, trigger: &str, result: &'static str) {
        debug_assert!(TRIGGER_RESULTS.contains(&result));
        self.trigger_events
            .get_or_create(&TriggerLabels {
                trigger: trigger.to_owned(),
                result,
            })
            .inc();
    }

    /// Records how long an event of `trigger` waited before its function
    /// started.
    pub fn observe_lag(&self, trigger: &str, lag: Duration) {
        self.trigger_lag
            .get_or_create(&TriggerName {
                trigger: trigger.to_owned(),
            })
            .observe(lag.as_secs_f64());
    }

    /// Records how old a queued message of `trigger` was when its
    /// function started.
    pub fn observe_message_age(&self, trigger: &str, age: Duration) {
        self.message_age
            .get_or_create(&TriggerName {
                trigger: trigger.to_owned(),
            })
            .observe(age.as_secs_f64());
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
            Termination::Exited(0) => 0,
            Termination::Exited(_) => 1,
            Termination::Trapped(_) => 2,
            Termination::TimedOut(_) => 3,
            Termination::OutOfMemory { .. } => 4,
            Termination::OutOfFuel => 5,
            Termination::OutputTooLarge { .. } => 6,
            Termination::Failed(_) => 7,
        };
        self.with_function(function, |handles| {
            self.outcome(function, handles, outcome).inc();
            handles
                .latency
                .get_or_insert_with(|| self.latency.get_or_create(&labels(function)).clone())
                .observe(latency.as_secs_f64());
            handles
                .queue_delay
                .get_or_insert_with(|| self.queue_delay.get_or_create(&labels(function)).clone())
                .observe(queue_delay.as_secs_f64());
        });
    }

    /// Runs `f` on this thread's handles to this executor's metrics. A
    /// thread keeps them for at most [`EXECUTORS_PER_THREAD`] executors
    /// (tests run many in one process), then starts again.
    fn with_handles<R>(&self, f: impl FnOnce(&mut ThreadHandles) -> R) -> R {
        HANDLES.with(|handles| {
            let mut handles = handles.borrow_mut();
            if handles.len() >= EXECUTORS_PER_THREAD && !handles.contains_key(&self.id) {
                handles.clear();
            }
            f(handles.entry(self.id).or_default())
        })
    }

    /// Runs `f` on this thread's handles to `function`'s metrics.
    fn with_function<R>(&self, function: &str, f: impl FnOnce(&mut FunctionHandles) -> R) -> R {
        self.with_handles(|mine| {
            match kept(&mut mine.functions, function) {
                Some(handles) => f(handles),
                // Not reached; handles of one use still record through
                // the families.
                None => f(&mut FunctionHandles::default()),
            }
        })
    }

    /// `function`'s counter of `OUTCOMES[outcome]`, from `handles` or the
    /// family (then kept in `handles`).
    fn outcome<'h>(
        &self,
        function: &str,
        handles: &'h mut FunctionHandles,
        outcome: usize,
    ) -> &'h ShardedCounter {
        handles.outcomes[outcome].get_or_insert_with(|| {
            self.invocations
                .get_or_create(&OutcomeLabels {
                    function: function.to_owned(),
                    outcome: OUTCOMES[outcome],
                })
                .clone()
        })
    }

    /// Records an invocation of `function` refused because too many were
    /// pending (outcome `overloaded`).
    pub fn observe_overload(&self, function: &str) {
        self.count(function, OVERLOADED);
    }

    /// Counts an admission decision for `tenant`: `None` admitted, else
    /// why it was refused.
    pub fn observe_admission(&self, tenant: &str, refused: Option<crate::admission::Refused>) {
        use crate::admission::Refused;
        let result = match refused {
            None => 0,
            Some(Refused::Full) => 1,
            Some(Refused::OverShare) => 2,
            Some(Refused::Tree) => 3,
        };
        self.with_handles(|mine| {
            let Some(counters) = kept(&mut mine.tenants, tenant) else {
                return;
            };
            counters[result]
                .get_or_insert_with(|| {
                    self.admissions
                        .get_or_create(&AdmissionLabels {
                            tenant: tenant.to_owned(),
                            result: ADMISSION_RESULTS[result],
                        })
                        .clone()
                })
                .inc();
        });
    }

    /// Counts an invocation whose client went away before it ended (it is
    /// cancelled, and its sandbox keeps its admission place until it has
    /// really stopped).
    pub fn observe_client_gone(&self, function: &str) {
        self.count(function, CLIENT_GONE);
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

    /// Counts an invocation of `function` that ended as `OUTCOMES[outcome]`.
    fn count(&self, function: &str, outcome: usize) {
        self.with_function(function, |handles| {
            self.outcome(function, handles, outcome).inc();
        });
    }

    /// The exposition text.
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

/// What the metrics read at scrape time: other components' counts.
#[derive(Debug)]
pub struct Pulled {
    /// The modules loaded, compiled and cached.
    pub modules: Arc<ModuleRegistry>,
    /// The admission places: the invocations in flight.
    pub admission: crate::admission::Admission,
    /// The scheduler's counters.
    pub scheduler: Arc<Scheduler>,
    /// The workers' front ends, if they serve connections.
    pub front_ends: Option<Arc<crate::frontend::WorkerRuntimes>>,
    /// The shared state's store (`luge serve`).
    pub state: Option<Arc<luge_state::StateStore>>,
    /// The telemetry pipeline, if it exports.
    pub telemetry: Option<luge_telemetry::Telemetry>,
}

/// What encoding a family at scrape time gives.
type Encoded = Result<(), std::fmt::Error>;

/// Describes the family `name` (`help`) and encodes `metric`, its one
/// member, read at scrape time.
fn constant(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: impl EncodeMetric,
) -> Encoded {
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

fn counter(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> Encoded {
    constant(encoder, name, help, ConstCounter::new(value))
}

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: i64) -> Encoded {
    constant(encoder, name, help, ConstGauge::new(value))
}

impl Collector for Pulled {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.encode_modules(&mut encoder)?;
        self.encode_scheduler(&mut encoder)?;
        self.encode_families(&mut encoder)
    }
}

impl Pulled {
    /// The module cache's and the state's counts.
    fn encode_modules(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let modules = self.modules.stats();
        counter(
            encoder,
            "cold_starts",
            "Modules loaded (from an artifact, the disk cache or a compile).",
            modules.loads,
        )?;
        counter(
            encoder,
            "compiles",
            "Wasm modules compiled.",
            modules.compiles,
        )?;
        counter(
            encoder,
            "module_cache_hits",
            "Loads served by the on-disk cache.",
            modules.disk_hits,
        )?;
        gauge(
            encoder,
            "modules_loaded",
            "Modules loaded and in use.",
            self.modules.live_modules() as i64,
        )?;
        gauge(
            encoder,
            "module_code_bytes",
            "Engine code of the loaded modules, in bytes.",
            self.modules.live_code_bytes() as i64,
        )?;

        if let Some(state) = &self.state {
            counter(
                encoder,
                "state_global_failures",
                "Global-tier (Redis) state operations that failed: server down or slow.",
                state.global_failures(),
            )?;
        }

        Ok(())
    }

    /// The scheduler's and the front ends' counts.
    fn encode_scheduler(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // The load to scale on (KEDA's Prometheus scaler, an HPA on
        // external metrics): what this process holds against what it can.
        gauge(
            encoder,
            "invocations_in_flight",
            "Invocations admitted and not yet ended (admission places held), calls and trigger events included.",
            i64::try_from(self.admission.pending()).unwrap_or(i64::MAX),
        )?;
        gauge(
            encoder,
            "admission_places",
            "Invocations this process admits at once (--max-pending); past them requests are refused with 503.",
            i64::try_from(self.admission.limit()).unwrap_or(i64::MAX),
        )?;
        let sched = self.scheduler.stats();
        counter(
            encoder,
            "preemptions",
            "Sandboxes that yielded at the end of a quantum.",
            sched.preemptions,
        )?;
        counter(
            encoder,
            "early_preemptions",
            "Running sandboxes asked to yield before their quantum ended by a more urgent arrival.",
            sched.early_preemptions,
        )?;
        counter(
            encoder,
            "yields_for_arrivals",
            "Running sandboxes that yielded before their quantum ended so that their worker could read requests that arrived on its connections.",
            self.front_ends
                .as_ref()
                .map_or(0, |front_ends| front_ends.yields_for_arrivals()),
        )?;
        counter(
            encoder,
            "connections_unclaimed",
            "Connections the workers accepted none of for the grace while they waited, served by the threads beside the workers (--front-end workers): each of their requests is handed to a worker and back.",
            self.front_ends.as_ref().map_or(0, |front_ends| {
                front_ends
                    .connections()
                    .unclaimed
                    .load(std::sync::atomic::Ordering::Relaxed)
            }),
        )?;
        counter(
            encoder,
            "deadline_renewals",
            "Sandboxes that ran a whole relative deadline without ending and were re-queued as new arrivals.",
            sched.renewals,
        )?;
        counter(
            encoder,
            "steals",
            "Jobs a worker took from another worker's queue.",
            sched.steals,
        )?;
        counter(
            encoder,
            "over_share_jobs",
            "Times a sandbox was queued behind other tenants' because its tenant had used more than its share of the workers lately.",
            sched.over_share,
        )?;
        counter(
            encoder,
            "local_submits",
            "Invocations submitted by the worker that received the request, into its own queue (--front-end workers): run where they arrived unless stolen.",
            sched.local_submits,
        )?;
        let (made_ahead, taken) = luge_core::teardown::made_ahead();
        counter(
            encoder,
            "sandboxes_made_ahead",
            "HTTP handler sandboxes instantiated by an idle worker ahead of their requests.",
            made_ahead,
        )?;
        counter(
            encoder,
            "sandboxes_made_ahead_used",
            "Sandboxes made ahead that a request took (the rest were replaced or dropped unused).",
            taken,
        )?;
        Ok(())
    }

    /// The labelled families: busy time per worker, deadline misses per
    /// function, telemetry records by signal and result.
    fn encode_families(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let busy_ns = self.scheduler.stats().busy_ns;
        let busy = busy_ns.iter().enumerate();
        counters(
            encoder,
            (
                "worker_busy_seconds",
                "Time each worker spent running sandboxes.",
            ),
            busy.map(|(worker, ns)| ([("worker", worker.to_string())], *ns as f64 / 1e9)),
        )?;
        let functions = self.scheduler.execution_stats().all();
        counters(
            encoder,
            (
                "deadline_misses",
                "Invocations that completed after their deadline.",
            ),
            functions.iter().map(|(function, stats)| {
                ([("function", function.as_str())], stats.deadline_misses)
            }),
        )?;
        let Some(telemetry) = &self.telemetry else {
            return Ok(());
        };
        let mut records = Vec::new();
        for (signal, counts) in [
            ("traces", telemetry.span_counts()),
            ("logs", telemetry.log_counts()),
        ] {
            let (exported, dropped, failed) = counts.snapshot();
            for (result, n) in [
                ("exported", exported),
                ("dropped", dropped),
                ("failed", failed),
            ] {
                records.push(([("signal", signal), ("result", result)], n));
            }
        }
        counters(
            encoder,
            (
                "telemetry_records",
                "OpenTelemetry spans and log records by what became of them: exported, dropped (the export queue was full) or failed (the collector refused or was too slow).",
            ),
            records,
        )
    }
}

/// Describes the counter family `name` (`help`) and encodes each of
/// `members` (its labels and its value), read at scrape time.
fn counters<L, N>(
    encoder: &mut DescriptorEncoder,
    (name, help): (&str, &str),
    members: impl IntoIterator<Item = (L, N)>,
) -> Encoded
where
    L: EncodeLabelSet,
    ConstCounter<N>: EncodeMetric,
{
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in members {
        ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{HANDLES_PER_THREAD, kept};
    use std::collections::HashMap;

    /// A thread's handles stay bounded however many names it meets.
    #[test]
    fn a_threads_handles_are_bounded() {
        let mut map: HashMap<Box<str>, u32> = HashMap::new();
        for i in 0..HANDLES_PER_THREAD * 3 + 5 {
            *kept(&mut map, &format!("f{i}")).unwrap() += 1;
            assert!(map.len() <= HANDLES_PER_THREAD, "{}", map.len());
        }
        // A name seen again keeps its entry.
        let name = format!("f{}", HANDLES_PER_THREAD * 3 + 4);
        *kept(&mut map, &name).unwrap() += 1;
        assert_eq!(map[name.as_str()], 2);
    }
}
