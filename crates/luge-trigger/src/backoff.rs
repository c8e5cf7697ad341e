//! The wait between a source's attempts to reach its server, one policy
//! for every kind: from [`FIRST_BACKOFF`], doubled at each failure up to
//! [`MAX_BACKOFF`], and from the first again once a connection stayed up
//! [`HEALTHY_AFTER`]. A server that accepts a connection and drops it at
//! once is so retried ever more slowly, never in a tight loop.

use std::time::Duration;

/// The first wait before reconnecting.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// The longest wait before reconnecting.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How long a connection must stay up before the waits start again from
/// [`FIRST_BACKOFF`].
pub const HEALTHY_AFTER: Duration = Duration::from_secs(10);

/// One source's reconnect waits.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            next: FIRST_BACKOFF,
        }
    }
}

impl Backoff {
    /// The wait the next failure takes (for its log line).
    pub fn current(&self) -> Duration {
        self.next
    }

    /// Starts the waits again from [`FIRST_BACKOFF`]: the server answered.
    pub fn reset(&mut self) {
        self.next = FIRST_BACKOFF;
    }

    /// A connection ended after `up_for`: one up [`HEALTHY_AFTER`] starts
    /// the waits again.
    pub fn ended(&mut self, up_for: Duration) {
        if up_for >= HEALTHY_AFTER {
            self.reset();
        }
    }

    /// Waits [`Backoff::current`], then doubles it up to [`MAX_BACKOFF`].
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.advance()).await;
    }

    /// [`Backoff::current`], doubled for the next time.
    fn advance(&mut self) -> Duration {
        let wait = self.next;
        self.next = (wait * 2).min(MAX_BACKOFF);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_most_and_start_again_after_a_healthy_connection() {
        let mut backoff = Backoff::default();
        let ms: Vec<u128> = (0..8).map(|_| backoff.advance().as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        backoff.ended(HEALTHY_AFTER / 2);
        assert_eq!(backoff.current(), MAX_BACKOFF);
        backoff.ended(HEALTHY_AFTER);
        assert_eq!(backoff.current(), FIRST_BACKOFF);
    }
}
