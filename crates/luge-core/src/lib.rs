//! The engine-neutral contract of Luge.
//!
//! Everything the executor, the scheduler, the engines and the protocol
//! front ends agree on lives here, and nothing else: no Wasm engine, no HTTP
//! implementation (the `http` crate's types only, for [`handler`]s), no
//! async runtime, no compression or hashing. An engine crate
//! (`luge-wasmtime`, ...) implements [`WasmRuntime`] and depends on this
//! crate alone; a front end turns requests into an [`Action`] and
//! [`Invocation`]s and reads back an [`Outcome`]. How uploaded bytes become
//! a loaded module (detection, sealing, the compile registry, admission)
//! is `luge-registry`'s; the time limit for engines stopped from another
//! thread is `luge-watchdog`'s.
//!
//! The pieces, in the order a function meets them:
//!
//! - [`runtime`]: the engine contract ([`WasmRuntime`], [`LoadedModule`]),
//!   its errors, and [`VerifiedArtifact`], the only native code an engine
//!   maps.
//! - [`capabilities`] and [`limits`]: what an action may touch and use,
//!   deny-by-default, bounded by the operator's maxima.
//! - [`action`]: a deployed function except its code, and [`hints`]: what
//!   it tells the scheduler.
//! - [`invocation`] and [`outcome`]: one run of a fresh sandbox.
//! - [`handler`]: functions that are HTTP handlers, not stdin/stdout.
//! - [`calls`] and [`state`]: calls between functions and the state tiers,
//!   as the host sees them.
//! - [`hostapi`]: host API v1's imports (calls and state), written once
//!   for every engine.
//! - [`preempt`]: the one signal a scheduler sends a running sandbox, and
//!   [`teardown`]: a finished sandbox freed after its response is out.
//! - [`places`]: a process-wide bound taken without waiting.
//! - [`error`]: causes kept whole, shown as one line ([`error_line`]).
#![deny(missing_docs)]

pub mod action;
pub mod ahead;
pub mod calls;
pub mod capabilities;
pub mod error;
pub mod event;
pub mod files;
pub mod handler;
pub mod hints;
pub mod hostapi;
pub mod invocation;
pub mod keyvalue;
pub mod limits;
pub mod outcome;
pub mod places;
pub mod preempt;
pub mod runtime;
pub mod serde_keys;
pub mod start;
pub mod state;
pub mod teardown;
pub mod trace;

pub use action::Action;
pub use capabilities::{Capabilities, DirGrant, DirMode, GrantError};
pub use error::{Cause, error_line};
pub use invocation::{Cancellation, Invocation};
pub use limits::{LimitError, LimitPolicy, Limits};
pub use outcome::{Outcome, SandboxError, Termination};
pub use runtime::{
    EngineError, EngineId, LoadedModule, Preemption, SandboxFuture, StagedPayload, Unsupported,
    VerifiedArtifact, WasmRuntime, is_component,
};
