//! Capabilities: what an action may touch, granted by annotations.
//!
//! Deny by default: a sandbox sees no directory, no host environment, no
//! argv, no network and no state namespace beyond what its annotations
//! grant. Each capability is one slice, in a module of its own that holds
//! its annotation keys, its parsing and validation, its policy and its
//! tests; this module only composes them:
//!
//! - [`dirs`]: `wasi.dirs` (and WOW's `dir`), resolved beneath the
//!   operator's `--fs-root` at init;
//! - [`variables`]: `config.variables`, what `wasi:config/store` and
//!   Spin's variables read, and the `{{ name }}` templates;
//! - [`outbound`]: `http.allowed_outbound_hosts`, Spin's grammar, and
//!   where a connection may go;
//! - [`namespaces`]: `state.namespaces`, the shared-state namespaces;
//! - [`sqlite`]: `sqlite.databases`, the SQLite databases it may open;
//! - the process itself (`wasi.env`, `wasi.args`, WOW's `net_access`),
//!   limits (`limits.*`), scheduling hints (`sched.*`) and the snapshot
//!   entry (`snapshot.init_function`), whose types live in their own
//!   modules ([`crate::limits`], [`crate::hints`]).
//!
//! Annotations arrive either as a JSON object (`{"wasi.env": {...}}`) or in
//! OpenWhisk's list form (`[{"key": "wasi.env", "value": {...}}]`). Keys
//! outside Luge's namespaces ([`LUGE_KEY_PREFIXES`]) are OpenWhisk's own
//! and are ignored; an unknown key inside them is an error, so a typo does
//! not silently drop a limit.

pub mod dirs;
mod error;
pub mod namespaces;
pub mod outbound;
pub mod sqlite;
pub mod variables;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

pub use dirs::{DirGrant, DirMode, DirRequest, MAX_DIR_GRANTS};
pub use error::GrantError;
use error::bad;
pub use outbound::{
    AllowedHosts, CHAINING_DOMAINS, MAX_OUTBOUND_GRANTS, Network, OriginError, OriginRefusal,
    chained_function,
};
pub use sqlite::SqliteGrant;
pub use variables::{
    MAX_VARIABLE_NAME_BYTES, MAX_VARIABLE_VALUE_BYTES, MAX_VARIABLES, VariableError, Variables,
    check_variable,
};

use crate::hints::SchedHints;
use crate::limits::RequestedLimits;

/// Resolved grants of an action.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Preopened directories.
    pub dirs: Vec<DirGrant>,
    /// `argv[1..]`.
    pub args: Vec<String>,
    /// Shared-state namespaces it may use besides its private one.
    pub state: Vec<String>,
    /// Stores (`default` or a namespace) it reaches on the global tier by
    /// their plain label.
    pub global_stores: Vec<String>,
    /// Where outgoing requests and connections may go; nowhere by default.
    pub outbound: AllowedHosts,
    /// How its sockets reach the network: through `outbound` only, unless
    /// `luge run --inherit-network` says otherwise (never a tenant).
    pub network: Network,
    /// The SQLite databases it may open; none by default.
    pub sqlite: SqliteGrant,
    /// The key-value store labels Spin's interfaces may open, where the
    /// function is a Spin component (its `key_value_stores`): opening any
    /// other is refused as access denied, as Spin refuses it. `None` (every
    /// other function): every label opens, and a store outside `state` is
    /// refused at its first use.
    pub key_value_labels: Option<Vec<String>>,
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
    /// WOW's `net_access`; accepted for compatibility. A sandbox reaches
    /// the network only through `allowed_outbound_hosts`, either way.
    pub net_access: bool,
    /// `state.namespaces`: shared-state namespaces besides the private one.
    pub state: Vec<String>,
    /// `state.global_stores`: stores reached on the global tier by their
    /// plain label.
    pub global_stores: Vec<String>,
    /// `http.allowed_outbound_hosts`: as written (templates expand from
    /// [`Annotations::variables`] when granted), or checked already.
    pub outbound_http: Vec<outbound::OutboundEntry>,
    /// `sqlite.databases`: database labels.
    pub sqlite: Vec<String>,
    /// `snapshot.init_function`: the export a snapshot's initialisation
    /// runs, instead of `wizer.initialize`.
    pub init_function: Option<String>,
    /// `config.variables`: what a component reads through
    /// `wasi:config/store`, by name (see [`check_variable`]).
    pub variables: Variables,
}

/// Key prefixes Luge owns: a key under one of them that no slice knows is
/// an error; every other key is OpenWhisk's and ignored.
pub const LUGE_KEY_PREFIXES: [&str; 8] = [
    "wasi.",
    "sqlite.",
    "limits.",
    "sched.",
    "state.",
    "http.",
    "snapshot.",
    "config.",
];

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
        // Each slice reads its own keys into its own field.
        let taken = dirs::annotate(&mut self.dirs, key, value)?
            || variables::annotate(&mut self.variables, key, value)?
            || outbound::annotate(&mut self.outbound_http, key, value)?
            || self.annotate_state(key, value)?
            || sqlite::annotate(&mut self.sqlite, key, value)?
            || annotate_process(self, key, value)?;
        if taken {
            return Ok(());
        }
        if LUGE_KEY_PREFIXES.iter().any(|p| key.starts_with(p)) {
            return Err(GrantError::UnknownKey(key.to_owned()));
        }
        Ok(())
    }
}

/// The process's own keys: `wasi.env`, `wasi.args`, `net_access`, the
/// limits, the scheduling hints and the snapshot entry.
fn annotate_process(out: &mut Annotations, key: &str, value: &Value) -> Result<bool, GrantError> {
    let as_u64 = || {
        value
            .as_u64()
            .ok_or_else(|| bad(key, "expected a non-negative integer"))
    };
    match key {
        "net_access" => {
            out.net_access = value
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
                out.env.push((k.clone(), env_value(v)));
            }
        }
        "wasi.args" => {
            let list = value
                .as_array()
                .ok_or_else(|| bad(key, "expected a list"))?;
            for arg in list {
                let arg = arg.as_str().ok_or_else(|| bad(key, "expected strings"))?;
                out.args.push(arg.to_owned());
            }
        }
        "snapshot.init_function" => {
            let name = value
                .as_str()
                .filter(|name| !name.is_empty() && name.len() <= 256)
                .ok_or_else(|| bad(key, "expected an export name"))?;
            out.init_function = Some(name.to_owned());
        }
        "limits.memory_mb" => out.limits.memory_mb = Some(as_u64()?),
        "limits.timeout_ms" => out.limits.timeout_ms = Some(as_u64()?),
        "limits.fuel" => out.limits.fuel = Some(as_u64()?),
        "sched.relative_deadline_us" => {
            out.sched.relative_deadline = Some(Duration::from_micros(as_u64()?));
        }
        "sched.expected_execution_us" => {
            out.sched.expected_execution = Some(Duration::from_micros(as_u64()?));
        }
        _ => return Ok(false),
    }
    Ok(true)
}

impl Annotations {
    /// The shared-state slice's keys, into its two fields.
    fn annotate_state(&mut self, key: &str, value: &Value) -> Result<bool, GrantError> {
        let mut requested = namespaces::Requested {
            namespaces: std::mem::take(&mut self.state),
            global_stores: std::mem::take(&mut self.global_stores),
        };
        let taken = namespaces::annotate(&mut requested, key, value);
        self.state = requested.namespaces;
        self.global_stores = requested.global_stores;
        taken
    }
}

impl Capabilities {
    /// Resolves requested grants: directories beneath `fs_root`, each
    /// slice's checks and bounds.
    pub fn grant(annotations: &Annotations, fs_root: Option<&Path>) -> Result<Self, GrantError> {
        Ok(Self {
            dirs: dirs::grant(&annotations.dirs, fs_root)?,
            args: annotations.args.clone(),
            state: namespaces::grant(&annotations.state)?,
            global_stores: namespaces::grant_global(&annotations.global_stores)?,
            outbound: AllowedHosts::parse(&annotations.outbound_http, &annotations.variables)?,
            // No annotation widens it: `luge run` alone sets `Inherit`.
            network: Network::Granted,
            sqlite: sqlite::grant(&annotations.sqlite)?,
            // Set by the Spin loader's spec only, never by an annotation.
            key_value_labels: None,
        })
    }
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
    fn no_annotation_gives_the_hosts_network() {
        // Every grant a tenant can write, and keys that look like the
        // network's: sockets stay checked (`Inherit` is `luge run`'s).
        let all = json!({
            "http.allowed_outbound_hosts": ["*://*:*", "tcp://127.0.0.1:1"],
            "wasi.env": {"NETWORK": "inherit"},
        });
        let granted = Capabilities::grant(&Annotations::parse(&all).unwrap(), None).unwrap();
        assert_eq!(granted.network, Network::Granted);
        // WOW's net_access is accepted and widens nothing; made-up keys
        // in Luge's namespaces are refused.
        let wow = Annotations::parse(&json!({"net_access": true})).unwrap();
        let granted = Capabilities::grant(&wow, None).unwrap();
        assert_eq!(granted.network, Network::Granted);
        for key in ["wasi.network", "http.inherit_network"] {
            assert!(
                Annotations::parse(&json!({ key: "inherit" })).is_err(),
                "{key}"
            );
        }
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
}
