//! `scaling`: requests per second against server cores (issue 17's table).
//!
//! The machine's cores are split: the lower half (at least one) runs the
//! client, the rest the servers, each server process confined to its first
//! `n` cores for `n` = 1, 2, 4, ... by its CPU affinity (so Luge's
//! `--workers n` pin one worker per core there, and `wasmtime serve` sizes
//! its runtime to `n`). Three servers, one after another at each `n`:
//! Luge with worker front ends (its default on Wasmtime), Luge with
//! `--front-end threads`, and `wasmtime serve -S cli`. Luge serves c-ping on
//! a route and the `actions/http` hello component; `wasmtime serve` the
//! component. Per point: req/s at 64 keep-alive connections (the client's
//! threads, one per client core), server CPU per request, and the p50 of
//! one connection.

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use luge_benches::load::{self, LoadReport, Target};
use luge_benches::wasm;

use crate::http_proxy::{
    HELLO, LUGE_MARKER, Served, free_port, luge_serve, luge_site, start, wasmtime_cli,
};
use crate::{Report, Setup};

/// Connections of the throughput point (the wrk runs used 64).
const CONNECTIONS: usize = 64;

/// The CPU set of cores `cores`.
fn cpu_set(cores: &[usize]) -> rustix::thread::CpuSet {
    let mut set = rustix::thread::CpuSet::new();
    for &core in cores {
        set.set(core);
    }
    set
}

/// The cores this process may run on, in order.
fn allowed_cores() -> Vec<usize> {
    let allowed = rustix::thread::sched_getaffinity(None).unwrap_or_else(|_| cpu_set(&[0]));
    (0..rustix::thread::CpuSet::MAX_CPU)
        .filter(|&c| allowed.is_set(c))
        .collect()
}

/// Confines `command`'s process (and every thread it starts) to `cores`.
fn confine(command: &mut Command, cores: &[usize]) {
    let set = cpu_set(cores);
    // SAFETY: the closure runs in the child between fork and exec, where
    // only async-signal-safe calls are allowed; it makes one system call
    // (sched_setaffinity) on a set built before the fork, and allocates
    // nothing.
    unsafe {
        command.pre_exec(move || {
            rustix::thread::sched_setaffinity(None, &set).map_err(std::io::Error::from)
        });
    }
}

/// `connections` spread over one client thread per core of `client`, each
/// pinned to its core; the reports merged.
fn drive(target: &Target, connections: usize, client: &[usize], window: Duration) -> LoadReport {
    let threads = client.len().min(connections).max(1);
    let warmup = Duration::from_millis(500);
    let parts: Vec<LoadReport> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let core = client[i % client.len()];
                let share = connections / threads + usize::from(i < connections % threads);
                scope.spawn(move || {
                    let _ = rustix::thread::sched_setaffinity(None, &cpu_set(&[core]));
                    load::closed_loop(target, share, warmup, window)
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let mut merged = LoadReport {
        window,
        ..LoadReport::default()
    };
    for part in parts {
        merged.ok += part.ok;
        merged.errors += part.errors;
        merged.latencies_us.extend(part.latencies_us);
    }
    merged.latencies_us.sort_unstable();
    merged
}

pub(crate) fn scaling(setup: &Setup, window: Duration) -> anyhow::Result<Report> {
    let cores = allowed_cores();
    anyhow::ensure!(
        cores.len() >= 2,
        "scaling needs two cores at least (one for the client)"
    );
    let (client, servers) = cores.split_at((cores.len() / 2).max(1));
    let counts: Vec<usize> = std::iter::successors(Some(1usize), |n| Some(n * 2))
        .take_while(|&n| n <= servers.len())
        .collect();

    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("ping.wasm"), wasm("c-ping"))?;
    let component = dir.path().join("handler.wasm");
    std::fs::write(&component, wasm("http-handler"))?;
    luge_site(
        dir.path(),
        "[[routes]]\npath = \"/ping\"\nmodule = \"ping.wasm\"\n\n[[routes]]\npath = \"/hello\"\nmodule = \"handler.wasm\"\n",
    )?;

    let luge = |n: usize, front_end: &str, on: &[usize]| -> anyhow::Result<Served> {
        let workers = n.to_string();
        let extra = ["--front-end", front_end, "--workers", &workers];
        let mut luge = luge_serve(setup, dir.path(), &format!("state-{front_end}-{n}"), &extra)?;
        confine(&mut luge, on);
        start(luge, LUGE_MARKER)
    };
    let wasmtime = |on: &[usize]| -> anyhow::Result<Served> {
        let mut wasmtime = Command::new(wasmtime_cli()?);
        wasmtime
            .args(["serve", "-S", "cli", "--addr"])
            .arg(format!("127.0.0.1:{}", free_port()?))
            .arg(&component);
        confine(&mut wasmtime, on);
        start(wasmtime, "Serving HTTP on ")
    };

    let (mut rows, mut series) = (Vec::new(), Vec::<(String, Vec<(f64, f64)>)>::new());
    let mut point = |name: &str, n: usize, served: &Served, path: &str, expect: Option<usize>| {
        let target = Target {
            addr: served.addr,
            method: hyper::Method::GET,
            path: path.to_owned(),
            body: bytes::Bytes::new(),
            expect_len: expect,
        };
        let (cpu, tlb) = (served.cpu(), load::tlb_shootdowns());
        let loaded = drive(&target, CONNECTIONS, client, window);
        let (cpu, tlb) = (
            served.cpu().saturating_sub(cpu),
            (tlb, load::tlb_shootdowns()),
        );
        let single = drive(&target, 1, client, window / 2);
        let per_request_us = cpu.as_secs_f64() * 1e6 / loaded.ok.max(1) as f64;
        rows.push(vec![
            name.to_owned(),
            n.to_string(),
            format!("{:.0}", loaded.throughput()),
            format!("{:.0}", loaded.throughput() / n as f64),
            format!("{per_request_us:.1}"),
            load::shootdowns_per_request(tlb.0, tlb.1, loaded.ok),
            single.percentile_us(50.0).to_string(),
            (loaded.errors + single.errors).to_string(),
        ]);
        match series.iter_mut().find(|(s, _)| s == name) {
            Some((_, points)) => points.push((n as f64, loaded.throughput())),
            None => series.push((name.to_owned(), vec![(n as f64, loaded.throughput())])),
        }
    };
    for &n in &counts {
        let on = &servers[..n];
        for front_end in ["workers", "threads"] {
            let served = luge(n, front_end, on)?;
            point(
                &format!("luge --front-end {front_end}, c-ping"),
                n,
                &served,
                "/ping",
                None,
            );
            point(
                &format!("luge --front-end {front_end}, component"),
                n,
                &served,
                "/hello",
                Some(HELLO.len()),
            );
        }
        let served = wasmtime(on)?;
        point(
            "wasmtime serve, component",
            n,
            &served,
            "/hello",
            Some(HELLO.len()),
        );
    }
    Ok(Report {
        name: "scaling",
        title: "Requests per second against server cores".into(),
        columns: vec![
            "server, workload",
            "cores",
            "req/s (64 conns)",
            "req/s per core",
            "server CPU µs/request",
            "TLB shootdowns/request",
            "p50 µs (1 conn)",
            "errors",
        ],
        rows,
        x_desc: "server cores",
        y_desc: "requests per second (64 connections)",
        series,
        notes: format!(
            "Client on cores {client:?} ({} threads, pinned, closed loop, keep-alive); each server confined to its first n of cores {servers:?} by CPU affinity, Luge with `--workers n`. c-ping on a `[[routes]]` route; the component is `actions/http` (hello path) on a route of Luge and under `wasmtime serve -S cli`. {} ms per throughput point and half that for the one-connection p50, after 500 ms of warm-up; server CPU from /proc/PID/stat (10 ms ticks).",
            client.len().min(CONNECTIONS),
            window.as_millis()
        ),
    })
}
