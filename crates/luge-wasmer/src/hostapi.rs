//! Host API v1 (import module `luge`) on Wasmer: the memory adapter and
//! the registration, expanded from [`luge_core::for_each_host_import!`];
//! the bodies are [`luge_core::hostapi::imports`].
//!
//! A Wasmer sandbox runs to completion on its thread and cannot park, so
//! its callees are fused ([`CallMode::Fused`]: `call_wait` runs the callee
//! on the waiting thread) and waits block. The invocation's calls and state
//! are this thread's ([`ThisThread`]); its memory is kept beside them the
//! same way, since Wasmer's host functions have no per-instance data here.

use std::cell::RefCell;
use std::sync::Arc;

use luge_core::calls::{CallMode, CallTable, Calls};
use luge_core::hostapi::memory::within;
use luge_core::hostapi::{self, GuestMemory, IMPORT_MODULE, MemoryError, ThisThread, imports};
use luge_core::state::State;
use wasmer::{Function, FunctionEnv, FunctionEnvMut, Imports, Memory, StoreMut};

thread_local! {
    static MEMORY: RefCell<Option<Memory>> = const { RefCell::new(None) };
}

/// Runs `f` (the guest's entry call) with the invocation's calls, state
/// and memory as this thread's, restoring the caller's afterwards (a fused
/// callee runs inside its caller's host call). Always installs all three,
/// so a callee can never reach its caller's.
pub(crate) fn with_invocation<R>(
    calls: Option<Arc<dyn Calls>>,
    state: Option<Arc<dyn State>>,
    memory: Option<Memory>,
    f: impl FnOnce() -> R,
) -> R {
    struct Restore(Option<Memory>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            MEMORY.with(|m| *m.borrow_mut() = previous);
        }
    }
    let previous = MEMORY.with(|m| m.replace(memory));
    let _restore = Restore(previous);
    luge_core::calls::on_this_thread::with(CallTable::new(calls, CallMode::Fused), || {
        luge_core::state::on_this_thread::with(state, f)
    })
}

/// The guest's memory through a view.
struct View<'e, 'a> {
    memory: Option<Memory>,
    env: &'e FunctionEnvMut<'a, ()>,
}

impl GuestMemory for View<'_, '_> {
    fn contains(&self, offset: u64, len: u64) -> bool {
        self.view()
            .is_ok_and(|view| within(offset, len, view.data_size()))
    }

    fn copy_out(&mut self, offset: u64, into: &mut [u8]) -> Result<(), MemoryError> {
        let len = into.len() as u64;
        self.view()?
            .read(offset, into)
            .map_err(|_| MemoryError::OutOfBounds { ptr: offset, len })
    }

    fn copy_in(&mut self, offset: u64, bytes: &[u8]) -> Result<(), MemoryError> {
        let len = bytes.len() as u64;
        self.view()?
            .write(offset, bytes)
            .map_err(|_| MemoryError::OutOfBounds { ptr: offset, len })
    }
}

impl View<'_, '_> {
    /// The memory's view now (a growth since the last one is in it), or
    /// `NoMemory` for a module that has none.
    fn view(&self) -> Result<wasmer::MemoryView<'_>, MemoryError> {
        let memory = self.memory.as_ref().ok_or(MemoryError::NoMemory)?;
        Ok(memory.view(self.env))
    }
}

macro_rules! register {
    ($($name:ident($($arg:ident: $ty:ident),*) -> $ret:ident;)*) => {
        /// One host function per import: this thread's invocation, blocking.
        mod natives {
            use super::*;
            $(
                #[allow(clippy::too_many_arguments)] // the import's signature
                pub(super) fn $name(env: FunctionEnvMut<'_, ()>, $($arg: $ty),*) -> $ret {
                    let memory = MEMORY.with(|m| m.borrow().clone());
                    let mut host = ThisThread(View { memory, env: &env });
                    let body = |p: hostapi::Parts<'_>| imports::$name(p, $($arg),*);
                    hostapi::call_blocking(&mut host, body) as $ret
                }
            )*
        }

        /// The `luge` imports, for modules that import it.
        pub(crate) fn imports(module: &wasmer::Module, store: &mut StoreMut) -> Imports {
            let mut imports = Imports::new();
            if !module.imports().any(|import| import.module() == IMPORT_MODULE) {
                return imports;
            }
            let env = FunctionEnv::new(store, ());
            $(
                imports.define(
                    IMPORT_MODULE,
                    stringify!($name),
                    Function::new_typed_with_env(store, &env, natives::$name),
                );
            )*
            imports
        }
    };
}
luge_core::for_each_host_import!(register);
