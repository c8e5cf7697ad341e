//! Luge's scheduler: deadline-ordered execution of sandboxes on core-pinned
//! workers.
//!
//! Work distribution is decoupled from per-core scheduling, as in Sledge:
//! new jobs enter one global [`crossbeam_deque::Injector`]; each worker pulls
//! from it into its own run queue ordered by the [`Policy`] (FIFO, EDF or
//! SRSF) and runs the most urgent job it has. Idle workers steal from busy
//! ones, so no core idles while work waits.
//!
//! A job is a future. The engine makes a sandbox's future yield at the end
//! of each quantum (Wasmtime's epoch interruption on a fiber): the worker then
//! puts it back in its queue and picks the most urgent job again, including
//! a newer, more urgent one from the injector. A job waiting on host I/O (a
//! WASI sleep) returns `Pending` without being woken; it holds no worker and
//! re-enters a queue when its waker fires. Engines that cannot yield give a
//! future that completes in one poll: they run to completion under the same
//! queues.
//!
//! With [`Sharding`] (Pyrosome's execution-time-aware sharding), jobs of
//! functions whose expected execution time is long enter a second injector
//! that only the first few workers take from; short jobs run anywhere.
//!
//! A worker may also serve a [`FrontEnd`] of its own (the executor's
//! connections): the front end drives the worker's scheduling points and
//! serves its connections between them, parking when the worker is idle, and a job submitted on its thread enters its own queue, so a
//! request runs on the core that received it. Siblings steal such a job only
//! when it would otherwise wait.
//!
//! Each job may belong to a [`Tenant`]: a tenant that used more than its
//! share of the workers lately waits behind tenants within theirs (the
//! `share` module says how), so one tenant's backlog of old deadlines
//! cannot hold another's new requests.
//!
//! The scheduler knows nothing of HTTP, tokio or any engine. A front end that
//! needs a runtime context on worker threads (WASI's timers) passes a
//! [`WorkerWrapper`].
#![deny(missing_docs)]

mod policy;
pub mod protocol;
mod queue;
mod share;
mod stats;
mod task;
mod worker;

pub use policy::Policy;
pub use queue::{Rank, RunQueue};
pub use share::{DEFAULT_WEIGHT, MAX_LEAD, OVER_LEAD, Tenant};
pub use stats::{ExecutionStats, FunctionStats, SchedulerStats};
pub use worker::{
    FrontEnd, FrontEndFactory, Job, JobProgress, LONG_JOB, Scheduler, SchedulerConfig,
    SchedulerError, Sharding, Step, Unpark, WorkerWrapper, current_job,
};
