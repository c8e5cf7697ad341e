//! Host API v1 (import module `luge`: calls and state), written once for
//! every engine.
//!
//! The pieces:
//!
//! - [`for_each_host_import!`](crate::for_each_host_import): the table of
//!   imports (name, parameters, result). An engine registers its imports by
//!   expanding the table with a macro of its own, so an import it forgot or
//!   typed differently is a compile error, not a link error at a request.
//! - [`imports`]: the body of each import over [`Parts`]: argument checks,
//!   guest memory in and out, codes. Bodies return a [`Step`]: either what
//!   the guest reads, or something to wait for.
//! - [`memory`]: the one [`GuestMemory`] an engine adapts (three
//!   primitives), with every bound checked before the host allocates.
//! - [`Host`], [`drive_blocking`] and [`drive_parked`]: how an engine runs
//!   a [`Step`] to the guest's result. Engines whose sandboxes cannot park
//!   (Wasmer, WAMR) block their thread; Wasmtime's asynchronous linker
//!   parks the sandbox, and a state operation on the global tier (a Redis
//!   round trip) runs off the worker.
//!
//! An engine thus supplies only its memory adapter, its [`Host`] (where the
//! invocation's [`CallTable`] and [`State`] live), and the registration.

pub mod imports;
pub mod memory;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub use imports::{LockRetry, StateCall, StateDone, Step};
pub use memory::{Guest, GuestMemory, MemoryError, NoMemory, SliceMemory};

use crate::calls::{CallTable, block_on};
use crate::state::State;

/// The import module of host API v1.
pub const IMPORT_MODULE: &str = "luge";

/// The table of host API v1's imports: calls `$mac!` with one line per
/// import, `name(param: type, ...) -> result;`, types `i32` or `i64`.
///
/// Each line has a body of the same name and parameters in [`imports`]
/// (taking [`Parts`] first and returning a [`Step`]); the expansion in this
/// crate checks that at compile time.
#[macro_export]
macro_rules! for_each_host_import {
    ($mac:ident) => {
        $mac! {
            call_start(name_ptr: i32, name_len: i32, in_ptr: i32, in_len: i32) -> i64;
            call_wait(handle: i64) -> i32;
            call_output(handle: i64, buf_ptr: i32, buf_len: i32) -> i64;
            state_get(key_ptr: i32, key_len: i32, buf_ptr: i32, buf_len: i32, flags: i32) -> i64;
            state_set(key_ptr: i32, key_len: i32, val_ptr: i32, val_len: i32, flags: i32) -> i32;
            state_delete(key_ptr: i32, key_len: i32, flags: i32) -> i32;
            state_append(key_ptr: i32, key_len: i32, val_ptr: i32, val_len: i32, flags: i32) -> i64;
            state_cas(key_ptr: i32, key_len: i32, old_ptr: i32, old_len: i32, new_ptr: i32, new_len: i32, flags: i32) -> i32;
            state_add(key_ptr: i32, key_len: i32, delta: i64, flags: i32) -> i64;
            state_pull(key_ptr: i32, key_len: i32) -> i32;
            state_push(key_ptr: i32, key_len: i32) -> i32;
            state_lock(key_ptr: i32, key_len: i32, lease_ms: i32) -> i32;
            state_unlock(key_ptr: i32, key_len: i32) -> i32;
        }
    };
}

/// A value type of an import's signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValType {
    /// `i32`.
    I32,
    /// `i64`.
    I64,
}

/// One import of the table, as data (for engines that check a module's
/// imports before linking, and for tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Import {
    /// Its name in [`IMPORT_MODULE`].
    pub name: &'static str,
    /// Its parameters.
    pub params: &'static [ValType],
    /// Its one result.
    pub result: ValType,
}

#[doc(hidden)]
#[macro_export]
macro_rules! __host_val_type {
    (i32) => {
        $crate::hostapi::ValType::I32
    };
    (i64) => {
        $crate::hostapi::ValType::I64
    };
}

macro_rules! table_as_data {
    ($($name:ident($($arg:ident: $ty:ident),*) -> $ret:ident;)*) => {
        /// Every import of host API v1, in the table's order.
        pub const IMPORTS: &[Import] = &[$(Import {
            name: stringify!($name),
            params: &[$($crate::__host_val_type!($ty)),*],
            result: $crate::__host_val_type!($ret),
        }),*];

        // Every line of the table has its body, with these parameters.
        $(const _: for<'a> fn(Parts<'a>, $($ty),*) -> Step = imports::$name;)*
    };
}
for_each_host_import!(table_as_data);

/// The import named `name`, if host API v1 has one.
pub fn import(name: &str) -> Option<&'static Import> {
    IMPORTS.iter().find(|import| import.name == name)
}

/// What a host function reaches while it runs: the guest's memory, the
/// invocation's calls and its state (`None`: no state was granted).
pub struct Parts<'a> {
    /// The guest's linear memory.
    pub memory: &'a mut dyn GuestMemory,
    /// The invocation's calls.
    pub calls: &'a mut CallTable,
    /// The invocation's state.
    pub state: Option<&'a Arc<dyn State>>,
}

/// Where an engine keeps a running sandbox's [`Parts`].
pub trait Host {
    /// Runs `f` with the parts. Nothing is borrowed between two calls, so
    /// a fused callee run between them can install its own.
    fn with<R>(&mut self, f: impl FnOnce(Parts<'_>) -> R) -> R;
}

/// The [`Host`] of engines whose guest runs on the calling thread and
/// cannot park (Wasmer, WAMR): the invocation's calls and state are this
/// thread's ([`crate::calls::on_this_thread`],
/// [`crate::state::on_this_thread`]); `M` is the engine's memory adapter.
pub struct ThisThread<M>(pub M);

impl<M: GuestMemory> Host for ThisThread<M> {
    fn with<R>(&mut self, f: impl FnOnce(Parts<'_>) -> R) -> R {
        let state = crate::state::on_this_thread::current();
        crate::calls::on_this_thread::with_table(|calls| {
            f(Parts {
                memory: &mut self.0,
                calls,
                state: state.as_ref(),
            })
        })
    }
}

/// Runs the import `body` on `host`, blocking: what a host function of an
/// engine that cannot park returns to the guest.
pub fn call_blocking(host: &mut impl Host, body: impl FnOnce(Parts<'_>) -> Step) -> i64 {
    let step = host.with(body);
    drive_blocking(host, step)
}

/// Runs the import `body` on `host`, parked where it waits.
pub async fn call_parked(
    host: &mut (impl Host + Send),
    body: impl FnOnce(Parts<'_>) -> Step,
    park: &dyn Park,
) -> i64 {
    let step = host.with(body);
    drive_parked(host, step, park).await
}

/// Runs `step` to the guest's result on this thread: callees are awaited
/// blocking (fused callees run here), lock back-offs sleep, state
/// operations run inline.
pub fn drive_blocking(host: &mut impl Host, mut step: Step) -> i64 {
    loop {
        step = match step {
            Step::Done(value) => return value,
            Step::Call { handle, pending } => {
                let result = block_on(pending);
                host.with(|parts| imports::finish_call(parts, handle, result))
            }
            Step::State(call) => host.with(|parts| {
                let done = call.perform(parts.state.map(|s| &**s));
                done.complete(parts)
            }),
            Step::Lock(retry) => {
                std::thread::sleep(retry.after);
                Step::State(retry.attempt())
            }
        }
    }
}

/// A boxed future, for [`Park`].
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// How an engine that parks sandboxes waits: sleeps, and work taken off
/// the worker (an async runtime's timer and blocking pool).
pub trait Park: Send + Sync {
    /// A future that resolves after `duration`.
    fn sleep(&self, duration: Duration) -> BoxFuture<()>;
    /// Runs `work` where blocking is allowed (not on a worker).
    fn offload(&self, work: Box<dyn FnOnce() -> StateDone + Send>) -> BoxFuture<StateDone>;
}

/// Runs `step` to the guest's result, parked: the sandbox's future is
/// pending (and its worker free) while a callee runs, a lock is backed off,
/// or a state operation goes to the global tier. Local-tier operations run
/// inline: they are memory and an fsync-free journal append.
pub async fn drive_parked(host: &mut (impl Host + Send), mut step: Step, park: &dyn Park) -> i64 {
    loop {
        step = match step {
            Step::Done(value) => return value,
            Step::Call { handle, pending } => {
                let result = pending.await;
                host.with(|parts| imports::finish_call(parts, handle, result))
            }
            Step::State(call) if call.is_remote() => {
                let Some(state) = host.with(|parts| parts.state.cloned()) else {
                    step = host.with(|parts| call.perform(None).complete(parts));
                    continue;
                };
                let done = park
                    .offload(Box::new(move || call.perform(Some(&*state))))
                    .await;
                host.with(|parts| done.complete(parts))
            }
            Step::State(call) => host.with(|parts| {
                let done = call.perform(parts.state.map(|s| &**s));
                done.complete(parts)
            }),
            Step::Lock(retry) => {
                park.sleep(retry.after).await;
                Step::State(retry.attempt())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_as_data_matches_host_api_v1() {
        assert_eq!(IMPORTS.len(), 13);
        let cas = import("state_cas").unwrap();
        assert_eq!(cas.params.len(), 7);
        assert_eq!(cas.result, ValType::I32);
        let add = import("state_add").unwrap();
        assert_eq!(
            add.params,
            &[ValType::I32, ValType::I32, ValType::I64, ValType::I32]
        );
        assert!(import("state_nothing").is_none());
    }
}
