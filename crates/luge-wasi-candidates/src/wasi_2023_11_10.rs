//! WASI 0.2.0-rc-2023-11-10, the release candidate of the tools of late
//! 2023 (Spin 2.1-2.2's JavaScript and Python SDKs, `wit-bindgen` 0.14-0.16,
//! `wasmtime` 15): its `wasi:http/proxy` world (`wasi:http` types, outgoing
//! and incoming handlers, and the `wasi:io`, `wasi:clocks`, `wasi:random`
//! and `wasi:cli` stdio interfaces it names), each function forwarded to
//! Wasmtime's WASI 0.2 implementation on the same resources and hooks
//! (grants, connection bounds, deadlines), as [`crate::wasi_2023_10_18`]
//! does for the candidate before it. Its filesystem and sockets are not
//! served.
//!
//! Adapted from Spin's `factor-wasi` and `factor-outbound-http`
//! (`wasi_2023_11_10.rs` in each, spinframework/spin at 94a8fc8, Apache-2.0
//! WITH LLVM-exception), with one change: a request's timeouts, which this
//! candidate gives in milliseconds, are converted to WASI 0.2's
//! nanoseconds (checked: a guest's `u64::MAX` is the longest wait, never an
//! overflow), where Spin passes the number through.

use wasmtime::component::{HasData, Linker, Resource, ResourceTable};
use wasmtime_wasi::cli::{WasiCli, WasiCliCtxView};
use wasmtime_wasi::clocks::{WasiClocks, WasiClocksCtxView};
use wasmtime_wasi::random::{WasiRandom, WasiRandomCtx};
use wasmtime_wasi_http::{WasiHttp, WasiHttpCtxView};

mod latest {
    pub use wasmtime_wasi::p2::bindings::*;
    pub use wasmtime_wasi_http::p2::bindings::http;
}

crate::shared::bindings! {
    world: "wasi:http/proxy@0.2.0-rc-2023-11-10",
    imports: {
        "wasi:io/poll.[method]pollable.block": async | trappable,
        "wasi:io/poll.[method]pollable.ready": async | trappable,
        "wasi:io/poll.poll": async | trappable,
    },
    with: {
        "wasi:io/error.error": latest::io::error::Error,
        "wasi:http/types.request-options": latest::http::types::RequestOptions,
    },
}

mod wasi {
    pub use super::bindings::wasi::{
        cli0_2_0_rc_2023_11_10 as cli, clocks0_2_0_rc_2023_11_10 as clocks,
        http0_2_0_rc_2023_11_10 as http, io0_2_0_rc_2023_11_10 as io,
        random0_2_0_rc_2023_11_10 as random,
    };
}

/// The candidate's `wasi:http/proxy` world, whose `incoming-handler` a
/// handler of it exports.
pub use bindings::{Proxy, ProxyPre};

use wasi::clocks::monotonic_clock::{Duration, Instant};
use wasi::clocks::wall_clock::Datetime;
use wasi::http::types::{
    DnsErrorPayload, ErrorCode as HttpErrorCode, FieldSizePayload, Fields, FutureIncomingResponse,
    FutureTrailers, HeaderError, Headers, IncomingBody, IncomingRequest, IncomingResponse, Method,
    OutgoingBody, OutgoingRequest, OutgoingResponse, RequestOptions, ResponseOutparam, Scheme,
    StatusCode, TlsAlertReceivedPayload, Trailers,
};
use wasi::io::poll::Pollable;
use wasi::io::streams::{Error as IoError, InputStream, OutputStream, StreamError};

/// The resource table, as the candidate's `wasi:io` sees the state.
struct HasIo;

impl HasData for HasIo {
    type Data<'a> = &'a mut ResourceTable;
}

/// Links the candidate's interfaces, each on the view of the store's
/// state Wasmtime's 0.2 implementation of it takes.
pub fn add_to_linker<T>(linker: &mut Linker<T>) -> wasmtime::Result<()>
where
    T: wasmtime_wasi::WasiView + wasmtime_wasi_http::WasiHttpView + Send + 'static,
{
    use wasmtime_wasi::{cli::WasiCliView, clocks::WasiClocksView};
    let l = linker;
    wasi::io::poll::add_to_linker::<_, HasIo>(l, |s| s.ctx().table)?;
    wasi::io::error::add_to_linker::<_, HasIo>(l, |s| s.ctx().table)?;
    wasi::io::streams::add_to_linker::<_, HasIo>(l, |s| s.ctx().table)?;
    wasi::clocks::monotonic_clock::add_to_linker::<_, WasiClocks>(l, |s| s.clocks())?;
    wasi::clocks::wall_clock::add_to_linker::<_, WasiClocks>(l, |s| s.clocks())?;
    wasi::random::random::add_to_linker::<_, WasiRandom>(l, |s| s.ctx().ctx.random())?;
    wasi::cli::stdin::add_to_linker::<_, WasiCli>(l, |s| s.cli())?;
    wasi::cli::stdout::add_to_linker::<_, WasiCli>(l, |s| s.cli())?;
    wasi::cli::stderr::add_to_linker::<_, WasiCli>(l, |s| s.cli())?;
    wasi::http::types::add_to_linker::<_, WasiHttp>(l, |s| s.http())?;
    wasi::http::outgoing_handler::add_to_linker::<_, WasiHttp>(l, |s| s.http())?;
    Ok(())
}

impl wasi::clocks::monotonic_clock::Host for WasiClocksCtxView<'_> {
    fn now(&mut self) -> wasmtime::Result<Instant> {
        latest::clocks::monotonic_clock::Host::now(self)
    }

    fn resolution(&mut self) -> wasmtime::Result<Instant> {
        latest::clocks::monotonic_clock::Host::resolution(self)
    }

    fn subscribe_instant(&mut self, when: Instant) -> wasmtime::Result<Resource<Pollable>> {
        latest::clocks::monotonic_clock::Host::subscribe_instant(self, when)
    }

    fn subscribe_duration(&mut self, when: Duration) -> wasmtime::Result<Resource<Pollable>> {
        latest::clocks::monotonic_clock::Host::subscribe_duration(self, when)
    }
}

impl wasi::io::poll::Host for ResourceTable {
    async fn poll(&mut self, list: Vec<Resource<Pollable>>) -> wasmtime::Result<Vec<u32>> {
        latest::io::poll::Host::poll(self, list).await
    }
}

impl wasi::io::poll::HostPollable for ResourceTable {
    async fn block(&mut self, rep: Resource<Pollable>) -> wasmtime::Result<()> {
        latest::io::poll::HostPollable::block(self, rep).await
    }

    async fn ready(&mut self, rep: Resource<Pollable>) -> wasmtime::Result<bool> {
        latest::io::poll::HostPollable::ready(self, rep).await
    }

    fn drop(&mut self, rep: Resource<Pollable>) -> wasmtime::Result<()> {
        latest::io::poll::HostPollable::drop(self, rep)
    }
}

impl wasi::io::error::Host for ResourceTable {}

impl wasi::io::error::HostError for ResourceTable {
    fn to_debug_string(&mut self, self_: Resource<IoError>) -> wasmtime::Result<String> {
        latest::io::error::HostError::to_debug_string(self, self_)
    }

    fn drop(&mut self, rep: Resource<IoError>) -> wasmtime::Result<()> {
        latest::io::error::HostError::drop(self, rep)
    }
}

use crate::shared::convert;

crate::shared::alike!();

crate::shared::io_streams! {}

impl wasi::http::types::Host for WasiHttpCtxView<'_> {
    fn http_error_code(
        &mut self,
        error: Resource<IoError>,
    ) -> wasmtime::Result<Option<HttpErrorCode>> {
        latest::http::types::Host::http_error_code(self, error).map(|e| e.map(|e| e.into()))
    }
}

/// The request options' timeouts, which the candidate gives in
/// milliseconds and WASI 0.2 in nanoseconds: each getter and setter pair,
/// `get_ms, set_ms = get_ns, set_ns;`, converted both ways (checked, see
/// [`crate::shared::ms_to_ns`]).
macro_rules! timeouts {
    ($($get:ident, $set:ident = $latest_get:ident, $latest_set:ident;)*) => {$(
        fn $get(&mut self, self_: Resource<RequestOptions>) -> wasmtime::Result<Option<u64>> {
            let ns = latest::http::types::HostRequestOptions::$latest_get(self, self_)?;
            Ok(ns.map(crate::shared::ns_to_ms))
        }

        fn $set(
            &mut self,
            self_: Resource<RequestOptions>,
            ms: Option<u64>,
        ) -> wasmtime::Result<Result<(), ()>> {
            let ns = ms.map(crate::shared::ms_to_ns);
            latest::http::types::HostRequestOptions::$latest_set(self, self_, ns)
        }
    )*};
}

impl wasi::http::types::HostRequestOptions for WasiHttpCtxView<'_> {
    crate::shared::forward!(HostRequestOptions, RequestOptions:
        drop() -> ();
    );

    fn new(&mut self) -> wasmtime::Result<Resource<RequestOptions>> {
        latest::http::types::HostRequestOptions::new(self)
    }

    timeouts! {
        connect_timeout_ms, set_connect_timeout_ms = connect_timeout, set_connect_timeout;
        first_byte_timeout_ms, set_first_byte_timeout_ms = first_byte_timeout, set_first_byte_timeout;
        between_bytes_timeout_ms, set_between_bytes_timeout_ms =
            between_bytes_timeout, set_between_bytes_timeout;
    }
}

impl wasi::http::types::HostFields for WasiHttpCtxView<'_> {
    crate::shared::forward!(HostFields, Fields:
        get(name: String) -> Vec<Vec<u8>>;
        entries() -> Vec<(String, Vec<u8>)>;
        clone() -> Resource<Fields>;
        drop() -> ();
    );

    fn new(&mut self) -> wasmtime::Result<Resource<Fields>> {
        latest::http::types::HostFields::new(self)
    }

    fn from_list(
        &mut self,
        entries: Vec<(String, Vec<u8>)>,
    ) -> wasmtime::Result<Result<Resource<Fields>, HeaderError>> {
        match latest::http::types::HostFields::from_list(self, entries) {
            Ok(r) => Ok(Ok(r)),
            Err(e) => Ok(Err(e.try_into()?)),
        }
    }

    fn set(
        &mut self,
        self_: Resource<Fields>,
        name: String,
        value: Vec<Vec<u8>>,
    ) -> wasmtime::Result<Result<(), HeaderError>> {
        match latest::http::types::HostFields::set(self, self_, name, value) {
            Ok(r) => Ok(Ok(r)),
            Err(e) => Ok(Err(e.try_into()?)),
        }
    }

    fn delete(
        &mut self,
        self_: Resource<Fields>,
        name: String,
    ) -> wasmtime::Result<Result<(), HeaderError>> {
        match latest::http::types::HostFields::delete(self, self_, name) {
            Ok(r) => Ok(Ok(r)),
            Err(e) => Ok(Err(e.try_into()?)),
        }
    }

    fn append(
        &mut self,
        self_: Resource<Fields>,
        name: String,
        value: Vec<u8>,
    ) -> wasmtime::Result<Result<(), HeaderError>> {
        match latest::http::types::HostFields::append(self, self_, name, value) {
            Ok(r) => Ok(Ok(r)),
            Err(e) => Ok(Err(e.try_into()?)),
        }
    }
}

impl wasi::http::types::HostOutgoingRequest for WasiHttpCtxView<'_> {
    crate::shared::forward!(HostOutgoingRequest, OutgoingRequest:
        path_with_query() -> Option<String>;
        set_path_with_query(path_with_query: Option<String>) -> Result<(), ()>;
        authority() -> Option<String>;
        set_authority(authority: Option<String>) -> Result<(), ()>;
        headers() -> Resource<Headers>;
        body() -> Result<Resource<OutgoingBody>, ()>;
        drop() -> ();
    );

    fn new(&mut self, headers: Resource<Headers>) -> wasmtime::Result<Resource<OutgoingRequest>> {
        latest::http::types::HostOutgoingRequest::new(self, headers)
    }

    fn method(&mut self, self_: Resource<OutgoingRequest>) -> wasmtime::Result<Method> {
        latest::http::types::HostOutgoingRequest::method(self, self_).map(|m| m.into())
    }

    fn set_method(
        &mut self,
        self_: Resource<OutgoingRequest>,
        method: Method,
    ) -> wasmtime::Result<Result<(), ()>> {
        latest::http::types::HostOutgoingRequest::set_method(self, self_, method.into())
    }

    fn scheme(&mut self, self_: Resource<OutgoingRequest>) -> wasmtime::Result<Option<Scheme>> {
        latest::http::types::HostOutgoingRequest::scheme(self, self_).map(|s| s.map(|s| s.into()))
    }

    fn set_scheme(
        &mut self,
        self_: Resource<OutgoingRequest>,
        scheme: Option<Scheme>,
    ) -> wasmtime::Result<Result<(), ()>> {
        latest::http::types::HostOutgoingRequest::set_scheme(self, self_, scheme.map(|s| s.into()))
    }
}

impl wasi::http::types::HostOutgoingResponse for WasiHttpCtxView<'_> {
    crate::shared::forward!(HostOutgoingResponse, OutgoingResponse:
        status_code() -> StatusCode;
        set_status_code(status_code: StatusCode) -> Result<(), ()>;
        headers() -> Resource<Headers>;
        body() -> Result<Resource<OutgoingBody>, ()>;
        drop() -> ();
    );

    fn new(&mut self, headers: Resource<Headers>) -> wasmtime::Result<Resource<OutgoingResponse>> {
        let headers = latest::http::types::HostFields::clone(self, headers)?;
        latest::http::types::HostOutgoingResponse::new(self, headers)
    }
}

impl wasi::http::types::HostOutgoingBody for WasiHttpCtxView<'_> {
    crate::shared::forward!(HostOutgoingBody, OutgoingBody:
        write() -> Result<Resource<OutputStream>, ()>;
        drop() -> ();
    );

    fn finish(
        &mut self,
        this: Resource<OutgoingBody>,
        trailers: Option<Resource<Trailers>>,
    ) -> wasmtime::Result<Result<(), HttpErrorCode>> {
        match latest::http::types::HostOutgoingBody::finish(self, this, trailers) {
            Ok(()) => Ok(Ok(())),
            Err(e) => Ok(Err(e.downcast()?.into())),
        }
    }
}

impl wasi::http::types::HostResponseOutparam for WasiHttpCtxView<'_> {
    crate::shared::forward!(HostResponseOutparam, ResponseOutparam:
        drop() -> ();
    );

    fn set(
        &mut self,
        param: Resource<ResponseOutparam>,
        response: Result<Resource<OutgoingResponse>, HttpErrorCode>,
    ) -> wasmtime::Result<()> {
        latest::http::types::HostResponseOutparam::set(self, param, response.map_err(|e| e.into()))
    }
}

impl wasi::http::types::HostFutureTrailers for WasiHttpCtxView<'_> {
    crate::shared::forward!(HostFutureTrailers, FutureTrailers:
        subscribe() -> Resource<Pollable>;
        drop() -> ();
    );

    fn get(
        &mut self,
        self_: Resource<FutureTrailers>,
    ) -> wasmtime::Result<Option<Result<Option<Resource<Trailers>>, HttpErrorCode>>> {
        match latest::http::types::HostFutureTrailers::get(self, self_)? {
            Some(Ok(Ok(trailers))) => Ok(Some(Ok(trailers))),
            Some(Ok(Err(e))) => Ok(Some(Err(e.into()))),
            Some(Err(())) => wasmtime::bail!("trailers have already been retrieved"),
            None => Ok(None),
        }
    }
}

impl wasi::http::types::HostFutureIncomingResponse for WasiHttpCtxView<'_> {
    crate::shared::forward!(HostFutureIncomingResponse, FutureIncomingResponse:
        subscribe() -> Resource<Pollable>;
        drop() -> ();
    );

    fn get(
        &mut self,
        self_: Resource<FutureIncomingResponse>,
    ) -> wasmtime::Result<Option<Result<Result<Resource<IncomingResponse>, HttpErrorCode>, ()>>>
    {
        match latest::http::types::HostFutureIncomingResponse::get(self, self_)? {
            None => Ok(None),
            Some(Ok(Ok(response))) => Ok(Some(Ok(Ok(response)))),
            Some(Ok(Err(e))) => Ok(Some(Ok(Err(e.into())))),
            Some(Err(())) => Ok(Some(Err(()))),
        }
    }
}

impl wasi::http::outgoing_handler::Host for WasiHttpCtxView<'_> {
    fn handle(
        &mut self,
        request: Resource<OutgoingRequest>,
        options: Option<Resource<RequestOptions>>,
    ) -> wasmtime::Result<Result<Resource<FutureIncomingResponse>, HttpErrorCode>> {
        match latest::http::outgoing_handler::Host::handle(self, request, options) {
            Ok(resp) => Ok(Ok(resp)),
            Err(e) => Ok(Err(e.downcast()?.into())),
        }
    }
}

convert! {
    enum latest::http::types::Method [<=>] Method {
        Get,
        Head,
        Post,
        Put,
        Delete,
        Connect,
        Options,
        Trace,
        Patch,
        Other(e),
    }

    enum latest::http::types::Scheme [<=>] Scheme {
        Http,
        Https,
        Other(e),
    }

    enum latest::http::types::HeaderError => HeaderError {
        InvalidSyntax,
        Forbidden,
        Immutable,
    }

    struct latest::http::types::DnsErrorPayload [<=>] DnsErrorPayload {
        rcode,
        info_code,
    }

    struct latest::http::types::TlsAlertReceivedPayload [<=>] TlsAlertReceivedPayload {
        alert_id,
        alert_message,
    }

    struct latest::http::types::FieldSizePayload [<=>] FieldSizePayload {
        field_name,
        field_size,
    }
}

impl From<latest::http::types::ErrorCode> for HttpErrorCode {
    fn from(e: latest::http::types::ErrorCode) -> Self {
        match e {
            latest::http::types::ErrorCode::DnsTimeout => HttpErrorCode::DnsTimeout,
            latest::http::types::ErrorCode::DnsError(e) => HttpErrorCode::DnsError(e.into()),
            latest::http::types::ErrorCode::DestinationNotFound => {
                HttpErrorCode::DestinationNotFound
            }
            latest::http::types::ErrorCode::DestinationUnavailable => {
                HttpErrorCode::DestinationUnavailable
            }
            latest::http::types::ErrorCode::DestinationIpProhibited => {
                HttpErrorCode::DestinationIpProhibited
            }
            latest::http::types::ErrorCode::DestinationIpUnroutable => {
                HttpErrorCode::DestinationIpUnroutable
            }
            latest::http::types::ErrorCode::ConnectionRefused => HttpErrorCode::ConnectionRefused,
            latest::http::types::ErrorCode::ConnectionTerminated => {
                HttpErrorCode::ConnectionTerminated
            }
            latest::http::types::ErrorCode::ConnectionTimeout => HttpErrorCode::ConnectionTimeout,
            latest::http::types::ErrorCode::ConnectionReadTimeout => {
                HttpErrorCode::ConnectionReadTimeout
            }
            latest::http::types::ErrorCode::ConnectionWriteTimeout => {
                HttpErrorCode::ConnectionWriteTimeout
            }
            latest::http::types::ErrorCode::ConnectionLimitReached => {
                HttpErrorCode::ConnectionLimitReached
            }
            latest::http::types::ErrorCode::TlsProtocolError => HttpErrorCode::TlsProtocolError,
            latest::http::types::ErrorCode::TlsCertificateError => {
                HttpErrorCode::TlsCertificateError
            }
            latest::http::types::ErrorCode::TlsAlertReceived(e) => {
                HttpErrorCode::TlsAlertReceived(e.into())
            }
            latest::http::types::ErrorCode::HttpRequestDenied => HttpErrorCode::HttpRequestDenied,
            latest::http::types::ErrorCode::HttpRequestLengthRequired => {
                HttpErrorCode::HttpRequestLengthRequired
            }
            latest::http::types::ErrorCode::HttpRequestBodySize(e) => {
                HttpErrorCode::HttpRequestBodySize(e)
            }
            latest::http::types::ErrorCode::HttpRequestMethodInvalid => {
                HttpErrorCode::HttpRequestMethodInvalid
            }
            latest::http::types::ErrorCode::HttpRequestUriInvalid => {
                HttpErrorCode::HttpRequestUriInvalid
            }
            latest::http::types::ErrorCode::HttpRequestUriTooLong => {
                HttpErrorCode::HttpRequestUriTooLong
            }
            latest::http::types::ErrorCode::HttpRequestHeaderSectionSize(e) => {
                HttpErrorCode::HttpRequestHeaderSectionSize(e)
            }
            latest::http::types::ErrorCode::HttpRequestHeaderSize(e) => {
                HttpErrorCode::HttpRequestHeaderSize(e.map(|e| e.into()))
            }
            latest::http::types::ErrorCode::HttpRequestTrailerSectionSize(e) => {
                HttpErrorCode::HttpRequestTrailerSectionSize(e)
            }
            latest::http::types::ErrorCode::HttpRequestTrailerSize(e) => {
                HttpErrorCode::HttpRequestTrailerSize(e.into())
            }
            latest::http::types::ErrorCode::HttpResponseIncomplete => {
                HttpErrorCode::HttpResponseIncomplete
            }
            latest::http::types::ErrorCode::HttpResponseHeaderSectionSize(e) => {
                HttpErrorCode::HttpResponseHeaderSectionSize(e)
            }
            latest::http::types::ErrorCode::HttpResponseHeaderSize(e) => {
                HttpErrorCode::HttpResponseHeaderSize(e.into())
            }
            latest::http::types::ErrorCode::HttpResponseBodySize(e) => {
                HttpErrorCode::HttpResponseBodySize(e)
            }
            latest::http::types::ErrorCode::HttpResponseTrailerSectionSize(e) => {
                HttpErrorCode::HttpResponseTrailerSectionSize(e)
            }
            latest::http::types::ErrorCode::HttpResponseTrailerSize(e) => {
                HttpErrorCode::HttpResponseTrailerSize(e.into())
            }
            latest::http::types::ErrorCode::HttpResponseTransferCoding(e) => {
                HttpErrorCode::HttpResponseTransferCoding(e)
            }
            latest::http::types::ErrorCode::HttpResponseContentCoding(e) => {
                HttpErrorCode::HttpResponseContentCoding(e)
            }
            latest::http::types::ErrorCode::HttpResponseTimeout => {
                HttpErrorCode::HttpResponseTimeout
            }
            latest::http::types::ErrorCode::HttpUpgradeFailed => HttpErrorCode::HttpUpgradeFailed,
            latest::http::types::ErrorCode::HttpProtocolError => HttpErrorCode::HttpProtocolError,
            latest::http::types::ErrorCode::LoopDetected => HttpErrorCode::LoopDetected,
            latest::http::types::ErrorCode::ConfigurationError => HttpErrorCode::ConfigurationError,
            latest::http::types::ErrorCode::InternalError(e) => HttpErrorCode::InternalError(e),
        }
    }
}

impl From<HttpErrorCode> for latest::http::types::ErrorCode {
    fn from(e: HttpErrorCode) -> Self {
        match e {
            HttpErrorCode::DnsTimeout => latest::http::types::ErrorCode::DnsTimeout,
            HttpErrorCode::DnsError(e) => latest::http::types::ErrorCode::DnsError(e.into()),
            HttpErrorCode::DestinationNotFound => {
                latest::http::types::ErrorCode::DestinationNotFound
            }
            HttpErrorCode::DestinationUnavailable => {
                latest::http::types::ErrorCode::DestinationUnavailable
            }
            HttpErrorCode::DestinationIpProhibited => {
                latest::http::types::ErrorCode::DestinationIpProhibited
            }
            HttpErrorCode::DestinationIpUnroutable => {
                latest::http::types::ErrorCode::DestinationIpUnroutable
            }
            HttpErrorCode::ConnectionRefused => latest::http::types::ErrorCode::ConnectionRefused,
            HttpErrorCode::ConnectionTerminated => {
                latest::http::types::ErrorCode::ConnectionTerminated
            }
            HttpErrorCode::ConnectionTimeout => latest::http::types::ErrorCode::ConnectionTimeout,
            HttpErrorCode::ConnectionReadTimeout => {
                latest::http::types::ErrorCode::ConnectionReadTimeout
            }
            HttpErrorCode::ConnectionWriteTimeout => {
                latest::http::types::ErrorCode::ConnectionWriteTimeout
            }
            HttpErrorCode::ConnectionLimitReached => {
                latest::http::types::ErrorCode::ConnectionLimitReached
            }
            HttpErrorCode::TlsProtocolError => latest::http::types::ErrorCode::TlsProtocolError,
            HttpErrorCode::TlsCertificateError => {
                latest::http::types::ErrorCode::TlsCertificateError
            }
            HttpErrorCode::TlsAlertReceived(e) => {
                latest::http::types::ErrorCode::TlsAlertReceived(e.into())
            }
            HttpErrorCode::HttpRequestDenied => latest::http::types::ErrorCode::HttpRequestDenied,
            HttpErrorCode::HttpRequestLengthRequired => {
                latest::http::types::ErrorCode::HttpRequestLengthRequired
            }
            HttpErrorCode::HttpRequestBodySize(e) => {
                latest::http::types::ErrorCode::HttpRequestBodySize(e)
            }
            HttpErrorCode::HttpRequestMethodInvalid => {
                latest::http::types::ErrorCode::HttpRequestMethodInvalid
            }
            HttpErrorCode::HttpRequestUriInvalid => {
                latest::http::types::ErrorCode::HttpRequestUriInvalid
            }
            HttpErrorCode::HttpRequestUriTooLong => {
                latest::http::types::ErrorCode::HttpRequestUriTooLong
            }
            HttpErrorCode::HttpRequestHeaderSectionSize(e) => {
                latest::http::types::ErrorCode::HttpRequestHeaderSectionSize(e)
            }
            HttpErrorCode::HttpRequestHeaderSize(e) => {
                latest::http::types::ErrorCode::HttpRequestHeaderSize(e.map(|e| e.into()))
            }
            HttpErrorCode::HttpRequestTrailerSectionSize(e) => {
                latest::http::types::ErrorCode::HttpRequestTrailerSectionSize(e)
            }
            HttpErrorCode::HttpRequestTrailerSize(e) => {
                latest::http::types::ErrorCode::HttpRequestTrailerSize(e.into())
            }
            HttpErrorCode::HttpResponseIncomplete => {
                latest::http::types::ErrorCode::HttpResponseIncomplete
            }
            HttpErrorCode::HttpResponseHeaderSectionSize(e) => {
                latest::http::types::ErrorCode::HttpResponseHeaderSectionSize(e)
            }
            HttpErrorCode::HttpResponseHeaderSize(e) => {
                latest::http::types::ErrorCode::HttpResponseHeaderSize(e.into())
            }
            HttpErrorCode::HttpResponseBodySize(e) => {
                latest::http::types::ErrorCode::HttpResponseBodySize(e)
            }
            HttpErrorCode::HttpResponseTrailerSectionSize(e) => {
                latest::http::types::ErrorCode::HttpResponseTrailerSectionSize(e)
            }
            HttpErrorCode::HttpResponseTrailerSize(e) => {
                latest::http::types::ErrorCode::HttpResponseTrailerSize(e.into())
            }
            HttpErrorCode::HttpResponseTransferCoding(e) => {
                latest::http::types::ErrorCode::HttpResponseTransferCoding(e)
            }
            HttpErrorCode::HttpResponseContentCoding(e) => {
                latest::http::types::ErrorCode::HttpResponseContentCoding(e)
            }
            HttpErrorCode::HttpResponseTimeout => {
                latest::http::types::ErrorCode::HttpResponseTimeout
            }
            HttpErrorCode::HttpUpgradeFailed => latest::http::types::ErrorCode::HttpUpgradeFailed,
            HttpErrorCode::HttpProtocolError => latest::http::types::ErrorCode::HttpProtocolError,
            HttpErrorCode::LoopDetected => latest::http::types::ErrorCode::LoopDetected,
            HttpErrorCode::ConfigurationError => latest::http::types::ErrorCode::ConfigurationError,
            HttpErrorCode::InternalError(e) => latest::http::types::ErrorCode::InternalError(e),
        }
    }
}

impl TryFrom<wasmtime_wasi_http::p2::HeaderError> for wasi::http::types::HeaderError {
    type Error = wasmtime::Error;
    fn try_from(value: wasmtime_wasi_http::p2::HeaderError) -> Result<Self, Self::Error> {
        let value = value.downcast()?;
        Ok(match value {
            latest::http::types::HeaderError::InvalidSyntax => Self::InvalidSyntax,
            latest::http::types::HeaderError::Forbidden => Self::Forbidden,
            latest::http::types::HeaderError::Immutable => Self::Immutable,
        })
    }
}
