//! The [`WasmRuntime`] trait: what Luge asks of a Wasm engine.
//!
//! The lifecycle is split where its costs are: `precompile` (expensive, at
//! upload or first sight of a module), `load_artifact` (cheap, at `/init`),
//! and [`LoadedModule::run`] (per invocation, a fresh sandbox every time).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::capabilities::Capabilities;
use crate::invocation::Invocation;
use crate::outcome::Outcome;

/// Which engine build produced (or can load) an artifact.
///
/// All three fields must match for an artifact to load: native code from
/// another engine, engine version or CPU target is refused, never mapped.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EngineId {
    /// Engine name: `wasmtime`, `wasmer` or `wamr`.
    pub engine: String,
    /// Engine version, e.g. `48.0.8`.
    pub version: String,
    /// Target triple the native code is for, e.g. `x86_64-unknown-linux-gnu`.
    pub target: String,
}

impl std::fmt::Display for EngineId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} for {}", self.engine, self.version, self.target)
    }
}

pub use crate::error::Cause;

/// Errors an engine reports while compiling or loading a module.
///
/// Each variant says what failed; the engine's reason is its `source`
/// (read the whole chain with [`crate::error_line`]).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The bytes are not a valid WebAssembly module.
    #[error("invalid WebAssembly module")]
    InvalidModule(#[source] Cause),
    /// The module is valid Wasm but cannot run here.
    #[error("module cannot be loaded: {0}")]
    Unsupported(#[from] Unsupported),
    /// The artifact's payload was authentic but the engine refused it.
    #[error("artifact could not be loaded")]
    BadArtifact(#[source] Cause),
    /// The engine could not be configured as asked.
    #[error("engine configuration: {what}")]
    Config {
        /// What was being set up (`"the engine"`, `"watchdog thread"`).
        what: std::borrow::Cow<'static, str>,
        /// The engine's or the system's reason.
        #[source]
        source: Cause,
    },
}

impl EngineError {
    /// An [`EngineError::Config`] failure of `what`.
    pub fn config(
        what: impl Into<std::borrow::Cow<'static, str>>,
        source: impl Into<Cause>,
    ) -> Self {
        Self::Config {
            what: what.into(),
            source: source.into(),
        }
    }
}

/// Why valid Wasm cannot run on this engine.
#[derive(Debug, thiserror::Error)]
pub enum Unsupported {
    /// A component, on an engine that runs core modules only.
    #[error(
        "this is a WebAssembly component, and the {engine} engine runs core modules only; components (WASI 0.2) run on Wasmtime (luge --engine wasmtime)"
    )]
    Component {
        /// The engine's name.
        engine: &'static str,
    },
    /// An import the engine does not provide.
    #[error("the module imports {module}::{name}; {offered}")]
    Import {
        /// The import's module.
        module: String,
        /// The import's name.
        name: String,
        /// What the engine does provide, in words.
        offered: &'static str,
    },
    /// A read-only directory grant the engine cannot enforce.
    #[error(
        "engine {engine} cannot make a granted directory read-only ({guest}); grant it \"rw\" or run Luge with --engine wasmtime"
    )]
    ReadOnlyDir {
        /// The engine's name.
        engine: &'static str,
        /// The directory as the guest sees it.
        guest: String,
    },
    /// The engine cannot grant a directory at this guest path.
    #[error(
        "engine {engine} cannot grant a directory at {guest:?}: {why}; grant it at another path or run Luge with --engine wasmtime"
    )]
    DirAt {
        /// The engine's name.
        engine: &'static str,
        /// The directory as the guest sees it.
        guest: String,
        /// Why not.
        why: &'static str,
    },
    /// The imports could not be linked (the engine's reason is the source).
    #[error("its imports could not be linked")]
    Link(#[source] Cause),
    /// A component importing interfaces Luge does not serve.
    #[error(
        "the component imports what Luge does not offer (luge serves WASI 0.2 and 0.3 (cli, clocks, filesystem, io, random, sockets, http), the wasi:http proxy worlds of WASI's 0.2.0-rc-2023-10-18 and -11-10 candidates (spin-sdk 2's), wasi:config, wasi:keyvalue, wasi:otel, Spin's spin:key-value, spin:variables, spin:sqlite, spin:redis, spin:mqtt, spin:postgres (3.0, 4.x) and spin:mysql, and Spin 2's fermyon:spin key-value, variables, sqlite, redis, mqtt, postgres and mysql)"
    )]
    ComponentImports(#[source] Cause),
    /// A component importing interfaces Luge does not serve, each named.
    #[error(
        "the component imports what Luge does not serve: {}; Luge serves WASI 0.2 and 0.3 (cli, clocks, filesystem, io, random, sockets, http), the wasi:http proxy worlds of WASI's 0.2.0-rc-2023-10-18 and -11-10 candidates (spin-sdk 2's), wasi:config, wasi:keyvalue, wasi:otel, Spin's spin:key-value, spin:variables, spin:sqlite, spin:redis, spin:mqtt, spin:postgres (3.0, 4.x) and spin:mysql, and Spin 2's fermyon:spin key-value, variables, sqlite, redis, mqtt, postgres and mysql",
        .0.join(", ")
    )]
    NotServed(Vec<String>),
    /// A component of Spin 1 (spin-sdk 1's unversioned `fermyon:spin`
    /// interfaces, each named), which Luge does not serve.
    #[error(
        "the component imports Spin 1's unversioned interfaces ({}), which Luge does not serve: Spin 1 apps (spin-sdk 1.x) predate the component model Luge runs; rebuild it with spin-sdk 2 or later, whose interfaces Luge serves",
        .0.join(", ")
    )]
    Spin1(Vec<String>),
    /// A component that is neither a command nor an HTTP handler.
    #[error(
        "a component runs as a function when it exports wasi:cli/run (a command) or wasi:http's incoming-handler or handler (an HTTP handler); this one exports none of them"
    )]
    ComponentWorld(#[source] Cause),
    /// Compiled, but the engine could not serialize the result.
    #[error("the compiled module could not be serialized")]
    Serialize(#[source] Cause),
}

/// Refuses `wasm` on `engine`, which runs core modules only, if it is a
/// component.
pub fn refuse_component(engine: &'static str, wasm: &[u8]) -> Result<(), EngineError> {
    if is_component(wasm) {
        return Err(Unsupported::Component { engine }.into());
    }
    Ok(())
}

/// Engine-native code whose authenticity was proven: the only input to
/// [`WasmRuntime::load_artifact`], which maps native code without
/// compiling it, so a forged payload would run as the host.
///
/// `luge-registry`'s `artifact::open` makes one after checking the
/// operator's MAC over the sealed artifact and its engine header.
#[derive(Debug, Clone, Copy)]
pub struct VerifiedArtifact<'a> {
    payload: &'a [u8],
    content_id: [u8; 32],
}

impl<'a> VerifiedArtifact<'a> {
    /// Vouches for `payload`, identified by `content_id` (two artifacts
    /// with the same id are the same artifact).
    ///
    /// # Safety
    ///
    /// `payload` must be what an engine with the [`EngineId`] and
    /// [`WasmRuntime::settings`] of the runtime it is given to produced with
    /// [`WasmRuntime::precompile`] (or its snapshotting equivalent), and
    /// unchanged since: engines deserialize it as trusted native code.
    pub unsafe fn new_unchecked(payload: &'a [u8], content_id: [u8; 32]) -> Self {
        Self {
            payload,
            content_id,
        }
    }

    /// The artifact's identity: the keyed hash of all of it.
    pub fn content_id(&self) -> [u8; 32] {
        self.content_id
    }

    /// The engine-native payload.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
}

/// What an engine prepared from an artifact's payload before the payload's
/// MAC was checked ([`WasmRuntime::stage`]), so that the preparation and
/// the check can run at once: for Wasmtime, the payload written into a
/// sealed in-memory file that the load then maps.
///
/// A staged payload is only ever bytes, never code: an engine stages
/// without parsing or mapping anything executable, and it is used only by
/// [`WasmRuntime::load_staged`] together with a [`VerifiedArtifact`] of the
/// very same payload. It remembers which bytes it was made from (their
/// place and length, and, through its lifetime, their borrow, so they
/// cannot change or be freed meanwhile); handed another payload, it is
/// dropped unused.
pub struct StagedPayload<'a> {
    /// Where the payload it was made from starts, and its length.
    source: (usize, usize),
    prepared: Box<dyn std::any::Any + Send>,
    _payload: std::marker::PhantomData<&'a [u8]>,
}

impl<'a> StagedPayload<'a> {
    /// What an engine `prepared` from `payload`.
    pub fn new(payload: &'a [u8], prepared: Box<dyn std::any::Any + Send>) -> Self {
        Self {
            source: (payload.as_ptr().addr(), payload.len()),
            prepared,
            _payload: std::marker::PhantomData,
        }
    }

    /// What was prepared, if it was prepared from exactly `payload` (the
    /// same bytes in the same place, still borrowed); `None` otherwise.
    pub fn prepared_for(self, payload: &[u8]) -> Option<Box<dyn std::any::Any + Send>> {
        (self.source == (payload.as_ptr().addr(), payload.len())).then_some(self.prepared)
    }
}

impl std::fmt::Debug for StagedPayload<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StagedPayload")
            .field("len", &self.source.1)
            .finish_non_exhaustive()
    }
}

const WASM_MAGIC: &[u8; 4] = b"\0asm";

/// Whether `wasm` is a WebAssembly component (binary layer 1, version
/// 0x0d), not a core module.
pub fn is_component(wasm: &[u8]) -> bool {
    wasm.len() >= 8 && wasm[..4] == *WASM_MAGIC && wasm[4..8] == [0x0d, 0x00, 0x01, 0x00]
}

/// A Wasm engine, configured once at executor start.
pub trait WasmRuntime: Send + Sync {
    /// The engine, version and target this runtime compiles for and loads.
    fn id(&self) -> &EngineId;

    /// Compiles a Wasm module to this engine's native artifact payload.
    ///
    /// The payload is unauthenticated; callers seal it with
    /// `luge-registry`'s `artifact::seal` before it leaves the process.
    fn precompile(&self, wasm: &[u8]) -> Result<Vec<u8>, EngineError>;

    /// Loads native code whose authenticity was proven by
    /// `luge-registry`'s `artifact::open`. Should not compile.
    fn load_artifact(
        &self,
        artifact: VerifiedArtifact<'_>,
    ) -> Result<Arc<dyn LoadedModule>, EngineError>;

    /// Whether [`WasmRuntime::stage`] prepares anything at all (so that a
    /// caller starts no thread to check a MAC beside it for nothing). The
    /// default: no.
    fn stages(&self) -> bool {
        false
    }

    /// Prepares what can be prepared of loading `payload` while its MAC is
    /// still being checked (on another thread): never parsing it, never
    /// mapping it executable, since it may be forged. `None` (the default)
    /// where the engine has nothing to prepare or declines.
    fn stage<'a>(&self, payload: &'a [u8]) -> Option<StagedPayload<'a>> {
        let _ = payload;
        None
    }

    /// [`WasmRuntime::load_artifact`] with what [`WasmRuntime::stage`]
    /// prepared from the same payload. The default ignores it.
    fn load_staged(
        &self,
        artifact: VerifiedArtifact<'_>,
        staged: StagedPayload<'_>,
    ) -> Result<Arc<dyn LoadedModule>, EngineError> {
        drop(staged);
        self.load_artifact(artifact)
    }

    /// Refuses grants this engine cannot enforce as granted (checked at
    /// init, so a grant is never silently widened). The default enforces
    /// every grant.
    fn check_grants(&self, capabilities: &Capabilities) -> Result<(), EngineError> {
        let _ = capabilities;
        Ok(())
    }

    /// What native code compiled by this runtime must match to load here:
    /// its id, plus whatever engine settings change the code (Wasmtime:
    /// fuel, memory reservation, ...). Keys the on-disk compile cache, so a
    /// restart with other settings compiles afresh instead of failing.
    fn compatibility(&self) -> String {
        self.id().to_string()
    }

    /// The operator's settings that change compiled code, in words (Wasmtime:
    /// `fuel on`/`fuel off`); empty where there are none. Sealed artifacts
    /// record it, and one sealed under other settings is refused naming
    /// both. Unlike [`WasmRuntime::compatibility`] it holds nothing the
    /// host decides (CPU features), so an artifact cross-compiled for
    /// another machine carries the same words as that machine's executor.
    fn settings(&self) -> String {
        String::new()
    }

    /// Sandboxes that can exist at once, where the engine has a fixed bound
    /// (a pool sized at start); `None` where only memory bounds it.
    fn capacity(&self) -> Option<usize> {
        None
    }
}

/// One sandbox run as a future, for a scheduler to poll.
pub type SandboxFuture = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// How a running sandbox shares its worker with other sandboxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preemption {
    /// Time slice after which a sandbox yields (Sledge uses 5 ms).
    pub quantum: Duration,
    /// Yield at the end of each quantum; when off, a sandbox runs until it
    /// finishes, waits on I/O, or meets its time limit.
    pub enabled: bool,
}

/// Five milliseconds: long enough that switching costs little (a few µs per
/// switch), short enough that a short function waits a few ms at most.
pub const DEFAULT_QUANTUM: Duration = Duration::from_millis(5);

impl Default for Preemption {
    fn default() -> Self {
        Self {
            quantum: DEFAULT_QUANTUM,
            enabled: true,
        }
    }
}

/// Whether an export `name`, a function of `params` parameters and
/// `results` results, is an entry point: a function taking and returning
/// nothing, `() -> ()`, other than Luge's own
/// [`START_EXPORT`](crate::start::START_EXPORT). The one rule every engine
/// applies to the exports it finds at load ([`LoadedModule::has_export`]).
pub fn is_entry_point(name: &str, params: usize, results: usize) -> bool {
    params == 0 && results == 0 && name != crate::start::START_EXPORT
}

/// A compiled module ready to be instantiated, shared by every container that
/// runs the same code.
pub trait LoadedModule: Send + Sync + 'static {
    /// Whether `name` is an entry point of the module: an exported function
    /// taking and returning nothing, `() -> ()` ([`is_entry_point`]; a
    /// function of any other type, or `luge:start`, is none, on every
    /// engine; a run naming one ends in
    /// [`SandboxError::NoEntry`](crate::SandboxError::NoEntry)).
    fn has_export(&self, name: &str) -> bool;

    /// Runs one invocation in a fresh sandbox and tears it down. Never panics
    /// on guest misbehaviour: traps, time and memory limits are outcomes.
    fn run(&self, invocation: Invocation) -> Outcome;

    /// Bytes of native code and metadata this module keeps resident.
    fn code_size(&self) -> usize;

    /// Starts one invocation as a future. Engines that can suspend a running
    /// sandbox return `Pending` at the end of each quantum (after waking the
    /// task, so a scheduler re-queues it) and while waiting on host I/O
    /// (without waking it until the I/O completes). The default, for engines
    /// that cannot yield, runs to completion in the first poll.
    fn start(self: Arc<Self>, invocation: Invocation, preemption: Preemption) -> SandboxFuture {
        let _ = preemption;
        Box::pin(async move { self.run(invocation) })
    }

    /// Whether the module is an HTTP handler ([`crate::handler`]), run by
    /// [`LoadedModule::start_http`] and not by `run`/`start`.
    fn serves_http(&self) -> bool {
        false
    }

    /// Whether the module can serve several HTTP requests from one
    /// instance when its action opts in ([`crate::action::Reuse`]): only
    /// WASI 0.3 services on Wasmtime. Others refuse a route's `reuse` at
    /// load.
    fn reuses_instances(&self) -> bool {
        false
    }

    /// The export this module has for events, if it is a component made
    /// to be woken by them ([`crate::event`]); such a module is run by
    /// [`LoadedModule::start_event`], not by `run`/`start`.
    fn event_export(&self) -> Option<crate::event::EventExport> {
        None
    }

    /// Starts one event in a fresh sandbox, as a future like
    /// [`LoadedModule::start`], calling the module's
    /// [`LoadedModule::event_export`]; the handler's error result ends it
    /// as exit status 1, its message on stderr. The default, for modules
    /// with no such export, fails.
    fn start_event(
        self: Arc<Self>,
        invocation: Invocation,
        event: crate::event::Event,
        preemption: Preemption,
    ) -> SandboxFuture {
        let _ = (invocation, event, preemption);
        Box::pin(std::future::ready(Outcome::failed(
            crate::event::NOT_AN_EVENT_HANDLER,
        )))
    }

    /// Starts one HTTP request in a fresh sandbox, as a future like
    /// [`LoadedModule::start`]: the response goes to `respond` as soon as
    /// the handler sets it, and the future ends when the handler has
    /// returned (its body written), with its stderr and termination. The
    /// default, for modules that are not handlers, answers nothing and
    /// fails.
    fn start_http(
        self: Arc<Self>,
        invocation: Invocation,
        request: crate::handler::Request,
        respond: crate::handler::Respond,
        preemption: Preemption,
    ) -> SandboxFuture {
        let _ = (invocation, request, respond, preemption);
        Box::pin(std::future::ready(Outcome::failed(
            crate::handler::NOT_A_HANDLER,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staged_payload_serves_only_the_payload_it_was_made_from() {
        let artifact = b"header|native code|mac".to_vec();
        let payload = &artifact[7..18];
        let staged = || StagedPayload::new(payload, Box::new(42_u32));
        let prepared = staged().prepared_for(payload).expect("the same bytes");
        assert_eq!(prepared.downcast_ref::<u32>(), Some(&42));
        // The same content elsewhere, a part of it, or more of it: not the
        // bytes it was made from.
        let copy = payload.to_vec();
        assert!(staged().prepared_for(&copy).is_none());
        assert!(staged().prepared_for(&payload[..5]).is_none());
        assert!(staged().prepared_for(&artifact[7..19]).is_none());
        assert!(staged().prepared_for(&artifact[6..17]).is_none());
    }
}
