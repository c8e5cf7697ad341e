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
        }
    }
}
