//! The Wasmtime runtime against real example actions (target/wasm, built by
//! scripts/build-actions.sh).

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::sync::Arc;
use std::time::Duration;

use luge_core::Invocation;
use luge_core::{Action, LoadedModule, Termination, WasmRuntime};
use luge_registry::{ArtifactKey, ModuleCode, ModuleRegistry, artifact};
use luge_testkit::last_json;
use luge_wasmtime::{WasmtimeConfig, WasmtimeRuntime};

mod common;
use common::wasm;

fn key() -> ArtifactKey {
    ArtifactKey::from_secret(b"engine tests secret key").unwrap()
}

fn runtime() -> Arc<dyn WasmRuntime> {
    let config = WasmtimeConfig {
        max_sandboxes: 64,
        ..WasmtimeConfig::default()
    };
    Arc::new(WasmtimeRuntime::new(&config).unwrap())
}

fn registry() -> ModuleRegistry {
    ModuleRegistry::new(runtime(), key(), None)
}

fn load(registry: &ModuleRegistry, name: &str) -> Arc<dyn LoadedModule> {
    registry.load(&ModuleCode::Wasm(wasm(name))).unwrap()
}

fn run(module: &dyn LoadedModule, action: Action, stdin: &str) -> luge_core::Outcome {
    module.run(Invocation::new(Arc::new(action), stdin.as_bytes()))
}

// Echo's streams, the environment and arguments, named entry points, time
// and memory limits, traps and exits are the conformance suite's
// (`streams_context_and_entry_points`,
// `limits_traps_and_exits_are_outcomes_and_the_engine_survives`, run on
// Wasmtime below), not repeated here.

/// The preemptive path (`start`, what the host's workers run) answers a
/// name that is no entry point as the blocking one does on every engine
/// (the conformance suite's `streams_context_and_entry_points`): the entry
/// is taken there too by its index among the entry points found at load.
#[test]
fn entry_that_is_missing_or_mistyped_fails_alike_when_started() {
    let module = load(&registry(), "entry");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for entry in ["nothere", "__main_void", "niam"] {
        let mut action = Action::command("entry");
        action.entry = entry.into();
        let outcome = rt.block_on(Arc::clone(&module).start(
            Invocation::new(Arc::new(action), &br#"{"x":1}"#[..]),
            luge_core::Preemption {
                quantum: Duration::from_millis(5),
                enabled: true,
            },
        ));
        if entry == "niam" {
            assert_eq!(last_json(&outcome.stdout), serde_json::json!({"x": 1}));
        } else {
            assert_eq!(
                outcome.termination,
                Termination::from(luge_core::SandboxError::NoEntry(entry.into())),
                "{entry}"
            );
        }
    }
}

#[test]
fn fuel_limits_when_metering() {
    let config = WasmtimeConfig {
        fuel: true,
        max_sandboxes: 8,
        ..Default::default()
    };
    let runtime: Arc<dyn WasmRuntime> = Arc::new(WasmtimeRuntime::new(&config).unwrap());
    let registry = ModuleRegistry::new(runtime, key(), None);
    let module = load(&registry, "spin");
    let mut action = Action::command("spin");
    action.limits.fuel = Some(1_000_000);
    assert_eq!(
        run(&*module, action, "{}").termination,
        Termination::OutOfFuel
    );
}

#[test]
fn modules_are_shared_by_hash_and_freed_with_last_user() {
    let registry = registry();
    let a = load(&registry, "echo");
    let b = load(&registry, "echo");
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(registry.stats().compiles, 1);
    assert_eq!(registry.live_modules(), 1);
    drop((a, b));
    assert_eq!(registry.live_modules(), 0);
}

#[test]
fn the_after_compile_hook_runs_once_per_compile_and_only_then() {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    fn count() {
        RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    let runs = || RUNS.load(std::sync::atomic::Ordering::Relaxed);
    let dir = tempfile::tempdir().unwrap();
    let registry =
        ModuleRegistry::new(runtime(), key(), Some(dir.path().into())).with_after_compile(count);
    let echo = load(&registry, "echo");
    assert_eq!((registry.stats().compiles, runs()), (1, 1));
    // Shared while loaded, then read back from the cache: no compile.
    drop(load(&registry, "echo"));
    drop(echo);
    drop(load(&registry, "echo"));
    assert_eq!((registry.stats().disk_hits, runs()), (1, 1));
    // A sealed artifact is loaded, not compiled.
    let sealed = registry.compile_sealed(&wasm("c-echo")).unwrap();
    assert_eq!(runs(), 2);
    drop(registry.load(&ModuleCode::Artifact(sealed)).unwrap());
    assert_eq!(runs(), 2);
    // Code refused before any compile (a function body that does not
    // validate) does not run it.
    let invalid = [
        &b"\0asm\x01\0\0\0"[..],
        b"\x01\x04\x01\x60\0\0",       // types: () -> ()
        b"\x03\x02\x01\0",             // one function of it
        b"\x0a\x05\x01\x03\0\x6a\x0b", // its body: i32.add on an empty stack
    ]
    .concat();
    assert!(registry.load(&ModuleCode::Wasm(invalid)).is_err());
    assert_eq!((registry.stats().compiles, runs()), (2, 2));
}

#[test]
fn disk_cache_makes_a_restart_warm() {
    let dir = tempfile::tempdir().unwrap();
    let first = ModuleRegistry::new(runtime(), key(), Some(dir.path().into()));
    drop(first.load(&ModuleCode::Wasm(wasm("echo"))).unwrap());
    assert_eq!(first.stats().compiles, 1);
    let restarted = ModuleRegistry::new(runtime(), key(), Some(dir.path().into()));
    let module = restarted.load(&ModuleCode::Wasm(wasm("echo"))).unwrap();
    assert_eq!(restarted.stats().compiles, 0);
    assert_eq!(restarted.stats().disk_hits, 1);
    assert!(
        run(&*module, Action::command("echo"), "{}")
            .termination
            .is_success()
    );

    // A tampered cache file is refused and recompiled, never loaded.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
    }
    let third = ModuleRegistry::new(runtime(), key(), Some(dir.path().into()));
    drop(third.load(&ModuleCode::Wasm(wasm("echo"))).unwrap());
    assert_eq!(third.stats().compiles, 1);
}

#[test]
fn artifacts_need_this_operators_key() {
    let registry = registry();
    let sealed = registry.compile_sealed(&wasm("echo")).unwrap();
    assert!(registry.load(&ModuleCode::Artifact(sealed.clone())).is_ok());
    let other = ModuleRegistry::new(
        runtime(),
        ArtifactKey::from_secret(b"somebody else's secret").unwrap(),
        None,
    );
    let err = other.load(&ModuleCode::Artifact(sealed)).err().unwrap();
    assert!(err.to_string().contains("authentication failed"), "{err}");
}

/// Why this process's registry refuses `code`.
fn refusal(code: ModuleCode) -> String {
    registry().load(&code).err().unwrap().to_string()
}

#[test]
fn invalid_wasm_is_refused_with_a_reason() {
    let err = refusal(ModuleCode::Wasm(b"\0asm\x01\0\0\0garbage".to_vec()));
    assert!(err.starts_with("invalid WebAssembly module"), "{err}");
}

#[test]
fn cross_target_artifacts_name_their_target() {
    let config = WasmtimeConfig {
        target: Some("aarch64-unknown-linux-gnu".into()),
        pooling: false,
        ..Default::default()
    };
    let cross = WasmtimeRuntime::new(&config).unwrap();
    let payload = cross.precompile(&wasm("noop")).unwrap();
    let sealed = artifact::seal(&key(), cross.id(), None, &payload);
    let err = refusal(ModuleCode::Artifact(sealed));
    assert!(err.contains("aarch64-unknown-linux-gnu"), "{err}");
}

/// A memory Luge cannot reach is one it cannot give back to the OS early
/// (see `release_memory`): a module that hides its memory is refused.
#[test]
fn modules_must_export_their_memory() {
    // (module (memory 1) (func (export "_start")))
    let hidden = b"\0asm\x01\0\0\0\x01\x04\x01\x60\0\0\x03\x02\x01\0\x05\x03\x01\0\x01\x07\x0a\x01\x06_start\0\0\x0a\x04\x01\x02\0\x0b";
    let Err(refused) = registry().load(&ModuleCode::Wasm(hidden.to_vec())) else {
        panic!("a hidden memory was accepted");
    };
    assert!(
        refused
            .to_string()
            .contains("exports no linear memory named `memory`"),
        "{refused}"
    );
}

/// A sandbox that grew its memory gives it back as it ends, so a pool's
/// batch of ended slots holds no more than the resident budget.
#[test]
fn grown_memory_is_released_as_the_sandbox_ends() {
    let registry = registry();
    let hog = load(&registry, "memhog");
    let rss = || {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap()
            << 10
    };
    let before = rss();
    for _ in 0..6 {
        let outcome = run(&*hog, Action::command("memhog"), r#"{"mb": 100}"#);
        assert!(
            outcome.termination.is_success(),
            "{:?}",
            outcome.termination
        );
    }
    // Six ended 100 MiB sandboxes, all waiting in one decommit batch: only
    // their 8 MiB shares may stay resident.
    let grown = rss().saturating_sub(before);
    assert!(
        grown < 200 << 20,
        "resident memory grew by {} MiB",
        grown >> 20
    );
}

/// Dropping the runtime frees its engine: the epoch ticker's thread holds
/// it only weakly, and ends.
#[test]
fn a_dropped_runtime_frees_its_engine() {
    let runtime = WasmtimeRuntime::new(&WasmtimeConfig {
        max_sandboxes: 4,
        ..WasmtimeConfig::default()
    })
    .unwrap();
    let weak = runtime.engine().weak();
    // Run a sandbox first, so the ticker thread has ticked the engine.
    let registry = ModuleRegistry::new(Arc::new(runtime), key(), None);
    let echo = load(&registry, "echo");
    assert!(
        run(&*echo, Action::command("echo"), "{}")
            .termination
            .is_success()
    );
    drop((echo, registry));
    let give_up = std::time::Instant::now() + Duration::from_secs(5);
    while weak.upgrade().is_some() {
        assert!(
            std::time::Instant::now() < give_up,
            "the engine outlived its runtime"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A module compiled into the cache by one engine setting (fuel off) loads
/// after a restart with another (fuel on): the cache is keyed by the
/// engine's compatibility, and an artifact it refuses is compiled again.
#[test]
fn the_compile_cache_survives_changed_settings() {
    let cache = tempfile::tempdir().unwrap();
    let registry = |fuel| {
        let runtime = WasmtimeRuntime::new(&WasmtimeConfig {
            max_sandboxes: 4,
            fuel,
            ..WasmtimeConfig::default()
        })
        .unwrap();
        ModuleRegistry::new(Arc::new(runtime), key(), Some(cache.path().to_owned()))
    };
    for fuel in [false, true, false] {
        let registry = registry(fuel);
        let echo = load(&registry, "echo");
        let outcome = run(&*echo, Action::command("echo"), r#"{"fuel": 1}"#);
        assert!(
            outcome.termination.is_success(),
            "fuel {fuel}: {:?}",
            outcome.termination
        );
    }
    // One cached artifact per setting, the third run loaded from disk.
    assert_eq!(std::fs::read_dir(cache.path()).unwrap().count(), 2);
}

/// Host API v1 conformance checks the largest allocation a host call makes.
#[global_allocator]
static ALLOCATOR: luge_testkit::hostabi::Largest = luge_testkit::hostabi::Largest;

/// The engine conformance suite every engine passes (luge-testkit), on
/// Wasmtime with the executor's pooled configuration.
mod conformance {
    use super::*;

    fn registry() -> ModuleRegistry {
        luge_testkit::conformance::registry(runtime())
    }

    luge_testkit::conformance_tests!(registry(), true);
}

/// A pool with no slot left: the sandbox never runs, and its outcome says
/// so as overload (answered 503 upstream), not as the function's trap.
#[test]
fn a_full_pool_is_busy_not_a_trap() {
    let runtime: Arc<dyn WasmRuntime> = Arc::new(
        WasmtimeRuntime::new(&WasmtimeConfig {
            max_sandboxes: 1,
            ..WasmtimeConfig::default()
        })
        .unwrap(),
    );
    let registry = ModuleRegistry::new(runtime, key(), None);
    let spin = load(&registry, "spin");
    let echo = load(&registry, "echo");
    let mut action = Action::command("spin");
    action.limits.timeout = Duration::from_secs(10);
    // The spinner yields at the end of its first quantum, holding the
    // pool's only slot.
    let mut spinning = Arc::clone(&spin).start(
        Invocation::new(Arc::new(action), &b"{}"[..]),
        luge_core::Preemption {
            quantum: Duration::from_millis(1),
            enabled: true,
        },
    );
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(spinning.as_mut().poll(&mut cx).is_pending());
    let outcome = run(&*echo, Action::command("echo"), "{}");
    assert!(
        matches!(&outcome.termination, Termination::Failed(why) if why.contains("every sandbox slot is in use")),
        "{:?}",
        outcome.termination
    );
    // The slot is back with the spinner gone.
    drop(spinning);
    assert!(
        run(&*echo, Action::command("echo"), "{}")
            .termination
            .is_success()
    );
}

/// Minor page faults taken by this thread so far (field 10 of
/// `/proc/thread-self/stat`; the command's name, field 2, may hold spaces
/// but ends at the last `)`).
fn minor_faults_of_this_thread() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    // Fields from the third on: state, ppid, pgrp, session, tty_nr,
    // tpgid, flags, minflt.
    after_name.split(' ').nth(7).unwrap().parse().unwrap()
}

/// A pool slot is reset whole between sandboxes however scattered the
/// pages its last sandbox wrote: c-scatter writes every other page of 128
/// zero pages, 64 separate runs, more than one page-map scan reports (32),
/// and each sandbox after it still reads zeros there. Where the kernel has
/// `PAGEMAP_SCAN`, Luge's Wasmtime (vendor/README.md) resets them all by
/// copying, not only the first 32 runs, and hands the slot back at once
/// rather than holding it for a decommit batch, so the next sandbox of the
/// module gets the same slot with those pages still mapped: after the
/// first, it takes 2 page faults (199 each with Wasmtime 48.0.8 as
/// published, or with either half of the fix alone: a slot seldom reused,
/// its pages faulted in again).
#[test]
fn scattered_writes_are_reset_whole_and_stay_resident() {
    let registry = registry();
    let scatter = load(&registry, "c-scatter");
    let scan = wasmtime::PoolingAllocationConfig::is_pagemap_scan_available();
    for round in 0..8 {
        let before = minor_faults_of_this_thread();
        scatter_finds_zeros(&*scatter, Action::command("scatter"), 64, round);
        let faults = minor_faults_of_this_thread() - before;
        if scan && round >= 2 {
            assert!(faults < 32, "round {round}: {faults} page faults");
        }
    }
}

/// Past the bound on what a slot keeps resident (1 MiB), scattered writes
/// still leave nothing behind: c-scatter writes every other page of 1024
/// (512 runs, 2 MiB); the reset copies back runs until the bound is spent
/// and decommits the rest, and each sandbox after it reads zeros.
#[test]
fn scattered_writes_past_the_resident_bound_are_reset_too() {
    let registry = registry();
    let scatter = load(&registry, "c-scatter");
    let mut action = Action::command("scatter");
    action.capabilities.args.push("1024".into());
    for round in 0..4 {
        scatter_finds_zeros(&*scatter, action.clone(), 512, round);
    }
}

/// Runs c-scatter as `action`: it succeeds, found every page it checked
/// zero (none stale from an earlier sandbox) and wrote `written` pages.
fn scatter_finds_zeros(scatter: &dyn LoadedModule, action: Action, written: u64, round: usize) {
    let outcome = run(scatter, action, "");
    assert!(
        outcome.termination.is_success(),
        "{:?}",
        outcome.termination
    );
    let answer = last_json(&outcome.stdout);
    assert_eq!(answer["stale"], 0, "round {round}: {answer}");
    assert_eq!(answer["written"], written, "round {round}: {answer}");
}

/// Core modules and components that need no async ABI run on the
/// synchronous engine and never make the concurrent one; a WASI 0.3
/// command and a Spin 4 app are compiled and loaded by the concurrent
/// engine, made at the first (the Spin app's artifact is large enough to
/// be mapped from a sealed file, the command's is copied), and each kind's
/// artifact loads again from its sealed bytes.
#[test]
fn components_of_the_async_abi_get_an_engine_of_their_own() {
    let config = WasmtimeConfig {
        max_sandboxes: 16,
        ..WasmtimeConfig::default()
    };
    let wasmtime = Arc::new(WasmtimeRuntime::new(&config).unwrap());
    let registry = ModuleRegistry::new(wasmtime.clone(), key(), None);
    let echo = load(&registry, "echo");
    let outcome = run(&*echo, Action::command("echo"), r#"{"a":1}"#);
    assert_eq!(outcome.termination, Termination::Exited(0));
    for p2 in ["p2-echo", "http-handler"] {
        let sealed = registry.compile_sealed(&wasm(p2)).unwrap();
        registry.load(&ModuleCode::Artifact(sealed)).unwrap();
    }
    let p2 = load(&registry, "p2-echo");
    let outcome = run(&*p2, Action::command("p2-echo"), r#"{"b":2}"#);
    assert_eq!(outcome.termination, Termination::Exited(0));
    assert!(String::from_utf8_lossy(&outcome.stdout).contains("\"b\""));
    assert!(wasmtime.concurrent_engine().is_none());

    let cli3 = load(&registry, "cli3");
    assert!(wasmtime.concurrent_engine().is_some());
    let outcome = run(&*cli3, Action::command("cli3"), r#"{"mode":"p3"}"#);
    assert_eq!(outcome.termination, Termination::Exited(0), "{outcome:?}");
    assert!(String::from_utf8_lossy(&outcome.stdout).contains("p3"));
    for p3 in ["cli3", "spin-app", "http3"] {
        let sealed = registry.compile_sealed(&wasm(p3)).unwrap();
        registry.load(&ModuleCode::Artifact(sealed)).unwrap();
    }
    // The synchronous engine's code is still its own.
    let p2 = load(&registry, "p2-echo");
    let outcome = run(&*p2, Action::command("p2-echo"), r#"{"c":3}"#);
    assert_eq!(outcome.termination, Termination::Exited(0));
}
