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

use std::sync::Arc;

use luge_core::handler::{Request, Respond};
use luge_core::{Invocation, LoadedModule, Outcome, Preemption, SandboxFuture};
use wasmtime::component::InstancePre;
use wasmtime::{Engine, Store};
use wasmtime_wasi::p3::bindings::CommandPre;
use wasmtime_wasi_http::p3::bindings::ServicePre;

use crate::component::{Command, CommandWorld, ComponentState, Shared};

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
        Ok(pre) => Ok(Arc::new(Command::new(pre, shared))),
        Err(_) => Err((pre, shared)),
    }
}

/// A `wasi:cli@0.3.0` command: its `run` is called inside the store's
/// event loop (`run_concurrent`), where its tasks and streams progress.
impl CommandWorld for CommandPre<ComponentState> {
    fn engine(&self) -> &Engine {
        CommandPre::engine(self)
    }

    async fn run(&self, store: &mut Store<ComponentState>) -> wasmtime::Result<Result<(), ()>> {
        let command = self.instantiate_async(&mut *store).await?;
        crate::component::instantiated(store);
        store
            .run_concurrent(async |store| command.wasi_cli_run().call_run(store).await)
            .await?
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
        let pre = &self.pre;
        self.shared
            .invoke(pre.engine(), &invocation, Some(preemption), async |store| {
                let service = pre.instantiate_async(&mut *store).await?;
                crate::component::instantiated(store);
                store
                    .run_concurrent(async move |store| {
                        crate::service::serve(store, &service, request, respond, |_| ()).await
                    })
                    .await?
            })
            .await
    }
}

impl LoadedModule for ServiceComponent {
    crate::component::handler_methods!();

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
