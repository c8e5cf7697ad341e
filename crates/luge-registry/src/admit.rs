//! One admission pipeline for every way code arrives: an OpenWhisk
//! container's `/init`, a configured route, an upload. Always in this
//! order:
//!
//! 1. grants: the annotations' directories, environment and arguments
//!    under the operator's fs root ([`Capabilities::grant`]);
//! 2. the engine's check of those grants (what it cannot enforce it
//!    refuses, never widens);
//! 3. limits, bounded by the operator's maxima;
//! 4. the code: detected by magic bytes (Wasm, zip, sealed artifact);
//! 5. compiled once (or loaded from the cache), snapshotted with the
//!    function's own initialisation ([`Init::for_action`]);
//! 6. the entry it will run.
//!
//! Every refusal is an [`AdmitError`], and [`AdmitError::status`] is its
//! one HTTP status, whichever protocol answers it.

use std::path::PathBuf;
use std::sync::Arc;

use luge_core::Action;
use luge_core::action::COMMAND_ENTRY;
use luge_core::capabilities::{Annotations, Capabilities, GrantError};
use luge_core::limits::{LimitError, LimitPolicy};
use luge_core::runtime::{EngineError, LoadedModule, WasmRuntime};

use crate::ArtifactError;
use crate::code::{CodeError, ModuleCode};
use crate::registry::{Init, LoadError, ModuleRegistry};

/// The operator's bounds on every function, however it arrives: the one
/// policy an OpenWhisk container's init, the standalone host and `luge
/// run` each hold.
#[derive(Debug, Clone)]
pub struct Bounds {
    /// Root of directory grants; `None` refuses them all.
    pub fs_root: Option<PathBuf>,
    /// Default and largest limits.
    pub limits: LimitPolicy,
    /// Largest code (a module, or a zip's unpacked module).
    pub max_code_bytes: usize,
}

/// Largest code by default: OpenWhisk's largest action is 48 MB, with
/// room left for a precompiled artifact.
pub const DEFAULT_MAX_CODE_BYTES: usize = 64 << 20;

impl Default for Bounds {
    /// No directory grants, OpenWhisk's limits, [`DEFAULT_MAX_CODE_BYTES`].
    fn default() -> Self {
        Self {
            fs_root: None,
            limits: LimitPolicy::default(),
            max_code_bytes: DEFAULT_MAX_CODE_BYTES,
        }
    }
}

/// What the loaded code must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted<'a> {
    /// A command run on stdin and stdout, entered at this export (`""` or
    /// `"main"`: [`COMMAND_ENTRY`]); an HTTP handler is refused.
    Command(&'a str),
    /// A command (at [`COMMAND_ENTRY`]) or an HTTP handler.
    CommandOrHandler,
    /// What a trigger wakes: a component with an export for events
    /// (`luge_core::event`), a command or an HTTP handler.
    Triggered,
}

/// Why code or its annotations were not admitted.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    /// The annotations are malformed, or a grant was refused.
    #[error(transparent)]
    Grant(#[from] GrantError),
    /// The engine cannot enforce a grant.
    #[error(transparent)]
    Engine(EngineError),
    /// A limit is zero or above the operator's maximum.
    #[error(transparent)]
    Limits(#[from] LimitError),
    /// The code could not be detected, compiled or loaded.
    #[error("the module was refused: {0}")]
    Load(#[from] LoadError),
    /// An HTTP handler where a command is needed.
    #[error(
        "The code is an HTTP handler (a wasi:http/proxy component): it serves HTTP routes of the standalone host, and cannot run on stdin and stdout (OpenWhisk actions, chains, calls)."
    )]
    Handler,
    /// A component made to be woken by events, on an HTTP route or as a
    /// command.
    #[error(
        "The code is an event handler (it exports {0}): it runs on its triggers, not on HTTP routes or stdin and stdout."
    )]
    EventHandler(&'static str),
    /// The named entry is not an export.
    #[error("The entry point '{0}' is not a function exported by the module.")]
    NoEntry(String),
    /// No `_start`: what a newcomer meets who built a library, a reactor
    /// or a module with no `main`, so the message says what to build.
    #[error(
        "The module is not a WASI command: it exports no _start (build a program with a main function for wasm32-wasip1, not a library or reactor; or a wasi:http component to serve HTTP)."
    )]
    NotACommand,
}

impl AdmitError {
    /// The HTTP status of this refusal: 400 for input that is not what it
    /// claims (malformed annotations, code that is not a module, a module
    /// that is not a function), 403 for what the operator's policy refuses
    /// (grants, limits, the engine's settings, artifacts not sealed for
    /// this executor), 413 for code too large.
    pub fn status(&self) -> u16 {
        const BAD: u16 = 400;
        const REFUSED: u16 = 403;
        match self {
            Self::Grant(
                GrantError::Shape | GrantError::UnknownKey(_) | GrantError::BadValue { .. },
            ) => BAD,
            Self::Grant(_) | Self::Engine(_) | Self::Limits(_) => REFUSED,
            Self::Load(e) => load_status(e),
            Self::Handler | Self::EventHandler(_) | Self::NoEntry(_) | Self::NotACommand => BAD,
        }
    }
}

/// The HTTP status of code that could not be loaded (see
/// [`AdmitError::status`]).
pub fn load_status(error: &LoadError) -> u16 {
    const BAD: u16 = 400;
    const REFUSED: u16 = 403;
    match error {
        LoadError::Code(CodeError::TooLarge { .. }) => 413,
        LoadError::Code(CodeError::UnauthenticatedNative) => REFUSED,
        LoadError::Code(_) => BAD,
        LoadError::Artifact(ArtifactError::Malformed | ArtifactError::NotAnArtifact) => BAD,
        LoadError::Artifact(_) => REFUSED,
        LoadError::Engine(EngineError::InvalidModule(_)) => BAD,
        LoadError::Engine(_) => REFUSED,
        LoadError::OverBudget(_) | LoadError::Preinit(_) | LoadError::Abi(_) => BAD,
        LoadError::CompilerPanicked(_) => REFUSED,
    }
}

/// Steps 1-3: the action `annotations` describe, named `name`, entered at
/// `entry`, with `env` (the caller's variables, then the annotations').
pub fn action(
    runtime: &dyn WasmRuntime,
    policy: &Bounds,
    name: String,
    entry: String,
    mut env: Vec<(String, String)>,
    annotations: Annotations,
) -> Result<Action, AdmitError> {
    let capabilities = Capabilities::grant(&annotations, policy.fs_root.as_deref())?;
    runtime
        .check_grants(&capabilities)
        .map_err(AdmitError::Engine)?;
    let limits = policy.limits.apply(&annotations.limits)?;
    env.extend(annotations.env);
    Ok(Action {
        name,
        entry,
        env,
        capabilities,
        variables: annotations.variables,
        limits,
        sched: annotations.sched,
        // Reuse is a route's opt-in, set by the host from its spec; an
        // OpenWhisk action always runs in a fresh sandbox.
        reuse: None,
    })
}

/// Steps 4-5: `bytes` detected and loaded for `action`; plain Wasm is
/// snapshotted with the action's initialisation export `init_function`
/// (default: Wizer's) when it has one.
pub fn load(
    registry: &ModuleRegistry,
    policy: &Bounds,
    bytes: Vec<u8>,
    action: &Action,
    init_function: Option<&str>,
) -> Result<Arc<dyn LoadedModule>, AdmitError> {
    let code = ModuleCode::detect(bytes, policy.max_code_bytes).map_err(LoadError::from)?;
    let init = Init::for_action(action, init_function);
    Ok(registry.load_with(&code, Some(&init))?)
}

/// Step 6: the export `module` runs, as `wanted`.
pub fn entry(module: &dyn LoadedModule, wanted: Wanted<'_>) -> Result<String, AdmitError> {
    if let Some(export) = module.event_export() {
        return match wanted {
            Wanted::Triggered => Ok(COMMAND_ENTRY.to_owned()),
            _ => Err(AdmitError::EventHandler(export.name)),
        };
    }
    match wanted {
        Wanted::CommandOrHandler | Wanted::Triggered if module.serves_http() => {
            Ok(COMMAND_ENTRY.to_owned())
        }
        Wanted::CommandOrHandler | Wanted::Triggered | Wanted::Command("" | "main") => {
            if module.serves_http() {
                Err(AdmitError::Handler)
            } else if module.has_export(COMMAND_ENTRY) {
                Ok(COMMAND_ENTRY.to_owned())
            } else {
                Err(AdmitError::NotACommand)
            }
        }
        Wanted::Command(_) if module.serves_http() => Err(AdmitError::Handler),
        Wanted::Command(other) if module.has_export(other) => Ok(other.to_owned()),
        Wanted::Command(other) => Err(AdmitError::NoEntry(other.to_owned())),
    }
}
