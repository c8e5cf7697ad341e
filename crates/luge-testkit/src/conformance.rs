//! The engine conformance suite: what every [`WasmRuntime`] must do with
//! the example actions, run by each engine crate's tests against its own
//! runtime (streams, WASI context, limits, traps, concurrency, grants,
//! artifacts that name their engine). Wasmtime's crate keeps its own tests:
//! this crate depends on it.
//!
//! Each function panics, with the reason, where the engine falls short.

use std::sync::Arc;
use std::time::Duration;

use luge_core::{
    Action, Capabilities, DirGrant, DirMode, Invocation, LoadedModule, Termination, WasmRuntime,
};
use luge_registry::{ArtifactKey, ModuleCode, ModuleRegistry};

use crate::{example_wasm as wasm, last_json};

/// The key the conformance registries seal with.
pub const SECRET: &str = "engine conformance tests secret key";

/// A registry over `runtime`, sealing with [`SECRET`].
pub fn registry(runtime: Arc<dyn WasmRuntime>) -> ModuleRegistry {
    ModuleRegistry::new(
        runtime,
        ArtifactKey::from_secret(SECRET.as_bytes()).expect("a valid key"),
        None,
    )
}

fn load(registry: &ModuleRegistry, name: &str) -> Arc<dyn LoadedModule> {
    registry
        .load(&ModuleCode::Wasm(wasm(name)))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn run(module: &dyn LoadedModule, action: Action, stdin: &str) -> luge_core::Outcome {
    module.run(Invocation::new(Arc::new(action), stdin.as_bytes()))
}

/// stdin, stdout and stderr; environment and argv; named entry points;
/// binary-safe bodies through a C function.
pub fn streams_context_and_entry_points(registry: &ModuleRegistry) {
    let echo = load(registry, "echo");
    let outcome = run(&*echo, Action::command("echo"), r#"{"a":1}"#);
    assert_eq!(outcome.termination, Termination::Exited(0));
    assert_eq!(last_json(&outcome.stdout), serde_json::json!({"a": 1}));
    assert_eq!(outcome.stderr, b"hello stderr\n");

    let env = load(registry, "env");
    let mut action = Action::command("ctx");
    action.env.push(("__OW_NAMESPACE".into(), "ns".into()));
    action.capabilities.args.push("--flag".into());
    let mut invocation = Invocation::new(Arc::new(action), b"{}".to_vec());
    invocation
        .env
        .push(("__OW_ACTIVATION_ID".into(), "act-1".into()));
    let out = last_json(&env.run(invocation).stdout);
    assert_eq!(out["namespace"], "ns");
    assert_eq!(out["activation_id"], "act-1");
    assert_eq!(out["args"], serde_json::json!(["ctx", "--flag"]));
    assert!(
        out["env"].get("PATH").is_none(),
        "no host environment: {out}"
    );

    let entry = load(registry, "entry");
    assert!(entry.has_export("niam") && entry.has_export("_start"));
    assert!(!entry.has_export("nothere"));
    let mut action = Action::command("entry");
    action.entry = "niam".into();
    assert_eq!(
        last_json(&run(&*entry, action, r#"{"x":"y"}"#).stdout),
        serde_json::json!({"x": "y"})
    );
    // A name that is no export, an export of another type than `() -> ()`
    // (`__main_void` returns an i32), Luge's own `luge:start` and a name
    // with a NUL byte are no entry points on any engine, and a run naming
    // one fails alike, saying which; the module's next run is unharmed.
    for name in [
        "nothere",
        "__main_void",
        luge_core::start::START_EXPORT,
        "ni\0am",
    ] {
        assert!(!entry.has_export(name), "{name}");
        let mut action = Action::command("entry");
        action.entry = name.into();
        let outcome = run(&*entry, action, "{}");
        assert_eq!(
            outcome.termination,
            Termination::from(luge_core::SandboxError::NoEntry(name.into())),
            "{name}"
        );
    }
    // A module exporting `luge:start` itself, `() -> ()`, is refused at
    // load on every engine, saying so.
    let reserved = [
        &b"\0asm\x01\0\0\0"[..],
        b"\x01\x04\x01\x60\0\0", // types: () -> ()
        b"\x03\x02\x01\0",       // one function of it
        b"\x05\x03\x01\0\x01",   // one page of memory
        b"\x07\x17\x02\x0aluge:start\0\0\x06memory\x02\0",
        b"\x0a\x04\x01\x02\0\x0b", // its body: nothing
    ]
    .concat();
    let refused = registry.load(&ModuleCode::Wasm(reserved));
    let error = luge_core::error_line(&refused.err().expect("refused"));
    assert!(error.contains("a name Luge reserves"), "{error}");
    let mut action = Action::command("entry");
    action.entry = "niam".into();
    assert_eq!(
        last_json(&run(&*entry, action, r#"{"x":1}"#).stdout),
        serde_json::json!({"x": 1})
    );

    // Binary-safe, byte for byte, through the C function.
    let cat = load(registry, "c-echo");
    let body: Vec<u8> = (0..=255u8).cycle().take(200_000).collect();
    let outcome = cat.run(Invocation::new(
        Arc::new(Action::command("cat")),
        body.clone(),
    ));
    assert_eq!(
        (outcome.termination, outcome.stdout == body),
        (Termination::Exited(0), true)
    );
}

/// Time and memory limits, traps, panics and exit codes are outcomes, output
/// past its cap is refused, and the engine keeps serving.
pub fn limits_traps_and_exits_are_outcomes_and_the_engine_survives(registry: &ModuleRegistry) {
    let spin = load(registry, "spin");
    let mut action = Action::command("spin");
    action.limits.timeout = Duration::from_millis(200);
    let outcome = run(&*spin, action, "{}");
    assert_eq!(
        outcome.termination,
        Termination::TimedOut(Duration::from_millis(200))
    );
    assert!(
        outcome.elapsed < Duration::from_secs(5),
        "{:?}",
        outcome.elapsed
    );

    let memhog = load(registry, "memhog");
    let mut action = Action::command("memhog");
    action.limits.memory_bytes = 32 << 20;
    let outcome = run(&*memhog, action.clone(), r#"{"mb": 200}"#);
    assert_eq!(
        outcome.termination,
        Termination::OutOfMemory {
            limit_bytes: 32 << 20
        }
    );
    assert_eq!(
        last_json(&run(&*memhog, action, r#"{"mb": 8}"#).stdout)["allocated_mb"],
        8
    );

    let fail = load(registry, "fail");
    for mode in ["trap", "panic"] {
        let outcome = run(
            &*fail,
            Action::command("fail"),
            &format!(r#"{{"mode":"{mode}"}}"#),
        );
        assert!(
            matches!(outcome.termination, Termination::Trapped(_)),
            "{mode}: {:?}",
            outcome.termination
        );
    }
    let exit = run(&*fail, Action::command("fail"), r#"{"mode":"exit"}"#);
    assert_eq!(exit.termination, Termination::Exited(3));
    assert_eq!(exit.stderr, b"giving up with status 3\n");

    // Output past the cap is refused to the guest, not buffered, and the
    // run fails: a cut result never passes for the whole one.
    let cat = load(registry, "c-echo");
    let mut action = Action::command("cat");
    action.limits.max_output_bytes = 1000;
    let action = Arc::new(action);
    let outcome = cat.run(Invocation::new(Arc::clone(&action), vec![b'x'; 5000]));
    assert!(outcome.stdout.len() <= 1000, "{}", outcome.stdout.len());
    assert_eq!(
        outcome.termination,
        Termination::OutputTooLarge { limit_bytes: 1000 }
    );
    // Exactly at the cap is fine.
    let outcome = cat.run(Invocation::new(action, vec![b'x'; 1000]));
    assert_eq!(outcome.stdout.len(), 1000);
    assert!(
        outcome.termination.is_success(),
        "{:?}",
        outcome.termination
    );

    let echo = load(registry, "echo");
    assert!(
        run(&*echo, Action::command("echo"), "{}")
            .termination
            .is_success()
    );
}

/// One module runs on several threads at once, each sandbox its own.
pub fn concurrent_runs_of_one_module(registry: &ModuleRegistry) {
    let echo = load(registry, "echo");
    std::thread::scope(|s| {
        for i in 0..4 {
            let echo = &echo;
            s.spawn(move || {
                for j in 0..25 {
                    let input = format!(r#"{{"i":{i},"j":{j}}}"#);
                    let outcome = run(&**echo, Action::command("echo"), &input);
                    assert_eq!(
                        last_json(&outcome.stdout),
                        serde_json::json!({"i": i, "j": j})
                    );
                }
            });
        }
    });
}

/// Read-write grants work and nothing outside them is visible; read-only
/// grants are enforced, or, where the engine cannot enforce them
/// (`read_only_supported` false), refused by `check_grants`.
pub fn directory_grants(registry: &ModuleRegistry, read_only_supported: bool) {
    let dir = tempfile::tempdir().expect("as the engine contract says");
    std::fs::write(dir.path().join("hello.txt"), "hello from the host")
        .expect("as the engine contract says");
    let grant = |mode| Capabilities {
        dirs: vec![DirGrant::open(dir.path(), "/data", mode).expect("a temporary directory")],
        ..Capabilities::default()
    };
    let runtime = registry.runtime();
    runtime
        .check_grants(&grant(DirMode::ReadWrite))
        .expect("as the engine contract says");
    if read_only_supported {
        runtime
            .check_grants(&grant(DirMode::ReadOnly))
            .expect("as the engine contract says");
        let files = load(registry, "files");
        let mut action = Action::command("files");
        action.capabilities = grant(DirMode::ReadOnly);
        let outcome = run(&*files, action.clone(), r#"{"path":"/data/hello.txt"}"#);
        assert_eq!(last_json(&outcome.stdout)["content"], "hello from the host");
        let outcome = run(&*files, action, r#"{"path":"/data/no.txt","write":"hi"}"#);
        assert!(
            last_json(&outcome.stdout).get("error").is_some(),
            "a read-only grant was written to"
        );
        assert!(!dir.path().join("no.txt").exists());
    } else {
        let refused = runtime
            .check_grants(&grant(DirMode::ReadOnly))
            .expect_err("refused");
        assert!(refused.to_string().contains("read-only"), "{refused}");
    }

    let files = load(registry, "files");
    let mut action = Action::command("files");
    action.capabilities = grant(DirMode::ReadWrite);
    let outcome = run(&*files, action.clone(), r#"{"path":"/data/hello.txt"}"#);
    assert_eq!(last_json(&outcome.stdout)["content"], "hello from the host");
    let outcome = run(
        &*files,
        action.clone(),
        r#"{"path":"/data/out.txt","write":"hi"}"#,
    );
    assert_eq!(last_json(&outcome.stdout)["written"], 2);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).expect("as the engine contract says"),
        "hi"
    );
    // Nothing outside the grant.
    let outcome = run(&*files, action, r#"{"path":"/etc/passwd"}"#);
    assert!(last_json(&outcome.stdout).get("error").is_some());
}

/// Own artifacts round-trip and name their engine; another engine's are
/// refused, naming both; invalid Wasm is refused.
pub fn artifacts_name_their_engine_and_invalid_wasm_is_refused(registry: &ModuleRegistry) {
    let engine = registry.runtime().id().engine.clone();
    let engine = engine.as_str();
    let sealed = registry
        .compile_sealed(&wasm("echo"))
        .expect("as the engine contract says");
    let module = registry
        .load(&ModuleCode::Artifact(sealed.clone()))
        .expect("as the engine contract says");
    assert!(
        run(&*module, Action::command("echo"), "{}")
            .termination
            .is_success()
    );

    // The artifact names this engine, build and target.
    assert_eq!(
        &luge_registry::artifact::peek_engine(&sealed).expect("as the engine contract says"),
        registry.runtime().id()
    );
    // An authentic artifact for another engine is native code this engine
    // must never map: refused, and the message names both engines.
    let other = luge_core::EngineId {
        engine: "another-engine".into(),
        ..registry.runtime().id().clone()
    };
    let foreign = luge_registry::artifact::seal(
        &ArtifactKey::from_secret(SECRET.as_bytes()).expect("a valid key"),
        &other,
        None,
        b"native code of another engine",
    );
    let err = registry
        .load(&ModuleCode::Artifact(foreign))
        .err()
        .expect("as the engine contract says")
        .to_string();
    assert!(
        err.contains("another-engine") && err.contains(engine),
        "{err}"
    );

    let err = registry
        .load(&ModuleCode::Wasm(b"\0asm\x01\0\0\0\x01garbage".to_vec()))
        .err()
        .expect("as the engine contract says");
    assert!(err.to_string().contains("invalid"), "{err}");
}

/// A memory declared larger than the limit is the memory limit, before the
/// module runs, on every engine: WAMR raises a maximum set below a
/// memory's initial size to that size, so without a check of its own a
/// module declaring 32 MiB would get them under a 16 MiB limit.
pub fn declared_memory_above_the_limit_is_out_of_memory(registry: &ModuleRegistry) {
    // 512 pages: 32 MiB.
    let module =
        wat::parse_str(r#"(module (memory (export "memory") 512) (func (export "_start")))"#)
            .expect("valid WAT");
    let big = registry
        .load(&ModuleCode::Wasm(module))
        .unwrap_or_else(|e| panic!("a 32 MiB memory: {e}"));

    let mut action = Action::command("big");
    action.limits.memory_bytes = 16 << 20;
    assert_eq!(
        run(&*big, action.clone(), "").termination,
        Termination::OutOfMemory {
            limit_bytes: 16 << 20
        }
    );
    action.limits.memory_bytes = 64 << 20;
    assert_eq!(run(&*big, action, "").termination, Termination::Exited(0));
}

/// Custom sections change nothing, a `dylink.0` section included: Wasmer's
/// WASI layer would take a module carrying one for a shared library and
/// link it in its own way; on every engine it runs as the module it is.
pub fn custom_sections_change_nothing(registry: &ModuleRegistry) {
    // WASM_DYLINK_MEM_INFO (memory size, alignment, table size,
    // alignment) first, another custom section last.
    let module = wat::parse_str(
        r#"(module
            (@custom "dylink.0" (before first) "\01\04\00\00\00\00")
            (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
            (memory (export "memory") 1)
            (func (export "_start") (call $exit (i32.const 7)))
            (@custom "luge-test" "anything"))"#,
    )
    .expect("valid WAT");
    let dylink = registry
        .load(&ModuleCode::Wasm(module))
        .unwrap_or_else(|e| panic!("a module with a dylink.0 section: {e}"));
    assert_eq!(
        run(&*dylink, Action::command("dylink"), "").termination,
        Termination::Exited(7)
    );
}

/// Declares the conformance suite as `#[test]` functions in the calling
/// test file: `conformance_tests!(registry(), read_only_supported)`, where
/// the first argument builds a fresh [`ModuleRegistry`] per test. The test
/// binary must also install the allocation probe once:
/// `#[global_allocator] static A: luge_testkit::hostabi::Largest = luge_testkit::hostabi::Largest;`.
#[macro_export]
macro_rules! conformance_tests {
    ($registry:expr, $read_only_supported:expr) => {
        #[test]
        fn host_api_v1_conformance() {
            $crate::hostabi::host_api_v1(&$registry);
        }

        #[test]
        fn streams_context_and_entry_points() {
            $crate::conformance::streams_context_and_entry_points(&$registry);
        }

        #[test]
        fn limits_traps_and_exits_are_outcomes_and_the_engine_survives() {
            $crate::conformance::limits_traps_and_exits_are_outcomes_and_the_engine_survives(
                &$registry,
            );
        }

        #[test]
        fn declared_memory_above_the_limit_is_out_of_memory() {
            $crate::conformance::declared_memory_above_the_limit_is_out_of_memory(&$registry);
        }

        #[test]
        fn custom_sections_change_nothing() {
            $crate::conformance::custom_sections_change_nothing(&$registry);
        }

        #[test]
        fn concurrent_runs_of_one_module() {
            $crate::conformance::concurrent_runs_of_one_module(&$registry);
        }

        #[test]
        fn directory_grants() {
            $crate::conformance::directory_grants(&$registry, $read_only_supported);
        }

        #[test]
        fn artifacts_name_their_engine_and_invalid_wasm_is_refused() {
            $crate::conformance::artifacts_name_their_engine_and_invalid_wasm_is_refused(
                &$registry,
            );
        }
    };
}
