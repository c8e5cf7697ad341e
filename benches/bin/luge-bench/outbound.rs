//! `outbound`: what one outgoing request from a component costs. The same
//! `wasi:http` component (`actions/http`, its `fetch` path: one GET to
//! the URL in `x-fetch`, the answer relayed) on Luge and on `wasmtime
//! serve -S cli -S http`, at one connection: to a plain HTTP upstream on
//! both, and to an HTTPS upstream (a private CA made here, HTTP/2 by
//! ALPN, and HTTP/1.1) on Luge; its hello path on both, for the cost of the
//! request itself. Upstreams run in this process on 127.0.0.1.
//!
//! `wasmtime serve` trusts only the webpki roots compiled into it, so it
//! cannot reach an HTTPS server with a private CA: the HTTPS rows are
//! Luge's alone, and its cost is read against Luge's own plain row.

use std::time::Duration;

use hyper::header::{HeaderName, HeaderValue};
use luge_benches::load::Target;
use luge_benches::wasm;
use luge_testkit::tls::{self, PrivateCa};

use crate::Report;
use crate::Setup;
use crate::http_proxy::{
    HELLO, LUGE_MARKER, Served, free_port, load_columns, luge_serve, luge_site, measure, start,
    wasmtime_cli, wasmtime_version,
};

/// What every upstream answers.
const UPSTREAM_BODY: &str = "upstream says hello";

/// `luge serve` (trusting `ca`, granted the `plain`, HTTP/2 and
/// HTTP/1.1 upstreams on their ports) and `wasmtime serve` of the
/// fetching handler, their files in `dir`.
fn servers(
    setup: &Setup,
    dir: &std::path::Path,
    ca: &PrivateCa,
    [plain, secure_h2, secure_h1]: [u16; 3],
) -> anyhow::Result<(Served, Served)> {
    let component = dir.join("handler.wasm");
    std::fs::write(&component, wasm("http-handler"))?;
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, &ca.pem)?;
    luge_site(
        dir,
        &format!(
            "[[routes]]\npath = \"/out/...\"\nmodule = \"handler.wasm\"\n\
             allowed_outbound_hosts = [\"http://127.0.0.1:{plain}\", \"https://localhost:{secure_h2}\", \"https://localhost:{secure_h1}\"]\n"
        ),
    )?;
    let ca = ca_file.to_string_lossy().into_owned();
    let luge = start(
        luge_serve(setup, dir, "state", &["--ca-file", &ca])?,
        LUGE_MARKER,
    )?;
    let port = free_port()?;
    let mut wasmtime = std::process::Command::new(wasmtime_cli()?);
    wasmtime
        .args(["serve", "-S", "cli", "-S", "http", "--addr"])
        .arg(format!("127.0.0.1:{port}"))
        .arg(&component);
    let wasmtime = start(wasmtime, "Serving HTTP on ")?;
    Ok((luge, wasmtime))
}

pub(crate) fn outbound(setup: &Setup, window: Duration) -> anyhow::Result<Report> {
    let ca = PrivateCa::new();
    let answer: tls::Answer = |_| UPSTREAM_BODY.to_owned();
    let plain = tls::serve(None, answer);
    let secure_h2 = tls::serve(
        Some(ca.server("localhost", false, false, &[b"h2", b"http/1.1"])),
        answer,
    );
    let secure_h1 = tls::serve(
        Some(ca.server("localhost", false, false, &[b"http/1.1"])),
        answer,
    );

    let dir = tempfile::tempdir()?;
    let (luge, wasmtime) = servers(setup, dir.path(), &ca, [plain, secure_h2, secure_h1])?;

    let fetch = |url: String| -> anyhow::Result<Vec<(HeaderName, HeaderValue)>> {
        Ok(vec![(
            HeaderName::from_static("x-fetch"),
            HeaderValue::from_str(&url)?,
        )])
    };
    let plain_url = format!("http://127.0.0.1:{plain}/");
    let cases = [
        (
            "luge",
            "hello (no outgoing request)",
            &luge,
            "/out/hello",
            Vec::new(),
            HELLO.len(),
        ),
        (
            "wasmtime serve",
            "hello (no outgoing request)",
            &wasmtime,
            "/out/hello",
            Vec::new(),
            HELLO.len(),
        ),
        (
            "luge",
            "http upstream",
            &luge,
            "/out/fetch",
            fetch(plain_url.clone())?,
            UPSTREAM_BODY.len(),
        ),
        (
            "wasmtime serve",
            "http upstream",
            &wasmtime,
            "/out/fetch",
            fetch(plain_url)?,
            UPSTREAM_BODY.len(),
        ),
        (
            "luge",
            "https upstream, HTTP/2",
            &luge,
            "/out/fetch",
            fetch(format!("https://localhost:{secure_h2}/"))?,
            UPSTREAM_BODY.len(),
        ),
        (
            "luge",
            "https upstream, HTTP/1.1",
            &luge,
            "/out/fetch",
            fetch(format!("https://localhost:{secure_h1}/"))?,
            UPSTREAM_BODY.len(),
        ),
    ];
    let mut columns = load_columns("server");
    columns.insert(1, "request");
    let mut rows = Vec::new();
    for (server, what, served, path, headers, len) in cases {
        let target = Target {
            addr: served.addr,
            method: hyper::Method::GET,
            path: path.to_owned(),
            body: bytes::Bytes::new(),
            expect_len: Some(len),
            headers,
        };
        let (_, row) = measure(served, &target, 1, window);
        rows.push([vec![server.to_owned(), what.to_owned()], row].concat());
    }
    Ok(Report {
        name: "outbound",
        title: "One outgoing request from a component, on Luge and on `wasmtime serve`".into(),
        columns,
        rows,
        x_desc: "",
        y_desc: "",
        series: Vec::new(),
        notes: format!(
            "`actions/http`'s fetch path (one GET through wasi:http's outgoing handler, the answer relayed) served by `luge serve` (this build, `--ca-file` holding a private CA made for the run) and by `wasmtime serve -S cli -S http` ({}), one closed-loop client connection, {} ms per point after a 500 ms warm-up; upstreams in the bench process on 127.0.0.1 (hyper; rustls for TLS, a certificate for localhost). Luge keeps the upstream connection alive between requests of the function; `wasmtime serve` opens one per request. `wasmtime serve` trusts only its built-in webpki roots, so it has no HTTPS row. Server CPU from /proc/PID/stat (10 ms ticks) over the window.",
            wasmtime_version()?,
            window.as_millis()
        ),
    })
}
