//! The Wasmer runtime through the engine conformance suite (luge-testkit),
//! against real example actions (target/wasm, built by
//! scripts/build-actions.sh).

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::sync::Arc;

use luge_core::ModuleRegistry;
use luge_testkit::conformance;
use luge_wasmer::{WasmerConfig, WasmerRuntime};

fn registry() -> ModuleRegistry {
    conformance::registry(Arc::new(
        WasmerRuntime::new(&WasmerConfig::default()).unwrap(),
    ))
}

#[test]
fn streams_context_and_entry_points() {
    conformance::streams_context_and_entry_points(&registry());
}

#[test]
fn limits_traps_and_exits_are_outcomes_and_the_engine_survives() {
    conformance::limits_traps_and_exits_are_outcomes_and_the_engine_survives(&registry());
}

#[test]
fn concurrent_runs_of_one_module() {
    conformance::concurrent_runs_of_one_module(&registry());
}

/// Wasmer enforces read-only grants.
#[test]
fn directory_grants() {
    conformance::directory_grants(&registry(), true);
}

#[test]
fn artifacts_name_their_engine_and_invalid_wasm_is_refused() {
    conformance::artifacts_name_their_engine_and_invalid_wasm_is_refused(&registry());
}
