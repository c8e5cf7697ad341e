//! A function as the host serves it: its action, its loaded module, its
//! spec and where it came from. Routes ([`crate::host`]) and chains
//! ([`crate::chain`]) both hold functions; neither is below the other.

use std::sync::Arc;

use luge_core::{Action, LoadedModule};

use crate::spec::FunctionSpec;

/// Where a function came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A route of `luge.toml`.
    Config,
    /// A route of a Sledge tenant.
    Sledge {
        /// The tenant.
        tenant: String,
    },
    /// `PUT /v1/functions/{name}`.
    Uploaded {
        /// Seconds since the Unix epoch.
        uploaded_at: u64,
    },
}

/// A function ready to be invoked.
pub struct Function {
    /// Name in logs and metrics: the upload name, or the route path.
    pub name: String,
    /// Paths it is served on.
    pub routes: Vec<String>,
    /// The action every invocation runs.
    pub action: Arc<Action>,
    /// The loaded module, shared with every function of the same code.
    pub module: Arc<dyn LoadedModule>,
    /// As configured or uploaded.
    pub spec: FunctionSpec,
    /// Where it came from.
    pub origin: Origin,
}

impl std::fmt::Debug for Function {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Function")
            .field("name", &self.name)
            .field("routes", &self.routes)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl Function {
    /// The owner of its private state namespace: its name, unless its spec
    /// shares one (a Spin app's `default` store).
    pub fn private_store(&self) -> &str {
        self.spec.private_store.as_deref().unwrap_or(&self.name)
    }

    /// `Content-Type` of successful responses.
    pub fn content_type(&self) -> &str {
        self.spec.content_type()
    }
}
