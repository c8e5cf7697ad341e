//! A module's compiled code leaves the process with the module's last
//! user (one test alone in its binary: it counts the process's mappings).
//! A Wasmer engine keeps everything compiled into it, so one engine for
//! every module grew with each module ever loaded; Luge gives each module
//! an engine of its own (see `EngineRecipe`).

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::sync::Arc;

use luge_core::{Action, Invocation, Termination};
use luge_registry::ModuleCode;
use luge_testkit::conformance;
use luge_wasmer::{WasmerConfig, WasmerRuntime};

/// Executable mappings of no file: code compiled at run time.
fn compiled_code_mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() == 5 && fields[1].contains('x')
        })
        .count()
}

#[test]
fn dropped_modules_take_their_code_with_them() {
    let registry = conformance::registry(Arc::new(
        WasmerRuntime::new(&WasmerConfig::default()).unwrap(),
    ));
    let before = compiled_code_mappings();
    for i in 0..64 {
        // 64 different modules: each exits with its own status.
        let wasm = wat::parse_str(format!(
            r#"(module (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
                 (memory (export "memory") 1)
                 (func (export "_start") (call $exit (i32.const {i}))))"#
        ))
        .unwrap();
        let module = registry.load(&ModuleCode::Wasm(wasm)).unwrap();
        let outcome = module.run(Invocation::new(Arc::new(Action::command("m")), b""));
        assert_eq!(outcome.termination, Termination::Exited(i));
    }
    let after = compiled_code_mappings();
    assert!(
        after <= before + 4,
        "{before} code mappings before 64 modules came and went, {after} after"
    );
}
