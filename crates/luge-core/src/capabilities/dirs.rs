//! The directory slice: `wasi.dirs` (and WOW's `dir`) annotations, their
//! resolution beneath the operator's `--fs-root`, and the held grants an
//! engine preopens.
//!
//! A granted directory is opened once, at init, by walking from the fs root
//! one component at a time with `O_NOFOLLOW`, and the [`DirGrant`] holds that
//! descriptor for as long as the action lives. Engines open a grant only
//! through [`DirGrant::path`], a `/proc/self/fd` link the kernel resolves to
//! the held directory itself, never to whatever now sits at its old path: a
//! guest that renames a granted directory and leaves a symlink in its place,
//! or a host that swaps one, cannot make a later run's grant point anywhere
//! else.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, Mode, OFlags};
use serde_json::Value;

use super::error::{GrantError, bad};

/// Read-only or read-write access to a granted directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirMode {
    /// Files may be read, nothing created, changed or removed.
    ReadOnly,
    /// Full access inside the directory.
    ReadWrite,
}

/// Directory grants one action may hold. Each holds a descriptor open for
/// the action's lifetime; sixteen is more than any function has needed and
/// keeps a hostile init from spending the executor's descriptors.
pub const MAX_DIR_GRANTS: usize = 16;

/// A host directory preopened in the sandbox, held open since it was
/// granted.
#[derive(Debug, Clone)]
pub struct DirGrant {
    /// Where the directory was when it was granted. For messages only:
    /// sandboxes open [`DirGrant::path`], never this.
    pub host: PathBuf,
    /// Path the guest opens it by.
    pub guest: String,
    /// Access mode.
    pub mode: DirMode,
    dir: Arc<OwnedFd>,
}

impl PartialEq for DirGrant {
    fn eq(&self, other: &Self) -> bool {
        self.host == other.host && self.guest == other.guest && self.mode == other.mode
    }
}

impl Eq for DirGrant {}

impl DirGrant {
    /// Grants the operator-named directory `host` as is (symlinks followed:
    /// the operator's own path). Tenant-named grants go through
    /// `Capabilities::grant`, which opens them beneath the fs root.
    pub fn open(host: &Path, guest: &str, mode: DirMode) -> Result<Self, GrantError> {
        let not_dir = |e: rustix::io::Errno| GrantError::NotADirectory {
            path: host.display().to_string(),
            reason: std::io::Error::from(e).to_string(),
        };
        let dir = rustix::fs::open(host, dir_flags(), Mode::empty()).map_err(not_dir)?;
        Self::held(dir, host.to_owned(), guest, mode)
    }

    fn held(dir: OwnedFd, host: PathBuf, guest: &str, mode: DirMode) -> Result<Self, GrantError> {
        let grant = Self {
            host,
            guest: guest.to_owned(),
            mode,
            dir: Arc::new(dir),
        };
        // Engines reach the held directory through /proc; without it they
        // would open something else, so a grant fails here instead.
        let held = rustix::fs::fstat(grant.dir.as_fd());
        let linked = rustix::fs::stat(grant.path());
        match (held, linked) {
            (Ok(a), Ok(b)) if a.st_dev == b.st_dev && a.st_ino == b.st_ino => Ok(grant),
            _ => Err(GrantError::NotADirectory {
                path: grant.host.display().to_string(),
                reason: "directory grants need /proc mounted (held directories are opened through /proc/self/fd)".to_owned(),
            }),
        }
    }

    /// The path an engine opens to preopen this grant: `/proc/self/fd/N`,
    /// which the kernel resolves to the directory held since init, wherever
    /// it has been moved and whatever now sits at its old path.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_raw_fd()))
    }
}

/// Flags of every directory open: a directory, read-only, not inherited.
fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC
}

/// A directory grant as requested, before resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirRequest {
    /// Host path relative to the fs root.
    pub host: String,
    /// Guest path.
    pub guest: String,
    /// Access mode.
    pub mode: DirMode,
}

/// This slice's annotation keys: `wasi.dirs`, a list of `{"host",
/// "guest", "mode"}`, and WOW's `dir`, one path granted read-only at the
/// same guest path (deny-by-default: write needs `wasi.dirs`). Whether
/// `key` was this slice's.
pub(super) fn annotate(
    out: &mut Vec<DirRequest>,
    key: &str,
    value: &Value,
) -> Result<bool, GrantError> {
    match key {
        "wasi.dirs" => {
            let list = value
                .as_array()
                .ok_or_else(|| bad(key, "expected a list"))?;
            for dir in list {
                out.push(parse_dir(key, dir)?);
            }
        }
        "dir" => {
            let host = value
                .as_str()
                .ok_or_else(|| bad(key, "expected a string"))?;
            out.push(DirRequest {
                host: host.to_owned(),
                guest: host.to_owned(),
                mode: DirMode::ReadOnly,
            });
        }
        _ => return Ok(false),
    }
    Ok(true)
}

fn parse_dir(key: &str, dir: &Value) -> Result<DirRequest, GrantError> {
    let field = |name: &str| dir.get(name).and_then(Value::as_str);
    let host = field("host").ok_or_else(|| bad(key, "each entry needs a string \"host\""))?;
    let guest = field("guest").ok_or_else(|| bad(key, "each entry needs a string \"guest\""))?;
    let mode = match field("mode").unwrap_or("ro") {
        "ro" => DirMode::ReadOnly,
        "rw" => DirMode::ReadWrite,
        other => {
            return Err(bad(
                key,
                format!("mode must be \"ro\" or \"rw\", not {other:?}"),
            ));
        }
    };
    if guest.is_empty()
        || Path::new(guest)
            .components()
            .any(|c| c == Component::ParentDir)
    {
        return Err(bad(key, format!("invalid guest path {guest:?}")));
    }
    Ok(DirRequest {
        host: host.to_owned(),
        guest: guest.to_owned(),
        mode,
    })
}

/// Resolves `requests` beneath `fs_root` and opens each: at most
/// [`MAX_DIR_GRANTS`], none without a root.
pub(super) fn grant(
    requests: &[DirRequest],
    fs_root: Option<&Path>,
) -> Result<Vec<DirGrant>, GrantError> {
    if requests.len() > MAX_DIR_GRANTS {
        return Err(GrantError::TooMany(MAX_DIR_GRANTS));
    }
    let mut dirs = Vec::with_capacity(requests.len());
    if requests.is_empty() {
        return Ok(dirs);
    }
    let root = fs_root.ok_or(GrantError::NoFsRoot)?;
    let not_dir = |e: std::io::Error| GrantError::NotADirectory {
        path: root.display().to_string(),
        reason: e.to_string(),
    };
    let canonical = root.canonicalize().map_err(not_dir)?;
    let root_dir =
        rustix::fs::open(&canonical, dir_flags(), Mode::empty()).map_err(|e| not_dir(e.into()))?;
    for request in requests {
        let dir = open_beneath(&root_dir, &request.host)?;
        dirs.push(DirGrant::held(
            dir,
            canonical.join(&request.host),
            &request.guest,
            request.mode,
        )?);
    }
    Ok(dirs)
}

/// Opens `host` beneath `root`, one component at a time, following no
/// symlink: every way out (absolute paths, `..`, symlinks) is refused.
fn open_beneath(root: &OwnedFd, host: &str) -> Result<OwnedFd, GrantError> {
    let path = Path::new(host);
    for component in path.components() {
        match component {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => return Err(GrantError::DotDot(host.to_owned())),
            Component::RootDir | Component::Prefix(_) => {
                return Err(GrantError::Absolute(host.to_owned()));
            }
        }
    }
    let mut dir: Option<OwnedFd> = None;
    for component in path.components() {
        let Component::Normal(name) = component else {
            continue;
        };
        let parent = dir.as_ref().unwrap_or(root);
        let next = rustix::fs::openat(parent, name, dir_flags() | OFlags::NOFOLLOW, Mode::empty())
            .map_err(|errno| {
                // Say why: a symlink, not a directory, or missing.
                match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode).is_symlink() => {
                        GrantError::Symlink(host.to_owned())
                    }
                    Ok(_) if errno == rustix::io::Errno::NOTDIR => GrantError::NotADirectory {
                        path: host.to_owned(),
                        reason: "not a directory".to_owned(),
                    },
                    _ => GrantError::NotADirectory {
                        path: host.to_owned(),
                        reason: std::io::Error::from(errno).to_string(),
                    },
                }
            })?;
        dir = Some(next);
    }
    match dir {
        Some(dir) => Ok(dir),
        // "" or "." grants the root itself.
        None => rustix::fs::openat(root, ".", dir_flags(), Mode::empty()).map_err(|e| {
            GrantError::NotADirectory {
                path: host.to_owned(),
                reason: std::io::Error::from(e).to_string(),
            }
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::capabilities::{Annotations, Capabilities};

    #[test]
    fn grants_resolve_inside_root_only() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("data/x")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("link")).unwrap();
        std::fs::write(root.path().join("file"), b"").unwrap();

        let grant = |host: &str| {
            let ann =
                Annotations::parse(&json!({"wasi.dirs": [{"host": host, "guest": "/d"}]})).unwrap();
            Capabilities::grant(&ann, Some(root.path()))
        };
        let ok = grant("data/x").unwrap();
        assert!(ok.dirs[0].host.ends_with("data/x"));
        assert_eq!(ok.dirs[0].mode, DirMode::ReadOnly);
        assert!(ok.dirs[0].path().starts_with("/proc/self/fd/"));
        assert!(matches!(grant("/etc"), Err(GrantError::Absolute(_))));
        assert!(matches!(
            grant("data/../../etc"),
            Err(GrantError::DotDot(_))
        ));
        assert!(matches!(grant("link"), Err(GrantError::Symlink(_))));
        // A symlink that stays inside is refused too: it could be swapped.
        std::os::unix::fs::symlink("data", root.path().join("inside")).unwrap();
        assert!(matches!(grant("inside/x"), Err(GrantError::Symlink(_))));
        assert!(matches!(
            grant("missing"),
            Err(GrantError::NotADirectory { .. })
        ));
        assert!(matches!(
            grant("file"),
            Err(GrantError::NotADirectory { .. })
        ));

        let ann = Annotations::parse(&json!({"dir": "data"})).unwrap();
        assert_eq!(Capabilities::grant(&ann, None), Err(GrantError::NoFsRoot));
    }

    #[test]
    fn a_grant_stays_on_the_directory_it_opened() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("data/sub")).unwrap();
        std::fs::write(root.path().join("data/sub/mine.txt"), "mine").unwrap();
        std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
        let ann = Annotations::parse(&json!({"wasi.dirs": [{"host": "data/sub", "guest": "/d"}]}))
            .unwrap();
        let caps = Capabilities::grant(&ann, Some(root.path())).unwrap();
        // Moved away, and a symlink to outside put in its place.
        std::fs::rename(root.path().join("data/sub"), root.path().join("data/moved")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("data/sub")).unwrap();
        let through = caps.dirs[0].path();
        assert_eq!(
            std::fs::read_to_string(through.join("mine.txt")).unwrap(),
            "mine"
        );
        assert!(!through.join("secret.txt").exists());
    }

    #[test]
    fn grants_are_bounded() {
        let root = tempfile::tempdir().unwrap();
        let many: Vec<_> = (0..=MAX_DIR_GRANTS)
            .map(|i| json!({"host": ".", "guest": format!("/d{i}")}))
            .collect();
        let ann = Annotations::parse(&json!({ "wasi.dirs": many })).unwrap();
        assert_eq!(
            Capabilities::grant(&ann, Some(root.path())),
            Err(GrantError::TooMany(MAX_DIR_GRANTS))
        );
    }
}
