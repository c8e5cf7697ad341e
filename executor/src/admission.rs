//! Admission: at most `limit` invocations at once, shared fairly between
//! tenants, with a bound on what one call tree holds.
//!
//! A tenant is who pays for an invocation: a function route's name on the
//! standalone host, a namespace under OpenWhisk. Everything a client
//! request causes (its calls, their calls, a chain's stages) is one
//! [`Tree`] and is charged to the tenant of the request at its root, so a
//! function cannot escape its share by calling another.
//!
//! The rule, checked under one lock per admission and release:
//!
//! - Nobody gets a place past `limit` (503, `Retry-After`).
//! - A tree holds at most `tree_limit` places; past it a call is refused
//!   (`call_start` answers busy), the request itself goes on.
//! - A tenant's *share* is `limit x weight / W`, where `W` adds the weights
//!   of the tenants holding places, the requester's if it holds none, and
//!   one default weight for a tenant yet to come. Within its share a
//!   tenant is admitted while any place is free. Past it, only while more
//!   than `reserve` places are free: those are kept for tenants within
//!   their share. One tenant alone thus takes at most `limit - reserve`;
//!   when another arrives it finds the reserve free, and as the first
//!   tenant's invocations end it takes their places back only while more
//!   than the reserve stays free: the newcomer, within its share, takes
//!   any place, and so grows towards its share while the first drains.
//!
//! Each admitted invocation holds a sandbox slot while it runs, so `limit`
//! is at most the pool's size (checked at start).
//!
//! Places bound what a tenant holds, not when its work runs: each tenant
//! holding places also has one scheduler [`luge_sched::Tenant`], with the
//! same weight, that every invocation it is charged for runs as, so a
//! tenant that used more than its share of the workers waits behind the
//! others (`luge_sched`'s share rule). It is forgotten with the tenant's
//! last place if it is within its share then; a clock that leads the real
//! clock is kept, a bounded number of them, until it no longer leads, so a
//! tenant cannot escape the rule by pausing between bursts of requests.
//!
//! A lock, not atomics: the decision reads the whole holding table, and it
//! is taken twice per invocation (admit, release) for a few hundred
//! nanoseconds, against an invocation's tens of microseconds.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// The weight of a tenant the operator did not name (the scheduler's, so
/// that both count a share alike). Each named weight is relative to it.
pub use luge_sched::DEFAULT_WEIGHT;

/// Why a place was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Every place is taken.
    #[error("every admission place is taken")]
    Full,
    /// The tenant holds more than its share, and the places left are kept
    /// for tenants within theirs.
    #[error("the tenant is over its fair share of admission places")]
    OverShare,
    /// The request's call tree holds as many places as one tree may.
    #[error("the call tree holds as many admission places as one tree may")]
    Tree,
}

/// The operator's settings.
#[derive(Debug, Clone)]
pub struct Places {
    /// Places in all.
    pub limit: usize,
    /// Places at most one call tree holds.
    pub tree_limit: usize,
    /// Weights by tenant; others have [`DEFAULT_WEIGHT`].
    pub weights: HashMap<String, u32>,
}

impl Places {
    /// `limit` places, the default tree bound (a quarter of them, at least
    /// one) and every tenant at the default weight.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            tree_limit: (limit / 4).max(1),
            weights: HashMap::new(),
        }
    }
}

/// The admission places of one executor.
#[derive(Debug, Clone)]
pub struct Admission {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    limit: usize,
    /// Free places only a tenant within its share may take: an eighth of
    /// the places, enough for a newcomer's first requests while the
    /// holder's drain (none under eight places: a bound that small is a
    /// test's or a tiny device's, where one tenant may take them all).
    reserve: usize,
    tree_limit: usize,
    weights: HashMap<String, u32>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Places taken.
    held: usize,
    /// Places by tenant, and its scheduler tenant; a tenant holding none
    /// has no entry, so the table is never larger than `limit`.
    tenants: HashMap<Arc<str>, Holding>,
    /// The sum of the weights of the tenants in `tenants`.
    active_weight: u64,
    /// Scheduler tenants that released their last place while their clock
    /// led the real clock (they had used more than their share): a request
    /// soon after takes the clock up again, so a tenant cannot shed what it
    /// used by pausing between bursts. At most `limit` entries.
    resting: HashMap<Arc<str>, Arc<luge_sched::Tenant>>,
    /// When `resting` was last cleared of clocks that no longer lead.
    resting_pruned: Option<Instant>,
}

/// What one tenant holds.
#[derive(Debug)]
struct Holding {
    places: usize,
    runs_as: Arc<luge_sched::Tenant>,
}

/// Everything one client request causes, charged to its tenant.
#[derive(Debug)]
pub struct Tree {
    tenant: Arc<str>,
    /// Places held by this tree now.
    held: AtomicUsize,
}

impl Tree {
    /// A tree for a request of `tenant`.
    pub fn new(tenant: &str) -> Arc<Self> {
        Arc::new(Self {
            tenant: Arc::from(tenant),
            held: AtomicUsize::new(0),
        })
    }

    /// Its tenant.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }
}

/// One admitted invocation (or chain); the place is freed when the last
/// clone is dropped.
#[derive(Debug, Clone)]
pub struct Admitted(Arc<Place>);

impl Admitted {
    /// The scheduler tenant its invocation runs as: its tree's tenant's.
    pub fn runs_as(&self) -> &Arc<luge_sched::Tenant> {
        &self.0.runs_as
    }
}

#[derive(Debug)]
struct Place {
    shared: Arc<Shared>,
    tree: Arc<Tree>,
    runs_as: Arc<luge_sched::Tenant>,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.tree.held.fetch_sub(1, Ordering::Relaxed);
        let mut state = self.shared.lock();
        state.held -= 1;
        if let Some(holding) = state.tenants.get_mut(&self.tree.tenant) {
            holding.places -= 1;
            if holding.places == 0
                && let Some(holding) = state.tenants.remove(&self.tree.tenant)
            {
                state.active_weight -= u64::from(self.shared.weight(&self.tree.tenant));
                if !holding.runs_as.lead(Instant::now()).is_zero() {
                    let limit = self.shared.limit;
                    state.rest(Arc::clone(&self.tree.tenant), holding.runs_as, limit);
                }
            }
        }
    }
}

impl Admission {
    /// Admission under `policy`.
    pub fn new(policy: Places) -> Self {
        let limit = policy.limit;
        Self {
            shared: Arc::new(Shared {
                limit,
                reserve: limit / 8,
                tree_limit: policy.tree_limit.max(1),
                weights: policy.weights,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// A place for one more invocation of `tree`, or why not.
    pub fn try_admit(&self, tree: &Arc<Tree>) -> Result<Admitted, Refused> {
        let shared = &self.shared;
        // The tree's place first, taken exactly (calls of one tree run on
        // several workers at once) and given back if the tenant's is
        // refused.
        tree.held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                (held < shared.tree_limit).then_some(held + 1)
            })
            .map_err(|_| Refused::Tree)?;
        let refuse = |why| {
            tree.held.fetch_sub(1, Ordering::Relaxed);
            Err(why)
        };
        let weight = shared.weight(&tree.tenant);
        let mut state = shared.lock();
        if state.held >= shared.limit {
            return refuse(Refused::Full);
        }
        let holding = state.tenants.get(&tree.tenant).map_or(0, |h| h.places);
        let active = state.active_weight + if holding == 0 { u64::from(weight) } else { 0 };
        // The share this tenant would have with one more default tenant.
        let share =
            (shared.limit as u64 * u64::from(weight)).div_ceil(active + u64::from(DEFAULT_WEIGHT));
        let free = shared.limit - state.held;
        if holding as u64 >= share && free <= shared.reserve {
            return refuse(Refused::OverShare);
        }
        state.held += 1;
        if holding == 0 {
            state.active_weight += u64::from(weight);
        }
        let resting = if holding == 0 {
            state.resting.remove(&tree.tenant)
        } else {
            None
        };
        let entry = state
            .tenants
            .entry(Arc::clone(&tree.tenant))
            .or_insert_with(|| Holding {
                places: 0,
                // Its clock if it still leads; a fresh one (within its
                // share) otherwise.
                runs_as: resting
                    .filter(|clock| !clock.lead(Instant::now()).is_zero())
                    .unwrap_or_else(|| Arc::new(luge_sched::Tenant::new(weight))),
            });
        entry.places += 1;
        let runs_as = Arc::clone(&entry.runs_as);
        drop(state);
        Ok(Admitted(Arc::new(Place {
            shared: Arc::clone(shared),
            tree: Arc::clone(tree),
            runs_as,
        })))
    }

    /// Invocations admitted and not finished.
    pub fn pending(&self) -> usize {
        self.shared.lock().held
    }

    /// The bound.
    pub fn limit(&self) -> usize {
        self.shared.limit
    }
}

impl State {
    /// Keeps `tenant`'s leading clock while it holds no place, within
    /// `limit` entries: when full, clocks that no longer lead are dropped
    /// (at most once per `luge_sched::MAX_LEAD`, the longest any leads, so
    /// the sweep is paid for by that many releases), then, if still full,
    /// an arbitrary one.
    fn rest(&mut self, tenant: Arc<str>, clock: Arc<luge_sched::Tenant>, limit: usize) {
        if self.resting.len() >= limit {
            let now = Instant::now();
            if self
                .resting_pruned
                .is_none_or(|at| now.saturating_duration_since(at) >= luge_sched::MAX_LEAD)
            {
                self.resting.retain(|_, clock| !clock.lead(now).is_zero());
                self.resting_pruned = Some(now);
            }
            if self.resting.len() >= limit
                && let Some(any) = self.resting.keys().next().cloned()
            {
                self.resting.remove(&any);
            }
        }
        self.resting.insert(tenant, clock);
    }
}

impl Shared {
    fn weight(&self, tenant: &str) -> u32 {
        self.weights
            .get(tenant)
            .copied()
            .unwrap_or(DEFAULT_WEIGHT)
            .max(1)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a few counters updated together: a panic cannot
        // leave it half-updated (no code between the updates can panic).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn admission(limit: usize) -> Admission {
        Admission::new(Places {
            tree_limit: limit,
            ..Places::new(limit)
        })
    }

    #[test]
    fn a_tenants_invocations_run_as_one_scheduler_tenant_of_its_weight() {
        let admission = Admission::new(Places {
            weights: HashMap::from([("heavy".to_owned(), 3)]),
            ..Places::new(8)
        });
        let (heavy, other) = (Tree::new("heavy"), Tree::new("other"));
        let first = admission.try_admit(&heavy).unwrap();
        let second = admission.try_admit(&heavy).unwrap();
        let theirs = admission.try_admit(&other).unwrap();
        // One clock per tenant, whichever tree: a callee runs as its root.
        assert!(Arc::ptr_eq(first.runs_as(), second.runs_as()));
        assert!(!Arc::ptr_eq(first.runs_as(), theirs.runs_as()));
        assert_eq!(first.runs_as().weight(), 3);
        assert_eq!(theirs.runs_as().weight(), DEFAULT_WEIGHT);
        // Forgotten with the tenant's last place when it was within its
        // share: a later request starts afresh.
        let old = Arc::clone(first.runs_as());
        drop((first, second));
        let again = admission.try_admit(&Tree::new("heavy")).unwrap();
        assert!(!Arc::ptr_eq(&old, again.runs_as()));
    }

    #[test]
    fn a_tenant_over_its_share_keeps_its_clock_between_bursts_until_it_no_longer_leads() {
        let admission = admission(4);
        let burst = admission.try_admit(&Tree::new("bursty")).unwrap();
        let clock = Arc::clone(burst.runs_as());
        // It used one worker for 20 ms alone: its clock leads by 40 ms.
        clock.charge(Duration::from_millis(20), Instant::now(), 1, 1);
        assert!(!clock.lead(Instant::now()).is_zero());
        drop(burst);
        assert!(admission.shared.lock().tenants.is_empty());
        // The next burst, soon after, runs on the same clock.
        let next = admission.try_admit(&Tree::new("bursty")).unwrap();
        assert!(Arc::ptr_eq(&clock, next.runs_as()));
        drop(next);
        // Once the clock no longer leads, the tenant starts afresh.
        let lead = clock.lead(Instant::now());
        std::thread::sleep(lead + Duration::from_millis(5));
        let later = admission.try_admit(&Tree::new("bursty")).unwrap();
        assert!(!Arc::ptr_eq(&clock, later.runs_as()));
        assert!(admission.shared.lock().resting.is_empty());
    }

    #[test]
    fn resting_clocks_are_bounded_by_the_places() {
        let admission = admission(4);
        for i in 0..100 {
            let place = admission.try_admit(&Tree::new(&format!("t{i}"))).unwrap();
            place
                .runs_as()
                .charge(Duration::from_millis(50), Instant::now(), 1, 1);
        }
        let state = admission.shared.lock();
        assert!(state.resting.len() <= 4, "{}", state.resting.len());
        assert!(state.tenants.is_empty());
    }

    #[test]
    fn bounded_and_released_on_drop() {
        let admission = admission(2);
        let tree = Tree::new("a");
        let a = admission.try_admit(&tree).unwrap();
        let b = admission.try_admit(&Tree::new("b")).unwrap();
        assert_eq!(
            admission.try_admit(&Tree::new("c")).unwrap_err(),
            Refused::Full
        );
        assert_eq!(admission.pending(), 2);
        drop(a);
        let c = admission.try_admit(&tree).unwrap();
        // A place shared by a chain and its running stage is freed by the
        // last of them.
        let stage = c.clone();
        drop((b, c));
        assert_eq!(admission.pending(), 1);
        drop(stage);
        assert_eq!(admission.pending(), 0);
        assert!(admission.shared.lock().tenants.is_empty());
    }

    #[test]
    fn one_tenant_alone_leaves_the_reserve() {
        let admission = admission(64);
        let attacker = Tree::new("attacker");
        let mut held: Vec<_> = std::iter::from_fn(|| admission.try_admit(&attacker).ok()).collect();
        assert_eq!(held.len(), 64 - 8);
        assert_eq!(
            admission.try_admit(&attacker).unwrap_err(),
            Refused::OverShare
        );
        // A newcomer gets the reserve at once.
        let victim = Tree::new("victim");
        let got: Vec<_> = (0..8)
            .map(|_| admission.try_admit(&victim).unwrap())
            .collect();
        assert_eq!(admission.try_admit(&victim).unwrap_err(), Refused::Full);
        // The attacker's places, as they end, go to the victim, not back
        // to the attacker (over its share now that two are active) while
        // no more than the reserve is free.
        held.truncate(54);
        assert_eq!(
            admission.try_admit(&attacker).unwrap_err(),
            Refused::OverShare
        );
        assert!(admission.try_admit(&victim).is_ok());
        drop(got);
    }

    #[test]
    fn weights_set_the_shares_under_contention() {
        let admission = Admission::new(Places {
            tree_limit: 100,
            weights: HashMap::from([("big".to_owned(), 3)]),
            ..Places::new(100)
        });
        let (big, small) = (Tree::new("big"), Tree::new("small"));
        let mut held: Vec<_> = (0..50)
            .map(|_| admission.try_admit(&big).unwrap())
            .collect();
        held.extend((0..30).map(|_| admission.try_admit(&small).unwrap()));
        // Both ask in turn. While more than the reserve (12) is free, both
        // are admitted; then only a tenant within its share is: big's is
        // 100 x 3 / (3 + 1 + 1) = 60, small's 100 x 1 / 5 = 20.
        for _ in 0..20 {
            held.extend(admission.try_admit(&big).ok());
            held.extend(admission.try_admit(&small).ok());
        }
        let state = admission.shared.lock();
        assert_eq!(
            (state.tenants["big"].places, state.tenants["small"].places),
            (60, 34)
        );
        drop(state);
        assert_eq!(admission.try_admit(&small).unwrap_err(), Refused::OverShare);
        assert_eq!(admission.try_admit(&big).unwrap_err(), Refused::OverShare);
        // A third tenant still finds the places left.
        assert!(admission.try_admit(&Tree::new("third")).is_ok());
    }

    #[test]
    fn a_tree_is_bounded_exactly_under_concurrent_calls() {
        let admission = Admission::new(Places {
            tree_limit: 10,
            ..Places::new(1000)
        });
        let tree = Tree::new("fanout");
        let held = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for _ in 0..100 {
                        if let Ok(place) = admission.try_admit(&tree) {
                            held.lock().unwrap().push(place);
                        }
                    }
                });
            }
        });
        assert_eq!(held.lock().unwrap().len(), 10);
        assert_eq!(admission.pending(), 10);
    }

    #[test]
    fn a_tree_is_bounded() {
        let admission = Admission::new(Places {
            tree_limit: 3,
            ..Places::new(64)
        });
        let tree = Tree::new("fanout");
        let held: Vec<_> = (0..3)
            .map(|_| admission.try_admit(&tree).unwrap())
            .collect();
        assert_eq!(admission.try_admit(&tree).unwrap_err(), Refused::Tree);
        // Another request of the same tenant is its own tree.
        assert!(admission.try_admit(&Tree::new("fanout")).is_ok());
        drop(held);
        assert!(admission.try_admit(&tree).is_ok());
    }
}
