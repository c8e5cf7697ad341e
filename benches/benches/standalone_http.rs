//! Sledge's Fig. 6 and 7 on this machine: a ping function at concurrency
//! 1-100, and an echo function with 1 KB-1 MB bodies, served by Luge's
//! standalone host, against the same C source compiled natively and run
//! process-per-request (a spawn per request, as Nuclio's shell runtime and
//! OpenWhisk's blackbox do), measured in the same run.
//!
//! `cargo bench -p luge-benches --bench standalone_http` prints a markdown
//! table and writes target/experiments/standalone_http.csv.
//! `LUGE_BENCH_WINDOW_MS` sets each point's measured window (default 2000).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use luge_benches::Server;
use luge_benches::load::{self, LoadReport, Target};
use luge_testkit::native_example;

/// The process-per-request baseline: a hyper server that spawns the native
/// binary of the route for every request, body on stdin, stdout back.
fn start_process_server(routes: HashMap<String, PathBuf>) -> SocketAddr {
    let routes = Arc::new(routes);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Two workers, like the front end of the Luge server beside it.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            tx.send(listener.local_addr().expect("addr")).expect("send");
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let routes = Arc::clone(&routes);
                tokio::spawn(async move {
                    let service =
                        service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                            let binary = routes.get(request.uri().path()).cloned();
                            async move {
                                let body = request
                                    .into_body()
                                    .collect()
                                    .await
                                    .map(|b| b.to_bytes())
                                    .unwrap_or_default();
                                let (status, out) = match binary {
                                    Some(binary) => spawn_once(&binary, body).await,
                                    None => (404, Vec::new()),
                                };
                                let mut response =
                                    hyper::Response::new(Full::new(Bytes::from(out)));
                                *response.status_mut() =
                                    hyper::StatusCode::from_u16(status).expect("status");
                                Ok::<_, std::convert::Infallible>(response)
                            }
                        });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    });
    rx.recv().expect("process server started")
}

async fn spawn_once(binary: &PathBuf, body: Bytes) -> (u16, Vec<u8>) {
    use tokio::io::AsyncWriteExt;
    let child = tokio::process::Command::new(binary)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn();
    let Ok(mut child) = child else {
        return (500, Vec::new());
    };
    // Feed stdin while stdout is read: an echo of a large body would fill
    // both pipes otherwise.
    if let Some(mut stdin) = child.stdin.take() {
        tokio::spawn(async move {
            let _ = stdin.write_all(&body).await;
        });
    }
    match child.wait_with_output().await {
        Ok(output) if output.status.success() => (200, output.stdout),
        _ => (500, Vec::new()),
    }
}

struct Row {
    experiment: &'static str,
    server: &'static str,
    concurrency: usize,
    body_bytes: usize,
    report: LoadReport,
}

fn main() {
    let window = Duration::from_millis(
        std::env::var("LUGE_BENCH_WINDOW_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2000),
    );
    let warmup = Duration::from_millis(500);

    let dir = tempfile::tempdir().expect("tempdir");
    for name in ["c-ping", "c-echo"] {
        std::fs::write(
            dir.path().join(format!("{name}.wasm")),
            luge_benches::wasm(name),
        )
        .expect("module");
    }
    let config = dir.path().join("luge.toml");
    std::fs::write(
        &config,
        "[[routes]]\npath = \"/ping\"\nmodule = \"c-ping.wasm\"\n\
         [[routes]]\npath = \"/echo\"\nmodule = \"c-echo.wasm\"\n\
         content_type = \"application/octet-stream\"\n",
    )
    .expect("config");
    let luge = Server::start_with(&["--config", config.to_str().expect("utf-8 path")]);
    let process = start_process_server(HashMap::from([
        ("/ping".to_owned(), native_example("c-ping")),
        ("/echo".to_owned(), native_example("c-echo")),
    ]));
    let servers = [("luge", luge.addr()), ("process", process)];

    let mut rows = Vec::new();
    let run = |addr, path: &str, body: Bytes, expect_len, concurrency| {
        let target = Target {
            addr,
            method: hyper::Method::POST,
            path: path.to_owned(),
            body,
            expect_len: Some(expect_len),
            headers: Vec::new(),
        };
        load::closed_loop(&target, concurrency, warmup, window)
    };
    for concurrency in [1, 10, 25, 50, 100] {
        for (server, addr) in servers {
            let report = run(addr, "/ping", Bytes::new(), 5, concurrency);
            eprintln!(
                "ping c={concurrency} {server}: {:.0} req/s",
                report.throughput()
            );
            rows.push(Row {
                experiment: "ping",
                server,
                concurrency,
                body_bytes: 0,
                report,
            });
        }
    }
    let concurrency = 10;
    for size in [1 << 10, 10 << 10, 100 << 10, 1 << 20] {
        let body: Bytes = (0..size).map(|i: usize| (i % 251) as u8).collect();
        for (server, addr) in servers {
            let report = run(addr, "/echo", body.clone(), size, concurrency);
            eprintln!("echo {size} B {server}: {:.0} req/s", report.throughput());
            rows.push(Row {
                experiment: "echo",
                server,
                concurrency,
                body_bytes: size,
                report,
            });
        }
    }

    let mut csv = String::from(
        "experiment,server,concurrency,body_bytes,ok,errors,throughput_rps,p50_us,p99_us\n",
    );
    for r in &rows {
        csv.push_str(&format!(
            "{},{},{},{},{},{},{:.1},{},{}\n",
            r.experiment,
            r.server,
            r.concurrency,
            r.body_bytes,
            r.report.ok,
            r.report.errors,
            r.report.throughput(),
            r.report.percentile_us(50.0),
            r.report.percentile_us(99.0)
        ));
    }
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/experiments");
    std::fs::create_dir_all(&out).expect("results dir");
    std::fs::write(out.join("standalone_http.csv"), csv).expect("csv");

    println!(
        "| experiment | concurrency | body | luge req/s | luge p50 / p99 µs | process req/s | process p50 / p99 µs | luge / process | errors |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for pair in rows.chunks(2) {
        let (l, p) = (&pair[0].report, &pair[1].report);
        println!(
            "| {} | {} | {} | {:.0} | {} / {} | {:.0} | {} / {} | {:.1}x | {} / {} |",
            pair[0].experiment,
            pair[0].concurrency,
            pair[0].body_bytes,
            l.throughput(),
            l.percentile_us(50.0),
            l.percentile_us(99.0),
            p.throughput(),
            p.percentile_us(50.0),
            p.percentile_us(99.0),
            l.throughput() / p.throughput().max(f64::MIN_POSITIVE),
            l.errors,
            p.errors,
        );
    }
}
