//! Routing a request: a Sledge tenant's routes, function routes and
//! chains, then the executor's own API (`router`), each to its protocol's
//! handler. Above the protocols; below the listeners (`serve`).

use std::sync::Arc;

use bytes::Bytes;
use hyper::{Method, StatusCode};
use luge_openwhisk::Reply;

use crate::app::{App, Mode};
use crate::http::{self, Request, Response};
use crate::openwhisk;
use crate::router::Endpoint;
use crate::standalone::HttpInput;

/// Which listener a request came in on.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Site {
    Main,
    Tenant(usize),
}

/// Serves one request that arrived on `site`.
pub(crate) async fn handle(
    app: Arc<App>,
    site: Site,
    request_id: u64,
    request: Request,
) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    // An HTTP handler takes the request as it comes, its body unread.
    if let Some(function) = handler_at(&app, site, &path) {
        return app.invoke_handler(function, request, request_id).await;
    }
    let query = request.uri().query().map(str::to_owned);
    let headers = request.headers().clone();
    // Every body is read (bounded) before routing, even where the route
    // ignores it: a reply sent over an unread body forces hyper to close
    // the connection, breaking clients that pipeline on keep-alive.
    let body = match http::read_body(request, app.settings.max_body_bytes).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let input = |body| HttpInput {
        method: method.clone(),
        query: query.clone(),
        headers: headers.clone(),
        body,
        request_id,
    };
    if let Site::Tenant(index) = site {
        return match (app.tenants.get(index), path.as_str()) {
            (_, "/healthz") if method == Method::GET => app.health(),
            (_, "/metrics") if method == Method::GET => app.metrics_reply(),
            (Some(tenant), _) => match tenant.routes.get(&path) {
                Some(function) => app.invoke_function(function, input(body)).await,
                None => not_found(&method, &path),
            },
            (None, _) => not_found(&method, &path),
        };
    }
    // Function routes and chains never overlap the API (refused where
    // they are declared: FunctionHost::reserve), so order is moot.
    if let Mode::Serve { host, .. } = &app.mode {
        if let Some(function) = host.route(&path) {
            return app.invoke_function(function, input(body)).await;
        }
        if let Some(chain) = host.chain(&path) {
            return app.invoke_chain(chain, input(body)).await;
        }
    }
    match app.api.at(&path) {
        Some((endpoint, param)) if endpoint.allows(&method) => {
            let param = param.unwrap_or_default().to_owned();
            serve_endpoint(
                &app,
                endpoint,
                &param,
                &method,
                query.as_deref(),
                &headers,
                body,
            )
            .await
        }
        Some((endpoint, _)) => http::json_error(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("{method} is not allowed on {}.", endpoint.pattern()),
        ),
        None => not_found(&method, &path),
    }
}

/// Serves one endpoint of the executor's API; `param` is its `{id}` or
/// `{name}`.
async fn serve_endpoint(
    app: &App,
    endpoint: Endpoint,
    param: &str,
    method: &Method,
    query: Option<&str>,
    headers: &hyper::HeaderMap,
    body: Bytes,
) -> Response {
    match (endpoint, &app.mode) {
        (Endpoint::Health, _) => app.health(),
        (Endpoint::Metrics, _) => app.metrics_reply(),
        (Endpoint::ProxyInit, Mode::Proxy(container)) => {
            openwhisk::init(app, body, Arc::clone(container)).await
        }
        (Endpoint::ProxyRun, Mode::Proxy(container)) => openwhisk::run(app, &body, container).await,
        (Endpoint::Functions, Mode::Serve { host, .. }) => {
            app.manage(host, method, None, headers, body).await
        }
        (Endpoint::Function, Mode::Serve { host, .. }) => {
            app.manage(host, method, Some(param), headers, body).await
        }
        (Endpoint::ContainerInit, Mode::Serve { containers, .. }) => {
            match containers.get_or_create(param) {
                Ok(hosted) => openwhisk::init(app, body, Arc::clone(&hosted.container)).await,
                Err(reply) => http::reply(reply),
            }
        }
        (Endpoint::ContainerRun, Mode::Serve { containers, .. }) => match containers.get(param) {
            Ok(hosted) => openwhisk::run(app, &body, &hosted.container).await,
            Err(reply) => http::reply(reply),
        },
        (Endpoint::ContainerDestroy, Mode::Serve { containers, .. }) => {
            match containers.destroy(param) {
                Ok(()) => http::json(StatusCode::OK, &serde_json::json!({ "ok": true })),
                Err(reply) => http::reply(reply),
            }
        }
        (Endpoint::Containers, Mode::Serve { containers, .. }) => match container_prefix(query) {
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
        },
        (Endpoint::ContainerLogs, Mode::Serve { containers, .. }) => match containers.get(param) {
            Ok(hosted) => http::json(
                StatusCode::OK,
                &serde_json::json!({ "logs": hosted.logs.drain() }),
            ),
            Err(reply) => http::reply(reply),
        },
        // Each mode's router holds only its own endpoints.
        (endpoint, _) => http::json_error(
            StatusCode::NOT_FOUND,
            &format!("{} is not served in this mode.", endpoint.pattern()),
        ),
    }
}

/// The HTTP handler served at `path` on `site`, if that is what is
/// there.
fn handler_at(app: &App, site: Site, path: &str) -> Option<Arc<luge_host::Function>> {
    let function = match (site, &app.mode) {
        (Site::Tenant(index), _) => app.tenants.get(index)?.routes.get(path),
        (Site::Main, Mode::Serve { host, .. }) => host.route(path),
        (Site::Main, Mode::Proxy(_)) => None,
    }?;
    function.module.serves_http().then_some(function)
}

fn not_found(method: &Method, path: &str) -> Response {
    http::json_error(
        StatusCode::NOT_FOUND,
        &format!("No route for {method} {path}."),
    )
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
