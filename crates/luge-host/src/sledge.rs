//! Sledge's route spec (`spec.json`), so a Sledge user can move functions
//! over unchanged.
//!
//! Sledge serves tenants, each on its own port, each with routes:
//!
//! ```json
//! [{ "name": "gwu", "port": 10010,
//!    "routes": [{ "route": "/fib", "path": "fibonacci.wasm.so",
//!                 "expected-execution-us": 600, "relative-deadline-us": 2000,
//!                 "http-resp-content-type": "text/plain" }] }]
//! ```
//!
//! Luge keeps that shape: one listener per tenant port (port 0 picks a free
//! one, announced on stderr), the route's `path` naming a `.wasm`. Sledge
//! points `path` at its aWsm-compiled `.wasm.so`; when that file does not
//! exist, the `.wasm` beside it is used. Sledge keys Luge has no use for
//! (budgets, admission percentiles, model parameters) are accepted and
//! reported, so a spec moves over without edits.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::{ConfigError, ConfiguredRoute};
use crate::spec::{FunctionSpec, check_route_path};

/// One Sledge tenant: a port and its routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    /// Tenant name, used in logs and metrics.
    pub name: String,
    /// Port of its listener; 0 picks a free one.
    pub port: u16,
    /// Its routes, module paths resolved.
    pub routes: Vec<ConfiguredRoute>,
    /// Keys accepted for compatibility but not acted on.
    pub ignored_keys: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct RawTenant {
    name: String,
    port: u16,
    routes: Vec<RawRoute>,
    #[serde(flatten)]
    other: BTreeMap<String, serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct RawRoute {
    route: String,
    path: PathBuf,
    expected_execution_us: Option<u64>,
    relative_deadline_us: Option<u64>,
    http_resp_content_type: Option<String>,
    #[serde(flatten)]
    other: BTreeMap<String, serde_json::Value>,
}

/// Reads a Sledge spec file.
pub fn load(file: &Path) -> Result<Vec<Tenant>, ConfigError> {
    let text = luge_core::files::read_config_text(file).map_err(|e| ConfigError {
        file: file.to_owned(),
        location: "file".to_owned(),
        message: e.reason(),
    })?;
    parse(file, &text, file.parent().unwrap_or(Path::new(".")))
}

/// Parses `text` as the Sledge spec `file`, resolving paths against `base`.
pub fn parse(file: &Path, text: &str, base: &Path) -> Result<Vec<Tenant>, ConfigError> {
    let error = |location: String, message: String| ConfigError {
        file: file.to_owned(),
        location,
        message,
    };
    let raw: Vec<RawTenant> = serde_json::from_str(text).map_err(|e| {
        error(
            format!("line {}, column {}", e.line(), e.column()),
            e.to_string(),
        )
    })?;
    let mut names = HashSet::new();
    let mut ports = HashSet::new();
    let mut tenants = Vec::with_capacity(raw.len());
    for (t, tenant) in raw.into_iter().enumerate() {
        if !names.insert(tenant.name.clone()) {
            return Err(error(
                format!("[{t}].name"),
                format!("tenant {:?} appears twice", tenant.name),
            ));
        }
        if tenant.port != 0 && !ports.insert(tenant.port) {
            return Err(error(
                format!("[{t}].port"),
                format!("port {} is used by two tenants", tenant.port),
            ));
        }
        let mut ignored_keys: Vec<String> = tenant.other.into_keys().collect();
        let mut seen = HashSet::new();
        let mut routes = Vec::with_capacity(tenant.routes.len());
        for (r, route) in tenant.routes.into_iter().enumerate() {
            let key = |field: &str| format!("[{t}].routes[{r}].{field}");
            check_route_path(&route.route).map_err(|e| error(key("route"), e.to_string()))?;
            if !seen.insert(route.route.clone()) {
                return Err(error(
                    key("route"),
                    format!(
                        "{:?} appears twice in tenant {:?}",
                        route.route, tenant.name
                    ),
                ));
            }
            ignored_keys.extend(route.other.into_keys().map(|k| format!("routes[].{k}")));
            routes.push(ConfiguredRoute {
                path: route.route.clone(),
                module: module_path(&base.join(&route.path)),
                spec: FunctionSpec {
                    path: Some(route.route),
                    relative_deadline_us: route.relative_deadline_us,
                    expected_execution_us: route.expected_execution_us,
                    content_type: route.http_resp_content_type,
                    ..FunctionSpec::default()
                },
            });
        }
        ignored_keys.sort();
        ignored_keys.dedup();
        tenants.push(Tenant {
            name: tenant.name,
            port: tenant.port,
            routes,
            ignored_keys,
        });
    }
    Ok(tenants)
}

/// Sledge's `x.wasm.so` is the aWsm build of `x.wasm`: use the latter when
/// only it exists.
fn module_path(path: &Path) -> PathBuf {
    if !path.exists()
        && let Some(wasm) = path.to_str().and_then(|p| p.strip_suffix(".so"))
        && wasm.ends_with(".wasm")
    {
        return PathBuf::from(wasm);
    }
    path.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = r#"[
      { "name": "gwu", "port": 10010, "replenishment-period-us": 0, "max-budget-us": 0,
        "routes": [
          { "route": "/fib", "path": "fibonacci.wasm.so", "admissions-percentile": 70,
            "expected-execution-us": 600, "relative-deadline-us": 2000,
            "http-resp-content-type": "text/plain" },
          { "route": "/echo", "path": "echo.wasm", "expected-execution-us": 100,
            "relative-deadline-us": 1000, "http-resp-content-type": "application/octet-stream" }
        ] },
      { "name": "other", "port": 10020, "routes": [ { "route": "/fib", "path": "fib.wasm" } ] }
    ]"#;

    #[test]
    fn sledge_tenants_and_routes_parse() {
        let tenants = parse(Path::new("spec.json"), SPEC, Path::new("/srv")).unwrap();
        assert_eq!(tenants.len(), 2);
        let gwu = &tenants[0];
        assert_eq!((gwu.name.as_str(), gwu.port), ("gwu", 10010));
        let fib = &gwu.routes[0];
        assert_eq!(fib.path, "/fib");
        assert_eq!(fib.module, PathBuf::from("/srv/fibonacci.wasm"));
        assert_eq!(fib.spec.relative_deadline_us, Some(2000));
        assert_eq!(fib.spec.expected_execution_us, Some(600));
        assert_eq!(
            gwu.routes[1].spec.content_type(),
            "application/octet-stream"
        );
        assert_eq!(
            gwu.ignored_keys,
            [
                "max-budget-us",
                "replenishment-period-us",
                "routes[].admissions-percentile"
            ]
        );
        // The same route in two tenants is fine: they listen on different ports.
        assert_eq!(tenants[1].routes[0].path, "/fib");
    }

    #[test]
    fn sledge_errors_are_located() {
        let err = parse(Path::new("s.json"), "[{\"name\": \"a\"}]", Path::new(".")).unwrap_err();
        assert!(err.message.contains("missing field `port`"), "{err}");
        let two_ports = r#"[{"name":"a","port":1,"routes":[]},{"name":"b","port":1,"routes":[]}]"#;
        let err = parse(Path::new("s.json"), two_ports, Path::new(".")).unwrap_err();
        assert_eq!(err.location, "[1].port");
        let bad_route = r#"[{"name":"a","port":1,"routes":[{"route":"fib","path":"f.wasm"}]}]"#;
        let err = parse(Path::new("s.json"), bad_route, Path::new(".")).unwrap_err();
        assert_eq!(err.location, "[0].routes[0].route");
    }
}
