//! The `luge` import module's calls (host API v1) on WAMR: native symbols
//! registered once per process (with the state ones of [`crate::state`]). A WAMR sandbox runs to completion on its
//! thread, so callees are fused ([`luge_core::calls::CallMode::Fused`]):
//! `call_wait` runs the callee on the waiting thread. The table is
//! [`luge_core::calls::on_this_thread`]'s, installed around the entry call.

use std::ffi::c_void;

use luge_core::calls::{CallError, on_this_thread};
use wamrx_sys as sys;

/// `len` bytes of guest memory at `ptr`, or `BadArgument`.
///
/// # Safety
/// `exec_env` is the live execution environment WAMR passed to a native.
pub(crate) unsafe fn guest<'a>(
    exec_env: sys::wasm_exec_env_t,
    ptr: i32,
    len: i32,
) -> Result<&'a mut [u8], CallError> {
    let (ptr, len) = (
        u64::try_from(ptr).map_err(|_| CallError::BadArgument)?,
        usize::try_from(len).map_err(|_| CallError::BadArgument)?,
    );
    // SAFETY: a live exec env (the caller's promise) has a live instance.
    let instance = unsafe { sys::wasm_runtime_get_module_inst(exec_env) };
    // SAFETY: validation reads the instance's memory bounds only.
    if !unsafe { sys::wasm_runtime_validate_app_addr(instance, ptr, len as u64) } {
        return Err(CallError::BadArgument);
    }
    if len == 0 {
        return Ok(&mut []);
    }
    // SAFETY: `[ptr, ptr + len)` was just validated inside the instance's
    // linear memory, which does not move while this native runs (the guest
    // is suspended in it and nothing here grows memory).
    Ok(unsafe {
        let native = sys::wasm_runtime_addr_app_to_native(instance, ptr).cast::<u8>();
        std::slice::from_raw_parts_mut(native, len)
    })
}

unsafe extern "C" fn call_start(
    exec_env: sys::wasm_exec_env_t,
    name_ptr: i32,
    name_len: i32,
    in_ptr: i32,
    in_len: i32,
) -> i64 {
    // SAFETY: WAMR passes natives their live exec env.
    let args = unsafe {
        guest(exec_env, name_ptr, name_len).and_then(|name| {
            let name = String::from_utf8(name.to_vec()).map_err(|_| CallError::BadArgument)?;
            Ok((name, guest(exec_env, in_ptr, in_len)?.to_vec()))
        })
    };
    match args {
        Ok((name, input)) => on_this_thread::start(&name, input),
        Err(e) => i64::from(e.code()),
    }
}

unsafe extern "C" fn call_wait(_exec_env: sys::wasm_exec_env_t, handle: i64) -> i32 {
    on_this_thread::wait(handle)
}

unsafe extern "C" fn call_output(
    exec_env: sys::wasm_exec_env_t,
    handle: i64,
    buf_ptr: i32,
    buf_len: i32,
) -> i64 {
    on_this_thread::output(handle, |output| {
        let n = output.len().min(usize::try_from(buf_len).unwrap_or(0));
        // SAFETY: WAMR passes natives their live exec env.
        let buffer = unsafe { guest(exec_env, buf_ptr, n as i32)? };
        buffer.copy_from_slice(&output[..n]);
        Ok(output.len() as i64)
    })
}

/// Registers the natives with WAMR; called once, at runtime initialization.
pub(crate) fn register() -> Result<(), String> {
    fn symbol(
        name: &'static std::ffi::CStr,
        func: *mut c_void,
        signature: &'static std::ffi::CStr,
    ) -> sys::NativeSymbol {
        sys::NativeSymbol {
            symbol: name.as_ptr(),
            func_ptr: func,
            signature: signature.as_ptr(),
            attachment: std::ptr::null_mut(),
        }
    }
    // WAMR keeps the array: it must live for the process.
    let mut all = vec![
        symbol(c"call_start", call_start as *mut c_void, c"(iiii)I"),
        symbol(c"call_wait", call_wait as *mut c_void, c"(I)i"),
        symbol(c"call_output", call_output as *mut c_void, c"(Iii)I"),
    ];
    all.extend(
        crate::state::natives()
            .into_iter()
            .map(|(name, func, signature)| symbol(name, func, signature)),
    );
    let symbols: &'static mut [sys::NativeSymbol] = Box::leak(all.into_boxed_slice());
    let count = u32::try_from(symbols.len()).unwrap_or(0);
    // SAFETY: the module name and the symbol array (names, signatures,
    // functions of the declared C signatures) are valid for the process.
    if unsafe { sys::wasm_runtime_register_natives(c"luge".as_ptr(), symbols.as_mut_ptr(), count) }
    {
        Ok(())
    } else {
        Err("WAMR refused the luge natives".to_owned())
    }
}
