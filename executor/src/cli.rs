//! Command line and the settings derived from it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use luge_core::artifact::{self, KeySource};
use luge_core::limits::{
    DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MEMORY_BYTES, DEFAULT_TIMEOUT, Limits, MAX_MEMORY_BYTES,
    MAX_TIMEOUT,
};
use luge_core::{LimitPolicy, ModuleRegistry, Preemption, WasmRuntime};
use luge_openwhisk::InitSettings;
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

/// Modes of the executor.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// One OpenWhisk action container: POST /init, POST /run.
    Proxy {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        #[command(flatten)]
        common: Common,
    },
    /// Many containers (POST /{id}/init|run|destroy, GET /{id}/logs), and
    /// functions on routes: from a config, a Sledge spec, or uploads.
    Serve {
        /// Address to listen on [default: 127.0.0.1:8080, or the config's].
        #[arg(long)]
        listen: Option<SocketAddr>,
        #[command(flatten)]
        host: HostArgs,
        #[command(flatten)]
        common: Common,
    },
}

pub use luge_engines::EngineKind;

/// Scheduling policies (see luge-sched).
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum PolicyArg {
    /// First come, first served (round robin when preempting).
    Fifo,
    /// Earliest deadline first.
    Edf,
    /// Shortest remaining slack first.
    Srsf,
}

/// Options of the standalone function host (`luge serve`).
#[derive(Debug, Args, Default)]
pub struct HostArgs {
    /// Settings and routes (TOML); command-line flags override its settings.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Sledge route spec (JSON): each tenant's routes on the tenant's port.
    #[arg(long)]
    pub sledge_spec: Option<PathBuf>,
    /// Directory of uploaded functions [default: the config's, else
    /// $XDG_DATA_HOME/luge/functions once an operator token is set].
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// File holding the operator token of the management API (or set
    /// LUGE_TOKEN); without one, the management API is off.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// The local tier of functions' shared state, persisted here [default:
    /// the config's `[state] dir`, else `state` in the data directory,
    /// $XDG_DATA_HOME/luge].
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// The global tier of shared state, `redis://host:port/db` [default:
    /// the config's `[state] url`, else none: the local tier serves both].
    #[arg(long)]
    pub state_url: Option<String>,
    /// Containers (`/{id}/init`) hosted at once; one more is a 503.
    #[arg(long, default_value_t = luge_openwhisk::container::DEFAULT_MAX_CONTAINERS)]
    pub max_containers: usize,
}

/// Default preemption quantum, µs (Sledge's and DESIGN.md's 5 ms).
pub const DEFAULT_QUANTUM_US: u64 = 5000;

/// Options shared by every mode. Those a config file may also set are
/// optional here, so that a flag given wins and an absent one falls back to
/// the config, then to the default named in its help.
#[derive(Debug, Args)]
pub struct Common {
    /// Worker threads running sandboxes, one per core by default.
    #[arg(long)]
    pub workers: Option<usize>,
    /// Order of each worker's run queue [default: edf].
    #[arg(long, value_enum)]
    pub policy: Option<PolicyArg>,
    /// Time slice after which a running sandbox yields, µs [default: 5000].
    #[arg(long)]
    pub quantum_us: Option<u64>,
    /// Run each sandbox until it finishes or waits on I/O.
    #[arg(long)]
    pub no_preempt: bool,
    /// Execution-time-aware sharding (with --long-workers): functions whose
    /// expected execution time (the SRSF percentile of their runs) exceeds
    /// this many µs run only on the first --long-workers workers; short
    /// ones run anywhere [default: off].
    #[arg(long)]
    pub long_above_us: Option<u64>,
    /// Workers, from the first, that run long functions under sharding.
    #[arg(long)]
    pub long_workers: Option<usize>,
    /// Do not pin workers to cores.
    #[arg(long)]
    pub no_pin: bool,
    /// Percentile of a function's recent execution times that SRSF expects.
    #[arg(long, default_value_t = 90.0, value_parser = percentile)]
    pub srsf_percentile: f64,
    /// Wasm engine [default: wasmtime]. Given twice, the last one counts
    /// (so a wrapper's default can be overridden).
    #[arg(long, value_enum, overrides_with = "engine")]
    pub engine: Option<EngineKind>,
    /// Root directory for `wasi.dirs` grants; without it, grants are refused.
    #[arg(long)]
    pub fs_root: Option<PathBuf>,
    /// Where compiled modules are cached (and the generated key kept when no
    /// key is given). Defaults to $XDG_CACHE_HOME/luge or ~/.cache/luge.
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// File holding the operator's artifact key secret (or set LUGE_KEY).
    #[arg(long)]
    pub key_file: Option<PathBuf>,
    /// Default memory limit per sandbox, MiB [default: 256, OpenWhisk's].
    #[arg(long)]
    pub memory_mb: Option<u64>,
    /// Largest memory limit an action may ask for, MiB [default: 512].
    #[arg(long)]
    pub max_memory_mb: Option<u64>,
    /// Default time limit per invocation, ms [default: 60000].
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Largest time limit an action may ask for, ms [default: 300000].
    #[arg(long)]
    pub max_timeout_ms: Option<u64>,
    /// Meter fuel so `limits.fuel` can be enforced (slower).
    #[arg(long)]
    pub fuel: bool,
    /// Largest request body, MiB (an init or upload carries the whole
    /// module) [default: 64].
    #[arg(long)]
    pub max_body_mb: Option<usize>,
    /// Sandboxes that may exist at once (pool slots) [default: 1000, fewer
    /// where the address space holds fewer].
    #[arg(long)]
    pub max_sandboxes: Option<u32>,
    /// Memory of ended sandboxes Wasmtime may keep resident while it
    /// batches their release to the OS, MiB [default: 256].
    #[arg(long)]
    pub resident_budget_mb: Option<u64>,
    /// Invocations admitted at once; more get 503 with Retry-After
    /// [default: --max-sandboxes, since each running one holds a slot;
    /// more than that is refused at start].
    #[arg(long)]
    pub max_pending: Option<usize>,
    /// Open client connections at once; one more is answered 503 and
    /// closed [default: the descriptor limit less 256, at most 10000].
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Time a connection may take to send a request's headers, ms; also
    /// how long a keep-alive connection may sit idle [default: 10000].
    #[arg(long)]
    pub header_timeout_ms: Option<u64>,
    /// Fuse a call (run the callee on its caller's worker, when the caller
    /// waits) if the callee calls nothing itself and its measured p90
    /// execution time is at most this, µs. Saves the scheduler's round
    /// trip; the callees of one caller then run one after another, so keep
    /// it to short callees [default: 0, never: engines that park a waiting
    /// caller schedule every callee, in parallel].
    #[arg(long)]
    pub fuse_calls_under_us: Option<u64>,
    /// Where connections are served: `workers` (each worker serves the
    /// connections it accepts and runs their requests itself) or `threads`
    /// (tokio threads beside the workers hand each request to one)
    /// [default: workers where sandboxes yield at quanta (Wasmtime with
    /// preemption), else threads].
    #[arg(long, value_enum)]
    pub front_end: Option<FrontEndKind>,
}

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
    /// Bounds on init.
    pub init: InitSettings,
    /// Request body cap in bytes.
    pub max_body_bytes: usize,
    /// Bound on invocations in flight.
    pub max_pending: usize,
    /// Bounds on client connections.
    pub connections: crate::http::ConnectionLimits,
    /// Callees whose p90 is at most this run fused (see
    /// `--fuse-calls-under-us`); zero: none.
    pub fuse_calls_under: Duration,
}

impl Common {
    /// Fills what the command line left unset from a config's `[server]`.
    pub fn merge(&mut self, server: &luge_host::ServerConfig) -> anyhow::Result<()> {
        fn parse<T: ValueEnum>(key: &str, value: &Option<String>) -> anyhow::Result<Option<T>> {
            value
                .as_deref()
                .map(|v| T::from_str(v, true).map_err(|e| anyhow::anyhow!("server.{key}: {e}")))
                .transpose()
        }
        self.workers = self.workers.or(server.workers);
        self.policy = self.policy.or(parse("policy", &server.policy)?);
        self.engine = self.engine.or(parse("engine", &server.engine)?);
        self.quantum_us = self.quantum_us.or(server.quantum_us);
        self.long_above_us = self.long_above_us.or(server.long_above_us);
        self.long_workers = self.long_workers.or(server.long_workers);
        if !self.no_preempt {
            self.no_preempt = server.preempt == Some(false);
        }
        self.fs_root = self.fs_root.take().or_else(|| server.fs_root.clone());
        self.max_body_mb = self.max_body_mb.or(server.max_body_mb);
        self.max_pending = self.max_pending.or(server.max_pending);
        self.max_connections = self.max_connections.or(server.max_connections);
        self.header_timeout_ms = self.header_timeout_ms.or(server.header_timeout_ms);
        self.fuse_calls_under_us = self.fuse_calls_under_us.or(server.fuse_calls_under_us);
        self.front_end = self.front_end.or(parse("front_end", &server.front_end)?);
        self.max_sandboxes = self.max_sandboxes.or(server.max_sandboxes);
        self.memory_mb = self.memory_mb.or(server.memory_mb);
        self.max_memory_mb = self.max_memory_mb.or(server.max_memory_mb);
        self.timeout_ms = self.timeout_ms.or(server.timeout_ms);
        self.max_timeout_ms = self.max_timeout_ms.or(server.max_timeout_ms);
        self.cache_dir = self.cache_dir.take().or_else(|| server.cache_dir.clone());
        self.key_file = self.key_file.take().or_else(|| server.key_file.clone());
        self.fuel = self.fuel || server.fuel == Some(true);
        Ok(())
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
            fuel: self.fuel,
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
        let yields = engine == EngineKind::Wasmtime && !self.no_preempt;
        Ok(self.front_end.unwrap_or(if yields {
            FrontEndKind::Workers
        } else {
            FrontEndKind::Threads
        }))
    }

    fn scheduler(&self) -> anyhow::Result<(Scheduler, Option<Arc<WorkerRuntimes>>)> {
        let defaults = SchedulerConfig::default();
        let config = SchedulerConfig {
            workers: self.workers.unwrap_or(defaults.workers),
            policy: match self.policy.unwrap_or(PolicyArg::Edf) {
                PolicyArg::Fifo => Policy::Fifo,
                PolicyArg::Edf => Policy::Edf,
                PolicyArg::Srsf => Policy::Srsf,
            },
            pin: !self.no_pin,
            srsf_percentile: self.srsf_percentile,
            sharding: match (self.long_above_us, self.long_workers) {
                (Some(us), Some(long_workers)) => Some(Sharding {
                    long_above: Duration::from_micros(us),
                    long_workers,
                }),
                (None, None) => None,
                _ => bail!("sharding needs both long_above_us and long_workers"),
            },
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
        let front_end = self.front_end()?;
        let (front_ends, runtimes) = match front_end {
            FrontEndKind::Workers => {
                let (factory, runtimes) =
                    crate::frontend::per_worker(config.workers, handle.clone())
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
        let cache_dir = self.cache_dir();
        let (key, source) = artifact::operator_key(self.key_file.as_deref(), &cache_dir)?;
        if let KeySource::Local(path) = &source {
            tracing::info!(path = %path.display(), "no --key-file or LUGE_KEY: using this host's local key");
        }
        let runtime = self.runtime()?;
        // Every admitted invocation needs a sandbox slot; admitting more
        // would turn overload into instantiation failures instead of 503s.
        // The engine may have sized its pool below --max-sandboxes to fit
        // the address space; then that is the bound.
        let capacity = runtime
            .capacity()
            .unwrap_or(self.max_sandboxes() as usize)
            .min(self.max_sandboxes() as usize);
        let max_pending = match self.max_pending {
            Some(n) if n > capacity => bail!(
                "--max-pending {n} exceeds the {capacity} sandboxes this address space holds; lower --max-pending"
            ),
            Some(n) => n,
            None => capacity,
        };
        tracing::info!(
            engine = %runtime.id(),
            sandboxes = capacity,
            cache = %cache_dir.display(),
            "engine ready"
        );
        let fs_root = match &self.fs_root {
            Some(root) => Some(
                root.canonicalize()
                    .with_context(|| format!("--fs-root {}", root.display()))?,
            ),
            None => None,
        };
        if let Some(root) = &fs_root {
            let key_path = match &source {
                KeySource::File(path) | KeySource::Local(path) => Some(path.as_path()),
                KeySource::Environment => None,
            };
            let own = [
                ("the artifact key", key_path),
                ("--cache-dir", Some(&cache_dir)),
            ];
            for (what, path) in own
                .into_iter()
                .filter_map(|(what, path)| Some((what, path?)))
                .chain(secrets.iter().copied())
            {
                refuse_under(root, what, path)?;
            }
        }
        // Initialisations for snapshots run under the default limits.
        let limits = self.limit_policy()?;
        let mut registry = ModuleRegistry::new(runtime, key, Some(cache_dir.join("modules")));
        if let Some(preinit) = luge_engines::preinitializer(&limits.default)? {
            registry = registry.with_preinitializer(preinit);
        }
        let (scheduler, worker_runtimes) = self.scheduler()?;
        Ok(Settings {
            scheduler: Arc::new(scheduler),
            worker_runtimes,
            runtime: tokio::runtime::Handle::current(),
            preemption: Preemption {
                quantum: Duration::from_micros(quantum_us),
                enabled: !self.no_preempt,
            },
            registry: Arc::new(registry),
            init: InitSettings {
                fs_root,
                limits,
                ..InitSettings::default()
            },
            // 64 MiB: OpenWhisk's largest action (48 MB) base64-encoded.
            max_body_bytes: self.max_body_mb.unwrap_or(64) << 20,
            max_pending,
            connections,
            fuse_calls_under: Duration::from_micros(self.fuse_calls_under_us.unwrap_or(0)),
        })
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

fn percentile(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!("{text} is not a percentile between 0 and 100")),
    }
}
