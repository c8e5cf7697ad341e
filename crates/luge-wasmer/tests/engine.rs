//! The Wasmer runtime through the engine conformance suite (luge-testkit),
//! against real example actions (target/wasm, built by
//! scripts/build-actions.sh).

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::sync::Arc;

use luge_registry::ModuleRegistry;
use luge_testkit::conformance;
use luge_wasmer::{WasmerConfig, WasmerRuntime};

/// Host API v1 conformance checks the largest allocation a host call makes.
#[global_allocator]
static ALLOCATOR: luge_testkit::hostabi::Largest = luge_testkit::hostabi::Largest;

fn registry() -> ModuleRegistry {
    conformance::registry(Arc::new(
        WasmerRuntime::new(&WasmerConfig::default()).unwrap(),
    ))
}

// Wasmer enforces read-only grants.
luge_testkit::conformance_tests!(registry(), true);

/// The same suite with Singlepass compiling: limits (the host interrupt
/// included), grants and artifacts do not depend on the compiler.
mod singlepass {
    use super::*;
    use luge_wasmer::WasmerCompiler;

    fn registry() -> ModuleRegistry {
        conformance::registry(Arc::new(
            WasmerRuntime::new(&WasmerConfig {
                compiler: WasmerCompiler::Singlepass,
                ..WasmerConfig::default()
            })
            .unwrap(),
        ))
    }

    luge_testkit::conformance_tests!(registry(), true);

    /// An artifact compiled by Singlepass loads in a Cranelift runtime of
    /// the same version (the artifact header names the engine, not the
    /// compiler), and runs there.
    #[test]
    fn singlepass_artifacts_load_under_cranelift() {
        let wasm = luge_testkit::example_wasm("echo");
        let artifact = registry().compile_sealed(&wasm).unwrap();
        let module = super::registry()
            .load(&luge_registry::ModuleCode::Artifact(artifact))
            .unwrap();
        let outcome = module.run(luge_core::Invocation::new(
            Arc::new(luge_core::Action::command("echo")),
            br#"{"x":1}"#.to_vec(),
        ));
        assert_eq!(outcome.termination, luge_core::Termination::Exited(0));
        assert_eq!(
            luge_testkit::last_json(&outcome.stdout),
            serde_json::json!({"x": 1})
        );
    }
}

/// WASIX's extensions are not offered: a module importing them is refused
/// at compile time, naming the import.
#[test]
fn imports_beyond_wasi_preview_1_are_refused() {
    let wasm = wat::parse_str(
        r#"(module (import "wasix_32v1" "fd_pipe" (func))
             (memory (export "memory") 1) (func (export "_start")))"#,
    )
    .unwrap();
    let err = registry()
        .load(&luge_registry::ModuleCode::Wasm(wasm))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("wasix_32v1::fd_pipe"), "{err}");
}

/// A directory granted at `/` is refused by name: WASIX keeps `/` for its
/// own root (see `check_grants`); any other path is granted.
#[test]
fn a_grant_at_the_root_is_refused_by_name() {
    use luge_core::{Capabilities, DirGrant, DirMode, WasmRuntime};
    let runtime = WasmerRuntime::new(&WasmerConfig::default()).unwrap();
    let dir = std::env::temp_dir();
    for (guest, refused) in [("/", true), (".", true), ("/data", false), ("data", false)] {
        let capabilities = Capabilities {
            dirs: vec![DirGrant::open(&dir, guest, DirMode::ReadWrite).unwrap()],
            ..Capabilities::default()
        };
        let result = runtime.check_grants(&capabilities);
        assert_eq!(result.is_err(), refused, "{guest}: {result:?}");
        if let Err(e) = result {
            assert!(e.to_string().contains("cannot grant a directory at"), "{e}");
        }
    }
}
