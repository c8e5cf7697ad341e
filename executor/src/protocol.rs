//! One trait for every protocol's handler, as Spin's trigger-http has one
//! executor trait for its HTTP flavours: routing (`routes`) finds what a
//! request is for, builds one handler value of that protocol's type, and
//! hands it the request whole.
//!
//! | protocol                                      | handler type                |
//! |-----------------------------------------------|-----------------------------|
//! | OpenWhisk's action protocol and containers    | `openwhisk::OpenWhisk`      |
//! | function routes (request on stdin, stdout back) | `standalone::FunctionRoute` |
//! | chains of functions                           | `standalone::ChainRoute`    |
//! | the management API (`/v1/functions`)          | `standalone::Management`    |
//! | `wasi:http` handlers (streamed both ways)     | `handler::HttpHandler`      |
//!
//! Calls between functions are not HTTP: their handler, `calls::HostCalls`,
//! is behind luge-core's `Calls` trait, which every engine's host API
//! drives.

use std::future::Future;
use std::sync::Arc;

use crate::app::App;
use crate::http::{Request, Response};

/// A protocol's handler for one request routed to it.
pub(crate) trait Handler {
    /// Answers `request` (the `request_id` is the one logs and the
    /// function see). A handler that needs the body reads it within
    /// `--max-body-bytes`; one that answers without it reads it anyway, so
    /// keep-alive clients that pipeline keep their connection.
    fn serve(
        self,
        app: &Arc<App>,
        request: Request,
        request_id: u64,
    ) -> impl Future<Output = Response> + Send;
}
