//! The `component` feature: outgoing HTTP for components
//! (`wasi:http/outgoing-handler`, WASI 0.2 and 0.3 and the release
//! candidates, all through Wasmtime's `WasiHttpHooks`). A request goes
//! out only where the function's `allowed_outbound_hosts` grant it
//! ([`crate::send`]: the one check every outgoing connection passes),
//! within the invocation's time and [`MAX_OUTGOING_REQUESTS`]; a request to
//! `http://NAME.luge.internal` is a call to the function NAME of this host
//! (service chaining, [`luge_core::calls`]); each is a client span of the
//! invocation's trace. Linked by `luge-wasmtime`, whose component state
//! holds the invocation's [`Hooks`].

use std::sync::Arc;
use std::time::Instant;

use wasmtime_wasi_http::WasiHttpHooks;

/// How a component's outgoing HTTP requests are sent: where its
/// `allowed_outbound_hosts` grant (http or https; see [`crate::send`]),
/// each bounded by the invocation's remaining time. Everything else is
/// `HTTP-request-denied` to the guest.
pub struct Hooks {
    /// The function: its grants (`allowed_outbound_hosts`), its name (as
    /// Spin's `[[client_tls]]` names components), and its address, whose
    /// kept-alive connections are its own while it is loaded.
    action: Arc<luge_core::Action>,
    deadline: Instant,
    /// Outgoing requests sent so far by this invocation.
    sent: usize,
    /// Where a request to `http://NAME.luge.internal` goes: the host's
    /// calls (service chaining); `None` where the host offers none.
    calls: Option<Arc<dyn luge_core::calls::Calls>>,
    /// The invocation's trace: each request is a client span in it, and
    /// carries its context (W3C `traceparent`, replacing the guest's).
    trace: Option<Arc<dyn luge_core::trace::Trace>>,
}

impl Hooks {
    /// The hooks of one invocation of `action`, its requests bounded by
    /// `deadline`, its chained requests through `calls`, each a client
    /// span in `trace`.
    pub fn new(
        action: Arc<luge_core::Action>,
        deadline: Instant,
        calls: Option<Arc<dyn luge_core::calls::Calls>>,
        trace: Option<Arc<dyn luge_core::trace::Trace>>,
    ) -> Self {
        Self {
            action,
            deadline,
            sent: 0,
            calls,
            trace,
        }
    }

    /// A reused instance's hooks as a new request enters it: that
    /// request's calls, and the latest time limit of the requests in the
    /// instance; when it is the only one (`alone`), the count of requests
    /// sent starts again, so that one after another, each request is
    /// bounded as in a fresh instance.
    pub fn enter(
        &mut self,
        deadline: Instant,
        calls: Option<Arc<dyn luge_core::calls::Calls>>,
        alone: bool,
    ) {
        if alone {
            self.sent = 0;
            self.deadline = deadline;
        } else {
            self.deadline = self.deadline.max(deadline);
        }
        self.calls = calls;
    }

    /// When the invocation's time is up.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The invocation's trace, if it is recorded.
    pub fn trace(&self) -> Option<&Arc<dyn luge_core::trace::Trace>> {
        self.trace.as_ref()
    }
}

/// Outgoing requests one invocation may send: each holds a connection (a
/// descriptor) until its response is read or the invocation ends, so a
/// granted handler in a loop could otherwise exhaust the host's
/// descriptors within its time limit. Past it: `connection-limit-reached`.
pub const MAX_OUTGOING_REQUESTS: usize = 64;

/// What a guest's outgoing request returns, per `WasiHttpHooks`.
type Sent = wasmtime_wasi_http::Result<(
    http::Response<wasmtime_wasi_http::WasiBody>,
    Box<dyn std::future::Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
)>;

impl WasiHttpHooks for Hooks {
    /// Wasmtime's own forbidden headers (`DEFAULT_FORBIDDEN_HEADERS`, what
    /// its `forbidden_header_filter` holds, which stays as it is for WASI
    /// 0.3), checked without the default's boxed filter: that is made anew
    /// for each header the guest sees or sets, an allocation each.
    fn is_forbidden_header(&mut self, name: &http::HeaderName) -> bool {
        forbidden_header(name)
    }

    fn send_request(
        &mut self,
        request: http::Request<wasmtime_wasi_http::WasiBody>,
        options: Option<wasmtime_wasi_http::RequestOptions>,
        fut: Box<dyn std::future::Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
    ) -> Box<dyn std::future::Future<Output = Sent> + Send> {
        drop(fut);
        // Service chaining: the URI's own host names the function (never a
        // header); a chained request is a call, and counts as a request.
        let chained = request
            .uri()
            .authority()
            .filter(|_| request.uri().scheme_str() == Some("http"))
            .filter(|a| a.port_u16().is_none_or(|port| port == 80))
            .and_then(|a| luge_core::capabilities::chained_function(a.host()));
        if let Some(name) = chained {
            if self.sent >= MAX_OUTGOING_REQUESTS {
                return Box::new(std::future::ready(Err(
                    wasmtime_wasi_http::Error::ConnectionLimitReached,
                )));
            }
            self.sent += 1;
            return Box::new(chain(self.calls.clone(), name, request));
        }
        if self.sent >= MAX_OUTGOING_REQUESTS {
            return Box::new(std::future::ready(Err(
                wasmtime_wasi_http::Error::ConnectionLimitReached,
            )));
        }
        self.sent += 1;
        let bounds = crate::Bounds {
            deadline: self.deadline,
            connect: options.and_then(|o| o.connect_timeout),
            first_byte: options.and_then(|o| o.first_byte_timeout),
        };
        let mut request = request;
        let span = client_span(self.trace.as_ref(), &mut request);
        let sent = send(Arc::clone(&self.action), request, bounds);
        Box::new(async move {
            let mut span = span;
            let sent = sent.await;
            if let Some(span) = span.as_mut() {
                match &sent {
                    Ok((response, _)) => {
                        let status = i64::from(response.status().as_u16());
                        span.set("http.response.status_code", status);
                        if status >= 500 {
                            span.fail(format!("status {status}"));
                        }
                    }
                    Err(e) => span.fail(e),
                }
            }
            sent
        })
    }
}

/// Whether a guest may neither see nor set the header `name`: Wasmtime's
/// defaults (hop-by-hop headers, `host`, `http2-settings`...).
fn forbidden_header(name: &http::HeaderName) -> bool {
    wasmtime_wasi_http::DEFAULT_FORBIDDEN_HEADERS.contains(name)
}

/// The client span of an outgoing request in `trace` (OpenTelemetry's
/// HTTP client span: named by its method, the server's address and port,
/// not the URL, whose query may hold a secret), its context set on the
/// request in place of any the guest set.
pub fn client_span<B>(
    trace: Option<&Arc<dyn luge_core::trace::Trace>>,
    request: &mut http::Request<B>,
) -> Option<luge_core::trace::HostSpan> {
    use luge_core::trace::{HostCall, HostSpan, TRACEPARENT, TRACESTATE};
    let mut span = HostSpan::start(trace, HostCall::Http, request.method().as_str().to_owned())?;
    let headers = request.headers_mut();
    headers.remove(TRACESTATE);
    if let Ok(value) = http::HeaderValue::from_str(&span.traceparent()) {
        headers.insert(TRACEPARENT, value);
    }
    if let Some(state) = span
        .tracestate()
        .and_then(|s| http::HeaderValue::from_str(s).ok())
    {
        headers.insert(TRACESTATE, state);
    }
    span.set("http.request.method", request.method().as_str().to_owned());
    if let Some(scheme) = request.uri().scheme_str() {
        span.set("url.scheme", scheme.to_owned());
    }
    if let Some(authority) = request.uri().authority() {
        span.set("server.address", authority.host().to_owned());
        if let Some(port) = authority.port_u16() {
            span.set("server.port", i64::from(port));
        }
    }
    Some(span)
}

/// Sends `request` to the function `name` of this host through `calls`
/// (granted there: the caller's `calls` or its internal origin in
/// `allowed_outbound_hosts`); the callee sees the path and a Host header
/// of the internal name.
async fn chain(
    calls: Option<Arc<dyn luge_core::calls::Calls>>,
    name: String,
    request: http::Request<wasmtime_wasi_http::WasiBody>,
) -> Sent {
    use luge_core::calls::CallError;
    use wasmtime_wasi_http::Error;
    let Some(calls) = calls else {
        return Err(Error::HttpRequestDenied);
    };
    let (mut parts, body) = request.into_parts();
    if let Some(host) = parts
        .uri
        .authority()
        .and_then(|a| http::HeaderValue::from_str(a.as_str()).ok())
    {
        parts.headers.insert(http::header::HOST, host);
    }
    parts.uri = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .parse()
        .map_err(|_| Error::HttpRequestUriInvalid)?;
    let body = http_body_util::BodyExt::boxed_unsync(http_body_util::BodyExt::map_err(body, |e| {
        Box::new(e) as luge_core::handler::BodyError
    }));
    let pending = match calls.start_http(&name, http::Request::from_parts(parts, body)) {
        Ok(pending) => pending,
        Err(CallError::NotGranted | CallError::NotFound) => {
            tracing::debug!(%name, "chained request to a function not granted (or none): denied");
            return Err(Error::HttpRequestDenied);
        }
        Err(CallError::Busy) => return Err(Error::ConnectionLimitReached),
        Err(e) => return Err(Error::InternalError(Some(e.to_string()))),
    };
    let response = pending
        .await
        .map_err(|e| Error::InternalError(Some(e.to_string())))?;
    let response = response.map(|body| {
        http_body_util::BodyExt::boxed_unsync(http_body_util::BodyExt::map_err(body, |e| {
            Error::InternalError(Some(e.to_string()))
        }))
    });
    Ok((
        response,
        Box::new(std::future::ready(Ok(()))) as Box<dyn std::future::Future<Output = _> + Send>,
    ))
}

/// Kept-alive outgoing connections of every component of this process,
/// per function and origin (bounded: `crate::Pool`).
static OUTGOING: std::sync::LazyLock<crate::Pool<wasmtime_wasi_http::WasiBody>> =
    std::sync::LazyLock::new(crate::Pool::default);

/// Sends `request` where `action` grants it, within `bounds`; a refusal
/// or failure as the wasi:http error code that names it.
async fn send(
    action: Arc<luge_core::Action>,
    request: http::Request<wasmtime_wasi_http::WasiBody>,
    bounds: crate::Bounds,
) -> Sent {
    use crate::SendError as E;
    use wasmtime_wasi_http::Error;
    let uri = request.uri().clone();
    let response = crate::send(
        &OUTGOING,
        Arc::as_ptr(&action) as usize,
        &action.name,
        &action.capabilities.outbound,
        request,
        bounds,
    )
    .await
    .map_err(|e| {
        tracing::debug!(%uri, error = %e, "outgoing HTTP request failed");
        match e {
            E::Denied(_) | E::AddressProhibited(_) => Error::HttpRequestDenied,
            E::NotFound(_) | E::Dns { .. } => Error::DnsError {
                rcode: None,
                info_code: None,
            },
            E::DnsTimeout => Error::DnsTimeout,
            E::ConnectTimeout => Error::ConnectionTimeout,
            E::ConnectionRefused => Error::ConnectionRefused,
            E::Connect(e) => Error::Connect(e),
            E::TlsCertificate(_) => Error::TlsCertificateError,
            E::ServerName(_) | E::Tls(_) | E::TlsTimeout | E::TlsSetup(_) => {
                Error::TlsProtocolError
            }
            E::ResponseTimeout => Error::ConnectionReadTimeout,
            E::ConnectionLimit => Error::ConnectionLimitReached,
            E::Http(e) => Error::Hyper(e),
            E::Uri => Error::HttpRequestUriInvalid,
        }
    })?;
    let response = response.map(|body| {
        http_body_util::BodyExt::boxed_unsync(http_body_util::BodyExt::map_err(body, Error::Hyper))
    });
    Ok((
        response,
        Box::new(std::future::ready(Ok(()))) as Box<dyn std::future::Future<Output = _> + Send>,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hooks' header check forbids exactly what Wasmtime's default
    /// filter does (which WASI 0.3's fields still use), for its forbidden
    /// headers and for ordinary ones.
    #[test]
    fn forbidden_headers_are_wasmtimes_defaults() {
        struct Defaults;
        impl WasiHttpHooks for Defaults {
            fn send_request(
                &mut self,
                _: http::Request<wasmtime_wasi_http::WasiBody>,
                _: Option<wasmtime_wasi_http::RequestOptions>,
                _: Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
            ) -> Box<dyn Future<Output = Sent> + Send> {
                unreachable!("the test sends nothing")
            }
        }
        let filter = Defaults.forbidden_header_filter();
        let ordinary = ["content-type", "x-luge", "authorization", "spin-full-url"]
            .map(http::HeaderName::from_static);
        let headers = wasmtime_wasi_http::DEFAULT_FORBIDDEN_HEADERS;
        assert!(headers.iter().all(forbidden_header));
        assert!(!ordinary.iter().any(forbidden_header));
        for name in headers.iter().chain(&ordinary) {
            assert_eq!(forbidden_header(name), filter(name), "{name}");
        }
    }
}
