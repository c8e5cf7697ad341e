//! Connection slots per function: how many connections of one kind (to
//! databases, to Redis) a function may hold at once across all of its
//! invocations, so one tenant cannot exhaust a server or the host's file
//! descriptors.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// At most `max` connections per function, each holding a slot until it
/// is dropped.
#[derive(Debug)]
pub struct Slots {
    max: usize,
    by_function: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Slots {
    /// At most `max` per function.
    pub fn new(max: usize) -> Self {
        Self {
            max,
            by_function: Mutex::new(HashMap::new()),
        }
    }

    /// A slot of `function`'s, if one is free now (never waits: the
    /// caller tells its function there are too many).
    pub fn try_take(&self, function: &str) -> Option<OwnedSemaphorePermit> {
        let semaphore = {
            let mut by_function = self.by_function.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(
                by_function
                    .entry(function.to_owned())
                    .or_insert_with(|| Arc::new(Semaphore::new(self.max))),
            )
        };
        semaphore.try_acquire_owned().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_function_has_its_own_slots() {
        let slots = Slots::new(2);
        let a = [slots.try_take("a"), slots.try_take("a")];
        assert!(a.iter().all(Option::is_some));
        assert!(slots.try_take("a").is_none());
        assert!(slots.try_take("b").is_some());
        drop(a);
        assert!(slots.try_take("a").is_some());
    }
}
