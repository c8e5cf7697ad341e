//! Functions that are HTTP handlers (`wasi:http/proxy` components): the
//! request goes to the function as it arrives, headers and a streamed body,
//! and the response comes back the same way, instead of stdin and stdout.
//!
//! Only the types are here (the `http` crate's, with a boxed body): the
//! front end owns the HTTP connection, the engine owns the handler.

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;

/// An error while a body streams (the client went away, a limit was met).
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// A body that streams in chunks, either way.
pub type Body = UnsyncBoxBody<Bytes, BodyError>;

/// The request a handler receives.
pub type Request = http::Request<Body>;

/// The response a handler gives: its head as soon as the handler sets it,
/// its body as the handler writes it.
pub type Response = http::Response<Body>;

/// A handler that set an error instead of a response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the handler answered an error: {code}")]
pub struct HandlerError {
    /// The error as the handler's interface names it (`wasi:http`'s
    /// `error-code`, e.g. `HttpRequestDenied`).
    pub code: String,
}

/// Where a handler's response goes, at most once: `Err` when the handler
/// set an error instead of a response. Dropped without a call when the
/// handler ended without answering (the sandbox's outcome then says why).
pub type Respond = Box<dyn FnOnce(Result<Response, HandlerError>) + Send + Sync>;

/// What a module that is not an HTTP handler says when asked to be one, and
/// what a handler says when asked to run on stdin and stdout.
pub const NOT_A_HANDLER: &str = "the function is not an HTTP handler (a wasi:http/proxy component)";

/// See [`NOT_A_HANDLER`].
pub const NOT_A_COMMAND: &str = "the function is an HTTP handler (a wasi:http/proxy component): it serves HTTP routes of the standalone host, and cannot run on stdin and stdout (OpenWhisk actions, chains, calls)";
