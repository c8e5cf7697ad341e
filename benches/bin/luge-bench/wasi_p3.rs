//! `wasi-p3`: WASI 0.3 and a Spin app (issue 28).
//!
//! 1. The same WASI 0.3 `wasi:http` service (`actions/spin/http3`, its
//!    hello path, a body written by a task after `handle` returned) served
//!    by Luge (a fresh instance per request, and on a route that opts into
//!    reuse with `wasmtime serve`'s defaults: `reuse = 128`,
//!    `reuse_concurrent = 16`) and by `wasmtime serve` 49 (`-S p3`, which
//!    reuses a 0.3 instance for up to 128 requests, 16 at once), same run, at 1, 16 and 64 connections: req/s, p50/p99 and the
//!    server's CPU per request.
//! 2. The Spin app (`actions/spin`, spin-sdk 7) on Luge via `--spin`: a
//!    `spin:key-value` read of a 100-byte value on the local tier and on
//!    Redis (a `global:` store), and a `wasi:keyvalue` atomic increment,
//!    at 1 and 16 connections: p50/p99 and req/s. Needs `redis-server`.

use std::process::Command;
use std::time::Duration;

use luge_benches::load::{self, Target};
use luge_benches::wasm;

use crate::http_proxy::{
    LUGE_MARKER, Served, free_port, load_columns, luge_serve, luge_site, measure, start,
    wasmtime_cli, wasmtime_version,
};
use crate::state::redis;
use crate::{Report, Setup};

/// What the 0.3 service's hello path answers.
const HELLO: &str = "hello from a wasi:http@0.3 component\n";

/// The Spin app's manifest for the benchmark: the repository's, with a
/// Redis-tier store granted too.
const MANIFEST: &str = r#"spin_manifest_version = 2
[application]
name = "bench"
[[trigger.http]]
route = "/..."
component = "app"
[component.app]
source = "spin-app.wasm"
key_value_stores = ["default", "global:default"]
"#;

pub(crate) fn wasi_p3(setup: &Setup, window: Duration) -> anyhow::Result<Report> {
    let dir = tempfile::tempdir()?;
    let component = dir.path().join("http3.wasm");
    std::fs::write(&component, wasm("http3"))?;
    std::fs::write(dir.path().join("spin-app.wasm"), wasm("spin-app"))?;
    std::fs::write(dir.path().join("spin.toml"), MANIFEST)?;
    luge_site(
        dir.path(),
        "[[routes]]\npath = \"/hello\"\nmodule = \"http3.wasm\"\n\n\
         [[routes]]\npath = \"/reused\"\nmodule = \"http3.wasm\"\nreuse = 128\n\
         reuse_concurrent = 16\n",
    )?;
    let (_redis, redis_port) = redis()?;
    let manifest = dir.path().join("spin.toml");
    let redis_url = format!("redis://127.0.0.1:{redis_port}/");
    let luge = start(
        luge_serve(
            setup,
            dir.path(),
            "state",
            &[
                "--spin",
                manifest.to_str().unwrap_or_default(),
                "--state-url",
                &redis_url,
            ],
        )?,
        LUGE_MARKER,
    )?;
    let port = free_port()?;
    let mut wasmtime = Command::new(wasmtime_cli()?);
    wasmtime
        .args([
            "serve",
            "-S",
            "cli",
            "-S",
            "p3",
            "-W",
            "component-model-async",
            "--addr",
        ])
        .arg(format!("127.0.0.1:{port}"))
        .arg(&component);
    let wasmtime = start(wasmtime, "Serving HTTP on ")?;

    let mut rows = Vec::new();
    let mut series = Vec::new();
    let servers = [
        ("luge (fresh instance per request)", &luge, "/hello"),
        ("luge (reuse = 128, 16 at once)", &luge, "/reused"),
        ("wasmtime serve -S p3 (instance reuse)", &wasmtime, "/hello"),
    ];
    for (name, served, path) in servers {
        let mut rates = Vec::new();
        for connections in [1, 16, 64] {
            let target = Target {
                addr: served.addr,
                method: hyper::Method::GET,
                path: path.to_owned(),
                body: bytes::Bytes::new(),
                expect_len: Some(HELLO.len()),
                headers: Vec::new(),
            };
            let (rate, row) = measure(served, &target, connections, window);
            rates.push((connections as f64, rate));
            rows.push([vec![format!("{name}: GET hello")], row].concat());
        }
        series.push((name.to_owned(), rates));
    }

    rows.extend(spin_app(&luge, window)?);
    Ok(Report {
        name: "wasi-p3",
        title:
            "A WASI 0.3 service on Luge and on `wasmtime serve`; a Spin app's key-value requests"
                .into(),
        columns: load_columns("server: request"),
        rows,
        x_desc: "connections",
        y_desc: "requests per second",
        series,
        notes: format!(
            "`actions/spin/http3` (wasip3 0.7.1; its hello path answers 38 bytes from a spawned task) on `luge serve` (this build, a process of its own: a fresh instance per request, and a second route of the same component with `reuse = 128`, `reuse_concurrent = 16`) and on `wasmtime serve -S cli -S p3 -W component-model-async` ({}, whose default reuses a 0.3 instance for up to 128 requests, 16 at once), both on 127.0.0.1 in the same run; then `actions/spin` (spin-sdk 7) under `luge serve --spin` with a local state store and a `redis-server` on loopback: a 100-byte value read through spin:key-value, and `wasi:keyvalue/atomics.increment` (a compare-and-swap on the local tier). Closed-loop keep-alive client on one thread of this process, {} ms per point after a 500 ms warm-up; server CPU from /proc/PID/stat (10 ms ticks).",
            wasmtime_version()?,
            window.as_millis()
        ),
    })
}

/// The Spin app's key-value requests on `luge`, `window` each: a value
/// stored in each tier first, then reads of it and increments.
fn spin_app(luge: &Served, window: Duration) -> anyhow::Result<Vec<Vec<String>>> {
    let mut rows = Vec::new();
    // The Spin app: the values first, then reads and increments.
    let value = "v".repeat(100);
    for store in ["default", "global:default"] {
        let target = Target {
            addr: luge.addr,
            method: hyper::Method::PUT,
            path: format!("/kv/bench?store={store}"),
            body: bytes::Bytes::from(value.clone()),
            expect_len: None,
            headers: Vec::new(),
        };
        // One request, waited for: a 50 ms load window once held it, and a
        // debug build's first answer (the Spin app's cold start) took 42-56 ms.
        match load::once(&target, Duration::from_secs(30)) {
            Some((status, _)) if status == hyper::StatusCode::OK => {}
            Some((status, body)) => anyhow::bail!(
                "the Spin app did not store into {store}: {status} {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ),
            None => anyhow::bail!("the Spin app did not store into {store}: no answer in 30 s"),
        }
    }
    let spin_cases = [
        (
            "Spin app: spin:key-value get, local tier",
            hyper::Method::GET,
            "/kv/bench",
            Some(value.len()),
        ),
        (
            "Spin app: spin:key-value get, Redis tier",
            hyper::Method::GET,
            "/kv/bench?store=global:default",
            Some(value.len()),
        ),
        (
            "Spin app: wasi:keyvalue increment, local tier",
            hyper::Method::POST,
            "/count",
            None,
        ),
    ];
    for (name, method, path, expect_len) in spin_cases {
        for connections in [1, 16] {
            let target = Target {
                addr: luge.addr,
                method: method.clone(),
                path: path.to_owned(),
                body: bytes::Bytes::new(),
                expect_len,
                headers: Vec::new(),
            };
            let (_, row) = measure(luge, &target, connections, window);
            rows.push([vec![name.to_owned()], row].concat());
        }
    }
    Ok(rows)
}
