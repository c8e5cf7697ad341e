//! Scheduling policies and the priority key each gives a job.

use std::time::{Duration, Instant};

/// How a worker orders its run queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// First come, first served; with preemption a yielded job goes to the
    /// back (round robin).
    Fifo,
    /// Earliest (absolute) deadline first.
    #[default]
    Edf,
    /// Shortest remaining slack first: `deadline - now - expected remaining
    /// execution`, expected execution learned per function.
    Srsf,
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fifo" => Ok(Self::Fifo),
            "edf" => Ok(Self::Edf),
            "srsf" => Ok(Self::Srsf),
            other => Err(format!("unknown policy {other:?} (fifo, edf, srsf)")),
        }
    }
}

/// What a policy needs to know about a job at the moment it is queued.
#[derive(Debug, Clone, Copy)]
pub struct Urgency {
    /// When the job (re-)entered a queue.
    pub queued_at: Instant,
    /// Absolute deadline.
    pub deadline: Instant,
    /// Expected execution still ahead of the job.
    pub remaining: Duration,
}

impl Policy {
    /// The queue key: smaller runs first.
    ///
    /// SRSF's slack `deadline - now - remaining` changes with `now`, but by
    /// the same amount for every queued job, so ordering by
    /// `deadline - remaining` (independent of `now`) is the same order and a
    /// job's key stays valid while it waits: insertion stays O(log n) (the
    /// timestamp trick of the Sledge DAG paper). The key is recomputed only
    /// when a job is re-queued after running.
    pub fn key(self, urgency: &Urgency) -> Instant {
        match self {
            Self::Fifo => urgency.queued_at,
            Self::Edf => urgency.deadline,
            Self::Srsf => urgency
                .deadline
                .checked_sub(urgency.remaining)
                .unwrap_or(urgency.deadline),
        }
    }
}
