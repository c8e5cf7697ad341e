//! WASI 0.2.0-rc-2023-10-18, the release candidate `spin-sdk` 2 built
//! against (Spin 2.0-2.2, `wit-bindgen` 0.13): its `wasi:http/proxy` world
//! (`wasi:http` types, outgoing and incoming handlers, and the `wasi:io`,
//! `wasi:clocks`, `wasi:random` and `wasi:cli` stdio interfaces it names),
//! each function forwarded to Wasmtime's WASI 0.2 implementation on the
//! same resources, so that a spin-sdk 2 app runs unchanged, on the same
//! hooks (grants, connection bounds, deadlines) as a 0.2 component. Its
//! `wasi:clocks/timezone` (which Wasmtime never implemented) is not
//! served, nor its filesystem and sockets, which spin-sdk 2 does not
//! import (std goes through WASI preview 1, served by the adapter).
//!
//! Adapted from Spin's `factor-wasi` and `factor-outbound-http`
//! (`wasi_2023_10_18.rs` in each, spinframework/spin at 94a8fc8, Apache-2.0
//! WITH LLVM-exception), which serve the same candidate the same way; two
//! changes: a request's options are set on the options, where Spin's set
//! them on the request, and its timeouts, given in milliseconds, are
//! converted to 0.2's nanoseconds, where Spin's passes the number through.

use wasmtime::component::{HasData, Linker, Resource, ResourceTable};
use wasmtime_wasi::cli::{WasiCli, WasiCliCtxView};
use wasmtime_wasi::clocks::{WasiClocks, WasiClocksCtxView};
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::random::{WasiRandom, WasiRandomCtx};
use wasmtime_wasi_http::{WasiHttp, WasiHttpCtxView};

mod latest {
    pub use wasmtime_wasi::p2::bindings::*;
    pub use wasmtime_wasi_http::p2::bindings::http;
}

crate::shared::bindings! {
    world: "wasi:http/proxy@0.2.0-rc-2023-10-18",
    imports: {
        "wasi:io/streams.[method]output-stream.forward": async | trappable,
        "wasi:io/poll.poll-list": async | trappable,
        "wasi:io/poll.poll-one": async | trappable,
    },
    with: {
        "wasi:io/streams.error": latest::io::streams::Error,
    },
}

mod wasi {
    pub use super::bindings::wasi::{
        cli0_2_0_rc_2023_10_18 as cli, clocks0_2_0_rc_2023_10_18 as clocks,
        http0_2_0_rc_2023_10_18 as http, io0_2_0_rc_2023_10_18 as io,
        random0_2_0_rc_2023_10_18 as random,
    };
}

/// The candidate's `wasi:http/proxy` world, whose `incoming-handler` a
/// spin-sdk 2 handler exports.
pub use bindings::{Proxy, ProxyPre};

use wasi::clocks::monotonic_clock::Instant;
use wasi::clocks::wall_clock::Datetime;
use wasi::http::types::{
    Error as HttpError, Fields, FutureIncomingResponse, FutureTrailers, Headers, IncomingBody,
    IncomingRequest, IncomingResponse, Method, OutgoingBody, OutgoingRequest, OutgoingResponse,
    RequestOptions, ResponseOutparam, Scheme, StatusCode, Trailers,
};
use wasi::io::poll::Pollable;
use wasi::io::streams::{Error, InputStream, OutputStream, StreamError};

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

    fn subscribe(
        &mut self,
        when: Instant,
        absolute: bool,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        if absolute {
            latest::clocks::monotonic_clock::Host::subscribe_instant(self, when)
        } else {
            latest::clocks::monotonic_clock::Host::subscribe_duration(self, when)
        }
    }
}

impl wasi::io::poll::Host for ResourceTable {
    async fn poll_list(&mut self, list: Vec<Resource<DynPollable>>) -> wasmtime::Result<Vec<u32>> {
        latest::io::poll::Host::poll(self, list).await
    }

    async fn poll_one(&mut self, rep: Resource<DynPollable>) -> wasmtime::Result<()> {
        latest::io::poll::HostPollable::block(self, rep).await
    }
}

impl wasi::io::poll::HostPollable for ResourceTable {
    fn drop(&mut self, rep: Resource<DynPollable>) -> wasmtime::Result<()> {
        latest::io::poll::HostPollable::drop(self, rep)
    }
}

use crate::shared::convert;

crate::shared::alike!();

crate::shared::io_streams! {
        async fn forward(
            &mut self,
            _self_: Resource<OutputStream>,
            _src: Resource<InputStream>,
        ) -> wasmtime::Result<Result<u64, StreamError>> {
            wasmtime::bail!("forward API no longer supported")
        }
}

impl wasi::io::streams::HostError for ResourceTable {
    fn to_debug_string(&mut self, self_: Resource<Error>) -> wasmtime::Result<String> {
        latest::io::error::HostError::to_debug_string(self, self_)
    }

    fn drop(&mut self, rep: Resource<Error>) -> wasmtime::Result<()> {
        latest::io::error::HostError::drop(self, rep)
    }
}

impl wasi::http::types::Host for WasiHttpCtxView<'_> {}

impl wasi::http::types::HostFields for WasiHttpCtxView<'_> {
    crate::shared::forward!(HostFields, Fields:
        get(name: String) -> Vec<Vec<u8>>;
        entries() -> Vec<(String, Vec<u8>)>;
        clone() -> Resource<Fields>;
        drop() -> ();
    );

    fn new(&mut self, entries: Vec<(String, Vec<u8>)>) -> wasmtime::Result<Resource<Fields>> {
        latest::http::types::HostFields::from_list(self, entries).map_err(as_wasmtime_error)
    }

    fn set(
        &mut self,
        self_: Resource<Fields>,
        name: String,
        value: Vec<Vec<u8>>,
    ) -> wasmtime::Result<()> {
        latest::http::types::HostFields::set(self, self_, name, value)
            .map_err(as_wasmtime_error)?;
        Ok(())
    }

    fn delete(&mut self, self_: Resource<Fields>, name: String) -> wasmtime::Result<()> {
        latest::http::types::HostFields::delete(self, self_, name).map_err(as_wasmtime_error)?;
        Ok(())
    }

    fn append(
        &mut self,
        self_: Resource<Fields>,
        name: String,
        value: Vec<u8>,
    ) -> wasmtime::Result<()> {
        latest::http::types::HostFields::append(self, self_, name, value)
            .map_err(as_wasmtime_error)?;
        Ok(())
    }
}

impl wasi::http::types::HostOutgoingRequest for WasiHttpCtxView<'_> {
    crate::shared::forward!(HostOutgoingRequest, OutgoingRequest:
        write as body() -> Result<Resource<OutgoingBody>, ()>;
        drop() -> ();
    );

    fn new(
        &mut self,
        method: Method,
        path_with_query: Option<String>,
        scheme: Option<Scheme>,
        authority: Option<String>,
        headers: Resource<Headers>,
    ) -> wasmtime::Result<Resource<OutgoingRequest>> {
        let headers = latest::http::types::HostFields::clone(self, headers)?;
        let request = latest::http::types::HostOutgoingRequest::new(self, headers)?;
        let borrow = || Resource::new_borrow(request.rep());

        if let Err(()) =
            latest::http::types::HostOutgoingRequest::set_method(self, borrow(), method.into())?
        {
            latest::http::types::HostOutgoingRequest::drop(self, request)?;
            wasmtime::bail!("invalid method supplied");
        }

        if let Err(()) = latest::http::types::HostOutgoingRequest::set_path_with_query(
            self,
            borrow(),
            path_with_query,
        )? {
            latest::http::types::HostOutgoingRequest::drop(self, request)?;
            wasmtime::bail!("invalid path-with-query supplied");
        }

        // Historical WASI would fill in an empty authority with a port which
        // got just enough working to get things through. Current WASI requires
        // the authority, though, so perform the translation manually here.
        let authority = authority.unwrap_or_else(|| match &scheme {
            Some(Scheme::Http) | Some(Scheme::Other(_)) => ":80".to_string(),
            Some(Scheme::Https) | None => ":443".to_string(),
        });
        if let Err(()) = latest::http::types::HostOutgoingRequest::set_scheme(
            self,
            borrow(),
            scheme.map(|s| s.into()),
        )? {
            latest::http::types::HostOutgoingRequest::drop(self, request)?;
            wasmtime::bail!("invalid scheme supplied");
        }

        if let Err(()) = latest::http::types::HostOutgoingRequest::set_authority(
            self,
            borrow(),
            Some(authority),
        )? {
            latest::http::types::HostOutgoingRequest::drop(self, request)?;
            wasmtime::bail!("invalid authority supplied");
        }

        Ok(request)
    }
}

impl wasi::http::types::HostOutgoingResponse for WasiHttpCtxView<'_> {
    crate::shared::forward!(HostOutgoingResponse, OutgoingResponse:
        write as body() -> Result<Resource<OutgoingBody>, ()>;
        drop() -> ();
    );

    fn new(
        &mut self,
        status_code: StatusCode,
        headers: Resource<Headers>,
    ) -> wasmtime::Result<Resource<OutgoingResponse>> {
        let headers = latest::http::types::HostFields::clone(self, headers)?;
        let response = latest::http::types::HostOutgoingResponse::new(self, headers)?;
        let borrow = || Resource::new_borrow(response.rep());

        if let Err(()) =
            latest::http::types::HostOutgoingResponse::set_status_code(self, borrow(), status_code)?
        {
            latest::http::types::HostOutgoingResponse::drop(self, response)?;
            wasmtime::bail!("invalid status code supplied");
        }

        Ok(response)
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
    ) -> wasmtime::Result<()> {
        latest::http::types::HostOutgoingBody::finish(self, this, trailers)?;
        Ok(())
    }
}

impl wasi::http::types::HostResponseOutparam for WasiHttpCtxView<'_> {
    crate::shared::forward!(HostResponseOutparam, ResponseOutparam:
        drop() -> ();
    );

    fn set(
        &mut self,
        param: Resource<ResponseOutparam>,
        response: Result<Resource<OutgoingResponse>, HttpError>,
    ) -> wasmtime::Result<()> {
        let response = response.map_err(|err| {
            // TODO: probably need to figure out a better mapping between
            // errors, but that seems like it would require string matching,
            // which also seems not great.
            let msg = match err {
                HttpError::InvalidUrl(s) => format!("invalid url: {s}"),
                HttpError::TimeoutError(s) => format!("timeout: {s}"),
                HttpError::ProtocolError(s) => format!("protocol error: {s}"),
                HttpError::UnexpectedError(s) => format!("unexpected error: {s}"),
            };
            latest::http::types::ErrorCode::InternalError(Some(msg))
        });
        latest::http::types::HostResponseOutparam::set(self, param, response)
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
    ) -> wasmtime::Result<Option<Result<Resource<Trailers>, HttpError>>> {
        match latest::http::types::HostFutureTrailers::get(self, self_)? {
            Some(Ok(Ok(Some(trailers)))) => Ok(Some(Ok(trailers))),
            // Return an empty trailers if no trailers popped out since this
            // version of WASI couldn't represent the lack of trailers.
            Some(Ok(Ok(None))) => Ok(Some(Ok(latest::http::types::HostFields::new(self)?))),
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
    ) -> wasmtime::Result<Option<Result<Result<Resource<IncomingResponse>, HttpError>, ()>>> {
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
        request: Resource<wasi::http::outgoing_handler::OutgoingRequest>,
        options: Option<RequestOptions>,
    ) -> wasmtime::Result<
        Result<Resource<FutureIncomingResponse>, wasi::http::outgoing_handler::Error>,
    > {
        let options = match options {
            Some(RequestOptions {
                connect_timeout_ms,
                first_byte_timeout_ms,
                between_bytes_timeout_ms,
            }) => {
                use latest::http::types::RequestOptions as Options;
                let options = latest::http::types::HostRequestOptions::new(self)?;
                type Set<T> =
                    fn(&mut T, Resource<Options>, Option<u64>) -> wasmtime::Result<Result<(), ()>>;
                let timeouts: [(Option<u32>, Set<Self>, &str); 3] = [
                    (
                        connect_timeout_ms,
                        latest::http::types::HostRequestOptions::set_connect_timeout,
                        "connect timeout",
                    ),
                    (
                        first_byte_timeout_ms,
                        latest::http::types::HostRequestOptions::set_first_byte_timeout,
                        "first byte timeout",
                    ),
                    (
                        between_bytes_timeout_ms,
                        latest::http::types::HostRequestOptions::set_between_bytes_timeout,
                        "between bytes timeout",
                    ),
                ];
                for (ms, set, what) in timeouts {
                    // The candidate's milliseconds as 0.2's nanoseconds.
                    let ns = ms.map(|ms| crate::shared::ms_to_ns(ms.into()));
                    if ns.is_some()
                        && let Err(()) = set(self, Resource::new_borrow(options.rep()), ns)?
                    {
                        latest::http::types::HostRequestOptions::drop(self, options)?;
                        wasmtime::bail!("invalid {what} supplied");
                    }
                }
                Some(options)
            }
            None => None,
        };
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
}

impl From<latest::http::types::ErrorCode> for HttpError {
    fn from(e: latest::http::types::ErrorCode) -> HttpError {
        // TODO: should probably categorize this better given the typed info
        // we have in `e`.
        HttpError::UnexpectedError(e.to_string())
    }
}

fn as_wasmtime_error(e: wasmtime_wasi_http::p2::HeaderError) -> wasmtime::Error {
    match e.downcast() {
        Ok(e) => wasmtime::Error::new(e),
        Err(e) => e,
    }
}
