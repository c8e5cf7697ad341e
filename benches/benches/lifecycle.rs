//! The lifecycle of a function: precompile (upload), /init from an artifact,
//! and instantiate + run + teardown of a fresh sandbox.

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use http_body_util::{BodyExt, Empty};
use luge_benches::{allowed_cores, init_body, key, pin_to, registry, runtime, wasm};
use luge_core::handler::{BodyError, Request};
use luge_core::{Action, Invocation, Preemption};
use luge_openwhisk::{Container, InitSettings, LogBuffer};
use luge_registry::{ModuleCode, ModuleRegistry, artifact};

fn precompile(c: &mut Criterion) {
    let big = wasm("big");
    let runtime = runtime();
    let mut group = c.benchmark_group("precompile");
    group.sample_size(10);
    group.bench_function(format!("big.wasm ({} KiB)", big.len() >> 10), |b| {
        b.iter(|| runtime.precompile(&big).expect("compiles"))
    });
    group.finish();
}

fn init_from_artifact(c: &mut Criterion) {
    let big = wasm("big");
    let sealed = registry().compile_sealed(&big).expect("compiles");
    let runtime = runtime();
    let key = key();
    let mut group = c.benchmark_group("init");
    // The authentication alone.
    group.bench_function("MAC check of big.wasm's artifact", |b| {
        b.iter(|| artifact::open(&key, &sealed, runtime.id(), None).expect("authentic"))
    });
    // MAC check + deserialize + pre-link: what /init does with an artifact.
    group.bench_function("load artifact of big.wasm", |b| {
        b.iter(|| {
            let verified = artifact::open(&key, &sealed, runtime.id(), None).expect("authentic");
            runtime.load_artifact(verified).expect("loads")
        })
    });
    // The whole OpenWhisk /init handler: JSON, base64, detection, load; of
    // the 1.1 MiB big.wasm and of a typical function (the Rust echo).
    let settings = InitSettings::default();
    for (name, sealed) in [
        ("big", sealed),
        (
            "echo",
            registry().compile_sealed(&wasm("echo")).expect("compiles"),
        ),
    ] {
        let body = serde_json::to_vec(&init_body(&sealed)).expect("json");
        group.bench_function(
            format!("openwhisk /init handler, artifact of {name}.wasm"),
            |b| {
                b.iter_batched(
                    || {
                        let registry = ModuleRegistry::new(Arc::clone(&runtime), key.clone(), None);
                        (registry, Container::new(Arc::new(LogBuffer::default())))
                    },
                    |(registry, container)| {
                        let reply =
                            container.init(&registry, &Default::default(), &settings, &body);
                        assert_eq!(reply.status, 200);
                        (registry, container)
                    },
                    criterion::BatchSize::PerIteration,
                )
            },
        );
    }
    group.finish();
}

fn sandbox(c: &mut Criterion) {
    let registry = registry();
    let mut group = c.benchmark_group("sandbox");
    for name in ["noop", "c-hello", "echo"] {
        let module = registry.load(&ModuleCode::Wasm(wasm(name))).expect("loads");
        let action = Arc::new(Action::command(name));
        group.bench_function(format!("instantiate+run+teardown {name}"), |b| {
            b.iter(|| {
                let outcome = module.run(Invocation::new(Arc::clone(&action), &b"{}"[..]));
                assert!(outcome.termination.is_success());
                outcome
            })
        });
    }
    group.finish();
}

/// A `wasi:http` request on the engine alone: instantiate the component,
/// hand it the request, read its whole response, tear the sandbox down.
/// No connection, no scheduler: the engine's share of a component request
/// (issue 49, item 1), which a server's CPU per request adds the kernel's
/// and the front end's to.
fn http_sandbox(c: &mut Criterion) {
    let registry = registry();
    let module = registry
        .load(&ModuleCode::Wasm(wasm("http-handler")))
        .expect("loads");
    assert!(module.serves_http());
    let action = Arc::new(Action::command("http-handler"));
    // As `luge serve` runs it by default (a 5 ms quantum, preemption on);
    // the hello ends long before its first quantum does.
    let preemption = Preemption {
        quantum: std::time::Duration::from_millis(5),
        enabled: true,
    };
    let executor = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut group = c.benchmark_group("sandbox");
    group.bench_function(
        "instantiate+handle+teardown http-handler (wasi:http)",
        |b| b.iter(|| handle_hello(&executor, &module, &action, preemption)),
    );
    // The same lifecycle on every core at once (at most 8), one thread
    // pinned to each, all on one loaded module: the time per lifecycle on
    // a thread. Against the single thread's above, what the engine's path
    // loses when every core runs it (what the cores share: the pool, the
    // module, the process's memory map, caches), the per-core rate of issue
    // 49's items 2 and 3 without a front end, a connection or a client.
    let cores = allowed_cores();
    let threads = cores.len().clamp(1, 8);
    if threads > 1 {
        group.bench_function(
            format!("instantiate+handle+teardown http-handler (wasi:http), {threads} threads"),
            |b| {
                b.iter_custom(|iters| {
                    let start = std::sync::Barrier::new(threads);
                    let took: Vec<std::time::Duration> = std::thread::scope(|scope| {
                        let running: Vec<_> = cores[..threads]
                            .iter()
                            .map(|&core| {
                                let (start, module, action) = (&start, &module, &action);
                                scope.spawn(move || {
                                    pin_to(core);
                                    let executor = tokio::runtime::Builder::new_current_thread()
                                        .enable_all()
                                        .build()
                                        .expect("a runtime");
                                    start.wait();
                                    let began = std::time::Instant::now();
                                    for _ in 0..iters {
                                        std::hint::black_box(handle_hello(
                                            &executor, module, action, preemption,
                                        ));
                                    }
                                    began.elapsed()
                                })
                            })
                            .collect();
                        running
                            .into_iter()
                            .map(|t| t.join().expect("a lifecycle thread"))
                            .collect()
                    });
                    // The threads' mean: each ran `iters`, so this is the
                    // time per lifecycle on a thread (the slowest thread's
                    // would add each round's worst hiccup).
                    took.iter().sum::<std::time::Duration>() / threads as u32
                })
            },
        );
    }
    group.finish();
}

/// One hello on `module`: a sandbox made, handed a GET, its whole
/// response read, the sandbox torn down.
fn handle_hello(
    executor: &tokio::runtime::Runtime,
    module: &Arc<dyn luge_core::runtime::LoadedModule>,
    action: &Arc<Action>,
    preemption: Preemption,
) -> bytes::Bytes {
    executor.block_on(async {
        let request: Request = http::Request::get("http://localhost/hello")
            .body(
                Empty::new()
                    .map_err(|e| -> BodyError { match e {} })
                    .boxed_unsync(),
            )
            .expect("a request");
        let (respond, answered) = tokio::sync::oneshot::channel();
        let sandbox = Arc::clone(module).start_http(
            Invocation::new(Arc::clone(action), Vec::new()),
            request,
            Box::new(move |response| {
                let _ = respond.send(response);
            }),
            preemption,
        );
        let read = async {
            let response = answered.await.expect("answered").expect("a response");
            assert_eq!(response.status(), 200);
            response
                .into_body()
                .collect()
                .await
                .expect("a body")
                .to_bytes()
        };
        let (outcome, body) = tokio::join!(sandbox, read);
        assert!(outcome.termination.is_success());
        assert!(!body.is_empty());
        body
    })
}

criterion_group!(
    benches,
    precompile,
    init_from_artifact,
    sandbox,
    http_sandbox
);
criterion_main!(benches);
