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
//! `open("global:default")` address the global tier (Redis) instead.

use std::sync::Arc;

use crate::state::{MAX_KEY_BYTES, State, StateError, Tier, valid_namespace};

/// The identifier of the function's private bucket.
pub const DEFAULT_BUCKET: &str = "default";

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

/// Opens the bucket `identifier` (see the module docs).
pub fn open(identifier: &str) -> Result<Bucket, KvError> {
    let (tier, name) = match identifier.strip_prefix("global:") {
        Some(name) => (Tier::Global, name),
        None => (Tier::Local, identifier),
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

    /// Whether `key` has a value.
    pub fn exists(&self, state: &dyn State, key: &str) -> Result<bool, KvError> {
        Ok(self.get(state, key)?.is_some())
    }

    /// Adds `delta` to the counter `key`, kept as decimal text (as other
    /// `wasi:keyvalue` hosts keep it; absent is 0), atomically: a
    /// compare-and-swap, retried while other writers win. The new value.
    pub fn increment(&self, state: &dyn State, key: &str, delta: u64) -> Result<u64, KvError> {
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
                    .and_then(|text| text.parse::<u64>().ok())
                    .ok_or_else(|| KvError::Other(format!("{key:?} is not a counter")))?,
                None => 0,
            };
            let new = old
                .checked_add(delta)
                .ok_or_else(|| KvError::Other("the counter would overflow".to_owned()))?;
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_name_namespaces_and_tiers() {
        assert_eq!(open("").unwrap(), open("default").unwrap());
        assert_eq!(open("default").unwrap().prefix, "~/");
        assert_eq!(open("cart").unwrap().prefix, "cart/");
        assert_eq!(open("global:cart").unwrap().tier, Tier::Global);
        assert_eq!(open("cart").unwrap().tier, Tier::Local);
        for bad in ["a/b", "~x", "global:a/b", "x".repeat(65).as_str()] {
            assert_eq!(open(bad), Err(KvError::NoSuchStore), "{bad}");
        }
    }
}
