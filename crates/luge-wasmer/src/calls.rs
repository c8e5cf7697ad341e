//! The `luge` import module's calls (host API v1) on Wasmer.
//!
//! A Wasmer sandbox runs to completion on its thread and cannot park, so
//! its callees are fused ([`CallMode::Fused`]): `call_wait` runs the callee
//! on the waiting thread. The table is
//! [`luge_core::calls::on_this_thread`]'s; the guest memory the host
//! functions copy through is kept beside it the same way.

use std::cell::RefCell;

use luge_core::calls::{CallError, CallMode, CallTable, on_this_thread};
use wasmer::{Function, FunctionEnv, FunctionEnvMut, Imports, Memory, StoreMut, imports};

thread_local! {
    static MEMORY: RefCell<Option<Memory>> = const { RefCell::new(None) };
}

/// Runs `f` (the guest's entry call) with the invocation's calls, state
/// and memory as this thread's, restoring the caller's afterwards.
pub(crate) fn with_calls<R>(
    invocation_calls: Option<std::sync::Arc<dyn luge_core::calls::Calls>>,
    state: Option<std::sync::Arc<dyn luge_core::state::State>>,
    memory: Memory,
    f: impl FnOnce() -> R,
) -> R {
    struct Restore(Option<Memory>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            MEMORY.with(|m| *m.borrow_mut() = previous);
        }
    }
    let previous = MEMORY.with(|m| m.replace(Some(memory)));
    let _restore = Restore(previous);
    on_this_thread::with(CallTable::new(invocation_calls, CallMode::Fused), || {
        luge_core::state::on_this_thread::with(state, f)
    })
}

/// The `luge` imports, for modules that import it.
pub(crate) fn imports(module: &wasmer::Module, store: &mut StoreMut) -> Imports {
    if !module.imports().any(|import| import.module() == "luge") {
        return Imports::new();
    }
    let env = FunctionEnv::new(store, ());
    let mut imports = imports! {
        "luge" => {
            "call_start" => Function::new_typed_with_env(store, &env, call_start),
            "call_wait" => Function::new_typed(store, on_this_thread::wait),
            "call_output" => Function::new_typed_with_env(store, &env, call_output),
        }
    };
    for (name, function) in crate::state::exports(store, &env) {
        imports.define("luge", name, function);
    }
    imports
}

pub(crate) fn memory() -> Result<Memory, CallError> {
    MEMORY.with(|m| m.borrow().clone().ok_or(CallError::BadArgument))
}

fn read(env: &FunctionEnvMut<()>, ptr: i32, len: i32) -> Result<Vec<u8>, CallError> {
    let (ptr, len) = (
        u64::try_from(ptr).map_err(|_| CallError::BadArgument)?,
        usize::try_from(len).map_err(|_| CallError::BadArgument)?,
    );
    let mut bytes = vec![0; len];
    memory()?
        .view(env)
        .read(ptr, &mut bytes)
        .map_err(|_| CallError::BadArgument)?;
    Ok(bytes)
}

fn call_start(
    env: FunctionEnvMut<()>,
    name_ptr: i32,
    name_len: i32,
    in_ptr: i32,
    in_len: i32,
) -> i64 {
    let args = (|| {
        let name = String::from_utf8(read(&env, name_ptr, name_len)?)
            .map_err(|_| CallError::BadArgument)?;
        Ok::<_, CallError>((name, read(&env, in_ptr, in_len)?))
    })();
    match args {
        Ok((name, input)) => on_this_thread::start(&name, input),
        Err(e) => i64::from(e.code()),
    }
}

fn call_output(env: FunctionEnvMut<()>, handle: i64, buf_ptr: i32, buf_len: i32) -> i64 {
    on_this_thread::output(handle, |output| {
        let ptr = u64::try_from(buf_ptr).map_err(|_| CallError::BadArgument)?;
        let len = usize::try_from(buf_len).map_err(|_| CallError::BadArgument)?;
        let n = output.len().min(len);
        memory()?
            .view(&env)
            .write(ptr, &output[..n])
            .map_err(|_| CallError::BadArgument)?;
        Ok(output.len() as i64)
    })
}
