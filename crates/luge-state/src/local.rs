//! The local tier: one in-memory map per namespace, shared by every
//! sandbox of the host, each namespace behind its own mutex (operations on
//! one namespace are atomic with respect to each other; namespaces do not
//! contend). With a directory, every change is written to an embedded
//! store (fjall) before it is applied in memory, and the maps are loaded
//! from it at start.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use luge_core::state::StateError;

use crate::Quotas;

/// One namespace's values and their total size.
#[derive(Debug, Default)]
struct Namespace {
    values: HashMap<String, Arc<[u8]>>,
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

/// The host's local tier.
pub(crate) struct LocalTier {
    namespaces: RwLock<HashMap<String, Arc<Mutex<Namespace>>>>,
    disk: Option<Disk>,
}

impl std::fmt::Debug for LocalTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalTier")
            .field("persisted", &self.disk.is_some())
            .finish_non_exhaustive()
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
        let db = fjall::Database::builder(dir).open().map_err(store)?;
        let values = db
            .keyspace("values", fjall::KeyspaceCreateOptions::default)
            .map_err(store)?;
        let mut namespaces: HashMap<String, Namespace> = HashMap::new();
        for guard in values.iter() {
            let (key, value) = guard.into_inner().map_err(store)?;
            let key = String::from_utf8_lossy(&key).into_owned();
            let Some((ns, rest)) = key.split_once('/') else {
                continue;
            };
            let namespace = namespaces.entry(ns.to_owned()).or_default();
            namespace.bytes += value.len();
            namespace
                .values
                .insert(rest.to_owned(), Arc::from(&value[..]));
        }
        let namespaces = namespaces
            .into_iter()
            .map(|(ns, n)| (ns, Arc::new(Mutex::new(n))))
            .collect();
        Ok(Self {
            namespaces: RwLock::new(namespaces),
            disk: Some(Disk { db, values }),
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
                if let Some(disk) = &self.disk {
                    disk.values
                        .insert(disk_key(ns, rest), value.as_slice())
                        .map_err(|e| disk_error(&e))?;
                }
                guard.bytes = bytes;
                guard.values.insert(rest.to_owned(), Arc::from(value));
            }
            Change::Delete => {
                if current.is_some() {
                    if let Some(disk) = &self.disk {
                        disk.values
                            .remove(disk_key(ns, rest))
                            .map_err(|e| disk_error(&e))?;
                    }
                    guard.bytes -= old_len;
                    guard.values.remove(rest);
                }
            }
        }
        Ok(result)
    }

    /// Writes the journal to disk (fsync): at a clean shutdown.
    pub fn sync(&self) {
        if let Some(disk) = &self.disk
            && let Err(e) = disk.db.persist(fjall::PersistMode::SyncAll)
        {
            tracing::warn!(error = %e, "state store: sync failed");
        }
    }
}

fn disk_error(e: &fjall::Error) -> StateError {
    tracing::warn!(error = %e, "state store: write failed");
    StateError::Unavailable
}
