//! The `luge` import module's state functions (host API v1) on WAMR:
//! natives registered once per process with the call natives. Each hands
//! the guest's memory and the invocation's state
//! ([`luge_core::state::on_this_thread`]) to [`luge_core::state::abi`]. A
//! WAMR sandbox cannot park, so `state_lock` sleeps while it waits.

use std::ffi::c_void;

use luge_core::state::{GuestMemory, StateError, abi, on_this_thread};
use wamrx_sys as sys;

/// The guest memory of a native's exec env.
struct Guest(sys::wasm_exec_env_t);

impl Guest {
    fn slice(&mut self, ptr: i32, len: usize) -> Result<&mut [u8], StateError> {
        let len = i32::try_from(len).map_err(|_| StateError::BadArgument)?;
        // SAFETY: `Guest` is only made from the live exec env WAMR passed
        // to the native that is running.
        unsafe { crate::calls::guest(self.0, ptr, len) }.map_err(|_| StateError::BadArgument)
    }
}

impl GuestMemory for Guest {
    fn read(&mut self, ptr: i32, len: i32) -> Result<Vec<u8>, StateError> {
        let len = usize::try_from(len).map_err(|_| StateError::BadArgument)?;
        Ok(self.slice(ptr, len)?.to_vec())
    }

    fn write(&mut self, ptr: i32, bytes: &[u8]) -> Result<(), StateError> {
        self.slice(ptr, bytes.len())?.copy_from_slice(bytes);
        Ok(())
    }
}

fn with<T>(
    env: sys::wasm_exec_env_t,
    f: impl FnOnce(Option<&dyn luge_core::state::State>, &mut dyn GuestMemory) -> T,
) -> T {
    let state = on_this_thread::current();
    f(state.as_deref(), &mut Guest(env))
}

type Env = sys::wasm_exec_env_t;

unsafe extern "C" fn get(e: Env, k: i32, kl: i32, b: i32, bl: i32, f: i32) -> i64 {
    with(e, |s, m| abi::get(s, m, (k, kl, b, bl, f)))
}

unsafe extern "C" fn set(e: Env, k: i32, kl: i32, v: i32, vl: i32, f: i32) -> i32 {
    with(e, |s, m| abi::set(s, m, (k, kl, v, vl, f)))
}

unsafe extern "C" fn delete(e: Env, k: i32, kl: i32, f: i32) -> i32 {
    with(e, |s, m| abi::delete(s, m, (k, kl, f)))
}

unsafe extern "C" fn append(e: Env, k: i32, kl: i32, v: i32, vl: i32, f: i32) -> i64 {
    with(e, |s, m| abi::append(s, m, (k, kl, v, vl, f)))
}

#[allow(clippy::too_many_arguments)] // the import's signature
unsafe extern "C" fn cas(e: Env, k: i32, kl: i32, o: i32, ol: i32, n: i32, nl: i32, f: i32) -> i32 {
    with(e, |s, m| abi::cas(s, m, (k, kl, o, ol, n, nl, f)))
}

unsafe extern "C" fn add(e: Env, k: i32, kl: i32, d: i64, f: i32) -> i64 {
    with(e, |s, m| abi::add(s, m, (k, kl, d, f)))
}

unsafe extern "C" fn pull(e: Env, k: i32, kl: i32) -> i32 {
    with(e, |s, m| abi::pull(s, m, (k, kl)))
}

unsafe extern "C" fn push(e: Env, k: i32, kl: i32) -> i32 {
    with(e, |s, m| abi::push(s, m, (k, kl)))
}

unsafe extern "C" fn lock(e: Env, k: i32, kl: i32, lease: i32) -> i32 {
    with(e, |s, m| abi::lock_blocking(s, m, (k, kl, lease)))
}

unsafe extern "C" fn unlock(e: Env, k: i32, kl: i32) -> i32 {
    with(e, |s, m| abi::unlock(s, m, (k, kl)))
}

/// The natives: name, function, WAMR signature.
pub(crate) fn natives() -> [(
    &'static std::ffi::CStr,
    *mut c_void,
    &'static std::ffi::CStr,
); 10] {
    [
        (c"state_get", get as *mut c_void, c"(iiiii)I"),
        (c"state_set", set as *mut c_void, c"(iiiii)i"),
        (c"state_delete", delete as *mut c_void, c"(iii)i"),
        (c"state_append", append as *mut c_void, c"(iiiii)I"),
        (c"state_cas", cas as *mut c_void, c"(iiiiiii)i"),
        (c"state_add", add as *mut c_void, c"(iiIi)I"),
        (c"state_pull", pull as *mut c_void, c"(ii)i"),
        (c"state_push", push as *mut c_void, c"(ii)i"),
        (c"state_lock", lock as *mut c_void, c"(iii)i"),
        (c"state_unlock", unlock as *mut c_void, c"(ii)i"),
    ]
}
