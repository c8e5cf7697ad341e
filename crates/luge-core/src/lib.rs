//! The engine-neutral contract of Luge.
//!
//! Everything the executor, the scheduler and the protocol front ends agree on
//! lives here, and nothing else: no Wasm engine, no HTTP implementation (the
//! `http` crate's types only, for [`handler`]s), no async runtime. An
//! engine crate (`luge-wasmtime`, ...) implements [`WasmRuntime`]; a front end
//! turns requests into an [`Action`] and [`Invocation`]s and reads back an
//! [`Outcome`].
//!
//! The pieces, in the order a function meets them:
//!
//! - [`code`]: what a client uploads (Wasm, a zip, or a precompiled artifact),
//!   detected by magic bytes.
//! - [`artifact`]: the authenticated envelope around engine-native code; native
//!   code is mapped only after its MAC verifies under the operator's key.
//! - [`registry`]: compile once per content hash, share loaded modules between
//!   containers, keep compiled artifacts on disk so a restart is warm.
//! - [`admit`]: the one admission pipeline (grants, engine check, limits,
//!   code, compile, entry) and its one refusal-to-status mapping.
//! - [`capabilities`] and [`limits`]: what an action may touch and use,
//!   deny-by-default, bounded by the operator's maxima.
//! - [`invocation`] and [`outcome`]: one run of a fresh sandbox.
//! - [`handler`]: functions that are HTTP handlers, not stdin/stdout.
//! - [`calls`]: calls between functions, between an engine and the host.
//! - [`hostapi`]: host API v1's imports (calls and state), written once
//!   for every engine.
//! - [`preempt`]: the one signal a scheduler sends a running sandbox.
//! - [`watchdog`]: the time limit for engines stopped from another thread.
//! - [`secret`]: operator secrets read only from private files.
#![deny(missing_docs)]

pub mod action;
pub mod admit;
pub mod artifact;
pub mod calls;
pub mod capabilities;
pub mod code;
pub mod handler;
pub mod hostapi;
pub mod invocation;
pub mod limits;
pub mod outcome;
pub mod preempt;
pub mod registry;
pub mod runtime;
pub mod secret;
pub mod state;
pub mod watchdog;

pub use action::Action;
pub use artifact::{ArtifactError, ArtifactKey, VerifiedArtifact};
pub use capabilities::{Capabilities, DirGrant, DirMode, GrantError};
pub use code::{CodeError, ModuleCode};
pub use invocation::{Cancellation, Invocation};
pub use limits::{LimitError, LimitPolicy, Limits};
pub use outcome::{Outcome, Termination};
pub use registry::{LoadError, ModuleRegistry, RegistryStats};
pub use runtime::{EngineError, EngineId, LoadedModule, Preemption, SandboxFuture, WasmRuntime};

/// An error and its causes as one line, `what: why: why`, the way a person
/// reads a start-up failure of `luge` or `luge-precompile`; the binaries add
/// the backtrace only when `RUST_BACKTRACE` asks for it.
pub fn error_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        // thiserror's `#[error(transparent)]` and `{0}` forms repeat
        // their cause; say each thing once.
        if !line.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line.replace('\n', " ")
}
