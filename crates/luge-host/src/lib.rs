//! Luge as a standalone function host, without HTTP.
//!
//! On an edge box or a laptop there is no OpenWhisk: functions are served on
//! routes, Sledge style (request body on stdin, stdout as the response).
//! This crate decides *which* function a route runs and with what grants,
//! limits and deadline; the executor's front end does the HTTP and the
//! scheduler runs the invocation.
//!
//! - [`spec`]: one function's route, deadline, limits and grants, and how it
//!   becomes a [`luge_core::Action`] (the same rules as OpenWhisk
//!   annotations).
//! - [`config`]: `luge.toml`, server settings and routes, with errors that
//!   name the file and the key.
//! - [`sledge`]: Sledge's tenant/route spec, so functions move over
//!   unchanged.
//! - [`store`]: uploaded functions on disk, crash-safe.
//! - [`host`]: the route table, uploads, replacement and removal.
//! - [`chain`]: routes that run several functions in turn, stdout to
//!   stdin, under one deadline.
//! - [`trigger`]: functions woken by events (Redis messages, cron ticks).
#![deny(missing_docs)]

pub mod chain;
pub mod config;
pub mod function;
pub mod host;
pub mod sledge;
pub mod spec;
pub mod spin;
pub mod store;
pub mod trigger;

pub use chain::{Chain, ChainSpec};
pub use config::{Config, ConfigError, ConfiguredRoute, ServerTable};
pub use function::{Function, Origin};
pub use host::{FunctionHost, HostError, RouteMatch, RouteTable};
pub use spec::{FunctionSpec, HostPolicy, SpecError, VariableMap};
pub use store::FunctionStore;
pub use trigger::ConfiguredTrigger;
