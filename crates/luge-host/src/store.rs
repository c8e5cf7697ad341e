//! The durable store of uploaded functions.
//!
//! One file per function, `{name}.fn`: a magic line, the length of the
//! metadata, the metadata as JSON, then the sealed artifact. One file means
//! one atomic rename per upload (see [`write_atomically`]): after a crash
//! the store holds the old version or the new one, never half of either,
//! and never a new artifact beside old metadata. Temp files a crash left
//! behind are removed when the store opens. The artifact inside is
//! authenticated again when loaded, like any artifact.

use std::path::{Path, PathBuf};

use luge_registry::write_atomically;
use serde::{Deserialize, Serialize};

use crate::spec::FunctionSpec;

const MAGIC: &[u8; 8] = b"LUGEFN\x01\n";
const EXTENSION: &str = "fn";
/// Metadata is small; a larger length field means a damaged file.
const MAX_METADATA_BYTES: usize = 1 << 20;

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The filesystem refused.
    #[error("function store {path}: {source}")]
    Io {
        /// File or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A stored file is not a whole function.
    #[error("function store {path}: damaged file: {reason}")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

impl StoreError {
    /// Whether the filesystem refused for want of space (or quota): the
    /// store is unchanged and a retry can succeed once space returns.
    pub fn is_storage_full(&self) -> bool {
        matches!(self, Self::Io { source, .. }
            if matches!(source.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded))
    }
}

/// What is kept about an uploaded function besides its code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredMetadata {
    /// The function's name.
    pub name: String,
    /// Its route, deadline, limits and grants.
    pub spec: FunctionSpec,
    /// Seconds since the Unix epoch when it was uploaded.
    pub uploaded_at: u64,
}

/// A function read back from the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFunction {
    /// Its metadata.
    pub metadata: StoredMetadata,
    /// The sealed artifact.
    pub artifact: Vec<u8>,
}

/// Names of uploaded functions are file names and URL segments: keep them
/// to 1-64 letters, digits, `-` and `_`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Luge's data directory: `$XDG_DATA_HOME/luge`, else
/// `~/.local/share/luge`.
pub fn default_data_dir() -> PathBuf {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(std::env::temp_dir)
        .join("luge")
}

/// `--store`'s default once uploads are enabled: `functions` in the data
/// directory ([`default_data_dir`]).
pub fn default_store_dir() -> PathBuf {
    default_data_dir().join("functions")
}

/// A directory of stored functions.
#[derive(Debug, Clone)]
pub struct FunctionStore {
    dir: PathBuf,
}

impl FunctionStore {
    /// Opens (creating) the store at `dir`, removing temp files of writes a
    /// crash interrupted.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let io = |source| StoreError::Io {
            path: dir.to_owned(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.starts_with('.') && name.ends_with(".tmp") {
                tracing::warn!(path = %path.display(), "removing an interrupted upload");
                let _ = std::fs::remove_file(&path);
            }
        }
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.{EXTENSION}"))
    }

    /// Stores `artifact` and `metadata` as one file, durably, replacing any
    /// previous version whole.
    pub fn put(&self, metadata: &StoredMetadata, artifact: &[u8]) -> Result<(), StoreError> {
        let path = self.path(&metadata.name);
        let json = serde_json::to_vec(metadata).map_err(|e| StoreError::Damaged {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let mut bytes = Vec::with_capacity(MAGIC.len() + 4 + json.len() + artifact.len());
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&(json.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&json);
        bytes.extend_from_slice(artifact);
        write_atomically(&path, &bytes).map_err(|source| StoreError::Io { path, source })
    }

    /// Removes `name`; `false` if it was not stored.
    pub fn remove(&self, name: &str) -> Result<bool, StoreError> {
        let path = self.path(name);
        match std::fs::remove_file(&path) {
            Ok(()) => {
                // Make the removal durable too.
                let _ = std::fs::File::open(&self.dir).and_then(|d| d.sync_all());
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(StoreError::Io { path, source }),
        }
    }

    /// Every stored function, by name; a damaged file is an error in its
    /// slot and does not hide the others.
    pub fn load_all(&self) -> Result<Vec<Result<StoredFunction, StoreError>>, StoreError> {
        let io = |source| StoreError::Io {
            path: self.dir.clone(),
            source,
        };
        let mut paths = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            if path.extension().and_then(|e| e.to_str()) == Some(EXTENSION) && valid_name(stem) {
                paths.push(path);
            }
        }
        paths.sort();
        Ok(paths.iter().map(|p| read(p)).collect())
    }
}

fn read(path: &Path) -> Result<StoredFunction, StoreError> {
    let damaged = |reason: &str| StoreError::Damaged {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    let bytes = std::fs::read(path).map_err(|source| StoreError::Io {
        path: path.to_owned(),
        source,
    })?;
    let rest = bytes
        .strip_prefix(MAGIC.as_slice())
        .ok_or_else(|| damaged("not a Luge function file"))?;
    let (len, rest) = rest
        .split_first_chunk::<4>()
        .ok_or_else(|| damaged("truncated header"))?;
    let len = u32::from_le_bytes(*len) as usize;
    if len > MAX_METADATA_BYTES || len > rest.len() {
        return Err(damaged("truncated metadata"));
    }
    let (json, artifact) = rest.split_at(len);
    let metadata: StoredMetadata =
        serde_json::from_slice(json).map_err(|e| damaged(&format!("metadata: {e}")))?;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    if metadata.name != stem {
        return Err(damaged("metadata names another function"));
    }
    Ok(StoredFunction {
        metadata,
        artifact: artifact.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(name: &str) -> StoredMetadata {
        StoredMetadata {
            name: name.to_owned(),
            spec: FunctionSpec {
                relative_deadline_us: Some(1000),
                ..FunctionSpec::default()
            },
            uploaded_at: 1,
        }
    }

    #[test]
    fn put_load_replace_remove() {
        let dir = tempfile::tempdir().unwrap();
        let store = FunctionStore::open(dir.path()).unwrap();
        store.put(&metadata("a"), b"artifact v1").unwrap();
        store.put(&metadata("b"), b"artifact b").unwrap();
        store.put(&metadata("a"), b"artifact v2").unwrap();
        let all: Vec<_> = store
            .load_all()
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].metadata, metadata("a"));
        assert_eq!(all[0].artifact, b"artifact v2");
        assert!(store.remove("a").unwrap());
        assert!(!store.remove("a").unwrap());
        assert_eq!(store.load_all().unwrap().len(), 1);
    }

    #[test]
    fn interrupted_writes_are_cleaned_and_damage_is_isolated() {
        let dir = tempfile::tempdir().unwrap();
        let store = FunctionStore::open(dir.path()).unwrap();
        store.put(&metadata("good"), b"whole").unwrap();
        let whole = std::fs::read(dir.path().join("good.fn")).unwrap();
        // A crash mid-upload leaves a partial temp file...
        let tmp = dir.path().join(".good.fn.999.0.tmp");
        std::fs::write(&tmp, &whole[..whole.len() / 2]).unwrap();
        // ...and a damaged file (say, copied in by hand) must not hide others.
        std::fs::write(dir.path().join("bad.fn"), &whole[..12]).unwrap();
        let store = FunctionStore::open(dir.path()).unwrap();
        assert!(!tmp.exists());
        let all = store.load_all().unwrap();
        assert_eq!(all.len(), 2);
        assert!(matches!(&all[0], Err(StoreError::Damaged { .. })));
        assert_eq!(all[1].as_ref().unwrap().artifact, b"whole");
    }

    #[test]
    fn concurrent_puts_leave_one_whole_version() {
        let dir = tempfile::tempdir().unwrap();
        let store = FunctionStore::open(dir.path()).unwrap();
        let versions: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 256 * 1024]).collect();
        std::thread::scope(|s| {
            for v in &versions {
                let store = store.clone();
                s.spawn(move || store.put(&metadata("f"), v).unwrap());
            }
        });
        let all = store.load_all().unwrap();
        let stored = all[0].as_ref().unwrap();
        assert!(versions.contains(&stored.artifact));
        let leftovers = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(leftovers, 1, "no temp files remain");
    }

    #[test]
    fn names_are_tame() {
        for good in ["fib", "a-b_c", "X9"] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "../x", "a/b", "a.b", ".hidden", &"x".repeat(65)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
