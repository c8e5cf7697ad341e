//! Host API v1 (import module `luge`) on WAMR: the memory adapter and the
//! natives, expanded from [`luge_core::for_each_host_import!`] and
//! registered once per process; the bodies are
//! [`luge_core::hostapi::imports`].
//!
//! A WAMR sandbox runs to completion on its thread, so callees are fused
//! (`call_wait` runs the callee on the waiting thread) and waits block. The
//! invocation's calls and state are this thread's ([`ThisThread`]),
//! installed around the entry call.

use std::ffi::{CStr, CString, c_void};

use luge_core::hostapi::memory::within;
use luge_core::hostapi::{self, GuestMemory, MemoryError, ThisThread, imports};
use wamrx_sys as sys;

/// WAMR refused the natives (or their names).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("WAMR refused the host API natives")]
pub(crate) struct NativesRefused;

/// The linear memory of the instance a native was called from.
struct ExecEnv(sys::wasm_exec_env_t);

impl ExecEnv {
    /// The instance's default memory, and its size in bytes (`None`: it
    /// has none).
    fn memory(&self) -> Option<(sys::wasm_memory_inst_t, u64)> {
        // SAFETY: `ExecEnv` is only made from the live exec env WAMR passed
        // to the native that is running; its instance is live, and these
        // read the memory's bounds only. (Not `validate_app_addr`: a range
        // it refuses raises an exception in the instance, which would trap
        // the guest after the native returns its error code.)
        unsafe {
            let instance = sys::wasm_runtime_get_module_inst(self.0);
            let memory = sys::wasm_runtime_get_default_memory(instance);
            if memory.is_null() {
                return None;
            }
            let pages = sys::wasm_memory_get_cur_page_count(memory);
            let size = pages.checked_mul(sys::wasm_memory_get_bytes_per_page(memory))?;
            Some((memory, size))
        }
    }

    /// `len` bytes of guest memory at `offset`, if they are inside it.
    fn slice(&mut self, offset: u64, len: usize) -> Result<&mut [u8], MemoryError> {
        let outside = MemoryError::OutOfBounds {
            ptr: offset,
            len: len as u64,
        };
        let (memory, size) = self.memory().ok_or(MemoryError::NoMemory)?;
        if !within(offset, len as u64, size) {
            return Err(outside);
        }
        if len == 0 {
            return Ok(&mut []);
        }
        let offset = usize::try_from(offset).map_err(|_| outside)?;
        // SAFETY: `[offset, offset + len)` was just checked inside the live
        // instance's linear memory, which does not move while this native
        // runs (the guest is suspended in it and nothing here grows it).
        Ok(unsafe {
            let base = sys::wasm_memory_get_base_address(memory).cast::<u8>();
            std::slice::from_raw_parts_mut(base.add(offset), len)
        })
    }
}

impl GuestMemory for ExecEnv {
    fn contains(&self, offset: u64, len: u64) -> bool {
        self.memory()
            .is_some_and(|(_, size)| within(offset, len, size))
    }

    fn copy_out(&mut self, offset: u64, into: &mut [u8]) -> Result<(), MemoryError> {
        into.copy_from_slice(self.slice(offset, into.len())?);
        Ok(())
    }

    fn copy_in(&mut self, offset: u64, bytes: &[u8]) -> Result<(), MemoryError> {
        self.slice(offset, bytes.len())?.copy_from_slice(bytes);
        Ok(())
    }
}

/// WAMR's signature letter of a value type.
macro_rules! letter {
    (i32) => {
        "i"
    };
    (i64) => {
        "I"
    };
}

macro_rules! register {
    ($($name:ident($($arg:ident: $ty:ident),*) -> $ret:ident;)*) => {
        /// One native per import: this thread's invocation, blocking.
        mod natives {
            use super::*;
            $(
                #[allow(clippy::too_many_arguments)] // the import's signature
                pub(super) unsafe extern "C" fn $name(
                    exec_env: sys::wasm_exec_env_t,
                    $($arg: $ty),*
                ) -> $ret {
                    let mut host = ThisThread(ExecEnv(exec_env));
                    let body = |p: hostapi::Parts<'_>| imports::$name(p, $($arg),*);
                    hostapi::call_blocking(&mut host, body) as $ret
                }
            )*
        }

        /// The natives: name, function, WAMR signature.
        fn natives() -> Vec<(&'static str, *mut c_void, &'static str)> {
            vec![$((
                stringify!($name),
                natives::$name as *mut c_void,
                concat!("(", $(letter!($ty),)* ")", letter!($ret)),
            )),*]
        }
    };
}
luge_core::for_each_host_import!(register);

/// Registers the natives with WAMR; called once, at runtime initialization.
pub(crate) fn register() -> Result<(), NativesRefused> {
    let mut symbols = Vec::new();
    for (name, func, signature) in natives() {
        // WAMR keeps the names and signatures: they live for the process.
        let leak = |text: &str| -> Result<&'static CStr, NativesRefused> {
            let text = CString::new(text).map_err(|_| NativesRefused)?;
            Ok(Box::leak(text.into_boxed_c_str()))
        };
        let (name, signature) = (leak(name)?, leak(signature)?);
        symbols.push(sys::NativeSymbol {
            symbol: name.as_ptr(),
            func_ptr: func,
            signature: signature.as_ptr(),
            attachment: std::ptr::null_mut(),
        });
    }
    // WAMR keeps the array too.
    let symbols: &'static mut [sys::NativeSymbol] = Box::leak(symbols.into_boxed_slice());
    let count = u32::try_from(symbols.len()).map_err(|_| NativesRefused)?;
    // SAFETY: the module name and the symbol array (names, signatures,
    // functions of the declared C signatures) are valid for the process.
    let module = c"luge";
    if unsafe { sys::wasm_runtime_register_natives(module.as_ptr(), symbols.as_mut_ptr(), count) } {
        Ok(())
    } else {
        Err(NativesRefused)
    }
}
