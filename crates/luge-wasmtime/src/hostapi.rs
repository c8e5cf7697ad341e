//! Host API v1 (import module `luge`) on Wasmtime: the memory adapter and
//! the registration, expanded from [`luge_core::for_each_host_import!`];
//! the bodies are [`luge_core::hostapi::imports`].
//!
//! On the asynchronous linker every import is an async host function: a
//! sandbox waiting for a callee, backing off a held lock, or waiting on the
//! global state tier (a Redis round trip, run on the blocking pool) is
//! parked and holds no worker. On the synchronous linker (used off the
//! workers, by `LoadedModule::run`) they block.

use std::time::Duration;

use luge_core::hostapi::{
    self, BoxFuture, Host, NoMemory, Park, Parts, SliceMemory, StateDone, imports,
};
use wasmtime::{Caller, Linker};

use crate::sandbox::SandboxState;

/// A running sandbox's [`Parts`], through its [`Caller`].
struct Cx<'c, 'a>(&'c mut Caller<'a, SandboxState>);

impl Host for Cx<'_, '_> {
    fn with<R>(&mut self, f: impl FnOnce(Parts<'_>) -> R) -> R {
        let memory = self
            .0
            .get_export("memory")
            .and_then(wasmtime::Extern::into_memory);
        match memory {
            Some(memory) => {
                let (data, sandbox) = memory.data_and_store_mut(&mut *self.0);
                f(Parts {
                    memory: &mut SliceMemory(data),
                    calls: &mut sandbox.calls,
                    state: sandbox.state.as_ref(),
                })
            }
            None => {
                let sandbox = self.0.data_mut();
                f(Parts {
                    memory: &mut NoMemory,
                    calls: &mut sandbox.calls,
                    state: sandbox.state.as_ref(),
                })
            }
        }
    }
}

/// Waiting on tokio: the ambient runtime's timer and blocking pool (jobs
/// run with it entered; without one, the work runs inline).
struct Tokio;

impl Park for Tokio {
    fn sleep(&self, duration: Duration) -> BoxFuture<()> {
        Box::pin(tokio::time::sleep(duration))
    }

    fn offload(&self, work: Box<dyn FnOnce() -> StateDone + Send>) -> BoxFuture<StateDone> {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let task = runtime.spawn_blocking(work);
                Box::pin(async move {
                    // The blocking pool runs every task it accepts unless
                    // the runtime shuts down, which ends the sandbox too.
                    task.await.unwrap_or_else(|_| StateDone::unavailable())
                })
            }
            Err(_) => Box::pin(std::future::ready(work())),
        }
    }
}

macro_rules! register {
    ($($name:ident($($arg:ident: $ty:ident),*) -> $ret:ident;)*) => {
        /// Adds every `luge` import to `linker`.
        pub(crate) fn add_to_linker(
            linker: &mut Linker<SandboxState>,
            asynchronous: bool,
        ) -> wasmtime::Result<()> {
            $(
                if asynchronous {
                    linker.func_wrap_async(
                        hostapi::IMPORT_MODULE,
                        stringify!($name),
                        |mut caller: Caller<'_, SandboxState>, ($($arg,)*): ($($ty,)*)| {
                            Box::new(async move {
                                let body = |p: Parts<'_>| imports::$name(p, $($arg),*);
                                hostapi::call_parked(&mut Cx(&mut caller), body, &Tokio).await as $ret
                            })
                        },
                    )?;
                } else {
                    linker.func_wrap(
                        hostapi::IMPORT_MODULE,
                        stringify!($name),
                        |mut caller: Caller<'_, SandboxState>, $($arg: $ty),*| -> $ret {
                            let body = |p: Parts<'_>| imports::$name(p, $($arg),*);
                            hostapi::call_blocking(&mut Cx(&mut caller), body) as $ret
                        },
                    )?;
                }
            )*
            Ok(())
        }
    };
}
luge_core::for_each_host_import!(register);
