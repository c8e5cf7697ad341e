//! The `luge` import module's state functions (host API v1) on Wasmtime:
//! each hands the guest's memory and the invocation's [`State`] to
//! [`luge_core::state::abi`]. On the asynchronous linker `state_lock`
//! waits for a held lock parked, holding no worker; on the synchronous one
//! it sleeps.

use std::sync::Arc;

use luge_core::state::abi::{self, LockAttempt};
use luge_core::state::{SliceMemory, State};
use wasmtime::{Caller, Linker};

use crate::sandbox::SandboxState;

/// Runs `f` on the invocation's state and guest memory.
fn with<R>(
    caller: &mut Caller<'_, SandboxState>,
    f: impl FnOnce(Option<&dyn State>, &mut SliceMemory<'_>) -> R,
) -> R {
    let state: Option<Arc<dyn State>> = caller.data().state.clone();
    let memory = caller
        .get_export("memory")
        .and_then(wasmtime::Extern::into_memory);
    let mut empty: [u8; 0] = [];
    let data = match memory {
        Some(memory) => memory.data_mut(&mut *caller),
        None => &mut empty[..],
    };
    f(state.as_deref(), &mut SliceMemory(data))
}

type C<'a> = Caller<'a, SandboxState>;

/// Adds the `luge::state_*` functions to `linker`.
pub(crate) fn add_to_linker(
    linker: &mut Linker<SandboxState>,
    asynchronous: bool,
) -> wasmtime::Result<()> {
    linker.func_wrap(
        "luge",
        "state_get",
        |mut c: C<'_>, k: i32, kl: i32, b: i32, bl: i32, f: i32| {
            with(&mut c, |s, m| abi::get(s, m, (k, kl, b, bl, f)))
        },
    )?;
    linker.func_wrap(
        "luge",
        "state_set",
        |mut c: C<'_>, k: i32, kl: i32, v: i32, vl: i32, f: i32| {
            with(&mut c, |s, m| abi::set(s, m, (k, kl, v, vl, f)))
        },
    )?;
    linker.func_wrap(
        "luge",
        "state_delete",
        |mut c: C<'_>, k: i32, kl: i32, f: i32| with(&mut c, |s, m| abi::delete(s, m, (k, kl, f))),
    )?;
    linker.func_wrap(
        "luge",
        "state_append",
        |mut c: C<'_>, k: i32, kl: i32, v: i32, vl: i32, f: i32| {
            with(&mut c, |s, m| abi::append(s, m, (k, kl, v, vl, f)))
        },
    )?;
    linker.func_wrap(
        "luge",
        "state_cas",
        |mut c: C<'_>, k: i32, kl: i32, o: i32, ol: i32, n: i32, nl: i32, f: i32| {
            with(&mut c, |s, m| abi::cas(s, m, (k, kl, o, ol, n, nl, f)))
        },
    )?;
    linker.func_wrap(
        "luge",
        "state_add",
        |mut c: C<'_>, k: i32, kl: i32, d: i64, f: i32| {
            with(&mut c, |s, m| abi::add(s, m, (k, kl, d, f)))
        },
    )?;
    linker.func_wrap("luge", "state_pull", |mut c: C<'_>, k: i32, kl: i32| {
        with(&mut c, |s, m| abi::pull(s, m, (k, kl)))
    })?;
    linker.func_wrap("luge", "state_push", |mut c: C<'_>, k: i32, kl: i32| {
        with(&mut c, |s, m| abi::push(s, m, (k, kl)))
    })?;
    linker.func_wrap("luge", "state_unlock", |mut c: C<'_>, k: i32, kl: i32| {
        with(&mut c, |s, m| abi::unlock(s, m, (k, kl)))
    })?;
    if asynchronous {
        linker.func_wrap_async(
            "luge",
            "state_lock",
            |mut c: C<'_>, (k, kl, lease): (i32, i32, i32)| {
                Box::new(async move {
                    let mut attempt = with(&mut c, |s, m| abi::lock(s, m, (k, kl, lease)));
                    loop {
                        match attempt {
                            LockAttempt::Done(code) => return code,
                            LockAttempt::Retry { key, after } => {
                                // Parked: the worker runs other sandboxes.
                                tokio::time::sleep(after).await;
                                let state = c.data().state.clone();
                                attempt = abi::lock_again(state.as_deref(), key, lease, after);
                            }
                        }
                    }
                })
            },
        )?;
    } else {
        linker.func_wrap(
            "luge",
            "state_lock",
            |mut c: C<'_>, k: i32, kl: i32, lease: i32| {
                with(&mut c, |s, m| abi::lock_blocking(s, m, (k, kl, lease)))
            },
        )?;
    }
    Ok(())
}
