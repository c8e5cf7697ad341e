//! Where a loaded artifact's code lives: large artifacts are mapped from a
//! sealed in-memory file, small ones are copied, and both run. A test
//! binary of its own, so that no other test's modules are in the maps it
//! reads, and its tests one at a time for the same reason.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::sync::Arc;

use luge_core::{Action, Invocation, LoadedModule, Outcome, WasmRuntime};
use luge_registry::{ArtifactKey, ModuleCode, ModuleRegistry};
use luge_wasmtime::{WasmtimeConfig, WasmtimeRuntime};

mod common;
use common::wasm;

/// Held by each test: they count the same process's files.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Distinct files named `luge-artifact` mapped into this process.
fn mapped_artifact_files() -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let mut inodes: Vec<&str> = maps
        .lines()
        .filter(|line| line.contains("/memfd:luge-artifact"))
        .filter_map(|line| line.split_whitespace().nth(4))
        .collect();
    inodes.sort_unstable();
    inodes.dedup();
    inodes.len()
}

/// Runs `module` as action `name` on `input`, and checks that it succeeded.
fn run_ok(module: &dyn LoadedModule, name: &str, input: &[u8]) -> Outcome {
    let outcome = module.run(Invocation::new(Arc::new(Action::command(name)), input));
    assert!(
        outcome.termination.is_success(),
        "{name}: {:?}",
        outcome.termination
    );
    outcome
}

#[test]
fn large_artifacts_are_mapped_from_a_sealed_file_and_small_ones_copied() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let config = WasmtimeConfig {
        max_sandboxes: 16,
        ..WasmtimeConfig::default()
    };
    let runtime: Arc<dyn WasmRuntime> = Arc::new(WasmtimeRuntime::new(&config).unwrap());
    let registry = ModuleRegistry::new(
        runtime,
        ArtifactKey::from_secret(b"artifact image tests key").unwrap(),
        None,
    );
    assert_eq!(mapped_artifact_files(), 0);

    // A small module's artifact: copied, as before.
    let small = registry.compile_sealed(&wasm("noop")).unwrap();
    assert!(small.len() < 256 << 10, "{}", small.len());
    let noop = registry.load(&ModuleCode::Artifact(small)).unwrap();
    assert_eq!(mapped_artifact_files(), 0);
    run_ok(&*noop, "noop", b"{}");

    // A large module (regex and JSON) and a component: mapped, and they run.
    let big = registry.compile_sealed(&wasm("big")).unwrap();
    assert!(big.len() > 1 << 20, "{}", big.len());
    let big = registry.load(&ModuleCode::Artifact(big)).unwrap();
    assert_eq!(mapped_artifact_files(), 1);
    let input = br#"{"pattern": "[0-9]+", "text": "a1 b22 c333"}"#;
    let outcome = run_ok(&*big, "big", input);
    let stdout = String::from_utf8_lossy(&outcome.stdout);
    assert!(stdout.contains(r#"["1","22","333"]"#), "{stdout}");

    let component = registry.compile_sealed(&wasm("p2-echo")).unwrap();
    assert!(component.len() > 256 << 10, "{}", component.len());
    let echo = registry.load(&ModuleCode::Artifact(component)).unwrap();
    assert_eq!(mapped_artifact_files(), 2);
    let outcome = run_ok(&*echo, "p2-echo", b"{\"x\": 1}");
    assert!(String::from_utf8_lossy(&outcome.stdout).contains("\"x\""));

    // The files go with the last user of their modules.
    drop((big, echo, noop));
    drop(registry);
    assert_eq!(mapped_artifact_files(), 0);
}

/// Descriptors of files named `luge-artifact` open in this process.
fn open_artifact_files() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().contains("memfd:luge-artifact"))
        .count()
}

#[test]
fn a_large_artifact_staged_while_its_mac_is_checked_loads_only_if_authentic() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let runtime: Arc<dyn WasmRuntime> = Arc::new(
        WasmtimeRuntime::new(&WasmtimeConfig {
            max_sandboxes: 16,
            ..WasmtimeConfig::default()
        })
        .unwrap(),
    );
    let registry = ModuleRegistry::new(
        runtime,
        ArtifactKey::from_secret(b"artifact staging tests key").unwrap(),
        None,
    );
    let sealed = registry.compile_sealed(&wasm("big")).unwrap();
    assert!(
        sealed.len() >= luge_registry::OVERLAP_AT,
        "{}",
        sealed.len()
    );
    // One byte of the code changed, the MAC kept: staged, then refused, and
    // its file is gone with the refusal.
    let mut forged = sealed.clone();
    let at = forged.len() / 2;
    forged[at] ^= 0x40;
    let refused = registry.load(&ModuleCode::Artifact(forged.clone()));
    assert!(
        matches!(
            refused,
            Err(luge_registry::LoadError::Artifact(
                luge_registry::ArtifactError::BadMac
            ))
        ),
        "{:?}",
        refused.err()
    );
    assert_eq!(open_artifact_files(), 0);
    assert_eq!(mapped_artifact_files(), 0);

    // Every helper thread taken (a flood of large loads): the forgery is
    // still refused, checked on the loading thread, and no place is kept.
    let places: Vec<_> = std::iter::from_fn(|| luge_registry::HELPER_THREADS.take()).collect();
    assert_eq!(places.len(), luge_registry::MAX_HELPER_THREADS);
    assert!(
        registry
            .load(&ModuleCode::Artifact(forged.clone()))
            .is_err()
    );
    assert_eq!(open_artifact_files(), 0);
    drop(places);
    assert_eq!(luge_registry::HELPER_THREADS.taken(), 0);

    // The genuine artifact: its staged file is the one mapped, and it runs.
    let big = registry
        .load(&ModuleCode::Artifact(sealed.clone()))
        .unwrap();
    assert_eq!(mapped_artifact_files(), 1);
    let input = br#"{"pattern": "[a-z]+", "text": "a1 b22 c333"}"#;
    let outcome = run_ok(&*big, "big", input);
    let stdout = String::from_utf8_lossy(&outcome.stdout);
    assert!(stdout.contains(r#"["a","b","c"]"#), "{stdout}");

    // Loaded again: shared, not staged or mapped a second time.
    let again = registry
        .load(&ModuleCode::Artifact(sealed.clone()))
        .unwrap();
    assert!(Arc::ptr_eq(&big, &again));
    // Its check's place went back with the load.
    assert_eq!(luge_registry::HELPER_THREADS.taken(), 0);
    assert_eq!(mapped_artifact_files(), 1);
    // The forgery claims the loaded module's id: still refused, by the
    // check on this thread, and it shares nothing.
    let refused = registry.load(&ModuleCode::Artifact(forged));
    assert!(refused.is_err());
    // With no helper thread free, a genuine artifact loads all the same
    // (in another registry, so that it is loaded, not shared).
    let places: Vec<_> = std::iter::from_fn(|| luge_registry::HELPER_THREADS.take()).collect();
    let other = ModuleRegistry::new(
        Arc::clone(registry.runtime()),
        ArtifactKey::from_secret(b"artifact staging tests key").unwrap(),
        None,
    );
    let loaded_anyway = other.load(&ModuleCode::Artifact(sealed)).unwrap();
    run_ok(&*loaded_anyway, "big", input);
    drop(places);
    drop((loaded_anyway, other));
    // (The pool's slots keep the images of the memories they last held
    // until the engine goes.)
    drop((big, again));
    drop(registry);
    assert_eq!(mapped_artifact_files(), 0);
}
