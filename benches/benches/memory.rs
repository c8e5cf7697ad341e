//! Memory per warm container: RSS added by containers of an already loaded
//! module, through the real `/init` and `/run` over HTTP.
//!
//! `cargo bench --bench memory` prints the figures.

use luge_benches::{Server, init_body, rss_bytes, wasm};
use serde_json::json;

const CONTAINERS: usize = 200;

fn main() {
    let server = Server::start();
    let init = init_body(&wasm("echo"));
    let run = json!({"value": {"k": "v"}});
    // The first container compiles and loads the module; warm it up.
    assert_eq!(server.post("/c0/init", &init).0, 200);
    for _ in 0..50 {
        assert_eq!(server.post("/c0/run", &run).0, 200);
    }
    let before = rss_bytes();
    for i in 1..=CONTAINERS {
        assert_eq!(server.post(&format!("/c{i}/init"), &init).0, 200);
    }
    let after_init = rss_bytes();
    for i in 1..=CONTAINERS {
        assert_eq!(server.post(&format!("/c{i}/run"), &run).0, 200);
    }
    let after_run = rss_bytes();
    let per = |from: u64, to: u64| (to.saturating_sub(from)) as f64 / CONTAINERS as f64 / 1024.0;
    println!("memory/containers: {CONTAINERS} extra containers of one loaded module (echo.wasm)");
    println!("memory/rss_before_kib: {}", before >> 10);
    println!(
        "memory/per_container_after_init_kib: {:.1}",
        per(before, after_init)
    );
    println!(
        "memory/per_container_after_one_run_kib: {:.1}",
        per(before, after_run)
    );
}
