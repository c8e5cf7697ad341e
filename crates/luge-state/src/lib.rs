//! Shared state for functions (host API v1's `state_*` imports).
//!
//! Narrows Faasm's two-tier state and Pyrosome's KV to what a host can
//! bound and check:
//! - a *local tier*, one in-memory map per namespace shared by every
//!   sandbox of the host, persisted with an embedded store when a directory
//!   is given ([`StateConfig::dir`]);
//! - a *global tier* in Redis ([`StateConfig::redis_url`]); without one,
//!   the global tier is the local one (a standalone host keeps its state
//!   with no server to run);
//! - namespaces: a key `ns/rest` is in namespace `ns`, which the function's
//!   metadata must grant; a key without `/` is in the function's private
//!   namespace, which no grant can reach;
//! - quotas per namespace ([`Quotas`]) and a lease on every lock.
//!
//! A [`Session`] is one invocation's view: it implements
//! [`luge_core::state::State`] and releases the invocation's locks when
//! dropped.

#![deny(missing_docs)]

#[cfg(feature = "component")]
pub mod component;
mod global;
mod local;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use luge_core::state::{State, StateError, Tier, valid_namespace};

use global::GlobalTier;
use local::{Change, LocalTier};

/// Bounds on what functions keep, per namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    /// Largest value, bytes.
    pub max_value_bytes: usize,
    /// Keys in one namespace.
    pub max_keys_per_namespace: usize,
    /// Bytes of values in one namespace.
    pub max_bytes_per_namespace: usize,
}

impl Default for Quotas {
    fn default() -> Self {
        Self {
            // 1 MiB: the default; a larger object belongs in a file
            // grant or an object store, not in memory every sandbox shares.
            max_value_bytes: 1 << 20,
            // 100,000 keys and 256 MiB: one tenant's namespace cannot take
            // the host's memory (16 namespaces fill 4 GiB).
            max_keys_per_namespace: 100_000,
            max_bytes_per_namespace: 256 << 20,
        }
    }
}

/// Where state lives.
#[derive(Debug, Clone, Default)]
pub struct StateConfig {
    /// The local tier's embedded store; `None`: memory only.
    pub dir: Option<PathBuf>,
    /// The global tier (`redis://...`); `None`: the local tier serves both.
    pub redis_url: Option<String>,
    /// Bounds per namespace.
    pub quotas: Quotas,
}

/// Why the state store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The local tier's directory could not be made.
    #[error("--state-dir {}", .dir.display())]
    Dir {
        /// The directory.
        dir: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The local tier's store could not be opened or read back.
    #[error("state store {}", .dir.display())]
    Store {
        /// Its directory.
        dir: std::path::PathBuf,
        /// The store's error.
        #[source]
        source: fjall::Error,
    },
    /// The global tier's URL is not one Redis takes.
    #[error("--state-url {url}")]
    Url {
        /// The URL.
        url: String,
        /// The driver's error.
        #[source]
        source: redis::RedisError,
    },
    /// The system's random source failed (for the store's incarnation).
    #[error("the system's random source")]
    Random(#[source] getrandom::Error),
}

/// The host's state: both tiers and the local locks.
#[derive(Debug)]
pub struct StateStore {
    local: LocalTier,
    global: Option<GlobalTier>,
    quotas: Quotas,
    /// Locks when there is no Redis: key -> (holder's token, lease end).
    locks: Mutex<HashMap<String, (String, Instant)>>,
    /// This store's incarnation, random at open: lock tokens are
    /// `{incarnation}-{n}`, unique across processes and hosts sharing one
    /// Redis (a process id is not: every container's Luge may be pid 1),
    /// and made without a system call per invocation.
    incarnation: u64,
    next_token: AtomicU64,
}

/// A random incarnation id (see `StateStore::incarnation`).
fn incarnation() -> Result<u64, OpenError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(OpenError::Random)?;
    Ok(u64::from_ne_bytes(bytes))
}

impl StateStore {
    /// Opens the tiers `config` names.
    pub fn open(config: &StateConfig) -> Result<Self, OpenError> {
        let local = match &config.dir {
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|source| OpenError::Dir {
                    dir: dir.clone(),
                    source,
                })?;
                LocalTier::open(dir)?
            }
            None => LocalTier::in_memory(),
        };
        let global = config
            .redis_url
            .as_deref()
            .map(|url| GlobalTier::new(url, config.quotas))
            .transpose()?;
        Ok(Self {
            local,
            global,
            quotas: config.quotas,
            locks: Mutex::default(),
            incarnation: incarnation()?,
            next_token: AtomicU64::new(1),
        })
    }

    /// Global-tier operations that failed (server down or slow).
    pub fn global_failures(&self) -> u64 {
        self.global
            .as_ref()
            .map_or(0, |g| g.failures.load(Ordering::Relaxed))
    }

    /// Writes the local tier's journal to disk: at shutdown.
    pub fn sync(&self) {
        self.local.sync();
    }

    /// One invocation's view: `function`'s private namespace plus
    /// `granted`, operations bounded by `until` (the invocation's end).
    /// Within a `scope` (an OpenWhisk namespace: its tenants name their
    /// own state namespaces), names are the scope's own: the same name in
    /// two scopes is two namespaces.
    pub fn session(
        self: &Arc<Self>,
        scope: Option<&str>,
        function: &str,
        granted: &[String],
        until: Instant,
    ) -> Session {
        // Internal names never contain '/' (the store splits keys at the
        // first one); a scope is kept apart by ':', which grants cannot
        // name.
        let clean = |name: &str| name.replace('/', ":");
        let qualify = |ns: &str| match scope {
            Some(scope) => format!("{}:{ns}", clean(scope)),
            None => ns.to_owned(),
        };
        // Every invocation gets a session, most never use it: its private
        // name is one allocation, its lock token made at its first lock.
        let mut private =
            String::with_capacity(1 + scope.map_or(0, |scope| scope.len() + 1) + function.len());
        private.push('~');
        for part in scope.into_iter().chain([function]) {
            if private.len() > 1 {
                private.push(':');
            }
            private.extend(part.chars().map(|c| if c == '/' { ':' } else { c }));
        }
        Session {
            store: Arc::clone(self),
            private,
            granted: granted.iter().map(|ns| (ns.clone(), qualify(ns))).collect(),
            until,
            token: std::sync::OnceLock::new(),
            held: Mutex::default(),
        }
    }
}

/// One invocation's state: its grants, its deadline and its locks.
#[derive(Debug)]
pub struct Session {
    store: Arc<StateStore>,
    private: String,
    /// Granted namespaces: (as keys name them, as stored).
    granted: Vec<(String, String)>,
    until: Instant,
    /// What its locks are held under, unique to it (see [`Session::token`]).
    token: std::sync::OnceLock<String>,
    held: Mutex<Vec<String>>,
}

/// Where a key lives, once checked: its namespace as stored.
struct Key<'a> {
    ns: &'a str,
    rest: &'a str,
}

impl Key<'_> {
    /// The key in the global tier.
    fn global(&self) -> String {
        format!("luge:{}/{}", self.ns, self.rest)
    }

    /// Its namespace's usage (keys, bytes) in the global tier.
    fn usage(&self) -> String {
        format!("luge-usage:{}", self.ns)
    }
}

impl Session {
    /// Its lock token: this store's incarnation and a number no other
    /// session of it has, made when first needed.
    fn token(&self) -> &str {
        self.token.get_or_init(|| {
            let token = self.store.next_token.fetch_add(1, Ordering::Relaxed);
            format!("{:016x}-{token}", self.store.incarnation)
        })
    }

    fn key<'k>(&'k self, key: &'k str) -> Result<Key<'k>, StateError> {
        if let Some(rest) = key.strip_prefix(luge_core::state::PRIVATE_PREFIX) {
            return Ok(Key {
                ns: &self.private,
                rest,
            });
        }
        match key.split_once('/') {
            None => Ok(Key {
                ns: &self.private,
                rest: key,
            }),
            Some((ns, rest)) if valid_namespace(ns) => self
                .granted
                .iter()
                .find(|(name, _)| name == ns)
                .map(|(_, stored)| Key { ns: stored, rest })
                .ok_or(StateError::NotGranted),
            Some(_) => Err(StateError::BadArgument),
        }
    }

    fn quotas(&self) -> &Quotas {
        &self.store.quotas
    }

    /// The global tier, when the operation asks for it and there is one.
    fn global(&self, tier: Tier) -> Option<&GlobalTier> {
        match tier {
            Tier::Global => self.store.global.as_ref(),
            Tier::Local => None,
        }
    }

    fn check_value(&self, value: &[u8]) -> Result<(), StateError> {
        if value.len() > self.quotas().max_value_bytes {
            return Err(StateError::OverQuota);
        }
        Ok(())
    }

    fn lock_key(key: &Key<'_>) -> String {
        format!("luge-lock:{}/{}", key.ns, key.rest)
    }

    fn release(&self, lock: &str) {
        match &self.store.global {
            Some(global) => {
                // Bounded on its own: the invocation's time may be over.
                let until = Instant::now() + Duration::from_millis(500);
                if global.unlock(lock, self.token(), until).is_err() {
                    tracing::warn!(lock, "state: lock not released (its lease ends it)");
                }
            }
            None => {
                let mut locks = self.store.locks.lock().unwrap_or_else(|e| e.into_inner());
                if locks
                    .get(lock)
                    .is_some_and(|(holder, _)| holder == self.token())
                {
                    locks.remove(lock);
                }
            }
        }
    }
}

fn counter(value: Option<&[u8]>) -> Result<i64, StateError> {
    match value {
        None => Ok(0),
        Some(bytes) => bytes
            .try_into()
            .map(i64::from_le_bytes)
            .map_err(|_| StateError::BadArgument),
    }
}

impl State for Session {
    fn get(&self, key: &str, tier: Tier) -> Result<Arc<[u8]>, StateError> {
        let key = self.key(key)?;
        match self.global(tier) {
            Some(global) => global
                .get(&key.global(), self.until)?
                .map(Arc::from)
                .ok_or(StateError::NotFound),
            None => self
                .store
                .local
                .get(key.ns, key.rest)
                .ok_or(StateError::NotFound),
        }
    }

    fn set(&self, key: &str, value: &[u8], tier: Tier) -> Result<(), StateError> {
        let key = self.key(key)?;
        self.check_value(value)?;
        match self.global(tier) {
            Some(global) => global.set(&key.global(), &key.usage(), value, self.until),
            None => self
                .store
                .local
                .update(key.ns, key.rest, self.quotas(), |_| {
                    Ok((Change::Set(value.to_vec()), ()))
                }),
        }
    }

    fn delete(&self, key: &str, tier: Tier) -> Result<(), StateError> {
        let key = self.key(key)?;
        let existed = match self.global(tier) {
            Some(global) => global.delete(&key.global(), &key.usage(), self.until)?,
            None => self
                .store
                .local
                .update(key.ns, key.rest, self.quotas(), |current| {
                    Ok((Change::Delete, current.is_some()))
                })?,
        };
        if existed {
            Ok(())
        } else {
            Err(StateError::NotFound)
        }
    }

    fn append(&self, key: &str, value: &[u8], tier: Tier) -> Result<u64, StateError> {
        let key = self.key(key)?;
        match self.global(tier) {
            Some(global) => global.append(&key.global(), &key.usage(), value, self.until),
            None => self
                .store
                .local
                .update(key.ns, key.rest, self.quotas(), |current| {
                    let mut joined = current.unwrap_or_default().to_vec();
                    joined.extend_from_slice(value);
                    let len = joined.len() as u64;
                    Ok((Change::Set(joined), len))
                }),
        }
    }

    fn cas(
        &self,
        key: &str,
        old: Option<&[u8]>,
        new: &[u8],
        tier: Tier,
    ) -> Result<bool, StateError> {
        let key = self.key(key)?;
        self.check_value(new)?;
        match self.global(tier) {
            Some(global) => global.cas(&key.global(), &key.usage(), old, new, self.until),
            None => self
                .store
                .local
                .update(key.ns, key.rest, self.quotas(), |current| {
                    Ok(if current == old {
                        (Change::Set(new.to_vec()), true)
                    } else {
                        (Change::Keep, false)
                    })
                }),
        }
    }

    fn add(&self, key: &str, delta: i64, tier: Tier) -> Result<i64, StateError> {
        let key = self.key(key)?;
        match self.global(tier) {
            Some(global) => global.add(&key.global(), &key.usage(), delta, self.until),
            None => self
                .store
                .local
                .update(key.ns, key.rest, self.quotas(), |current| {
                    let value = counter(current)?.wrapping_add(delta);
                    Ok((Change::Set(value.to_le_bytes().to_vec()), value))
                }),
        }
    }

    fn pull(&self, key: &str) -> Result<(), StateError> {
        let key = self.key(key)?;
        let Some(global) = &self.store.global else {
            // One tier: the replica is the value.
            return Ok(());
        };
        let value = global.get(&key.global(), self.until)?;
        self.store
            .local
            .update(key.ns, key.rest, self.quotas(), |_| {
                Ok((value.map_or(Change::Delete, Change::Set), ()))
            })
    }

    fn push(&self, key: &str) -> Result<(), StateError> {
        let key = self.key(key)?;
        let Some(global) = &self.store.global else {
            return Ok(());
        };
        match self.store.local.get(key.ns, key.rest) {
            Some(value) => global.set(&key.global(), &key.usage(), &value, self.until),
            None => global
                .delete(&key.global(), &key.usage(), self.until)
                .map(drop),
        }
    }

    fn try_lock(&self, key: &str, lease: Duration) -> Result<bool, StateError> {
        let key = self.key(key)?;
        let lock = Self::lock_key(&key);
        let taken = match &self.store.global {
            Some(global) => global.try_lock(&lock, self.token(), lease, self.until)?,
            None => {
                let now = Instant::now();
                let mut locks = self.store.locks.lock().unwrap_or_else(|e| e.into_inner());
                match locks.get(&lock) {
                    Some((holder, ends)) if *ends > now && holder != self.token() => false,
                    _ => {
                        locks.insert(lock.clone(), (self.token().to_owned(), now + lease));
                        true
                    }
                }
            }
        };
        if taken {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            if !held.contains(&lock) {
                held.push(lock);
            }
        }
        Ok(taken)
    }

    fn unlock(&self, key: &str) -> Result<(), StateError> {
        let key = self.key(key)?;
        let lock = Self::lock_key(&key);
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let Some(at) = held.iter().position(|h| *h == lock) else {
            return Err(StateError::NotFound);
        };
        held.swap_remove(at);
        drop(held);
        self.release(&lock);
        Ok(())
    }

    fn keys(
        &self,
        prefix: &str,
        tier: Tier,
        cursor: u64,
        limit: usize,
    ) -> Result<luge_core::state::KeyPage, StateError> {
        let key = self.key(prefix)?;
        if !key.rest.is_empty() {
            return Err(StateError::BadArgument);
        }
        match self.global(tier) {
            Some(global) => global.keys(key.ns, cursor, limit, self.until),
            None => Ok(self.store.local.keys(key.ns, cursor, limit)),
        }
    }

    fn wait_until(&self) -> Instant {
        self.until
    }
}

impl Drop for Session {
    /// The invocation ended (returned, trapped, timed out or was
    /// cancelled): its locks go with it.
    fn drop(&mut self) {
        let held = std::mem::take(self.held.get_mut().unwrap_or_else(|e| e.into_inner()));
        for lock in held {
            self.release(&lock);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sessions_names_and_token() {
        let store = Arc::new(StateStore::open(&StateConfig::default()).unwrap());
        let until = Instant::now() + Duration::from_secs(60);
        let plain = store.session(None, "fn/a", &[], until);
        assert_eq!(plain.private, "~fn:a");
        let scoped = store.session(Some("ns/x"), "a/b", &["shared".to_owned()], until);
        assert_eq!(scoped.private, "~ns:x:a:b");
        assert_eq!(
            scoped.granted,
            vec![("shared".to_owned(), "ns:x:shared".to_owned())]
        );
        // A token only once a lock needs one, the same after, and no
        // other session's.
        assert!(plain.token.get().is_none());
        assert!(plain.try_lock("k", Duration::from_secs(1)).unwrap());
        let token = plain.token().to_owned();
        assert_eq!(plain.token(), token);
        assert_ne!(scoped.token(), token);
    }

    #[test]
    fn keys_are_listed_in_pages_of_granted_namespaces_only() {
        let store = Arc::new(StateStore::open(&StateConfig::default()).unwrap());
        let until = Instant::now() + Duration::from_secs(60);
        let session = store.session(None, "f", &["shared".to_owned()], until);
        for i in 0..2500 {
            session
                .set(&format!("~/k{i:04}"), b"v", Tier::Local)
                .unwrap();
        }
        session.set("shared/only", b"v", Tier::Local).unwrap();
        let mut listed = Vec::new();
        let mut cursor = 0;
        let mut pages = 0;
        loop {
            let (page, next) = session.keys("~/", Tier::Local, cursor, 1000).unwrap();
            assert!(page.len() <= 1000);
            listed.extend(page);
            pages += 1;
            match next {
                Some(next) => cursor = next,
                None => break,
            }
        }
        assert_eq!(pages, 3);
        let expected: Vec<String> = (0..2500).map(|i| format!("k{i:04}")).collect();
        assert_eq!(listed, expected);
        assert_eq!(
            session.keys("shared/", Tier::Local, 0, 1000).unwrap(),
            (vec!["only".to_owned()], None)
        );
        // Another function's private namespace and an ungranted one list
        // nothing of these.
        let other = store.session(None, "g", &[], until);
        assert_eq!(
            other.keys("~/", Tier::Local, 0, 10).unwrap(),
            (vec![], None)
        );
        assert!(matches!(
            other.keys("shared/", Tier::Local, 0, 10),
            Err(StateError::NotGranted)
        ));
        assert!(matches!(
            other.keys("~/k", Tier::Local, 0, 10),
            Err(StateError::BadArgument)
        ));
    }
}
