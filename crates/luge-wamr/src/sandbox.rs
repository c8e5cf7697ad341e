//! One invocation on WAMR: stdio in memory files, WASI arguments per
//! instance, a fresh instance, the entry point under the watchdog, teardown.
//!
//! Stdio are memfds handed to WAMR as the instance's fds 0-2 (WAMR never
//! closes stdio it was given). stdout and stderr are sparse files of the
//! output cap (and a page), sealed against growing: a guest writing past
//! the cap gets an error, not the host's memory, and the bytes written are
//! the file offset.

use std::ffi::{CStr, CString, c_char};
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::time::Instant;

use luge_core::calls::{CallMode, CallTable};
use luge_core::{Invocation, LoadedModule, Outcome, SandboxError, Termination};
use wamrx_sys as sys;

use crate::ffi;
use crate::module::{WamrModule, error_text};

const WASM_PAGE: u64 = 64 << 10;

fn memfd(name: &CStr, sealing: bool) -> std::io::Result<File> {
    let flags = libc::MFD_CLOEXEC | if sealing { libc::MFD_ALLOW_SEALING } else { 0 };
    // SAFETY: `name` is a valid C string; the call creates a new fd.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// An output stream that holds at least `capture` bytes, sealed against
/// growing.
///
/// The kernel refuses a write to a sealed memfd page by page: a chunk that
/// would cross the end fails whole, so a large write past a file of exactly
/// `capture` bytes would leave nothing behind to show it was tried. One page
/// of room past `capture` (rounded up to a page) makes any write beyond
/// `capture` leave the offset past it, where the output cap sees it.
fn capped_output(name: &CStr, capture: usize) -> std::io::Result<File> {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .unwrap_or(4096)
        .max(1);
    let size = capture
        .div_ceil(page)
        .saturating_add(1)
        .saturating_mul(page);
    let file = memfd(name, true)?;
    file.set_len(size as u64)?;
    // SAFETY: `file` owns a valid memfd created with MFD_ALLOW_SEALING.
    let sealed = unsafe {
        libc::fcntl(
            file.as_raw_fd(),
            libc::F_ADD_SEALS,
            libc::F_SEAL_GROW | libc::F_SEAL_SHRINK,
        )
    };
    if sealed < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

/// What the guest wrote: the bytes before the file offset.
fn written(mut file: File) -> Vec<u8> {
    let len = file.stream_position().unwrap_or(0) as usize;
    let mut bytes = vec![0; len];
    match file.read_exact_at(&mut bytes, 0) {
        Ok(()) => bytes,
        Err(_) => Vec::new(),
    }
}

struct Streams {
    stdin: File,
    stdout: File,
    stderr: File,
}

impl Streams {
    fn new(stdin: &[u8], capture: usize) -> std::io::Result<Self> {
        let mut input = memfd(c"luge-stdin", false)?;
        input.write_all(stdin)?;
        input.seek(SeekFrom::Start(0))?;
        Ok(Self {
            stdin: input,
            stdout: capped_output(c"luge-stdout", capture)?,
            stderr: capped_output(c"luge-stderr", capture)?,
        })
    }
}

/// The exception WAMR's WASI sets for `proc_exit` (libc_wasi_wrapper.c),
/// with the prefix `wasm_runtime_set_exception` adds. WAMR has no exception
/// code in its API; its own `wasm_application_execute_main` recognises an
/// exit by this text too.
const PROC_EXIT: &str = "Exception: wasi proc exit";

/// C strings and the pointer array WAMR reads them through; both live until
/// the instance is gone.
struct CStringList {
    _strings: Vec<CString>,
    pointers: Vec<*const c_char>,
}

impl CStringList {
    fn new(items: impl IntoIterator<Item = String>) -> Result<Self, SandboxError> {
        let strings = items
            .into_iter()
            .map(|s| CString::new(s).map_err(|_| SandboxError::Nul))
            .collect::<Result<Vec<_>, _>>()?;
        let pointers = strings.iter().map(|s| s.as_ptr()).collect();
        Ok(Self {
            _strings: strings,
            pointers,
        })
    }

    fn len(&self) -> u32 {
        self.pointers.len() as u32
    }

    fn as_mut_ptr(&mut self) -> *mut *const c_char {
        if self.pointers.is_empty() {
            std::ptr::null_mut()
        } else {
            self.pointers.as_mut_ptr()
        }
    }
}

/// Instantiation arguments, destroyed on drop.
struct InstantiationArgs(*mut sys::InstantiationArgs2);

impl Drop for InstantiationArgs {
    fn drop(&mut self) {
        // SAFETY: created by `wasm_runtime_instantiation_args_create`, freed
        // once.
        unsafe { sys::wasm_runtime_instantiation_args_destroy(self.0) };
    }
}

/// A live instance with its exec env, torn down on drop.
struct Instance {
    instance: sys::wasm_module_inst_t,
    exec_env: sys::wasm_exec_env_t,
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: both were created for this run and are destroyed once, the
        // exec env first; the watchdog guard was dropped before this.
        unsafe {
            if !self.exec_env.is_null() {
                sys::wasm_runtime_destroy_exec_env(self.exec_env);
            }
            sys::wasm_runtime_deinstantiate(self.instance);
        }
    }
}

/// An instance the watchdog may terminate from its thread.
struct Terminable(sys::wasm_module_inst_t);

// SAFETY: the pointer is only used for `wasm_runtime_terminate`, which WAMR
// documents as callable from another thread, and only while the watchdog
// entry exists, which the guard removes before the instance is torn down.
unsafe impl Send for Terminable {}

impl Terminable {
    fn terminate(&self) {
        // SAFETY: see the `Send` impl: the instance is alive while the
        // watchdog may call this.
        unsafe { sys::wasm_runtime_terminate(self.0) };
    }
}

/// Runs `invocation` in a fresh instance of `module`.
pub(crate) fn run(module: &WamrModule, invocation: Invocation) -> Outcome {
    let started = Instant::now();
    let limits = invocation.action.limits;
    let streams = match Streams::new(&invocation.stdin, limits.capture_bytes()) {
        Ok(streams) => streams,
        Err(e) => return Outcome::failed(format!("stdio for the sandbox: {e}")),
    };
    let termination = match execute(module, &invocation, &streams, started) {
        Ok(termination) => termination,
        Err(error) => error.into(),
    };
    Outcome {
        termination,
        stdout: written(streams.stdout),
        stderr: written(streams.stderr),
        elapsed: started.elapsed(),
    }
    .cap_output(limits.max_output_bytes)
}

/// How WAMR's instantiation ends its message when a data or element
/// segment does not fit (`wasm_runtime.c`, reference types on): a trap.
const SEGMENT_TRAPS: [&str; 2] = ["out of bounds memory access", "out of bounds table access"];

fn execute(
    module: &WamrModule,
    invocation: &Invocation,
    streams: &Streams,
    started: Instant,
) -> Result<Termination, SandboxError> {
    if !ffi::ensure_thread_env() {
        return Err(SandboxError::Engine("WAMR could not set up this thread"));
    }
    let action = &invocation.action;
    let limits = action.limits;
    let mut wasi = WasiArgs::new(invocation)?;
    let entry = CString::new(action.entry.as_str())
        .map_err(|_| SandboxError::NoEntry(action.entry.clone()))?;
    let max_pages = u32::try_from((limits.memory_bytes / WASM_PAGE).max(1)).unwrap_or(u32::MAX);
    if module.initial_pages > u64::from(max_pages) {
        // WAMR would raise the maximum to the initial size and allocate it.
        return Ok(Termination::OutOfMemory {
            limit_bytes: limits.memory_bytes,
        });
    }
    let instance = match instantiate(module, &mut wasi, streams, max_pages)? {
        Ok(instance) => instance,
        Err(trapped) => return Ok(trapped),
    };
    let functions = entry_points(module, &instance, &entry, &action.entry)?;
    let _caller_growth = ffi::RestoreGrowth(ffi::reset_growth(
        limits.memory_bytes,
        module.declared_max_bytes,
    ));
    let (returned, timed_out) = call(module, invocation, &instance, functions, started);
    // SAFETY: live instance; the returned string is owned by it and copied
    // before the instance goes.
    let exception = unsafe {
        let text = sys::wasm_runtime_get_exception(instance.instance);
        (!text.is_null()).then(|| CStr::from_ptr(text).to_string_lossy().into_owned())
    };
    Ok(if timed_out {
        Termination::TimedOut(limits.timeout)
    } else if returned {
        Termination::Exited(0)
    } else if exception.as_deref() == Some(PROC_EXIT) {
        // SAFETY: live instance.
        let code = unsafe { sys::wasm_runtime_get_wasi_exit_code(instance.instance) };
        Termination::exit(code as i32)
    } else if ffi::memory_was_refused() {
        Termination::OutOfMemory {
            limit_bytes: limits.memory_bytes,
        }
    } else {
        Termination::Trapped(exception.unwrap_or_else(|| "unknown exception".to_owned()))
    })
}

/// An invocation's WASI arguments as WAMR takes them: argv, the
/// environment as `KEY=value`, and each granted directory as
/// `guest::host`.
struct WasiArgs {
    argv: CStringList,
    env: CStringList,
    dirs: CStringList,
}

impl WasiArgs {
    fn new(invocation: &Invocation) -> Result<Self, SandboxError> {
        Ok(Self {
            argv: CStringList::new(invocation.argv().map(str::to_owned))?,
            env: CStringList::new(
                invocation
                    .env()
                    .into_iter()
                    .map(|(k, v)| format!("{k}={v}")),
            )?,
            dirs: CStringList::new(
                invocation
                    .action
                    .capabilities
                    .dirs
                    .iter()
                    .map(|d| format!("{}::{}", d.guest, d.path().display())),
            )?,
        })
    }
}

/// A new instance of `module` with `wasi`'s arguments, `streams` as its
/// stdio, at most `max_pages` of memory, and its execution environment;
/// `Ok(Err(_))` where instantiating it trapped.
fn instantiate(
    module: &WamrModule,
    wasi: &mut WasiArgs,
    streams: &Streams,
    max_pages: u32,
) -> Result<Result<Instance, Termination>, SandboxError> {
    let mut raw_args = std::ptr::null_mut();
    // SAFETY: WAMR allocates the arguments object and stores it in
    // `raw_args`; ownership passes to the guard below.
    if !unsafe { sys::wasm_runtime_instantiation_args_create(&mut raw_args) } || raw_args.is_null()
    {
        return Err(SandboxError::Engine(
            "WAMR could not allocate instantiation arguments",
        ));
    }
    let args = InstantiationArgs(raw_args);
    // SAFETY: every pointer handed over stays valid until the instance is
    // made: `wasi`'s lists and `streams` live on the caller's stack frame.
    // WAMR copies the WASI arguments into the instance at instantiation.
    unsafe {
        sys::wasm_runtime_instantiation_args_set_default_stack_size(
            args.0,
            module.config.stack_bytes,
        );
        sys::wasm_runtime_instantiation_args_set_host_managed_heap_size(args.0, 0);
        sys::wasm_runtime_instantiation_args_set_max_memory_pages(args.0, max_pages);
        sys::wasm_runtime_instantiation_args_set_wasi_arg(
            args.0,
            wasi.argv.as_mut_ptr().cast(),
            wasi.argv.len() as i32,
        );
        sys::wasm_runtime_instantiation_args_set_wasi_env(
            args.0,
            wasi.env.as_mut_ptr(),
            wasi.env.len(),
        );
        sys::wasm_runtime_instantiation_args_set_wasi_dir(
            args.0,
            std::ptr::null_mut(),
            0,
            wasi.dirs.as_mut_ptr(),
            wasi.dirs.len(),
        );
        sys::wasm_runtime_instantiation_args_set_wasi_stdio(
            args.0,
            i64::from(streams.stdin.as_raw_fd()),
            i64::from(streams.stdout.as_raw_fd()),
            i64::from(streams.stderr.as_raw_fd()),
        );
    }
    let mut error = [0 as c_char; 256];
    let instance = {
        let _serialized = module
            .instantiating
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // SAFETY: `module.module` is a loaded module; `args` is valid; the
        // error buffer's length is passed with it.
        unsafe {
            sys::wasm_runtime_instantiate_ex2(
                module.module,
                args.0,
                error.as_mut_ptr(),
                error.len() as u32,
            )
        }
    };
    drop(args);
    if instance.is_null() {
        let text = error_text(&error);
        // A data or element segment out of bounds traps while the module
        // is instantiated, as the spec has it: a trap, as on every engine.
        // WAMR says so only in words.
        return if SEGMENT_TRAPS.iter().any(|trap| text.ends_with(trap)) {
            Ok(Err(Termination::Trapped(text)))
        } else {
            Err(SandboxError::Instantiate(text.into()))
        };
    }
    let mut instance = Instance {
        instance,
        exec_env: std::ptr::null_mut(),
    };
    // SAFETY: `instance.instance` is live; the stack size is WAMR's to
    // allocate.
    instance.exec_env =
        unsafe { sys::wasm_runtime_create_exec_env(instance.instance, module.config.stack_bytes) };
    if instance.exec_env.is_null() {
        return Err(SandboxError::Engine(
            "WAMR could not create an execution environment",
        ));
    }
    Ok(Ok(instance))
}

/// The functions an invocation calls, in order: the start function WAMR
/// did not run at instantiation (see `luge_core::start`), if the module
/// has one, then the entry point `entry` (named `name`).
fn entry_points(
    module: &WamrModule,
    instance: &Instance,
    entry: &CStr,
    name: &str,
) -> Result<Vec<sys::wasm_function_inst_t>, SandboxError> {
    let mut functions = Vec::with_capacity(2);
    if module.start {
        let start = c"luge:start";
        debug_assert_eq!(start.to_bytes(), luge_core::start::START_EXPORT.as_bytes());
        // SAFETY: live instance, NUL-terminated name.
        let start = unsafe { sys::wasm_runtime_lookup_function(instance.instance, start.as_ptr()) };
        if start.is_null() {
            return Err(SandboxError::Engine("the moved start function is missing"));
        }
        functions.push(start);
    }
    // SAFETY: live instance, NUL-terminated name.
    let function = unsafe { sys::wasm_runtime_lookup_function(instance.instance, entry.as_ptr()) };
    // Only an entry point (neither `luge:start` nor a function of another
    // type than `() -> ()`; see `WamrModule::new`).
    if function.is_null() || !module.exports.contains(name) {
        return Err(SandboxError::NoEntry(name.to_owned()));
    }
    functions.push(function);
    Ok(functions)
}

/// Calls `functions` in order on `instance`, each under the invocation's
/// watchdog, with its calls and state on this thread: whether all
/// returned, and whether the time limit ended one.
fn call(
    module: &WamrModule,
    invocation: &Invocation,
    instance: &Instance,
    functions: Vec<sys::wasm_function_inst_t>,
    started: Instant,
) -> (bool, bool) {
    let calls = CallTable::new(invocation.calls.clone(), CallMode::Fused);
    let target = Terminable(instance.instance);
    let watch = module.watchdog.watch(
        started + invocation.action.limits.timeout,
        Box::new(move || target.terminate()),
        &invocation.cancel,
    );
    let state = invocation.state.clone();
    let returned = luge_core::calls::on_this_thread::with(calls, || {
        luge_core::state::on_this_thread::with(state, || {
            functions.into_iter().all(|function| {
                // SAFETY: live exec env and function of this instance; the
                // start function, `_start` and named entries take no
                // arguments and return none, so no argv.
                unsafe {
                    sys::wasm_runtime_call_wasm(
                        instance.exec_env,
                        function,
                        0,
                        std::ptr::null_mut(),
                    )
                }
            })
        })
    });
    (returned, watch.fired())
}

impl LoadedModule for WamrModule {
    fn has_export(&self, name: &str) -> bool {
        self.exports.contains(name)
    }

    fn run(&self, invocation: Invocation) -> Outcome {
        run(self, invocation)
    }

    fn code_size(&self) -> usize {
        // The interpreter's code is the Wasm it keeps, plus what its loader
        // derives from it (not reported by WAMR).
        self._bytes.len()
    }
}
