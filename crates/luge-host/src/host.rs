//! The functions a standalone host serves, by route.
//!
//! Configured routes (TOML or Sledge) are loaded once at start and never
//! change. Uploaded functions come and go through [`FunctionHost::upload`]
//! and [`FunctionHost::remove`]: compiled before anything is published, then
//! written to the store and swapped into the route table under one lock, so
//! the table always matches the newest version on disk and a request sees
//! either the old function or the new one, whole.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use luge_core::Action;
use luge_registry::Init;
use luge_registry::admit::{self, AdmitError, Wanted};
use luge_registry::{LoadError, ModuleCode, ModuleRegistry};

use crate::chain::{Chain, ChainSpec};
use crate::config::ConfiguredRoute;
use crate::function::{Function, Origin};
use crate::spec::{
    FunctionSpec, HostPolicy, SpecError, check_exact_path, check_route_path, route_prefix,
};
use crate::store::{FunctionStore, StoreError, StoredMetadata, valid_name};

/// Why a function could not be deployed or found.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The name is not 1-64 letters, digits, `-`, `_`.
    #[error("function names are 1-64 letters, digits, '-' and '_'")]
    InvalidName,
    /// No uploaded function of that name.
    #[error("there is no function {0:?}")]
    NotFound(String),
    /// The spec was refused.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The code was not loadable Wasm or an artifact of this operator.
    #[error("the module was refused: {0}")]
    Load(#[from] LoadError),
    /// The admission pipeline refused the code (not a module, not a
    /// function, not sealed for this executor).
    #[error(transparent)]
    Admit(#[from] AdmitError),
    /// A chain stage is an HTTP handler, which has no stdin and stdout.
    #[error(
        "chain {chain:?}: stage {stage:?} is an HTTP handler (wasi:http/proxy); chain stages run on stdin and stdout"
    )]
    HandlerStage {
        /// The chain's path.
        chain: String,
        /// The stage path.
        stage: String,
    },
    /// A chain stage names no configured route.
    #[error("chain {chain:?}: stage {stage:?} is not a configured route")]
    UnknownStage {
        /// The chain's path.
        chain: String,
        /// The stage path.
        stage: String,
    },
    /// The route would shadow an endpoint of the executor's own API.
    #[error("route {path:?} would shadow {endpoint}: choose another path")]
    Shadows {
        /// The path.
        path: String,
        /// The endpoint, in words.
        endpoint: String,
    },
    /// The route is taken by another function.
    #[error("route {path:?} is already served by {owner:?}")]
    RouteTaken {
        /// The path.
        path: String,
        /// The function serving it.
        owner: String,
    },
    /// Metadata tried to name a module file.
    #[error("metadata: `module` is not allowed in an upload (the body is the module)")]
    ModuleInMetadata,
    /// A configured module file does not exist: most often an app not
    /// built yet, or built for another target than its manifest names.
    #[error(
        "module {path} does not exist: build it first (a Spin app: its component's `build` \
         command, such as `cargo build --target wasm32-wasip2 --release`; if Rust says the \
         target may not be installed, `rustup target add wasm32-wasip2`, or the target the \
         path names)"
    )]
    ModuleMissing {
        /// The file.
        path: PathBuf,
    },
    /// A configured module file could not be read.
    #[error("module {path}: {source}")]
    ModuleFile {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Uploads need a store.
    #[error("no function store is configured (--store or server.store)")]
    NoStore,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A request path's route: the function, and how the path matched, with
/// what Spin's HTTP trigger tells a handler about it (its `spin-*` request
/// headers), each computed as Spin computes it.
#[derive(Debug, Clone)]
pub struct RouteMatch {
    /// The function served.
    pub function: Arc<Function>,
    /// The route as the table holds it (the app's base joined, `/` for the
    /// root): shared with the route table, which made it when the route
    /// was added.
    pub route: Arc<str>,
    /// The path the route is based at (`/api` for `/api/...`, `` for
    /// `/...`, the route itself otherwise): shared as `route` is.
    pub base: Arc<str>,
    /// The rest of the request path that the route's trailing wildcard
    /// took (`/x/y`, `/` for a trailing slash, or empty), as Spin's
    /// `spin-path-info`.
    pub path_info: String,
    /// Spin's `spin-matched-route`: the route with the app's base, one
    /// trailing slash dropped (so `` for the root).
    pub matched_route: Arc<str>,
    /// Spin's `spin-raw-component-route`: the route as the manifest wrote
    /// it, before the app's base.
    pub raw_route: Arc<str>,
    /// Spin's `spin-component-route`: `raw_route` without its `/...`.
    pub component_route: Arc<str>,
    /// Each `:name` segment's name and value, in route order (Spin's
    /// `spin-path-match-NAME`).
    pub captures: Vec<(Box<str>, String)>,
}

impl RouteMatch {
    /// `function` on a request for `path` that reached it by name (a
    /// chained request), as its first route would have matched it: the
    /// part of `path` under a prefix route's base is the path info.
    pub fn by_name(function: Arc<Function>, path: &str) -> Self {
        let route = function
            .routes
            .first()
            .map(String::as_str)
            .unwrap_or_default();
        let served = Served::new(route, Arc::clone(&function));
        let path_info = match crate::spec::route_prefix(route) {
            Some(base) => path.strip_prefix(base).unwrap_or(path).to_owned(),
            None => String::new(),
        };
        served.matched(path_info, Vec::new())
    }
}

/// A function on one of its routes, as the route table holds it: the
/// route's strings are made once, when the route is added, and each
/// request's [`RouteMatch`] shares them.
#[derive(Debug)]
struct Served {
    function: Arc<Function>,
    route: Arc<str>,
    base: Arc<str>,
    matched_route: Arc<str>,
    raw_route: Arc<str>,
    component_route: Arc<str>,
    /// Ends in a wildcard (`/...`), whose capture is the path info.
    wildcard: bool,
    /// Every segment is literal: no `:name`, no wildcard. Only these are
    /// consulted before the executor's own API (a `:name` could match
    /// `/healthz`).
    literal: bool,
}

impl Served {
    /// `function` on `route` (as the table holds it: `/api/...`, `/:id`
    /// or an exact path, the app's base joined).
    fn new(route: &str, function: Arc<Function>) -> Self {
        let declared: Arc<str> = Arc::from(route);
        let prefix = route_prefix(route);
        let base = match prefix {
            Some(base) => Arc::from(base),
            // A route without a wildcard is its own base.
            None => Arc::clone(&declared),
        };
        // As Spin's router: the based route loses one trailing slash.
        let matched_route = match route.strip_suffix('/') {
            Some(stripped) => Arc::from(stripped),
            None => Arc::clone(&declared),
        };
        let raw_route: Arc<str> = match &function.spec.declared_route {
            Some(raw) => Arc::from(raw.as_str()),
            None => Arc::clone(&declared),
        };
        let component_route = match route_prefix(&raw_route) {
            Some(stripped) => Arc::from(stripped),
            None => Arc::clone(&raw_route),
        };
        Self {
            function,
            literal: prefix.is_none() && !crate::spec::has_parameters(route),
            wildcard: prefix.is_some(),
            route: declared,
            base,
            matched_route,
            raw_route,
            component_route,
        }
    }

    /// The route as `routefinder` takes it: Spin's `/...` is its `/*`.
    fn finder_spec(&self) -> String {
        match route_prefix(&self.route) {
            Some(base) => format!("{base}/*"),
            None => self.route.to_string(),
        }
    }

    /// The match of a request with `path_info` after the route's base and
    /// `captures` of its `:name` segments.
    fn matched(&self, path_info: String, captures: Vec<(Box<str>, String)>) -> RouteMatch {
        RouteMatch {
            function: Arc::clone(&self.function),
            route: Arc::clone(&self.route),
            base: Arc::clone(&self.base),
            path_info,
            matched_route: Arc::clone(&self.matched_route),
            raw_route: Arc::clone(&self.raw_route),
            component_route: Arc::clone(&self.component_route),
            captures,
        }
    }
}

/// Routes of one listener: each route's function by the route, and the
/// same routes as Spin's router finds them.
#[derive(Debug, Default)]
struct Routes {
    /// By route as the table holds it; a route is served once.
    declared: BTreeMap<String, Arc<Served>>,
    /// The literal routes (no `:name`, no wildcard), by the route without
    /// its leading and trailing slashes: a path that is one of them, so
    /// trimmed, takes it, as Spin's router would (a literal beats every
    /// other route on the path), in one hash lookup however many routes
    /// a host serves (uploads are many).
    literal: HashMap<String, Arc<Served>>,
    /// The other routes with Spin's precedence, from the crate Spin's
    /// router is built on (`routefinder`): segment by segment, a literal
    /// before a `:name` before a wildcard, so a longer wildcard beats a
    /// shorter one. Rebuilt whole on every change (only configuration and
    /// uploads change routes, never a request).
    finder: routefinder::Router<Arc<Served>>,
}

impl Routes {
    fn add(&mut self, path: &str, function: &Arc<Function>) {
        self.declared.insert(
            path.to_owned(),
            Arc::new(Served::new(path, Arc::clone(function))),
        );
    }

    /// Makes `literal` and `finder` anew from `declared`.
    fn rebuild(&mut self) {
        let mut finder = routefinder::Router::new();
        let mut literal = HashMap::new();
        for (path, served) in &self.declared {
            if served.literal {
                literal.insert(path.trim_matches('/').to_owned(), Arc::clone(served));
                continue;
            }
            // Every route was checked where it was declared
            // (`check_route_path`): one routefinder refuses is a bug,
            // logged, and the route is not served.
            if let Err(e) = finder.add(served.finder_spec(), Arc::clone(served)) {
                tracing::error!(route = %path, error = %e, "route not served");
            }
        }
        self.finder = finder;
        self.literal = literal;
    }

    /// The best route for `path`, as Spin's router picks it.
    fn best(&self, path: &str) -> Option<(Arc<Served>, RouteMatch)> {
        if let Some(served) = self.literal.get(path.trim_matches('/')) {
            let matched = served.matched(String::new(), Vec::new());
            return Some((Arc::clone(served), matched));
        }
        let found = self.finder.best_match(path)?;
        let served = Arc::clone(found.handler());
        let captures = found.captures();
        let path_info = if served.wildcard {
            // Spin keeps the trailing slash routefinder drops.
            let rest = captures.wildcard().unwrap_or_default();
            match (rest.is_empty(), path.ends_with('/')) {
                (true, false) => String::new(),
                (true, true) => "/".to_owned(),
                (false, false) => format!("/{rest}"),
                (false, true) => format!("/{rest}/"),
            }
        } else {
            String::new()
        };
        let named = captures
            .params()
            .iter()
            .map(|c| (Box::from(c.name()), c.value().to_owned()))
            .collect();
        let matched = served.matched(path_info, named);
        Some((served, matched))
    }
}

/// Functions by path, matched as Spin's router matches them (see
/// [`Routes`]).
#[derive(Debug, Default)]
pub struct RouteTable {
    map: RwLock<Routes>,
}

impl RouteTable {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Routes> {
        // Updates are whole rebuilds under the write lock: a poisoned lock
        // still holds a consistent map.
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Routes> {
        self.map.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The function served on exactly `path` (a declared route: `/api/...`
    /// names the prefix route itself).
    pub fn get(&self, path: &str) -> Option<Arc<Function>> {
        self.read()
            .declared
            .get(path)
            .map(|served| Arc::clone(&served.function))
    }

    /// The route a request for `path` takes when that route is literal
    /// (no `:name`, no wildcard); the others are consulted after the
    /// executor's own API ([`RouteTable::prefixed`]).
    pub fn exact(&self, path: &str) -> Option<RouteMatch> {
        let (served, matched) = self.read().best(path)?;
        served.literal.then_some(matched)
    }

    /// The route a request for `path` takes, as Spin's router picks it.
    pub fn lookup(&self, path: &str) -> Option<RouteMatch> {
        self.read().best(path).map(|(_, matched)| matched)
    }

    /// The route a request for `path` takes when it is not literal (see
    /// [`RouteTable::exact`]).
    pub fn prefixed(&self, path: &str) -> Option<RouteMatch> {
        let (served, matched) = self.read().best(path)?;
        (!served.literal).then_some(matched)
    }

    /// Adds `function` on each of its routes; refuses a taken path.
    pub fn insert(&self, function: Arc<Function>) -> Result<(), HostError> {
        let mut map = self.write();
        for path in &function.routes {
            if let Some(owner) = map.declared.get(path) {
                return Err(HostError::RouteTaken {
                    path: path.clone(),
                    owner: owner.function.name.clone(),
                });
            }
        }
        for path in &function.routes {
            map.add(path, &function);
        }
        map.rebuild();
        Ok(())
    }

    /// In one step: `previous` stops serving its routes and `next` (if
    /// any) serves its own (routes checked free by the caller).
    fn swap(&self, previous: Option<&Arc<Function>>, next: Option<&Arc<Function>>) {
        let mut map = self.write();
        for path in previous.iter().flat_map(|f| &f.routes) {
            map.declared.remove(path);
        }
        if let Some(function) = next {
            for path in &function.routes {
                map.add(path, function);
            }
        }
        map.rebuild();
    }

    /// The function named `name`: preferably the one on `/{name}`.
    fn by_name(&self, name: &str) -> Option<Arc<Function>> {
        let routes = self.read();
        if let Some(served) = routes
            .declared
            .get(&format!("/{name}"))
            .filter(|s| s.function.name == name)
        {
            return Some(Arc::clone(&served.function));
        }
        routes
            .declared
            .values()
            .map(|served| &served.function)
            .find(|f| f.name == name)
            .cloned()
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.read().declared.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Loads configured routes and keeps uploaded functions, on one registry.
pub struct FunctionHost {
    registry: Arc<ModuleRegistry>,
    policy: HostPolicy,
    store: Option<FunctionStore>,
    routes: RouteTable,
    uploaded: RwLock<BTreeMap<String, Arc<Function>>>,
    /// Functions on triggers only, by name; set at start.
    triggered: RwLock<BTreeMap<String, Arc<Function>>>,
    /// Chains by path; set at start, before uploads are restored.
    chains: RwLock<HashMap<String, Arc<Chain>>>,
    /// Serializes publishing (store write + table swap) of uploads; held
    /// only after compilation, never across it.
    publish: Mutex<()>,
    /// Names the endpoint of the executor's own API a path would shadow.
    reserved: Option<Reserved>,
}

/// Names the endpoint of the executor's own API at a path, if any (see
/// [`FunctionHost::reserve`]).
pub type Reserved = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

impl std::fmt::Debug for FunctionHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FunctionHost")
            .field("store", &self.store)
            .field("routes", &self.routes.len())
            .finish_non_exhaustive()
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl FunctionHost {
    /// A host with no functions yet. Code (uploads, unpacked zips) larger
    /// than the policy's `max_code_bytes` is refused.
    pub fn new(
        registry: Arc<ModuleRegistry>,
        policy: HostPolicy,
        store: Option<FunctionStore>,
    ) -> Self {
        Self {
            registry,
            policy,
            store,
            routes: RouteTable::default(),
            uploaded: RwLock::new(BTreeMap::new()),
            triggered: RwLock::new(BTreeMap::new()),
            chains: RwLock::new(HashMap::new()),
            publish: Mutex::new(()),
            reserved: None,
        }
    }

    /// Refuses function routes and chains at paths where `reserved` names
    /// an endpoint of the executor's own API (the front end's router), so
    /// neither can shadow the other.
    pub fn reserve(mut self, reserved: Reserved) -> Self {
        self.reserved = Some(reserved);
        self
    }

    /// Refuses `path` when it would shadow the executor's own API.
    fn check_unreserved(&self, path: &str) -> Result<(), HostError> {
        match self.reserved.as_ref().and_then(|reserved| reserved(path)) {
            Some(endpoint) => Err(HostError::Shadows {
                path: path.to_owned(),
                endpoint,
            }),
            None => Ok(()),
        }
    }

    /// Whether uploads can be stored.
    pub fn has_store(&self) -> bool {
        self.store.is_some()
    }

    /// Loads a configured route (compiling plain Wasm, or loading it from
    /// the compile cache) into a function, without serving it.
    pub fn load_route(
        &self,
        route: &ConfiguredRoute,
        name: String,
        origin: Origin,
    ) -> Result<Arc<Function>, HostError> {
        self.load_file(
            &route.module,
            &route.spec,
            name,
            vec![route.path.clone()],
            origin,
            Wanted::CommandOrHandler,
        )
    }

    /// Loads the module at `path` as the function `name`, served on
    /// `routes`, its code what `wanted` names.
    fn load_file(
        &self,
        path: &std::path::Path,
        spec: &FunctionSpec,
        name: String,
        routes: Vec<String>,
        origin: Origin,
        wanted: Wanted<'static>,
    ) -> Result<Arc<Function>, HostError> {
        let action = self.action(spec, &name)?;
        let bytes = std::fs::read(path).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => HostError::ModuleMissing {
                path: path.to_owned(),
            },
            _ => HostError::ModuleFile {
                path: path.to_owned(),
                source,
            },
        })?;
        let module = admit::load(
            &self.registry,
            &self.policy.admit,
            bytes,
            &action,
            spec.init_function.as_deref(),
        )?;
        let function = Function {
            name,
            routes,
            action: Arc::new(action),
            module,
            spec: spec.clone(),
            origin,
        };
        Ok(Arc::new(self.function(function, wanted)?))
    }

    /// Loads `functions`, served on triggers only. All or nothing: the
    /// first error is returned with the function's name.
    pub fn add_triggered(
        &self,
        functions: &[crate::trigger::TriggeredFunction],
    ) -> Result<(), (String, HostError)> {
        let mut loaded = BTreeMap::new();
        for function in functions {
            let name = match &function.spec.name {
                Some(name) if valid_name(name) => name.clone(),
                other => {
                    return Err((other.clone().unwrap_or_default(), HostError::InvalidName));
                }
            };
            let loaded_function = self
                .load_file(
                    &function.module,
                    &function.spec,
                    name.clone(),
                    Vec::new(),
                    Origin::Config,
                    Wanted::Triggered,
                )
                .map_err(|e| (name.clone(), e))?;
            loaded.insert(name, loaded_function);
        }
        self.triggered
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .extend(loaded);
        Ok(())
    }

    /// The function a trigger names `name`: one served on triggers only,
    /// else a configured route's.
    pub fn triggered(&self, name: &str) -> Option<Arc<Function>> {
        let only = self
            .triggered
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned();
        only.or_else(|| self.routes.by_name(name))
    }

    /// The action `spec` describes, with grants the engine can enforce.
    fn action(&self, spec: &FunctionSpec, name: &str) -> Result<Action, HostError> {
        Ok(spec.action(name, &self.policy, &**self.registry.runtime())?)
    }

    /// `function`, once its code is what `wanted` names and its grants
    /// allow what it asks.
    fn function(&self, function: Function, wanted: Wanted<'static>) -> Result<Function, HostError> {
        admit::entry(&*function.module, wanted)?;
        if function.action.reuse.is_some() && !function.module.reuses_instances() {
            return Err(HostError::Spec(SpecError::Refused(
                "reuse: only WASI 0.3 HTTP services (wasi:http@0.3) on the wasmtime engine can serve several requests from one instance; this function is not one".to_owned(),
            )));
        }
        Ok(function)
    }

    /// Serves configured `routes` on the main listener. All or nothing: the
    /// first error is returned with the route's path.
    pub fn add_configured(&self, routes: &[ConfiguredRoute]) -> Result<(), (String, HostError)> {
        let mut loaded = Vec::with_capacity(routes.len());
        for route in routes {
            self.check_unreserved(&route.path)
                .map_err(|e| (route.path.clone(), e))?;
            let name = match &route.spec.name {
                Some(name) if valid_name(name) => name.clone(),
                Some(_) => return Err((route.path.clone(), HostError::InvalidName)),
                None => route.path.trim_start_matches('/').to_owned(),
            };
            let function = self
                .load_route(route, name, Origin::Config)
                .map_err(|e| (route.path.clone(), e))?;
            loaded.push(function);
        }
        for function in loaded {
            let path = function.routes[0].clone();
            self.routes.insert(function).map_err(|e| (path, e))?;
        }
        Ok(())
    }

    /// Serves `chains` on the main listener, their stages resolved among
    /// the routes served now (call after [`FunctionHost::add_configured`]).
    /// All or nothing: the first error is returned with the chain's path.
    pub fn add_chains(&self, chains: &[ChainSpec]) -> Result<(), (String, HostError)> {
        let _publishing = self.publish.lock().unwrap_or_else(|e| e.into_inner());
        let mut resolved = Vec::with_capacity(chains.len());
        for spec in chains {
            let fail = |e| (spec.path.clone(), e);
            check_exact_path(&spec.path).map_err(|e| fail(e.into()))?;
            self.check_unreserved(&spec.path).map_err(fail)?;
            if let Some(owner) = self.routes.get(&spec.path) {
                return Err(fail(HostError::RouteTaken {
                    path: spec.path.clone(),
                    owner: owner.name.clone(),
                }));
            }
            let chain = Chain::resolve(spec, |path| self.routes.get(path)).map_err(|unknown| {
                fail(HostError::UnknownStage {
                    chain: spec.path.clone(),
                    stage: unknown.stage,
                })
            })?;
            if let Some((stage, _)) = spec
                .stages
                .iter()
                .zip(&chain.stages)
                .find(|(_, function)| function.module.serves_http())
            {
                return Err(fail(HostError::HandlerStage {
                    chain: spec.path.clone(),
                    stage: stage.clone(),
                }));
            }
            resolved.push(chain);
        }
        let mut map = self.chains.write().unwrap_or_else(|e| e.into_inner());
        for chain in resolved {
            if map.contains_key(&chain.path) {
                return Err((
                    chain.path.clone(),
                    HostError::RouteTaken {
                        path: chain.path.clone(),
                        owner: format!("chain {}", chain.path),
                    },
                ));
            }
            map.insert(chain.path.clone(), Arc::new(chain));
        }
        Ok(())
    }

    /// The chain served on `path` of the main listener.
    pub fn chain(&self, path: &str) -> Option<Arc<Chain>> {
        self.chains
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(path)
            .cloned()
    }

    /// Chains on the main listener.
    pub fn chain_count(&self) -> usize {
        self.chains.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Serves every stored function again, from its artifact (no compile).
    /// A damaged or refused entry is logged and skipped; the names restored
    /// are returned.
    pub fn restore(&self) -> Result<Vec<String>, HostError> {
        let Some(store) = &self.store else {
            return Ok(Vec::new());
        };
        let mut restored = Vec::new();
        for entry in store.load_all()? {
            let result = entry.map_err(HostError::from).and_then(|stored| {
                let metadata = stored.metadata;
                let name = metadata.name.clone();
                let function = self.prepare(
                    &name,
                    metadata.spec,
                    ModuleCode::Artifact(stored.artifact),
                    metadata.uploaded_at,
                )?;
                self.publish_uploaded(&name, function.0, None)?;
                Ok(name)
            });
            match result {
                Ok(name) => restored.push(name),
                Err(e) => {
                    tracing::error!(error = %luge_core::error_line(&e), "stored function not restored")
                }
            }
        }
        Ok(restored)
    }

    /// Compiles and loads `code` as `name`: the function and its sealed
    /// artifact, nothing published yet.
    fn prepare(
        &self,
        name: &str,
        spec: FunctionSpec,
        code: ModuleCode,
        uploaded_at: u64,
    ) -> Result<(Arc<Function>, Vec<u8>), HostError> {
        if !valid_name(name) {
            return Err(HostError::InvalidName);
        }
        if spec.module.is_some() {
            return Err(HostError::ModuleInMetadata);
        }
        let mut routes = vec![format!("/fn/{name}")];
        if let Some(path) = &spec.path {
            check_route_path(path)?;
            routes.push(path.clone());
        }
        let action = self.action(&spec, name)?;
        let sealed = match code {
            ModuleCode::Wasm(wasm) => {
                let init = Init::for_action(&action, spec.init_function.as_deref());
                self.registry.compile_sealed_with(&wasm, Some(&init))?
            }
            ModuleCode::Artifact(artifact) => artifact,
        };
        let sealed = ModuleCode::Artifact(sealed);
        let module = self.registry.load(&sealed)?;
        let function = Function {
            name: name.to_owned(),
            routes,
            action: Arc::new(action),
            module,
            spec,
            origin: Origin::Uploaded { uploaded_at },
        };
        let function = self.function(function, Wanted::CommandOrHandler)?;
        let (ModuleCode::Artifact(sealed) | ModuleCode::Wasm(sealed)) = sealed;
        Ok((Arc::new(function), sealed))
    }

    /// Stores (when `artifact` is given) and serves `function` as `name`,
    /// replacing the previous version.
    fn publish_uploaded(
        &self,
        name: &str,
        function: Arc<Function>,
        artifact: Option<&[u8]>,
    ) -> Result<bool, HostError> {
        let _publishing = self.publish.lock().unwrap_or_else(|e| e.into_inner());
        let mut uploaded = self.uploaded.write().unwrap_or_else(|e| e.into_inner());
        let previous = uploaded.get(name).cloned();
        {
            let chains = self.chains.read().unwrap_or_else(|e| e.into_inner());
            for path in &function.routes {
                self.check_unreserved(path)?;
                if let Some(owner) = self.routes.get(path)
                    && owner.name != name
                {
                    return Err(HostError::RouteTaken {
                        path: path.clone(),
                        owner: owner.name.clone(),
                    });
                }
                if chains.contains_key(path) {
                    return Err(HostError::RouteTaken {
                        path: path.clone(),
                        owner: format!("chain {path}"),
                    });
                }
            }
        }
        if let (Some(store), Some(artifact)) = (&self.store, artifact) {
            let uploaded_at = match function.origin {
                Origin::Uploaded { uploaded_at } => uploaded_at,
                _ => now_secs(),
            };
            store.put(
                &StoredMetadata {
                    name: name.to_owned(),
                    spec: function.spec.clone(),
                    uploaded_at,
                },
                artifact,
            )?;
        }
        self.routes.swap(previous.as_ref(), Some(&function));
        uploaded.insert(name.to_owned(), function);
        Ok(previous.is_some())
    }

    /// Compiles `code` (Wasm, a zip holding it, or this operator's artifact),
    /// stores it durably with `spec` and serves it at once on `/fn/{name}`
    /// (and `spec.path`). Returns the function and whether it replaced one.
    /// Compiles on the calling thread: call it off async threads.
    pub fn upload(
        &self,
        name: &str,
        code: Vec<u8>,
        spec: FunctionSpec,
    ) -> Result<(Arc<Function>, bool), HostError> {
        if !valid_name(name) {
            return Err(HostError::InvalidName);
        }
        if self.store.is_none() {
            return Err(HostError::NoStore);
        }
        let code =
            ModuleCode::detect(code, self.policy.admit.max_code_bytes).map_err(LoadError::from)?;
        let (function, artifact) = self.prepare(name, spec, code, now_secs())?;
        crate::trigger::uploaded(&function)?;
        let replaced = self.publish_uploaded(name, Arc::clone(&function), Some(&artifact))?;
        Ok((function, replaced))
    }

    /// Stops serving and deletes the uploaded function `name`.
    pub fn remove(&self, name: &str) -> Result<(), HostError> {
        let _publishing = self.publish.lock().unwrap_or_else(|e| e.into_inner());
        let mut uploaded = self.uploaded.write().unwrap_or_else(|e| e.into_inner());
        let function = uploaded
            .remove(name)
            .ok_or_else(|| HostError::NotFound(name.to_owned()))?;
        if let Some(store) = &self.store {
            store.remove(name)?;
        }
        self.routes.swap(Some(&function), None);
        Ok(())
    }

    /// The uploaded function `name`.
    pub fn uploaded(&self, name: &str) -> Option<Arc<Function>> {
        self.uploaded
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Every uploaded function, by name.
    pub fn list_uploaded(&self) -> Vec<Arc<Function>> {
        self.uploaded
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// The function other functions call `name`: an uploaded function of
    /// that name, else the configured route of that name, else a function
    /// on triggers only (a Spin component on a private route).
    pub fn by_name(&self, name: &str) -> Option<Arc<Function>> {
        if let Some(function) = self.uploaded(name) {
            return Some(function);
        }
        self.routes.by_name(name).or_else(|| {
            self.triggered
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .get(name)
                .cloned()
        })
    }

    /// The exact route of a request for `path` on the main listener.
    pub fn route(&self, path: &str) -> Option<RouteMatch> {
        self.routes.exact(path)
    }

    /// The prefix route of a request for `path` on the main listener (the
    /// executor's own API and chains are consulted before it).
    pub fn prefixed_route(&self, path: &str) -> Option<RouteMatch> {
        self.routes.prefixed(path)
    }

    /// Routes on the main listener.
    pub fn route_count(&self) -> usize {
        self.routes.len()
    }

    /// Each route on the main listener (as the table holds it: `/api/...`
    /// for a prefix) and the name of its function, in route order.
    pub fn routes(&self) -> Vec<(String, String)> {
        self.routes
            .read()
            .declared
            .iter()
            .map(|(route, served)| (route.clone(), served.function.name.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use luge_core::{Invocation, LoadedModule, Outcome};

    /// A module never run: the route table only holds it.
    struct Unrun;

    impl LoadedModule for Unrun {
        fn has_export(&self, _: &str) -> bool {
            false
        }
        fn run(&self, _: Invocation) -> Outcome {
            unreachable!("the route table's tests run nothing")
        }
        fn code_size(&self) -> usize {
            0
        }
    }

    /// A table of functions, each named `name` on `route` (the route as a
    /// Spin manifest wrote it, served under `base`).
    fn table(base: &str, routes: &[(&str, &str)]) -> RouteTable {
        let table = RouteTable::default();
        for &(name, raw) in routes {
            let route = if base == "/" {
                raw.to_owned()
            } else {
                format!("{base}{raw}")
            };
            let function = Function {
                name: name.to_owned(),
                routes: vec![route],
                action: Arc::new(Action::command(name)),
                module: Arc::new(Unrun),
                spec: FunctionSpec {
                    declared_route: Some(raw.to_owned()),
                    ..FunctionSpec::default()
                },
                origin: Origin::Config,
            };
            table.insert(Arc::new(function)).unwrap();
        }
        table
    }

    fn served(table: &RouteTable, path: &str) -> Option<String> {
        table.lookup(path).map(|m| m.function.name.clone())
    }

    /// Spin's router tests (spin-http's `routes.rs`), as a table: the
    /// routes, then each path and the component Spin serves it with.
    #[test]
    fn precedence_is_spins() {
        /// The app's base, its components on their routes, and each path
        /// with the component Spin serves it with.
        type Case<'a> = (
            &'a str,
            &'a [(&'a str, &'a str)],
            &'a [(&'a str, Option<&'a str>)],
        );
        let cases: &[Case] = &[
            // test_router_exact
            (
                "/",
                &[("foo", "/foo"), ("foobar", "/foo/bar")],
                &[("/foo", Some("foo")), ("/foo/bar", Some("foobar"))],
            ),
            // test_router_respects_base
            (
                "/base",
                &[("foo", "/foo"), ("foobar", "/foo/bar")],
                &[
                    ("/base/foo", Some("foo")),
                    ("/base/foo/bar", Some("foobar")),
                    ("/foo", None),
                ],
            ),
            // test_router_wildcard
            (
                "/",
                &[("all", "/...")],
                &[
                    ("/foo/bar", Some("all")),
                    ("/abc/", Some("all")),
                    ("/", Some("all")),
                ],
            ),
            // test_router_respects_longest_match, in both orders
            (
                "/",
                &[
                    ("one", "/one/..."),
                    ("onetwo", "/one/two/..."),
                    ("onetwothree", "/one/two/three/..."),
                ],
                &[
                    ("/one/two/three/four", Some("onetwothree")),
                    ("/one/two/x", Some("onetwo")),
                    ("/one", Some("one")),
                ],
            ),
            (
                "/",
                &[
                    ("onetwothree", "/one/two/three/..."),
                    ("onetwo", "/one/two/..."),
                    ("one", "/one/..."),
                ],
                &[("/one/two/three/four", Some("onetwothree"))],
            ),
            // test_router_exact_beats_wildcard; the root is exact
            (
                "/",
                &[("exact", "/one"), ("wildcard", "/..."), ("root", "/")],
                &[
                    ("/one", Some("exact")),
                    ("/", Some("root")),
                    ("/two", Some("wildcard")),
                ],
            ),
            // A wildcard's base ends at a segment boundary.
            (
                "/",
                &[("api", "/api/..."), ("all", "/...")],
                &[
                    ("/apix", Some("all")),
                    ("/api", Some("api")),
                    ("/api/x", Some("api")),
                ],
            ),
            // A literal beats a parameter, segment by segment; trailing
            // slashes are ignored, as routefinder does.
            (
                "/",
                &[
                    ("param", "/users/:id"),
                    ("me", "/users/me"),
                    ("rest", "/users/..."),
                ],
                &[
                    ("/users/me", Some("me")),
                    ("/users/me/", Some("me")),
                    ("/users/42", Some("param")),
                    ("/users/42/x", Some("rest")),
                ],
            ),
        ];
        for (base, routes, paths) in cases {
            let table = table(base, routes);
            for (path, expected) in *paths {
                assert_eq!(
                    served(&table, path).as_deref(),
                    *expected,
                    "{routes:?} under {base:?}: {path}"
                );
            }
        }
    }

    /// Spin's `trailing_wildcard_respects_trailing_slash` and
    /// `named_wildcard_is_captured`, and the headers' other values.
    #[test]
    fn captures_and_path_info_are_spins() {
        let wild = table_with("/test/...");
        for (path, info) in [
            ("/test", ""),
            ("/test/", "/"),
            ("/test/hello", "/hello"),
            ("/test/hello/", "/hello/"),
        ] {
            assert_eq!(wild.lookup(path).unwrap().path_info, info, "{path}");
        }
        let named = table_with("/1/:two/...");
        let m = named.lookup("/1/2/3").unwrap();
        assert_eq!(m.captures, [("two".into(), "2".to_owned())]);
        assert_eq!(m.path_info, "/3");
        let shaped = table_with("/base/:path_segment/:path_end/...");
        let m = shaped.lookup("/base/path/end/rest").unwrap();
        assert_eq!(
            m.captures,
            [
                ("path_segment".into(), "path".to_owned()),
                ("path_end".into(), "end".to_owned())
            ]
        );
        assert_eq!(&*m.matched_route, "/base/:path_segment/:path_end/...");
        assert_eq!(&*m.component_route, "/base/:path_segment/:path_end");
        assert_eq!(m.path_info, "/rest");
        // The root's matched route is empty, as Spin's based route is.
        let root = table_with("/");
        let m = root.lookup("/").unwrap();
        assert_eq!((&*m.matched_route, &*m.raw_route), ("", "/"));
        // Under a base, the raw route is the manifest's.
        let based = table("/api", &[("c", "/items/...")]);
        let m = based.lookup("/api/items/7").unwrap();
        assert_eq!(&*m.matched_route, "/api/items/...");
        assert_eq!(&*m.raw_route, "/items/...");
        assert_eq!(&*m.component_route, "/items");
        assert_eq!(m.path_info, "/7");
    }

    fn table_with(route: &str) -> RouteTable {
        table("/", &[("comp", route)])
    }

    /// Literal routes come before the executor's own API; the others after
    /// it, so a `:name` cannot take `/healthz`.
    #[test]
    fn only_literal_routes_are_exact() {
        let table = table("/", &[("p", "/:any"), ("lit", "/lit")]);
        assert!(table.exact("/healthz").is_none());
        assert_eq!(table.prefixed("/healthz").unwrap().function.name, "p");
        assert_eq!(table.exact("/lit").unwrap().function.name, "lit");
        assert!(table.prefixed("/lit").is_none());
    }
}
