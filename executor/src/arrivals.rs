//! Requests that arrive on a worker's connections while it runs a sandbox.
//!
//! A worker front end (`crate::frontend`) reads its connections only at
//! scheduling points, and a running sandbox reaches one at the end of its
//! quantum (5 ms by default) unless the scheduler asks it to yield sooner.
//! The scheduler can ask only for jobs it knows of, and a request not yet
//! read is none: so a client whose kept-alive connection belongs to a busy
//! worker waited up to a quantum just to be read, whatever its deadline or
//! its tenant's share (docs/BENCHMARKS-ARCHIVE.md, "Arrivals read within a tick").
//!
//! So each worker also registers its connections in an epoll set of its
//! own, edge-triggered, which nothing else reads. At each epoch tick a
//! running sandbox asks (`luge_core::preempt::arrived`); once its job has
//! held the worker for [`HELD_BEFORE_READ`] in one poll, the ask is one
//! non-blocking `epoll_wait`, and the sandbox yields if data came since the
//! last. A request on a busy worker is so read within a tick or two (1 ms
//! each by default) instead of a quantum; a job shorter than that bound,
//! which ends about as soon as a yield would, never yields for it.
//! The worker then reads the requests, queues their jobs and runs the most
//! urgent, which may be the sandbox that yielded. An arrival costs a
//! running sandbox at most one yield; a worker that runs no sandbox never
//! asks. A connection leaves the set when its descriptor is closed.

use std::cell::OnceCell;
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustix::event::epoll;

/// Events read per `epoll_wait`: any one is enough to yield; more are read
/// only to consume their edges, so that they do not ask again.
const EVENTS_PER_WAIT: usize = 32;

/// Most `epoll_wait` calls per ask: a burst of arrivals on more connections
/// than this many times [`EVENTS_PER_WAIT`] leaves some edges to the next
/// ask, which costs at most one more yield.
const WAITS_PER_ASK: usize = 4;

/// How long a job must have held its worker, in one poll, before an
/// arrival makes it yield: half the default epoch tick (1 ms), so a job
/// that runs on is asked to yield at the tick after an arrival, or the
/// one after that, while a short job (most requests take tens of
/// microseconds) runs to its end, and the worker reads the arrival then.
const HELD_BEFORE_READ: Duration = Duration::from_micros(500);

thread_local! {
    static WATCH: OnceCell<Rc<Arrivals>> = const { OnceCell::new() };
}

/// One worker's epoll set of its connections.
struct Arrivals {
    epoll: OwnedFd,
}

impl Arrivals {
    /// An empty set.
    fn new() -> std::io::Result<Self> {
        Ok(Self {
            epoll: epoll::create(epoll::CreateFlags::CLOEXEC)?,
        })
    }

    /// Watches `connection` for data, edge-triggered: each arrival is
    /// reported once. It leaves the set when its descriptor is closed.
    fn add(&self, connection: BorrowedFd<'_>) -> std::io::Result<()> {
        let interest = epoll::EventFlags::IN | epoll::EventFlags::ET;
        epoll::add(
            &self.epoll,
            connection,
            epoll::EventData::new_u64(0),
            interest,
        )?;
        Ok(())
    }

    /// Whether data came on any connection since the last ask; consumes
    /// the edges it reads.
    fn arrived(&self) -> bool {
        let mut events = [MaybeUninit::<epoll::Event>::uninit(); EVENTS_PER_WAIT];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let mut any = false;
        for _ in 0..WAITS_PER_ASK {
            // An error (EINTR) is no arrival: the sandbox runs on, and the
            // connection is read at its next scheduling point as before.
            let read = match epoll::wait(&self.epoll, &mut events[..], Some(&zero)) {
                Ok((ready, _)) => ready.len(),
                Err(_) => 0,
            };
            any |= read > 0;
            if read < EVENTS_PER_WAIT {
                break;
            }
        }
        any
    }
}

/// Makes the calling thread (a worker that serves its connections between
/// sandboxes) watch for arrivals on the connections it accepts from now on,
/// and the jobs it runs yield to read them once they have held it for
/// [`HELD_BEFORE_READ`], counting those yields in `yields` (shared by the
/// executor's workers, for its metrics). Without an epoll set (the kernel
/// refused one), connections are read at scheduling points only, as they
/// were.
pub(crate) fn watch_on_this_thread(yields: Arc<AtomicU64>) {
    let arrivals = match Arrivals::new() {
        Ok(arrivals) => Rc::new(arrivals),
        Err(e) => {
            return tracing::warn!(error = %e, "cannot watch for arrivals: requests wait for a worker's next scheduling point");
        }
    };
    let asked = Rc::clone(&arrivals);
    if WATCH.with(|slot| slot.set(arrivals)).is_ok() {
        luge_core::preempt::watch_arrivals_on_this_thread(move || {
            let Some(job) = luge_sched::current_job() else {
                return false;
            };
            let yielding = job.this_poll >= HELD_BEFORE_READ && asked.arrived();
            if yielding {
                // Relaxed: a count read by the metrics, ordering nothing.
                yields.fetch_add(1, Ordering::Relaxed);
                tracing::trace!(
                    held_us = job.this_poll.as_micros(),
                    cpu_us = job.cpu.as_micros(),
                    "a job yields for arrivals"
                );
            }
            yielding
        });
    }
}

/// Watches `connection` for arrivals if the calling thread watches (a
/// worker's); elsewhere, nothing.
pub(crate) fn watch(connection: BorrowedFd<'_>) {
    WATCH.with(|slot| {
        if let Some(arrivals) = slot.get()
            && let Err(e) = arrivals.add(connection)
        {
            // Out of the user's epoll watches: this connection's requests
            // wait for scheduling points, as they did.
            tracing::debug!(error = %e, "connection not watched for arrivals");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn each_arrival_is_seen_once_until_its_connection_closes() {
        let arrivals = Arrivals::new().unwrap();
        let (mut client, server) = UnixStream::pair().unwrap();
        arrivals.add(server.as_fd()).unwrap();
        assert!(!arrivals.arrived(), "nothing came yet");
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        assert!(arrivals.arrived());
        // Edge-triggered: data left unread does not ask again.
        assert!(!arrivals.arrived());
        client.write_all(b"more").unwrap();
        assert!(arrivals.arrived());
        // A closed connection leaves the set.
        drop(server);
        let _ = client.write_all(b"x");
        assert!(!arrivals.arrived());
    }

    #[test]
    fn more_arrivals_than_one_wait_reads_are_all_consumed() {
        let arrivals = Arrivals::new().unwrap();
        let pairs: Vec<_> = (0..EVENTS_PER_WAIT * 2 + 1)
            .map(|_| UnixStream::pair().unwrap())
            .collect();
        for (_, server) in &pairs {
            arrivals.add(server.as_fd()).unwrap();
        }
        for (client, _) in &pairs {
            let mut client: &UnixStream = client;
            client.write_all(b"x").unwrap();
        }
        assert!(arrivals.arrived());
        assert!(!arrivals.arrived(), "edges left for a second ask");
    }

    #[test]
    fn only_a_watching_thread_watches_and_only_a_job_held_long_yields() {
        std::thread::spawn(|| {
            watch_on_this_thread(Arc::default());
            let (mut client, server) = UnixStream::pair().unwrap();
            watch(server.as_fd());
            client.write_all(b"x").unwrap();
            // Off a scheduler's job (as here), no job has held the worker.
            assert!(!luge_core::preempt::arrived());
            let watch = WATCH.with(|slot| Rc::clone(slot.get().unwrap()));
            assert!(watch.arrived(), "the connection is watched");
        })
        .join()
        .unwrap();
        // This thread watches nothing: `watch` leaves no trace.
        let (mut client, server) = UnixStream::pair().unwrap();
        watch(server.as_fd());
        client.write_all(b"x").unwrap();
        assert!(WATCH.with(|slot| slot.get().is_none()));
        assert!(!luge_core::preempt::arrived());
    }
}
