//! OpenWhisk's action-proxy protocol, without HTTP.
//!
//! OpenWhisk talks to an action container with `POST /init` (once, with the
//! code) and `POST /run` (per activation), and reads the container's logs up
//! to a sentinel line. This crate implements those semantics exactly as the
//! canonical `BasicActionRunnerTests` expect, over [`luge_core`]: it turns
//! request bodies into an [`luge_core::Action`] and [`luge_core::Invocation`]s
//! and turns an [`luge_core::Outcome`] back into the result or the error
//! OpenWhisk expects. The HTTP front end only moves bytes and status codes.
//!
//! A run is split in two ([`Container::prepare_run`] and
//! [`Container::finish_run`]) so the executor can hand the invocation to its
//! scheduler in between: data flows front end -> scheduler -> engine ->
//! outcome, one way.
#![deny(missing_docs)]

pub mod activation;
pub mod container;
pub mod logs;
pub mod protocol;

pub use container::{Container, Containers, InitSettings, PreparedRun};
pub use logs::{LogBuffer, LogLine, LogSink, ProcessStreams, SENTINEL};
pub use protocol::Reply;
