//! Capabilities: what an action may touch, granted by annotations.
//!
//! Deny by default: a sandbox sees no directory, no host environment and no
//! argv beyond what its annotations grant. Directory grants are resolved at
//! init under the operator's `--fs-root`; absolute paths, `..` components and
//! symlinks are refused there, before any invocation runs.
//!
//! A granted directory is opened once, at init, by walking from the fs root
//! one component at a time with `O_NOFOLLOW`, and the [`DirGrant`] holds that
//! descriptor for as long as the action lives. Engines open a grant only
//! through [`DirGrant::path`], a `/proc/self/fd` link the kernel resolves to
//! the held directory itself, never to whatever now sits at its old path: a
//! guest that renames a granted directory and leaves a symlink in its place,
//! or a host that swaps one, cannot make a later run's grant point anywhere
//! else.
//!
//! Annotations arrive either as a JSON object (`{"wasi.env": {...}}`) or in
//! OpenWhisk's list form (`[{"key": "wasi.env", "value": {...}}]`). Keys
//! outside Luge's namespaces (`wasi.`, `limits.`, `sched.`) are OpenWhisk's
//! own and are ignored; an unknown key inside them is an error, so a typo does
//! not silently drop a limit.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustix::fs::{AtFlags, Mode, OFlags};

use serde_json::Value;

use crate::hints::SchedHints;
use crate::limits::RequestedLimits;

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
    /// [`Capabilities::grant`], which opens them beneath the fs root.
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

/// Resolved grants of an action.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Preopened directories.
    pub dirs: Vec<DirGrant>,
    /// `argv[1..]`.
    pub args: Vec<String>,
    /// Shared-state namespaces it may use besides its private one.
    pub state: Vec<String>,
    /// Origins an HTTP handler may send outgoing requests to, each
    /// `http://host:port` (the port always written); none by default.
    pub outbound_http: Vec<String>,
}

/// Most state namespaces one function may be granted.
pub const MAX_STATE_GRANTS: usize = 64;
/// Most outgoing-HTTP origins one function may be granted.
pub const MAX_OUTBOUND_GRANTS: usize = 64;
/// Most configuration variables one function may have (`config.variables`).
pub const MAX_VARIABLES: usize = 256;
/// Longest configuration variable name, bytes.
pub const MAX_VARIABLE_NAME_BYTES: usize = 128;
/// Largest configuration variable value, bytes (a certificate fits).
pub const MAX_VARIABLE_VALUE_BYTES: usize = 16 << 10;

/// Configuration variables by name. Values may be secrets: `Debug` shows
/// the names only, so no log line carries a value.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Variables(pub Vec<(String, String)>);

impl Variables {
    /// `pairs` as variables, if there are at most [`MAX_VARIABLES`] and
    /// each passes [`check_variable`]: the one check of every way variables
    /// arrive (annotations, configs, uploads, Spin manifests).
    pub fn checked(pairs: Vec<(String, String)>) -> Result<Self, String> {
        if pairs.len() > MAX_VARIABLES {
            return Err(format!("at most {MAX_VARIABLES} variables"));
        }
        for (name, value) in &pairs {
            check_variable(name, value)?;
        }
        Ok(Self(pairs))
    }
}

impl std::fmt::Debug for Variables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(name, _)| name))
            .finish()
    }
}

/// Checks one configuration variable: a name of lowercase ASCII letters,
/// digits and `_`, starting with a letter (Spin's rule, so a Spin app's
/// names carry over), within [`MAX_VARIABLE_NAME_BYTES`]; a value within
/// [`MAX_VARIABLE_VALUE_BYTES`].
pub fn check_variable(name: &str, value: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let starts_with_letter = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    if !starts_with_letter
        || name.len() > MAX_VARIABLE_NAME_BYTES
        || !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(format!(
            "invalid variable name {name:?}: lowercase letters, digits and '_', starting with a letter, at most {MAX_VARIABLE_NAME_BYTES} bytes"
        ));
    }
    if value.len() > MAX_VARIABLE_VALUE_BYTES {
        return Err(format!(
            "variable {name:?} is longer than {MAX_VARIABLE_VALUE_BYTES} bytes"
        ));
    }
    Ok(())
}

/// An origin that cannot be granted, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin:?}: {why}")]
pub struct OriginError {
    /// The origin as written.
    pub origin: String,
    /// Why it was refused.
    pub why: OriginRefusal,
}

/// Why an origin cannot be granted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginRefusal {
    /// Not `http://...`.
    #[error("expected http://host[:port]")]
    Shape,
    /// `https://...`, with no TLS client built in.
    #[error("https is not available (this build has no TLS client); grant an http:// origin")]
    Https,
    /// A port that is not 1-65535.
    #[error("invalid port {0:?}")]
    Port(String),
    /// A host with a path, user info, a wildcard or other characters.
    #[error("expected http://host[:port] (no path, user or wildcard)")]
    Host,
}

/// The domains whose hosts name functions of this host (service
/// chaining): `http://NAME.luge.internal/...` is function NAME, and Spin's
/// `NAME.spin.internal` the same, so Spin apps chain unchanged.
pub const CHAINING_DOMAINS: [&str; 2] = [".luge.internal", ".spin.internal"];

/// The function an outgoing request to `host` (its authority's host, any
/// case) chains to, if `host` is in a [`CHAINING_DOMAINS`] domain: the
/// single label before it. Nothing else is looked at (never a Host header,
/// which a guest could set to anything: Spin's CVE-2024-32980).
pub fn chained_function(host: &str) -> Option<String> {
    let host = host.to_ascii_lowercase();
    CHAINING_DOMAINS.iter().find_map(|domain| {
        let name = host.strip_suffix(domain)?;
        (!name.is_empty() && !name.contains('.')).then(|| name.to_owned())
    })
}

/// Whether `outbound` (a function's granted origins, as
/// [`outbound_origin`] normalises them) grants chaining to `name`: its
/// internal origin is listed, exactly (no wildcard grants it).
pub fn grants_chaining(outbound: &[String], name: &str) -> bool {
    CHAINING_DOMAINS.iter().any(|domain| {
        let origin = format!("http://{name}{domain}:80");
        outbound.contains(&origin)
    })
}

/// `origin` (`http://host[:port]`) as granted: scheme and host lower-case,
/// the port written (80 by default). Anything else (a path, user info, a
/// wildcard, another scheme) is refused with the reason: a grant names
/// exactly the origins a function may reach. `https` is refused because
/// this build has no TLS client (see docs/SECURITY.md).
pub fn outbound_origin(origin: &str) -> Result<String, OriginError> {
    let refused = |why| OriginError {
        origin: origin.to_owned(),
        why,
    };
    let rest = match origin.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("https") => {
            return Err(refused(OriginRefusal::Https));
        }
        _ => return Err(refused(OriginRefusal::Shape)),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let (host, port) = match rest.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || rest.starts_with('[') => {
            match port.parse::<u16>() {
                Ok(port) if port > 0 => (host, port),
                _ => return Err(refused(OriginRefusal::Port(port.to_owned()))),
            }
        }
        _ => (rest, 80),
    };
    let valid = !host.is_empty()
        && host.len() <= 253
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '[' | ']' | ':'));
    if !valid {
        return Err(refused(OriginRefusal::Host));
    }
    Ok(format!("http://{}:{port}", host.to_ascii_lowercase()))
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
    /// `state.namespaces`: shared-state namespaces besides the private one.
    pub state: Vec<String>,
    /// `http.allowed_outbound_hosts`: origins an HTTP handler may send
    /// requests to.
    pub outbound_http: Vec<String>,
    /// `snapshot.init_function`: the export a snapshot's initialisation
    /// runs, instead of `wizer.initialize`.
    pub init_function: Option<String>,
    /// `config.variables`: what a component reads through
    /// `wasi:config/store`, by name (see [`check_variable`]).
    pub variables: Variables,
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
    /// A symlink on the way: it could lead outside the fs root, now or later.
    #[error(
        "directory grant {0:?} passes through a symlink; grants name real directories beneath the fs root"
    )]
    Symlink(String),
    /// More grants than [`MAX_DIR_GRANTS`].
    #[error("at most {MAX_DIR_GRANTS} directory grants per action")]
    TooMany,
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
            "state.namespaces" => {
                let list = value
                    .as_array()
                    .ok_or_else(|| bad(key, "expected a list"))?;
                for ns in list {
                    let ns = ns.as_str().ok_or_else(|| bad(key, "expected strings"))?;
                    self.state.push(ns.to_owned());
                }
            }
            "http.allowed_outbound_hosts" => {
                let list = value
                    .as_array()
                    .ok_or_else(|| bad(key, "expected a list"))?;
                for origin in list {
                    let origin = origin
                        .as_str()
                        .ok_or_else(|| bad(key, "expected strings"))?;
                    self.outbound_http.push(origin.to_owned());
                }
            }
            "config.variables" => {
                let map = value
                    .as_object()
                    .ok_or_else(|| bad(key, "expected an object of strings"))?;
                let mut pairs = std::mem::take(&mut self.variables.0);
                for (name, value) in map {
                    let value = value
                        .as_str()
                        .ok_or_else(|| bad(key, format!("{name:?}: expected a string")))?;
                    pairs.push((name.clone(), value.to_owned()));
                }
                self.variables = Variables::checked(pairs).map_err(|reason| bad(key, reason))?;
            }
            "snapshot.init_function" => {
                let name = value
                    .as_str()
                    .filter(|name| !name.is_empty() && name.len() <= 256)
                    .ok_or_else(|| bad(key, "expected an export name"))?;
                self.init_function = Some(name.to_owned());
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
            k if k.starts_with("wasi.")
                || k.starts_with("limits.")
                || k.starts_with("sched.")
                || k.starts_with("state.")
                || k.starts_with("http.")
                || k.starts_with("snapshot.")
                || k.starts_with("config.") =>
            {
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
    /// Resolves requested grants beneath `fs_root` and opens each.
    pub fn grant(annotations: &Annotations, fs_root: Option<&Path>) -> Result<Self, GrantError> {
        let mut dirs = Vec::with_capacity(annotations.dirs.len());
        if annotations.dirs.len() > MAX_DIR_GRANTS {
            return Err(GrantError::TooMany);
        }
        if !annotations.dirs.is_empty() {
            let root = fs_root.ok_or(GrantError::NoFsRoot)?;
            let not_dir = |e: std::io::Error| GrantError::NotADirectory {
                path: root.display().to_string(),
                reason: e.to_string(),
            };
            let canonical = root.canonicalize().map_err(not_dir)?;
            let root_dir = rustix::fs::open(&canonical, dir_flags(), Mode::empty())
                .map_err(|e| not_dir(e.into()))?;
            for request in &annotations.dirs {
                let dir = open_beneath(&root_dir, &request.host)?;
                dirs.push(DirGrant::held(
                    dir,
                    canonical.join(&request.host),
                    &request.guest,
                    request.mode,
                )?);
            }
        }
        if annotations.state.len() > MAX_STATE_GRANTS {
            return Err(GrantError::BadValue {
                key: "state.namespaces".to_owned(),
                reason: format!("at most {MAX_STATE_GRANTS} namespaces"),
            });
        }
        if let Some(ns) = annotations
            .state
            .iter()
            .find(|ns| !crate::state::valid_namespace(ns))
        {
            return Err(GrantError::BadValue {
                key: "state.namespaces".to_owned(),
                reason: format!("{ns:?}: 1-64 letters, digits, '.', '_' or '-'"),
            });
        }
        if annotations.outbound_http.len() > MAX_OUTBOUND_GRANTS {
            return Err(GrantError::BadValue {
                key: "http.allowed_outbound_hosts".to_owned(),
                reason: format!("at most {MAX_OUTBOUND_GRANTS} origins"),
            });
        }
        let outbound_http = annotations
            .outbound_http
            .iter()
            .map(|origin| outbound_origin(origin))
            .collect::<Result<_, _>>()
            .map_err(|e: OriginError| GrantError::BadValue {
                key: "http.allowed_outbound_hosts".to_owned(),
                reason: e.to_string(),
            })?;
        Ok(Self {
            dirs,
            args: annotations.args.clone(),
            state: annotations.state.clone(),
            outbound_http,
        })
    }
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

    #[test]
    fn outbound_origins_are_exact() {
        assert_eq!(
            outbound_origin("http://Example.com").unwrap(),
            "http://example.com:80"
        );
        assert_eq!(
            outbound_origin("http://127.0.0.1:8080/").unwrap(),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            outbound_origin("http://[::1]:81").unwrap(),
            "http://[::1]:81"
        );
        for bad in [
            "example.com",
            "http://*.example.com",
            "http://user@example.com",
            "http://example.com/path",
            "http://example.com:0",
            "http://example.com:99999",
            "ftp://example.com",
            "http://",
        ] {
            assert!(outbound_origin(bad).is_err(), "{bad} accepted");
        }
        assert!(outbound_origin("https://example.com").unwrap_err().why == OriginRefusal::Https);
    }

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
            Err(GrantError::TooMany)
        );
    }

    #[test]
    fn variables_are_checked_bounded_and_never_shown() {
        let ann = Annotations::parse(&json!({
            "config.variables": {"greeting": "hi", "api_key": "s3cret"}
        }))
        .unwrap();
        assert_eq!(ann.variables.0.len(), 2);
        let shown = format!("{ann:?}");
        assert!(
            shown.contains("api_key") && !shown.contains("s3cret"),
            "{shown}"
        );
        for bad in [
            json!({"config.variables": {"Upper": "x"}}),
            json!({"config.variables": {"1st": "x"}}),
            json!({"config.variables": {"a-b": "x"}}),
            json!({"config.variables": {"a": 1}}),
            json!({"config.variables": {"a": "x".repeat(MAX_VARIABLE_VALUE_BYTES + 1)}}),
            json!({"config.variables": ["a"]}),
            json!({"config.nothing": 1}),
        ] {
            assert!(Annotations::parse(&bad).is_err(), "{bad}");
        }
        let many: serde_json::Map<String, Value> = (0..=MAX_VARIABLES)
            .map(|i| (format!("v{i}"), json!("x")))
            .collect();
        assert!(Annotations::parse(&json!({ "config.variables": many })).is_err());
    }
}
