//! The memory limit: tunables that cap every memory a sandbox creates.
//!
//! Wasmer's tunables belong to the engine, but Luge's memory limit belongs
//! to the action. Memories are created while an instance is created, on the
//! thread that runs the sandbox, so the limit of the sandbox being created
//! is passed to the tunables through a thread-local ([`LimitScope`]). Each
//! memory is created with its maximum lowered to the limit, so a
//! `memory.grow` past it fails as Wasm says it may, and the memory records
//! the refusal so the outcome can say "out of memory" rather than "trap".
//!
//! The memory style (static or dynamic bounds checks) is decided from the
//! lowered type, as at compile time: lowering a maximum never turns a
//! static memory dynamic (a smaller maximum stays under the static bound).

use std::cell::RefCell;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use wasmer::sys::{BaseTunables, Target, Tunables};
use wasmer::{MemoryType, Pages, TableType};
use wasmer_vm::{
    LinearMemory, MemoryError, MemoryStyle, TableStyle, VMMemory, VMMemoryDefinition, VMTable,
    VMTableDefinition,
};

const WASM_PAGE: u64 = 64 << 10;

thread_local! {
    static CURRENT: RefCell<Option<(Pages, Arc<AtomicBool>)>> = const { RefCell::new(None) };
}

/// The limit of the sandbox being created on this thread; memories created
/// while it lives are capped by it.
pub struct LimitScope {
    refused: Arc<AtomicBool>,
    /// The scope this one covers: a fused callee's sandbox is created on
    /// its caller's thread, inside the caller's scope.
    previous: Option<(Pages, Arc<AtomicBool>)>,
}

impl LimitScope {
    /// Caps memories created on this thread at `limit_bytes` until drop.
    pub fn enter(limit_bytes: u64) -> Self {
        let pages = u32::try_from((limit_bytes / WASM_PAGE).max(1)).unwrap_or(u32::MAX);
        let refused = Arc::new(AtomicBool::new(false));
        let previous = CURRENT.with(|c| c.replace(Some((Pages(pages), Arc::clone(&refused)))));
        Self { refused, previous }
    }

    /// Whether a memory of this sandbox refused to grow past the limit.
    pub fn refused(&self) -> bool {
        self.refused.load(Ordering::Acquire)
    }
}

impl Drop for LimitScope {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// The current thread's limit, with the flag the new memory shares.
fn current_limit() -> Option<(Pages, Arc<AtomicBool>)> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Engine tunables: Wasmer's defaults for the target, plus the limit.
#[derive(Clone)]
pub struct LimitingTunables {
    base: BaseTunables,
}

impl LimitingTunables {
    /// Wasmer's default tunables for `target`.
    pub fn for_target(target: &Target) -> Self {
        Self {
            base: BaseTunables::for_target(target),
        }
    }

    fn lowered(ty: &MemoryType, limit: Pages) -> MemoryType {
        let mut lowered = *ty;
        lowered.maximum = Some(ty.maximum.map_or(limit, |max| max.min(limit)));
        lowered
    }
}

impl Tunables for LimitingTunables {
    fn memory_style(&self, memory: &MemoryType) -> MemoryStyle {
        self.base.memory_style(memory)
    }

    fn table_style(&self, table: &TableType) -> TableStyle {
        self.base.table_style(table)
    }

    fn create_host_memory(
        &self,
        ty: &MemoryType,
        style: &MemoryStyle,
    ) -> Result<VMMemory, MemoryError> {
        match current_limit() {
            None => self.base.create_host_memory(ty, style),
            Some((limit, refused)) => {
                let lowered = Self::lowered(ty, limit);
                if lowered.minimum > limit {
                    refused.store(true, Ordering::Release);
                }
                let memory = self.base.create_host_memory(&lowered, style)?;
                Ok(VMMemory(Box::new(Capped {
                    inner: memory,
                    declared: ty.maximum,
                    limit,
                    refused,
                })))
            }
        }
    }

    unsafe fn create_vm_memory(
        &self,
        ty: &MemoryType,
        style: &MemoryStyle,
        vm_definition_location: NonNull<VMMemoryDefinition>,
    ) -> Result<VMMemory, MemoryError> {
        match current_limit() {
            // SAFETY: forwarded unchanged from Wasmer, which guarantees the
            // location (this function's contract).
            None => unsafe {
                self.base
                    .create_vm_memory(ty, style, vm_definition_location)
            },
            Some((limit, refused)) => {
                let lowered = Self::lowered(ty, limit);
                if lowered.minimum > limit {
                    refused.store(true, Ordering::Release);
                }
                // SAFETY: as above; only the maximum of the type changed.
                let memory = unsafe {
                    self.base
                        .create_vm_memory(&lowered, style, vm_definition_location)?
                };
                Ok(VMMemory(Box::new(Capped {
                    inner: memory,
                    declared: ty.maximum,
                    limit,
                    refused,
                })))
            }
        }
    }

    fn create_host_table(&self, ty: &TableType, style: &TableStyle) -> Result<VMTable, String> {
        self.base.create_host_table(ty, style)
    }

    unsafe fn create_vm_table(
        &self,
        ty: &TableType,
        style: &TableStyle,
        vm_definition_location: NonNull<VMTableDefinition>,
    ) -> Result<VMTable, String> {
        // SAFETY: forwarded unchanged from Wasmer (this function's contract).
        unsafe { self.base.create_vm_table(ty, style, vm_definition_location) }
    }
}

/// A memory that records a growth refused at Luge's limit.
#[derive(Debug)]
struct Capped {
    inner: VMMemory,
    /// The module's own maximum, before it was lowered to the limit.
    declared: Option<Pages>,
    /// Luge's limit.
    limit: Pages,
    refused: Arc<AtomicBool>,
}

impl LinearMemory for Capped {
    fn ty(&self) -> MemoryType {
        self.inner.ty()
    }

    fn size(&self) -> Pages {
        self.inner.size()
    }

    fn style(&self) -> MemoryStyle {
        self.inner.style()
    }

    fn grow(&mut self, delta: Pages) -> Result<Pages, MemoryError> {
        let desired = u64::from(self.inner.size().0) + u64::from(delta.0);
        let grown = self.inner.grow(delta);
        let bytes = |pages: Pages| u64::from(pages.0) * WASM_PAGE;
        if matches!(grown, Err(MemoryError::CouldNotGrow { .. }))
            && luge_core::limits::refused_by_limit(
                desired * WASM_PAGE,
                self.declared.map(bytes),
                bytes(self.limit),
            )
        {
            self.refused.store(true, Ordering::Release);
        }
        grown
    }

    fn grow_at_least(&mut self, min_size: u64) -> Result<(), MemoryError> {
        self.inner.grow_at_least(min_size)
    }

    fn reset(&mut self) -> Result<(), MemoryError> {
        self.inner.reset()
    }

    fn vmmemory(&self) -> NonNull<VMMemoryDefinition> {
        self.inner.vmmemory()
    }

    fn try_clone(&self) -> Result<Box<dyn LinearMemory + Send + Sync + 'static>, MemoryError> {
        self.inner.try_clone().map(|memory| memory.0)
    }

    fn copy(&self) -> Result<Box<dyn LinearMemory + Send + Sync + 'static>, MemoryError> {
        self.inner.copy()
    }
}
