//! What the durable queues' tests share: a sink that records what it
//! ran, and waiting for a condition.

#![allow(dead_code)] // each test file uses its part

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use luge_core::event::{Event, EventKind};
use luge_trigger::{Handled, Handling, Kind, Settings, Sink};

/// A queue trigger's settings of kind `kind`: `address`, `stream` and the
/// `extra` lines of luge.toml.
pub fn settings<T: Settings + Clone>(
    kind: &dyn Kind,
    address: &str,
    stream: &str,
    extra: &str,
) -> T {
    let text = format!("address = \"{address}\"\nstream = \"{stream}\"\n{extra}");
    let source = kind.configured(toml::from_str(&text).unwrap()).unwrap();
    source.settings::<T>().unwrap().clone()
}

/// That `consumers` together succeeded with each of `total` messages
/// exactly once, each with some, and that `redelivered` of them came a
/// second time (a stopped consumer's, taken over).
pub fn shared_exactly_once(consumers: [&Record; 2], total: usize, redelivered: Option<usize>) {
    let all: Vec<String> = consumers.iter().flat_map(|c| c.succeeded()).collect();
    let unique: std::collections::BTreeSet<&String> = all.iter().collect();
    assert_eq!(
        (all.len(), unique.len()),
        (total, total),
        "each exactly once"
    );
    assert!(consumers.iter().all(|c| !c.succeeded().is_empty()));
    let again: usize = consumers
        .iter()
        .map(|c| c.redelivered.load(Ordering::SeqCst))
        .sum();
    if let Some(redelivered) = redelivered {
        assert_eq!(
            again, redelivered,
            "the stopped consumer's, delivered again"
        );
    }
}

/// Waits until `record` succeeded with `n` messages within `within`, then
/// until the queue has none `acknowledged` says are pending.
pub async fn handled_then_acknowledged(
    record: &Record,
    n: usize,
    within: Duration,
    acknowledged: impl AsyncFnMut() -> bool,
) {
    until("handled", within, async || record.succeeded().len() >= n).await;
    until("acknowledged", Duration::from_secs(10), acknowledged).await;
}

/// The opening of a take-over: consumer `a`, started by `start` (which
/// spawns a consumer of the queue by its name), takes the ten messages
/// `early` publishes within `took` and stops before finishing any; then
/// two live consumers, `b` and `c`, are started: they and their tasks.
pub async fn a_stopped_then_two_live(
    start: impl Fn(&Arc<Record>, &str) -> JoinHandle<()>,
    early: impl AsyncFnOnce(Vec<String>),
    took: Duration,
) -> ([Arc<Record>; 2], [JoinHandle<()>; 2]) {
    let stuck = Record::hanging();
    let a = start(&stuck, "a");
    early(numbered("early", 10)).await;
    until("a took them", took, async || stuck.called() == 10).await;
    a.abort();
    let live = [
        Record::new(|_, _| Handled::Succeeded),
        Record::new(|_, _| Handled::Succeeded),
    ];
    let tasks = [start(&live[0], "b"), start(&live[1], "c")];
    (live, tasks)
}

/// The end of a take-over: `consumers`, running as `tasks`, handle all
/// of `total` messages within `within`, the queue then has none
/// `acknowledged` says are pending, each message succeeded exactly once
/// and `redelivered` of them were a stopped consumer's (where the broker
/// counts deliveries); the tasks are then stopped.
pub async fn taken_over(
    consumers: &[Arc<Record>; 2],
    tasks: [JoinHandle<()>; 2],
    (total, redelivered, within): (usize, Option<usize>, Duration),
    acknowledged: impl AsyncFnMut() -> bool,
) {
    until("all handled", within, async || {
        consumers.iter().map(|c| c.succeeded().len()).sum::<usize>() >= total
    })
    .await;
    until("all acknowledged", Duration::from_secs(10), acknowledged).await;
    shared_exactly_once([&consumers[0], &consumers[1]], total, redelivered);
    for task in tasks {
        task.abort();
    }
}

/// Runs each message by `run` (its payload and how many times it was
/// handed over so far): what succeeded, by consumer, and the counts.
pub struct Record {
    pub run: fn(&str, usize) -> Handled,
    pub succeeded: Mutex<Vec<String>>,
    pub calls: Mutex<BTreeMap<String, usize>>,
    pub redelivered: AtomicUsize,
    pub lost: AtomicUsize,
    /// Each event's kind, in the order they came.
    pub kinds: Mutex<Vec<EventKind>>,
    /// Handlings that never end (a consumer that stopped mid-message).
    pub hang: bool,
}

impl Record {
    pub fn new(run: fn(&str, usize) -> Handled) -> Arc<Self> {
        Arc::new(Self {
            run,
            succeeded: Mutex::new(Vec::new()),
            calls: Mutex::new(BTreeMap::new()),
            redelivered: AtomicUsize::new(0),
            lost: AtomicUsize::new(0),
            kinds: Mutex::new(Vec::new()),
            hang: false,
        })
    }

    /// Every third numbered message (`m0`, `n3`, ...) fails its first run
    /// and succeeds the next; the rest succeed.
    pub fn every_third_fails_once() -> Arc<Self> {
        Self::new(|payload, calls| {
            let n: usize = payload[1..].parse().unwrap();
            if n.is_multiple_of(3) && calls == 1 {
                Handled::Failed
            } else {
                Handled::Succeeded
            }
        })
    }

    /// The message `poison` fails every run; the rest succeed.
    pub fn poisoned() -> Arc<Self> {
        Self::new(|payload, _| {
            if payload == "poison" {
                Handled::Failed
            } else {
                Handled::Succeeded
            }
        })
    }

    /// That [`Record::every_third_fails_once`] saw `m0`..`m99` and
    /// `n0`..`n99`: each succeeded once, the 68 that failed ran twice,
    /// delivered again.
    pub fn retried_every_third(&self) {
        let succeeded = self.succeeded();
        let unique: std::collections::BTreeSet<_> = succeeded.iter().collect();
        assert_eq!((succeeded.len(), unique.len()), (200, 200));
        assert_eq!(self.called(), 200 + 34 + 34);
        assert_eq!(self.redelivered.load(Ordering::SeqCst), 68);
    }

    pub fn hanging() -> Arc<Self> {
        Arc::new(Self {
            hang: true,
            ..Arc::into_inner(Self::new(|_, _| Handled::Succeeded)).unwrap()
        })
    }

    pub fn succeeded(&self) -> Vec<String> {
        self.succeeded.lock().unwrap().clone()
    }

    pub fn called(&self) -> usize {
        self.calls.lock().unwrap().values().sum()
    }
}

impl Sink for Record {
    fn offer(&self, event: Event) -> Result<Handling, Event> {
        Ok(self.queue(event))
    }

    fn queue(&self, event: Event) -> Handling {
        self.kinds.lock().unwrap().push(event.kind.clone());
        let payload = String::from_utf8(event.payload).unwrap();
        let calls = {
            let mut calls = self.calls.lock().unwrap();
            let n = calls.entry(payload.clone()).or_default();
            *n += 1;
            *n
        };
        if self.hang {
            return Box::pin(std::future::pending());
        }
        let outcome = (self.run)(&payload, calls);
        if outcome == Handled::Succeeded {
            self.succeeded.lock().unwrap().push(payload);
        }
        Box::pin(async move { outcome })
    }

    fn lost(&self, _event: &Event) {
        self.lost.fetch_add(1, Ordering::SeqCst);
    }

    fn redelivered(&self) {
        self.redelivered.fetch_add(1, Ordering::SeqCst);
    }
}

pub async fn until(what: &str, within: Duration, mut done: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn numbered(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}
