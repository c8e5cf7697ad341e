//! The bounded road from a request to the collector: a request offers a
//! record to a fixed-size queue and goes on (a full queue drops it and
//! counts the drop); one task on the telemetry runtime takes batches off
//! it and exports each within a time limit. A collector that is down,
//! slow or refusing therefore costs requests one failed `try_send` at
//! most, and what it costs Luge (memory, time) is bounded by the queue
//! and the limit.
//!
//! Written here rather than using the SDK's batch processors because those
//! drop silently: an operator must see drops in /metrics.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;

/// What became of a signal's records.
#[derive(Debug, Default)]
pub struct Counts {
    /// Exported and acknowledged by the collector.
    pub exported: AtomicU64,
    /// Dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Lost in an export that failed or ran past its limit.
    pub failed: AtomicU64,
}

impl Counts {
    /// (exported, dropped, failed) now.
    pub fn snapshot(&self) -> (u64, u64, u64) {
        (
            self.exported.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

/// The request side of a queue.
pub(crate) struct Queue<T> {
    tx: mpsc::Sender<T>,
    pub(crate) counts: Arc<Counts>,
}

impl<T> Queue<T> {
    /// Offers `record`; never waits.
    pub(crate) fn offer(&self, record: T) {
        if self.tx.try_send(record).is_err() {
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A queue of `capacity` and its receiving side.
pub(crate) fn queue<T>(capacity: usize) -> (Queue<T>, mpsc::Receiver<T>, Arc<Counts>) {
    let (tx, rx) = mpsc::channel(capacity);
    let counts = Arc::new(Counts::default());
    (
        Queue {
            tx,
            counts: Arc::clone(&counts),
        },
        rx,
        counts,
    )
}

/// The next batch: waits for a first record, then takes what arrives
/// within `delay` up to `max`. `None` when every sender is gone and the
/// queue is empty.
pub(crate) async fn next_batch<T>(
    rx: &mut mpsc::Receiver<T>,
    max: usize,
    delay: Duration,
) -> Option<Vec<T>> {
    let first = rx.recv().await?;
    let mut batch = Vec::with_capacity(max.min(64));
    batch.push(first);
    let until = tokio::time::Instant::now() + delay;
    while batch.len() < max {
        match tokio::time::timeout_at(until, rx.recv()).await {
            Ok(Some(record)) => batch.push(record),
            Ok(None) | Err(_) => break,
        }
    }
    Some(batch)
}

/// A signal's export loop: batches off `rx` (at most `max_batch`, after
/// waiting `schedule_delay` for a fuller one), each handed to `export`
/// within `export_timeout` and counted, until `stop` turns true; then what
/// is queued goes once more.
pub(crate) async fn run<T, E, F, Fut>(
    signal: &'static str,
    mut rx: mpsc::Receiver<T>,
    counts: Arc<Counts>,
    settings: &crate::Settings,
    mut stop: tokio::sync::watch::Receiver<bool>,
    mut export: F,
) where
    E: std::fmt::Display,
    F: FnMut(Vec<T>) -> Fut,
    Fut: std::future::Future<Output = Result<(), E>>,
{
    loop {
        let batch = tokio::select! {
            batch = next_batch(&mut rx, settings.max_batch, settings.schedule_delay) => batch,
            _ = stop.wait_for(|stop| *stop) => {
                let mut rest = Vec::new();
                while let Ok(record) = rx.try_recv() {
                    rest.push(record);
                }
                Some(rest).filter(|r| !r.is_empty())
            }
        };
        let Some(batch) = batch else { return };
        let n = batch.len();
        let result = tokio::time::timeout(settings.export_timeout, export(batch)).await;
        count(&counts, signal, n, result);
        if *stop.borrow() && rx.is_empty() {
            return;
        }
    }
}

/// Counts one export of `n` records that ended in `result` (`Err(())`:
/// past its time limit).
pub(crate) fn count<E: std::fmt::Display>(
    counts: &Counts,
    signal: &'static str,
    n: usize,
    result: Result<Result<(), E>, tokio::time::error::Elapsed>,
) {
    let n = n as u64;
    match result {
        Ok(Ok(())) => {
            counts.exported.fetch_add(n, Ordering::Relaxed);
        }
        Ok(Err(error)) => {
            counts.failed.fetch_add(n, Ordering::Relaxed);
            tracing::debug!(signal, %error, records = n, "OTLP export failed");
        }
        Err(_) => {
            counts.failed.fetch_add(n, Ordering::Relaxed);
            tracing::debug!(signal, records = n, "OTLP export timed out");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_queue_drops_and_counts_and_batches_are_bounded() {
        let (queue, mut rx, counts) = queue::<u32>(4);
        for i in 0..10 {
            queue.offer(i);
        }
        assert_eq!(counts.snapshot(), (0, 6, 0));
        let batch = next_batch(&mut rx, 3, Duration::from_millis(10))
            .await
            .unwrap();
        assert_eq!(batch, [0, 1, 2]);
        let batch = next_batch(&mut rx, 3, Duration::from_millis(10))
            .await
            .unwrap();
        assert_eq!(batch, [3]);
        drop(queue);
        assert!(
            next_batch(&mut rx, 3, Duration::from_millis(10))
                .await
                .is_none()
        );
    }
}
