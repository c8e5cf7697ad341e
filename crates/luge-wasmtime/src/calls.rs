//! The `luge` import module's calls (host API v1) on Wasmtime: guest
//! memory in and out of the invocation's [`CallTable`]. On the asynchronous
//! linker `call_wait` awaits the callee, so a waiting caller parks like a
//! sandbox in I/O and holds no worker; on the synchronous one it blocks.

use luge_core::calls::{CallError, CallMode, CallTable};
use wasmtime::{Caller, Linker, Memory};

use crate::sandbox::SandboxState;

/// The guest's exported memory.
fn memory(caller: &mut Caller<'_, SandboxState>) -> Option<Memory> {
    caller.get_export("memory")?.into_memory()
}

/// A copy of guest bytes `[ptr, ptr + len)`, or `BadArgument`.
fn read(caller: &mut Caller<'_, SandboxState>, ptr: i32, len: i32) -> Result<Vec<u8>, CallError> {
    let memory = memory(caller).ok_or(CallError::BadArgument)?;
    let (ptr, len) = (
        usize::try_from(ptr).map_err(|_| CallError::BadArgument)?,
        usize::try_from(len).map_err(|_| CallError::BadArgument)?,
    );
    memory
        .data(&*caller)
        .get(ptr..ptr.checked_add(len).ok_or(CallError::BadArgument)?)
        .map(<[u8]>::to_vec)
        .ok_or(CallError::BadArgument)
}

fn call_start(
    mut caller: Caller<'_, SandboxState>,
    name_ptr: i32,
    name_len: i32,
    in_ptr: i32,
    in_len: i32,
) -> i64 {
    let started = (|| {
        let name = read(&mut caller, name_ptr, name_len)?;
        let name = String::from_utf8(name).map_err(|_| CallError::BadArgument)?;
        let input = read(&mut caller, in_ptr, in_len)?;
        caller.data_mut().calls.start(&name, input)
    })();
    started.unwrap_or_else(|e| i64::from(e.code()))
}

fn call_output(
    mut caller: Caller<'_, SandboxState>,
    handle: i64,
    buf_ptr: i32,
    buf_len: i32,
) -> i64 {
    let copied = (|| {
        let memory = memory(&mut caller).ok_or(CallError::BadArgument)?;
        let (ptr, len) = (
            usize::try_from(buf_ptr).map_err(|_| CallError::BadArgument)?,
            usize::try_from(buf_len).map_err(|_| CallError::BadArgument)?,
        );
        let (data, state) = memory.data_and_store_mut(&mut caller);
        let output = state.calls.output(handle)?;
        let n = output.len().min(len);
        data.get_mut(ptr..ptr.checked_add(n).ok_or(CallError::BadArgument)?)
            .ok_or(CallError::BadArgument)?
            .copy_from_slice(&output[..n]);
        Ok::<i64, CallError>(output.len() as i64)
    })();
    copied.unwrap_or_else(|e| i64::from(e.code()))
}

/// Adds `luge::call_start`, `call_wait` and `call_output` to `linker`.
pub(crate) fn add_to_linker(
    linker: &mut Linker<SandboxState>,
    asynchronous: bool,
) -> wasmtime::Result<()> {
    linker.func_wrap("luge", "call_start", call_start)?;
    linker.func_wrap("luge", "call_output", call_output)?;
    if asynchronous {
        linker.func_wrap_async(
            "luge",
            "call_wait",
            |mut caller: Caller<'_, SandboxState>, (handle,): (i64,)| {
                Box::new(async move {
                    match caller.data_mut().calls.take(handle) {
                        Ok(pending) => {
                            let result = pending.await;
                            caller.data_mut().calls.finish(handle, result)
                        }
                        Err(e) => e.code(),
                    }
                })
            },
        )?;
    } else {
        linker.func_wrap(
            "luge",
            "call_wait",
            |mut caller: Caller<'_, SandboxState>, handle: i64| -> i32 {
                caller.data_mut().calls.wait_blocking(handle)
            },
        )?;
    }
    Ok(())
}

/// The table a sandbox starts with. Both linkers schedule callees: the
/// synchronous one (`LoadedModule::run`) is not used on the host's workers.
pub(crate) fn table(invocation: &luge_core::Invocation) -> CallTable {
    CallTable::new(invocation.calls.clone(), CallMode::Scheduled)
}
