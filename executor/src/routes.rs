//! Routing a request: a Sledge tenant's routes, function routes and
//! chains, then the executor's own API (`router`), each to its protocol's
//! [`Handler`]. Above the protocols; below the listeners (`serve`).

use std::sync::Arc;

use hyper::{Method, StatusCode};

use crate::app::{App, Mode};
use crate::handler::HttpHandler;
use crate::http::{self, Request, Response};
use crate::openwhisk::OpenWhisk;
use crate::protocol::Handler;
use crate::router::Endpoint;
use crate::standalone::{ChainRoute, FunctionRoute, Management};

/// Which listener a request came in on.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Site {
    Main,
    Tenant(usize),
}

/// What a request is for.
enum Route {
    Handler(HttpHandler),
    Function(FunctionRoute),
    Chain(ChainRoute),
    Management(Management),
    OpenWhisk(OpenWhisk),
    /// The executor's own answer (health, metrics, no such route): the
    /// body is read, bounded, and dropped.
    Answer(Response),
}

/// Serves one request that arrived on `site`.
pub(crate) async fn handle(
    app: Arc<App>,
    site: Site,
    request_id: u64,
    request: Request,
) -> Response {
    let route = route(&app, site, request.method(), request.uri().path());
    match route {
        Route::Handler(handler) => handler.serve(&app, request, request_id).await,
        Route::Function(function) => function.serve(&app, request, request_id).await,
        Route::Chain(chain) => chain.serve(&app, request, request_id).await,
        Route::Management(management) => management.serve(&app, request, request_id).await,
        Route::OpenWhisk(openwhisk) => openwhisk.serve(&app, request, request_id).await,
        Route::Answer(response) => {
            match http::read_body(request, app.settings.max_body_bytes).await {
                Ok(_) => response,
                Err(refused) => refused,
            }
        }
    }
}

/// Spin's reserved routes (`/.well-known/spin/health`), which every Spin
/// HTTP app has and none of its routes can take; `info` is not served
/// (404, as Spin answers the other paths there).
const SPIN_RESERVED: &str = "/.well-known/spin/";

/// The route of `method` `path` on `site`.
fn route(app: &App, site: Site, method: &Method, path: &str) -> Route {
    if let Site::Tenant(index) = site {
        return match (app.tenants.get(index), path) {
            (_, "/healthz") if method == Method::GET => Route::Answer(app.health()),
            (_, "/livez") if method == Method::GET => Route::Answer(app.liveness()),
            (_, "/readyz") if method == Method::GET => Route::Answer(app.readiness()),
            (_, "/metrics") if method == Method::GET => Route::Answer(app.metrics_reply()),
            (Some(tenant), _) => match tenant.routes.lookup(path) {
                Some(matched) => function_route(matched),
                None => Route::Answer(not_found(method, path)),
            },
            (None, _) => Route::Answer(not_found(method, path)),
        };
    }
    // Spin's reserved routes come before any of the app's, as in Spin.
    if let Some(reserved) = path.strip_prefix(SPIN_RESERVED) {
        return Route::Answer(match reserved {
            "health" if method == Method::GET => app.liveness(),
            _ => not_found(method, path),
        });
    }
    // Function routes and chains never overlap the API (refused where
    // they are declared: FunctionHost::reserve), so order is moot.
    if let Mode::Serve { host, .. } = &app.mode {
        if let Some(matched) = host.route(path) {
            return function_route(matched);
        }
        if let Some(chain) = host.chain(path) {
            return Route::Chain(ChainRoute(chain));
        }
    }
    match app.api.at(path) {
        Some((endpoint, param)) if endpoint.allows(method) => {
            let param = param.unwrap_or_default().to_owned();
            match (endpoint, &app.mode) {
                (Endpoint::Health, _) => Route::Answer(app.health()),
                (Endpoint::Live, _) => Route::Answer(app.liveness()),
                (Endpoint::Ready, _) => Route::Answer(app.readiness()),
                (Endpoint::Metrics, _) => Route::Answer(app.metrics_reply()),
                (Endpoint::Functions, Mode::Serve { host, .. }) => {
                    Route::Management(Management::new(host, None))
                }
                (Endpoint::Function, Mode::Serve { host, .. }) => {
                    Route::Management(Management::new(host, Some(param)))
                }
                (endpoint, mode) => match OpenWhisk::at(endpoint, param, mode) {
                    Some(openwhisk) => Route::OpenWhisk(openwhisk),
                    // Each mode's router holds only its own endpoints.
                    None => Route::Answer(http::json_error(
                        StatusCode::NOT_FOUND,
                        &format!("{} is not served in this mode.", endpoint.pattern()),
                    )),
                },
            }
        }
        Some((endpoint, _)) => Route::Answer(http::json_error(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("{method} is not allowed on {}.", endpoint.pattern()),
        )),
        // Prefix routes (`/api/...`) take what nothing above served.
        None => match &app.mode {
            Mode::Serve { host, .. } => match host.prefixed_route(path) {
                Some(matched) => function_route(matched),
                None => Route::Answer(not_found(method, path)),
            },
            _ => Route::Answer(not_found(method, path)),
        },
    }
}

/// A function's route: an HTTP handler takes the request as it comes;
/// any other function runs on its body.
fn function_route(matched: luge_host::RouteMatch) -> Route {
    if matched.function.module.serves_http() {
        Route::Handler(HttpHandler(matched))
    } else {
        Route::Function(FunctionRoute(matched))
    }
}

fn not_found(method: &Method, path: &str) -> Response {
    http::json_error(
        StatusCode::NOT_FOUND,
        &format!("No route for {method} {path}."),
    )
}
