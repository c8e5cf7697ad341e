//! Command line and the settings derived from it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use luge_core::limits::{
    DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MEMORY_BYTES, DEFAULT_TIMEOUT, Limits, MAX_MEMORY_BYTES,
    MAX_TIMEOUT,
};
use luge_core::{LimitPolicy, Preemption, WasmRuntime};
use luge_openwhisk::InitSettings;
use luge_registry::ModuleRegistry;
use luge_registry::artifact::{self, KeySource};
use luge_sched::{Policy, Scheduler, SchedulerConfig, Sharding, WorkerWrapper};

use crate::frontend::{FrontEndKind, WorkerRuntimes};

/// Luge: a serverless-first WebAssembly function runtime.
#[derive(Debug, Parser)]
#[command(name = "luge", version, about)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The book's command-line reference (docs/book/src/ref-cli.md), made from
/// the same clap command tree `luge` parses: each mode, what it does, and
/// each of its flags with its value and help. A test fails when the book's
/// copy differs (`LUGE_BLESS=1` rewrites it).
pub fn reference() -> String {
    use clap::CommandFactory;
    use std::fmt::Write;
    let mut root = Cli::command();
    root.build();
    let mut out = String::from(
        "# Command-line reference\n\n\
         Made from the `luge` binary's own command tree \
         (`luge_executor::cli::reference`); `luge SUBCOMMAND --help` prints the same.\n",
    );
    // `help` is clap's own, not a mode.
    for mode in root.get_subcommands().filter(|m| m.get_name() != "help") {
        let about = mode.get_about().map(|a| a.to_string()).unwrap_or_default();
        let _ = write!(
            out,
            "\n## `luge {}`\n\n{}\n\n",
            mode.get_name(),
            about.trim()
        );
        let mut rows = Vec::new();
        for arg in mode.get_arguments() {
            if arg.is_hide_set() || matches!(arg.get_id().as_str(), "help" | "version") {
                continue;
            }
            // A switch (`--no-preempt`) takes no value, whatever name
            // clap gave the value it stores.
            let takes_value = arg.get_num_args().is_some_and(|n| n.takes_values());
            let values = match arg.get_value_names() {
                Some(names) if takes_value => names.iter().map(|n| format!(" <{n}>")).collect(),
                _ => String::new(),
            };
            let name = match (arg.get_long(), arg.get_short()) {
                (Some(long), Some(short)) => format!("-{short}, --{long}{values}"),
                (Some(long), None) => format!("--{long}{values}"),
                (None, _) => format!("<{}>", arg.get_id()),
            };
            let help = arg
                .get_long_help()
                .or_else(|| arg.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default();
            let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
            rows.push(format!("| `{name}` | {} |", help.replace('|', "\\|")));
        }
        if !rows.is_empty() {
            out.push_str("| Flag | What it does |\n|---|---|\n");
            out.push_str(&rows.join("\n"));
            out.push('\n');
        }
    }
    out
}

/// What `luge --version` prints after the name: the version, the commit
/// it was built from (`LUGE_COMMIT`, set by build.rs), and the engines
/// compiled in (`--engine` takes these).
pub fn version() -> String {
    let engines: Vec<&str> = luge_engines::EngineKind::built_in()
        .into_iter()
        .map(luge_engines::EngineKind::name)
        .collect();
    format!(
        "{} (commit {}; engines: {})",
        env!("CARGO_PKG_VERSION"),
        env!("LUGE_COMMIT"),
        engines.join(", ")
    )
}

/// Modes of the executor.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// One OpenWhisk action container: POST /init, POST /run.
    Proxy {
        #[command(flatten)]
        common: Options,
    },
    /// Runs one WASI command module once, here: its output is this
    /// process's, its exit status this process's status.
    Run(crate::run::RunArgs),
    /// Many containers (POST /{id}/init|run|destroy, GET /{id}/logs), and
    /// functions on routes: from a config, a Sledge spec, or uploads.
    Serve {
        #[command(flatten)]
        host: HostArgs,
        #[command(flatten)]
        common: Options,
    },
    /// Serves the Spin app in this directory as `spin up` does: its
    /// spin.toml, its runtime-config.toml if there is one, on
    /// 127.0.0.1:3000 (another free port if that one is taken), the routes
    /// printed.
    Up(UpArgs),
    /// Prints a completion script for SHELL: `source <(luge completions
    /// bash)`, or write it where the shell loads completions from.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// What `luge up` reads: Spin's `spin up` flags of the same names.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// The app: its manifest, or a directory holding a spin.toml
    /// [default: the current directory].
    #[arg(short = 'f', long = "from", value_name = "APPLICATION")]
    pub from: Option<PathBuf>,
    /// Where the app's state (key-value stores, SQLite databases) is kept
    /// [default: .spin in the app's directory, as Spin keeps it].
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Serve only this component, once per component kept; the triggers
    /// of the others are left out [default: every component].
    #[arg(short = 'c', long = "component-id", value_name = "ID")]
    pub component_id: Vec<String>,
    #[command(flatten)]
    pub common: Options,
}

/// The port `luge up` listens on unless told (`spin up`'s).
pub const SPIN_UP_PORT: u16 = 3000;

impl UpArgs {
    /// The app's manifest: `--from` itself, or the spin.toml in it (or in
    /// the current directory).
    pub fn manifest(&self) -> anyhow::Result<PathBuf> {
        let from = self.from.clone().unwrap_or_else(|| PathBuf::from("."));
        let manifest = if from.is_dir() {
            from.join("spin.toml")
        } else {
            from
        };
        anyhow::ensure!(
            manifest.is_file(),
            "no Spin app at {}: run `luge up` in a directory holding a spin.toml, or name it with --from",
            manifest.display()
        );
        Ok(manifest)
    }

    /// `luge serve --spin` for this app: its runtime-config.toml beside the
    /// manifest unless one is named, its state in `.spin` beside it unless
    /// told, on [`SPIN_UP_PORT`] unless told.
    pub fn serve(self) -> anyhow::Result<(HostArgs, Options)> {
        let manifest = self.manifest()?;
        let dir = manifest
            .parent()
            .filter(|dir| !dir.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_owned();
        let mut common = self.common;
        if common.runtime_config_file.is_none() {
            let beside = dir.join("runtime-config.toml");
            if beside.is_file() {
                common.runtime_config_file = Some(beside);
            }
        }
        common.listen.get_or_insert(std::net::SocketAddr::from((
            std::net::Ipv4Addr::LOCALHOST,
            SPIN_UP_PORT,
        )));
        let host = HostArgs {
            spin: Some(manifest),
            state_dir: Some(self.state_dir.unwrap_or_else(|| dir.join(".spin"))),
            component_id: self.component_id,
            ..HostArgs::default()
        };
        Ok((host, common))
    }
}

pub use crate::options::{EngineKind, Options, PolicyArg};

/// What `luge serve` reads besides its [`Options`]: the config file
/// itself, and the `[state]` table's two settings.
#[derive(Debug, Args, Default)]
pub struct HostArgs {
    /// Settings and routes (TOML); command-line flags override its
    /// `[server]` keys, which are these flags' names with `_` for `-`.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// A Spin app to serve: its manifest (`spin.toml`, version 2), whose
    /// HTTP triggers become routes beside the config's; component sources
    /// are relative to the manifest, app variables come from their
    /// defaults or `SPIN_VARIABLE_NAME`.
    #[arg(long, value_name = "SPIN_TOML")]
    pub spin: Option<PathBuf>,
    /// With `--spin`: serve only this component, once per component kept
    /// (Spin's `spin up --component-id`, SpinKube's `components`); the
    /// triggers of the others are left out [default: every component].
    #[arg(long = "component-id", value_name = "ID", requires = "spin")]
    pub component_id: Vec<String>,
    /// The local tier of functions' shared state, persisted here [default:
    /// the config's `[state] dir`, else `state` in the data directory,
    /// $XDG_DATA_HOME/luge].
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// The global tier of shared state, `redis://host:port/db` [default:
    /// the config's `[state] url`, else none: the local tier serves both].
    #[arg(long)]
    pub state_url: Option<String>,
}

/// Default preemption quantum, µs (Sledge's and DESIGN.md's 5 ms).
pub const DEFAULT_QUANTUM_US: u64 = 5000;

/// Everything the routes need, built once at start.
pub struct Settings {
    /// Runs invocations.
    pub scheduler: Arc<Scheduler>,
    /// The workers' own runtimes, when they serve connections
    /// (`--front-end workers`).
    pub worker_runtimes: Option<Arc<WorkerRuntimes>>,
    /// The multi-thread runtime that engine host calls, callees and
    /// compilation run on (see [`crate::frontend`]).
    pub runtime: tokio::runtime::Handle,
    /// How sandboxes share workers.
    pub preemption: Preemption,
    /// Loads and shares modules.
    pub registry: Arc<ModuleRegistry>,
    /// The operator's bounds on every function, however it arrives (an
    /// OpenWhisk `/init`, an upload, luge.toml, a Spin app): directory
    /// grants' root, limits, code size.
    pub admit: luge_registry::admit::Bounds,
    /// What an OpenWhisk `/init` adds: the container's environment.
    pub init: InitSettings,
    /// Request body cap in bytes.
    pub max_body_bytes: usize,
    /// Bound on invocations in flight, and how tenants and call trees
    /// share it.
    pub admission: crate::admission::Places,
    /// Bounds on client connections.
    pub connections: crate::http::ConnectionLimits,
    /// Callees whose p90 is at most this run fused (see
    /// `--fuse-calls-under-us`); zero: none.
    pub fuse_calls_under: Duration,
    /// OpenTelemetry export, when on (from the environment; `luge serve`
    /// adds its config's `[telemetry]`).
    pub telemetry: Option<luge_telemetry::Telemetry>,
    /// Whether every response carries `x-request-id` (`luge serve` with a
    /// Spin app sets it off unless asked: see `--request-id-header`).
    pub request_id_header: bool,
}

impl Options {
    /// Whether running sandboxes yield at quanta (`--no-preempt`: not).
    fn preempts(&self) -> bool {
        self.preempt.unwrap_or(true)
    }

    fn cache_dir(&self) -> PathBuf {
        self.cache_dir
            .clone()
            .unwrap_or_else(artifact::default_cache_dir)
    }

    /// `--max-sandboxes`, or its default.
    fn max_sandboxes(&self) -> u32 {
        // Explained where it is set.
        self.max_sandboxes
            .unwrap_or(luge_engines::DEFAULT_SANDBOXES)
    }

    fn limit_policy(&self) -> anyhow::Result<LimitPolicy> {
        // OpenWhisk's defaults and maxima (256 MiB, 512 MiB, 60 s, 300 s).
        let memory_mb = self.memory_mb.unwrap_or(DEFAULT_MEMORY_BYTES >> 20);
        let max_memory_mb = self.max_memory_mb.unwrap_or(MAX_MEMORY_BYTES >> 20);
        let timeout_ms = self
            .timeout_ms
            .unwrap_or(DEFAULT_TIMEOUT.as_millis() as u64);
        let max_timeout_ms = self
            .max_timeout_ms
            .unwrap_or(MAX_TIMEOUT.as_millis() as u64);
        if memory_mb > max_memory_mb || timeout_ms > max_timeout_ms {
            bail!("default limits must not exceed the maximum limits");
        }
        if memory_mb == 0 || timeout_ms == 0 {
            bail!("limits must be greater than zero");
        }
        let limits = |mb: u64, ms: u64| Limits {
            memory_bytes: mb << 20,
            timeout: Duration::from_millis(ms),
            fuel: None,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
        };
        Ok(LimitPolicy {
            default: limits(memory_mb, timeout_ms),
            max: limits(max_memory_mb, max_timeout_ms),
        })
    }

    fn runtime(&self) -> anyhow::Result<Arc<dyn WasmRuntime>> {
        let settings = luge_engines::EngineSettings {
            target: None,
            sandboxes: Some(self.max_sandboxes()),
            max_memory_bytes: self.limit_policy()?.max.memory_bytes,
            fuel: self.fuel.unwrap_or(false),
            resident_budget_bytes: self
                .resident_budget_mb
                .map_or(luge_engines::DEFAULT_RESIDENT_BUDGET_BYTES, |mb| mb << 20),
        };
        Ok(luge_engines::build(
            self.engine.unwrap_or(EngineKind::Wasmtime),
            &settings,
        )?)
    }

    /// Where connections are served; see `--front-end`.
    fn front_end(&self) -> anyhow::Result<FrontEndKind> {
        let engine = self.engine.unwrap_or(EngineKind::Wasmtime);
        // Only Wasmtime's sandboxes yield at the end of a quantum, and only
        // its WASI never blocks a thread on a runtime (which a sandbox run
        // inside a worker's runtime must not do; see crate::frontend).
        if engine != EngineKind::Wasmtime && self.front_end == Some(FrontEndKind::Workers) {
            bail!(
                "--front-end workers needs --engine wasmtime: {engine:?} sandboxes run to completion and block on their own runtime; use --front-end threads"
            );
        }
        let yields = engine == EngineKind::Wasmtime && self.preempts();
        Ok(self.front_end.unwrap_or(if yields {
            FrontEndKind::Workers
        } else {
            FrontEndKind::Threads
        }))
    }

    /// `--workers`, or its default (one per core).
    fn workers(&self) -> usize {
        self.workers
            .unwrap_or_else(|| SchedulerConfig::default().workers)
    }

    /// The scheduler, its workers serving connections where `front_end`
    /// says, each with `teardowns`: see [`crate::frontend::per_worker`].
    fn scheduler(
        &self,
        front_end: FrontEndKind,
        teardowns: usize,
    ) -> anyhow::Result<(Scheduler, Option<Arc<WorkerRuntimes>>)> {
        let config = SchedulerConfig {
            workers: self.workers(),
            policy: match self.policy.unwrap_or(PolicyArg::Edf) {
                PolicyArg::Fifo => Policy::Fifo,
                PolicyArg::Edf => Policy::Edf,
                PolicyArg::Srsf => Policy::Srsf,
            },
            pin: self.pin.unwrap_or(true),
            // SRSF expects a function's p90 unless told otherwise.
            srsf_percentile: self.srsf_percentile.unwrap_or(90.0),
            sharding: match (self.long_above_us, self.long_workers) {
                (Some(us), Some(long_workers)) => Some(Sharding {
                    long_above: Duration::from_micros(us),
                    long_workers,
                }),
                (None, None) => None,
                _ => bail!("sharding needs both long_above_us and long_workers"),
            },
            // The scheduler's own default (1 ms, explained there) unless set.
            steal_margin: self.steal_margin_us.map_or(
                SchedulerConfig::default().steal_margin,
                Duration::from_micros,
            ),
        };
        // Engine host calls (WASI sleeps, file I/O) use tokio's timers and
        // blocking pool: run every worker inside the front end's runtime.
        let handle = tokio::runtime::Handle::try_current()
            .context("the scheduler must be started inside the tokio runtime")?;
        let ambient = handle.clone();
        let wrapper: WorkerWrapper = Arc::new(move |_, run| {
            let _runtime = ambient.enter();
            run();
        });
        let (front_ends, runtimes) = match front_end {
            FrontEndKind::Workers => {
                let (factory, runtimes) =
                    crate::frontend::per_worker(config.workers, handle.clone(), teardowns)
                        .context("cannot build the workers' runtimes")?;
                (Some(factory), Some(runtimes))
            }
            FrontEndKind::Threads => (None, None),
        };
        tracing::info!(workers = config.workers, policy = ?config.policy, pin = config.pin, sharding = ?config.sharding, ?front_end, "scheduler ready");
        let scheduler = Scheduler::start_with(&config, Some(wrapper), front_ends)?;
        Ok((scheduler, runtimes))
    }

    /// Builds the engine, registry, scheduler and limits. Call inside the
    /// tokio runtime. `secrets` are the mode's own operator files (token,
    /// store), kept, like the key and the cache, out of the fs root.
    pub fn settings(&self, secrets: &[(&str, &Path)]) -> anyhow::Result<Settings> {
        let (quantum_us, connections) = self.checked_bounds()?;
        let cache_dir = self.cache_dir();
        let (key, source) = artifact::operator_key(self.key_file.as_deref(), &cache_dir)?;
        if let KeySource::Local(path) = &source {
            tracing::info!(path = %path.display(), "no --key-file or LUGE_KEY: using this host's local key");
        }
        let runtime = self.runtime()?;
        let front_end = self.front_end()?;
        let (capacity, max_pending, teardowns) =
            self.sandbox_places(runtime.as_ref(), front_end)?;
        tracing::info!(
            engine = %runtime.id(),
            sandboxes = capacity,
            cache = %cache_dir.display(),
            "engine ready"
        );
        let fs_root = self.checked_fs_root(&source, &cache_dir, secrets)?;
        let outbound = crate::runtime_config::outbound(
            self.ca_file.as_deref(),
            self.runtime_config_file.as_deref(),
        )?;
        // Set once per process; a second `settings` (tests) keeps the first.
        let _ = luge_outbound::install(outbound);
        // Initialisations for snapshots run under the default limits.
        let limits = self.limit_policy()?;
        // What each compile frees goes back to the system once it is done
        // (about 30 MB for a Spin app's component; docs/BENCHMARKS-ARCHIVE.md,
        // "Luge on Kubernetes"): the allocator holds a thread's freed pages
        // until that thread allocates again, which the compile's threads
        // seldom do. Start-up compiles, uploads and OpenWhisk `/init`s alike.
        let mut registry = ModuleRegistry::new(runtime, key, Some(cache_dir.join("modules")))
            .with_after_compile(crate::release_compile_memory);
        if let Some(preinit) = luge_engines::preinitializer(&limits.default)? {
            registry = registry.with_preinitializer(preinit);
        }
        let (scheduler, worker_runtimes) = self.scheduler(front_end, teardowns)?;
        Ok(Settings {
            scheduler: Arc::new(scheduler),
            worker_runtimes,
            runtime: tokio::runtime::Handle::current(),
            preemption: Preemption {
                quantum: Duration::from_micros(quantum_us),
                enabled: self.preempts(),
            },
            registry: Arc::new(registry),
            admit: luge_registry::admit::Bounds {
                fs_root,
                limits,
                ..luge_registry::admit::Bounds::default()
            },
            init: InitSettings::default(),
            // 64 MiB: OpenWhisk's largest action (48 MB) base64-encoded.
            max_body_bytes: self.max_body_mb.unwrap_or(64) << 20,
            admission: crate::admission::Places {
                tree_limit: match self.max_tree_places {
                    Some(0) => bail!("--max-tree-places must be greater than zero"),
                    Some(n) => n,
                    None => crate::admission::Places::new(max_pending).tree_limit,
                },
                weights: self
                    .tenant_weights
                    .iter()
                    .flatten()
                    .map(|w| (w.tenant.clone(), w.weight))
                    .collect(),
                ..crate::admission::Places::new(max_pending)
            },
            connections,
            fuse_calls_under: Duration::from_micros(self.fuse_calls_under_us.unwrap_or(0)),
            telemetry: None,
            // On unless asked off; `luge serve --spin` decides again where
            // it knows it serves a Spin app.
            request_id_header: self.request_id_header.unwrap_or(true),
        })
    }

    /// The scheduler's quantum, microseconds, and the connection limits,
    /// each flag checked alone and against the others.
    fn checked_bounds(&self) -> anyhow::Result<(u64, crate::http::ConnectionLimits)> {
        let quantum_us = self.quantum_us.unwrap_or(DEFAULT_QUANTUM_US);
        if quantum_us == 0 {
            bail!("--quantum-us must be greater than zero");
        }
        if self.max_pending == Some(0) {
            bail!("--max-pending must be greater than zero");
        }
        if self
            .max_pending
            .is_some_and(|n| n > self.max_sandboxes() as usize)
        {
            bail!(
                "--max-pending {} exceeds --max-sandboxes {}: every admitted invocation needs a sandbox; lower --max-pending or raise --max-sandboxes",
                self.max_pending.unwrap_or_default(),
                self.max_sandboxes()
            );
        }
        let connections = crate::http::ConnectionLimits {
            max_connections: self
                .max_connections
                .unwrap_or_else(crate::http::ConnectionLimits::default_max_connections),
            header_timeout: self
                .header_timeout_ms
                .map_or(crate::http::DEFAULT_HEADER_TIMEOUT, Duration::from_millis),
        };
        if connections.max_connections == 0 || connections.header_timeout.is_zero() {
            bail!("--max-connections and --header-timeout-ms must be greater than zero");
        }
        Ok((quantum_us, connections))
    }

    /// How many sandboxes `runtime` holds, how many invocations are
    /// admitted at once (`--max-pending`), and how many finished sandboxes
    /// each worker may leave to tear down after its responses are out.
    fn sandbox_places(
        &self,
        runtime: &dyn luge_core::WasmRuntime,
        front_end: FrontEndKind,
    ) -> anyhow::Result<(usize, usize, usize)> {
        // Every admitted invocation needs a sandbox slot; admitting more
        // would turn overload into instantiation failures instead of 503s.
        // The engine may have sized its pool below --max-sandboxes to fit
        // the address space; then that is the bound.
        let capacity = runtime
            .capacity()
            .unwrap_or(self.max_sandboxes() as usize)
            .min(self.max_sandboxes() as usize);
        // Worker front ends tear finished sandboxes down after their
        // responses are out, a few per worker: those slots are kept out of
        // the default admission (at most an eighth of the pool), and a
        // `--max-pending` that leaves fewer gets fewer such teardowns.
        let workers = self.workers().max(1);
        let reserve = match front_end {
            FrontEndKind::Workers => {
                (workers * luge_core::teardown::MAX_DEFERRED).min(capacity / 8)
            }
            FrontEndKind::Threads => 0,
        };
        let max_pending = match self.max_pending {
            Some(n) if n > capacity => bail!(
                "--max-pending {n} exceeds the {capacity} sandboxes this address space holds; lower --max-pending"
            ),
            Some(n) => n,
            None => capacity - reserve,
        };
        let teardowns = (capacity - max_pending) / workers;
        Ok((capacity, max_pending, teardowns))
    }

    /// The canonical `--fs-root`, checked to reach none of the operator's
    /// own files (the key, the cache, the mode's `secrets`).
    fn checked_fs_root(
        &self,
        source: &KeySource,
        cache_dir: &Path,
        secrets: &[(&str, &Path)],
    ) -> anyhow::Result<Option<PathBuf>> {
        let fs_root = match &self.fs_root {
            Some(root) => Some(
                root.canonicalize()
                    .with_context(|| format!("--fs-root {}", root.display()))?,
            ),
            None => None,
        };
        if let Some(root) = &fs_root {
            let key_path = match source {
                KeySource::File(path) | KeySource::Local(path) => Some(path.as_path()),
                KeySource::Environment => None,
            };
            let own = [
                ("the artifact key", key_path),
                ("--cache-dir", Some(cache_dir)),
            ];
            for (what, path) in own
                .into_iter()
                .filter_map(|(what, path)| Some((what, path?)))
                .chain(secrets.iter().copied())
            {
                refuse_under(root, what, path)?;
            }
        }
        Ok(fs_root)
    }
}

/// Refuses an operator file (key, token, cache, store) that a directory
/// grant could reach: one beneath the fs root.
fn refuse_under(fs_root: &Path, what: &str, path: &Path) -> anyhow::Result<()> {
    if real_path(path).starts_with(fs_root) {
        bail!(
            "--fs-root {} would let granted functions reach {what} ({}); keep operator files outside the fs root",
            fs_root.display(),
            path.display()
        );
    }
    Ok(())
}

/// `path` with every symlink of its existing part resolved (the rest may
/// not exist yet, like a cache directory made on first use).
fn real_path(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return absolute,
        }
    }
}

#[cfg(test)]
mod tests {
    /// The book's command-line reference is the binary's command tree:
    /// a flag added, renamed or explained anew fails here until the book
    /// says it too.
    #[test]
    fn the_books_cli_reference_is_the_binarys() {
        assert!(
            crate::config_keys::tests::the_book_holds("ref-cli.md", &super::reference()),
            "docs/book/src/ref-cli.md is not `luge`'s command tree: rewrite it with \
             `LUGE_BLESS=1 ./scripts/cargo-linted.sh test --workspace --all-features --lib -- \
             the_books_cli_reference` and commit it"
        );
    }
}
