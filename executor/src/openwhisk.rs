//! OpenWhisk's action protocol: `/init` and `/run` of a container (the
//! one of `luge proxy`, or one of `luge serve`'s by id), over [`App`].

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use luge_openwhisk::{Container, Reply};

use crate::app::App;
use crate::dispatch;
use crate::http::{self, Response};

/// `/init`: loads the action's code (compiling off the workers).
pub(crate) async fn init(app: &App, body: Bytes, container: Arc<Container>) -> Response {
    let registry = Arc::clone(&app.settings.registry);
    let settings = app.settings.init.clone();
    let reply = dispatch::blocking(&app.settings.runtime, move || {
        container.init(&registry, &settings, &body)
    })
    .await
    .unwrap_or_else(|e| Reply::error(500, e.to_string()));
    http::reply(reply)
}

/// `/run`: one activation, admitted and scheduled like every invocation.
pub(crate) async fn run(app: &App, body: &[u8], container: &Container) -> Response {
    let prepared = match container.prepare_run(body) {
        Ok(prepared) => prepared,
        Err(reply) => return http::reply(reply),
    };
    let arrived = Instant::now();
    let deadline = prepared.deadline(arrived);
    let calls = Arc::clone(&prepared.calls);
    let mut invocation = prepared.invocation;
    invocation.state = app.container_state(&invocation, arrived);
    match app
        .execute(prepared.module, invocation, arrived, deadline)
        .await
    {
        Ok(outcome) => http::reply(container.finish_run(&outcome, &calls)),
        Err(overloaded) => overloaded,
    }
}
