//! Spin apps: a Spin manifest v2 (`spin.toml`, what `spin up` takes) read
//! as Luge routes, for `luge serve --spin`.
//!
//! Each `[[trigger.http]]` becomes a route of its component: exact routes
//! and wildcards (`/...`, `/api/...`) as Luge's own prefixes. A component's
//! `source` is a path relative to the manifest. Its grants are Spin's,
//! deny by default as everywhere in Luge:
//!
//! - `allowed_outbound_hosts`: Spin's grammar
//!   (`luge_core::capabilities::outbound`: schemes, wildcards, ports and
//!   ranges, templates of app variables), checked at load, naming what is
//!   refused; `http://*.spin.internal` grants the app's components by name;
//! - `key_value_stores`: `default` is the component's private bucket,
//!   any other label a state namespace it is granted (on the local tier;
//!   `global:NAME` is the namespace NAME on the Redis tier, and
//!   `global:default` the private bucket there);
//! - `sqlite_databases`: `spin:sqlite` labels; `default` is the app's
//!   own database (shared by the components that list it, kept in the
//!   state directory across restarts, as `spin up` keeps
//!   `.spin/sqlite_db.db`), any other label a database of the runtime
//!   config (`--runtime-config-file`'s `[sqlite_database.NAME]`);
//! - `variables`: the component's, each a literal or a template of app
//!   variables (`{{ name }}`); an app variable takes its `default`, or
//!   `SPIN_VARIABLE_NAME` from Luge's environment (Spin's own environment
//!   provider), and a `required` one with neither refuses the app;
//! - `files`: read-only directory grants. An entry is a directory, as a
//!   path relative to the manifest (mounted at the same path under `/`)
//!   or `{ source = DIR, destination = PATH }`; it must lie under the
//!   operator's `--fs-root`, like every grant Luge makes. Glob patterns
//!   and single files are refused by name (a grant is a directory).
//!
//! Components built for Spin 2 and 3 (`fermyon:spin@2.0.0`'s key-value,
//! variables, sqlite, redis, mqtt, postgres and mysql) get the same grants
//! as Spin 4's. Everything else a component may import and Luge does not
//! serve (LLM) is refused when the component is loaded, naming the import,
//! never at request time.
//!
//! Routes are Spin's: `/`, exact paths, `/...` wildcards, `:name`
//! segments, `{ private = true }` (reached only by `NAME.spin.internal`),
//! all under `[application.trigger.http] base`, matched with Spin's own
//! precedence ([`crate::host`]); a route given twice is served by the
//! later trigger, with a warning, as Spin does.
//!
//! `[[trigger.redis]]` (`channel`, `component`, an `address` of its own
//! or `[application.trigger.redis]`'s, templates of app variables in
//! either), `[[trigger.cron]]` (`component`, `cron_expression`, seconds
//! first) and spin-trigger-mqtt's `[[trigger.mqtt]]` (`topic`, `qos`,
//! `component`; `[application.trigger.mqtt]`'s `address`, `username`,
//! `password`, `keep_alive_interval`) wake their component with each
//! message or tick ([`crate::trigger`]); a component no HTTP trigger names is a function
//! on triggers only. Other trigger types are refused by name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use luge_core::capabilities::outbound::{AllowedHost, OutboundEntry};
use luge_core::capabilities::variables::TemplateError;
use serde::Deserialize;

use crate::config::{ConfigError, ConfiguredRoute};
use crate::spec::{FunctionSpec, VariableMap, check_route_path};
use crate::trigger::{ConfiguredTrigger, TriggeredFunction};

/// Most components and triggers a manifest may have (each is a loaded
/// function: bounded like the routes of a config).
pub const MAX_COMPONENTS: usize = 256;

#[derive(Deserialize)]
struct Manifest {
    spin_manifest_version: u32,
    #[serde(default)]
    application: toml::Table,
    #[serde(default)]
    variables: BTreeMap<String, AppVariable>,
    #[serde(default)]
    trigger: BTreeMap<String, Vec<toml::Table>>,
    #[serde(default)]
    component: BTreeMap<String, Component>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AppVariable {
    default: Option<String>,
    #[serde(default)]
    required: bool,
    #[serde(default)]
    #[allow(dead_code)]
    secret: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpTrigger {
    route: HttpRoute,
    component: String,
    #[serde(default)]
    id: Option<String>,
    /// Spin's `executor = { type = "spin" | "wagi" }`; Luge runs a
    /// component as what it exports, so only Spin's own is taken.
    #[serde(default)]
    executor: Option<toml::Table>,
}

/// A `[[trigger.http]]`'s `route`: a path, or `{ private = true }` (a
/// component only other components reach, by `NAME.spin.internal`).
#[derive(Deserialize)]
#[serde(untagged)]
enum HttpRoute {
    Path(String),
    Private { private: bool },
}

/// Spin's route with the app's `base` (`sanitize_with_base` in Spin's
/// router): each loses one trailing slash, the route is made absolute,
/// and the root is `/`.
fn based_route(base: &str, route: &str) -> String {
    let strip = |s: &str| s.strip_suffix('/').unwrap_or(s).to_owned();
    let route = if route.starts_with('/') {
        route.to_owned()
    } else {
        format!("/{route}")
    };
    let based = format!("{}{}", strip(base), strip(&route));
    if based.is_empty() {
        "/".to_owned()
    } else {
        based
    }
}

/// What every `[[trigger.KIND]]` but `http` has besides its kind's own
/// keys (`luge_trigger::Kind::spin_source`): its component, and the `id`
/// any trigger may have.
#[derive(Deserialize)]
struct TriggerEntry {
    component: String,
    #[serde(default)]
    id: Option<String>,
}

/// What a Spin manifest serves.
#[derive(Debug, Default)]
pub struct SpinApp {
    /// Its HTTP triggers, each a route of its component.
    pub routes: Vec<ConfiguredRoute>,
    /// The components its other triggers name, each once.
    pub triggered: Vec<TriggeredFunction>,
    /// Its Redis, MQTT and cron triggers.
    pub triggers: Vec<ConfiguredTrigger>,
}

#[derive(Deserialize)]
struct Component {
    source: toml::Value,
    #[serde(default)]
    allowed_outbound_hosts: Vec<String>,
    #[serde(default)]
    key_value_stores: Vec<String>,
    #[serde(default)]
    sqlite_databases: Vec<String>,
    #[serde(default)]
    variables: BTreeMap<String, String>,
    #[serde(default)]
    files: Vec<toml::Value>,
    #[serde(default)]
    environment: BTreeMap<String, String>,
}

/// Reads the Spin manifest at `file` as routes; `env` gives the values of
/// `SPIN_VARIABLE_*` (the process environment in `luge serve`). With
/// `retain`, only those components are served (Spin's selective
/// deployment, `spin up --component-id`): see [`parse_retaining`].
pub fn load(
    file: &Path,
    fs_root: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
    retain: Option<&[String]>,
) -> Result<SpinApp, ConfigError> {
    let text = ConfigError::read(file)?;
    let base = file.parent().unwrap_or(Path::new("."));
    let base = std::fs::canonicalize(base).unwrap_or_else(|_| base.to_owned());
    parse_retaining(file, &text, &base, fs_root, env, retain)
}

/// Parses `text` as the Spin manifest `file`, sources relative to `base`.
pub fn parse(
    file: &Path,
    text: &str,
    base: &Path,
    fs_root: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<SpinApp, ConfigError> {
    parse_retaining(file, text, base, fs_root, env, None)
}

/// [`parse`], serving only the components `retain` names when it names
/// any, as Spin's selective deployment does (`spin up --component-id`,
/// SpinKube's `components`): the triggers of the others are left out, and
/// so are they (never compiled, never reachable by `NAME.spin.internal`).
/// A name the app lacks is refused, and so is a kept component that
/// chains to one left out, as Spin refuses both.
pub fn parse_retaining(
    file: &Path,
    text: &str,
    base: &Path,
    fs_root: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
    retain: Option<&[String]>,
) -> Result<SpinApp, ConfigError> {
    let error = |location: &str, message: String| ConfigError {
        file: file.to_owned(),
        location: location.to_owned(),
        message,
    };
    let table: toml::Table =
        toml::from_str(text).map_err(|e| error("syntax", e.message().trim().to_owned()))?;
    check_keys(&table).map_err(|(location, message)| error(&location, message))?;
    let manifest: Manifest = toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| error("syntax", e.message().trim().to_owned()))?;
    if manifest.spin_manifest_version != 2 {
        return Err(error(
            "spin_manifest_version",
            "Luge reads Spin manifest version 2".to_owned(),
        ));
    }
    if manifest.component.len() > MAX_COMPONENTS {
        return Err(error(
            "component",
            format!("at most {MAX_COMPONENTS} components"),
        ));
    }
    let app = app_variables(&manifest, env).map_err(|(l, m)| error(&l, m))?;
    let retained = |id: &str| retain.is_none_or(|kept| kept.iter().any(|k| k == id));
    if let Some(kept) = retain {
        check_selection(&manifest, kept).map_err(|(l, m)| error(&l, m))?;
    }
    let loader = Loader {
        file,
        base,
        fs_root,
        app_store: app_store(&manifest),
        ids: manifest
            .component
            .keys()
            .map(String::as_str)
            .filter(|id| retained(id))
            .collect(),
        manifest: &manifest,
        app,
    };
    let mut loaded = SpinApp::default();
    let http_base = loader.http_base()?;
    let mut count = 0;
    for (kind, triggers) in &manifest.trigger {
        count += triggers.len();
        if count > MAX_COMPONENTS {
            return Err(error(
                &format!("trigger.{kind}"),
                format!("at most {MAX_COMPONENTS} triggers"),
            ));
        }
        for (index, trigger) in triggers.iter().enumerate() {
            let location = format!("trigger.{kind}[{index}]");
            // A trigger of a component left out goes with it.
            let component = trigger.get("component").and_then(toml::Value::as_str);
            if component.is_some_and(|id| !retained(id)) {
                continue;
            }
            match (kind.as_str(), luge_trigger::kind(kind)) {
                ("http", _) => loader.http_trigger(&mut loaded, &http_base, &location, trigger)?,
                (_, Some(kind)) => loader.event_trigger(&mut loaded, kind, location, trigger)?,
                (_, None) => {
                    let kinds = luge_trigger::KINDS.iter().map(|k| k.name());
                    let kinds: Vec<&str> = std::iter::once("http").chain(kinds).collect();
                    let (last, rest) = kinds.split_last().unwrap_or((&"http", &[]));
                    return Err(error(
                        &format!("trigger.{kind}"),
                        format!("Luge serves {} and {last} triggers", rest.join(", ")),
                    ));
                }
            }
        }
    }
    if loaded.routes.is_empty() && loaded.triggers.is_empty() {
        return Err(error(
            "trigger",
            "the app has no trigger to serve".to_owned(),
        ));
    }
    Ok(loaded)
}

/// Spin's checks on a selection of components (`validate_retained_components_exist`
/// and `validate_service_chaining_for_components`): each named one
/// exists, and none kept reaches one left out by `NAME.spin.internal` (nor
/// any by `*.spin.internal`); errors as (location, message).
fn check_selection(manifest: &Manifest, kept: &[String]) -> Result<(), (String, String)> {
    if kept.is_empty() {
        return Err((
            "component".to_owned(),
            "a selection names at least one component".to_owned(),
        ));
    }
    for id in kept {
        if !manifest.component.contains_key(id) {
            return Err((
                "component".to_owned(),
                format!("the app has no component {id:?} to keep"),
            ));
        }
    }
    for id in kept {
        let component = &manifest.component[id];
        for (index, host) in component.allowed_outbound_hosts.iter().enumerate() {
            let target = host
                .split_once("://")
                .and_then(|(_, rest)| rest.split(['/', ':']).next())
                .and_then(|name| name.strip_suffix(".spin.internal"));
            let Some(target) = target else { continue };
            let location = format!("component.{id}.allowed_outbound_hosts[{index}]");
            if target == "*" {
                return Err((
                    location,
                    format!(
                        "component {id:?} chains to any component (*.spin.internal), which a selection of components may not"
                    ),
                ));
            }
            if !kept.iter().any(|k| k == target) {
                return Err((
                    location,
                    format!(
                        "component {id:?} is kept and chains to {target}.spin.internal, which is left out: keep it too"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The app's variables, resolved once: each from `SPIN_VARIABLE_NAME`
/// (`env`), else its default; errors as (location, message).
fn app_variables(
    manifest: &Manifest,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, String>, (String, String)> {
    let mut app = BTreeMap::new();
    for (name, variable) in &manifest.variables {
        let location = format!("variables.{name}");
        luge_core::capabilities::check_variable(name, "")
            .map_err(|e| (location.clone(), e.to_string()))?;
        let provided = env(&format!("SPIN_VARIABLE_{}", name.to_ascii_uppercase()));
        let value = match (provided, &variable.default, variable.required) {
            (Some(value), _, _) => value,
            (None, Some(default), false) => default.clone(),
            (None, Some(_), true) => {
                return Err((
                    location,
                    "a variable is either required or has a default".to_owned(),
                ));
            }
            (None, None, _) => {
                return Err((
                    location,
                    format!(
                        "required, and not given: set SPIN_VARIABLE_{}",
                        name.to_ascii_uppercase()
                    ),
                ));
            }
        };
        app.insert(name.clone(), value);
    }
    Ok(app)
}

/// What reading a manifest's triggers needs: the manifest, where it is,
/// and what was resolved from it once (its variables, its store, its
/// component ids).
struct Loader<'a> {
    file: &'a Path,
    base: &'a Path,
    fs_root: Option<&'a Path>,
    manifest: &'a Manifest,
    app: BTreeMap<String, String>,
    app_store: String,
    ids: Vec<&'a str>,
}

impl Loader<'_> {
    fn error(&self, location: &str, message: String) -> ConfigError {
        ConfigError {
            file: self.file.to_owned(),
            location: location.to_owned(),
            message,
        }
    }

    /// Component `id`'s spec and module (named by the trigger at
    /// `location`), once per component however many triggers name it.
    fn component(&self, id: &str, location: &str) -> Result<(FunctionSpec, PathBuf), ConfigError> {
        let component = self.manifest.component.get(id).ok_or_else(|| {
            self.error(
                &format!("{location}.component"),
                format!("no [component.{id}]"),
            )
        })?;
        let at = |field: &str| format!("component.{id}.{field}");
        let spec = component_spec(
            component,
            &self.app,
            &self.app_store,
            &self.ids,
            &at,
            self.base,
            self.fs_root,
        )
        .map_err(|(l, m)| self.error(&l, m))?;
        let module = match &component.source {
            toml::Value::String(path) => self.base.join(path),
            _ => {
                return Err(self.error(
                    &at("source"),
                    "only a file path (relative to the manifest) is a source here".to_owned(),
                ));
            }
        };
        Ok((spec, module))
    }

    /// `[application.trigger.KIND]`: settings every trigger of the kind
    /// shares (the Redis trigger's `address`, the MQTT trigger's broker).
    fn settings(&self, kind: &str) -> toml::Value {
        self.manifest
            .application
            .get("trigger")
            .and_then(|t| t.get(kind))
            .cloned()
            .unwrap_or(toml::Value::Table(toml::Table::new()))
    }

    /// `[application.trigger.http] base`: every route's prefix (Spin's
    /// default `/`).
    fn http_base(&self) -> Result<String, ConfigError> {
        match self.settings("http").get("base") {
            None => Ok("/".to_owned()),
            Some(toml::Value::String(base)) if base.starts_with('/') => Ok(base.clone()),
            Some(_) => Err(self.error(
                "application.trigger.http.base",
                "the base is an absolute path such as \"/\" or \"/api\"".to_owned(),
            )),
        }
    }

    /// The HTTP trigger at `location`: a route of its component (under
    /// `http_base`), or a private component only others reach.
    fn http_trigger(
        &self,
        loaded: &mut SpinApp,
        http_base: &str,
        location: &str,
        trigger: &toml::Table,
    ) -> Result<(), ConfigError> {
        let trigger: HttpTrigger = toml::Value::Table(trigger.clone())
            .try_into()
            .map_err(|e: toml::de::Error| self.error(location, e.message().trim().to_owned()))?;
        if let Some(kind) = trigger
            .executor
            .as_ref()
            .and_then(|e| e.get("type"))
            .and_then(toml::Value::as_str)
            .filter(|kind| *kind != "spin")
        {
            return Err(self.error(
                &format!("{location}.executor"),
                format!("Luge runs Spin's executor only, not {kind:?}"),
            ));
        }
        let _ = &trigger.id;
        let raw = match &trigger.route {
            HttpRoute::Path(path) => path.clone(),
            // As Spin: served to other components only.
            HttpRoute::Private { private: true } => {
                let (spec, module) = self.component(&trigger.component, location)?;
                push_triggered(loaded, &trigger.component, spec, module);
                return Ok(());
            }
            HttpRoute::Private { private: false } => {
                return Err(self.error(
                    &format!("{location}.route"),
                    "a route is a path or { private = true }".to_owned(),
                ));
            }
        };
        let route = based_route(http_base, &raw);
        check_route_path(&route)
            .map_err(|e| self.error(&format!("{location}.route"), e.to_string()))?;
        // As Spin's router: a route given twice is served by the later
        // trigger, with a warning.
        if let Some(at) = loaded.routes.iter().position(|r| r.path == route) {
            tracing::warn!(
                route = %route,
                replaced = loaded.routes[at].spec.name.as_deref().unwrap_or_default(),
                by = %trigger.component,
                "a route is given twice in the Spin manifest: the later one is served"
            );
            loaded.routes.remove(at);
        }
        // A component on several triggers is one function on each route,
        // all under the component's name: one code, one private store, one
        // target of `NAME.spin.internal`.
        let (spec, module) = self.component(&trigger.component, location)?;
        loaded.routes.push(ConfiguredRoute {
            path: route.clone(),
            module: module.clone(),
            spec: FunctionSpec {
                path: Some(route),
                module: Some(module),
                name: Some(trigger.component.clone()),
                declared_route: Some(raw),
                ..spec
            },
        });
        Ok(())
    }

    /// The trigger of `kind` at `location`: its source, checked by its
    /// kind, and its component as a triggered function.
    fn event_trigger(
        &self,
        loaded: &mut SpinApp,
        kind: &'static dyn luge_trigger::Kind,
        location: String,
        trigger: &toml::Table,
    ) -> Result<(), ConfigError> {
        let mut rest = trigger.clone();
        let entry = toml::Table::from_iter(
            ["component", "id"]
                .into_iter()
                .filter_map(|key| rest.remove(key).map(|value| (key.to_owned(), value))),
        );
        let entry: TriggerEntry = toml::Value::Table(entry)
            .try_into()
            .map_err(|e: toml::de::Error| self.error(&location, e.message().trim().to_owned()))?;
        let app = match self.settings(kind.name()) {
            toml::Value::Table(table) => table,
            _ => toml::Table::new(),
        };
        let source = kind
            .spin_source(luge_trigger::SpinTrigger {
                keys: rest,
                app: &app,
                expand: &|text| expand(text, &self.app),
            })
            .map_err(|refused| {
                let at = match refused.at {
                    luge_trigger::SpinKey::Entry => location.clone(),
                    luge_trigger::SpinKey::Trigger(key) => format!("{location}.{key}"),
                    luge_trigger::SpinKey::App(key) => {
                        format!("application.trigger.{}.{key}", kind.name())
                    }
                };
                self.error(&at, refused.message)
            })?;
        let (spec, module) = self.component(&entry.component, &location)?;
        push_triggered(loaded, &entry.component, spec, module);
        let max_in_flight = kind
            .max_in_flight(None)
            .map_err(|refused| self.error(&location, refused.to_string()))?;
        loaded.triggers.push(ConfiguredTrigger {
            name: entry.id.clone().unwrap_or(location),
            function: entry.component.clone(),
            source,
            relative_deadline: None,
            max_in_flight,
        });
        Ok(())
    }
}

/// The keys of a Spin manifest (v2) and what Luge does with each: every
/// key is served, ignored with a warning (it only describes or builds the
/// app), or refused by name; none is dropped unseen. docs/SPIN.md is the
/// same table in words.
const TOP_KEYS: Keys = Keys {
    served: &[
        "spin_manifest_version",
        "application",
        "variables",
        "trigger",
        "component",
    ],
    ignored: &[],
    refused: &[],
};

const APPLICATION_KEYS: Keys = Keys {
    served: &["name", "trigger"],
    ignored: &["version", "description", "authors", "targets"],
    refused: &[],
};

const COMPONENT_KEYS: Keys = Keys {
    served: &[
        "source",
        "allowed_outbound_hosts",
        "key_value_stores",
        "sqlite_databases",
        "variables",
        "files",
        "environment",
    ],
    ignored: &["description", "build", "exclude_files", "tool"],
    refused: &[
        ("ai_models", "Spin's LLM interface is not served"),
        (
            "dependencies",
            "component dependencies (composition) are not served",
        ),
        (
            "dependencies_inherit_configuration",
            "component dependencies (composition) are not served",
        ),
        (
            "allowed_http_hosts",
            "Spin 1's key: use allowed_outbound_hosts",
        ),
    ],
};

/// One table's keys: served, ignored with a warning, refused (and why).
struct Keys {
    served: &'static [&'static str],
    ignored: &'static [&'static str],
    refused: &'static [(&'static str, &'static str)],
}

impl Keys {
    /// Checks the keys of `table` at `location` (`component.app`).
    fn check(&self, table: &toml::Table, location: &str) -> Result<(), (String, String)> {
        let at = |key: &str| {
            if location.is_empty() {
                key.to_owned()
            } else {
                format!("{location}.{key}")
            }
        };
        for (key, value) in table {
            if self.served.contains(&key.as_str()) {
                continue;
            }
            // Nothing asked (`ai_models = []`, as a locked app may write
            // it): nothing to refuse.
            if value.as_array().is_some_and(|a| a.is_empty()) {
                continue;
            }
            if self.ignored.contains(&key.as_str()) {
                tracing::warn!(key = %at(key), "a Spin manifest key Luge ignores (it describes or builds the app)");
                continue;
            }
            if let Some((_, why)) = self.refused.iter().find(|(refused, _)| refused == key) {
                return Err((at(key), format!("not served: {why}")));
            }
            return Err((at(key), "an unknown Spin manifest key".to_owned()));
        }
        Ok(())
    }
}

/// Checks every key of the manifest `table` (see [`TOP_KEYS`]).
fn check_keys(table: &toml::Table) -> Result<(), (String, String)> {
    if table.contains_key("spin_version") {
        return Err((
            "spin_version".to_owned(),
            "Spin manifest version 1 is not served: Luge reads version 2 (`spin_manifest_version = 2`, what `spin doctor` converts to)".to_owned(),
        ));
    }
    TOP_KEYS.check(table, "")?;
    if let Some(toml::Value::Table(application)) = table.get("application") {
        APPLICATION_KEYS.check(application, "application")?;
    }
    if let Some(toml::Value::Table(components)) = table.get("component") {
        for (id, component) in components {
            if let toml::Value::Table(component) = component {
                COMPONENT_KEYS.check(component, &format!("component.{id}"))?;
            }
        }
    }
    Ok(())
}

/// Adds `component` to the functions served on triggers only (other
/// triggers, private HTTP routes), once however many name it.
fn push_triggered(loaded: &mut SpinApp, component: &str, spec: FunctionSpec, module: PathBuf) {
    if loaded
        .triggered
        .iter()
        .any(|f| f.spec.name.as_deref() == Some(component))
    {
        return;
    }
    loaded.triggered.push(TriggeredFunction {
        module: module.clone(),
        spec: FunctionSpec {
            module: Some(module),
            name: Some(component.to_owned()),
            ..spec
        },
    });
}

/// The owner of the app's `default` key-value store: `spin.` and the
/// app's name (letters, digits, `-` and `_` kept, anything else `_`, at
/// most 64), which no function's name can be (names have no `.`), so the
/// store is the app's alone and persists across restarts as `spin up`'s.
fn app_store(manifest: &Manifest) -> String {
    let name = manifest
        .application
        .get("name")
        .and_then(toml::Value::as_str)
        .unwrap_or("app");
    let clean: String = name
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("spin.{clean}")
}

/// A component's grants and variables as a spec; errors as (location,
/// message).
fn component_spec(
    component: &Component,
    app: &BTreeMap<String, String>,
    app_store: &str,
    ids: &[&str],
    at: &dyn Fn(&str) -> String,
    base: &Path,
    fs_root: Option<&Path>,
) -> Result<FunctionSpec, (String, String)> {
    let mut dirs = Vec::new();
    for (index, entry) in component.files.iter().enumerate() {
        let location = at(&format!("files[{index}]"));
        let dir = file_grant(entry, base, fs_root).map_err(|e| (location, e.to_string()))?;
        dirs.push(dir);
    }
    let mut variables = BTreeMap::new();
    for (name, template) in &component.variables {
        let value =
            expand(template, app).map_err(|e| (at(&format!("variables.{name}")), e.to_string()))?;
        variables.insert(name.clone(), value);
    }
    let mut allowed = Vec::new();
    for (index, host) in component.allowed_outbound_hosts.iter().enumerate() {
        let location = at(&format!("allowed_outbound_hosts[{index}]"));
        let host = expand(host, app).map_err(|e| (location.clone(), e.to_string()))?;
        let checked = |host: &str| {
            AllowedHost::parse(host)
                .map(OutboundEntry::Checked)
                .map_err(|e| (location.clone(), e.to_string()))
        };
        let parsed = checked(&host)?;
        // On Spin, `*.spin.internal` chains to the app's own components:
        // here each is granted by name (no wildcard chains, see
        // luge_core::capabilities::outbound).
        let spin_internal = host
            .split_once("://")
            .and_then(|(_, rest)| rest.strip_prefix("*.spin.internal"))
            .is_some_and(|port| port.is_empty() || port == "/" || port == ":80");
        if spin_internal {
            for id in ids {
                allowed.push(checked(&format!("http://{id}.spin.internal"))?);
            }
        } else {
            allowed.push(parsed);
        }
    }
    let mut state = Vec::new();
    let mut private_store = None;
    for (index, label) in component.key_value_stores.iter().enumerate() {
        // `global:NAME` is the namespace NAME on the Redis tier.
        let label = label.strip_prefix("global:").unwrap_or(label);
        // `default` (on either tier) is the app's store, shared by the
        // components that list it (as on Spin); one that does not list it
        // is refused it (`access-denied`, as on Spin).
        if label == luge_core::keyvalue::DEFAULT_BUCKET {
            private_store = Some(app_store.to_owned());
            continue;
        }
        if !luge_core::state::valid_namespace(label) {
            return Err((
                at(&format!("key_value_stores[{index}]")),
                format!("{label:?} is not a store label Luge can grant"),
            ));
        }
        if !state.iter().any(|granted| granted == label) {
            state.push(label.to_owned());
        }
    }
    Ok(FunctionSpec {
        dirs,
        allowed_outbound_hosts: allowed,
        state,
        variables: VariableMap(variables),
        env: component.environment.clone(),
        private_store,
        sqlite_databases: component.sqlite_databases.clone(),
        app: Some(app_store.to_owned()),
        ..FunctionSpec::default()
    })
}

/// A Spin `files` entry Luge cannot grant.
#[derive(Debug, thiserror::Error)]
pub enum FileGrantError {
    /// Neither a path nor `{ source, destination }`.
    #[error("expected a path or {{ source, destination }}")]
    Shape,
    /// A glob: Luge grants whole directories.
    #[error("{0:?}: a glob; Luge grants whole directories (name the directory)")]
    Glob(String),
    /// No `--fs-root` to grant beneath.
    #[error("files are directory grants under the operator's --fs-root, and none is set")]
    NoFsRoot,
    /// The `--fs-root` itself cannot be resolved.
    #[error("--fs-root: {0}")]
    FsRoot(std::io::Error),
    /// The source cannot be resolved.
    #[error("{path:?}: {error}")]
    Source {
        /// The source as written.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// The source is a file, not a directory.
    #[error("{0:?} is not a directory (a grant is a directory)")]
    NotADirectory(String),
    /// The source lies outside `--fs-root`.
    #[error("{path:?} is outside --fs-root {} (every grant lies under it)", root.display())]
    OutsideRoot {
        /// The source as written.
        path: String,
        /// The root.
        root: PathBuf,
    },
}

/// A `files` entry as a read-only grant of a directory under `fs_root`.
fn file_grant(
    entry: &toml::Value,
    base: &Path,
    fs_root: Option<&Path>,
) -> Result<crate::spec::DirSpec, FileGrantError> {
    let (source, destination) = match entry {
        toml::Value::String(source) => (source.clone(), format!("/{source}")),
        toml::Value::Table(table) => match (table.get("source"), table.get("destination")) {
            (Some(toml::Value::String(s)), Some(toml::Value::String(d))) if table.len() == 2 => {
                (s.clone(), d.clone())
            }
            _ => return Err(FileGrantError::Shape),
        },
        _ => return Err(FileGrantError::Shape),
    };
    if source.contains(['*', '?', '[', '{']) {
        return Err(FileGrantError::Glob(source));
    }
    let root = fs_root.ok_or(FileGrantError::NoFsRoot)?;
    let root = std::fs::canonicalize(root).map_err(FileGrantError::FsRoot)?;
    let path = match std::fs::canonicalize(base.join(&source)) {
        Ok(path) => path,
        Err(error) => {
            return Err(FileGrantError::Source {
                path: source,
                error,
            });
        }
    };
    if !path.is_dir() {
        return Err(FileGrantError::NotADirectory(source));
    }
    let Ok(host) = path.strip_prefix(&root) else {
        return Err(FileGrantError::OutsideRoot { path: source, root });
    };
    Ok(crate::spec::DirSpec {
        host: host.to_string_lossy().into_owned(),
        guest: destination,
        mode: "ro".to_owned(),
    })
}

/// `template` with each `{{ name }}` replaced by the app variable `name`.
fn expand(template: &str, app: &BTreeMap<String, String>) -> Result<String, TemplateError> {
    luge_core::capabilities::variables::expand(template, |name| app.get(name).map(String::as_str))
}

#[cfg(test)]
mod tests {

    /// Every manifest key is served, ignored with a warning, or refused
    /// by name: none is dropped unseen.
    #[test]
    fn every_manifest_key_is_served_ignored_or_refused_by_name() {
        let manifest = |extra: &str, component: &str| {
            format!(
                "spin_manifest_version = 2\n{extra}\n[application]\nname = \"a\"\n\
                 description = \"ignored\"\n\
                 [[trigger.http]]\nroute = \"/\"\ncomponent = \"c\"\n\
                 [component.c]\nsource = \"c.wasm\"\n{component}\n"
            )
        };
        let parsed = |text: &str| {
            parse(Path::new("spin.toml"), text, Path::new("."), None, &|_| {
                None
            })
        };
        assert!(parsed(&manifest("", "build = { command = \"make\" }")).is_ok());
        for (extra, component, location, says) in [
            (
                "",
                "ai_models = [\"llama2-chat\"]",
                "component.c.ai_models",
                "LLM",
            ),
            (
                "",
                "allowed_http_hosts = [\"x\"]",
                "component.c.allowed_http_hosts",
                "allowed_outbound_hosts",
            ),
            ("", "colour = \"blue\"", "component.c.colour", "unknown"),
            ("extra = 1", "", "extra", "unknown"),
            ("spin_version = \"1\"", "", "spin_version", "version 1"),
        ] {
            let error = parsed(&manifest(extra, component)).unwrap_err();
            assert_eq!(error.location, location, "{error}");
            assert!(error.message.contains(says), "{error}");
        }
    }

    use super::*;

    /// A Spin app of two components, one on a catch-all route, with
    /// variables, stores, a templated grant and a build command.
    const APP: &str = include_str!("../testdata/spin-app.toml");

    fn env(name: &str) -> Option<String> {
        (name == "SPIN_VARIABLE_UPSTREAM").then(|| "http://127.0.0.1:9000".to_owned())
    }

    /// Spin's selective deployment: the components kept are served, the
    /// others' triggers are left out; a name the app lacks, and a kept
    /// component chaining to one left out, are refused by name.
    #[test]
    fn a_selection_serves_only_the_components_it_keeps() {
        let select = |text: &str, kept: &[&str]| {
            let kept: Vec<String> = kept.iter().map(|k| (*k).to_owned()).collect();
            parse_retaining(
                Path::new("spin.toml"),
                text,
                Path::new("/a"),
                None,
                &env,
                Some(&kept),
            )
        };
        let paths =
            |app: SpinApp| -> Vec<String> { app.routes.into_iter().map(|r| r.path).collect() };
        assert_eq!(
            paths(select(APP, &["app", "other"]).unwrap()),
            ["/...", "/exact"]
        );
        assert_eq!(paths(select(APP, &["other"]).unwrap()), ["/exact"]);
        assert_eq!(paths(select(APP, &["app"]).unwrap()), ["/..."]);
        let error = select(APP, &["missing"]).unwrap_err();
        assert!(
            error.message.contains("no component \"missing\""),
            "{error}"
        );
        assert!(select(APP, &[]).is_err());
        // `app` chains to `other`: keeping `app` alone is refused, as on
        // Spin; keeping both is not. Chaining to any (`*`) is refused in
        // every selection, as Spin refuses it.
        for (chained, both_kept) in [
            ("http://other.spin.internal", true),
            ("http://*.spin.internal", false),
        ] {
            let chaining = APP.replace("[\"{{ upstream }}\"]", &format!("[\"{chained}\"]"));
            let error = select(&chaining, &["app"]).unwrap_err();
            assert_eq!(
                error.location, "component.app.allowed_outbound_hosts[0]",
                "{error}"
            );
            assert!(error.message.contains(".spin.internal"), "{error}");
            assert_eq!(
                select(&chaining, &["app", "other"]).is_ok(),
                both_kept,
                "{chained}"
            );
        }
        // `other` left out is not a chaining target of `*.spin.internal`.
        let wildcard = APP.replace("[\"{{ upstream }}\"]", "[\"http://*.spin.internal\"]");
        let all = parse(
            Path::new("spin.toml"),
            &wildcard,
            Path::new("/a"),
            None,
            &env,
        )
        .unwrap();
        assert_eq!(all.routes[0].spec.allowed_outbound_hosts.len(), 2);
    }

    #[test]
    fn a_manifest_is_routes_with_spins_grants() {
        let routes = parse(
            Path::new("spin.toml"),
            APP,
            Path::new("/apps/x"),
            None,
            &env,
        )
        .unwrap()
        .routes;
        assert_eq!(routes.len(), 2);
        let route = &routes[0];
        // Parsed once, where the manifest was read: carried checked.
        assert!(
            route.spec.allowed_outbound_hosts.iter().all(|e| matches!(
                e,
                luge_core::capabilities::outbound::OutboundEntry::Checked(_)
            )),
            "{:?}",
            route.spec.allowed_outbound_hosts
        );
        assert_eq!(route.path, "/...");
        assert_eq!(route.module, Path::new("/apps/x/target/app.wasm"));
        assert_eq!(route.spec.allowed_outbound_hosts, ["http://127.0.0.1:9000"]);
        // `*.spin.internal` is the app's own components, each by name.
        let chaining = APP.replace(
            "[\"{{ upstream }}\"]",
            "[\"{{ upstream }}\", \"http://*.spin.internal\"]",
        );
        let routes = parse(
            Path::new("spin.toml"),
            &chaining,
            Path::new("/a"),
            None,
            &env,
        )
        .unwrap()
        .routes;
        assert_eq!(
            routes[0].spec.allowed_outbound_hosts,
            [
                "http://127.0.0.1:9000",
                "http://app.spin.internal",
                "http://other.spin.internal"
            ]
        );
        assert_eq!(route.spec.state, ["cart"]);
        assert_eq!(route.spec.variables.0["greeting"], "Hello, world");
        assert_eq!(route.spec.name.as_deref(), Some("app"));
        // `default` is the app's store; a component that does not list it
        // keeps a private one of its own.
        assert_eq!(route.spec.private_store.as_deref(), Some("spin.app"));
        assert_eq!(routes[1].spec.private_store, None);

        // `global:default` is the app's store too, on the Redis tier.
        let global = APP.replace(
            "source = \"other.wasm\"",
            "source = \"other.wasm\"\nkey_value_stores = [\"global:default\"]",
        );
        let routes = parse(Path::new("spin.toml"), &global, Path::new("/x"), None, &env)
            .unwrap()
            .routes;
        assert_eq!(routes[1].spec.private_store.as_deref(), Some("spin.app"));
        assert!(routes[1].spec.state.is_empty());

        // One component on two triggers: the same function on each route.
        let twice = APP.replace("component = \"other\"", "component = \"app\"");
        let routes = parse(Path::new("spin.toml"), &twice, Path::new("/x"), None, &env)
            .unwrap()
            .routes;
        assert_eq!(
            routes.iter().map(|r| r.path.as_str()).collect::<Vec<_>>(),
            ["/...", "/exact"]
        );
        for route in &routes {
            assert_eq!(route.spec.name.as_deref(), Some("app"));
            assert_eq!(route.module, Path::new("/x/target/app.wasm"));
            assert_eq!(route.spec.private_store.as_deref(), Some("spin.app"));
        }
    }

    #[test]
    fn what_luge_cannot_grant_is_refused_by_name() {
        let no_env = |_: &str| None;
        let e = parse(Path::new("spin.toml"), APP, Path::new("."), None, &no_env).unwrap_err();
        assert!(e.to_string().contains("SPIN_VARIABLE_UPSTREAM"), "{e}");
        for (from, to, expect) in [
            (
                "{{ upstream }}\"]",
                "https://example.com/path\"]",
                "a path is not allowed",
            ),
            (
                "{{ upstream }}\"]",
                "insecure:allow-all\"]",
                "allowed_outbound_hosts[0]",
            ),
            (
                "[[trigger.http]]\nroute = \"/exact\"",
                "[[trigger.sqs]]\nroute = \"/exact\"",
                // Kafka's row only with its feature: the kinds up to it.
                "Luge serves http, redis, redis-streams, nats-jetstream",
            ),
            (
                "key_value_stores = [\"default\", \"cart\"]",
                "files = [\"a.txt\"]",
                "fs-root",
            ),
            (
                "key_value_stores = [\"default\", \"cart\"]",
                "files = [\"static/**\"]",
                "a glob",
            ),
            (
                "{{ greeting }}, world",
                "{{ nope }}",
                "no variable \"nope\"",
            ),
            (
                "spin_manifest_version = 2",
                "spin_manifest_version = 1",
                "version 2",
            ),
        ] {
            let text = APP.replacen(from, to, 1);
            let e = parse(Path::new("spin.toml"), &text, Path::new("."), None, &env).unwrap_err();
            assert!(e.to_string().contains(expect), "{to}: {e}");
        }
    }

    #[test]
    fn redis_and_cron_triggers_wake_components_on_no_route() {
        // Redis and cron triggers beside an HTTP route, an app-level
        // Redis address templated from a variable.
        let manifest = include_str!("../testdata/spin-events.toml");
        let app = parse(
            Path::new("spin.toml"),
            manifest,
            Path::new("/a"),
            None,
            &env,
        )
        .unwrap();
        assert_eq!(app.routes.len(), 1);
        let names: Vec<_> = app
            .triggered
            .iter()
            .map(|f| f.spec.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["tick", "worker"]);
        assert_eq!(app.triggered[1].module, Path::new("/a/worker.wasm"));
        assert_eq!(
            app.triggered[1].spec.private_store.as_deref(),
            Some("spin.events")
        );
        let triggers: Vec<_> = app
            .triggers
            .iter()
            .map(|t| (t.name.as_str(), t.function.as_str(), t.max_in_flight))
            .collect();
        assert_eq!(
            triggers,
            [
                ("trigger.cron[0]", "tick", 1),
                (
                    "trigger.redis[0]",
                    "worker",
                    crate::trigger::DEFAULT_MAX_IN_FLIGHT
                ),
                ("audit", "worker", crate::trigger::DEFAULT_MAX_IN_FLIGHT),
            ]
        );
        assert_eq!(
            app.triggers[1].source,
            luge_trigger::Source::new(
                luge_trigger::redis::Subscription::new("redis://127.0.0.1:6379", "jobs").unwrap()
            )
        );

        for (from, to, expected) in [
            (
                "cron_expression = \"*/2 * * * * *\"",
                "cron_expression = \"* * * * *\"",
                "seconds first",
            ),
            ("address = \"redis://{{ redis_host }}\"\n", "", "no address"),
            ("channel = \"jobs\"\n", "", "names its channel"),
            (
                "component = \"tick\"",
                "component = \"nobody\"",
                "no [component.nobody]",
            ),
            (
                "channel = \"jobs\"",
                "channel = \"jobs\"\nqueue = 1",
                "unknown field",
            ),
        ] {
            let broken = manifest.replacen(from, to, 1);
            assert_ne!(broken, manifest, "{from}");
            let error = parse(Path::new("spin.toml"), &broken, Path::new("/a"), None, &env)
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{from}: {error}");
        }
    }
}
