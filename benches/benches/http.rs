//! A warm `/run` round trip over HTTP on 127.0.0.1 (keep-alive client).

use criterion::{Criterion, criterion_group, criterion_main};
use luge_benches::{Server, init_body, wasm};
use serde_json::json;

fn warm_run(c: &mut Criterion) {
    let server = Server::start();
    let mut group = c.benchmark_group("http");
    for name in ["c-hello", "echo"] {
        let code = wasm(name);
        let (status, _) = server.post(&format!("/{name}/init"), &init_body(&code));
        assert_eq!(status, 200);
        let body = json!({"value": {"hello": "world"}, "activation_id": "bench"});
        group.bench_function(format!("warm /run {name}"), |b| {
            b.iter(|| {
                let (status, reply) = server.post(&format!("/{name}/run"), &body);
                assert_eq!(status, 200, "{reply}");
            })
        });
        // Keep log buffers from growing across samples.
        let _ = server.post(&format!("/{name}/destroy"), &json!({}));
    }
    group.finish();
}

criterion_group!(benches, warm_run);
criterion_main!(benches);
