//! The WAMR runtime through the engine conformance suite (luge-testkit),
//! against real example actions (target/wasm, built by
//! scripts/build-actions.sh).

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::sync::Arc;

use luge_registry::ModuleRegistry;
use luge_testkit::conformance;
use luge_wamr::{WamrConfig, WamrRuntime};

/// Host API v1 conformance checks the largest allocation a host call makes.
#[global_allocator]
static ALLOCATOR: luge_testkit::hostabi::Largest = luge_testkit::hostabi::Largest;

fn registry() -> ModuleRegistry {
    conformance::registry(Arc::new(WamrRuntime::new(&WamrConfig::default()).unwrap()))
}

// WAMR cannot make a preopen read-only, so it refuses such grants.
luge_testkit::conformance_tests!(registry(), false);
