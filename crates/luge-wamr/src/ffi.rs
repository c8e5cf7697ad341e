//! The process-wide parts of WAMR: one runtime initialization, each
//! thread's WAMR environment, and the memory-refusal callback.

use std::cell::Cell;
use std::sync::OnceLock;

use wamrx_sys as sys;

/// Why WAMR could not be set up.
#[derive(Debug, Clone, Copy, thiserror::Error)]
pub(crate) enum InitError {
    #[error("WAMR failed to initialize")]
    Runtime,
    #[error(transparent)]
    Natives(#[from] crate::hostapi::NativesRefused),
}

unsafe extern "C" {
    /// WAMR's platform layer: the signal that wakes a thread blocked in a
    /// WASI call (`posix_blocking_op.c`), SIGUSR1 unless set before the
    /// runtime starts.
    fn os_set_signal_number_for_blocking_op(signo: std::ffi::c_int);
}

/// The signal WAMR wakes blocked threads with. Not its default SIGUSR1:
/// WAMR takes over that signal's handler and leaves it blocked on every
/// thread it ran on, and SIGUSR1 is how Wasmer interrupts a guest at its
/// time limit, so in a process with both (luge-diff, the test suite) a
/// Wasmer guest that looped on a thread WAMR had used was never stopped.
/// SIGUSR2 is not used by Wasmtime, Wasmer or the Rust runtime.
const BLOCKING_OP_SIGNAL: std::ffi::c_int = libc::SIGUSR2;

/// Initializes the WAMR runtime once per process.
pub(crate) fn init_runtime() -> Result<(), InitError> {
    static INIT: OnceLock<Result<(), InitError>> = OnceLock::new();
    *INIT.get_or_init(|| {
        // SAFETY: sets a global read when the runtime initializes, below;
        // nothing runs WAMR yet (this is the once-only initialization).
        unsafe { os_set_signal_number_for_blocking_op(BLOCKING_OP_SIGNAL) };
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

/// The memory growth rules of the instance running on a thread, and
/// whether Luge's limit refused one of its growths.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Growth {
    /// Set when a growth was refused at Luge's limit: the trap that
    /// follows is the memory limit.
    refused: bool,
    /// Luge's limit, bytes.
    limit: u64,
    /// The module's own declared maximum, bytes.
    declared: Option<u64>,
}

thread_local! {
    static GROWTH: Cell<Growth> = const {
        Cell::new(Growth { refused: false, limit: u64::MAX, declared: None })
    };
    static THREAD_ENV: ThreadEnv = ThreadEnv::new();
}

unsafe extern "C" fn memory_refused(
    inc_page_count: u32,
    current_memory_size: u64,
    _memory_index: u32,
    reason: sys::enlarge_memory_error_reason_t,
    _instance: sys::wasm_module_inst_t,
    _exec_env: sys::wasm_exec_env_t,
    _user_data: *mut std::ffi::c_void,
) {
    if reason == sys::MAX_SIZE_REACHED {
        GROWTH.with(|g| {
            let mut growth = g.get();
            let desired = current_memory_size
                .saturating_add(u64::from(inc_page_count).saturating_mul(WASM_PAGE));
            growth.refused |=
                luge_core::limits::refused_by_limit(desired, growth.declared, growth.limit);
            g.set(growth);
        });
    }
}

/// Bytes in a Wasm page.
const WASM_PAGE: u64 = 64 << 10;

/// Sets this thread's growth rules for a run (Luge's `limit` and the
/// module's `declared` maximum, bytes) with the refusal flag cleared;
/// returns the previous ones, which a fused callee (run on its caller's
/// thread) puts back with [`RestoreGrowth`].
pub(crate) fn reset_growth(limit: u64, declared: Option<u64>) -> Growth {
    GROWTH.with(|g| {
        g.replace(Growth {
            refused: false,
            limit,
            declared,
        })
    })
}

/// Puts back the rules [`reset_growth`] returned when dropped.
pub(crate) struct RestoreGrowth(pub Growth);

impl Drop for RestoreGrowth {
    fn drop(&mut self) {
        GROWTH.with(|g| g.set(self.0));
    }
}

/// Whether a memory growth was refused at Luge's limit on this thread
/// since the reset.
pub(crate) fn memory_was_refused() -> bool {
    GROWTH.with(|g| g.get().refused)
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
