//! The standalone function host over HTTP: invoking a function on its route
//! (request body on stdin, stdout as the response, Sledge style) and the
//! management API under `/v1/functions` behind the operator token.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, StatusCode};
use luge_core::{Invocation, Termination};
use luge_host::{
    Chain, Function, FunctionHost, FunctionSpec, HostError, Origin, RouteMatch, SpecError,
};

use crate::admission::Tree;
use crate::app::{App, log_stderr};
use crate::dispatch;
use crate::http::{self, Request, Response};
use crate::invocation::{failure_message, failure_status, relative_deadline};
use crate::protocol::Handler;
use crate::telemetry::{Span, Trigger};
use luge_telemetry::KeyValue;

pub use crate::invocation::DEADLINE_HEADER;

/// Header of a failed chain's response: the number (from 1) of the stage
/// that failed.
pub const CHAIN_STAGE_HEADER: &str = "x-luge-chain-stage";

/// What an invocation needs from its HTTP request.
pub struct HttpInput {
    /// GET or POST.
    pub method: Method,
    /// The query string, the input of a GET.
    pub query: Option<String>,
    /// Request headers.
    pub headers: HeaderMap,
    /// The body, the input of a POST.
    pub body: Bytes,
    /// The request id, also given to the function.
    pub request_id: u64,
}

impl HttpInput {
    /// Reads `request`'s head and its body, within `--max-body-bytes`.
    async fn read(app: &App, request: Request, request_id: u64) -> Result<Self, Response> {
        let method = request.method().clone();
        let query = request.uri().query().map(str::to_owned);
        let headers = request.headers().clone();
        let body = http::read_body(request, app.settings.max_body_bytes).await?;
        Ok(Self {
            method,
            query,
            headers,
            body,
            request_id,
        })
    }
}

/// A function on its route: the request's body (or a GET's query) on
/// stdin, its stdout the response, Sledge style.
pub(crate) struct FunctionRoute(pub(crate) RouteMatch);

/// A chain on its route: each stage's stdout the next one's stdin.
pub(crate) struct ChainRoute(pub(crate) Arc<Chain>);

/// `/v1/functions[/{name}]`, behind the operator token.
pub(crate) struct Management {
    host: Arc<FunctionHost>,
    name: Option<String>,
}

impl Management {
    /// The management API of `host`, for all functions or the one `name`d.
    pub(crate) fn new(host: &Arc<FunctionHost>, name: Option<String>) -> Self {
        Self {
            host: Arc::clone(host),
            name,
        }
    }
}

impl Handler for FunctionRoute {
    /// Runs the function on the request and answers with its stdout.
    async fn serve(self, app: &Arc<App>, request: Request, request_id: u64) -> Response {
        let input = match HttpInput::read(app, request, request_id).await {
            Ok(input) => input,
            Err(refused) => return refused,
        };
        let matched = self.0;
        let function = Arc::clone(&matched.function);
        let arrived = Instant::now();
        let span = route_span(app, &input, &matched.route, &function.name, arrived);
        let action = &function.action;
        let relative = action.sched.relative_deadline_or_default();
        let (stdin, relative) = match request_input(&input, relative) {
            Ok(prepared) => prepared,
            Err((status, message)) => return http::json_error(status, message),
        };
        // The request and everything it causes, charged to this function.
        let tree = Tree::new(&function.name);
        // A function that may call others gets the host's calls.
        let calls = (!function.spec.calls.is_empty())
            .then(|| {
                crate::calls::HostCalls::root(
                    app,
                    &function,
                    &tree,
                    arrived + relative,
                    input.request_id,
                    &span,
                )
            })
            .flatten();
        let invocation = Invocation {
            env: request_env(&input, Some(&matched), None),
            calls,
            trace: span.trace(),
            state: app.state_session(&function, arrived),
            ..Invocation::new(Arc::clone(action), stdin)
        };
        let module = Arc::clone(&function.module);
        let outcome = match app
            .execute(
                &tree,
                module,
                invocation,
                arrived,
                arrived + relative,
                &span,
            )
            .await
        {
            Ok(outcome) => outcome,
            Err(overloaded) => return overloaded,
        };
        log_stderr(&function.name, input.request_id, &outcome.stderr);
        if outcome.termination == Termination::Exited(0) {
            return success(outcome.stdout, function.content_type());
        }
        let message = failure_message(&outcome.termination);
        tracing::warn!(function = %function.name, %message, "invocation failed");
        http::json_error(failure_status(&outcome.termination), &message)
    }
}

/// The span of a request to a function or chain on `route`: `{method}
/// {route}`, in its client's trace.
fn route_span(app: &App, input: &HttpInput, route: &str, name: &str, arrived: Instant) -> Span {
    let method = input.method.as_str();
    let span = Span::start(
        app.settings.telemetry.as_ref(),
        || format!("{method} {route}"),
        name,
        Trigger::Http,
        luge_telemetry::Parent::from_headers(&input.headers),
        arrived,
    );
    span.set(|| {
        vec![
            KeyValue::new("http.request.method", method.to_owned()),
            KeyValue::new("http.route", route.to_owned()),
            KeyValue::new("faas.invocation_id", input.request_id.to_string()),
        ]
    });
    span
}

impl Handler for ChainRoute {
    /// Runs the chain's stages in turn, each one's stdout the next one's
    /// stdin, all under the chain's deadline and one admission place, and
    /// answers with the last stdout. The first stage that fails ends the
    /// chain; the answer names it (and `X-Luge-Chain-Stage` numbers it).
    async fn serve(self, app: &Arc<App>, request: Request, request_id: u64) -> Response {
        let input = match HttpInput::read(app, request, request_id).await {
            Ok(input) => input,
            Err(refused) => return refused,
        };
        let chain = self.0;
        let arrived = Instant::now();
        let span = route_span(app, &input, &chain.path, &chain.path, arrived);
        let (mut data, relative) = match request_input(&input, chain.relative_deadline) {
            Ok(prepared) => prepared,
            Err((status, message)) => return http::json_error(status, message),
        };
        // One place for the whole chain: a chain admitted is not refused
        // halfway through.
        let place = match app.admit(&Tree::new(&chain.path), &chain.path) {
            Ok(place) => place,
            Err(refused) => {
                span.refused("admission refused");
                return app.overloaded(refused);
            }
        };
        let deadline = arrived + relative;
        for (index, function) in chain.stages.iter().enumerate() {
            let stage = index + 1;
            let started = Instant::now();
            let stage_span = Span::start(
                app.settings.telemetry.as_ref(),
                || function.name.clone(),
                &function.name,
                Trigger::Other,
                span.parent(),
                started,
            );
            stage_span.set(|| vec![KeyValue::new("luge.chain_stage", stage as i64)]);
            let invocation = Invocation {
                env: request_env(&input, None, Some(stage)),
                state: app.state_session(function, Instant::now()),
                ..Invocation::new(Arc::clone(&function.action), data)
            };
            let outcome = app
                .execute_admitted(
                    Arc::clone(&function.module),
                    invocation,
                    started,
                    deadline,
                    place.clone(),
                    &stage_span,
                )
                .await;
            log_stderr(&function.name, input.request_id, &outcome.stderr);
            if outcome.termination != Termination::Exited(0) {
                let message = format!(
                    "Stage {stage} of {} ({}): {}",
                    chain.stages.len(),
                    function.routes.first().map_or("?", String::as_str),
                    failure_message(&outcome.termination)
                );
                tracing::warn!(chain = %chain.path, %message, "chain failed");
                let mut response = http::json_error(failure_status(&outcome.termination), &message);
                response
                    .headers_mut()
                    .insert(CHAIN_STAGE_HEADER, HeaderValue::from(stage));
                span.end(&outcome);
                return response;
            }
            data = outcome.stdout;
        }
        span.end(&luge_core::Outcome {
            termination: Termination::Exited(0),
            stdout: Vec::new(),
            stderr: Vec::new(),
            elapsed: arrived.elapsed(),
        });
        success(data, chain.content_type())
    }
}

impl Handler for Management {
    async fn serve(self, app: &Arc<App>, request: Request, _request_id: u64) -> Response {
        let method = request.method().clone();
        let headers = request.headers().clone();
        // Read before the token is checked: a refusal over an unread body
        // would close a keep-alive connection.
        let body = match http::read_body(request, app.settings.max_body_bytes).await {
            Ok(body) => body,
            Err(refused) => return refused,
        };
        let (host, name) = (&self.host, self.name.as_deref());
        match &app.token {
            None => {
                return http::json_error(
                    StatusCode::FORBIDDEN,
                    "The management API is off: no operator token is configured (--token-file or LUGE_TOKEN).",
                );
            }
            Some(token) if !token.accepts(&headers) => {
                let mut response = http::json_error(
                    StatusCode::UNAUTHORIZED,
                    "Missing or wrong operator token (Authorization: Bearer TOKEN).",
                );
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return response;
            }
            Some(_) => {}
        }
        match (&method, name) {
            (&Method::GET, None) => {
                let functions: Vec<_> = host.list_uploaded().iter().map(|f| describe(f)).collect();
                http::json(
                    StatusCode::OK,
                    &serde_json::json!({ "functions": functions }),
                )
            }
            (&Method::GET, Some(name)) => match host.uploaded(name) {
                Some(function) => http::json(StatusCode::OK, &describe(&function)),
                None => host_error(&HostError::NotFound(name.to_owned())),
            },
            (&Method::DELETE, Some(name)) => {
                let host = Arc::clone(host);
                let owned = name.to_owned();
                match dispatch::blocking(&app.settings.runtime, move || host.remove(&owned)).await {
                    Ok(Ok(())) => {
                        app.upload_changed(name);
                        http::json(StatusCode::OK, &serde_json::json!({ "deleted": name }))
                    }
                    Ok(Err(e)) => host_error(&e),
                    Err(e) => http::json_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
                }
            }
            (&Method::PUT, Some(name)) => {
                let (code, spec) = match parse_upload(body) {
                    Ok(upload) => upload,
                    Err(e) => return http::json_error(StatusCode::BAD_REQUEST, &e.to_string()),
                };
                let host = Arc::clone(host);
                let owned = name.to_owned();
                match dispatch::blocking(&app.settings.runtime, move || {
                    host.upload(&owned, code, spec)
                })
                .await
                {
                    Ok(Ok((function, replaced))) => {
                        tracing::info!(function = %function.name, replaced, "function uploaded");
                        app.upload_changed(&function.name);
                        let status = if replaced {
                            StatusCode::OK
                        } else {
                            StatusCode::CREATED
                        };
                        http::json(status, &describe(&function))
                    }
                    Ok(Err(e)) => host_error(&e),
                    Err(e) => http::json_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
                }
            }
            _ => http::json_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "Use GET /v1/functions, or PUT, GET or DELETE /v1/functions/{name}.",
            ),
        }
    }
}

/// An upload body refused before the host sees it.
#[derive(Debug, thiserror::Error)]
enum UploadError {
    /// A JSON envelope that is not `{"code", "metadata"}`.
    #[error("The upload is not valid JSON: {0}")]
    Envelope(serde_json::Error),
    /// Its `code` is not base64.
    #[error("code: not valid base64: {0}")]
    Code(base64::DecodeError),
}

/// An upload body: the module itself (Wasm, a zip, or an artifact), or JSON
/// `{"code": BASE64, "metadata": {...}}` to send metadata with it.
fn parse_upload(body: Bytes) -> Result<(Vec<u8>, FunctionSpec), UploadError> {
    let is_json = body
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{');
    if !is_json {
        return Ok((body.to_vec(), FunctionSpec::default()));
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Envelope<'a> {
        #[serde(borrow)]
        code: std::borrow::Cow<'a, str>,
        #[serde(default)]
        metadata: FunctionSpec,
    }
    let envelope: Envelope = serde_json::from_slice(&body).map_err(UploadError::Envelope)?;
    let code = luge_registry::code::decode_base64(&envelope.code).map_err(UploadError::Code)?;
    Ok((code, envelope.metadata))
}

fn describe(function: &Function) -> serde_json::Value {
    let uploaded_at = match function.origin {
        Origin::Uploaded { uploaded_at } => Some(uploaded_at),
        _ => None,
    };
    serde_json::json!({
        "name": function.name,
        "routes": function.routes,
        "metadata": function.spec,
        "uploaded_at": uploaded_at,
        "code_bytes": function.module.code_size(),
    })
}

fn host_error(error: &HostError) -> Response {
    let status = match error {
        HostError::NotFound(_) => StatusCode::NOT_FOUND,
        HostError::RouteTaken { .. } | HostError::Shadows { .. } => StatusCode::CONFLICT,
        HostError::NoStore => StatusCode::FORBIDDEN,
        // A full disk is the operator's to fix and the client's to retry:
        // 507, not a server fault.
        HostError::Store(store) if store.is_storage_full() => StatusCode::INSUFFICIENT_STORAGE,
        HostError::Store(_) | HostError::ModuleFile { .. } | HostError::ModuleMissing { .. } => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
        // The admission pipeline's one mapping (luge_registry::admit).
        HostError::Admit(e) | HostError::Spec(SpecError::Admit(e)) => status_of(e.status()),
        HostError::Load(e) => status_of(luge_registry::admit::load_status(e)),
        HostError::InvalidName
        | HostError::Spec(_)
        | HostError::UnknownStage { .. }
        | HostError::HandlerStage { .. }
        | HostError::ModuleInMetadata => StatusCode::BAD_REQUEST,
    };
    // The whole chain: what was refused and the engine's reason.
    http::json_error(status, &luge_core::error_line(error))
}

fn status_of(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST)
}

/// The input of an invocation (a POST's body, a GET's query string) and its
/// relative deadline: `relative`, tightened by `X-Luge-Deadline-Ms`.
/// A refusal is its status and message.
fn request_input(
    input: &HttpInput,
    relative: Duration,
) -> Result<(Vec<u8>, Duration), (StatusCode, &'static str)> {
    let stdin = match input.method {
        Method::POST => input.body.to_vec(),
        Method::GET => input.query.clone().unwrap_or_default().into_bytes(),
        _ => {
            return Err((
                StatusCode::METHOD_NOT_ALLOWED,
                "Functions are invoked with POST (body as input) or GET (query as input).",
            ));
        }
    };
    Ok((stdin, relative_deadline(&input.headers, relative)?))
}

/// The CGI-like environment of an invocation: on a route, `SCRIPT_NAME`
/// is the route's base (the path itself for an exact route, `/api` for
/// `/api/...`) and `PATH_INFO` the rest of the request path (empty for an
/// exact route); a chain's stages learn their number (from 1) in
/// `LUGE_CHAIN_STAGE`.
fn request_env(
    input: &HttpInput,
    route: Option<&RouteMatch>,
    chain_stage: Option<usize>,
) -> Vec<(String, String)> {
    let mut env = vec![
        ("REQUEST_METHOD".to_owned(), input.method.to_string()),
        (
            "QUERY_STRING".to_owned(),
            input.query.clone().unwrap_or_default(),
        ),
        ("LUGE_REQUEST_ID".to_owned(), input.request_id.to_string()),
    ];
    if let Some(route) = route {
        env.push(("SCRIPT_NAME".to_owned(), route.base.to_string()));
        env.push(("PATH_INFO".to_owned(), route.path_info.clone()));
    }
    if let Some(stage) = chain_stage {
        env.push(("LUGE_CHAIN_STAGE".to_owned(), stage.to_string()));
    }
    env
}

/// 200 with `body` as `content_type`.
fn success(body: Vec<u8>, content_type: &str) -> Response {
    let mut response = hyper::Response::new(http::full(body));
    let content_type = HeaderValue::from_str(content_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, content_type);
    response
}
