//! `memory`: RSS per warm container and per running sandbox, and how many
//! fit in 1 GiB (WOW Table II, Faasm Table 3).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use luge_benches::{Server, init_body, proc, wasm};
use serde_json::json;

use crate::http_proxy::{LUGE_MARKER, luge_serve, luge_site, start};
use crate::{Report, Setup, variant};

pub(crate) fn memory(setup: &Setup) -> anyhow::Result<Report> {
    // A `luge serve` process of its own, read from outside: what this
    // process did before (other experiments' servers, pools and threads
    // torn down, the allocator's delayed purges) gives memory back while
    // the rows are read, and read in this process that made the
    // distinct-artifact row 0 KiB in CI three times.
    let dir = tempfile::tempdir()?;
    luge_site(dir.path(), "")?;
    let served = start(luge_serve(setup, dir.path(), "state", &[])?, LUGE_MARKER)?;
    let server = Server::attach(served.addr);
    let rss = || settled(|| proc::rss(served.child.id()));
    let init = init_body(&wasm("sleep"));
    assert_eq!(server.post("/warm0/init", &init).0, 200);
    assert_eq!(
        server.post("/warm0/run", &json!({"value": {"ms": 1}})).0,
        200
    );
    let containers = 200;
    let before = rss();
    for i in 1..=containers {
        assert_eq!(server.post(&format!("/warm{i}/init"), &init).0, 200);
    }
    let per_container = rss().saturating_sub(before) as f64 / containers as f64;

    // Containers that each bring their own module (a distinct content hash
    // of the same code, sealed ahead): what WOW's per-container figure
    // counts, the module's code and data included.
    let distinct = 50;
    let registry = setup.registry();
    let sleep = wasm("sleep");
    let artifacts = (0..distinct)
        .map(|i| registry.compile_sealed(&variant(&sleep, 1_000 + i)))
        .collect::<Result<Vec<_>, _>>()?;
    let before_distinct = rss();
    for (i, artifact) in artifacts.iter().enumerate() {
        assert_eq!(
            server
                .post(&format!("/own{i}/init"), &init_body(artifact))
                .0,
            200
        );
    }
    let per_module_container = rss().saturating_sub(before_distinct) as f64 / distinct as f64;
    let running = 64;
    let idle = rss();
    let peak = std::thread::scope(|s| {
        for i in 0..running {
            let server = &server;
            s.spawn(move || {
                server.post(
                    &format!("/warm{}/run", i + 1),
                    &json!({"value": {"ms": 800}}),
                )
            });
        }
        std::thread::sleep(Duration::from_millis(400));
        proc::rss(served.child.id())
    });
    let per_sandbox = peak.saturating_sub(idle) as f64 / running as f64;
    let gib = (1u64 << 30) as f64;
    // Wasmtime's alone: the other engines run no components.
    let kept = if setup.engine == "wasmtime" {
        format!("{:.1}", kept_after_compile(setup)? as f64 / 1024.0)
    } else {
        "-".to_owned()
    };
    let rows = vec![
        vec![
            "warm container with its own module (distinct artifact)".into(),
            format!("{:.1}", per_module_container / 1024.0),
            format!("{:.0}", gib / per_module_container.max(1.0)),
        ],
        vec![
            "warm container (init of an already loaded module)".into(),
            format!("{:.1}", per_container / 1024.0),
            format!("{:.0}", gib / per_container.max(1.0)),
        ],
        vec![
            format!("running sandbox ({running} sleeping at once)"),
            format!("{:.1}", per_sandbox / 1024.0),
            format!("{:.0}", gib / per_sandbox.max(1.0)),
        ],
        vec![
            "kept after a compile (a server that compiled the wasi:http component, less one that loaded it compiled)".into(),
            kept,
            "-".into(),
        ],
    ];
    Ok(Report {
        name: "memory",
        title: "Memory per container and per running sandbox (WOW Table II, Faasm Table 3)".into(),
        columns: vec!["what", "RSS KiB each", "how many fit in 1 GiB"],
        rows,
        x_desc: "",
        y_desc: "",
        series: Vec::new(),
        notes: format!(
            "`sleep.wasm` (Rust) on one `luge serve` process of its own (this binary serving); its RSS (VmRSS), each reading once it holds still. {containers} extra containers of the loaded module; {distinct} containers each initialized from its own sealed artifact of the same code (a distinct content hash); then {running} of the first kind each running a 800 ms sleep at once (sampled after 400 ms). WOW Table II reports 2.9-6.3 MiB per container. Kept after a compile: two `luge serve` processes (this binary serving) of the `http-handler` component, each answering {KEPT_REQUESTS} requests, the first compiling it, the second loading what the first left in the compile cache; the difference of their anonymous resident memory (RssAnon), once it holds still: what a compile leaves in the process (Cranelift's contexts, the allocator's freed pages), 0 when it gives all back."
        ),
    })
}

/// Requests each server of [`kept_after_compile`] answers before it is
/// read: a few, so that what serving allocates is in both readings.
const KEPT_REQUESTS: usize = 20;

/// What compiling the `wasi:http` component leaves in a `luge serve`
/// process, in bytes: the anonymous resident memory of one that compiled
/// it less that of one that loaded the artifact the first one cached, each
/// after [`KEPT_REQUESTS`] requests. The allocator's freed pages that it
/// holds count, as they do for the kernel (`luge serve` gives them back
/// after a compile; docs/BENCHMARKS-ARCHIVE.md, "Luge on Kubernetes").
fn kept_after_compile(setup: &Setup) -> anyhow::Result<u64> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("handler.wasm"), wasm("http-handler"))?;
    luge_site(
        dir.path(),
        "[[routes]]\npath = \"/hello\"\nmodule = \"handler.wasm\"\n",
    )?;
    let mut anon = [0; 2];
    for (reading, state) in anon.iter_mut().zip(["compiled", "cached"]) {
        let served = start(luge_serve(setup, dir.path(), state, &[])?, LUGE_MARKER)?;
        for _ in 0..KEPT_REQUESTS {
            anyhow::ensure!(
                answers(served.addr, "/hello")?,
                "the {state} server did not answer GET /hello with 200"
            );
        }
        *reading = settled(|| proc::rss_anon(served.child.id()));
    }
    Ok(anon[0].saturating_sub(anon[1]))
}

/// Whether `GET path` on `addr` is answered 200 (one connection, closed).
fn answers(addr: SocketAddr, path: &str) -> anyhow::Result<bool> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply)?;
    Ok(reply.starts_with(b"HTTP/1.1 200 "))
}

/// `read` once it holds still: read every 50 ms until two readings in a
/// row are within 64 KiB of each other (at most 2 s), so that what a
/// server is still giving back (a pool torn down, the allocator's delayed
/// purge) is not counted against the next step.
fn settled(read: impl Fn() -> u64) -> u64 {
    const STILL: u64 = 64 << 10;
    let mut last = read();
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(50));
        let now = read();
        if now.abs_diff(last) < STILL {
            return now;
        }
        last = now;
    }
    last
}
