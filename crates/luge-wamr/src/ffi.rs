//! The process-wide parts of WAMR: one runtime initialization, each
//! thread's WAMR environment, and the memory-refusal callback.

use std::cell::Cell;
use std::sync::OnceLock;

use wamrx_sys as sys;

/// Initializes the WAMR runtime once per process.
/// Why WAMR could not be set up.
#[derive(Debug, Clone, Copy, thiserror::Error)]
pub(crate) enum InitError {
    #[error("WAMR failed to initialize")]
    Runtime,
    #[error(transparent)]
    Natives(#[from] crate::hostapi::NativesRefused),
}

pub(crate) fn init_runtime() -> Result<(), InitError> {
    static INIT: OnceLock<Result<(), InitError>> = OnceLock::new();
    *INIT.get_or_init(|| {
        // SAFETY: `RuntimeInitArgs` is a plain C struct for which all-zero is
        // the documented "defaults" state (WAMR's samples memset it to 0).
        let mut args: sys::RuntimeInitArgs = unsafe { std::mem::zeroed() };
        args.mem_alloc_type = sys::Alloc_With_System_Allocator;
        args.running_mode = sys::Mode_Interp;
        // SAFETY: called once (guarded by the OnceLock) with a valid,
        // initialized argument struct that outlives the call.
        if !unsafe { sys::wasm_runtime_full_init(&mut args) } {
            return Err(InitError::Runtime);
        }
        // WAMR logs to the process's stdout, which in `luge proxy` is the
        // action's log stream: keep it to fatal errors (every refusal is
        // reported through an error buffer or exception instead).
        // SAFETY: sets a global level; no other state is touched.
        unsafe { sys::wasm_runtime_set_log_level(sys::WASM_LOG_LEVEL_FATAL) };
        // SAFETY: the callback is a plain function valid for the whole
        // process; it ignores `user_data`, so null is fine.
        unsafe {
            sys::wasm_runtime_set_enlarge_mem_error_callback(
                Some(memory_refused),
                std::ptr::null_mut(),
            )
        };
        // Host API v1's calls, before any module is loaded.
        crate::hostapi::register().map_err(InitError::from)
    })
}

thread_local! {
    /// Set when a memory growth of the instance running on this thread was
    /// refused at its maximum: the trap that follows is the memory limit.
    static MEMORY_REFUSED: Cell<bool> = const { Cell::new(false) };
    static THREAD_ENV: ThreadEnv = ThreadEnv::new();
}

unsafe extern "C" fn memory_refused(
    _inc_page_count: u32,
    _current_memory_size: u64,
    _memory_index: u32,
    reason: sys::enlarge_memory_error_reason_t,
    _instance: sys::wasm_module_inst_t,
    _exec_env: sys::wasm_exec_env_t,
    _user_data: *mut std::ffi::c_void,
) {
    if reason == sys::MAX_SIZE_REACHED {
        MEMORY_REFUSED.with(|r| r.set(true));
    }
}

/// Clears this thread's memory-refusal flag before a run; returns the
/// previous value, which a fused callee (run on its caller's thread) puts
/// back with [`restore_memory_refused`].
pub(crate) fn reset_memory_refused() -> bool {
    MEMORY_REFUSED.with(|r| r.replace(false))
}

/// Puts back the flag [`reset_memory_refused`] returned when dropped.
pub(crate) struct RestoreMemoryRefused(pub bool);

impl Drop for RestoreMemoryRefused {
    fn drop(&mut self) {
        MEMORY_REFUSED.with(|r| r.set(self.0));
    }
}

/// Whether a memory growth was refused on this thread since the reset.
pub(crate) fn memory_was_refused() -> bool {
    MEMORY_REFUSED.with(Cell::get)
}

/// WAMR's per-thread environment, set up on a thread's first run and torn
/// down when the thread exits.
struct ThreadEnv {
    ready: bool,
}

impl ThreadEnv {
    fn new() -> Self {
        // SAFETY: initializes WAMR's state for the calling thread; the
        // runtime was initialized before any module could be loaded.
        Self {
            ready: unsafe { sys::wasm_runtime_init_thread_env() },
        }
    }
}

impl Drop for ThreadEnv {
    fn drop(&mut self) {
        if self.ready {
            // SAFETY: pairs with the successful init on this same thread,
            // which is exiting: no instance runs on it any more.
            unsafe { sys::wasm_runtime_destroy_thread_env() };
        }
    }
}

/// Makes sure the calling thread may run WAMR code.
pub(crate) fn ensure_thread_env() -> bool {
    THREAD_ENV.with(|env| env.ready)
}
