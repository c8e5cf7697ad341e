//! WASI 0.3 components (`wasi:http@0.3.0` services, Spin 4 and `spin-sdk`
//! 7; `wasi:cli@0.3.0` commands), on the component model's concurrency.
//!
//! A 0.3 function runs as a 0.2 one does: a fresh instance per invocation
//! from the same pre-instantiated component, the same limits, schedule and
//! preemption (the store's epoch callback), the same grants and outgoing
//! HTTP hooks ([`crate::component`]). What differs is how a call runs:
//! inside the store's event loop (`Store::run_concurrent`), where the
//! guest's tasks, streams and futures make progress. A service's response
//! body is one of those streams, so the loop runs until the front end has
//! taken the body's last frame (or dropped it: the client left), and only
//! then does the sandbox end and give back its place.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http_body_util::BodyExt;
use hyper::body::{Body, Bytes, Frame, SizeHint};
use luge_core::handler::{BodyError, HandlerError, Request, Respond};
use luge_core::{Invocation, LoadedModule, Outcome, Preemption, SandboxFuture};
use tokio::sync::oneshot;
use wasmtime::component::{Accessor, InstancePre};
use wasmtime_wasi::p3::bindings::CommandPre;
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::p3::bindings::{Service, ServicePre};

use crate::component::{ComponentState, Shared};

/// Loads a prepared component as a WASI 0.3 function if it is one: a
/// `wasi:http` service or a `wasi:cli` command of 0.3. Otherwise gives the
/// pre-instance back for the 0.2 worlds.
#[allow(clippy::result_large_err)]
pub(crate) fn load(
    pre: InstancePre<ComponentState>,
    shared: Shared,
) -> Result<Arc<dyn LoadedModule>, (InstancePre<ComponentState>, Shared)> {
    if let Ok(pre) = ServicePre::new(pre.clone()) {
        return Ok(Arc::new(ServiceComponent {
            pre,
            shared,
            instances: crate::reuse::Instances::default(),
        }));
    }
    match CommandPre::new(pre.clone()) {
        Ok(pre) => Ok(Arc::new(CommandComponent { pre, shared })),
        Err(_) => Err((pre, shared)),
    }
}

/// A loaded `wasi:cli@0.3.0` command.
pub struct CommandComponent {
    pre: CommandPre<ComponentState>,
    shared: Shared,
}

impl CommandComponent {
    async fn invoke(&self, invocation: Invocation, preemption: Option<Preemption>) -> Outcome {
        let mut sandbox = match self
            .shared
            .sandbox(self.pre.engine(), &invocation, preemption)
        {
            Ok(sandbox) => sandbox,
            Err(outcome) => return outcome,
        };
        let result = {
            let _running = self.shared.ticker.enter();
            let store = &mut sandbox.store;
            match self.pre.instantiate_async(&mut *store).await {
                Ok(command) => store
                    .run_concurrent(async |store| command.wasi_cli_run().call_run(store).await)
                    .await
                    .and_then(|ran| ran)
                    .and_then(|status| {
                        // `run` returned its error result: exit status 1.
                        status.map_err(|()| wasmtime::Error::new(wasmtime_wasi::I32Exit(1)))
                    }),
                Err(e) => Err(e),
            }
        };
        sandbox.finish(result, &invocation)
    }
}

impl LoadedModule for CommandComponent {
    fn has_export(&self, name: &str) -> bool {
        // As for 0.2 commands: `wasi:cli/run` stands for `_start`.
        name == luge_core::action::COMMAND_ENTRY
    }

    fn run(&self, invocation: Invocation) -> Outcome {
        wasmtime_wasi::runtime::in_tokio(self.invoke(invocation, None))
    }

    fn code_size(&self) -> usize {
        self.shared.code_size
    }

    fn start(self: Arc<Self>, invocation: Invocation, preemption: Preemption) -> SandboxFuture {
        Box::pin(async move { self.invoke(invocation, Some(preemption)).await })
    }
}

/// A loaded `wasi:http@0.3.0` service: an HTTP handler.
pub struct ServiceComponent {
    pre: ServicePre<ComponentState>,
    shared: Shared,
    /// Instances serving several requests, for routes that opt in.
    instances: crate::reuse::Instances,
}

impl ServiceComponent {
    async fn handle(
        &self,
        invocation: Invocation,
        request: Request,
        respond: Respond,
        preemption: Preemption,
    ) -> Outcome {
        let mut sandbox =
            match self
                .shared
                .sandbox(self.pre.engine(), &invocation, Some(preemption))
            {
                Ok(sandbox) => sandbox,
                Err(outcome) => return outcome,
            };
        let result = {
            let _running = self.shared.ticker.enter();
            let store = &mut sandbox.store;
            match self.pre.instantiate_async(&mut *store).await {
                Ok(service) => store
                    .run_concurrent(async move |store| {
                        serve(store, &service, request, respond, |_| ()).await
                    })
                    .await
                    .and_then(|served| served),
                Err(e) => Err(e),
            }
        };
        sandbox.finish(result, &invocation)
    }
}

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

impl LoadedModule for ServiceComponent {
    fn has_export(&self, _name: &str) -> bool {
        // A service has no entry point to name: its entry is the world's.
        false
    }

    fn run(&self, _invocation: Invocation) -> Outcome {
        Outcome::failed(luge_core::handler::NOT_A_COMMAND)
    }

    fn code_size(&self) -> usize {
        self.shared.code_size
    }

    fn serves_http(&self) -> bool {
        true
    }

    fn reuses_instances(&self) -> bool {
        true
    }

    fn start_http(
        self: Arc<Self>,
        invocation: Invocation,
        request: Request,
        respond: Respond,
        preemption: Preemption,
    ) -> SandboxFuture {
        let (invocation, request, respond) = match invocation.action.reuse {
            Some(reuse) => match self.instances.join(
                &self.pre,
                &self.shared,
                reuse,
                invocation,
                request,
                respond,
                preemption,
            ) {
                Ok(joined) => return joined,
                // Every instance this route may keep is busy: a fresh one.
                Err(given_back) => given_back,
            },
            None => (invocation, request, respond),
        };
        Box::pin(async move { self.handle(invocation, request, respond, preemption).await })
    }
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
