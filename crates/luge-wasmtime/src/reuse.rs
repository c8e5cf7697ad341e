//! Opt-in instance reuse for WASI 0.3 services: one instance serves up to
//! `requests` requests, at most `concurrent` of them at once (a route's
//! `reuse` and `reuse_concurrent`, [`luge_core::action::Reuse`]), as
//! `wasmtime serve` does for 0.3.
//!
//! What it gives up: per-request isolation. Whatever one request leaves in
//! the instance (its memory, its tables, open key-value buckets, tasks it
//! spawned) the next one sees; a request that traps, runs out of memory or
//! overruns its time limit ends the instance, and with it the requests
//! served beside it. Hence never a default, and refused (by the host) for
//! a route that holds grants unless the operator allows it.
//!
//! What stays: every request is admitted, scheduled and counted as any
//! other; the instance is created under the route's limits, its memory
//! bounded as one sandbox's; each request's time limit holds (the epoch
//! check stops the instance when a request in it is past its limit, and a
//! timer does when none of its guest code runs); a request's stdout and
//! stderr are what the instance wrote while it ran, up to the capture cap.
//!
//! How it runs: an instance is a future (its driver) that owns the store
//! and turns its event loop, taking requests from its inbox. The driver
//! ([`Driver`]) is shared by the jobs of the requests it serves and
//! polled by whichever of them a worker runs, so the guest runs on the
//! scheduler's workers, under EDF and preemption, and an idle instance
//! costs no thread and no wake-up.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use futures_util::future::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use luge_core::action::Reuse;
use luge_core::calls::Calls;
use luge_core::handler::{Request, Respond};
use luge_core::state::State;
use luge_core::{
    Action, Cancellation, Invocation, Limits, Outcome, Preemption, SandboxFuture, Termination,
};
use tokio::io::AsyncWrite;
use tokio::sync::oneshot;
use wasmtime::Trap;
use wasmtime::component::Accessor;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi_http::p3::bindings::{Service, ServicePre};

use crate::component::{ComponentState, Shared};
use crate::driver::Driver;
use crate::epoch::EpochTicker;
use crate::sandbox::{schedule_with, termination};

/// Instances one loaded service keeps at once. Each holds a pool slot
/// while it lives, idle or not; past this bound a request gets a fresh
/// instance of its own, as without reuse.
const MAX_INSTANCES: usize = 64;

/// How long past a request's time limit its instance may go unpolled
/// before it is taken for dead: every client it served left, so no job
/// polls its driver, and its timer cannot fire. The next request to the
/// route retires it (its slot is freed once no job holds its driver).
const DEAD_AFTER: Duration = Duration::from_millis(50);

/// What a request joined to an instance reads when the instance ended
/// without serving it.
const ENDED: &str = "the shared instance ended before serving the request";

/// The instances of one loaded WASI 0.3 service that serve routes with
/// reuse.
#[derive(Default)]
pub(crate) struct Instances {
    /// Shared with the requests' futures, which retire what their end
    /// left idle (see [`retire`]).
    live: Arc<Mutex<Vec<Instance>>>,
}

/// One instance serving several requests.
struct Instance {
    /// The action it was created for; a request joins only an instance
    /// of its own action (its limits, environment and grants).
    action: Arc<Action>,
    inbox: Arc<Mutex<Inbox>>,
    /// Kept so that an idle instance lives on for the next request.
    driver: Driver,
}

/// What passes between the requests and an instance's driver.
#[derive(Default)]
struct Inbox {
    /// Requests handed over, not yet started.
    queue: VecDeque<Entry>,
    /// Requests started and not yet ended.
    running: Vec<Running>,
    /// Requests accepted so far (queued, running or ended).
    accepted: u32,
    /// Takes no more requests: it has served its count, or is retired.
    closed: bool,
    /// The driver's loop, woken when a request is handed over or the
    /// instance is closed.
    waker: Option<Waker>,
    /// The id of the next request accepted.
    next_id: u64,
    /// When the last request in the instance ended (`None` while one is
    /// in it, and before the first).
    idle_since: Option<Instant>,
}

impl Inbox {
    /// Requests in the instance: queued or running.
    fn load(&self) -> usize {
        self.queue.len() + self.running.len()
    }

    /// The requests in the instance, running or handed over and waiting
    /// (as the first one does while the instance is made): their time
    /// limits and cancellations.
    fn requests(&self) -> impl Iterator<Item = (Instant, &Cancellation)> {
        let running = self.running.iter().map(|r| (r.deadline, &r.cancel));
        running.chain(self.queue.iter().map(|e| (e.deadline, &e.cancel)))
    }

    /// The earliest time limit of the requests in the instance.
    fn earliest_deadline(&self) -> Option<Instant> {
        self.requests().map(|(deadline, _)| deadline).min()
    }

    /// Whether the instance must stop now: a request in it is past its
    /// time limit, or every one of them was cancelled (their clients
    /// left), or, with none in it, guest code still runs (work it spawned)
    /// a time limit after the last one ended.
    fn must_stop(&self, now: Instant, timeout: Duration) -> bool {
        if self.load() == 0 {
            return self
                .idle_since
                .is_some_and(|since| now.duration_since(since) >= timeout);
        }
        self.earliest_deadline()
            .is_some_and(|deadline| now >= deadline)
            || self.requests().all(|(_, cancel)| cancel.is_cancelled())
    }

    /// Closes the instance and wakes its loop, which ends once the
    /// requests in it have.
    fn close(&mut self) {
        self.closed = true;
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

/// A request handed to an instance.
struct Entry {
    id: u64,
    request: Request,
    respond: Respond,
    calls: Option<Arc<dyn Calls>>,
    state: Option<Arc<dyn State>>,
    cancel: Cancellation,
    arrived: Instant,
    deadline: Instant,
    outcome: oneshot::Sender<Outcome>,
}

/// A request the instance is serving.
struct Running {
    id: u64,
    arrived: Instant,
    deadline: Instant,
    cancel: Cancellation,
    outcome: oneshot::Sender<Outcome>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing under these locks can leave them half-updated: a panic
    // there is a bug, and the data stays usable.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Drops from `live` what is closed, dead (unpolled past a request's time
/// limit: every client it served left), or a second idle instance of
/// `action` (one idle instance per action is kept for the next request),
/// closing each: its slot is freed once no request's future holds it.
fn retire(live: &mut Vec<Instance>, action: &Arc<Action>, now: Instant) {
    let mut idle_kept = false;
    live.retain(|instance| {
        let mut inbox = lock(&instance.inbox);
        let dead = inbox
            .earliest_deadline()
            .is_some_and(|deadline| now > deadline + DEAD_AFTER);
        let surplus = inbox.load() == 0
            && Arc::ptr_eq(&instance.action, action)
            && std::mem::replace(&mut idle_kept, true);
        if inbox.closed || dead || surplus {
            inbox.close();
            false
        } else {
            true
        }
    });
}

impl Instances {
    /// Hands the request to an instance of its action with room for it
    /// (creating one if none has), and returns the future of its outcome.
    /// Gives the request back when every instance this service may keep
    /// is full: it then runs in a fresh instance.
    // The request comes back by value on the rare full path; boxing it
    // would cost every request an allocation.
    #[allow(clippy::too_many_arguments, clippy::result_large_err)]
    pub(crate) fn join(
        &self,
        pre: &ServicePre<ComponentState>,
        shared: &Shared,
        reuse: Reuse,
        invocation: Invocation,
        request: Request,
        respond: Respond,
        preemption: Preemption,
    ) -> Result<SandboxFuture, (Invocation, Request, Respond)> {
        let now = Instant::now();
        let action = &invocation.action;
        let mut live = lock(&self.live);
        retire(&mut live, action, now);
        let room = live.iter().position(|instance| {
            Arc::ptr_eq(&instance.action, action) && {
                let inbox = lock(&instance.inbox);
                !inbox.closed && inbox.load() < reuse.concurrent as usize
            }
        });
        if room.is_none() && live.len() >= MAX_INSTANCES {
            return Err((invocation, request, respond));
        }
        let (sender, receiver) = oneshot::channel();
        let mut entry = Entry {
            id: 0,
            request,
            respond,
            calls: invocation.calls.clone(),
            state: invocation.state.clone(),
            cancel: invocation.cancel.clone(),
            arrived: now,
            deadline: now + action.limits.timeout,
            outcome: sender,
        };
        let driver = if let Some(at) = room {
            let instance = &live[at];
            let mut inbox = lock(&instance.inbox);
            entry.id = inbox.next_id;
            inbox.next_id += 1;
            inbox.queue.push_back(entry);
            inbox.accepted += 1;
            if inbox.accepted >= reuse.requests {
                // Its last request: it ends once that one has.
                inbox.closed = true;
            }
            if let Some(waker) = inbox.waker.take() {
                waker.wake();
            }
            instance.driver.clone()
        } else {
            let inbox = Arc::new(Mutex::new(Inbox {
                queue: VecDeque::from([entry]),
                accepted: 1,
                closed: reuse.requests <= 1,
                next_id: 1,
                ..Inbox::default()
            }));
            let driver = Driver::new(drive(
                pre.clone(),
                shared.clone(),
                Arc::clone(action),
                preemption,
                Arc::clone(&inbox),
            ));
            live.push(Instance {
                action: Arc::clone(action),
                inbox,
                driver: driver.clone(),
            });
            driver
        };
        drop(live);
        Ok(Box::pin(Joined {
            outcome: receiver,
            driver: Some(driver),
            instances: Arc::downgrade(&self.live),
            action: Arc::clone(action),
        }))
    }
}

/// The future of a request handed to an instance: its outcome, while it
/// helps turn the instance's driver.
struct Joined {
    outcome: oneshot::Receiver<Outcome>,
    /// `None` once the instance has ended.
    driver: Option<Driver>,
    /// The service's instances, retired as this request ends (the
    /// service may be gone by then).
    instances: Weak<Mutex<Vec<Instance>>>,
    action: Arc<Action>,
}

impl Joined {
    /// The request ended with `outcome`: what its end left idle beyond
    /// one instance is retired now, not at the route's next request
    /// (which may never come), so a burst's instances give their slots
    /// back.
    fn ended(&self, outcome: Outcome) -> Poll<Outcome> {
        if let Some(live) = self.instances.upgrade() {
            retire(&mut lock(&live), &self.action, Instant::now());
        }
        Poll::Ready(outcome)
    }
}

impl Future for Joined {
    type Output = Outcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        // The driver first, at every poll: a request handed over while
        // another job was polling the driver is then taken by the next
        // poll of any job of the instance, even one whose own outcome is
        // ready now (so no hand-over waits on a wake-up already spent).
        if let Some(driver) = &self.driver
            && driver.poll(cx).is_ready()
        {
            self.driver = None;
        }
        match self.outcome.poll_unpin(cx) {
            Poll::Ready(Ok(outcome)) => self.ended(outcome),
            Poll::Ready(Err(_)) => self.ended(Outcome::failed(ENDED)),
            // The instance ended, and answered every request it held.
            Poll::Pending if self.driver.is_none() => self.ended(Outcome::failed(ENDED)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// An instance's life: created under `action`'s limits, it serves the
/// requests of `inbox` until it is closed and they have ended, or until
/// one fails; then every request still in it is answered with how it
/// ended.
async fn drive(
    pre: ServicePre<ComponentState>,
    shared: Shared,
    action: Arc<Action>,
    preemption: Preemption,
    inbox: Arc<Mutex<Inbox>>,
) {
    let limits = action.limits;
    let stdout = LogPipe::new(limits.capture_bytes());
    let stderr = LogPipe::new(limits.capture_bytes());
    // The instance's environment is the route's: nothing of one request
    // (its `LUGE_REQUEST_ID`) is kept for the next.
    let route = Invocation::new(Arc::clone(&action), Vec::new());
    let mut store = match shared.store(pre.engine(), &route, &stdout, &stderr, Instant::now()) {
        Ok(store) => store,
        Err(outcome) => {
            end(&inbox, |_| outcome.clone());
            return;
        }
    };
    let watched = Arc::clone(&inbox);
    let timeout = limits.timeout;
    schedule_with(&mut store, &shared.ticker, preemption, move || {
        lock(&watched).must_stop(Instant::now(), timeout)
    });
    let instantiated = {
        let _running = shared.ticker.enter();
        pre.instantiate_async(&mut store).await
    };
    let result = match instantiated {
        Ok(service) => {
            let pipes = (&stdout, &stderr);
            store
                .run_concurrent(async |accessor| {
                    serve_all(accessor, &service, &shared, &inbox, pipes, &limits).await
                })
                .await
                .and_then(|served| served)
        }
        Err(e) => Err(e),
    };
    let refused = store.data().memory_refused();
    drop(store);
    let termination = match result {
        // Closed and empty: nothing is left to answer.
        Ok(()) => Termination::Failed(ENDED.to_owned()),
        Err(error) => termination(Err(error), refused, &limits),
    };
    let stdout = stdout.take();
    let stderr = stderr.take();
    end(&inbox, |arrived| {
        Outcome {
            termination: termination.clone(),
            stdout: stdout.clone(),
            stderr: stderr.clone(),
            elapsed: arrived.elapsed(),
        }
        .cap_output(limits.max_output_bytes)
    });
}

/// Closes `inbox` and answers every request still in it with the outcome
/// `outcome` gives for its arrival.
fn end(inbox: &Mutex<Inbox>, outcome: impl Fn(Instant) -> Outcome) {
    let mut inbox = lock(inbox);
    inbox.closed = true;
    for running in inbox.running.drain(..) {
        let _ = running.outcome.send(outcome(running.arrived));
    }
    for entry in inbox.queue.drain(..) {
        let _ = entry.outcome.send(outcome(entry.arrived));
    }
}

/// The instance's event loop: starts the requests handed over, answers
/// each as it ends, and returns once the instance is closed and empty, or
/// with the error of the first request that failed (which ends the
/// instance), or a timeout when a request waiting on I/O is past its time
/// limit (no guest code runs then, so the epoch check cannot see it).
async fn serve_all(
    accessor: &Accessor<ComponentState>,
    service: &Service,
    shared: &Shared,
    inbox: &Mutex<Inbox>,
    (stdout, stderr): (&LogPipe, &LogPipe),
    limits: &Limits,
) -> wasmtime::Result<()> {
    let mut requests = FuturesUnordered::new();
    let mut timer: Option<Pin<Box<tokio::time::Sleep>>> = None;
    std::future::poll_fn(|cx| {
        loop {
            // Requests that ended, first: a failure ends the instance
            // before it takes another request.
            // (Each request answered itself as it ended: see `one`.)
            if let Poll::Ready(Some(served)) = requests.poll_next_unpin(cx) {
                if let Err(error) = served {
                    return Poll::Ready(Err(error));
                }
                timer = None;
                continue;
            }
            let mut guard = lock(inbox);
            if let Some(entry) = guard.queue.pop_front() {
                let alone = guard.running.is_empty();
                guard.idle_since = None;
                guard.running.push(Running {
                    id: entry.id,
                    arrived: entry.arrived,
                    deadline: entry.deadline,
                    cancel: entry.cancel,
                    outcome: entry.outcome,
                });
                drop(guard);
                accessor.with(|mut store| {
                    store
                        .data_mut()
                        .enter_request(entry.deadline, entry.calls, entry.state, alone);
                    shared.refuel(&mut store, limits);
                });
                requests.push(one(
                    accessor,
                    service,
                    &shared.ticker,
                    entry.request,
                    entry.respond,
                    move |served: &wasmtime::Result<()>| {
                        if served.is_ok() {
                            answer(inbox, entry.id, (stdout, stderr), limits);
                        }
                    },
                ));
                timer = None;
                continue;
            }
            if requests.is_empty() && guard.closed {
                return Poll::Ready(Ok(()));
            }
            guard.waker = Some(cx.waker().clone());
            let earliest = guard.earliest_deadline();
            drop(guard);
            if let Some(earliest) = earliest {
                let timer = timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(earliest.into())));
                if timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(wasmtime::Error::new(Trap::Interrupt)));
                }
            }
            return Poll::Pending;
        }
    })
    .await
}

/// One request through the instance, the epoch ticking while it is in;
/// `ended` hears how it ended before its client has the whole response.
async fn one(
    accessor: &Accessor<ComponentState>,
    service: &Service,
    ticker: &EpochTicker,
    request: Request,
    respond: Respond,
    ended: impl FnOnce(&wasmtime::Result<()>),
) -> wasmtime::Result<()> {
    let _running = ticker.enter();
    crate::service::serve(accessor, service, request, respond, ended).await
}

/// Answers request `id`, which ended well, with what the instance wrote
/// while it ran: it leaves the instance first, so a client that sends its
/// next request on having this response finds the instance's place free.
fn answer(inbox: &Mutex<Inbox>, id: u64, (stdout, stderr): (&LogPipe, &LogPipe), limits: &Limits) {
    let mut inbox = lock(inbox);
    if let Some(at) = inbox.running.iter().position(|r| r.id == id) {
        let running = inbox.running.swap_remove(at);
        if inbox.running.is_empty() {
            inbox.idle_since = Some(Instant::now());
        }
        drop(inbox);
        let outcome = Outcome {
            termination: Termination::Exited(0),
            stdout: stdout.take(),
            stderr: stderr.take(),
            elapsed: running.arrived.elapsed(),
        }
        .cap_output(limits.max_output_bytes);
        let _ = running.outcome.send(outcome);
    }
}

/// An instance's stdout or stderr: what it writes, up to `capacity` bytes
/// between two takes; each request ending takes what was written while it
/// ran (with requests served at once, what any of them wrote).
#[derive(Clone)]
struct LogPipe {
    capacity: usize,
    buffer: Arc<Mutex<Vec<u8>>>,
}

impl LogPipe {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            buffer: Arc::default(),
        }
    }

    /// What was written since the last take.
    fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *lock(&self.buffer))
    }
}

impl IsTerminal for LogPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogPipe {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl AsyncWrite for LogPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let mut buffer = lock(&self.buffer);
        let room = self.capacity.saturating_sub(buffer.len());
        if room == 0 && !bytes.is_empty() {
            // As a fresh sandbox's capture does past its cap.
            return Poll::Ready(Err(std::io::Error::other(
                "the output capture of this request is full",
            )));
        }
        let written = room.min(bytes.len());
        buffer.extend_from_slice(&bytes[..written]);
        Poll::Ready(Ok(written))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    /// A request handed to an instance, arrived at `arrived`.
    fn entry(id: u64, arrived: Instant, timeout: Duration) -> (Entry, Cancellation) {
        let cancel = Cancellation::default();
        let body = http_body_util::Empty::<hyper::body::Bytes>::new()
            .map_err(
                |never: std::convert::Infallible| -> luge_core::handler::BodyError {
                    match never {}
                },
            )
            .boxed_unsync();
        let entry = Entry {
            id,
            request: Request::new(body),
            respond: Box::new(|_| ()),
            calls: None,
            state: None,
            cancel: cancel.clone(),
            arrived,
            deadline: arrived + timeout,
            outcome: oneshot::channel().0,
        };
        (entry, cancel)
    }

    #[test]
    fn an_instance_stops_for_its_requests_limits_and_cancellations() {
        let timeout = Duration::from_millis(500);
        let now = Instant::now();
        let mut inbox = Inbox::default();
        // Empty, never used: nothing to stop for.
        assert!(!inbox.must_stop(now, timeout));
        // The first request, still waiting while the instance is made
        // (its start code runs then): stopped at its time limit.
        let (first, first_cancel) = entry(0, now, timeout);
        inbox.queue.push_back(first);
        assert!(!inbox.must_stop(now, timeout));
        assert!(inbox.must_stop(now + timeout, timeout));
        // Every request cancelled, queued or running: stopped.
        first_cancel.cancel();
        assert!(inbox.must_stop(now, timeout));
        let (second, second_cancel) = entry(1, now, timeout);
        inbox.running.push(Running {
            id: second.id,
            arrived: second.arrived,
            deadline: second.deadline,
            cancel: second.cancel,
            outcome: second.outcome,
        });
        assert!(!inbox.must_stop(now, timeout), "one is still wanted");
        second_cancel.cancel();
        assert!(inbox.must_stop(now, timeout));
        // None in it: guest work left behind may run one time limit.
        inbox.queue.clear();
        inbox.running.clear();
        inbox.idle_since = Some(now);
        assert!(!inbox.must_stop(now + timeout / 2, timeout));
        assert!(inbox.must_stop(now + timeout, timeout));
    }
}
