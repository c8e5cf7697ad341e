//! How Luge configures Wasmtime, and why each setting is what it is.

use std::time::Duration;

use luge_core::EngineError;
use luge_core::limits::MAX_MEMORY_BYTES;
use wasmtime::{Config, Enabled, InstanceAllocationStrategy, PoolingAllocationConfig};

/// Engine settings chosen by the operator at start.
#[derive(Debug, Clone)]
pub struct WasmtimeConfig {
    /// Compile for another target triple (the precompiler's `--target`).
    /// `None` compiles for this host.
    pub target: Option<String>,
    /// Use the pooling instance allocator (warm slots, copy-on-write memory
    /// images). Off only where virtual address space is scarce.
    pub pooling: bool,
    /// Sandboxes that can exist at once (pool slots).
    pub max_sandboxes: u32,
    /// Largest memory any sandbox may have: the operator's maximum.
    pub max_memory_bytes: u64,
    /// Epoch tick: the granularity of time limits (and later of preemption).
    pub epoch_tick: Duration,
    /// Meter fuel so `limits.fuel` can be enforced; costs some speed.
    pub fuel: bool,
    /// Bytes of ended sandboxes' memory the pool may keep resident while it
    /// batches their decommits (see [`DEFAULT_RESIDENT_BUDGET`]).
    pub resident_budget_bytes: u64,
}

/// Sandboxes that may exist at once (explained where it is set).
pub const DEFAULT_MAX_SANDBOXES: u32 = luge_core::limits::DEFAULT_SANDBOXES;
/// One millisecond: time limits are honoured within a millisecond, and the
/// ticker sleeps whenever no sandbox runs, so an idle executor does not wake.
pub const DEFAULT_EPOCH_TICK: Duration = Duration::from_millis(1);
/// Linear-memory bytes a slot keeps resident between sandboxes where the
/// kernel has `PAGEMAP_SCAN` (Linux 6.7+): the pages a sandbox wrote, up to
/// this much, are copied back from the module's image (or zeroed) instead
/// of being decommitted, so no `madvise` runs (no TLB shootdown of the
/// other cores) and the next sandbox in the slot takes no page fault on
/// them. Only written pages are reset: a request that dirties 40 KiB of a
/// 2 MiB memory copies 40 KiB. A sandbox that wrote more decommits the
/// rest. Every warm slot may hold this much (Wasmtime keeps at most 100
/// unused warm slots): 1 MiB covers a Rust or C function's stack and first
/// heap pages at a bounded resident cost (docs/BENCHMARKS-ARCHIVE.md, issue 27).
pub(crate) const KEEP_RESIDENT_BYTES: usize = 1 << 20;
/// Without `PAGEMAP_SCAN` the first kept-resident bytes are reset whole
/// with `memset`, written or not, so only a little is kept: small functions
/// reuse hot pages, large ones pay one madvise.
pub(crate) const KEEP_RESIDENT_BYTES_NO_SCAN: usize = 64 << 10;
/// Tables are small; their first 64 KiB kept resident covers them whole.
const TABLE_KEEP_RESIDENT_BYTES: usize = 64 << 10;

/// Core instances the pool holds per sandbox (see `to_wasmtime`).
const CORE_INSTANCES_PER_SANDBOX: u32 = 8;

/// Tables the pool holds per sandbox (see `to_wasmtime`).
const TABLES_PER_SANDBOX: u32 = 4;
/// Slots whose memory is decommitted together. Each decommit (madvise) of a
/// multi-threaded process costs a TLB shootdown on every core running it;
/// batching pays that once per batch rather than once per sandbox.
pub const DECOMMIT_BATCH: usize = 32;
/// Memory of ended sandboxes that may stay resident while their slots wait
/// for the batched decommit (the default is set in luge-core). A sandbox
/// whose memory grew past its share, `budget / DECOMMIT_BATCH` (8 MiB by
/// default), gives the rest back to the OS as it ends
/// ([`WasmtimeConfig::release_above`]); so a batch holds at most the budget,
/// not 32 times the largest memory (32 slots of 256 MiB once kept 5.8 GB
/// resident), and small functions keep their batching.
pub const DEFAULT_RESIDENT_BUDGET: u64 = luge_core::limits::DEFAULT_RESIDENT_BUDGET_BYTES;

impl Default for WasmtimeConfig {
    fn default() -> Self {
        Self {
            target: None,
            pooling: true,
            max_sandboxes: DEFAULT_MAX_SANDBOXES,
            max_memory_bytes: MAX_MEMORY_BYTES,
            epoch_tick: DEFAULT_EPOCH_TICK,
            fuel: false,
            resident_budget_bytes: DEFAULT_RESIDENT_BUDGET,
        }
    }
}

/// Linear-memory bytes a pool slot keeps resident on this kernel, asked of
/// the kernel once per process (the probe is an ioctl).
pub(crate) fn keep_resident() -> usize {
    static KEEP_RESIDENT: std::sync::LazyLock<usize> = std::sync::LazyLock::new(|| {
        if PoolingAllocationConfig::is_pagemap_scan_available() {
            KEEP_RESIDENT_BYTES
        } else {
            KEEP_RESIDENT_BYTES_NO_SCAN
        }
    });
    *KEEP_RESIDENT
}

/// Which of the runtime's two engines a configuration is for.
///
/// Wasmtime's support for the component model's async ABI (WASI 0.3's
/// tasks, streams and futures, and `async func` imports such as Spin 4's)
/// is a property of the engine, and it is not free where it is unused:
/// with it, every component export call runs under the concurrent task
/// loop and every host call becomes a host task. A WASI 0.2 `wasi:http`
/// hello cost 65-70 µs of server CPU on such an engine and 50 µs on one
/// without (docs/BENCHMARKS-ARCHIVE.md, issue 49). So core modules and components
/// that need no async ABI run on a [`Synchronous`](Self::Synchronous)
/// engine, and only components that do on a
/// [`Concurrent`](Self::Concurrent) one, made when the first is seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComponentAbi {
    /// No async ABI: Wasmtime's `concurrency_support` off.
    Synchronous,
    /// The component model's async ABI on (`component_model_async`).
    Concurrent,
}

impl WasmtimeConfig {
    /// Linear-memory bytes an ended sandbox may leave resident for its slot's
    /// batched decommit; past that, they go back to the OS as it ends. With
    /// pooling off, memories are unmapped on drop and nothing waits.
    pub fn release_above(&self) -> Option<usize> {
        self.pooling.then(|| {
            usize::try_from(self.resident_budget_bytes / DECOMMIT_BATCH as u64)
                .unwrap_or(usize::MAX)
                .max(keep_resident())
        })
    }

    /// The corresponding Wasmtime configuration, for an engine of `abi`.
    pub fn to_wasmtime(&self, abi: ComponentAbi) -> Result<Config, EngineError> {
        let mut config = Config::new();
        if let Some(target) = &self.target {
            config
                .target(target)
                .map_err(|e| EngineError::config(format!("target {target}"), e))?;
        }
        // Time limits and (with the scheduler) preemption use epochs: a
        // counter check on loop back-edges, far cheaper than fuel.
        config.epoch_interruption(true);
        config.consume_fuel(self.fuel);
        // Data segments are mapped copy-on-write from an image built at load,
        // so instantiation does not copy them.
        config.memory_init_cow(true);
        // WASI 0.3 components use the component model's async ABI (tasks,
        // streams, futures); everything else runs faster without Wasmtime's
        // support for it (see `ComponentAbi`). Compiled code differs between
        // the two, and Wasmtime refuses to load one's code in the other.
        match abi {
            ComponentAbi::Synchronous => {
                config.concurrency_support(false);
            }
            ComponentAbi::Concurrent => {
                config.concurrency_support(true);
                config.wasm_component_model_async(true);
            }
        }
        if self.pooling {
            let mut pool = PoolingAllocationConfig::new();
            // A component is several core instances (its modules and
            // wit-component's shims) with one memory and a table or a
            // few: sized so that a pool
            // holds `max_sandboxes` of them as it holds that many modules.
            // Core instances and tables cost little until used; memories,
            // the address space's share, stay one per sandbox.
            pool.total_core_instances(
                self.max_sandboxes
                    .saturating_mul(CORE_INSTANCES_PER_SANDBOX),
            )
            .total_memories(self.max_sandboxes)
            .total_tables(self.max_sandboxes.saturating_mul(TABLES_PER_SANDBOX))
            // A WASI command has one memory and one table; more is a
            // module Luge refuses at load rather than a pool it sizes up.
            .max_memories_per_module(1)
            .max_tables_per_module(1)
            .max_memory_size(self.max_memory_bytes as usize)
            .linear_memory_keep_resident(keep_resident())
            .table_keep_resident(TABLE_KEEP_RESIDENT_BYTES)
            // Reset only the pages a sandbox wrote where the kernel
            // can say which (see KEEP_RESIDENT_BYTES).
            .pagemap_scan(Enabled::Auto)
            .decommit_batch_size(DECOMMIT_BATCH);
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_keeps_at_most_the_resident_budget() {
        let config = WasmtimeConfig::default();
        let share = config.release_above().expect("pooling");
        assert_eq!(share, 8 << 20);
        assert!((share * DECOMMIT_BATCH) as u64 <= DEFAULT_RESIDENT_BUDGET);
        let unpooled = WasmtimeConfig {
            pooling: false,
            ..WasmtimeConfig::default()
        };
        assert_eq!(unpooled.release_above(), None);
    }
}
