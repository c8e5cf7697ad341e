//! Tenants' shares of the workers' time: who ran more than its share lately
//! waits behind those who did not.
//!
//! Deadlines alone do not keep tenants apart. A callee keeps its caller's
//! absolute deadline and a past deadline is the most urgent of all, so a
//! tenant whose call trees were admitted a while ago outranks every new
//! request of every other tenant for as long as its trees have work: eight
//! amplifying requests held another tenant's first requests 300-530 ms on
//! two cores, under FIFO as under EDF.
//!
//! So each [`Tenant`] has a constant bandwidth server's clock (Abeni and
//! Buttazzo; Sledge's multi-tenant variant demotes a tenant past its
//! budget in the same way). Its *virtual time* advances by the worker time
//! its jobs use, divided by its share of the workers; it never lags the
//! real clock (idle time is not saved up). A tenant whose virtual time is
//! more than [`OVER_LEAD`] ahead of the real clock has used more than its
//! share for that long: its jobs are *over share*, and a worker runs them
//! only when no job of a tenant within its share waits. Within each of the
//! two classes the policy orders as before, so a tenant alone, or tenants
//! that all keep to their shares (or all exceed them), are ordered by
//! deadline exactly as without tenants, and no worker idles while an
//! over-share job waits.
//!
//! A tenant's share is `weight / (W + DEFAULT_WEIGHT)` of the workers, where
//! `W` adds the weights of the tenants with jobs in the scheduler: the same
//! rule as admission's, one default weight kept for a tenant yet to come,
//! so a tenant alone that keeps every worker busy is over its share and a
//! newcomer's first request goes before its backlog.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The weight of a tenant the operator gave none; every weight is
/// relative to it.
pub const DEFAULT_WEIGHT: u32 = 1;

/// How far a tenant's virtual time may run ahead of the real clock before
/// its jobs are over share: four default quanta (5 ms), so a burst of a few
/// quanta over its share is ordered by deadline alone, and a tenant that
/// keeps the workers busy is held behind others within tens of
/// milliseconds. The fairness target is a victim's p99 under 50 ms.
pub const OVER_LEAD: Duration = Duration::from_millis(20);

/// The most a tenant's virtual time runs ahead of the real clock: a
/// tenant that used far more than its share stays over share this long at
/// most after it stops (its lead shrinks with the real clock), so its
/// past is not held against it for ever.
pub const MAX_LEAD: Duration = Duration::from_secs(1);

/// The clock virtual times are counted on: one per process, so that a
/// tenant's clock needs no scheduler to be made.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn ns_since_epoch(now: Instant) -> u64 {
    now.saturating_duration_since(*EPOCH).as_nanos() as u64
}

/// Who pays for a job: every job of one tenant shares its clock. Made by
/// whoever knows tenants (the executor's admission, for each tenant
/// holding places); a job without one is never over share.
#[derive(Debug)]
pub struct Tenant {
    weight: u32,
    /// Virtual time, ns on [`EPOCH`]'s clock.
    virtual_ns: AtomicU64,
    /// Jobs of this tenant in a scheduler (queued, running or parked): the
    /// tenant counts in that scheduler's `W` while it has any.
    pub(crate) jobs: AtomicUsize,
}

impl Tenant {
    /// A tenant of `weight` (at least 1), within its share.
    pub fn new(weight: u32) -> Self {
        Self {
            weight: weight.max(1),
            virtual_ns: AtomicU64::new(0),
            jobs: AtomicUsize::new(0),
        }
    }

    /// Its weight.
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// Charges `spent` of one worker's time, used up to `now`, when the
    /// tenants with jobs weigh `active` in all (this one's weight
    /// included) and there are `workers` workers.
    pub fn charge(&self, spent: Duration, now: Instant, active: u64, workers: usize) {
        let now = ns_since_epoch(now);
        // spent x (W + default) / (workers x weight): time on the clock of
        // a server that has the tenant's share of the workers.
        let cost = (spent.as_nanos() as u64)
            .saturating_mul(active.max(u64::from(self.weight)) + u64::from(DEFAULT_WEIGHT))
            / (workers.max(1) as u64 * u64::from(self.weight));
        let most = now.saturating_add(MAX_LEAD.as_nanos() as u64);
        // A lost race with another worker's charge retries: each charge
        // counts once.
        let _ = self
            .virtual_ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |virtual_ns| {
                Some(virtual_ns.max(now).saturating_add(cost).min(most))
            });
    }

    /// How far its virtual time is ahead of `now`.
    pub fn lead(&self, now: Instant) -> Duration {
        Duration::from_nanos(
            self.virtual_ns
                .load(Ordering::Relaxed)
                .saturating_sub(ns_since_epoch(now)),
        )
    }

    /// Whether its jobs wait behind those of tenants within their share.
    pub fn over_share(&self, now: Instant) -> bool {
        self.lead(now) > OVER_LEAD
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_within_its_share_never_leads() {
        let tenant = Tenant::new(1);
        let start = Instant::now();
        // Two tenants of weight 1 with jobs, two workers: a share of two
        // thirds of a worker. Using half of one is within it.
        for ms in 0..1000 {
            let now = start + Duration::from_millis(ms);
            tenant.charge(Duration::from_micros(500), now, 2, 2);
            assert!(!tenant.over_share(now), "over at {ms} ms");
        }
        assert!(tenant.lead(start + Duration::from_millis(999)) < Duration::from_millis(1));
    }

    #[test]
    fn a_tenant_that_keeps_every_worker_busy_is_over_share_then_recovers() {
        let tenant = Tenant::new(1);
        let start = Instant::now();
        // Alone on two workers, it uses both: its share is one worker
        // (one default weight kept for a newcomer), so its lead grows by
        // a millisecond each millisecond.
        let mut over_at = None;
        for ms in 1..=2000 {
            let now = start + Duration::from_millis(ms);
            tenant.charge(Duration::from_millis(2), now, 1, 2);
            if over_at.is_none() && tenant.over_share(now) {
                over_at = Some(ms);
            }
        }
        // Its lead is k + 1 ms after k ms: past 20 ms at 20.
        assert_eq!(over_at, Some(20));
        let end = start + Duration::from_millis(2000);
        assert_eq!(tenant.lead(end), MAX_LEAD, "the lead is bounded");
        // Idle, its lead shrinks with the clock.
        assert!(tenant.over_share(end + MAX_LEAD - OVER_LEAD - Duration::from_millis(1)));
        assert!(!tenant.over_share(end + MAX_LEAD - OVER_LEAD));
    }

    #[test]
    fn a_heavier_weight_is_a_larger_share() {
        let (light, heavy) = (Tenant::new(1), Tenant::new(3));
        let start = Instant::now();
        // Both use one worker of two, weighing 4 together: the light one's
        // share is 2 x 1/5, the heavy one's 2 x 3/5.
        for ms in 1..=100 {
            let now = start + Duration::from_millis(ms);
            light.charge(Duration::from_millis(1), now, 4, 2);
            heavy.charge(Duration::from_millis(1), now, 4, 2);
        }
        let end = start + Duration::from_millis(100);
        assert!(light.over_share(end));
        assert!(!heavy.over_share(end));
        assert_eq!(Tenant::new(0).weight(), 1, "a weight is at least 1");
    }
}
