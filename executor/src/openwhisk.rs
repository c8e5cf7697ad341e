//! OpenWhisk's action protocol: `/init` and `/run` of a container (the
//! one of `luge proxy`, or one of `luge serve`'s by id), and `luge serve`'s
//! container management for the WasmContainerFactory (`/{id}/destroy`,
//! `/{id}/logs`, `/containers`), over [`App`].

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use hyper::{Method, StatusCode};
use luge_openwhisk::{Container, Reply};

use crate::admission::Tree;
use crate::app::{App, Mode};
use crate::dispatch;
use crate::http::{self, Request, Response};
use crate::protocol::Handler;
use crate::router::Endpoint;
use crate::telemetry::{Span, Trigger};
use luge_telemetry::KeyValue;

/// The handler of one OpenWhisk endpoint: `endpoint`, with its `{id}`.
pub(crate) struct OpenWhisk {
    endpoint: Endpoint,
    id: String,
}

impl OpenWhisk {
    /// The handler of `endpoint` (with `id`, its `{id}` or empty), if it is
    /// OpenWhisk's and `mode` serves it.
    pub(crate) fn at(endpoint: Endpoint, id: String, mode: &Mode) -> Option<Self> {
        let served = matches!(
            (endpoint, mode),
            (Endpoint::ProxyInit | Endpoint::ProxyRun, Mode::Proxy(_))
                | (
                    Endpoint::Containers
                        | Endpoint::ContainerInit
                        | Endpoint::ContainerRun
                        | Endpoint::ContainerDestroy
                        | Endpoint::ContainerLogs,
                    Mode::Serve { .. },
                )
        );
        served.then_some(Self { endpoint, id })
    }
}

impl Handler for OpenWhisk {
    async fn serve(self, app: &Arc<App>, request: Request, _request_id: u64) -> Response {
        let method = request.method().clone();
        let query = request.uri().query().map(str::to_owned);
        let parent = luge_telemetry::Parent::from_headers(request.headers());
        let body = match http::read_body(request, app.settings.max_body_bytes).await {
            Ok(body) => body,
            Err(refused) => return refused,
        };
        let id = self.id.as_str();
        match (self.endpoint, &app.mode) {
            (Endpoint::ProxyInit, Mode::Proxy(container)) => {
                init(app, body, Arc::clone(container)).await
            }
            (Endpoint::ProxyRun, Mode::Proxy(container)) => {
                run(app, &body, container, parent).await
            }
            (Endpoint::ContainerInit, Mode::Serve { containers, .. }) => {
                match containers.get_or_create(id) {
                    Ok(hosted) => init(app, body, Arc::clone(&hosted.container)).await,
                    Err(reply) => http::reply(reply),
                }
            }
            (Endpoint::ContainerRun, Mode::Serve { containers, .. }) => match containers.get(id) {
                Ok(hosted) => run(app, &body, &hosted.container, parent).await,
                Err(reply) => http::reply(reply),
            },
            (Endpoint::ContainerDestroy, Mode::Serve { containers, .. }) => {
                match containers.destroy(id) {
                    Ok(()) => http::json(StatusCode::OK, &serde_json::json!({ "ok": true })),
                    Err(reply) => http::reply(reply),
                }
            }
            (Endpoint::Containers, Mode::Serve { containers, .. }) => {
                match container_prefix(query.as_deref()) {
                    Ok(prefix) if method == Method::GET => http::json(
                        StatusCode::OK,
                        &serde_json::json!({ "containers": containers.ids(&prefix) }),
                    ),
                    Ok(prefix) => {
                        let destroyed = containers.destroy_prefix(&prefix);
                        tracing::info!(%prefix, destroyed, "containers purged");
                        http::json(
                            StatusCode::OK,
                            &serde_json::json!({ "destroyed": destroyed }),
                        )
                    }
                    Err(reply) => http::reply(reply),
                }
            }
            (Endpoint::ContainerLogs, Mode::Serve { containers, .. }) => match containers.get(id) {
                Ok(hosted) => http::json(
                    StatusCode::OK,
                    &serde_json::json!({ "logs": hosted.logs.drain() }),
                ),
                Err(reply) => http::reply(reply),
            },
            // `at` made this handler for its mode's endpoints only.
            (endpoint, _) => http::json_error(
                StatusCode::NOT_FOUND,
                &format!("{} is not served in this mode.", endpoint.pattern()),
            ),
        }
    }
}

/// `/init`: loads the action's code (compiling off the workers).
async fn init(app: &App, body: Bytes, container: Arc<Container>) -> Response {
    let registry = Arc::clone(&app.settings.registry);
    let bounds = app.settings.admit.clone();
    let settings = app.settings.init.clone();
    let reply = dispatch::blocking(&app.settings.runtime, move || {
        container.init(&registry, &bounds, &settings, &body)
    })
    .await
    .unwrap_or_else(|e| Reply::error(500, e.to_string()));
    http::reply(reply)
}

/// `/run`: one activation, admitted and scheduled like every invocation.
async fn run(
    app: &App,
    body: &[u8],
    container: &Container,
    parent: Option<luge_telemetry::Parent>,
) -> Response {
    let arrived = Instant::now();
    let prepared = match container.prepare_run(body) {
        Ok(prepared) => prepared,
        Err(reply) => return http::reply(reply),
    };
    let deadline = prepared.deadline(arrived);
    let calls = Arc::clone(&prepared.calls);
    let cold = prepared.cold;
    let mut invocation = prepared.invocation;
    invocation.state = app.container_state(&invocation, arrived);
    // The activation's span: named by the OpenWhisk action, its
    // activation id as `faas.invocation_id`.
    let env = &invocation.env;
    let action = luge_openwhisk::activation::get(env, luge_openwhisk::activation::ACTION_NAME)
        .unwrap_or(invocation.action.name.as_str())
        .to_owned();
    let span = Span::start(
        app.settings.telemetry.as_ref(),
        || action.clone(),
        &action,
        Trigger::Http,
        parent,
        arrived,
    )
    .cold_start(cold);
    span.set(|| {
        let mut attributes = Vec::new();
        if let Some(id) =
            luge_openwhisk::activation::get(env, luge_openwhisk::activation::ACTIVATION_ID)
        {
            attributes.push(KeyValue::new("faas.invocation_id", id.to_owned()));
        }
        if let Some(namespace) = luge_openwhisk::activation::namespace(env) {
            attributes.push(KeyValue::new("cloud.account.id", namespace.to_owned()));
        }
        attributes
    });
    // The tenant is the activation's namespace (the invoker sends it), else
    // the action: admission places are shared fairly between namespaces.
    let tree = Tree::new(
        luge_openwhisk::activation::namespace(&invocation.env)
            .unwrap_or(invocation.action.name.as_str()),
    );
    match app
        .execute(&tree, prepared.module, invocation, arrived, deadline, &span)
        .await
    {
        Ok(outcome) => http::reply(container.finish_run(&outcome, &calls)),
        Err(overloaded) => overloaded,
    }
}

/// The `prefix` query parameter of `/containers`: required, so that a bare
/// `DELETE /containers` cannot purge every invoker's containers by accident
/// (`prefix=` names them all); container-id characters only, so it needs no
/// percent-decoding.
fn container_prefix(query: Option<&str>) -> Result<String, Reply> {
    let prefix = query
        .unwrap_or_default()
        .split('&')
        .find_map(|pair| pair.strip_prefix("prefix="));
    match prefix {
        Some(prefix)
            if prefix.len() <= 128
                && prefix
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) =>
        {
            Ok(prefix.to_owned())
        }
        Some(_) => Err(Reply::error(
            400,
            "A container prefix is at most 128 letters, digits, '-', '_' and '.'.",
        )),
        None => Err(Reply::error(
            400,
            "Name the containers with ?prefix= (an invoker's prefix, or empty for all).",
        )),
    }
}
