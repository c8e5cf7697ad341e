//! What a function asks for, in the form operators write it.
//!
//! A [`FunctionSpec`] is one route of a TOML config, the metadata of an
//! uploaded function, or (translated) a Sledge route. It is turned into a
//! [`luge_core::Action`] through the same annotation rules as an OpenWhisk
//! init, so a grant or limit means the same thing whichever way a function
//! arrives: deny by default, directories under the fs root, limits bounded
//! by the operator's maxima.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use luge_core::action::{COMMAND_ENTRY, Reuse, SchedHints};
use luge_core::capabilities::outbound::OutboundEntry;
use luge_core::capabilities::{Annotations, DirRequest};
use luge_core::limits::RequestedLimits;
use luge_core::{Action, DirMode, WasmRuntime};
use luge_registry::admit::{self, AdmitError};
use serde::{Deserialize, Serialize};

/// The response content type when a spec names none (Sledge's default).
pub const DEFAULT_CONTENT_TYPE: &str = "text/plain";

/// One function's route, deadline, limits and grants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionSpec {
    /// HTTP path the function is served on (`/fib`). Required in a config;
    /// an uploaded function defaults to `/fn/{name}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The .wasm or artifact file, relative to the config file. Config only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<PathBuf>,
    /// Deadline of each invocation relative to its arrival, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relative_deadline_us: Option<u64>,
    /// Expected execution time, µs: seeds SRSF before runs are measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_execution_us: Option<u64>,
    /// `Content-Type` of successful responses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// Limits, each at most the operator's maximum.
    #[serde(default, skip_serializing_if = "LimitsSpec::is_empty")]
    pub limits: LimitsSpec,
    /// Directories under the operator's fs root.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dirs: Vec<DirSpec>,
    /// Environment variables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// `argv[1..]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// The name other functions call it by (host API v1's `call_start`).
    /// A configured route's default is its path without the leading `/`;
    /// an upload is called by its upload name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The functions it may call, by name; none by default (deny by
    /// default: a call to anything else is refused as not granted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<String>,
    /// Shared-state namespaces it may read and write besides its private
    /// one (host API v1's `state_*`, keys `ns/rest`); none by default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub state: Vec<String>,
    /// Where outgoing requests and connections may go, in Spin's
    /// `allowed_outbound_hosts` grammar (`luge_core::capabilities::outbound`);
    /// `{{ name }}` expands from `variables` (a Spin manifest's entries
    /// come checked, expanded from the app's). None by default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_outbound_hosts: Vec<OutboundEntry>,
    /// Whose private state namespace the function uses: its own name's
    /// (`None`), or a Spin app's `default` key-value store, which every
    /// component of the app that lists it shares, as on Spin. Set by the
    /// Spin loader only; no config or upload names it.
    #[serde(skip)]
    pub private_store: Option<String>,
    /// The route as a Spin manifest wrote it, before the app's `base`
    /// (`[application.trigger.http] base`) was joined to it: what Spin
    /// tells the function as `spin-raw-component-route`. Set by the Spin
    /// loader only; `None`: the route itself.
    #[serde(skip)]
    pub declared_route: Option<String>,
    /// The SQLite databases it may open (`spin:sqlite`), by label:
    /// `default`, its own database, kept across restarts, or a database
    /// the operator's runtime config names. None by default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sqlite_databases: Vec<String>,
    /// The Spin app the function is a component of (`spin.APP`): whose
    /// `default` SQLite database it opens, shared by the app's components
    /// as on `spin up`; `None`: its own. Set by the Spin loader only.
    #[serde(skip)]
    pub app: Option<String>,
    /// The stores (`default` or a namespace of `state`) it reaches on the
    /// Redis tier by their plain label: a Spin runtime config's
    /// `[key_value_store.NAME] type = "redis"`. Set by the host that reads
    /// the runtime config only.
    #[serde(skip)]
    pub global_stores: Vec<String>,
    /// The export a snapshot's initialisation runs (`wizer.initialize` by
    /// default); it runs once, at upload or start, under this function's
    /// limits and grants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_function: Option<String>,
    /// What the function reads through `wasi:config/store`, by name
    /// (Spin's `variables`: lowercase names). Values may be secrets: they
    /// are never logged.
    #[serde(default, skip_serializing_if = "VariableMap::is_empty")]
    pub variables: VariableMap,
    /// Opt-in instance reuse: one instance serves up to this many requests
    /// (`wasmtime serve`'s `max-instance-reuse-count`). Only WASI 0.3 HTTP
    /// services on Wasmtime; it gives up per-request isolation, so a
    /// route that also holds grants needs the operator's
    /// `--allow-reuse-with-grants`. Absent: a fresh instance per request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse: Option<u32>,
    /// With `reuse`: requests one instance serves at once (default 1, one
    /// after another; `wasmtime serve`'s `max-instance-concurrent-reuse-count`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse_concurrent: Option<u32>,
    /// An upload's own triggers ([`crate::trigger`]): a Redis or MQTT
    /// trigger's server must be granted by `allowed_outbound_hosts` with
    /// its scheme, as the function's own connections would. In luge.toml,
    /// `[[triggers]]` entries name their function instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<crate::trigger::TriggerSpec>,
}

/// A spec's `variables`, by name. `Debug` shows the names only: values
/// may be secrets.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct VariableMap(pub BTreeMap<String, String>);

impl VariableMap {
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for VariableMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

/// Requested limits; absent ones take the operator's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSpec {
    /// Linear memory, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Time limit per invocation, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Fuel, where the executor meters it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuel: Option<u64>,
}

impl LimitsSpec {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// A directory grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirSpec {
    /// Host path relative to the fs root.
    pub host: String,
    /// Path the guest opens it by.
    pub guest: String,
    /// `ro` (default) or `rw`.
    #[serde(default = "read_only")]
    pub mode: String,
}

fn read_only() -> String {
    "ro".to_owned()
}

/// Why a spec cannot become an action.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// A route path that is not a clean absolute path, or is reserved.
    #[error("path {path:?}: {reason}")]
    Path {
        /// The path.
        path: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A field is malformed (a directory's mode, a variable's name, the
    /// content type, a zero deadline).
    #[error("{0}")]
    Refused(String),
    /// The admission pipeline refused a grant or limit.
    #[error(transparent)]
    Admit(#[from] AdmitError),
}

/// Operator settings that bound every function.
#[derive(Debug, Clone, Default)]
pub struct HostPolicy {
    /// The operator's bounds on every function (directory grants' root,
    /// limits, code size), as every admission takes them.
    pub admit: admit::Bounds,
    /// Whether a route that holds grants (directories, calls, state
    /// namespaces, outgoing hosts, a Spin app's shared store) may opt into
    /// instance reuse; off by default, since a reused instance can carry
    /// what one request read through its grants into the next response.
    pub allow_reuse_with_grants: bool,
}

/// Paths the executor answers itself; a function cannot take them.
const RESERVED: &[&str] = &["/healthz", "/livez", "/readyz", "/metrics"];
/// Prefixes owned by the management API and uploaded functions.
/// (Spin's own, `/.well-known/spin/`, every Spin app has.)
const RESERVED_PREFIXES: &[&str] = &["/v1/", "/fn/", "/.well-known/spin/"];

/// The suffix that makes a route a prefix route, as in Spin: `/api/...`
/// serves `/api` and every path under it, `/...` every path.
pub const PREFIX_SUFFIX: &str = "/...";

/// The base of a prefix route (`/api` for `/api/...`, `` for `/...`), or
/// `None` for an exact route.
pub fn route_prefix(path: &str) -> Option<&str> {
    path.strip_suffix(PREFIX_SUFFIX)
}

/// Checks that `path` can be a configured route: `/` (the root, as in
/// Spin), or absolute with no empty, `.` or `..` segments, no query, not
/// one of the executor's own paths. A route ending in `/...` is a prefix
/// route (see [`PREFIX_SUFFIX`]); `/...` alone takes every path nothing
/// else serves. A segment `:name` (letters, digits, `_`) matches any one
/// segment, as in Spin, and is given to the function as
/// `spin-path-match-NAME`.
pub fn check_route_path(path: &str) -> Result<(), SpecError> {
    if path == PREFIX_SUFFIX || path == "/" {
        return Ok(());
    }
    if let Some(base) = route_prefix(path) {
        let under = format!("{base}/");
        if RESERVED
            .iter()
            .chain(RESERVED_PREFIXES)
            .any(|reserved| reserved.starts_with(&under))
        {
            return Err(SpecError::Path {
                path: path.to_owned(),
                reason: "a prefix route cannot cover the executor's paths (/healthz, /livez, /readyz, /metrics, /v1/..., /fn/...)",
            });
        }
    }
    check_path(route_prefix(path).unwrap_or(path), true).map_err(|e| match e {
        SpecError::Path { reason, .. } => SpecError::Path {
            path: path.to_owned(),
            reason,
        },
        other => other,
    })
}

/// [`check_route_path`] for paths that are neither prefixes nor have
/// parameters (chains).
pub fn check_exact_path(path: &str) -> Result<(), SpecError> {
    if path == "/" {
        return Ok(());
    }
    check_path(path, false)
}

/// The longest a parameter's name is.
const MAX_PARAMETER_NAME: usize = 64;

/// Whether `segment` is a parameter (`:name`).
fn is_parameter(segment: &str) -> bool {
    segment.starts_with(':')
}

/// Whether `route` has a `:name` segment.
pub fn has_parameters(route: &str) -> bool {
    route.split('/').any(is_parameter)
}

fn check_path(path: &str, parameters: bool) -> Result<(), SpecError> {
    let bad = |reason| {
        Err(SpecError::Path {
            path: path.to_owned(),
            reason,
        })
    };
    if !path.starts_with('/') || path.len() < 2 {
        return bad("a route is an absolute path such as \"/fib\", or \"/\"");
    }
    if path.len() > 256 || !path.bytes().all(|b| b.is_ascii_graphic()) || path.contains(['?', '#'])
    {
        return bad("a route is at most 256 printable ASCII characters, without '?' or '#'");
    }
    let segments = || path[1..].split('/');
    if segments().any(|s| s.is_empty() || s == "." || s == ".." || s == "...") {
        return bad(
            "empty, '.', '..' and '...' segments are not allowed ('/...' ends a prefix route)",
        );
    }
    for segment in segments() {
        let name = match segment.strip_prefix(':') {
            Some(name) if parameters => name,
            Some(_) => return bad("a parameter (':name') is not allowed here"),
            None if segment.contains([':', '*']) => {
                return bad(
                    "':' only starts a parameter segment (':name'), and '*' is not allowed ('/...' ends a prefix route)",
                );
            }
            None => continue,
        };
        if name.is_empty()
            || name.len() > MAX_PARAMETER_NAME
            || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return bad("a parameter is ':' and 1-64 letters, digits and '_'");
        }
    }
    if RESERVED.contains(&path) || RESERVED_PREFIXES.iter().any(|p| path.starts_with(p)) {
        return bad(
            "reserved for the executor (/healthz, /livez, /readyz, /metrics, /v1/..., /fn/...)",
        );
    }
    Ok(())
}

impl FunctionSpec {
    /// The content type of successful responses.
    pub fn content_type(&self) -> &str {
        self.content_type.as_deref().unwrap_or(DEFAULT_CONTENT_TYPE)
    }

    /// The annotations this spec amounts to.
    fn annotations(&self) -> Result<Annotations, SpecError> {
        let mut dirs = Vec::with_capacity(self.dirs.len());
        for dir in &self.dirs {
            let mode = match dir.mode.as_str() {
                "ro" => DirMode::ReadOnly,
                "rw" => DirMode::ReadWrite,
                other => {
                    return Err(SpecError::Refused(format!(
                        "dirs: mode must be \"ro\" or \"rw\", not {other:?}"
                    )));
                }
            };
            if dir.guest.is_empty()
                || Path::new(&dir.guest)
                    .components()
                    .any(|c| c.as_os_str() == "..")
            {
                return Err(SpecError::Refused(format!(
                    "dirs: invalid guest path {:?}",
                    dir.guest
                )));
            }
            dirs.push(DirRequest {
                host: dir.host.clone(),
                guest: dir.guest.clone(),
                mode,
            });
        }
        let variables = luge_core::capabilities::Variables::checked(
            self.variables
                .0
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )
        .map_err(|reason| SpecError::Refused(format!("variables: {reason}")))?;
        for name in self.env.keys() {
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err(SpecError::Refused(format!(
                    "env: invalid variable name {name:?}"
                )));
            }
        }
        Ok(Annotations {
            dirs,
            env: self
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            args: self.args.clone(),
            limits: RequestedLimits {
                memory_mb: self.limits.memory_mb,
                timeout_ms: self.limits.timeout_ms,
                fuel: self.limits.fuel,
            },
            sched: SchedHints {
                relative_deadline: self.relative_deadline_us.map(Duration::from_micros),
                expected_execution: self.expected_execution_us.map(Duration::from_micros),
            },
            net_access: false,
            state: self.state.clone(),
            global_stores: self.global_stores.clone(),
            outbound_http: self.allowed_outbound_hosts.clone(),
            sqlite: self.sqlite_databases.clone(),
            init_function: self.init_function.clone(),
            variables,
        })
    }

    /// The action named `name` this spec describes, through the one
    /// admission pipeline: grants resolved and checked by `runtime`'s
    /// engine, limits bounded by `policy`.
    pub fn action(
        &self,
        name: &str,
        policy: &HostPolicy,
        runtime: &dyn WasmRuntime,
    ) -> Result<Action, SpecError> {
        if let Some(content_type) = &self.content_type
            && (content_type.is_empty()
                || !content_type
                    .bytes()
                    .all(|b| b.is_ascii_graphic() || b == b' '))
        {
            return Err(SpecError::Refused(format!(
                "content_type {content_type:?} is not a valid header value"
            )));
        }
        if self.relative_deadline_us == Some(0) {
            return Err(SpecError::Refused(
                "relative_deadline_us must be greater than zero".to_owned(),
            ));
        }
        let reuse = self.reuse(policy)?;
        let annotations = self.annotations()?;
        let mut action = admit::action(
            runtime,
            &policy.admit,
            name.to_owned(),
            COMMAND_ENTRY.to_owned(),
            Vec::new(),
            annotations,
        )?;
        action.reuse = reuse;
        action.capabilities.sqlite.owner =
            Some(self.app.clone().unwrap_or_else(|| name.to_owned()));
        // A Spin component opens the stores its manifest lists and no
        // other, as on Spin.
        if self.app.is_some() {
            let mut labels = self.state.clone();
            if self.private_store.is_some() {
                labels.push(luge_core::keyvalue::DEFAULT_BUCKET.to_owned());
            }
            action.capabilities.key_value_labels = Some(labels);
        }
        Ok(action)
    }

    /// The route's `reuse`, checked: bounded, and refused for a route
    /// that holds grants unless `policy` allows it.
    fn reuse(&self, policy: &HostPolicy) -> Result<Option<Reuse>, SpecError> {
        let Some(requests) = self.reuse else {
            return match self.reuse_concurrent {
                Some(_) => Err(SpecError::Refused(
                    "reuse_concurrent is set without reuse".to_owned(),
                )),
                None => Ok(None),
            };
        };
        let concurrent = self.reuse_concurrent.unwrap_or(1);
        if !(1..=Reuse::MAX_REQUESTS).contains(&requests) {
            return Err(SpecError::Refused(format!(
                "reuse must be 1 to {}, not {requests}",
                Reuse::MAX_REQUESTS
            )));
        }
        if !(1..=Reuse::MAX_CONCURRENT).contains(&concurrent) {
            return Err(SpecError::Refused(format!(
                "reuse_concurrent must be 1 to {}, not {concurrent}",
                Reuse::MAX_CONCURRENT
            )));
        }
        let grants: Vec<&str> = [
            ("dirs", !self.dirs.is_empty()),
            ("calls", !self.calls.is_empty()),
            ("state", !self.state.is_empty()),
            (
                "allowed_outbound_hosts",
                !self.allowed_outbound_hosts.is_empty(),
            ),
            ("key_value_stores", self.private_store.is_some()),
            ("sqlite_databases", !self.sqlite_databases.is_empty()),
        ]
        .into_iter()
        .filter_map(|(grant, held)| held.then_some(grant))
        .collect();
        if !grants.is_empty() && !policy.allow_reuse_with_grants {
            return Err(SpecError::Refused(format!(
                "reuse: the route holds grants ({}), and a reused instance can carry what one request read through them into another's response; the operator must allow it (--allow-reuse-with-grants)",
                grants.join(", ")
            )));
        }
        Ok(Some(Reuse {
            requests,
            concurrent,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Grants of every scheme, given the two ways a tenant gives them (an
    /// OpenWhisk action's `http.allowed_outbound_hosts` annotation, an
    /// upload's `allowed_outbound_hosts` metadata), are one grant: parsed
    /// by the one grammar, refused alike, and each reaching its own
    /// scheme, host and port only; a wildcard reaches no loopback address
    /// whichever door it came through.
    #[test]
    fn grants_through_annotations_and_uploads_are_one_grant_for_every_scheme() {
        use luge_core::capabilities::Capabilities;
        use std::net::{IpAddr, Ipv4Addr};
        let by_annotation = |grants: &serde_json::Value| {
            Annotations::parse(&serde_json::json!({ "http.allowed_outbound_hosts": grants }))
                .and_then(|a| Capabilities::grant(&a, None))
                .map(|c| c.outbound)
                .map_err(|e| e.to_string())
        };
        let by_upload = |grants: &serde_json::Value| {
            serde_json::from_value::<FunctionSpec>(
                serde_json::json!({ "allowed_outbound_hosts": grants }),
            )
            .map_err(|e| e.to_string())
            .and_then(|spec| spec.annotations().map_err(|e| e.to_string()))
            .and_then(|a| Capabilities::grant(&a, None).map_err(|e| e.to_string()))
            .map(|c| c.outbound)
        };
        let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
        for scheme in [
            "http", "https", "tcp", "udp", "postgres", "mysql", "redis", "rediss", "mqtt",
        ] {
            let exact = serde_json::json!([format!("{scheme}://127.0.0.1:7000")]);
            let (annotated, uploaded) = (by_annotation(&exact), by_upload(&exact));
            assert_eq!(annotated, uploaded, "{scheme}");
            let grant = annotated.expect(scheme);
            assert!(grant.allows(scheme, "127.0.0.1", 7000), "{scheme}");
            assert!(
                grant.permits_address(scheme, "127.0.0.1", 7000, loopback),
                "{scheme}"
            );
            assert!(!grant.allows(scheme, "127.0.0.1", 7001), "{scheme}");
            assert!(!grant.allows(scheme, "127.0.0.2", 7000), "{scheme}");
            let other = if scheme == "tcp" { "udp" } else { "tcp" };
            assert!(!grant.allows(other, "127.0.0.1", 7000), "{scheme}");
            // A wildcard: any host of the scheme, public addresses only.
            let wildcard = serde_json::json!([format!("{scheme}://*:*")]);
            let (annotated, uploaded) = (by_annotation(&wildcard), by_upload(&wildcard));
            assert_eq!(annotated, uploaded, "{scheme}");
            let grant = annotated.expect(scheme);
            assert!(grant.allows(scheme, "example.com", 5), "{scheme}");
            for name in ["localhost", "127.0.0.1", "0.0.0.0"] {
                assert!(
                    !grant.allows(scheme, name, 7000)
                        || !grant.permits_address(scheme, name, 7000, loopback),
                    "{scheme}: {name}"
                );
            }
            // Refused alike: a grant that is not one, and a template whose
            // variable is not given.
            for bad in [
                serde_json::json!([format!("{scheme}://")]),
                serde_json::json!([format!("{scheme}://{{{{ host }}}}:1")]),
                serde_json::json!(format!("{scheme}://127.0.0.1:7000")),
            ] {
                let (annotated, uploaded) = (by_annotation(&bad), by_upload(&bad));
                assert!(annotated.is_err() && uploaded.is_err(), "{scheme}: {bad}");
            }
        }
    }

    /// An engine that enforces every grant and compiles nothing.
    #[derive(Debug)]
    struct AnyGrant(luge_core::EngineId);

    impl WasmRuntime for AnyGrant {
        fn id(&self) -> &luge_core::EngineId {
            &self.0
        }
        fn precompile(&self, _: &[u8]) -> Result<Vec<u8>, luge_core::EngineError> {
            Err(luge_core::Unsupported::Component { engine: "test" }.into())
        }
        fn load_artifact(
            &self,
            _: luge_core::VerifiedArtifact<'_>,
        ) -> Result<std::sync::Arc<dyn luge_core::LoadedModule>, luge_core::EngineError> {
            Err(luge_core::Unsupported::Component { engine: "test" }.into())
        }
    }

    fn engine() -> AnyGrant {
        AnyGrant(luge_core::EngineId {
            engine: "test".into(),
            version: "0".into(),
            target: "none".into(),
        })
    }

    #[test]
    fn route_paths_are_checked() {
        for good in [
            "/fib",
            "/a/b",
            "/tenant-1/fn_x.v2",
            "/api/...",
            "/...",
            "/",
            "/base/:path_segment/:end/...",
            "/users/:id",
        ] {
            assert!(check_route_path(good).is_ok(), "{good}");
        }
        for bad in ["/a/.../...", "/healthz/...", "/v1/...", "/fn/...", "//..."] {
            assert!(check_route_path(bad).is_err(), "{bad}");
        }
        assert!(check_exact_path("/api/...").is_err());
        assert!(check_exact_path("/a/:id").is_err());
        assert!(check_exact_path("/").is_ok());
        for bad in [
            "",
            "fib",
            "/a/:",
            "/a/:b-c",
            "/a/x:y",
            "/a/*",
            "/a/b*",
            "/a//b",
            "/a/../b",
            "/./a",
            "/a?x=1",
            "/healthz",
            "/livez",
            "/readyz",
            "/.well-known/spin/health",
            "/metrics",
            "/v1/functions",
            "/fn/x",
            "/a b",
        ] {
            assert!(check_route_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn spec_becomes_a_bounded_action() {
        let spec = FunctionSpec {
            relative_deadline_us: Some(2000),
            expected_execution_us: Some(500),
            limits: LimitsSpec {
                memory_mb: Some(64),
                ..LimitsSpec::default()
            },
            env: BTreeMap::from([("MODE".to_owned(), "fast".to_owned())]),
            args: vec!["-v".to_owned()],
            ..FunctionSpec::default()
        };
        let action = spec
            .action("fib", &HostPolicy::default(), &engine())
            .unwrap();
        assert_eq!(action.limits.memory_bytes, 64 << 20);
        assert_eq!(
            action.sched.relative_deadline,
            Some(Duration::from_micros(2000))
        );
        assert_eq!(action.env, vec![("MODE".to_owned(), "fast".to_owned())]);
        assert_eq!(action.capabilities.args, vec!["-v".to_owned()]);
        assert_eq!(action.entry, COMMAND_ENTRY);
    }

    #[test]
    fn refusals_say_what_is_wrong() {
        let above = FunctionSpec {
            limits: LimitsSpec {
                memory_mb: Some(100_000),
                ..LimitsSpec::default()
            },
            ..FunctionSpec::default()
        };
        let err = above
            .action("f", &HostPolicy::default(), &engine())
            .unwrap_err();
        assert!(
            err.to_string().contains("exceeds the operator maximum"),
            "{err}"
        );

        let grant = FunctionSpec {
            dirs: vec![DirSpec {
                host: "data".to_owned(),
                guest: "/data".to_owned(),
                mode: "ro".to_owned(),
            }],
            ..FunctionSpec::default()
        };
        let err = grant
            .action("f", &HostPolicy::default(), &engine())
            .unwrap_err();
        assert!(err.to_string().contains("--fs-root"), "{err}");

        let mode = FunctionSpec {
            dirs: vec![DirSpec {
                host: "data".to_owned(),
                guest: "/data".to_owned(),
                mode: "rwx".to_owned(),
            }],
            ..FunctionSpec::default()
        };
        assert!(mode.action("f", &HostPolicy::default(), &engine()).is_err());
    }

    #[test]
    fn reuse_is_bounded_and_refused_with_grants_unless_allowed() {
        let reused = |requests, concurrent| FunctionSpec {
            reuse: requests,
            reuse_concurrent: concurrent,
            ..FunctionSpec::default()
        };
        let strict = HostPolicy::default();
        let action = |spec: &FunctionSpec, policy: &HostPolicy| spec.action("f", policy, &engine());
        // Off by default; on, with one request at a time unless told.
        assert_eq!(action(&reused(None, None), &strict).unwrap().reuse, None);
        assert_eq!(
            action(&reused(Some(128), None), &strict).unwrap().reuse,
            Some(Reuse {
                requests: 128,
                concurrent: 1
            })
        );
        for (requests, concurrent, expected) in [
            (Some(0), None, "reuse must be 1 to"),
            (Some(Reuse::MAX_REQUESTS + 1), None, "reuse must be 1 to"),
            (Some(8), Some(0), "reuse_concurrent must be 1 to"),
            (
                Some(8),
                Some(Reuse::MAX_CONCURRENT + 1),
                "reuse_concurrent must be 1 to",
            ),
            (None, Some(4), "without reuse"),
        ] {
            let err = action(&reused(requests, concurrent), &strict).unwrap_err();
            assert!(err.to_string().contains(expected), "{err}");
        }
        // Each grant alone is named in the refusal; the operator's switch
        // lets it through.
        let allowing = HostPolicy {
            allow_reuse_with_grants: true,
            ..HostPolicy::default()
        };
        let granted = [
            (
                "calls",
                FunctionSpec {
                    calls: vec!["g".into()],
                    ..reused(Some(8), None)
                },
            ),
            (
                "state",
                FunctionSpec {
                    state: vec!["shared".into()],
                    ..reused(Some(8), None)
                },
            ),
            (
                "allowed_outbound_hosts",
                FunctionSpec {
                    allowed_outbound_hosts: vec!["http://127.0.0.1:9".into()],
                    ..reused(Some(8), None)
                },
            ),
            (
                "key_value_stores",
                FunctionSpec {
                    private_store: Some("spin.app".into()),
                    ..reused(Some(8), None)
                },
            ),
        ];
        for (grant, spec) in granted {
            let err = action(&spec, &strict).unwrap_err().to_string();
            assert!(
                err.contains(grant) && err.contains("--allow-reuse-with-grants"),
                "{err}"
            );
            assert!(action(&spec, &allowing).unwrap().reuse.is_some(), "{grant}");
        }
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = serde_json::from_str::<FunctionSpec>(r#"{"deadline_us": 5}"#).unwrap_err();
        assert!(
            err.to_string().contains("unknown field `deadline_us`"),
            "{err}"
        );
    }
}
