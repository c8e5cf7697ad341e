//! An [`Action`]: everything about a deployed function except its code.

use crate::capabilities::{Capabilities, Variables};
pub use crate::hints::{DEFAULT_RELATIVE_DEADLINE, SchedHints};
use crate::limits::Limits;

/// The entry point of a WASI command module.
pub const COMMAND_ENTRY: &str = "_start";

/// A function as configured at init (or from a route), shared by every
/// invocation of it.
#[derive(Debug, Clone)]
pub struct Action {
    /// Name, used as `argv[0]` and in logs and metrics.
    pub name: String,
    /// The exported function to call: [`COMMAND_ENTRY`] or a named export.
    pub entry: String,
    /// Environment set in every invocation (init `env`, `wasi.env`).
    pub env: Vec<(String, String)>,
    /// Granted directories and argv.
    pub capabilities: Capabilities,
    /// What the function reads through `wasi:config/store` (a route's
    /// `variables`, the annotation `config.variables`), by name. Values
    /// may be secrets: never logged.
    pub variables: Variables,
    /// Enforced limits.
    pub limits: Limits,
    /// Scheduling hints.
    pub sched: SchedHints,
    /// Whether one instance may serve several requests (a route's opt-in
    /// `reuse`); `None`, the default: a fresh instance per request.
    pub reuse: Option<Reuse>,
}

/// A route's opt-in instance reuse: one instance serves up to `requests`
/// requests, at most `concurrent` at once, as `wasmtime serve` does for
/// WASI 0.3 services. It gives up per-request isolation (what one request
/// leaves in the instance's memory the next one can read), so it is never
/// a default; see the README's "Instance reuse".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reuse {
    /// Requests one instance serves before it is dropped (at least 1).
    pub requests: u32,
    /// Requests one instance serves at once (at least 1).
    pub concurrent: u32,
}

impl Reuse {
    /// The most requests one instance may serve: past this a route's
    /// `reuse` is refused (`wasmtime serve`'s default is 128).
    pub const MAX_REQUESTS: u32 = 65_536;
    /// The most requests one instance may serve at once
    /// (`wasmtime serve`'s default is 16).
    pub const MAX_CONCURRENT: u32 = 256;
}

impl Action {
    /// An action running `_start` with default limits and no capabilities.
    pub fn command(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            entry: COMMAND_ENTRY.to_owned(),
            env: Vec::new(),
            capabilities: Capabilities::default(),
            variables: Variables::default(),
            limits: Limits::default(),
            sched: SchedHints::default(),
            reuse: None,
        }
    }
}
