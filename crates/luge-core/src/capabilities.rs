//! Capabilities: what an action may touch, granted by annotations.
//!
//! Deny by default: a sandbox sees no directory, no host environment and no
//! argv beyond what its annotations grant. Directory grants are resolved at
//! init under the operator's `--fs-root`; absolute paths, `..` components and
//! symlinks that lead out of the root are refused there, before any
//! invocation runs.
//!
//! Annotations arrive either as a JSON object (`{"wasi.env": {...}}`) or in
//! OpenWhisk's list form (`[{"key": "wasi.env", "value": {...}}]`). Keys
//! outside Luge's namespaces (`wasi.`, `limits.`, `sched.`) are OpenWhisk's
//! own and are ignored; an unknown key inside them is an error, so a typo does
//! not silently drop a limit.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::action::SchedHints;
use crate::limits::RequestedLimits;

/// Read-only or read-write access to a granted directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirMode {
    /// Files may be read, nothing created, changed or removed.
    ReadOnly,
    /// Full access inside the directory.
    ReadWrite,
}

/// A host directory preopened in the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirGrant {
    /// Canonical host path, inside the fs root.
    pub host: PathBuf,
    /// Path the guest opens it by.
    pub guest: String,
    /// Access mode.
    pub mode: DirMode,
}

/// Resolved grants of an action.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Preopened directories.
    pub dirs: Vec<DirGrant>,
    /// `argv[1..]`.
    pub args: Vec<String>,
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

/// Everything Luge reads from an action's annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Annotations {
    /// `wasi.dirs` (and WOW's `dir`).
    pub dirs: Vec<DirRequest>,
    /// `wasi.env`.
    pub env: Vec<(String, String)>,
    /// `wasi.args`.
    pub args: Vec<String>,
    /// `limits.*`.
    pub limits: RequestedLimits,
    /// `sched.*`.
    pub sched: SchedHints,
    /// WOW's `net_access`; accepted for compatibility. WASI preview 1 has no
    /// sockets, so a sandbox has no network either way.
    pub net_access: bool,
}

/// Why annotations or grants were refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GrantError {
    /// Annotations that are neither an object nor a key/value list.
    #[error("annotations must be an object or a list of {{\"key\", \"value\"}} pairs")]
    Shape,
    /// A Luge key that does not exist.
    #[error("unknown annotation {0}")]
    UnknownKey(String),
    /// A value of the wrong type or form.
    #[error("annotation {key}: {reason}")]
    BadValue {
        /// Annotation key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// Directory grants without an operator fs root.
    #[error("directory grants need the operator's --fs-root; none is configured")]
    NoFsRoot,
    /// `/abs/path` as a host path.
    #[error(
        "directory grant {0:?}: host paths are relative to the fs root; absolute paths are refused"
    )]
    Absolute(String),
    /// `..` in a path.
    #[error("directory grant {0:?}: '..' escapes are refused")]
    DotDot(String),
    /// Resolves (through symlinks) outside the fs root.
    #[error("directory grant {0:?} resolves outside the fs root")]
    OutsideRoot(String),
    /// Missing or not a directory.
    #[error("directory grant {path:?}: {reason}")]
    NotADirectory {
        /// Requested host path.
        path: String,
        /// What the filesystem said.
        reason: String,
    },
}

fn bad(key: &str, reason: impl Into<String>) -> GrantError {
    GrantError::BadValue {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

/// Renders a JSON value as an environment string the way OpenWhisk's proxies
/// do: strings as-is, `null` as empty, everything else as JSON text.
pub fn env_value(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl Annotations {
    /// Parses annotations in object or list form.
    pub fn parse(value: &Value) -> Result<Self, GrantError> {
        let mut out = Self::default();
        match value {
            Value::Null => {}
            Value::Object(map) => {
                for (k, v) in map {
                    out.set(k, v)?;
                }
            }
            Value::Array(items) => {
                for item in items {
                    let key = item.get("key").and_then(Value::as_str);
                    let value = item.get("value");
                    match (key, value) {
                        (Some(k), Some(v)) => out.set(k, v)?,
                        _ => return Err(GrantError::Shape),
                    }
                }
            }
            _ => return Err(GrantError::Shape),
        }
        Ok(out)
    }

    fn set(&mut self, key: &str, value: &Value) -> Result<(), GrantError> {
        match key {
            "wasi.dirs" => {
                let list = value
                    .as_array()
                    .ok_or_else(|| bad(key, "expected a list"))?;
                for dir in list {
                    self.dirs.push(parse_dir(key, dir)?);
                }
            }
            // WOW's single-directory grant: the same relative path in the
            // guest, read-only (deny-by-default: write needs wasi.dirs).
            "dir" => {
                let host = value
                    .as_str()
                    .ok_or_else(|| bad(key, "expected a string"))?;
                self.dirs.push(DirRequest {
                    host: host.to_owned(),
                    guest: host.to_owned(),
                    mode: DirMode::ReadOnly,
                });
            }
            "net_access" => {
                self.net_access = value
                    .as_bool()
                    .ok_or_else(|| bad(key, "expected a boolean"))?;
            }
            "wasi.env" => {
                let map = value
                    .as_object()
                    .ok_or_else(|| bad(key, "expected an object"))?;
                for (k, v) in map {
                    if k.is_empty() || k.contains('=') || k.contains('\0') {
                        return Err(bad(key, format!("invalid variable name {k:?}")));
                    }
                    self.env.push((k.clone(), env_value(v)));
                }
            }
            "wasi.args" => {
                let list = value
                    .as_array()
                    .ok_or_else(|| bad(key, "expected a list"))?;
                for arg in list {
                    let arg = arg.as_str().ok_or_else(|| bad(key, "expected strings"))?;
                    self.args.push(arg.to_owned());
                }
            }
            "limits.memory_mb" => self.limits.memory_mb = Some(as_u64(key, value)?),
            "limits.timeout_ms" => self.limits.timeout_ms = Some(as_u64(key, value)?),
            "limits.fuel" => self.limits.fuel = Some(as_u64(key, value)?),
            "sched.relative_deadline_us" => {
                self.sched.relative_deadline = Some(Duration::from_micros(as_u64(key, value)?));
            }
            "sched.expected_execution_us" => {
                self.sched.expected_execution = Some(Duration::from_micros(as_u64(key, value)?));
            }
            k if k.starts_with("wasi.") || k.starts_with("limits.") || k.starts_with("sched.") => {
                return Err(GrantError::UnknownKey(k.to_owned()));
            }
            _ => {}
        }
        Ok(())
    }
}

fn as_u64(key: &str, value: &Value) -> Result<u64, GrantError> {
    value
        .as_u64()
        .ok_or_else(|| bad(key, "expected a non-negative integer"))
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

impl Capabilities {
    /// Resolves requested grants under `fs_root`.
    pub fn grant(annotations: &Annotations, fs_root: Option<&Path>) -> Result<Self, GrantError> {
        let mut dirs = Vec::with_capacity(annotations.dirs.len());
        if !annotations.dirs.is_empty() {
            let root = fs_root.ok_or(GrantError::NoFsRoot)?;
            let root = root.canonicalize().map_err(|e| GrantError::NotADirectory {
                path: root.display().to_string(),
                reason: e.to_string(),
            })?;
            for request in &annotations.dirs {
                dirs.push(DirGrant {
                    host: resolve_under(&root, &request.host)?,
                    guest: request.guest.clone(),
                    mode: request.mode,
                });
            }
        }
        Ok(Self {
            dirs,
            args: annotations.args.clone(),
        })
    }
}

/// Resolves `host` under the canonical `root`, refusing every way out.
fn resolve_under(root: &Path, host: &str) -> Result<PathBuf, GrantError> {
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
    let resolved = root
        .join(path)
        .canonicalize()
        .map_err(|e| GrantError::NotADirectory {
            path: host.to_owned(),
            reason: e.to_string(),
        })?;
    // Canonicalisation followed every symlink; what remains must be inside.
    if !resolved.starts_with(root) {
        return Err(GrantError::OutsideRoot(host.to_owned()));
    }
    if !resolved.is_dir() {
        return Err(GrantError::NotADirectory {
            path: host.to_owned(),
            reason: "not a directory".to_owned(),
        });
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn object_and_list_forms_agree() {
        let object = json!({"wasi.env": {"A": "1", "B": 2}, "wasi.args": ["x"], "limits.timeout_ms": 50, "exec": "wasm"});
        let list = json!([
            {"key": "wasi.env", "value": {"A": "1", "B": 2}},
            {"key": "wasi.args", "value": ["x"]},
            {"key": "limits.timeout_ms", "value": 50},
            {"key": "exec", "value": "wasm"}
        ]);
        let a = Annotations::parse(&object).unwrap();
        assert_eq!(a, Annotations::parse(&list).unwrap());
        assert_eq!(
            a.env,
            vec![("A".into(), "1".into()), ("B".into(), "2".into())]
        );
        assert_eq!(a.limits.timeout_ms, Some(50));
    }

    #[test]
    fn unknown_luge_keys_and_bad_values_are_errors() {
        assert_eq!(
            Annotations::parse(&json!({"limits.memroy_mb": 5})),
            Err(GrantError::UnknownKey("limits.memroy_mb".into()))
        );
        assert!(Annotations::parse(&json!({"limits.memory_mb": "lots"})).is_err());
        assert!(
            Annotations::parse(
                &json!({"wasi.dirs": [{"host": "a", "guest": "/a", "mode": "rwx"}]})
            )
            .is_err()
        );
        assert!(Annotations::parse(&json!("nope")).is_err());
    }

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
        assert!(matches!(grant("/etc"), Err(GrantError::Absolute(_))));
        assert!(matches!(
            grant("data/../../etc"),
            Err(GrantError::DotDot(_))
        ));
        assert!(matches!(grant("link"), Err(GrantError::OutsideRoot(_))));
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
}
