//! `luge.toml`: the executor's settings and its routes.
//!
//! ```toml
//! [server]
//! listen = "127.0.0.1:8080"
//! workers = 2
//! policy = "edf"
//! store = "functions"        # relative paths are relative to this file
//! token_file = "token"
//!
//! [[routes]]
//! path = "/fib"
//! module = "fib.wasm"
//! relative_deadline_us = 20000
//! content_type = "text/plain"
//! limits = { memory_mb = 64, timeout_ms = 1000 }
//!
//! [[chains]]                 # stdout of each stage is stdin of the next
//! path = "/pipeline"
//! stages = ["/fib", "/fib"]  # paths of the routes above
//! relative_deadline_us = 40000
//! ```
//!
//! Every error names the file and the key (or line) and says what is wrong;
//! a config with any error is refused whole, so Luge never starts
//! half-configured.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::chain::{ChainSpec, MAX_STAGES};
use crate::spec::{FunctionSpec, check_route_path};

/// A config file that could not be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{file}: {location}: {message}")]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// The key (`routes[2].path`) or line and column.
    pub location: String,
    /// What is wrong.
    pub message: String,
}

/// Settings of `[server]`; each one given on the command line wins.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Address of the main listener.
    pub listen: Option<String>,
    /// Worker threads.
    pub workers: Option<usize>,
    /// `fifo`, `edf` or `srsf`.
    pub policy: Option<String>,
    /// Preemption quantum, µs.
    pub quantum_us: Option<u64>,
    /// `false` runs every sandbox to completion.
    pub preempt: Option<bool>,
    /// Execution-time-aware sharding: functions expected to run longer
    /// than this, µs, run only on the first `long_workers` workers.
    pub long_above_us: Option<u64>,
    /// Workers that run long functions, under sharding.
    pub long_workers: Option<usize>,
    /// `wasmtime`, `wasmer` or `wamr`.
    pub engine: Option<String>,
    /// Root of directory grants.
    pub fs_root: Option<PathBuf>,
    /// Directory of uploaded functions.
    pub store: Option<PathBuf>,
    /// File holding the operator token of the management API.
    pub token_file: Option<PathBuf>,
    /// Largest request body, MiB.
    pub max_body_mb: Option<usize>,
    /// Invocations admitted at once before new ones get 503.
    pub max_pending: Option<usize>,
    /// Open client connections at once before new ones get 503.
    pub max_connections: Option<usize>,
    /// Time a connection may take to send a request's headers (and sit
    /// idle between requests), ms.
    pub header_timeout_ms: Option<u64>,
    /// Callees (that call nothing) whose p90 is at most this many µs run
    /// fused on their caller's worker.
    pub fuse_calls_under_us: Option<u64>,
    /// Where connections are served: `workers` or `threads`.
    pub front_end: Option<String>,
    /// Sandboxes that may exist at once (Wasmtime's pool slots).
    pub max_sandboxes: Option<u32>,
    /// Default memory limit per sandbox, MiB.
    pub memory_mb: Option<u64>,
    /// Largest memory limit a function may ask for, MiB.
    pub max_memory_mb: Option<u64>,
    /// Default time limit per invocation, ms.
    pub timeout_ms: Option<u64>,
    /// Largest time limit a function may ask for, ms.
    pub max_timeout_ms: Option<u64>,
    /// Meter fuel so `limits.fuel` can be enforced.
    pub fuel: Option<bool>,
    /// Where compiled modules are cached.
    pub cache_dir: Option<PathBuf>,
    /// File holding the operator's artifact key (mode 0600).
    pub key_file: Option<PathBuf>,
}

/// A route of the config, its module path resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfiguredRoute {
    /// The route's path, also its name in logs and metrics.
    pub path: String,
    /// The module file.
    pub module: PathBuf,
    /// Everything else about it.
    pub spec: FunctionSpec,
}

/// A parsed and checked `luge.toml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The file it came from.
    pub file: PathBuf,
    /// `[server]`, paths resolved against the file's directory.
    pub server: ServerConfig,
    /// `[[routes]]`.
    pub routes: Vec<ConfiguredRoute>,
    /// `[[chains]]`, each stage a path of `routes`.
    pub chains: Vec<ChainSpec>,
    /// `[state]`, its dir resolved against the file's directory.
    pub state: StateSection,
}

/// `[state]`: where functions' shared state lives, and its quotas.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateSection {
    /// The local tier's embedded store.
    pub dir: Option<PathBuf>,
    /// The global tier, `redis://host:port/db`.
    pub url: Option<String>,
    /// Largest value, KiB.
    pub max_value_kb: Option<usize>,
    /// Keys per namespace.
    pub max_keys: Option<usize>,
    /// Bytes of values per namespace, MiB.
    pub max_namespace_mb: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    server: ServerConfig,
    #[serde(default)]
    routes: Vec<FunctionSpec>,
    #[serde(default)]
    chains: Vec<ChainSpec>,
    #[serde(default)]
    state: StateSection,
}

impl Config {
    /// Reads and checks the config at `file`.
    pub fn load(file: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(file).map_err(|e| ConfigError {
            file: file.to_owned(),
            location: "file".to_owned(),
            message: e.to_string(),
        })?;
        let base = file.parent().unwrap_or(Path::new("."));
        Self::parse(file, &text, base)
    }

    /// Parses `text` as the contents of `file`, resolving relative paths
    /// against `base`.
    pub fn parse(file: &Path, text: &str, base: &Path) -> Result<Self, ConfigError> {
        let error = |location: String, message: String| ConfigError {
            file: file.to_owned(),
            location,
            message,
        };
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let location = e
                .span()
                .map(|span| line_and_column(text, span.start))
                .unwrap_or_else(|| "syntax".to_owned());
            error(location, e.message().trim().to_owned())
        })?;
        let mut server = raw.server;
        let mut state = raw.state;
        for path in [
            &mut server.fs_root,
            &mut server.store,
            &mut server.token_file,
            &mut server.cache_dir,
            &mut server.key_file,
        ]
        .into_iter()
        .chain([&mut state.dir])
        .flatten()
        {
            *path = base.join(&*path);
        }
        let mut seen = HashSet::new();
        let mut routes = Vec::with_capacity(raw.routes.len());
        for (index, spec) in raw.routes.into_iter().enumerate() {
            let key = |field: &str| format!("routes[{index}].{field}");
            let path = spec
                .path
                .clone()
                .ok_or_else(|| error(key("path"), "every route needs a path".to_owned()))?;
            check_route_path(&path).map_err(|e| error(key("path"), e.to_string()))?;
            if !seen.insert(path.clone()) {
                return Err(error(key("path"), format!("{path:?} is configured twice")));
            }
            let module = spec
                .module
                .as_ref()
                .map(|m| base.join(m))
                .ok_or_else(|| error(key("module"), "every route needs a module".to_owned()))?;
            routes.push(ConfiguredRoute { path, module, spec });
        }
        for (index, chain) in raw.chains.iter().enumerate() {
            let key = |field: &str| format!("chains[{index}].{field}");
            check_route_path(&chain.path).map_err(|e| error(key("path"), e.to_string()))?;
            if !seen.insert(chain.path.clone()) {
                return Err(error(
                    key("path"),
                    format!("{:?} is configured twice", chain.path),
                ));
            }
            if chain.stages.is_empty() || chain.stages.len() > MAX_STAGES {
                return Err(error(
                    key("stages"),
                    format!("a chain has 1 to {MAX_STAGES} stages"),
                ));
            }
            for (stage_index, stage) in chain.stages.iter().enumerate() {
                if !routes.iter().any(|r| r.path == *stage) {
                    return Err(error(
                        key(&format!("stages[{stage_index}]")),
                        format!(
                            "{stage:?} is not a route of this file (a stage is the path of a [[routes]] entry)"
                        ),
                    ));
                }
            }
        }
        Ok(Self {
            file: file.to_owned(),
            server,
            routes,
            chains: raw.chains,
            state,
        })
    }
}

/// `line L, column C` (1-based) of byte `offset` in `text`.
fn line_and_column(text: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("line {line}, column {column}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("luge.toml"), text, Path::new("/etc/luge"))
    }

    #[test]
    fn a_full_config_parses_with_paths_resolved() {
        let config = parse(
            r#"
            [server]
            listen = "127.0.0.1:9000"
            workers = 2
            policy = "srsf"
            store = "functions"
            token_file = "/secret/token"
            max_sandboxes = 64
            max_memory_mb = 128
            key_file = "key"
            cache_dir = "/var/cache/luge"

            [[routes]]
            path = "/fib"
            module = "fib.wasm"
            relative_deadline_us = 20000
            content_type = "application/json"
            limits = { memory_mb = 64 }
            env = { MODE = "fast" }
            "#,
        )
        .unwrap();
        assert_eq!(config.server.workers, Some(2));
        assert_eq!(config.server.max_sandboxes, Some(64));
        assert_eq!(config.server.max_memory_mb, Some(128));
        assert_eq!(config.server.key_file, Some(PathBuf::from("/etc/luge/key")));
        assert_eq!(
            config.server.cache_dir,
            Some(PathBuf::from("/var/cache/luge"))
        );
        assert_eq!(
            config.server.store,
            Some(PathBuf::from("/etc/luge/functions"))
        );
        assert_eq!(
            config.server.token_file,
            Some(PathBuf::from("/secret/token"))
        );
        let route = &config.routes[0];
        assert_eq!(route.path, "/fib");
        assert_eq!(route.module, PathBuf::from("/etc/luge/fib.wasm"));
        assert_eq!(route.spec.limits.memory_mb, Some(64));
        assert_eq!(route.spec.content_type(), "application/json");
    }

    #[test]
    fn errors_name_the_file_and_the_key() {
        let err = parse("[server]\nworkers = 2\nthreads = 4\n").unwrap_err();
        assert_eq!(err.location, "line 3, column 1");
        assert!(err.message.contains("unknown field `threads`"), "{err}");
        assert!(err.to_string().starts_with("luge.toml: line 3"), "{err}");

        let err =
            parse("[[routes]]\npath = \"/a\"\nmodule = \"a.wasm\"\ndeadline = 5\n").unwrap_err();
        assert!(err.message.contains("unknown field `deadline`"), "{err}");

        let err = parse("[[routes]]\nmodule = \"a.wasm\"\n").unwrap_err();
        assert_eq!(err.location, "routes[0].path");

        let err = parse("[[routes]]\npath = \"/a\"\n").unwrap_err();
        assert_eq!(err.location, "routes[0].module");

        let twice = "[[routes]]\npath = \"/a\"\nmodule = \"a.wasm\"\n[[routes]]\npath = \"/a\"\nmodule = \"b.wasm\"\n";
        let err = parse(twice).unwrap_err();
        assert_eq!(err.location, "routes[1].path");
        assert!(err.message.contains("twice"), "{err}");

        let err = parse("[[routes]]\npath = \"/metrics\"\nmodule = \"a.wasm\"\n").unwrap_err();
        assert!(err.message.contains("reserved"), "{err}");

        let err = parse("[server]\nworkers = \"two\"\n").unwrap_err();
        assert!(err.message.contains("invalid type"), "{err}");

        let err = parse("[server\n").unwrap_err();
        assert!(err.location.starts_with("line 1"), "{err}");
    }

    #[test]
    fn chains_name_routes_of_the_file() {
        let routes = "[[routes]]\npath = \"/a\"\nmodule = \"a.wasm\"\n[[routes]]\npath = \"/b\"\nmodule = \"b.wasm\"\n";
        let config = parse(&format!(
            "{routes}[[chains]]\npath = \"/ab\"\nstages = [\"/a\", \"/b\", \"/a\"]\nrelative_deadline_us = 9000\n"
        ))
        .unwrap();
        assert_eq!(config.chains[0].stages, ["/a", "/b", "/a"]);
        assert_eq!(config.chains[0].relative_deadline_us, Some(9000));

        let err = parse(&format!(
            "{routes}[[chains]]\npath = \"/ab\"\nstages = [\"/a\", \"/c\"]\n"
        ))
        .unwrap_err();
        assert_eq!(err.location, "chains[0].stages[1]");
        assert!(err.message.contains("\"/c\" is not a route"), "{err}");

        let err = parse(&format!(
            "{routes}[[chains]]\npath = \"/a\"\nstages = [\"/b\"]\n"
        ))
        .unwrap_err();
        assert_eq!(err.location, "chains[0].path");
        assert!(err.message.contains("twice"), "{err}");

        let err = parse(&format!("{routes}[[chains]]\npath = \"/e\"\nstages = []\n")).unwrap_err();
        assert_eq!(err.location, "chains[0].stages");

        let many = vec!["\"/a\""; MAX_STAGES + 1].join(", ");
        let err = parse(&format!(
            "{routes}[[chains]]\npath = \"/m\"\nstages = [{many}]\n"
        ))
        .unwrap_err();
        assert_eq!(err.location, "chains[0].stages");

        let err = parse(&format!(
            "{routes}[[chains]]\npath = \"/v1/x\"\nstages = [\"/a\"]\n"
        ))
        .unwrap_err();
        assert!(err.message.contains("reserved"), "{err}");

        let err = parse(&format!(
            "{routes}[[chains]]\npath = \"/x\"\nstages = [\"/a\"]\ndeadline = 1\n"
        ))
        .unwrap_err();
        assert!(err.message.contains("unknown field `deadline`"), "{err}");
    }
}
