//! Calls between functions (host API v1): what one `call_start` +
//! `call_wait` of a no-op callee adds to its caller, against the callee run
//! alone and against the same callee reached by an HTTP request to the host
//! (its standalone route on 127.0.0.1, keep-alive client).
//!
//! `cargo bench -p luge-benches --bench calls`
//!
//! The caller is `fanout` (the Rust SDK example) asked for zero or one
//! call; the difference between the two is one call, callee sandbox
//! included. The callee runs inline here (as a fused call does), so the
//! figure is the call's own cost, without a scheduler hop.

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use luge_benches::{Server, registry, wasm};
use luge_core::calls::{CallError, CallMode, CallResult, CallStatus, Calls, PendingCall};
use luge_core::{Action, Invocation, LoadedModule};
use luge_registry::ModuleCode;
use serde_json::json;

/// Runs every callee as `noop`, on the waiting thread.
struct Inline {
    callee: Arc<dyn LoadedModule>,
    action: Arc<Action>,
}

impl Calls for Inline {
    fn start(&self, _: &str, input: Vec<u8>, _: CallMode) -> Result<PendingCall, CallError> {
        let (callee, action) = (Arc::clone(&self.callee), Arc::clone(&self.action));
        Ok(Box::pin(async move {
            let outcome = callee.run(Invocation::new(action, input));
            CallResult {
                status: CallStatus::of(&outcome.termination),
                output: outcome.stdout,
            }
        }))
    }
}

fn calls(c: &mut Criterion) {
    let registry = registry();
    let load = |name: &str| registry.load(&ModuleCode::Wasm(wasm(name))).expect("loads");
    let (fanout, noop) = (load("fanout"), load("noop"));
    let noop_action = Arc::new(Action::command("noop"));
    let fanout_action = Arc::new(Action::command("fanout"));
    let host: Arc<dyn Calls> = Arc::new(Inline {
        callee: Arc::clone(&noop),
        action: Arc::clone(&noop_action),
    });
    let run = |module: &Arc<dyn LoadedModule>, action: &Arc<Action>, input: &[u8]| {
        let invocation = Invocation {
            calls: Some(Arc::clone(&host)),
            ..Invocation::new(Arc::clone(action), input)
        };
        let outcome = module.run(invocation);
        assert!(
            outcome.termination.is_success(),
            "{:?}",
            outcome.termination
        );
        outcome
    };
    let none = br#"{"calls":[]}"#;
    let one = br#"{"calls":[{"name":"noop","input":{}}]}"#;
    let mut group = c.benchmark_group("calls");
    group.bench_function("noop alone", |b| b.iter(|| run(&noop, &noop_action, b"{}")));
    group.bench_function("fanout, no call", |b| {
        b.iter(|| run(&fanout, &fanout_action, none))
    });
    group.bench_function("fanout, one no-op call", |b| {
        b.iter(|| {
            let outcome = run(&fanout, &fanout_action, one);
            debug_assert!(String::from_utf8_lossy(&outcome.stdout).contains("results"));
            outcome
        })
    });
    // The same callee as an HTTP request to the host: a standalone route
    // (stdin in, stdout out, as a call).
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("noop.wasm"), wasm("noop")).expect("module");
    let config = dir.path().join("luge.toml");
    std::fs::write(
        &config,
        "[[routes]]\npath = \"/noop\"\nmodule = \"noop.wasm\"\n",
    )
    .expect("config");
    let server = Server::start_with(&["--config", config.to_str().expect("utf-8 path")]);
    group.bench_function("HTTP POST /noop route on 127.0.0.1", |b| {
        b.iter(|| {
            let (status, _) = server.post("/noop", &json!({}));
            assert_eq!(status, 200);
        })
    });
    group.finish();
}

criterion_group!(benches, calls);
criterion_main!(benches);
