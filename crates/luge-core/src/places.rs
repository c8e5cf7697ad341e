//! A fixed number of places in the whole process, taken without waiting:
//! the bound on a resource that a request may use only while one is free
//! (mapped artifact files, threads checking artifacts), the request doing
//! without it otherwise.

use std::sync::atomic::{AtomicUsize, Ordering};

/// At most `max` places taken at once; meant to be a `static`.
#[derive(Debug)]
pub struct Places {
    taken: AtomicUsize,
    max: usize,
}

/// One taken place, given back when dropped.
#[derive(Debug)]
pub struct Place(&'static Places);

impl Places {
    /// `max` places, none taken.
    pub const fn new(max: usize) -> Self {
        Self {
            taken: AtomicUsize::new(0),
            max,
        }
    }

    /// A place, if one is free.
    pub fn take(&'static self) -> Option<Place> {
        // Relaxed: a count, ordering nothing else.
        self.taken
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Place(self))
    }

    /// Places taken now.
    pub fn taken(&self) -> usize {
        self.taken.load(Ordering::Relaxed)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.0.taken.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_more_than_max_at_once_and_each_comes_back() {
        static THREE: Places = Places::new(3);
        let held: Vec<Place> = std::iter::from_fn(|| THREE.take()).collect();
        assert_eq!(held.len(), 3);
        assert!(THREE.take().is_none());
        drop(held);
        assert_eq!(THREE.taken(), 0);
        assert!(THREE.take().is_some());
    }
}
