//! Which `wasi:http/incoming-handler` a handler component exports, of
//! the versions Luge serves: WASI 0.2's, or one of the release
//! candidates' this crate serves. All take the same request and response
//! resources (Wasmtime's 0.2 implementation's), so everything around the
//! call is written once, by the engine.

use wasmtime::component::{InstancePre, Resource};
use wasmtime::{Engine, Store};
use wasmtime_wasi_http::p2::bindings::ProxyPre;

/// The `wasi:http/incoming-handler` a handler component exports, of
/// whichever version Luge serves, pre-instantiated: WASI 0.2's, or a
/// release candidate's (2023-10-18: spin-sdk 2's; 2023-11-10). All take
/// the same request and response resources, so everything around the
/// call is one.
pub enum HandlerPre<T: 'static> {
    /// WASI 0.2's.
    V0_2(ProxyPre<T>),
    /// WASI 0.2.0-rc-2023-10-18's.
    Rc2023_10_18(crate::wasi_2023_10_18::ProxyPre<T>),
    /// WASI 0.2.0-rc-2023-11-10's.
    Rc2023_11_10(crate::wasi_2023_11_10::ProxyPre<T>),
}

/// An instance of a [`HandlerPre`].
pub enum Handler {
    /// WASI 0.2's.
    V0_2(wasmtime_wasi_http::p2::bindings::Proxy),
    /// WASI 0.2.0-rc-2023-10-18's.
    Rc2023_10_18(crate::wasi_2023_10_18::Proxy),
    /// WASI 0.2.0-rc-2023-11-10's.
    Rc2023_11_10(crate::wasi_2023_11_10::Proxy),
}

impl<T: Send + 'static> HandlerPre<T> {
    /// The handler `pre` exports, if it exports one (0.2's first).
    pub fn new(pre: &InstancePre<T>) -> Option<Self> {
        if let Ok(pre) = ProxyPre::new(pre.clone()) {
            return Some(Self::V0_2(pre));
        }
        if let Ok(pre) = crate::wasi_2023_10_18::ProxyPre::new(pre.clone()) {
            return Some(Self::Rc2023_10_18(pre));
        }
        crate::wasi_2023_11_10::ProxyPre::new(pre.clone())
            .ok()
            .map(Self::Rc2023_11_10)
    }

    /// The engine it was made on.
    pub fn engine(&self) -> &Engine {
        match self {
            Self::V0_2(pre) => pre.engine(),
            Self::Rc2023_10_18(pre) => pre.engine(),
            Self::Rc2023_11_10(pre) => pre.engine(),
        }
    }

    /// A new instance of it in `store`.
    pub async fn instantiate_async(&self, store: &mut Store<T>) -> wasmtime::Result<Handler> {
        Ok(match self {
            Self::V0_2(pre) => Handler::V0_2(pre.instantiate_async(store).await?),
            Self::Rc2023_10_18(pre) => Handler::Rc2023_10_18(pre.instantiate_async(store).await?),
            Self::Rc2023_11_10(pre) => Handler::Rc2023_11_10(pre.instantiate_async(store).await?),
        })
    }
}

impl Handler {
    /// Calls the handler's `handle` with `request` and `outparam`.
    pub async fn call_handle<T: Send>(
        &self,
        store: &mut Store<T>,
        request: Resource<wasmtime_wasi_http::p2::types::HostIncomingRequest>,
        outparam: Resource<wasmtime_wasi_http::p2::types::HostResponseOutparam>,
    ) -> wasmtime::Result<()> {
        match self {
            Self::V0_2(proxy) => {
                proxy
                    .wasi_http_incoming_handler()
                    .call_handle(store, request, outparam)
                    .await
            }
            Self::Rc2023_10_18(proxy) => {
                proxy
                    .wasi_http0_2_0_rc_2023_10_18_incoming_handler()
                    .call_handle(store, request, outparam)
                    .await
            }
            Self::Rc2023_11_10(proxy) => {
                proxy
                    .wasi_http0_2_0_rc_2023_11_10_incoming_handler()
                    .call_handle(store, request, outparam)
                    .await
            }
        }
    }
}
