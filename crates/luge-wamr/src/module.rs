//! A parsed module, shared by every container running the same code.

use std::collections::HashSet;
use std::ffi::CStr;
use std::sync::{Arc, Mutex};

use wamrx_sys as sys;

use luge_watchdog::Watchdog;

use crate::WamrConfig;

/// Why WAMR refused a module.
#[derive(Debug, thiserror::Error)]
pub enum ModuleError {
    /// WAMR's loader said no.
    #[error("{0}")]
    Refused(String),
    /// Larger than WAMR's 32-bit sizes.
    #[error("module of {0} bytes is too large")]
    TooLarge(usize),
    /// It exports a name Luge keeps for itself.
    #[error(transparent)]
    ReservedExport(#[from] luge_core::start::ReservedExport),
    /// Its memory declarations could not be read.
    #[error("reading its memories")]
    Memories(#[source] wasmparser::BinaryReaderError),
}

/// A module loaded into WAMR.
pub struct WamrModule {
    pub(crate) module: sys::wasm_module_t,
    /// WAMR's interpreter refers into the bytes it loaded for as long as the
    /// module lives: they are kept here, never moved or touched again.
    pub(crate) _bytes: Box<[u8]>,
    pub(crate) exports: HashSet<String>,
    /// Whether it has a start function, moved to
    /// [`START_EXPORT`](luge_core::start::START_EXPORT) (see [`luge_core::start`]).
    pub(crate) start: bool,
    /// The largest initial size of its memories, in pages: WAMR raises a
    /// maximum set below it to it (`wasm_runtime_get_max_mem`), so the
    /// sandbox checks it against the limit before instantiating.
    pub(crate) initial_pages: u64,
    /// The declared maximum of its memory in bytes (WAMR takes one
    /// memory), `None` without one.
    pub(crate) declared_max_bytes: Option<u64>,
    pub(crate) config: WamrConfig,
    pub(crate) watchdog: Arc<Watchdog>,
    /// WAMR does not document instantiating one module from several threads
    /// at once; instantiation is short, so it is serialized per module.
    pub(crate) instantiating: Mutex<()>,
}

// SAFETY: after loading, WAMR only reads the module; the one operation that
// might touch shared module state, instantiation, is serialized by
// `instantiating`. The owned bytes never change.
unsafe impl Send for WamrModule {}
// SAFETY: as above.
unsafe impl Sync for WamrModule {}

impl std::fmt::Debug for WamrModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WamrModule")
            .field("bytes", &self._bytes.len())
            .finish_non_exhaustive()
    }
}

/// Reads WAMR's NUL-terminated error buffer.
pub(crate) fn error_text(buffer: &[std::ffi::c_char]) -> String {
    // SAFETY: WAMR writes a NUL-terminated string into the buffer it was
    // given (zero-initialized, so it is terminated even if WAMR wrote
    // nothing); the buffer outlives this borrow.
    unsafe { CStr::from_ptr(buffer.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

impl WamrModule {
    /// Loads `wasm` (kept for the module's life).
    pub fn load(
        wasm: Vec<u8>,
        config: &WamrConfig,
        watchdog: Arc<Watchdog>,
    ) -> Result<Self, ModuleError> {
        let (initial_pages, declared_max_bytes) =
            memory_sizes(&wasm).map_err(ModuleError::Memories)?;
        let (wasm, start) = luge_core::start::defer_start(wasm)?;
        let mut bytes = wasm.into_boxed_slice();
        let size = u32::try_from(bytes.len()).map_err(|_| ModuleError::TooLarge(bytes.len()))?;
        let mut error = [0 as std::ffi::c_char; 256];
        // SAFETY: `bytes` is a live, exclusively owned buffer of `size`
        // bytes that stays at this address (boxed, never reallocated) until
        // after `wasm_runtime_unload` in Drop; the error buffer's length is
        // passed with it.
        let module = unsafe {
            sys::wasm_runtime_load(
                bytes.as_mut_ptr(),
                size,
                error.as_mut_ptr(),
                error.len() as u32,
            )
        };
        if module.is_null() {
            return Err(ModuleError::Refused(error_text(&error)));
        }
        let mut exports = HashSet::new();
        // SAFETY: `module` is a valid loaded module.
        let count = unsafe { sys::wasm_runtime_get_export_count(module) };
        for index in 0..count.max(0) {
            // SAFETY: all-zero is a valid `wasm_export_t` (null name, kind 0)
            // for WAMR to overwrite.
            let mut export: sys::wasm_export_t = unsafe { std::mem::zeroed() };
            // SAFETY: `index` is within the count WAMR reported.
            unsafe { sys::wasm_runtime_get_export_type(module, index, &mut export) };
            if export.kind != sys::WASM_IMPORT_EXPORT_KIND_FUNC || export.name.is_null() {
                continue;
            }
            // SAFETY: for a function export WAMR sets `u.func_type`, a type
            // owned by the module (read only where it is not null); its
            // export names are NUL-terminated strings owned by the module,
            // alive while it is.
            let (name, params, results) = unsafe {
                let ty = export.u.func_type;
                if ty.is_null() {
                    continue;
                }
                (
                    CStr::from_ptr(export.name).to_string_lossy(),
                    sys::wasm_func_type_get_param_count(ty),
                    sys::wasm_func_type_get_result_count(ty),
                )
            };
            if luge_core::runtime::is_entry_point(&name, params as usize, results as usize) {
                exports.insert(name.into_owned());
            }
        }
        Ok(Self {
            module,
            _bytes: bytes,
            exports,
            start,
            initial_pages,
            declared_max_bytes,
            config: config.clone(),
            watchdog,
            instantiating: Mutex::new(()),
        })
    }
}

/// The largest initial size, in pages, of the memories `wasm` defines or
/// imports (0 without any), and the declared maximum in bytes of the
/// first (`None` without one).
fn memory_sizes(wasm: &[u8]) -> Result<(u64, Option<u64>), wasmparser::BinaryReaderError> {
    let mut largest = 0;
    let mut first: Option<Option<u64>> = None;
    let mut see = |memory: wasmparser::MemoryType| {
        largest = largest.max(memory.initial);
        let page = 1u64 << memory.page_size_log2.unwrap_or(16);
        first.get_or_insert(memory.maximum.map(|max| max.saturating_mul(page)));
    };
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        match payload? {
            wasmparser::Payload::MemorySection(memories) => {
                for memory in memories {
                    see(memory?);
                }
            }
            wasmparser::Payload::ImportSection(imports) => {
                for import in imports.into_imports() {
                    if let wasmparser::TypeRef::Memory(memory) = import?.ty {
                        see(memory);
                    }
                }
            }
            _ => {}
        }
    }
    Ok((largest, first.flatten()))
}

impl Drop for WamrModule {
    fn drop(&mut self) {
        // SAFETY: the module was loaded by `load` and is unloaded once; every
        // instance of it held an `Arc` to this value, so none is left.
        unsafe { sys::wasm_runtime_unload(self.module) };
    }
}
