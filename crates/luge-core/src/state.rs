//! Shared state (host API v1's `state_*` imports, module `luge`): the
//! contract between an engine, which reads and writes guest memory, and the
//! host, which keeps the tiers and checks grants.
//!
//! An engine gives each import its guest memory as a [`GuestMemory`] and
//! calls the matching function of [`abi`] with the invocation's [`State`]:
//! everything else (argument checks, copies, codes) is written once, here.

use std::sync::Arc;
use std::time::{Duration, Instant};

/// The state imports every engine provides.
pub const IMPORTS: [&str; 10] = [
    "state_get",
    "state_set",
    "state_delete",
    "state_append",
    "state_cas",
    "state_add",
    "state_pull",
    "state_push",
    "state_lock",
    "state_unlock",
];

/// Longest key, bytes: keys name things; anything longer is a bad argument.
pub const MAX_KEY_BYTES: usize = 1024;

/// Whether `ns` is a namespace a grant may name: 1-64 of
/// `[A-Za-z0-9._-]`. (A function's private namespace is `~` and its name,
/// so no grant can name it.)
pub fn valid_namespace(ns: &str) -> bool {
    !ns.is_empty()
        && ns.len() <= 64
        && ns
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Why a state operation failed (host API v1's negative codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The key is absent.
    #[error("absent")]
    NotFound = -1,
    /// The key's namespace is not the function's own nor granted to it.
    #[error("namespace not granted")]
    NotGranted = -2,
    /// A key, pointer or length the guest passed is unusable (or a counter
    /// that is not 8 bytes).
    #[error("bad argument")]
    BadArgument = -3,
    /// Over a quota: value size, keys or bytes of a namespace.
    #[error("over a quota")]
    OverQuota = -4,
    /// The global tier cannot be reached in the time left.
    #[error("store unavailable")]
    Unavailable = -5,
    /// The lock is held by another invocation.
    #[error("busy")]
    Busy = -6,
}

impl StateError {
    /// The code the guest reads.
    pub fn code(self) -> i32 {
        self as i32
    }
}

/// Which tier an operation addresses (`flags` bit 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// The host's in-memory tier, shared by its sandboxes.
    Local,
    /// The global tier (Redis), shared by hosts.
    Global,
}

impl Tier {
    /// The tier `flags` names (other bits are reserved and ignored).
    pub fn of(flags: i32) -> Self {
        if flags & 1 == 1 {
            Self::Global
        } else {
            Self::Local
        }
    }
}

/// The host's side of state, one per invocation: it knows the function's
/// namespaces, quotas and deadline, and releases the invocation's locks
/// when dropped (the invocation ended, however it ended).
pub trait State: Send + Sync {
    /// The value of `key`.
    fn get(&self, key: &str, tier: Tier) -> Result<Arc<[u8]>, StateError>;
    /// Sets `key` to `value`.
    fn set(&self, key: &str, value: &[u8], tier: Tier) -> Result<(), StateError>;
    /// Deletes `key` (`NotFound` if absent).
    fn delete(&self, key: &str, tier: Tier) -> Result<(), StateError>;
    /// Appends `value` to `key` (absent = empty); the new length.
    fn append(&self, key: &str, value: &[u8], tier: Tier) -> Result<u64, StateError>;
    /// Sets `key` to `new` if it is `old` (`None`: absent); whether it did.
    fn cas(
        &self,
        key: &str,
        old: Option<&[u8]>,
        new: &[u8],
        tier: Tier,
    ) -> Result<bool, StateError>;
    /// Adds `delta` to the 8-byte little-endian counter `key` (absent = 0);
    /// the new value.
    fn add(&self, key: &str, delta: i64, tier: Tier) -> Result<i64, StateError>;
    /// Refreshes the local replica of `key` from the global tier.
    fn pull(&self, key: &str) -> Result<(), StateError>;
    /// Writes the local replica of `key` to the global tier.
    fn push(&self, key: &str) -> Result<(), StateError>;
    /// Takes the global lock `key` for `lease` if it is free: whether it
    /// did. The host releases it when the invocation ends.
    fn try_lock(&self, key: &str, lease: Duration) -> Result<bool, StateError>;
    /// Releases the lock `key` if this invocation holds it.
    fn unlock(&self, key: &str) -> Result<(), StateError>;
    /// Until when `state_lock` may wait for a held lock: the end of the
    /// invocation's time.
    fn wait_until(&self) -> Instant;
}

/// Guest linear memory as the state imports reach it.
pub trait GuestMemory {
    /// A copy of `[ptr, ptr + len)`.
    fn read(&mut self, ptr: i32, len: i32) -> Result<Vec<u8>, StateError>;
    /// Writes `bytes` at `ptr`.
    fn write(&mut self, ptr: i32, bytes: &[u8]) -> Result<(), StateError>;
}

/// Guest memory that is one contiguous slice (Wasmtime, WAMR).
pub struct SliceMemory<'a>(pub &'a mut [u8]);

fn range(ptr: i32, len: usize, size: usize) -> Result<std::ops::Range<usize>, StateError> {
    let start = usize::try_from(ptr).map_err(|_| StateError::BadArgument)?;
    let end = start.checked_add(len).ok_or(StateError::BadArgument)?;
    if end > size {
        return Err(StateError::BadArgument);
    }
    Ok(start..end)
}

impl GuestMemory for SliceMemory<'_> {
    fn read(&mut self, ptr: i32, len: i32) -> Result<Vec<u8>, StateError> {
        let len = usize::try_from(len).map_err(|_| StateError::BadArgument)?;
        Ok(self.0[range(ptr, len, self.0.len())?].to_vec())
    }

    fn write(&mut self, ptr: i32, bytes: &[u8]) -> Result<(), StateError> {
        let at = range(ptr, bytes.len(), self.0.len())?;
        self.0[at].copy_from_slice(bytes);
        Ok(())
    }
}

/// The imports, over any engine's memory: each returns what the guest
/// reads (a result, or a negative code).
pub mod abi {
    use super::{GuestMemory, MAX_KEY_BYTES, State, StateError, Tier};
    use std::time::Duration;

    fn key(memory: &mut dyn GuestMemory, ptr: i32, len: i32) -> Result<String, StateError> {
        if usize::try_from(len).map_or(true, |len| len == 0 || len > MAX_KEY_BYTES) {
            return Err(StateError::BadArgument);
        }
        String::from_utf8(memory.read(ptr, len)?).map_err(|_| StateError::BadArgument)
    }

    fn host(state: Option<&dyn State>) -> Result<&dyn State, StateError> {
        // A host without state grants nothing.
        state.ok_or(StateError::NotGranted)
    }

    fn code<T>(result: Result<T, StateError>, ok: impl FnOnce(T) -> i64) -> i64 {
        result.map_or_else(|e| i64::from(e.code()), ok)
    }

    fn code32<T>(result: Result<T, StateError>, ok: impl FnOnce(T) -> i32) -> i32 {
        result.map_or_else(StateError::code, ok)
    }

    /// `state_get`: the value's length, its first `buf_len` bytes copied.
    pub fn get(
        state: Option<&dyn State>,
        memory: &mut dyn GuestMemory,
        (key_ptr, key_len, buf_ptr, buf_len, flags): (i32, i32, i32, i32, i32),
    ) -> i64 {
        let result = (|| {
            let key = key(memory, key_ptr, key_len)?;
            let value = host(state)?.get(&key, Tier::of(flags))?;
            let room = usize::try_from(buf_len).map_err(|_| StateError::BadArgument)?;
            memory.write(buf_ptr, &value[..value.len().min(room)])?;
            Ok(value.len() as i64)
        })();
        code(result, |n| n)
    }

    /// `state_set`.
    pub fn set(
        state: Option<&dyn State>,
        memory: &mut dyn GuestMemory,
        (key_ptr, key_len, val_ptr, val_len, flags): (i32, i32, i32, i32, i32),
    ) -> i32 {
        let result = (|| {
            let key = key(memory, key_ptr, key_len)?;
            let value = memory.read(val_ptr, val_len)?;
            host(state)?.set(&key, &value, Tier::of(flags))
        })();
        code32(result, |()| 0)
    }

    /// `state_delete`.
    pub fn delete(
        state: Option<&dyn State>,
        memory: &mut dyn GuestMemory,
        (key_ptr, key_len, flags): (i32, i32, i32),
    ) -> i32 {
        let result = key(memory, key_ptr, key_len)
            .and_then(|key| host(state)?.delete(&key, Tier::of(flags)));
        code32(result, |()| 0)
    }

    /// `state_append`: the new length.
    pub fn append(
        state: Option<&dyn State>,
        memory: &mut dyn GuestMemory,
        (key_ptr, key_len, val_ptr, val_len, flags): (i32, i32, i32, i32, i32),
    ) -> i64 {
        let result = (|| {
            let key = key(memory, key_ptr, key_len)?;
            let value = memory.read(val_ptr, val_len)?;
            host(state)?.append(&key, &value, Tier::of(flags))
        })();
        code(result, |n| n as i64)
    }

    /// `state_cas`: 1 swapped, 0 not; `old_len` -1 means "only if absent".
    pub fn cas(
        state: Option<&dyn State>,
        memory: &mut dyn GuestMemory,
        (key_ptr, key_len, old_ptr, old_len, new_ptr, new_len, flags): (
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
        ),
    ) -> i32 {
        let result = (|| {
            let key = key(memory, key_ptr, key_len)?;
            let old = match old_len {
                -1 => None,
                len => Some(memory.read(old_ptr, len)?),
            };
            let new = memory.read(new_ptr, new_len)?;
            host(state)?.cas(&key, old.as_deref(), &new, Tier::of(flags))
        })();
        code32(result, i32::from)
    }

    /// `state_add`: the counter's new value.
    pub fn add(
        state: Option<&dyn State>,
        memory: &mut dyn GuestMemory,
        (key_ptr, key_len, delta, flags): (i32, i32, i64, i32),
    ) -> i64 {
        let result = key(memory, key_ptr, key_len)
            .and_then(|key| host(state)?.add(&key, delta, Tier::of(flags)));
        code(result, |n| n)
    }

    /// An import that takes only a key: the checked key to `op`.
    fn keyed(
        state: Option<&dyn State>,
        memory: &mut dyn GuestMemory,
        (key_ptr, key_len): (i32, i32),
        op: impl FnOnce(&dyn State, &str) -> Result<(), StateError>,
    ) -> i32 {
        code32(
            key(memory, key_ptr, key_len).and_then(|k| op(host(state)?, &k)),
            |()| 0,
        )
    }

    /// `state_pull`.
    pub fn pull(state: Option<&dyn State>, memory: &mut dyn GuestMemory, key: (i32, i32)) -> i32 {
        keyed(state, memory, key, |s, k| s.pull(k))
    }

    /// `state_push`.
    pub fn push(state: Option<&dyn State>, memory: &mut dyn GuestMemory, key: (i32, i32)) -> i32 {
        keyed(state, memory, key, |s, k| s.push(k))
    }

    /// `state_unlock`.
    pub fn unlock(state: Option<&dyn State>, memory: &mut dyn GuestMemory, key: (i32, i32)) -> i32 {
        keyed(state, memory, key, |s, k| s.unlock(k))
    }

    /// What one attempt at `state_lock` came to.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum LockAttempt {
        /// The guest reads this.
        Done(i32),
        /// Held by another: try `key` again after `after` (the engine
        /// sleeps, parked where it can), unless the invocation's time is
        /// up (then the guest reads -6).
        Retry {
            /// The key, checked.
            key: String,
            /// Back-off before the next attempt.
            after: Duration,
        },
    }

    /// Longest lease a guest may ask for: a lock outliving this is a bug
    /// or an attack (the host releases it at the invocation's end anyway).
    pub const MAX_LEASE: Duration = Duration::from_secs(600);

    /// The first attempt of `state_lock`.
    pub fn lock(
        state: Option<&dyn State>,
        memory: &mut dyn GuestMemory,
        (key_ptr, key_len, lease_ms): (i32, i32, i32),
    ) -> LockAttempt {
        let key = match key(memory, key_ptr, key_len) {
            Ok(key) => key,
            Err(e) => return LockAttempt::Done(e.code()),
        };
        let Ok(lease) = u64::try_from(lease_ms).map(Duration::from_millis) else {
            return LockAttempt::Done(StateError::BadArgument.code());
        };
        if lease.is_zero() || lease > MAX_LEASE {
            return LockAttempt::Done(StateError::BadArgument.code());
        }
        lock_again(state, key, lease_ms, Duration::from_micros(100))
    }

    /// Another attempt after a [`LockAttempt::Retry`]; `waited` is the
    /// back-off just slept (doubled up to 10 ms).
    pub fn lock_again(
        state: Option<&dyn State>,
        key: String,
        lease_ms: i32,
        waited: Duration,
    ) -> LockAttempt {
        let state = match host(state) {
            Ok(state) => state,
            Err(e) => return LockAttempt::Done(e.code()),
        };
        let lease = Duration::from_millis(u64::try_from(lease_ms).unwrap_or(0));
        match state.try_lock(&key, lease) {
            Ok(true) => LockAttempt::Done(0),
            Ok(false) => {
                let after = (waited * 2).min(Duration::from_millis(10));
                // The next attempt needs time of its own (a global-tier
                // round trip): give up while it would still have some.
                let attempt = Duration::from_millis(5);
                if std::time::Instant::now() + after + attempt >= state.wait_until() {
                    LockAttempt::Done(StateError::Busy.code())
                } else {
                    LockAttempt::Retry { key, after }
                }
            }
            Err(e) => LockAttempt::Done(e.code()),
        }
    }

    /// `state_lock` where waiting blocks the thread (engines that cannot
    /// park a sandbox).
    pub fn lock_blocking(
        state: Option<&dyn State>,
        memory: &mut dyn GuestMemory,
        args: (i32, i32, i32),
    ) -> i32 {
        let mut attempt = lock(state, memory, args);
        loop {
            match attempt {
                LockAttempt::Done(code) => return code,
                LockAttempt::Retry { key, after } => {
                    std::thread::sleep(after);
                    attempt = lock_again(state, key, args.2, after);
                }
            }
        }
    }
}

/// The state of the invocation running on this thread, for engines whose
/// host functions have no per-instance data to hang it on (Wasmer, WAMR);
/// like [`crate::calls::on_this_thread`], a fused callee installs its own
/// and puts its caller's back.
pub mod on_this_thread {
    use std::cell::RefCell;
    use std::sync::Arc;

    use super::State;

    thread_local! {
        static CURRENT: RefCell<Option<Arc<dyn State>>> = const { RefCell::new(None) };
    }

    struct Restore(Option<Arc<dyn State>>);

    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            CURRENT.with(|current| *current.borrow_mut() = previous);
        }
    }

    /// Runs `f` (the guest's entry call) with `state` as this thread's.
    pub fn with<R>(state: Option<Arc<dyn State>>, f: impl FnOnce() -> R) -> R {
        let previous = CURRENT.with(|current| current.replace(state));
        let _restore = Restore(previous);
        f()
    }

    /// This thread's state (cloned out, so no borrow is held while a host
    /// function runs).
    pub fn current() -> Option<Arc<dyn State>> {
        CURRENT.with(|current| current.borrow().clone())
    }
}
