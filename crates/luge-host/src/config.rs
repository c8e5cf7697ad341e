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
//!
//! [[functions]]              # on no route: for triggers (crate::trigger)
//! name = "ingest"
//! module = "ingest.wasm"
//!
//! [[triggers]]
//! function = "ingest"
//! mqtt = { address = "mqtt://127.0.0.1:1883", topic = "sensors/#" }
//!
//! [telemetry]                # OpenTelemetry (the executor reads it)
//! endpoint = "http://127.0.0.1:4317"
//! ```
//!
//! Every error names the file and the key (or line) and says what is wrong;
//! a config with any error is refused whole, so Luge never starts
//! half-configured.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::chain::{ChainSpec, MAX_STAGES};
use crate::spec::{FunctionSpec, check_exact_path, check_route_path};

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

/// What `[server]` holds: the executor's options (the same type as its
/// command-line flags, so a key cannot exist without its flag), parsed
/// here so that an error names the file, line and column.
pub trait ServerTable: serde::de::DeserializeOwned + Default {
    /// Resolves relative paths against `base`, the config's directory.
    fn resolve_paths(&mut self, base: &Path);
}

/// Any table: `[server]` read as it is (tests; tools that only want the
/// routes).
impl ServerTable for toml::Table {
    fn resolve_paths(&mut self, _: &Path) {}
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

/// A parsed and checked `luge.toml`, its `[server]` table read as `S`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config<S = toml::Table> {
    /// The file it came from.
    pub file: PathBuf,
    /// `[server]`, paths resolved against the file's directory.
    pub server: S,
    /// `[[routes]]`.
    pub routes: Vec<ConfiguredRoute>,
    /// `[[chains]]`, each stage a path of `routes`.
    pub chains: Vec<ChainSpec>,
    /// `[state]`, its dir resolved against the file's directory.
    pub state: StateSection,
    /// `[[functions]]`: functions on no route, for triggers to name.
    pub functions: Vec<crate::trigger::TriggeredFunction>,
    /// `[[triggers]]`, each naming a function of `routes` or `functions`.
    pub triggers: Vec<crate::trigger::ConfiguredTrigger>,
    /// `[telemetry]`, as written: the executor reads it as
    /// `luge_telemetry::TelemetryTable` (this crate knows no exporter).
    pub telemetry: Option<toml::Table>,
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
#[serde(bound = "S: ServerTable")]
struct RawConfig<S> {
    #[serde(default)]
    server: S,
    #[serde(default)]
    routes: Vec<FunctionSpec>,
    #[serde(default)]
    chains: Vec<ChainSpec>,
    #[serde(default)]
    state: StateSection,
    #[serde(default)]
    functions: Vec<FunctionSpec>,
    #[serde(default)]
    triggers: Vec<toml::Table>,
    telemetry: Option<toml::Table>,
}

impl ConfigError {
    /// The text of the config or manifest at `file` (a regular file within
    /// the bound [`luge_core::files::read_config_text`] sets), or why not.
    pub(crate) fn read(file: &Path) -> Result<String, Self> {
        luge_core::files::read_config_text(file).map_err(|e| Self {
            file: file.to_owned(),
            location: "file".to_owned(),
            message: e.reason(),
        })
    }
}

impl<S: ServerTable> Config<S> {
    /// Reads and checks the config at `file`.
    pub fn load(file: &Path) -> Result<Self, ConfigError> {
        let text = ConfigError::read(file)?;
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
        let raw: RawConfig<S> = toml::from_str(text).map_err(|e| {
            let location = e
                .span()
                .map(|span| line_and_column(text, span.start))
                .unwrap_or_else(|| "syntax".to_owned());
            error(location, e.message().trim().to_owned())
        })?;
        let mut server = raw.server;
        server.resolve_paths(base);
        let mut state = raw.state;
        if let Some(dir) = &mut state.dir {
            *dir = base.join(&*dir);
        }
        let mut seen = HashSet::new();
        let routes = configured_routes(raw.routes, base, &mut seen)
            .map_err(|(location, message)| error(location, message))?;
        check_chains(&raw.chains, &routes, &mut seen)
            .map_err(|(location, message)| error(location, message))?;
        let functions = triggered_functions(raw.functions, &routes, base)
            .map_err(|(location, message)| error(location, message))?;
        let triggers = configured_triggers(raw.triggers, &routes, &functions)
            .map_err(|(location, message)| error(location, message))?;
        Ok(Self {
            file: file.to_owned(),
            server,
            routes,
            chains: raw.chains,
            state,
            functions,
            triggers,
            telemetry: raw.telemetry,
        })
    }
}

/// Errors of the steps of [`Config::parse`]: (location, message).
type Refused = (String, String);

/// The `[[routes]]`, each with a path (unique: `seen`) and a module
/// (relative to `base`).
fn configured_routes(
    specs: Vec<FunctionSpec>,
    base: &Path,
    seen: &mut HashSet<String>,
) -> Result<Vec<ConfiguredRoute>, Refused> {
    let mut routes = Vec::with_capacity(specs.len());
    for (index, spec) in specs.into_iter().enumerate() {
        let key = |field: &str| format!("routes[{index}].{field}");
        let path = spec
            .path
            .clone()
            .ok_or_else(|| (key("path"), "every route needs a path".to_owned()))?;
        check_route_path(&path).map_err(|e| (key("path"), e.to_string()))?;
        if !seen.insert(path.clone()) {
            return Err((key("path"), format!("{path:?} is configured twice")));
        }
        let module = spec
            .module
            .as_ref()
            .map(|m| base.join(m))
            .ok_or_else(|| (key("module"), "every route needs a module".to_owned()))?;
        if !spec.triggers.is_empty() {
            return Err((
                key("triggers"),
                "a route's triggers are [[triggers]] entries naming it".to_owned(),
            ));
        }
        routes.push(ConfiguredRoute { path, module, spec });
    }
    Ok(routes)
}

/// The `[[chains]]`: each on a path of its own (`seen`), its stages
/// routes of this file.
fn check_chains(
    chains: &[ChainSpec],
    routes: &[ConfiguredRoute],
    seen: &mut HashSet<String>,
) -> Result<(), Refused> {
    for (index, chain) in chains.iter().enumerate() {
        let key = |field: &str| format!("chains[{index}].{field}");
        check_exact_path(&chain.path).map_err(|e| (key("path"), e.to_string()))?;
        if !seen.insert(chain.path.clone()) {
            return Err((key("path"), format!("{:?} is configured twice", chain.path)));
        }
        if chain.stages.is_empty() || chain.stages.len() > MAX_STAGES {
            return Err((
                key("stages"),
                format!("a chain has 1 to {MAX_STAGES} stages"),
            ));
        }
        for (stage_index, stage) in chain.stages.iter().enumerate() {
            if !routes.iter().any(|r| r.path == *stage) {
                return Err((
                    key(&format!("stages[{stage_index}]")),
                    format!(
                        "{stage:?} is not a route of this file (a stage is the path of a [[routes]] entry)"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The `[[functions]]`: functions without a route (a trigger's), each
/// named once among the routes and functions.
fn triggered_functions(
    specs: Vec<FunctionSpec>,
    routes: &[ConfiguredRoute],
    base: &Path,
) -> Result<Vec<crate::trigger::TriggeredFunction>, Refused> {
    let mut functions = Vec::with_capacity(specs.len());
    for (index, spec) in specs.into_iter().enumerate() {
        let key = |field: &str| format!("functions[{index}].{field}");
        if spec.path.is_some() {
            return Err((
                key("path"),
                "a [[functions]] entry has no route (a function on a path is a [[routes]] entry)"
                    .to_owned(),
            ));
        }
        if !spec.triggers.is_empty() {
            return Err((
                key("triggers"),
                "a function's triggers are [[triggers]] entries naming it".to_owned(),
            ));
        }
        let name = spec
            .name
            .clone()
            .ok_or_else(|| (key("name"), "every function needs a name".to_owned()))?;
        if routes.iter().any(|r| route_name(r) == name)
            || functions
                .iter()
                .any(|f: &crate::trigger::TriggeredFunction| f.spec.name.as_deref() == Some(&name))
        {
            return Err((key("name"), format!("{name:?} is configured twice")));
        }
        let module = spec
            .module
            .as_ref()
            .map(|m| base.join(m))
            .ok_or_else(|| (key("module"), "every function needs a module".to_owned()))?;
        functions.push(crate::trigger::TriggeredFunction { module, spec });
    }
    Ok(functions)
}

/// The `[[triggers]]`, each naming a route's function (by path or name)
/// or a function's.
fn configured_triggers(
    tables: Vec<toml::Table>,
    routes: &[ConfiguredRoute],
    functions: &[crate::trigger::TriggeredFunction],
) -> Result<Vec<crate::trigger::ConfiguredTrigger>, Refused> {
    if tables.len() > crate::trigger::MAX_TRIGGERS {
        return Err((
            "triggers".to_owned(),
            format!("at most {} triggers", crate::trigger::MAX_TRIGGERS),
        ));
    }
    let mut triggers = Vec::with_capacity(tables.len());
    for (index, table) in tables.into_iter().enumerate() {
        let key = |field: &str| {
            if field.is_empty() {
                format!("triggers[{index}]")
            } else {
                format!("triggers[{index}].{field}")
            }
        };
        let (function, spec) =
            crate::trigger::table(table).map_err(|(field, message)| (key(field), message))?;
        // A route's function, by its path or its name, or a function's.
        let function = routes
            .iter()
            .find(|r| r.path == function || route_name(r) == function)
            .map(route_name)
            .or_else(|| {
                functions
                    .iter()
                    .find(|f| f.spec.name.as_deref() == Some(&function))
                    .map(|_| function.clone())
            })
            .ok_or_else(|| {
                (
                    key("function"),
                    format!(
                        "{function:?} is not a function of this file (a trigger names the path or name of a [[routes]] entry, or the name of a [[functions]] entry)"
                    ),
                )
            })?;
        let trigger = spec
            .checked(format!("triggers[{index}]"), function)
            .map_err(|(field, why)| (key(field), why.to_string()))?;
        triggers.push(trigger);
    }
    Ok(triggers)
}

/// The name a configured route's function has: its `name`, else its path
/// without the leading `/` (as [`crate::FunctionHost::add_configured`]
/// names it).
pub fn route_name(route: &ConfiguredRoute) -> String {
    route
        .spec
        .name
        .clone()
        .unwrap_or_else(|| route.path.trim_start_matches('/').to_owned())
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

    /// A `[server]` table of its own, for these tests.
    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Server {
        workers: Option<usize>,
        store: Option<PathBuf>,
        token_file: Option<PathBuf>,
    }

    impl ServerTable for Server {
        fn resolve_paths(&mut self, base: &Path) {
            for path in [&mut self.store, &mut self.token_file]
                .into_iter()
                .flatten()
            {
                *path = base.join(&*path);
            }
        }
    }

    fn parse(text: &str) -> Result<Config<Server>, ConfigError> {
        Config::parse(Path::new("luge.toml"), text, Path::new("/etc/luge"))
    }

    #[test]
    fn a_full_config_parses_with_paths_resolved() {
        let config = parse(
            r#"
            [server]
            workers = 2
            store = "functions"
            token_file = "/secret/token"

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

    #[test]
    fn triggers_name_a_routes_function_and_one_source() {
        let config = parse(
            r#"
            [[routes]]
            path = "/fib"
            module = "fib.wasm"
            [[routes]]
            path = "/resize"
            name = "resize"
            module = "resize.wasm"
            [[triggers]]
            function = "/fib"
            cron = "*/10 * * * * *"
            [[triggers]]
            function = "resize"
            redis = { address = "redis://127.0.0.1:6379", channel = "images" }
            relative_deadline_us = 500000
            max_in_flight = 4
            "#,
        )
        .unwrap();
        assert_eq!(config.triggers.len(), 2);
        assert_eq!(config.triggers[0].function, "fib");
        assert_eq!(config.triggers[0].max_in_flight, 1);
        assert_eq!(config.triggers[1].function, "resize");
        assert_eq!(config.triggers[1].max_in_flight, 4);
        assert_eq!(
            config.triggers[1].relative_deadline,
            Some(std::time::Duration::from_millis(500))
        );
        for (trigger, expected) in [
            (
                "function = \"/nope\"\ncron = \"* * * * * *\"",
                "not a function of this file",
            ),
            ("function = \"/fib\"", "one source"),
            (
                "function = \"/fib\"\ncron = \"* * * * * *\"\nqueue = 1",
                "unknown field",
            ),
            (
                "function = \"/fib\"\ncron = \"* * * * * *\"\nredis = { address = \"redis://x\", channel = \"c\" }",
                "one source",
            ),
            (
                "function = \"/fib\"\ncron = \"* * * * * *\"\nmax_in_flight = 2",
                "one tick at a time",
            ),
            (
                "function = \"/fib\"\nredis = { address = \"http://x\", channel = \"c\" }",
                "redis://",
            ),
            (
                "function = \"/fib\"\nredis = { address = \"redis://x\", channel = \"c\" }\nmax_in_flight = 0",
                "1 to",
            ),
        ] {
            let text = format!(
                "[[routes]]\npath = \"/fib\"\nmodule = \"f.wasm\"\n[[triggers]]\n{trigger}\n"
            );
            let error = parse(&text).unwrap_err();
            assert!(error.location.starts_with("triggers[0]"), "{error}");
            assert!(error.to_string().contains(expected), "{trigger}: {error}");
        }
    }

    #[test]
    fn functions_on_no_route_are_named_and_triggered() {
        let config = parse(
            r#"
            [[functions]]
            name = "ingest"
            module = "ingest.wasm"
            limits = { timeout_ms = 500 }
            [[triggers]]
            function = "ingest"
            cron = "0 * * * * *"
            "#,
        )
        .unwrap();
        assert_eq!(config.functions.len(), 1);
        assert_eq!(
            config.functions[0].module,
            Path::new("/etc/luge/ingest.wasm")
        );
        assert_eq!(config.triggers[0].function, "ingest");
        for (text, expected) in [
            ("[[functions]]\nmodule = \"a.wasm\"", "needs a name"),
            ("[[functions]]\nname = \"a\"", "needs a module"),
            (
                "[[functions]]\nname = \"a\"\npath = \"/a\"\nmodule = \"a.wasm\"",
                "has no route",
            ),
            (
                "[[routes]]\npath = \"/a\"\nmodule = \"a.wasm\"\n[[functions]]\nname = \"a\"\nmodule = \"a.wasm\"",
                "configured twice",
            ),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.to_string().contains(expected), "{text}: {error}");
        }
    }
}
