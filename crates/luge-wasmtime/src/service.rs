//! One request through a WASI 0.3 `wasi:http` service, inside its
//! store's event loop: the request converted, the guest's response handed
//! to the front end, its body streamed out through the loop and ended only
//! as the sandbox ended. A fresh instance ([`crate::p3`]) and a reused one
//! ([`crate::reuse`]) serve a request alike, through [`serve`].

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http_body_util::BodyExt;
use hyper::body::{Body, Bytes, Frame, SizeHint};
use luge_core::handler::{BodyError, HandlerError, Request, Respond};
use tokio::sync::oneshot;
use wasmtime::component::Accessor;
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::p3::bindings::Service;

use crate::component::ComponentState;

/// Serves one request with `service`, inside its store's event loop
/// (`accessor`): the response goes to `respond` as the guest returns it,
/// and this ends once the front end is done with the response body (its
/// last frame taken, or the body dropped because the client left), since
/// the body streams from the guest through this loop. The body's end waits
/// for this to have ended well (see [`Watched`]); `ended` hears how it
/// ended just before the body's end does, so that whatever it records is
/// in place before the client has the whole response.
pub(crate) async fn serve(
    accessor: &Accessor<ComponentState>,
    service: &Service,
    request: Request,
    respond: Respond,
    ended: impl FnOnce(&wasmtime::Result<()>),
) -> wasmtime::Result<()> {
    // The front end's errors (the client left, the body met its bound) in
    // wasi:http's words.
    let request = absolute(request).map(|body| {
        body.map_err(|e| wasmtime_wasi_http::Error::InternalError(Some(e.to_string())))
    });
    // The request's own I/O result is kept, unpolled, while it is served
    // (boxed: its type names the store's borrow, though it holds none).
    let (request, _sent) = accessor.with(|mut store| {
        let (request, sent) =
            wasmtime_wasi_http::p3::Request::from_http(store.data_mut().http().hooks, request);
        let sent: Pin<Box<dyn Future<Output = _> + Send>> = Box::pin(sent);
        (request, sent)
    });
    let (verdict, verdict_rx) = oneshot::channel();
    let served = async {
        let response = match service.handle(accessor, request).await? {
            Ok(response) => response,
            Err(code) => {
                respond(Err(HandlerError {
                    code: format!("{code:?}"),
                }));
                return Ok(());
            }
        };
        let response =
            accessor.with(|store| response.into_http(store, std::future::ready(Ok(()))))?;
        let (taken, body_done) = oneshot::channel();
        respond(Ok(response.map(|body| {
            Watched {
                body,
                taken: Some(taken),
                verdict: Some(verdict_rx),
            }
            .boxed_unsync()
        })));
        // Keep the loop turning until the front end is done with the body
        // (an error means dropped).
        let _ = body_done.await;
        Ok(())
    }
    .await;
    ended(&served);
    let _ = verdict.send(served.is_ok());
    served
}

/// The request with an absolute URI: wasi:http@0.3 takes the scheme and
/// authority from it (0.2's conversion took them from the Host header; the
/// front end checked that there is one).
fn absolute(request: Request) -> Request {
    let (mut parts, body) = request.into_parts();
    if parts.uri.authority().is_none() {
        let host = parts
            .headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.parse::<http::uri::Authority>().ok());
        if let Some(host) = host {
            let mut uri = http::uri::Parts::from(parts.uri.clone());
            uri.scheme = Some(http::uri::Scheme::HTTP);
            uri.authority = Some(host);
            if uri.path_and_query.is_none() {
                uri.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
            }
            if let Ok(absolute) = http::Uri::from_parts(uri) {
                parts.uri = absolute;
            }
        }
    }
    Request::from_parts(parts, body)
}

/// A service's response body, which tells the sandbox when the front end
/// has taken its last frame (or dropped it), and ends only as the sandbox
/// did: Wasmtime reports a clean end when the guest's stream closes, even
/// when it closed because the guest trapped or ran out of time, so the
/// end of the body waits for the sandbox's verdict and becomes an error
/// (the client sees the body cut short) unless the function succeeded.
struct Watched<B> {
    body: B,
    /// Dropped (which the sandbox sees) at the end of the body.
    taken: Option<oneshot::Sender<()>>,
    /// Whether the sandbox ended well; `None` once read.
    verdict: Option<oneshot::Receiver<bool>>,
}

impl<B> Body for Watched<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        if this.taken.is_some() {
            match Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => return Poll::Ready(Some(Ok(frame))),
                Poll::Ready(Some(Err(e))) => {
                    this.taken = None;
                    this.verdict = None;
                    return Poll::Ready(Some(Err(Box::new(e))));
                }
                Poll::Ready(None) => this.taken = None,
            }
        }
        let Some(verdict) = this.verdict.as_mut() else {
            return Poll::Ready(None);
        };
        let Poll::Ready(verdict) = Pin::new(verdict).poll(cx) else {
            return Poll::Pending;
        };
        this.verdict = None;
        if verdict.unwrap_or(false) {
            Poll::Ready(None)
        } else {
            Poll::Ready(Some(Err(
                "the function failed before its response body ended".into(),
            )))
        }
    }

    fn is_end_stream(&self) -> bool {
        self.verdict.is_none() && (self.taken.is_none() || self.body.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
