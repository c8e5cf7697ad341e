//! Action containers: the state between `/init` and `/run`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use luge_core::calls::Refused;
use luge_core::capabilities::Annotations;
use luge_core::{Action, Invocation, LoadedModule, Outcome, Termination};
use luge_registry::ModuleRegistry;
use luge_registry::admit::{self, AdmitError, Wanted};

use crate::logs::{LogBuffer, LogSink};
use crate::protocol::{self, Reply, status};

/// What an OpenWhisk `/init` adds to the operator's bounds: the container's
/// own environment.
#[derive(Debug, Clone, Default)]
pub struct InitSettings {
    /// The container's own environment, which an action sees under its
    /// init's `env`: in `luge proxy`, the `__OW_*` variables OpenWhisk starts
    /// the container with (`__OW_API_HOST`); empty in `luge serve`, where the
    /// factory sends them with the init.
    pub container_env: Vec<(String, String)>,
}

struct Ready {
    action: Arc<Action>,
    module: Arc<dyn LoadedModule>,
}

enum State {
    Empty,
    Initializing,
    Ready(Arc<Ready>),
}

/// One OpenWhisk action container: initialized once, run many times
/// (concurrently, when OpenWhisk's concurrency limit is above one).
pub struct Container {
    state: Mutex<State>,
    logs: Arc<dyn LogSink>,
    /// Runs prepared since its init: the first is its cold start.
    runs: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Container {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Container").finish_non_exhaustive()
    }
}

/// A run ready for the scheduler: the module and the invocation to run on it.
pub struct PreparedRun {
    /// The shared module.
    pub module: Arc<dyn LoadedModule>,
    /// The invocation.
    pub invocation: Invocation,
    /// OpenWhisk's `deadline` (ms since the Unix epoch), when sent.
    pub deadline_ms: Option<u64>,
    /// The invocation's calls, all refused: give it to
    /// [`Container::finish_run`] so the activation's log says why.
    pub calls: Arc<Refused>,
    /// Whether it is the container's first run since its init (a cold
    /// start, as `faas.coldstart` means it).
    pub cold: bool,
}

/// Why an action may not call other functions: it has no way to reach them
/// but the controller, and an invoker's container must not bypass it.
pub const CALLS_REFUSED: &str = "calls between functions are not available under the OpenWhisk \
    action protocol: an invoker must route every invocation through the controller \
    (compose actions with a sequence, or invoke them through the OpenWhisk API)";

impl PreparedRun {
    /// The absolute deadline of this run for a request that arrived at
    /// `arrived`: OpenWhisk's `deadline` when sent (already past is fine: it
    /// is then the most urgent), else the action's relative deadline, else
    /// the default one (never the time limit: see
    /// [`luge_core::action::DEFAULT_RELATIVE_DEADLINE`]).
    pub fn deadline(&self, arrived: Instant) -> Instant {
        let action = &self.invocation.action;
        if let Some(deadline_ms) = self.deadline_ms {
            let now_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            return if deadline_ms >= now_ms {
                arrived + Duration::from_millis(deadline_ms - now_ms)
            } else {
                arrived
                    .checked_sub(Duration::from_millis(now_ms - deadline_ms))
                    .unwrap_or(arrived)
            };
        }
        arrived + action.sched.relative_deadline_or_default()
    }
}

impl Container {
    /// An empty container logging to `logs`.
    pub fn new(logs: Arc<dyn LogSink>) -> Self {
        Self {
            state: Mutex::new(State::Empty),
            logs,
            runs: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // State transitions are single assignments; ignore poisoning.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether init has succeeded.
    pub fn is_ready(&self) -> bool {
        matches!(*self.state(), State::Ready(_))
    }

    /// Handles `/init`. Compiles if the code is new to the registry, so call
    /// it off the async runtime's threads.
    /// `bounds` are the operator's (directory grants' root, limits, code
    /// size), the same for every way a function arrives.
    pub fn init(
        &self,
        registry: &ModuleRegistry,
        bounds: &admit::Bounds,
        settings: &InitSettings,
        body: &[u8],
    ) -> Reply {
        {
            let mut state = self.state();
            if !matches!(*state, State::Empty) {
                drop(state);
                self.logs.proxy_message(protocol::INIT_TWICE);
                return Reply::error(status::FORBIDDEN, protocol::INIT_TWICE);
            }
            *state = State::Initializing;
        }
        match Self::initialize(registry, bounds, settings, body) {
            Ok(ready) => {
                tracing::info!(action = %ready.action.name, entry = %ready.action.entry, "initialized");
                *self.state() = State::Ready(Arc::new(ready));
                Reply::ok(serde_json::json!({ "ok": true }))
            }
            Err(reply) => {
                // A failed init leaves the container empty, as before it.
                *self.state() = State::Empty;
                if let Some(message) = reply.error_message() {
                    self.logs.proxy_message(message);
                }
                reply
            }
        }
    }

    fn initialize(
        registry: &ModuleRegistry,
        policy: &admit::Bounds,
        settings: &InitSettings,
        body: &[u8],
    ) -> Result<Ready, Reply> {
        let request = protocol::parse_init(body)?;
        let refused = |e: AdmitError| Reply::error(e.status(), luge_core::error_line(&e));
        let annotations =
            Annotations::parse(&request.annotations).map_err(|e| refused(AdmitError::from(e)))?;
        // Later sources win: the container's environment, the init's env,
        // then the action's `wasi.env` (added by the pipeline).
        let mut env: Vec<(String, String)> = settings
            .container_env
            .iter()
            .filter(|(key, _)| !request.env.iter().any(|(k, _)| k == key))
            .cloned()
            .collect();
        env.extend(request.env);
        let name = if request.name.is_empty() {
            "action".to_owned()
        } else {
            request.name
        };
        let init_function = annotations.init_function.clone();
        let mut action = admit::action(
            &**registry.runtime(),
            policy,
            name,
            String::new(),
            env,
            annotations,
        )
        .map_err(refused)?;
        // A snapshot's initialisation runs as the action would: its limits,
        // its environment and its grants.
        let module = admit::load(
            registry,
            policy,
            request.code,
            &action,
            init_function.as_deref(),
        )
        .map_err(refused)?;
        action.entry = admit::entry(&*module, Wanted::Command(&request.main)).map_err(refused)?;
        Ok(Ready {
            action: Arc::new(action),
            module,
        })
    }

    /// Parses a `/run` body into an invocation of the initialized action.
    pub fn prepare_run(&self, body: &[u8]) -> Result<PreparedRun, Reply> {
        let ready = match &*self.state() {
            State::Ready(ready) => Arc::clone(ready),
            _ => return Err(Reply::error(status::FORBIDDEN, protocol::NOT_INITIALIZED)),
        };
        let request = protocol::parse_run(body)?;
        let mut invocation = Invocation::new(Arc::clone(&ready.action), request.params);
        invocation.env = request.context;
        let calls = Arc::new(Refused::new(CALLS_REFUSED));
        invocation.calls = Some(Arc::clone(&calls) as Arc<dyn luge_core::calls::Calls>);
        let runs = self.runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(PreparedRun {
            module: Arc::clone(&ready.module),
            invocation,
            deadline_ms: request.deadline_ms,
            calls,
            cold: runs == 0,
        })
    }

    /// Logs the activation and turns its outcome into the `/run` reply;
    /// `calls` are the run's (their refusals are logged).
    pub fn finish_run(&self, outcome: &Outcome, calls: &Refused) -> Reply {
        let stdout = String::from_utf8_lossy(&outcome.stdout);
        let stderr = String::from_utf8_lossy(&outcome.stderr);
        let (result, stdout_logs) = protocol::split_result(&stdout);
        let stderr_logs: Vec<&str> = stderr.lines().collect();
        let reply = match (&outcome.termination, result) {
            (Termination::Exited(0), Some(result)) => Reply::ok(serde_json::Value::Object(result)),
            (Termination::Exited(0), None) => {
                Reply::error(status::ACTION_ERROR, protocol::NOT_A_DICTIONARY)
            }
            (termination, _) => Reply::error(status::ACTION_ERROR, failure_message(termination)),
        };
        let mut stderr_logs = stderr_logs;
        let refusals = calls.log_line();
        if let Some(line) = &refusals {
            stderr_logs.push(line);
        }
        let failure = (!outcome.termination.is_success())
            .then(|| reply.error_message())
            .flatten();
        if let Some(message) = failure {
            stderr_logs.push(message);
        }
        self.logs.activation(&stdout_logs, &stderr_logs);
        reply
    }
}

/// The message OpenWhisk users see for a failed activation.
pub fn failure_message(termination: &Termination) -> String {
    match termination {
        Termination::Exited(0) => protocol::NOT_A_DICTIONARY.to_owned(),
        Termination::Exited(code) => format!("The action exited with status {code}."),
        Termination::Trapped(reason) => {
            let first = reason.lines().next().unwrap_or(reason);
            format!("The action trapped: {first}")
        }
        Termination::TimedOut(limit) => format!(
            "The action exceeded its time limits of {} milliseconds.",
            limit.as_millis()
        ),
        Termination::OutOfMemory { limit_bytes } => format!(
            "The action exceeded its memory limit of {} MiB.",
            limit_bytes >> 20
        ),
        Termination::OutOfFuel => "The action exceeded its fuel limit.".to_owned(),
        Termination::OutputTooLarge { limit_bytes } => {
            format!("The action's output exceeds its limit of {limit_bytes} bytes.")
        }
        Termination::Failed(reason) => format!("The action could not be started: {reason}"),
    }
}

/// A container hosted by `luge serve`, with its own log buffer.
#[derive(Debug)]
pub struct Hosted {
    /// The container.
    pub container: Arc<Container>,
    /// Its logs, drained by `GET /{id}/logs`.
    pub logs: Arc<LogBuffer>,
}

/// Every container of a `luge serve` process, by id, at most `limit`.
#[derive(Debug)]
pub struct Containers {
    map: RwLock<HashMap<String, Arc<Hosted>>>,
    limit: usize,
}

/// `--max-containers`'s default. An invoker runs as many containers as its
/// user memory holds actions (OpenWhisk's default: 1 GiB of 256 MiB
/// actions, 4); a thousand leaves room for big invokers while bounding
/// what a flood of `/init`s with new ids can hold.
pub const DEFAULT_MAX_CONTAINERS: usize = 1000;

impl Default for Containers {
    fn default() -> Self {
        Self::with_limit(DEFAULT_MAX_CONTAINERS)
    }
}

/// Container ids are path segments chosen by the invoker; keep them tame.
fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

impl Containers {
    /// No containers yet; at most `limit` at once.
    pub fn with_limit(limit: usize) -> Self {
        Self {
            map: RwLock::new(HashMap::new()),
            limit,
        }
    }

    fn map_read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Hosted>>> {
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    fn map_write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<Hosted>>> {
        self.map.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The container `id`, created empty if new (for `/init`).
    pub fn get_or_create(&self, id: &str) -> Result<Arc<Hosted>, Reply> {
        if !valid_id(id) {
            return Err(Reply::error(
                status::BAD_REQUEST,
                "Container ids are 1-128 characters of letters, digits, '-', '_' and '.'.",
            ));
        }
        if let Some(hosted) = self.map_read().get(id) {
            return Ok(Arc::clone(hosted));
        }
        let mut map = self.map_write();
        if map.len() >= self.limit && !map.contains_key(id) {
            return Err(Reply::error(
                status::UNAVAILABLE,
                format!(
                    "This executor already hosts {} containers, its limit; destroy one first.",
                    self.limit
                ),
            ));
        }
        let hosted = map.entry(id.to_owned()).or_insert_with(|| {
            let logs = Arc::new(LogBuffer::default());
            Arc::new(Hosted {
                container: Arc::new(Container::new(Arc::clone(&logs) as Arc<dyn LogSink>)),
                logs,
            })
        });
        Ok(Arc::clone(hosted))
    }

    /// The existing container `id`.
    pub fn get(&self, id: &str) -> Result<Arc<Hosted>, Reply> {
        self.map_read().get(id).cloned().ok_or_else(|| unknown(id))
    }

    /// Removes `id`; its module is freed when no other container shares it
    /// and in-flight runs have finished.
    pub fn destroy(&self, id: &str) -> Result<(), Reply> {
        self.map_write()
            .remove(id)
            .map(drop)
            .ok_or_else(|| unknown(id))
    }

    /// The ids of the containers whose id starts with `prefix`, sorted.
    pub fn ids(&self, prefix: &str) -> Vec<String> {
        let mut ids: Vec<String> = self
            .map_read()
            .keys()
            .filter(|id| id.starts_with(prefix))
            .cloned()
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Destroys every container whose id starts with `prefix` (an invoker's
    /// cleanup of what its previous run left), as [`Containers::destroy`]
    /// does one; returns how many.
    pub fn destroy_prefix(&self, prefix: &str) -> usize {
        let mut map = self.map_write();
        let before = map.len();
        map.retain(|id, _| !id.starts_with(prefix));
        before - map.len()
    }

    /// Number of containers.
    pub fn len(&self) -> usize {
        self.map_read().len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn unknown(id: &str) -> Reply {
    Reply::error(
        status::NOT_FOUND,
        format!("There is no container '{id}'; create it with POST /{id}/init."),
    )
}
