//! The local tier: one in-memory map per namespace, shared by every
//! sandbox of the host, each namespace behind its own mutex (operations on
//! one namespace are atomic with respect to each other; namespaces do not
//! contend). With a directory, every change is written to an embedded
//! store (fjall) before it is applied in memory, and the maps are loaded
//! from it at start.
//!
//! A failed write (a full disk, an I/O error) fails the operation (store
//! unavailable) and changes nothing in memory. The store then refuses
//! every write ("poisoned": it cannot vouch for its journal's tail), so the
//! tier reopens it, which recovers the journal as a restart would, at
//! most once per [`REOPEN_INTERVAL`] while writes keep failing, and
//! reloads each namespace from it: once space returns, writes succeed
//! again without a restart, and memory holds what the disk holds.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use luge_core::state::StateError;

use crate::Quotas;

/// One namespace's values and their total size.
#[derive(Debug, Default)]
struct Namespace {
    /// Ordered, so that its keys are listed in pages.
    values: BTreeMap<String, Arc<[u8]>>,
    bytes: usize,
}

/// What an update does to its key.
pub(crate) enum Change {
    /// Nothing.
    Keep,
    /// Sets it.
    Set(Vec<u8>),
    /// Deletes it.
    Delete,
}

struct Disk {
    db: fjall::Database,
    values: fjall::Keyspace,
}

/// How often a failing store is reopened at most: often enough that writes
/// resume within a second of space returning, rarely enough that a full
/// disk costs little (each reopen reads the store's manifest and journal).
pub(crate) const REOPEN_INTERVAL: Duration = Duration::from_secs(1);

/// The store, and how to open it again.
struct Persisted {
    dir: PathBuf,
    /// `None` while a reopen has failed: writes fail until one succeeds.
    /// Writers hold the read side while they write; a reopen takes the
    /// write side to swap the store (the lock order is namespace, then
    /// this; a reopen holds no namespace while it holds this).
    disk: RwLock<Option<Disk>>,
    /// Whether writes are failing and the store is to be reopened.
    failing: Mutex<Failing>,
}

impl Failing {
    fn reopen_due(self) -> bool {
        match self {
            Self::No => false,
            Self::ReopenDue => true,
            Self::ReopenTried(at) => at.elapsed() >= REOPEN_INTERVAL,
        }
    }
}

/// The store's health as writes found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failing {
    /// Writes succeed.
    No,
    /// A write failed: the next writer reopens the store first.
    ReopenDue,
    /// A reopen was tried then (or is under way); the next is due an
    /// interval later.
    ReopenTried(Instant),
}

/// The host's local tier.
pub(crate) struct LocalTier {
    namespaces: RwLock<HashMap<String, Arc<Mutex<Namespace>>>>,
    disk: Option<Persisted>,
}

impl std::fmt::Debug for LocalTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalTier")
            .field("persisted", &self.disk.is_some())
            .finish_non_exhaustive()
    }
}

impl Namespace {
    fn insert(&mut self, rest: &str, value: &[u8]) {
        self.bytes += value.len();
        if let Some(old) = self.values.insert(rest.to_owned(), Arc::from(value)) {
            self.bytes -= old.len();
        }
    }
}

/// The store's memtable: writes are held in memory up to this many bytes
/// of keys and values, then written out as a table on disk. Every write
/// adds to it, an overwrite of a key as much as a new key (an LSM tree
/// keeps each version until the flush), so this bounds what a churn of
/// writes holds in memory beside the maps. A small write (a 40-byte key
/// and value) costs about 130 bytes of RSS there, so 8 MiB, the low end
/// of fjall's recommended range, holds about 20 MiB and flushes every
/// 170,000 or so such writes; fjall's default, 64 MiB, let about 160 MiB
/// build up first (docs/BENCHMARKS-ARCHIVE.md, "The soak's own state").
const MEMTABLE_BYTES: u64 = 8 << 20;

/// The store's block cache. Reads are served from the in-memory maps; the
/// store is read only at start and at a reopen, one pass over every value,
/// which a cache does not speed up. fjall's default, 32 MiB, would keep
/// the blocks of that pass: a second copy of values the maps hold.
const CACHE_BYTES: u64 = 1 << 20;

fn open_disk(dir: &Path) -> Result<Disk, fjall::Error> {
    let db = fjall::Database::builder(dir)
        .cache_size(CACHE_BYTES)
        .open()?;
    let values = db.keyspace("values", || {
        fjall::KeyspaceCreateOptions::default().max_memtable_size(MEMTABLE_BYTES)
    })?;
    Ok(Disk { db, values })
}

impl Persisted {
    fn read(&self) -> RwLockReadGuard<'_, Option<Disk>> {
        // Swapped whole under the write side: never half-updated.
        self.disk.read().unwrap_or_else(|e| e.into_inner())
    }

    fn failing(&self) -> MutexGuard<'_, Failing> {
        self.failing.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a write failed and a reopen is due.
    fn needs_reopen(&self) -> bool {
        self.failing().reopen_due()
    }

    /// Records a failed write: a reopen is due unless one was just tried.
    fn write_failed(&self) {
        let mut failing = self.failing();
        if *failing == Failing::No {
            *failing = Failing::ReopenDue;
        }
    }

    /// Namespace `ns` as the store holds it; `None` if it cannot be read
    /// (memory then keeps what it has).
    fn load(&self, ns: &str) -> Option<Namespace> {
        let disk = self.read();
        let disk = disk.as_ref()?;
        let prefix = disk_key(ns, "");
        let mut namespace = Namespace::default();
        for guard in disk.values.prefix(prefix.as_bytes()) {
            let (key, value) = guard.into_inner().ok()?;
            let rest = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
            namespace.insert(&rest, &value);
        }
        Some(namespace)
    }
}

/// `ns/rest` as stored on disk.
fn disk_key(ns: &str, rest: &str) -> String {
    format!("{ns}/{rest}")
}

impl LocalTier {
    /// An empty tier kept in memory only.
    pub fn in_memory() -> Self {
        Self {
            namespaces: RwLock::default(),
            disk: None,
        }
    }

    /// The tier persisted under `dir`, loaded from what is there.
    pub fn open(dir: &Path) -> Result<Self, crate::OpenError> {
        let store = |source| crate::OpenError::Store {
            dir: dir.to_owned(),
            source,
        };
        let disk = open_disk(dir).map_err(store)?;
        let mut namespaces: HashMap<String, Namespace> = HashMap::new();
        for guard in disk.values.iter() {
            let (key, value) = guard.into_inner().map_err(store)?;
            let key = String::from_utf8_lossy(&key).into_owned();
            let Some((ns, rest)) = key.split_once('/') else {
                continue;
            };
            namespaces
                .entry(ns.to_owned())
                .or_default()
                .insert(rest, &value);
        }
        let namespaces = namespaces
            .into_iter()
            .map(|(ns, n)| (ns, Arc::new(Mutex::new(n))))
            .collect();
        Ok(Self {
            namespaces: RwLock::new(namespaces),
            disk: Some(Persisted {
                dir: dir.to_owned(),
                disk: RwLock::new(Some(disk)),
                failing: Mutex::new(Failing::No),
            }),
        })
    }

    fn namespace(&self, ns: &str) -> Arc<Mutex<Namespace>> {
        let read = self.namespaces.read().unwrap_or_else(|e| e.into_inner());
        if let Some(namespace) = read.get(ns) {
            return Arc::clone(namespace);
        }
        drop(read);
        let mut write = self.namespaces.write().unwrap_or_else(|e| e.into_inner());
        Arc::clone(write.entry(ns.to_owned()).or_default())
    }

    fn lock(namespace: &Mutex<Namespace>) -> MutexGuard<'_, Namespace> {
        // Every update leaves the map consistent before it can panic.
        namespace.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value of `rest` in `ns`.
    pub fn get(&self, ns: &str, rest: &str) -> Option<Arc<[u8]>> {
        let namespace = self.namespace(ns);
        let guard = Self::lock(&namespace);
        guard.values.get(rest).cloned()
    }

    /// One page of the keys of `ns`, in order: at most `limit` from the
    /// `cursor`-th, and the cursor of the next page.
    pub fn keys(&self, ns: &str, cursor: u64, limit: usize) -> luge_core::state::KeyPage {
        let namespace = self.namespace(ns);
        let guard = Self::lock(&namespace);
        luge_core::state::page(guard.values.keys(), cursor, limit)
    }

    /// Applies `f` to the value of `rest` in `ns` atomically: `f` sees the
    /// current value and says what to change and what to return. The
    /// change is checked against `quotas`, written to disk, then applied.
    pub fn update<R>(
        &self,
        ns: &str,
        rest: &str,
        quotas: &Quotas,
        f: impl FnOnce(Option<&[u8]>) -> Result<(Change, R), StateError>,
    ) -> Result<R, StateError> {
        let namespace = self.namespace(ns);
        let mut guard = Self::lock(&namespace);
        if let Some(persisted) = &self.disk
            && persisted.needs_reopen()
        {
            self.reopen(persisted, ns, &mut guard);
        }
        let current = guard.values.get(rest).cloned();
        let (change, result) = f(current.as_deref())?;
        let old_len = current.as_ref().map_or(0, |v| v.len());
        match change {
            Change::Keep => {}
            Change::Set(value) => {
                if value.len() > quotas.max_value_bytes {
                    return Err(StateError::OverQuota);
                }
                let is_new = current.is_none();
                if is_new && guard.values.len() >= quotas.max_keys_per_namespace {
                    return Err(StateError::OverQuota);
                }
                let bytes = guard.bytes - old_len + value.len();
                if bytes > quotas.max_bytes_per_namespace {
                    return Err(StateError::OverQuota);
                }
                self.write(|values| values.insert(disk_key(ns, rest), value.as_slice()))?;
                guard.bytes = bytes;
                guard.values.insert(rest.to_owned(), Arc::from(value));
            }
            Change::Delete => {
                if current.is_some() {
                    self.write(|values| values.remove(disk_key(ns, rest)))?;
                    guard.bytes -= old_len;
                    guard.values.remove(rest);
                }
            }
        }
        Ok(result)
    }

    /// Writes the journal to disk (fsync): at a clean shutdown.
    pub fn sync(&self) {
        if let Some(persisted) = &self.disk
            && let Some(disk) = persisted.read().as_ref()
            && let Err(e) = disk.db.persist(fjall::PersistMode::SyncAll)
        {
            tracing::warn!(error = %e, "state store: sync failed");
        }
    }

    /// Runs one write on the store, if the tier has one (the caller holds
    /// the lock of the namespace written). A failure marks the store for
    /// a reopen.
    fn write(
        &self,
        write: impl FnOnce(&fjall::Keyspace) -> Result<(), fjall::Error>,
    ) -> Result<(), StateError> {
        let Some(persisted) = &self.disk else {
            return Ok(());
        };
        let disk = persisted.read();
        let Some(disk) = disk.as_ref() else {
            // A reopen failed; the next is due at its interval.
            return Err(StateError::Unavailable);
        };
        write(&disk.values).map_err(|e| {
            tracing::warn!(error = %e, "state store: write failed");
            persisted.write_failed();
            StateError::Unavailable
        })
    }

    /// Opens the store again and reloads every namespace from it. `held`
    /// is the namespace whose lock the calling writer holds (`guard`):
    /// reloaded through it.
    fn reopen(&self, persisted: &Persisted, held: &str, guard: &mut Namespace) {
        {
            let mut failing = persisted.failing();
            if !failing.reopen_due() {
                // Another writer reopens, or did within the interval.
                return;
            }
            *failing = Failing::ReopenTried(Instant::now());
        }
        let reopened = {
            let mut disk = persisted.disk.write().unwrap_or_else(|e| e.into_inner());
            // The old store is closed before the new one opens the same
            // directory.
            drop(disk.take());
            match open_disk(&persisted.dir) {
                Ok(fresh) => {
                    *disk = Some(fresh);
                    true
                }
                Err(e) => {
                    tracing::warn!(error = %e, "state store: reopen failed; writes fail until it succeeds");
                    false
                }
            }
        };
        if !reopened {
            return;
        }
        // Memory takes what the disk holds: a failed write may have reached
        // the journal whole. Namespace by namespace, each under its lock
        // (taken before the store's, as writers do), so no write is lost.
        let names: Vec<(String, Arc<Mutex<Namespace>>)> = self
            .namespaces
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(name, ns)| (name.clone(), Arc::clone(ns)))
            .collect();
        for (name, namespace) in names {
            if name == held {
                continue;
            }
            let mut other = Self::lock(&namespace);
            if let Some(loaded) = persisted.load(&name) {
                *other = loaded;
            }
        }
        if let Some(loaded) = persisted.load(held) {
            *guard = loaded;
        }
        *persisted.failing() = Failing::No;
        tracing::info!("state store reopened");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Overwrites of a few keys past [`MEMTABLE_BYTES`] are written out to
    /// a table on disk rather than held in the store's memory (with
    /// fjall's default of 64 MiB, 16 MiB of them stay in the memtable),
    /// and the last value of each key is what a restart reads back.
    #[test]
    fn overwrites_past_the_memtable_bound_go_to_disk() {
        let dir = tempfile::tempdir().expect("a directory");
        let tier = LocalTier::open(dir.path()).expect("opens");
        let quotas = Quotas::default();
        let value = vec![7u8; 4096];
        let writes = 2 * MEMTABLE_BYTES as usize / value.len();
        for i in 0..writes {
            let mut last = value.clone();
            last[..8].copy_from_slice(&(i as u64).to_le_bytes());
            tier.update("ns", &format!("k{}", i % 16), &quotas, |_| {
                Ok((Change::Set(last), ()))
            })
            .expect("written");
        }
        let tables = || {
            let persisted = tier.disk.as_ref().expect("persisted");
            let disk = persisted.read();
            disk.as_ref().expect("open").values.table_count()
        };
        // Flushes run on the store's own threads.
        let deadline = Instant::now() + Duration::from_secs(20);
        while tables() == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(tables() > 0, "no table written after {writes} writes");
        drop(tier);
        let reopened = LocalTier::open(dir.path()).expect("reopens");
        for k in 0..16 {
            let newest = (0..writes).rev().find(|i| i % 16 == k).expect("written");
            let got = reopened.get("ns", &format!("k{k}")).expect("a value");
            assert_eq!(got[..8], (newest as u64).to_le_bytes());
        }
    }
}
