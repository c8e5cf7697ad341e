//! Shared state (host API v1's `state_*` imports, module `luge`): the
//! contract between an engine, which reads and writes guest memory, and the
//! host, which keeps the tiers and checks grants.
//!
//! The imports' bodies (argument checks, copies, codes) are
//! [`crate::hostapi`]'s, written once for every engine; this module is the
//! host's side: the [`State`] an invocation is given.

use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest key, bytes: keys name things; anything longer is a bad argument.
pub const MAX_KEY_BYTES: usize = 1024;

/// A key that starts with this addresses the function's private namespace
/// explicitly, whatever the rest holds (`~/a/b` is the private key `a/b`;
/// a key without `/` is private too). `~` is no namespace a grant can name.
pub const PRIVATE_PREFIX: &str = "~/";

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
    /// One page of the keys of the namespace `prefix` names (`~/`, or
    /// `NAME/` where granted), without that prefix: at most `limit` keys
    /// from `cursor` (0 for the first page), and the cursor of the next
    /// page (`None` after the last). A key written or deleted while the
    /// pages are read may be listed twice or not at all.
    fn keys(
        &self,
        prefix: &str,
        tier: Tier,
        cursor: u64,
        limit: usize,
    ) -> Result<KeyPage, StateError>;
}

/// A page of keys and the cursor of the next ([`State::keys`]).
pub type KeyPage = (Vec<String>, Option<u64>);

/// The page of `sorted` keys that `cursor` and `limit` name, as
/// [`State::keys`] answers it where the cursor is a position in a sorted
/// listing (the local tier, test doubles): at most `limit` keys from the
/// `cursor`-th, and the position after them unless they were the last.
pub fn page<'a>(
    sorted: impl ExactSizeIterator<Item = &'a String>,
    cursor: u64,
    limit: usize,
) -> KeyPage {
    let len = sorted.len();
    let skip = usize::try_from(cursor).unwrap_or(usize::MAX);
    let keys: Vec<String> = sorted.skip(skip).take(limit).cloned().collect();
    let next = skip.saturating_add(keys.len());
    (keys, (next < len).then_some(next as u64))
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
