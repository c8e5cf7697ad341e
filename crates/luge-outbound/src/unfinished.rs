//! Work a request left running on a server: stopped when the request's
//! future is dropped before the work finished (its invocation ended), or
//! when it ran past its deadline. The database clients share it
//! (PostgreSQL's cancel request, MySQL's `KILL QUERY`).

/// Runs its `stop` when dropped, unless [`Unfinished::finished`] was
/// called first.
pub struct Unfinished<F: FnOnce()> {
    stop: Option<F>,
}

impl<F: FnOnce()> Unfinished<F> {
    /// Work under way, stopped by `stop` unless it finishes.
    pub fn new(stop: F) -> Self {
        Self { stop: Some(stop) }
    }

    /// The work finished: nothing to stop.
    pub fn finished(mut self) {
        self.stop = None;
    }
}

/// Runs `work` until `deadline`: its output if it finished by then;
/// `None` if the deadline came first, `stop` having run. If the future
/// this returns is itself dropped first (its invocation ended), `stop`
/// runs then.
pub async fn finished_by<T>(
    deadline: std::time::Instant,
    stop: impl FnOnce(),
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    let running = Unfinished::new(stop);
    let ended = tokio::time::timeout_at(deadline.into(), work).await.ok();
    // Finished: nothing to stop. Past the deadline: `running` drops here.
    if ended.is_some() {
        running.finished();
    }
    ended
}

impl<F: FnOnce()> Drop for Unfinished<F> {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stopped_unless_finished() {
        let stopped = std::cell::Cell::new(0);
        Unfinished::new(|| stopped.set(stopped.get() + 1)).finished();
        assert_eq!(stopped.get(), 0);
        drop(Unfinished::new(|| stopped.set(stopped.get() + 1)));
        assert_eq!(stopped.get(), 1);
    }
}
