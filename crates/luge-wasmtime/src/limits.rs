//! The memory limit of one sandbox.
//!
//! A refused growth makes `memory.grow` return -1, which is what the guest
//! sees; most languages then abort with a trap. The limiter remembers that it
//! refused, so the trap is reported as the memory limit it really is.

use wasmtime::ResourceLimiter;

/// Tables hold function references; a million is far beyond any real module
/// and keeps a table bomb from allocating gigabytes on the host.
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

/// Store limiter for one sandbox.
#[derive(Debug)]
pub struct SandboxLimiter {
    memory_bytes: usize,
    /// Set when a growth was refused.
    pub refused: bool,
}

impl SandboxLimiter {
    /// A limiter allowing `memory_bytes` of linear memory.
    pub fn new(memory_bytes: u64) -> Self {
        Self {
            memory_bytes: usize::try_from(memory_bytes).unwrap_or(usize::MAX),
            refused: false,
        }
    }
}

impl ResourceLimiter for SandboxLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = desired <= self.memory_bytes;
        // `maximum` is the memory's declared maximum.
        self.refused |= luge_core::limits::refused_by_limit(
            desired as u64,
            maximum.map(|m| m as u64),
            self.memory_bytes as u64,
        );
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = desired <= MAX_TABLE_ELEMENTS;
        self.refused |= !allowed;
        Ok(allowed)
    }
}
