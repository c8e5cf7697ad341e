//! A worker's run queue: two binary heaps on the policy's key, one for the
//! jobs of tenants within their share of the workers and one for those
//! over it (`crate::share`); the first is always served first.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Instant;

use crate::share::Tenant;

/// Two min-heaps of items by key; equal keys leave in insertion order.
///
/// An item's class is its tenant's at the moment it is looked at: a tenant
/// goes over its share, or back within it, while its jobs wait. Rather than
/// sort every waiting job again when that happens, the heads are checked
/// whenever the queue is read ([`RunQueue::settle`]): a head whose tenant
/// went over moves to the other heap, and the other heap's head moves back
/// if its tenant is within its share again. Each move is one heap push and
/// pop, and a job moves only when its tenant's class changed.
#[derive(Debug)]
pub struct RunQueue<T> {
    within: BinaryHeap<Entry<T>>,
    over: BinaryHeap<Entry<T>>,
    next_seq: u64,
}

/// Where the head of a queue stands: jobs within their tenant's share come
/// before jobs over it, then the smaller key first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rank {
    /// Its tenant is over its share.
    pub over_share: bool,
    /// The policy's key.
    pub key: Instant,
}

#[derive(Debug)]
struct Entry<T> {
    key: Instant,
    seq: u64,
    tenant: Option<Arc<Tenant>>,
    item: T,
}

impl<T> Entry<T> {
    fn over_share(&self, now: Instant) -> bool {
        self.tenant.as_ref().is_some_and(|t| t.over_share(now))
    }
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
            within: BinaryHeap::new(),
            over: BinaryHeap::new(),
            next_seq: 0,
        }
    }
}

impl<T> RunQueue<T> {
    /// Adds `item` with priority `key` (smaller is more urgent), of no
    /// tenant: never over share.
    pub fn push(&mut self, key: Instant, item: T) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.within.push(Entry {
            key,
            seq,
            tenant: None,
            item,
        });
    }

    /// Adds `item` with priority `key`, a job of `tenant`, classed as its
    /// tenant stands at `now`; returns whether it is over share.
    pub fn push_for(
        &mut self,
        key: Instant,
        tenant: Option<Arc<Tenant>>,
        item: T,
        now: Instant,
    ) -> bool {
        let seq = self.next_seq;
        self.next_seq += 1;
        let entry = Entry {
            key,
            seq,
            tenant,
            item,
        };
        let over_share = entry.over_share(now);
        if over_share {
            self.over.push(entry);
        } else {
            self.within.push(entry);
        }
        over_share
    }

    /// Classes the heads again as their tenants stand at `now`; returns how
    /// many jobs went over share. Call before reading the queue.
    pub fn settle(&mut self, now: Instant) -> usize {
        let mut demoted = 0;
        // Each pass moves one job whose tenant's class differs from its
        // heap's; bounded by the jobs queued, in case a tenant's class
        // flips between passes (another worker charges it).
        for _ in 0..=self.len() {
            if self.within.peek().is_some_and(|head| head.over_share(now)) {
                let head = self.within.pop().expect("peeked");
                self.over.push(head);
                demoted += 1;
            } else if self.over.peek().is_some_and(|head| !head.over_share(now)) {
                let head = self.over.pop().expect("peeked");
                self.within.push(head);
            } else {
                break;
            }
        }
        demoted
    }

    /// The heap served first: within-share jobs while there are any.
    fn first(&self) -> &BinaryHeap<Entry<T>> {
        if self.within.is_empty() {
            &self.over
        } else {
            &self.within
        }
    }

    /// Removes the most urgent item.
    pub fn pop(&mut self) -> Option<T> {
        self.within
            .pop()
            .or_else(|| self.over.pop())
            .map(|e| e.item)
    }

    /// The most urgent item.
    pub fn peek(&self) -> Option<&T> {
        self.first().peek().map(|e| &e.item)
    }

    /// Where the most urgent item stands.
    pub fn peek_rank(&self) -> Option<Rank> {
        let over_share = self.within.is_empty();
        self.first().peek().map(|e| Rank {
            over_share,
            key: e.key,
        })
    }

    /// Number of queued items.
    pub fn len(&self) -> usize {
        self.within.len() + self.over.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.within.is_empty() && self.over.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::policy::{Policy, Urgency};
    use crate::share::MAX_LEAD;

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

    /// Each policy orders by what it names: FIFO by arrival, EDF by
    /// deadline, SRSF by slack (deadline less remaining service).
    #[test]
    fn each_policy_orders_by_its_key() {
        let t = Instant::now();
        // Jobs as (name, arrived ms, deadline ms, remaining ms), and the
        // order the policy runs them in.
        type Case = (
            Policy,
            [(&'static str, u64, u64, u64); 3],
            [&'static str; 3],
        );
        let cases: [Case; 3] = [
            (
                Policy::Fifo,
                [("b", 2, 5, 1), ("a", 1, 50, 1), ("c", 3, 1, 1)],
                ["a", "b", "c"],
            ),
            (
                Policy::Edf,
                [("late", 0, 100, 1), ("soon", 1, 10, 50), ("mid", 2, 50, 1)],
                ["soon", "mid", "late"],
            ),
            // Slack: long = 100 - 90 = 10; short = 50 - 1 = 49; mid = 30 - 5 = 25.
            (
                Policy::Srsf,
                [("short", 0, 50, 1), ("long", 0, 100, 90), ("mid", 0, 30, 5)],
                ["long", "mid", "short"],
            ),
        ];
        for (policy, jobs, expected) in cases {
            let jobs = jobs.map(|(name, a, d, r)| (name, urgency(t, a, d, r)));
            assert_eq!(order(policy, &jobs), expected, "{policy:?}");
        }
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

    /// A tenant over its share: it used a second of a lone worker's time
    /// just now.
    fn over() -> Arc<Tenant> {
        let tenant = Arc::new(Tenant::new(1));
        tenant.charge(Duration::from_secs(1), Instant::now(), 1, 1);
        tenant
    }

    #[test]
    fn jobs_within_their_share_go_first() {
        let t = Instant::now();
        let (hog, other) = (over(), Arc::new(Tenant::new(1)));
        let mut queue = RunQueue::default();
        queue.push_for(t, Some(Arc::clone(&hog)), "hog, earliest", t);
        queue.push_for(t + Duration::from_millis(5), Some(other), "other", t);
        queue.push(t + Duration::from_millis(9), "nobody's");
        queue.push_for(t + Duration::from_millis(1), Some(hog), "hog, later", t);
        let rank = queue.peek_rank().unwrap();
        assert!(!rank.over_share);
        assert_eq!(rank.key, t + Duration::from_millis(5));
        assert_eq!(
            std::iter::from_fn(|| queue.pop()).collect::<Vec<_>>(),
            ["other", "nobody's", "hog, earliest", "hog, later"]
        );
        assert_eq!(queue.peek_rank(), None);
    }

    #[test]
    fn settling_moves_heads_whose_tenant_changed_class() {
        let t = Instant::now();
        let tenant = Arc::new(Tenant::new(1));
        let mut queue = RunQueue::default();
        // Queued within its share, deadline first.
        for ms in [3, 1, 2] {
            queue.push_for(
                t + Duration::from_millis(ms),
                Some(Arc::clone(&tenant)),
                ms,
                t,
            );
        }
        queue.push(t + Duration::from_millis(10), 10);
        // Then it goes over: its jobs move behind the one of nobody, in
        // their order.
        let now = Instant::now();
        tenant.charge(Duration::from_secs(1), now, 1, 1);
        assert_eq!(queue.settle(now), 3);
        assert_eq!(queue.peek(), Some(&10));
        assert_eq!(queue.pop(), Some(10));
        // A second later it is within its share again: the head moves
        // back at the next settle, and settling twice moves nothing more.
        let later = now + MAX_LEAD;
        assert_eq!(queue.settle(later), 0);
        assert!(!queue.peek_rank().unwrap().over_share);
        assert_eq!(queue.settle(later), 0);
        assert_eq!(
            std::iter::from_fn(|| queue.pop()).collect::<Vec<_>>(),
            [1, 2, 3]
        );
    }
}
