//! Config assembly: the command line, `luge.toml` and the operator's files
//! become the executor's settings, function host, state store and Sledge
//! tenants, before anything is served.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, bail};
use luge_host::{Config, FunctionHost, FunctionStore, HostPolicy, Origin, RouteTable};
use luge_openwhisk::{Container, Containers, LogSink, ProcessStreams};

use crate::app::{App, Executor, Mode, TenantSite};
use crate::auth::OperatorToken;
use crate::cli::{Cli, Command, HostArgs, Options};
use crate::router::Api;

/// The address when neither the command line nor a config sets one:
/// loopback, OpenWhisk's action port.
const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080);

/// Builds the executor for `cli` without binding: the listen address and the
/// executor to pass to [`serve`](crate::serve::serve). Call inside the tokio runtime.
pub fn build(cli: Cli) -> anyhow::Result<(SocketAddr, Executor)> {
    match cli.command {
        Command::Proxy { common } => proxy(common),
        Command::Serve { host, common } => serve(&host, common),
        Command::Up(up) => {
            let (host, common) = up.serve()?;
            serve(&host, common)
        }
        Command::Run(_) | Command::Completions { .. } => {
            bail!("`luge run` and `luge completions` serve nothing")
        }
    }
}

/// `luge proxy`: one OpenWhisk action container.
fn proxy(common: Options) -> anyhow::Result<(SocketAddr, Executor)> {
    common.refuse_serve_only()?;
    let listen = common.listen.unwrap_or(DEFAULT_LISTEN);
    let mut settings = common.settings(&[])?;
    settings.telemetry = crate::telemetry::start(None, None)?;
    // OpenWhisk starts an action container with `__OW_API_HOST` (and the
    // operator's `__OW_*` extras) in its environment; the action sees
    // them, under what its init and run set.
    settings.init.container_env = luge_openwhisk::activation::container_env(std::env::vars());
    let sink: Arc<dyn LogSink> = Arc::new(ProcessStreams);
    let mode = Mode::Proxy(Arc::new(Container::new(sink)));
    Ok((
        listen,
        Executor(Arc::new(App::new(settings, mode, None, Vec::new()))),
    ))
}

/// `luge serve`: the function host, its luge.toml, Spin app, stores,
/// triggers and Sledge tenants, and OpenWhisk containers beside them.
fn serve(host: &HostArgs, common: Options) -> anyhow::Result<(SocketAddr, Executor)> {
    let config = host
        .config
        .as_deref()
        .map(Config::<Options>::load)
        .transpose()?;
    // `--token-file` wins over `LUGE_TOKEN`, which wins over the config's
    // `token_file`.
    let token_flag = common.token_file.clone();
    let config_token = config.as_ref().and_then(|c| c.server.token_file.clone());
    let common = match &config {
        Some(config) => common.or(config.server.clone()),
        None => common,
    };
    let listen = common.listen.unwrap_or(DEFAULT_LISTEN);
    let token_file = token_file(token_flag.as_deref(), config_token.as_deref());
    let token = operator_token(token_file)?;
    let store_dir = common
        .store
        .clone()
        .or_else(|| token.is_some().then(luge_host::store::default_store_dir));
    let mut state = state_config(host, config.as_ref());
    // Spin's key-value stores on Redis: the state's Redis tier.
    let stores =
        crate::runtime_config::KeyValueStores::load(common.runtime_config_file.as_deref())?;
    one_redis_tier(&mut state, &stores)?;
    let secrets: Vec<(&str, &std::path::Path)> = [
        ("the operator token", token_file),
        ("the function store", store_dir.as_deref()),
        ("the state store", state.dir.as_deref()),
    ]
    .into_iter()
    .filter_map(|(what, path)| Some((what, path?)))
    .collect();
    let mut settings = common.settings(&secrets)?;
    // Spin adds no `x-request-id`: an app served as Spin serves it sees
    // none unless the operator asks.
    settings.request_id_header = common.request_id_header.unwrap_or(host.spin.is_none());
    settings.telemetry = crate::telemetry::start(
        config.as_ref().and_then(|c| c.telemetry.as_ref()),
        config.as_ref().map(|c| c.file.as_path()),
    )?;
    let store = store_dir.as_deref().map(FunctionStore::open).transpose()?;
    let state_store = Arc::new(
        luge_state::StateStore::open(&state)
            .context("shared state (another luge may be using the same --state-dir)")?,
    );
    tracing::info!(
        dir = %state.dir.as_deref().map_or_else(String::new, |d| d.display().to_string()),
        global = state.redis_url.is_some(),
        "state store open"
    );
    // Each function's own SQLite database lies beside its state.
    let databases = crate::runtime_config::sqlite(
        common.runtime_config_file.as_deref(),
        state.dir.as_ref().map(|dir| dir.join("sqlite")),
    )?;
    // No function route may shadow an endpoint of the API.
    let api = Api::serve();
    let function_host = Arc::new(
        FunctionHost::new(
            Arc::clone(&settings.registry),
            HostPolicy {
                admit: settings.admit.clone(),
                allow_reuse_with_grants: common.allow_reuse_with_grants.unwrap_or(false),
            },
            store,
        )
        .reserve(Box::new(move |path| api.shadowed_by(path))),
    );
    if let Some(config) = &config {
        add_config(&function_host, config)?;
    }
    let mut triggers = config
        .as_ref()
        .map(|c| c.triggers.clone())
        .unwrap_or_default();
    let spin_specs = match &host.spin {
        Some(manifest) => {
            let app = add_spin_app(
                &function_host,
                manifest,
                common.runtime_config_file.as_deref(),
                settings.admit.fs_root.as_deref(),
                &stores,
                (!host.component_id.is_empty()).then_some(host.component_id.as_slice()),
            )?;
            triggers.extend(app.triggers);
            app.specs
        }
        None => Vec::new(),
    };
    check_databases(config.as_ref(), &spin_specs, &databases)?;
    crate::triggers::check(&function_host, &triggers)?;
    // Set once per process; a second `serve` (tests) keeps the first.
    let _ = luge_sqlite::install(databases);
    let restored = function_host.restore()?;
    if let Some(dir) = &store_dir {
        tracing::info!(store = %dir.display(), functions = restored.len(), "function store open");
    }
    let tenants = match &common.sledge_spec {
        Some(file) => sledge_tenants(file, &function_host)?,
        None => Vec::new(),
    };
    let mode = Mode::Serve {
        containers: Containers::with_limit(
            common
                .max_containers
                .unwrap_or(luge_openwhisk::container::DEFAULT_MAX_CONTAINERS),
        ),
        host: function_host,
        state: state_store,
        triggers,
    };
    Ok((
        listen,
        Executor(Arc::new(App::new(settings, mode, token, tenants))),
    ))
}

/// The runtime config's Redis key-value stores as the state's Redis tier:
/// there is one, so they must name the same Redis as `--state-url` (or
/// `[state] url`) where that is set.
fn one_redis_tier(
    state: &mut luge_state::StateConfig,
    stores: &crate::runtime_config::KeyValueStores,
) -> anyhow::Result<()> {
    match (&state.redis_url, &stores.redis_url) {
        (None, Some(url)) => state.redis_url = Some(url.clone()),
        (Some(tier), Some(url)) if tier != url => bail!(
            "the runtime config's Redis key-value stores name another Redis than --state-url (or [state] url): Luge keeps one Redis tier"
        ),
        _ => {}
    }
    Ok(())
}

/// As Spin does: each database label a function is granted must name one
/// of `databases`.
fn check_databases(
    config: Option<&Config<Options>>,
    spin_specs: &[luge_host::FunctionSpec],
    databases: &luge_sqlite::Databases,
) -> anyhow::Result<()> {
    let specs = config
        .iter()
        .flat_map(|c| {
            c.routes
                .iter()
                .map(|route| (route.path.as_str(), &route.spec))
        })
        .chain(
            spin_specs
                .iter()
                .map(|spec| (spec.name.as_deref().unwrap_or(""), spec)),
        );
    for (name, spec) in specs {
        if let Some(label) = spec
            .sqlite_databases
            .iter()
            .find(|label| !databases.knows(label))
        {
            bail!(
                "{name:?}: sqlite_databases names {label:?}, which no [sqlite_database.{label}] of the runtime config defines"
            );
        }
    }
    Ok(())
}

/// A luge.toml's routes, chains and triggered functions, added to
/// `function_host`; an error names the file and the entry.
fn add_config(function_host: &FunctionHost, config: &Config<Options>) -> anyhow::Result<()> {
    let file = config.file.display();
    function_host
        .add_configured(&config.routes)
        .map_err(|(path, e)| anyhow::Error::new(e).context(format!("{file}: route {path:?}")))?;
    function_host
        .add_chains(&config.chains)
        .map_err(|(path, e)| anyhow::Error::new(e).context(format!("{file}: chain {path:?}")))?;
    function_host
        .add_triggered(&config.functions)
        .map_err(|(name, e)| anyhow::Error::new(e).context(format!("{file}: function {name:?}")))
}

/// What a Spin app added: its components' specs (each route's and each
/// triggered component's), and its triggers.
struct SpinAdded {
    specs: Vec<luge_host::FunctionSpec>,
    triggers: Vec<luge_host::ConfiguredTrigger>,
}

/// The Spin app of `manifest` (only the components `retain` names, when
/// it names any), its variables from the environment and the runtime
/// config's providers, its stores on the Redis tier where the runtime
/// config puts them, added to `function_host`.
fn add_spin_app(
    function_host: &FunctionHost,
    manifest: &std::path::Path,
    runtime_config: Option<&std::path::Path>,
    fs_root: Option<&std::path::Path>,
    stores: &crate::runtime_config::KeyValueStores,
    retain: Option<&[String]>,
) -> anyhow::Result<SpinAdded> {
    // Spin's environment provider first, then the runtime config's
    // providers in order.
    let providers = crate::runtime_config::VariableProviders::load(runtime_config)?;
    let env = |key: &str| std::env::var(key).ok();
    let mut app = luge_host::spin::load(
        manifest,
        fs_root,
        &|key| {
            env(key).or_else(|| {
                let name = key.strip_prefix("SPIN_VARIABLE_")?;
                providers.get(&name.to_ascii_lowercase(), &env)
            })
        },
        retain,
    )?;
    // The stores the runtime config puts on the Redis tier, by their plain
    // label, for the components that list them.
    let specs = app
        .routes
        .iter_mut()
        .map(|route| &mut route.spec)
        .chain(app.triggered.iter_mut().map(|function| &mut function.spec));
    for spec in specs {
        spec.global_stores = stores
            .global
            .iter()
            .filter(|label| {
                spec.state.contains(label)
                    || (label.as_str() == luge_core::keyvalue::DEFAULT_BUCKET
                        && spec.private_store.is_some())
            })
            .cloned()
            .collect();
    }
    let file = manifest.display();
    function_host
        .add_configured(&app.routes)
        .map_err(|(path, e)| anyhow::Error::new(e).context(format!("{file}: route {path:?}")))?;
    function_host
        .add_triggered(&app.triggered)
        .map_err(|(name, e)| {
            anyhow::Error::new(e).context(format!("{file}: component {name:?}"))
        })?;
    let mut specs: Vec<luge_host::FunctionSpec> =
        app.routes.into_iter().map(|route| route.spec).collect();
    specs.extend(app.triggered.into_iter().map(|function| function.spec));
    Ok(SpinAdded {
        specs,
        triggers: app.triggers,
    })
}

/// `[state]` with the command line's `--state-dir` and `--state-url` over
/// it; the local tier is persisted under the data directory by default.
fn state_config(host: &HostArgs, config: Option<&Config<Options>>) -> luge_state::StateConfig {
    let section = config.map(|c| c.state.clone()).unwrap_or_default();
    let defaults = luge_state::Quotas::default();
    luge_state::StateConfig {
        dir: Some(
            host.state_dir
                .clone()
                .or(section.dir)
                .unwrap_or_else(|| luge_host::store::default_data_dir().join("state")),
        ),
        redis_url: host.state_url.clone().or(section.url),
        quotas: luge_state::Quotas {
            max_value_bytes: section
                .max_value_kb
                .map_or(defaults.max_value_bytes, |kb| kb << 10),
            max_keys_per_namespace: section.max_keys.unwrap_or(defaults.max_keys_per_namespace),
            max_bytes_per_namespace: section
                .max_namespace_mb
                .map_or(defaults.max_bytes_per_namespace, |mb| mb << 20),
        },
    }
}

/// The token file: `--token-file`, else (unless `LUGE_TOKEN` is set) the
/// config's `token_file`.
fn token_file<'a>(
    flag: Option<&'a std::path::Path>,
    config_file: Option<&'a std::path::Path>,
) -> Option<&'a std::path::Path> {
    flag.or(std::env::var_os("LUGE_TOKEN")
        .is_none()
        .then_some(config_file)
        .flatten())
}

/// The token from the [`token_file`], else `LUGE_TOKEN`; never from argv.
fn operator_token(file: Option<&std::path::Path>) -> anyhow::Result<Option<OperatorToken>> {
    if let Some(file) = file {
        let text = luge_registry::secret::read_private(file).context("operator token file")?;
        let text = String::from_utf8(text)
            .with_context(|| format!("operator token file {}: not UTF-8", file.display()))?;
        return Ok(Some(OperatorToken::new(&text).with_context(|| {
            format!("operator token file {}", file.display())
        })?));
    }
    match std::env::var("LUGE_TOKEN") {
        Ok(text) => Ok(Some(OperatorToken::new(&text).context("LUGE_TOKEN")?)),
        Err(_) => Ok(None),
    }
}

fn sledge_tenants(file: &std::path::Path, host: &FunctionHost) -> anyhow::Result<Vec<TenantSite>> {
    let mut sites = Vec::new();
    for tenant in luge_host::sledge::load(file)? {
        if !tenant.ignored_keys.is_empty() {
            tracing::info!(tenant = %tenant.name, keys = ?tenant.ignored_keys, "Sledge keys accepted but not used");
        }
        let routes = RouteTable::default();
        for route in &tenant.routes {
            let name = format!("{}{}", tenant.name, route.path);
            let origin = Origin::Sledge {
                tenant: tenant.name.clone(),
            };
            let function = host.load_route(route, name, origin).map_err(|e| {
                anyhow::Error::new(e).context(format!(
                    "{}: tenant {:?} route {:?}",
                    file.display(),
                    tenant.name,
                    route.path
                ))
            })?;
            routes.insert(function)?;
        }
        sites.push(TenantSite {
            name: tenant.name,
            port: tenant.port,
            routes,
        });
    }
    Ok(sites)
}
