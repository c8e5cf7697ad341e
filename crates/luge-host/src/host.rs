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

/// A request path's route: the function, and how the path matched.
#[derive(Debug, Clone)]
pub struct RouteMatch {
    /// The function served.
    pub function: Arc<Function>,
    /// The route as declared (`/api/...`, or the exact path): shared with
    /// the route table, which made it when the route was added.
    pub route: Arc<str>,
    /// The path the route is based at (`/api` for `/api/...`, `` for
    /// `/...`, the path itself for an exact route): shared as `route` is.
    pub base: Arc<str>,
    /// The rest of the request path after `base` (`/x/y`, or empty).
    pub path_info: String,
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
        served.matched(path_info)
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
}

impl Served {
    /// `function` on `route` (as declared: `/api/...` or an exact path).
    fn new(route: &str, function: Arc<Function>) -> Self {
        let declared: Arc<str> = Arc::from(route);
        let base = match route_prefix(route) {
            Some(base) => Arc::from(base),
            // An exact route is its own base.
            None => Arc::clone(&declared),
        };
        Self {
            function,
            route: declared,
            base,
        }
    }

    /// The match of a request whose path goes on with `path_info` past
    /// the route's base.
    fn matched(&self, path_info: String) -> RouteMatch {
        RouteMatch {
            function: Arc::clone(&self.function),
            route: Arc::clone(&self.route),
            base: Arc::clone(&self.base),
            path_info,
        }
    }
}

/// Routes of one listener: exact paths, and prefixes (`/api/...`).
#[derive(Debug, Default)]
struct Routes {
    exact: HashMap<String, Served>,
    /// By base (`/api`, or `` for `/...`).
    prefixes: HashMap<String, Served>,
}

impl Routes {
    /// The table a route goes in, and its key there.
    fn slot<'a>(&mut self, path: &'a str) -> (&mut HashMap<String, Served>, &'a str) {
        match route_prefix(path) {
            Some(base) => (&mut self.prefixes, base),
            None => (&mut self.exact, path),
        }
    }
}

/// The longest a route path is (checked where routes are declared): no
/// ancestor of a request path longer than this can be a prefix's base, so
/// a lookup tries at most this many bases, however long the request path.
const MAX_ROUTE_BYTES: usize = 256;

/// Functions by path: exact routes first, then the longest prefix route.
#[derive(Debug, Default)]
pub struct RouteTable {
    map: RwLock<Routes>,
}

impl RouteTable {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Routes> {
        // Updates are single inserts and removes: a poisoned lock still holds
        // a consistent map.
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Routes> {
        self.map.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The function served on exactly `path` (a declared route: `/api/...`
    /// names the prefix route itself).
    pub fn get(&self, path: &str) -> Option<Arc<Function>> {
        let routes = self.read();
        let served = match route_prefix(path) {
            Some(base) => routes.prefixes.get(base),
            None => routes.exact.get(path),
        };
        served.map(|served| Arc::clone(&served.function))
    }

    /// The exact route of a request for `path` (not a prefix route's).
    pub fn exact(&self, path: &str) -> Option<RouteMatch> {
        let routes = self.read();
        routes
            .exact
            .get(path)
            .map(|served| served.matched(String::new()))
    }

    /// The route a request for `path` takes: its exact route, else the
    /// prefix route with the longest base that `path` is, or is under.
    pub fn lookup(&self, path: &str) -> Option<RouteMatch> {
        let routes = self.read();
        if let Some(served) = routes.exact.get(path) {
            return Some(served.matched(String::new()));
        }
        self.prefixed_in(&routes, path)
    }

    /// The prefix route of `path` only (see [`RouteTable::lookup`]).
    pub fn prefixed(&self, path: &str) -> Option<RouteMatch> {
        self.prefixed_in(&self.read(), path)
    }

    fn prefixed_in(&self, routes: &Routes, path: &str) -> Option<RouteMatch> {
        if routes.prefixes.is_empty() {
            return None;
        }
        // `path` itself, then each ancestor at a '/' (longest first), then
        // the catch-all's empty base; never one longer than a route can be.
        let ancestors = std::iter::once(path.len())
            .chain(path.match_indices('/').map(|(at, _)| at).rev())
            .filter(|&end| end <= MAX_ROUTE_BYTES);
        for end in ancestors {
            let base = &path[..end];
            if let Some(served) = routes.prefixes.get(base) {
                return Some(served.matched(path[end..].to_owned()));
            }
        }
        None
    }

    /// Adds `function` on each of its routes; refuses a taken path.
    pub fn insert(&self, function: Arc<Function>) -> Result<(), HostError> {
        let mut map = self.write();
        for path in &function.routes {
            let (table, key) = map.slot(path);
            if let Some(owner) = table.get(key) {
                return Err(HostError::RouteTaken {
                    path: path.clone(),
                    owner: owner.function.name.clone(),
                });
            }
        }
        for path in &function.routes {
            let (table, key) = map.slot(path);
            table.insert(key.to_owned(), Served::new(path, Arc::clone(&function)));
        }
        Ok(())
    }

    /// In one step: `previous` stops serving its routes and `next` (if
    /// any) serves its own (routes checked free by the caller).
    fn swap(&self, previous: Option<&Arc<Function>>, next: Option<&Arc<Function>>) {
        let mut map = self.write();
        for path in previous.iter().flat_map(|f| &f.routes) {
            let (table, key) = map.slot(path);
            table.remove(key);
        }
        if let Some(function) = next {
            for path in &function.routes {
                let (table, key) = map.slot(path);
                table.insert(key.to_owned(), Served::new(path, Arc::clone(function)));
            }
        }
    }

    /// The function named `name`: preferably the one on `/{name}`.
    fn by_name(&self, name: &str) -> Option<Arc<Function>> {
        let routes = self.read();
        if let Some(served) = routes
            .exact
            .get(&format!("/{name}"))
            .filter(|s| s.function.name == name)
        {
            return Some(Arc::clone(&served.function));
        }
        routes
            .exact
            .values()
            .chain(routes.prefixes.values())
            .map(|served| &served.function)
            .find(|f| f.name == name)
            .cloned()
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        let routes = self.read();
        routes.exact.len() + routes.prefixes.len()
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
        let bytes = std::fs::read(path).map_err(|source| HostError::ModuleFile {
            path: path.to_owned(),
            source,
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
    /// that name, else the configured route of that name.
    pub fn by_name(&self, name: &str) -> Option<Arc<Function>> {
        if let Some(function) = self.uploaded(name) {
            return Some(function);
        }
        self.routes.by_name(name)
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
}
