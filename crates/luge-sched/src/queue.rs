//! A worker's run queue: a binary heap on the policy's key.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Instant;

/// A min-heap of items by key; equal keys leave in insertion order.
#[derive(Debug)]
pub struct RunQueue<T> {
    heap: BinaryHeap<Entry<T>>,
    next_seq: u64,
}

#[derive(Debug)]
struct Entry<T> {
    key: Instant,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key && self.seq == other.seq
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        // BinaryHeap is a max-heap: reverse to pop the smallest key first.
        other.key.cmp(&self.key).then(other.seq.cmp(&self.seq))
    }
}

impl<T> Default for RunQueue<T> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            next_seq: 0,
        }
    }
}

impl<T> RunQueue<T> {
    /// Adds `item` with priority `key` (smaller is more urgent).
    pub fn push(&mut self, key: Instant, item: T) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Entry { key, seq, item });
    }

    /// Removes the most urgent item.
    pub fn pop(&mut self) -> Option<T> {
        self.heap.pop().map(|e| e.item)
    }

    /// The most urgent item.
    pub fn peek(&self) -> Option<&T> {
        self.heap.peek().map(|e| &e.item)
    }

    /// The most urgent key.
    pub fn peek_key(&self) -> Option<Instant> {
        self.heap.peek().map(|e| e.key)
    }

    /// Number of queued items.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::policy::{Policy, Urgency};

    fn urgency(base: Instant, queued_ms: u64, deadline_ms: u64, remaining_ms: u64) -> Urgency {
        Urgency {
            queued_at: base + Duration::from_millis(queued_ms),
            deadline: base + Duration::from_millis(deadline_ms),
            remaining: Duration::from_millis(remaining_ms),
        }
    }

    fn order(policy: Policy, jobs: &[(&'static str, Urgency)]) -> Vec<&'static str> {
        let mut queue = RunQueue::default();
        for (name, u) in jobs {
            queue.push(policy.key(u), *name);
        }
        std::iter::from_fn(|| queue.pop()).collect()
    }

    #[test]
    fn fifo_orders_by_arrival() {
        let t = Instant::now();
        let jobs = [
            ("b", urgency(t, 2, 5, 1)),
            ("a", urgency(t, 1, 50, 1)),
            ("c", urgency(t, 3, 1, 1)),
        ];
        assert_eq!(order(Policy::Fifo, &jobs), ["a", "b", "c"]);
    }

    #[test]
    fn edf_orders_by_deadline() {
        let t = Instant::now();
        let jobs = [
            ("late", urgency(t, 0, 100, 1)),
            ("soon", urgency(t, 1, 10, 50)),
            ("mid", urgency(t, 2, 50, 1)),
        ];
        assert_eq!(order(Policy::Edf, &jobs), ["soon", "mid", "late"]);
    }

    #[test]
    fn srsf_orders_by_slack() {
        let t = Instant::now();
        // Slack: long = 100 - 90 = 10; short = 50 - 1 = 49; mid = 30 - 5 = 25.
        let jobs = [
            ("short", urgency(t, 0, 50, 1)),
            ("long", urgency(t, 0, 100, 90)),
            ("mid", urgency(t, 0, 30, 5)),
        ];
        assert_eq!(order(Policy::Srsf, &jobs), ["long", "mid", "short"]);
    }

    #[test]
    fn srsf_slack_updates_when_a_job_is_requeued() {
        let t = Instant::now();
        let mut queue = RunQueue::default();
        // "long" needs 90 ms before its 100 ms deadline: least slack, first.
        queue.push(Policy::Srsf.key(&urgency(t, 0, 100, 90)), "long");
        queue.push(Policy::Srsf.key(&urgency(t, 0, 40, 5)), "short");
        assert_eq!(queue.pop(), Some("long"));
        // It ran 80 ms; 10 ms remain, so its slack is now 90 ms and the
        // short job (slack 35 ms) goes first when it is re-queued.
        queue.push(Policy::Srsf.key(&urgency(t, 80, 100, 10)), "long");
        assert_eq!(queue.pop(), Some("short"));
        assert_eq!(queue.pop(), Some("long"));
    }

    #[test]
    fn equal_keys_keep_insertion_order() {
        let t = Instant::now();
        let mut queue = RunQueue::default();
        for name in ["1", "2", "3"] {
            queue.push(t, name);
        }
        assert_eq!(
            std::iter::from_fn(|| queue.pop()).collect::<Vec<_>>(),
            ["1", "2", "3"]
        );
    }
}
