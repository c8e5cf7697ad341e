//! `wasi:keyvalue` over Luge's shared state: the engine-neutral half
//! (buckets, keys, errors, atomic increments). An engine binds the WIT and
//! calls these with the invocation's [`State`]; grants, namespaces, quotas
//! and deadlines are the state's own, exactly as for Host API v1's
//! `state_*` imports.
//!
//! A bucket is a namespace: `open("default")` (or `""`) is the function's
//! private namespace, `open("NAME")` the namespace NAME, which the
//! function must be granted (`state = ["NAME"]`). Both live in the local
//! tier (persisted on the host); `open("global:NAME")` and
//! `open("global:default")` address the global tier (Redis) instead, as
//! does `open("NAME")` for a store the function's grant puts there (a
//! Spin runtime config's `[key_value_store.NAME] type = "redis"`).

use std::sync::Arc;

use crate::state::{MAX_KEY_BYTES, State, StateError, Tier, valid_namespace};

/// The identifier of the function's private bucket.
pub const DEFAULT_BUCKET: &str = "default";

/// Most buckets (and compare-and-swap reads, each holding a value) one
/// invocation holds open at once: each is host memory outside the guest's
/// own, so a loop of `open` calls is bounded.
pub const MAX_OPEN_BUCKETS: usize = 64;

/// Most keys one batch call may name: a batch is a loop of single
/// operations, bounded like any other argument.
pub const MAX_BATCH: usize = 1024;

/// Most keys one page of a listing answers (`wasi:keyvalue`'s
/// `list-keys`): each is host memory until the guest has read it.
pub const PAGE_KEYS: usize = 1000;

/// Most keys a whole listing collects (Spin's `get-keys`, which has no
/// pages): 10,000 keys of at most 1 KiB, so at most 10 MiB held for the
/// guest. Past it the listing ends in an error that says so.
pub const MAX_LISTED: usize = 10_000;

/// A key and its value, if it has one (a batch read's answer).
pub type Entry = (String, Option<Vec<u8>>);

/// Refuses a batch of more than [`MAX_BATCH`] keys.
pub fn check_batch(len: usize) -> Result<(), KvError> {
    if len > MAX_BATCH {
        return Err(KvError::Other(format!(
            "at most {MAX_BATCH} keys per batch"
        )));
    }
    Ok(())
}

/// Refuses to open a bucket when `open` are open already.
pub fn check_open(open: usize) -> Result<(), KvError> {
    if open >= MAX_OPEN_BUCKETS {
        return Err(KvError::Other(format!(
            "at most {MAX_OPEN_BUCKETS} buckets and compare-and-swap reads open at once"
        )));
    }
    Ok(())
}

/// How many times an increment retries when another writer won the race
/// (each try is a compare-and-swap): far more than contention on one key
/// needs, few enough to bound an invocation's work.
const INCREMENT_TRIES: usize = 1000;

/// Why a key-value operation failed, as `wasi:keyvalue/store.error` has it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    /// No bucket of that identifier can exist.
    #[error("no such store")]
    NoSuchStore,
    /// The bucket's namespace is not granted to the function.
    #[error("access denied")]
    AccessDenied,
    /// Anything else, in words.
    #[error("{0}")]
    Other(String),
}

impl From<StateError> for KvError {
    fn from(error: StateError) -> Self {
        match error {
            StateError::NotGranted => Self::AccessDenied,
            other => Self::Other(other.to_string()),
        }
    }
}

/// An open bucket: where its keys live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    /// Prepended to a key to make the state key (`~/` or `NAME/`).
    prefix: String,
    tier: Tier,
}

/// Opens the bucket `identifier` (see the module docs); `global` names
/// the stores that live on the global tier without the prefix.
pub fn open(identifier: &str, global: &[String]) -> Result<Bucket, KvError> {
    let (tier, name) = match identifier.strip_prefix("global:") {
        Some(name) => (Tier::Global, name),
        None => {
            let label = if identifier.is_empty() {
                DEFAULT_BUCKET
            } else {
                identifier
            };
            if global.iter().any(|g| g == label) {
                (Tier::Global, identifier)
            } else {
                (Tier::Local, identifier)
            }
        }
    };
    let prefix = match name {
        "" | DEFAULT_BUCKET => crate::state::PRIVATE_PREFIX.to_owned(),
        name if valid_namespace(name) => format!("{name}/"),
        _ => return Err(KvError::NoSuchStore),
    };
    Ok(Bucket { prefix, tier })
}

impl Bucket {
    fn key(&self, key: &str) -> Result<String, KvError> {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(KvError::Other(format!(
                "a key is 1 to {MAX_KEY_BYTES} bytes"
            )));
        }
        Ok(format!("{}{key}", self.prefix))
    }

    /// The value of `key`, if any.
    pub fn get(&self, state: &dyn State, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        match state.get(&self.key(key)?, self.tier) {
            Ok(value) => Ok(Some(value.to_vec())),
            Err(StateError::NotFound) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Sets `key` to `value`.
    pub fn set(&self, state: &dyn State, key: &str, value: &[u8]) -> Result<(), KvError> {
        Ok(state.set(&self.key(key)?, value, self.tier)?)
    }

    /// Deletes `key`; deleting an absent key is not an error.
    pub fn delete(&self, state: &dyn State, key: &str) -> Result<(), KvError> {
        match state.delete(&self.key(key)?, self.tier) {
            Ok(()) | Err(StateError::NotFound) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// One page of the bucket's keys, from `cursor` (`None`: the first),
    /// and the cursor of the next page (`None` after the last).
    pub fn keys(
        &self,
        state: &dyn State,
        cursor: Option<u64>,
    ) -> Result<crate::state::KeyPage, KvError> {
        Ok(state.keys(&self.prefix, self.tier, cursor.unwrap_or(0), PAGE_KEYS)?)
    }

    /// The bucket's keys, in order, at most [`MAX_LISTED`], and whether
    /// the listing was whole (an error past the bound, or a tier's).
    pub fn all_keys(&self, state: &dyn State) -> (Vec<String>, Result<(), KvError>) {
        let mut keys = Vec::new();
        let mut cursor = 0;
        let ended = loop {
            match state.keys(&self.prefix, self.tier, cursor, PAGE_KEYS) {
                Err(e) => break Err(e.into()),
                Ok((page, next)) => {
                    keys.extend(page);
                    if keys.len() > MAX_LISTED {
                        break Err(KvError::Other(format!(
                            "the store holds more than {MAX_LISTED} keys: the first listed are not all (wasi:keyvalue's list-keys pages through them)"
                        )));
                    }
                    match next {
                        Some(next) => cursor = next,
                        None => break Ok(()),
                    }
                }
            }
        };
        // Redis's SCAN may answer a key on two pages.
        keys.sort_unstable();
        keys.dedup();
        keys.truncate(MAX_LISTED);
        (keys, ended)
    }

    /// Whether `key` has a value.
    pub fn exists(&self, state: &dyn State, key: &str) -> Result<bool, KvError> {
        Ok(self.get(state, key)?.is_some())
    }

    /// Adds `delta` to the counter `key`, kept as decimal text (as other
    /// `wasi:keyvalue` hosts keep it; absent is 0), atomically: a
    /// compare-and-swap, retried while other writers win. The new value.
    pub fn increment(&self, state: &dyn State, key: &str, delta: u64) -> Result<u64, KvError> {
        self.update(state, key, |old: u64| old.checked_add(delta))
    }

    /// [`Bucket::increment`] by a signed `delta` (draft2's `s64` counters),
    /// on the same decimal text.
    pub fn add(&self, state: &dyn State, key: &str, delta: i64) -> Result<i64, KvError> {
        self.update(state, key, |old: i64| old.checked_add(delta))
    }

    /// Replaces the number at `key` (absent: 0) with `next` of it, by
    /// compare-and-swap, retried while other writers win.
    fn update<N>(
        &self,
        state: &dyn State,
        key: &str,
        next: impl Fn(N) -> Option<N>,
    ) -> Result<N, KvError>
    where
        N: std::str::FromStr + ToString + Default + Copy,
    {
        let key = self.key(key)?;
        for _ in 0..INCREMENT_TRIES {
            let current: Option<Arc<[u8]>> = match state.get(&key, self.tier) {
                Ok(value) => Some(value),
                Err(StateError::NotFound) => None,
                Err(e) => return Err(e.into()),
            };
            let old = match &current {
                Some(bytes) => std::str::from_utf8(bytes)
                    .ok()
                    .and_then(|text| text.parse::<N>().ok())
                    .ok_or_else(|| KvError::Other(format!("{key:?} is not a counter")))?,
                None => N::default(),
            };
            let new =
                next(old).ok_or_else(|| KvError::Other("the counter would overflow".to_owned()))?;
            if state.cas(
                &key,
                current.as_deref(),
                new.to_string().as_bytes(),
                self.tier,
            )? {
                return Ok(new);
            }
        }
        Err(KvError::Other(format!(
            "{key:?} changed under {INCREMENT_TRIES} tries"
        )))
    }

    /// The values of `keys` (at most [`MAX_BATCH`]), each with its key.
    pub fn get_many(&self, state: &dyn State, keys: Vec<String>) -> Result<Vec<Entry>, KvError> {
        check_batch(keys.len())?;
        keys.into_iter()
            .map(|key| {
                let value = self.get(state, &key)?;
                Ok((key, value))
            })
            .collect()
    }

    /// Sets each key to its value (at most [`MAX_BATCH`]).
    pub fn set_many(&self, state: &dyn State, pairs: &[(String, Vec<u8>)]) -> Result<(), KvError> {
        check_batch(pairs.len())?;
        pairs
            .iter()
            .try_for_each(|(key, value)| self.set(state, key, value))
    }

    /// Deletes each of `keys` (at most [`MAX_BATCH`]).
    pub fn delete_many(&self, state: &dyn State, keys: &[String]) -> Result<(), KvError> {
        check_batch(keys.len())?;
        keys.iter().try_for_each(|key| self.delete(state, key))
    }

    /// Reads `key` for a later [`Cas::swap`]: what a compare-and-swap
    /// compares against.
    pub fn cas(&self, state: &dyn State, key: &str) -> Result<Cas, KvError> {
        let current = self.get(state, key)?;
        Ok(Cas {
            bucket: self.clone(),
            key: key.to_owned(),
            current,
        })
    }
}

/// A key as it was read, for a compare-and-swap (`wasi:keyvalue`
/// draft2's `cas` resource).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cas {
    bucket: Bucket,
    key: String,
    current: Option<Vec<u8>>,
}

/// Why a [`Cas::swap`] did not write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CasError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] KvError),
    /// Another writer changed the key since it was read: here it is read
    /// again, for a retry.
    #[error("the value changed since it was read")]
    Changed(Cas),
}

impl Cas {
    /// The value read (`None`: absent).
    pub fn current(&self) -> Option<&[u8]> {
        self.current.as_deref()
    }

    /// Sets the key to `value` if it still holds what was read.
    pub fn swap(self, state: &dyn State, value: &[u8]) -> Result<(), CasError> {
        let key = self.bucket.key(&self.key)?;
        let swapped = state
            .cas(&key, self.current.as_deref(), value, self.bucket.tier)
            .map_err(KvError::from)?;
        if swapped {
            Ok(())
        } else {
            Err(CasError::Changed(self.bucket.cas(state, &self.key)?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_name_namespaces_and_tiers() {
        let open = |identifier: &str| super::open(identifier, &[]);
        assert_eq!(open("").unwrap(), open("default").unwrap());
        assert_eq!(open("default").unwrap().prefix, "~/");
        assert_eq!(open("cart").unwrap().prefix, "cart/");
        assert_eq!(open("global:cart").unwrap().tier, Tier::Global);
        assert_eq!(open("cart").unwrap().tier, Tier::Local);
        for bad in ["a/b", "~x", "global:a/b", "x".repeat(65).as_str()] {
            assert_eq!(open(bad), Err(KvError::NoSuchStore), "{bad}");
        }
        // Stores a grant puts on the global tier, by their plain label.
        let global = ["cart".to_owned(), "default".to_owned()];
        assert_eq!(super::open("cart", &global).unwrap().tier, Tier::Global);
        assert_eq!(super::open("cart", &global).unwrap().prefix, "cart/");
        assert_eq!(super::open("", &global).unwrap().tier, Tier::Global);
        assert_eq!(super::open("default", &global).unwrap().prefix, "~/");
        assert_eq!(super::open("other", &global).unwrap().tier, Tier::Local);
    }
}
